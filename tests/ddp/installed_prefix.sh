#!/usr/bin/env bash
# What a LibTorch trainer author does outside this tree, as README's
# "Outside this tree" says it: install Plexus into a prefix, move the prefix
# somewhere else, then
#   1. run the installed plexus-ddp-quickstart under the installed plexus-run,
#      with no LD_LIBRARY_PATH;
#   2. build samples/ddp_quickstart with CMake (find_package(Plexus), the
#      CMakeLists.txt in that folder, CMAKE_CXX_STANDARD 20 set as many
#      projects set it) and run it under plexus-run (tcp), mpirun (mpi) and
#      torchrun --no-python (the automatic backend);
#   3. build it with pkg-config plexus-ddp and LibTorch's flags, the README's
#      command line, and run it under plexus-run;
# and check that no installed ELF file names the build tree or a Python
# environment in its RPATH/RUNPATH. Every run must print the same losses.
#
#   installed_prefix.sh BUILD_DIR SOURCE_DIR PREFIX TORCH_ROOT [MPIRUN]
set -uo pipefail
build=$1 src=$2 prefix=$3 torch=$4 mpirun=${5:-}
for tool in cmake pkg-config readelf; do
  command -v $tool >/dev/null || { echo "skipped: $tool not found"; exit 77; }
done
tmp=$(mktemp -d /tmp/plexus-installed-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
out=$tmp/out.txt

# Install, then move the prefix: nothing may depend on where it was put.
meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/stage" >"$out" 2>&1 ||
  { cat "$out"; echo "FAILED: meson install"; exit 1; }
root=$tmp/moved/plexus
mkdir -p "$tmp/moved"
mv "$tmp/stage$prefix" "$root"
rm -rf "$tmp/stage"
echo "installed into $prefix under a destdir, moved to $root"
clean=(env -u LD_LIBRARY_PATH -u PLEXUS_PLUGIN_PATH -u PLEXUS_BACKEND
       PATH="$root/bin:/usr/bin:/bin" OMP_NUM_THREADS=1 PLEXUS_TIMEOUT=120)

# No installed ELF file may point into the build tree or a Python environment.
elfs=0
while IFS= read -r f; do
  head -c 4 "$f" | grep -q "ELF" || continue
  elfs=$((elfs + 1))
  paths=$(readelf -d "$f" | sed -n 's/.*(R[UN]*PATH).*\[\(.*\)\]/\1/p')
  case "$paths" in
    *"$build"* | *"$src"* | *site-packages* | *.venv* | *"$torch"*)
      echo "FAILED: ${f#"$root"/} has RUNPATH $paths"; failures=$((failures + 1)) ;;
    *) echo "  ${f#"$root"/}: ${paths:-no RUNPATH}" ;;
  esac
done < <(find "$root" -type f \( -name '*.so*' -o -perm -u+x \))
check "found the installed libraries and programs ($elfs ELF files)" test "$elfs" -ge 8

losses=()
run() {  # run LABEL COMMAND...: runs a 2-epoch quickstart, keeps its losses
  local label=$1; shift
  "$@" >"$out" 2>&1; local rc=$?
  tail -n 4 "$out"
  check "$label (exit $rc)" test $rc -eq 0
  local l
  l=$(grep -o "epoch [0-9]*: mean loss [0-9.]*" "$out" | sort -u | tr '\n' ' ')
  check "$label printed both epochs' losses" test "$(wc -w <<<"$l")" -eq 10
  losses+=("$l")
}

# 1. The installed program, under the installed launcher.
run "installed plexus-ddp-quickstart under the installed plexus-run -n 2 (tcp)" \
  "${clean[@]}" PLEXUS_BACKEND=tcp "$root/bin/plexus-run" -n 2 "$root/bin/plexus-ddp-quickstart" 2

# 2. CMake: find_package(Plexus REQUIRED COMPONENTS ddp), Plexus::ddp.
cp -r "$src/samples/ddp_quickstart" "$tmp/qs-src"
"${clean[@]}" cmake -S "$tmp/qs-src" -B "$tmp/qs-cmake" -DCMAKE_PREFIX_PATH="$root" \
  -DCMAKE_CXX_STANDARD=20 -DCMAKE_BUILD_TYPE=Release >"$out" 2>&1 &&
  "${clean[@]}" cmake --build "$tmp/qs-cmake" >>"$out" 2>&1; rc=$?
[ $rc -eq 0 ] || cat "$out"
check "CMake builds the quickstart against the moved prefix (exit $rc)" test $rc -eq 0
cmake_qs=$tmp/qs-cmake/plexus-ddp-quickstart
if [ -x "$cmake_qs" ]; then
  run "CMake-built quickstart under plexus-run -n 2 (tcp)" \
    "${clean[@]}" PLEXUS_BACKEND=tcp "$root/bin/plexus-run" -n 2 "$cmake_qs" 2
  if [ -n "$mpirun" ] && [ -n "$(find "$root" -name libplexus-mpi.so)" ]; then
    run "CMake-built quickstart under mpirun -np 2 (mpi)" \
      "${clean[@]}" PLEXUS_BACKEND=mpi bash "$src/tests/mpi/mpirun.sh" "$mpirun" 2 "$cmake_qs" 2
  else
    echo "not run: mpirun or the mpi backend is missing"
  fi
  torchrun=$src/.venv/bin/torchrun
  if [ -x "$torchrun" ]; then
    run "CMake-built quickstart under torchrun --no-python --standalone --nproc-per-node 2 (automatic backend)" \
      "${clean[@]}" "$torchrun" --no-python --nproc-per-node 2 --standalone "$cmake_qs" 2
  else
    echo "not run: no torchrun in $src/.venv"
  fi
fi

# 3. pkg-config plexus-ddp and LibTorch's flags, as README writes them.
pcdir=$(dirname "$(find "$root" -name plexus-ddp.pc | head -n 1)")
export PKG_CONFIG_PATH=$pcdir
T=$torch
# shellcheck disable=SC2046
"${clean[@]}" ${CXX:-c++} -std=c++20 -O1 "$src/samples/ddp_quickstart/main.cpp" -o "$tmp/qs-pc" \
  $(pkg-config --cflags --libs plexus-ddp) -Wl,-rpath,"$(pkg-config --variable=libdir plexus-ddp)" \
  -isystem "$T/include" -isystem "$T/include/torch/csrc/api/include" -D_GLIBCXX_USE_CXX11_ABI=1 \
  -L"$T/lib" -Wl,--no-as-needed -ltorch_cpu -lc10 -Wl,--as-needed -Wl,-rpath,"$T/lib" \
  >"$out" 2>&1; rc=$?
[ $rc -eq 0 ] || cat "$out"
check "pkg-config plexus-ddp builds the quickstart (exit $rc)" test $rc -eq 0
[ -x "$tmp/qs-pc" ] && run "pkg-config-built quickstart under plexus-run -n 2 (tcp)" \
  "${clean[@]}" PLEXUS_BACKEND=tcp "$root/bin/plexus-run" -n 2 "$tmp/qs-pc" 2

# Same data, same seed, same averaged gradients: the same losses everywhere.
printf '  %s\n' "${losses[@]}"
check "every run printed the same losses" \
  test "$(printf '%s\n' "${losses[@]}" | sort -u | wc -l)" -eq 1 -a -n "${losses[0]:-}"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
