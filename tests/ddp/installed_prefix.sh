#!/usr/bin/env bash
# What a LibTorch trainer author does outside this tree, as README's
# "Outside this tree" says it: install Plexus into a prefix, move the prefix
# somewhere else, then
#   1. run the installed plexus-ddp-quickstart under the installed plexus-run,
#      with no LD_LIBRARY_PATH and the torch Plexus was built with out of
#      reach, so that each of the installed wrapper's LibTorch lookups
#      (ddp/torch_exec.sh.in) is the only one that can succeed in turn:
#      PLEXUS_TORCH_LIB, then python3's torch; and with none that can, or with
#      a torch of another version, it must refuse (exit 127) and say why;
#   2. build samples/ddp_quickstart with CMake (find_package(Plexus), the
#      CMakeLists.txt in that folder, CMAKE_CXX_STANDARD 20 set as many
#      projects set it) and run it under plexus-run (tcp), mpirun (mpi) and
#      torchrun --no-python (the automatic backend);
#   3. build it with pkg-config plexus-ddp and LibTorch's flags, the README's
#      command line, and run it under plexus-run;
# and check that no installed ELF file names the build tree or a Python
# environment in its RPATH/RUNPATH, and no installed text file names the
# build tree, the source tree or the torch it was built with (but for the two
# deliberate fallbacks named below). Every run must print the same losses.
# mpirun and torchrun missing are failures, not skips: CI always has both.
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

# The wrapper's lookups can only be told apart where the torch Plexus was
# built with is gone, and the checkout's .venv must stay where it is: so the
# wrapper legs run in a private mount namespace that hides it. Root has one;
# anyone else may get one inside a user namespace.
ns=()
if unshare --mount true 2>/dev/null; then
  ns=(unshare --mount)
elif unshare --user --map-root-user --mount true 2>/dev/null; then
  ns=(unshare --user --map-root-user --mount)
fi

# Install, then move the prefix: nothing may depend on where it was put.
meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/stage" >"$out" 2>&1 ||
  { cat "$out"; echo "FAILED: meson install"; exit 1; }
root=$tmp/moved/plexus
mkdir -p "$tmp/moved"
mv "$tmp/stage$prefix" "$root"
rm -rf "$tmp/stage"
echo "installed into $prefix under a destdir, moved to $root"
clean=(env -u LD_LIBRARY_PATH -u PLEXUS_PLUGIN_PATH -u PLEXUS_BACKEND -u PLEXUS_TORCH_LIB
       PATH="$root/bin:/usr/bin:/bin" OMP_NUM_THREADS=1 PLEXUS_TIMEOUT=120)

# The Python environment the build's torch is in (the venv holding it), which
# the wrapper legs hide; a torch outside any venv: its site-packages.
env_dir=$torch
while [ "$env_dir" != / ] && [ ! -f "$env_dir/pyvenv.cfg" ]; do env_dir=$(dirname "$env_dir"); done
[ "$env_dir" = / ] && env_dir=$(dirname "$torch")

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

# Nor may an installed text file (script, .pc, CMake file, header, ...) name
# the build tree, the source tree or the build's Python environment, by any
# of their names. Two deliberate fallbacks do name the torch Plexus was built
# with, each used only while it is still there (docs/tools.md,
# docs/environment.md): the wrappers' second lookup (its torch/lib) and
# PlexusConfig.cmake's first find_package(Torch) hint (its share/cmake/Torch).
# Those exact paths are allowed in those files and nowhere else.
allowed_in() {  # allowed_in FILE: the one build-time path FILE may name
  case "${1#"$root"/}" in
    bin/plexus-ddp-quickstart | bin/plexus-trainer) echo "$torch/lib" ;;
    */cmake/Plexus/PlexusConfig.cmake) echo "$torch/share/cmake/Torch" ;;
  esac
}
build_paths=()  # most specific first, for the message
for p in "$torch" "$env_dir" "$build" "$src"; do
  build_paths+=("$p" "$(readlink -f "$p")")
done
texts=0
while IFS= read -r f; do
  grep -qI '' "$f" || continue  # binary (ELF, data) or empty
  texts=$((texts + 1))
  text=$(<"$f")
  allowed=$(allowed_in "$f")
  [ -n "$allowed" ] && text=${text//"$allowed"/}
  for p in "${build_paths[@]}"; do
    case "$text" in
      *"$p"*) echo "FAILED: ${f#"$root"/} names $p"; failures=$((failures + 1)); break ;;
    esac
  done
done < <(find "$root" -type f)
check "no installed text file names a build-time path but the allowed fallbacks ($texts text files)" \
  test "$texts" -ge 10

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
refused() {  # refused LABEL COMMAND...: COMMAND must exit 127, the wrapper's "no LibTorch"
  local label=$1; shift
  "$@" >"$out" 2>&1; local rc=$?
  sed 's/^/  | /' "$out" | head -n 8
  check "$label (exit $rc)" test $rc -eq 127
}
says() {  # says TEXT: the last command's output names TEXT
  check "  ... and says \"$1\"" grep -qF -- "$1" "$out"
}

# 1. The installed program, under the installed launcher, each LibTorch
#    lookup of its wrapper on its own.
wrapper=$root/bin/plexus-ddp-quickstart
built_lib=$(sed -n 's/^consider "the torch it was built with" "\(.*\)"$/\1/p' "$wrapper")
built_version=$(sed -n 's/^built_version=//p' "$wrapper")
check "the installed wrapper's second lookup is the build's torch ($built_lib, $built_version)" \
  test "$built_lib" = "$torch/lib" -a -n "$built_version"
