#!/usr/bin/env bash
# The vendor path, end to end, as a stranger would walk it: install Plexus
# into a fresh prefix, check the installed tools run without LD_LIBRARY_PATH
# and never look at this build tree, build samples/vendor-plugin out of tree
# from that prefix alone (pkg-config plexus-backend / plexus-kit), and run
# the installed plexus-conformance on it and on the installed backends.
#   vendor_sdk_test.sh BUILD_DIR SOURCE_DIR PREFIX LIBDIR
set -uo pipefail
build=$1 src=$2 prefix=$3 libdir=$4
for tool in meson ninja pkg-config nm; do
  command -v $tool >/dev/null || { echo "skipped: $tool not found"; exit 77; }
done
tmp=$(mktemp -d /tmp/plexus-sdk-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0 passes=0
check() {  # check DESCRIPTION CONDITION...
  local what=$1; shift
  if "$@"; then passes=$((passes + 1)); echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
out=$tmp/out.txt

# 1. Install into an empty prefix (a relocated copy of $prefix: the tree must
#    work wherever it is put).
meson install -C "$build" --no-rebuild --quiet --destdir "$tmp/stage" >"$out" 2>&1
check "meson install into a fresh prefix" test $? -eq 0 || { cat "$out"; exit 1; }
root=$tmp/stage$prefix
# Nothing of the build tree may leak in: run with a clean environment.
clean=(env -u LD_LIBRARY_PATH -u PLEXUS_PLUGIN_PATH -u PLEXUS_BACKEND PATH="$root/bin:/usr/bin:/bin")

# 2. Installed tools run without LD_LIBRARY_PATH and search only the prefix.
"${clean[@]}" "$root/bin/plexus-info" >"$out" 2>&1; rc=$?
cat "$out"
check "installed plexus-info runs without LD_LIBRARY_PATH (exit $rc)" test $rc -eq 0
check "it searches the installed plugin directory" grep -qF "$root/$libdir/plexus" "$out"
check "it does not search the build tree" bash -c "! grep -q 'build tree' '$out'"
check "it finds the installed tcp plugin" grep -q "^tcp$" "$out"
for f in include/plexus/backend.h include/plexus/algos/transport.hpp "$libdir/libplexus-algos.a" \
         include/plexus/kit/table.hpp include/plexus/kit/op_queue.hpp "$libdir/libplexus-kit.a" \
         "$libdir/pkgconfig/plexus-kit.pc" \
         "$libdir/pkgconfig/plexus.pc" "$libdir/pkgconfig/plexus-backend.pc" \
         "$libdir/pkgconfig/plexus-algos.pc" share/plexus/plexus-backend.map \
         share/doc/plexus/writing-a-backend.md bin/plexus-conformance; do
  check "installed $f" test -e "$root/$f"
done

# 3. What a backend author gets from pkg-config: the header, the export map,
#    the plugin directory; never libplexus.
export PKG_CONFIG_PATH=$root/$libdir/pkgconfig
libs=$(pkg-config --libs plexus-backend) cflags=$(pkg-config --cflags plexus-backend)
echo "pkg-config plexus-backend: $cflags $libs"
check "plexus-backend does not link libplexus" bash -c "! grep -q -- '-lplexus\\b' <<<'$libs'"
check "plexus-backend exports only the entry (version script)" grep -q -- "--version-script=" <<<"$libs"
check "plexus-backend's plugindir is in the prefix" \
  test "$(pkg-config --variable=plugindir plexus-backend)" -ef "$root/$libdir/plexus"

# 4. Build the example backend out of tree from the prefix alone.
cp -r "$src/samples/vendor-plugin" "$tmp/vendor-plugin"
"${clean[@]}" PKG_CONFIG_PATH="$PKG_CONFIG_PATH" meson setup "$tmp/uds" "$tmp/vendor-plugin" \
  >"$out" 2>&1 && ninja -C "$tmp/uds" >>"$out" 2>&1; rc=$?
check "samples/vendor-plugin builds against the prefix (exit $rc)" test $rc -eq 0 || { cat "$out"; exit 1; }
plugin=$tmp/uds/libplexus-uds.so
syms=$(nm -D --defined-only "$plugin" | awk '{print $3}')
echo "libplexus-uds.so exports: $syms"
check "the example exports only plexus_backend_get_v1" test "$syms" = plexus_backend_get_v1
check "the example does not link libplexus" bash -c "! ldd '$plugin' | grep -q 'libplexus.so'"

# 5. The installed conformance suite passes the example and the installed backends.
for n in 2 3; do
  "${clean[@]}" PLEXUS_TIMEOUT=60 timeout 600 "$root/bin/plexus-conformance" --backend "$plugin" -n $n \
    >"$out" 2>&1; rc=$?
  tail -25 "$out"
  check "plexus-conformance passes the example at $n ranks (exit $rc)" test $rc -eq 0
done
"${clean[@]}" PLEXUS_TIMEOUT=60 timeout 600 "$root/bin/plexus-conformance" --backend tcp -n 3 \
  >"$out" 2>&1; rc=$?
tail -25 "$out"
check "plexus-conformance passes the installed tcp backend (exit $rc)" test $rc -eq 0
# The installed mpi backend, under Open MPI's mpirun (tests/mpi/mpirun.sh:
# root, oversubscription, the store's address), letting the dead-peer
# check's rank exit without MPI_Finalize.
if [ -e "$root/$libdir/plexus/libplexus-mpi.so" ]; then
  if mpirun=$(command -v mpirun); then
    "${clean[@]}" PLEXUS_TIMEOUT=60 OMPI_MCA_orte_allowed_exit_without_sync=1 timeout 900 \
      bash "$src/tests/mpi/mpirun.sh" "$mpirun" 2 "$root/bin/plexus-conformance" --backend mpi \
      >"$out" 2>&1; rc=$?
    tail -25 "$out"
    if [ $rc -eq 77 ]; then
      echo "not checked: mpirun cannot start processes here (see above)"
    else
      check "plexus-conformance passes the installed mpi backend under mpirun (exit $rc)" test $rc -eq 0
    fi
  else
    echo "not checked: the mpi backend is installed but mpirun is not on PATH"
  fi
fi

# 6. PyTorch gets the example for free: torch.distributed's "plexus" backend
#    (plexus_torch, from this build) runs every c10d operation on it, with no
#    code from the vendor for PyTorch.
if [ -x "$src/.venv/bin/torchrun" ] && [ -d "$build/plexus_torch/python/plexus_torch" ]; then
  "${clean[@]}" PYTHONPATH="$build/plexus_torch/python" PLEXUS_BACKEND="$plugin" PLEXUS_TIMEOUT=60 \
    OMP_NUM_THREADS=1 timeout 600 "$src/.venv/bin/torchrun" --standalone --nproc-per-node 2 \
    "$src/tests/torch/ops_check.py" >"$out" 2>&1; rc=$?
  grep -E "passed|FAIL|Error" "$out" | tail -12
  check "dist.init_process_group(\"plexus\") runs every c10d op on the example (exit $rc)" \
    test $rc -eq 0
else
  echo "not checked: torch.distributed on the example (no .venv torchrun or plexus_torch build)"
fi

echo "vendor sdk: $passes passed, $failures failed"
[ $failures -eq 0 ]
