#!/usr/bin/env bash
# ThreadSanitizer run of the backend kit and the backends built on it: a
# separate build (build-tsan/, -Db_sanitize=thread) of libplexus, plexus-run,
# the kit, tcp and ucx, then the kit's queue test and the collective battery
# (tests/collectives_check) on tcp and ucx at 2 and 3 ranks, groups and the 1.2
# collectives (tests/groups_check) at 3 ranks, and, when samples/vendor-plugin
# can be built against an install of that tree, the uds sample under
# plexus-conformance. Any report fails the run (exit 66). Slow (TSan runs the
# battery 5-15x slower) and not part of meson test (a second build). CI runs the
# kit's queue test under TSan (suite kit).
#
#   scripts/tsan.sh            # everything
#   scripts/tsan.sh tcp        # one of: kit, tcp, ucx, uds
set -uo pipefail
cd "$(dirname "$0")/.."
only=${1:-}
build=build-tsan
if [ ! -f $build/build.ninja ]; then
  meson setup $build -Db_sanitize=thread -Dbuildtype=debugoptimized -Dtorch=disabled \
    -Dnccl=disabled -Dmpi=disabled >/dev/null || exit 1
fi
targets=(tests/kit/kit_op_queue_test tests/signal_watcher_test tests/collectives_check tests/groups_check
         tools/plexus-run/plexus-run
         tools/plexus-conformance/plexus-conformance backends/tcp/libplexus-tcp.so)
[ -f $build/backends/ucx/build.ninja ] || true
if grep -q "libplexus-ucx.so" $build/build.ninja; then targets+=(backends/ucx/libplexus-ucx.so); fi
ninja -C $build "${targets[@]}" >/dev/null || exit 1

# second_deadlock_stack: lock-order reports name both stacks.
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export PLEXUS_TIMEOUT=300  # TSan runs a rank 5-15x slower
failures=0 runs=0
run() {  # run NAME COMMAND...
  local name=$1; shift
  [ -n "$only" ] && [[ "$name" != "$only"* ]] && return
  runs=$((runs + 1))
  local log start
  log=$(mktemp)
  start=$(date +%s)
  "$@" >"$log" 2>&1; local rc=$?
  local reports
  reports=$(grep -c "WARNING: ThreadSanitizer" "$log")
  if [ $rc -eq 0 ] && [ "$reports" -eq 0 ]; then
    echo "ok      $name ($(( $(date +%s) - start )) s)"
  else
    failures=$((failures + 1))
    echo "FAILED  $name (exit $rc, $reports ThreadSanitizer report(s)):"
    grep -A30 "WARNING: ThreadSanitizer" "$log" | head -60
    tail -5 "$log"
  fi
  rm -f "$log"
}

run "kit operation queue" $build/tests/kit/kit_op_queue_test
run "plexus-run signal watcher" $build/tests/signal_watcher_test
for n in 2 3; do
  run "tcp collectives, $n ranks" env PLEXUS_BACKEND=tcp \
    $build/tools/plexus-run/plexus-run -n $n $build/tests/collectives_check
done
# Groups (split, group, two groups used from two threads at once) and the
# ABI 1.2 collectives on the world and on a split.
run "tcp groups and 1.2 collectives, 3 ranks" env PLEXUS_BACKEND=tcp \
  $build/tools/plexus-run/plexus-run -n 3 $build/tests/groups_check
if [ -e $build/backends/ucx/libplexus-ucx.so ]; then
  # UCX's memory hooks (libucm patches malloc and mmap in every loaded
  # library) fight TSan's own interceptors: with them a rank died of SIGSEGV
  # inside UCX before any collective. They feed UCX's registration cache for
  # RDMA, which shared memory and tcp do not use; off for this run only.
  for n in 2 3; do
    run "ucx collectives, $n ranks" env PLEXUS_BACKEND=ucx UCX_MEM_EVENTS=no \
      UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none \
      $build/tools/plexus-run/plexus-run -n $n $build/tests/collectives_check
  done
  run "ucx groups and 1.2 collectives, 3 ranks" env PLEXUS_BACKEND=ucx UCX_MEM_EVENTS=no \
    UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none \
    $build/tools/plexus-run/plexus-run -n 3 $build/tests/groups_check
fi
# The uds sample, with the kit and plexus-algos compiled in with TSan (what
# pkg-config plexus-kit gives a vendor, from the sources), under the
# TSan-built plexus-conformance.
if [ -z "$only" ] || [ "$only" = uds ]; then
  uds=$build/libplexus-uds-tsan.so
  if ${CXX:-c++} -std=c++20 -O1 -g -fsanitize=thread -fPIC -shared -fvisibility=hidden -pthread \
       -Ikit/include -Ialgos/include -Iapi/include -Isettings/include samples/vendor-plugin/*.cpp \
       kit/src/*.cpp api/src/*.cpp \
       algos/src/*.cpp -Wl,--version-script=api/plexus-backend.map -o "$uds" 2>"$uds.log"; then
    for n in 2 3; do
      run "uds sample under plexus-conformance, $n ranks" \
        $build/tools/plexus-conformance/plexus-conformance --backend "$PWD/$uds" -n $n
    done
  else
    echo "not run: the uds sample did not build with TSan:"
    head -20 "$uds.log"
  fi
fi
echo "$((runs - failures)) of $runs runs without a ThreadSanitizer report"
[ $failures -eq 0 ]