if [ ${#ns[@]} -gt 0 ]; then
  # The build's environment, bind-mounted at $other (offered only where a leg
  # says so), then hidden under an empty tmpfs. The namespace's mounts are
  # private: nothing outside it sees either.
  other=$tmp/other-env
  other_torch=$other${torch#"$env_dir"}
  mkdir -p "$other"
  without_built_torch() {  # without_built_torch COMMAND...
    # shellcheck disable=SC2016  # $1, $2, $@ are the inner shell's
    "${ns[@]}" sh -c 'mount --bind "$1" "$2" && mount -t tmpfs -o size=1m plexus-hidden "$1" &&
      shift 2 && exec "$@"' sh "$env_dir" "$other" "$@"
  }
  check "the build's torch is out of reach (${ns[*]}, tmpfs over $env_dir)" \
    without_built_torch test ! -e "$built_lib/libtorch_cpu.so"
  check "  ... and offered at $other_torch" without_built_torch test -f "$other_torch/lib/libtorch_cpu.so"

  # A python3 without torch, whatever the machine's python3 has: no site-packages.
  mkdir -p "$tmp/no-torch"
  printf '#!/bin/sh\nexec %s -I -S "$@"\n' "$(command -v python3)" >"$tmp/no-torch/python3"
  # A python3 with the re-mounted torch: the venv's own (looked for where
  # $other is mounted from: out here $other is an empty folder), else one
  # given its site-packages.
  torch_python=$other/bin
  if [ ! -x "$env_dir/bin/python3" ]; then
    torch_python=$tmp/other-python
    mkdir -p "$torch_python"
    printf '#!/bin/sh\nPYTHONPATH=%s exec %s "$@"\n' "$other" "$(command -v python3)" >"$torch_python/python3"
  fi
  chmod +x "$tmp"/*/python3

  # The second lookup is gone and python3 has no torch: only PLEXUS_TORCH_LIB can run it.
  run "installed plexus-ddp-quickstart, LibTorch from PLEXUS_TORCH_LIB, under the installed plexus-run -n 2 (tcp)" \
    without_built_torch "${clean[@]}" PATH="$root/bin:$tmp/no-torch:/usr/bin:/bin" \
    PLEXUS_TORCH_LIB="$other_torch/lib" PLEXUS_BACKEND=tcp "$root/bin/plexus-run" -n 2 "$wrapper" 2
  # No PLEXUS_TORCH_LIB, the second lookup is gone: only python3's torch can.
  run "installed plexus-ddp-quickstart, LibTorch from python3's torch, under the installed plexus-run -n 2 (tcp)" \
    without_built_torch "${clean[@]}" PATH="$root/bin:$torch_python:/usr/bin:/bin" \
    PLEXUS_BACKEND=tcp "$root/bin/plexus-run" -n 2 "$wrapper" 2
  # None can: it refuses and names every place it looked.
  refused "installed plexus-ddp-quickstart with no LibTorch to find refuses" \
    without_built_torch "${clean[@]}" PATH="$root/bin:$tmp/no-torch:/usr/bin:/bin" "$wrapper" 2
  says "the torch it was built with: $built_lib has no libtorch_cpu.so"
  says "python3's torch: $tmp/no-torch/python3 has no torch package"
  # A LibTorch of another version: no stable C++ ABI, so it refuses that too.
  fake=$tmp/fake-torch
  mkdir -p "$fake/lib"
  : >"$fake/lib/libtorch_cpu.so"
  echo "__version__ = '0.0.1+fake'" >"$fake/version.py"
  refused "installed plexus-ddp-quickstart with PLEXUS_TORCH_LIB at torch 0.0.1 refuses" \
    without_built_torch "${clean[@]}" PLEXUS_TORCH_LIB="$fake/lib" "$wrapper" 2
  says "PLEXUS_TORCH_LIB: $fake/lib has torch 0.0.1, not $built_version"
else
  # Still run it, though it may only have found the build's torch; the test
  # ends as skipped (below) unless something else failed.
  run "installed plexus-ddp-quickstart under the installed plexus-run -n 2 (tcp), LibTorch lookups not told apart" \
    "${clean[@]}" PLEXUS_BACKEND=tcp "$root/bin/plexus-run" -n 2 "$wrapper" 2
fi

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
  # Meson passes mpirun when it found one; with the mpi backend built (CI
  # builds it, and installs mpirun with it) a missing mpirun is a failure.
  if [ -z "$(find "$root" -name libplexus-mpi.so)" ]; then
    echo "not run: the mpi backend was not built"
  elif [ -z "$mpirun" ]; then
    echo "FAILED: the mpi backend is installed but no mpirun was found"; failures=$((failures + 1))
  else
    run "CMake-built quickstart under mpirun -np 2 (mpi)" \
      "${clean[@]}" PLEXUS_BACKEND=mpi bash "$src/tests/mpi/mpirun.sh" "$mpirun" 2 "$cmake_qs" 2
  fi
  # torchrun comes with torch (scripts/install-torch.sh puts both in .venv).
  torchrun=$env_dir/bin/torchrun
  [ -x "$torchrun" ] || torchrun=$(command -v torchrun || echo "$torchrun")
  if [ -x "$torchrun" ]; then
    run "CMake-built quickstart under torchrun --no-python --standalone --nproc-per-node 2 (automatic backend)" \
      "${clean[@]}" "$torchrun" --no-python --nproc-per-node 2 --standalone "$cmake_qs" 2
  else
    echo "FAILED: no torchrun beside the build's torch ($torchrun) nor on PATH"; failures=$((failures + 1))
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
[ "$failures" -eq 0 ] || exit 1
if [ ${#ns[@]} -eq 0 ]; then
  echo "skipped: the installed wrapper's LibTorch lookups were not checked one by one: neither" \
    "unshare --mount nor unshare --user --mount is permitted here, so the torch Plexus was built" \
    "with could not be hidden"
  exit 77
fi
