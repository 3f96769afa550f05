#!/usr/bin/env bash
# Communicator::mem_alloc on a backend built on the kit (the segment's
# shared buffers, kit/include/plexus/kit/one_host_shm.hpp, MemAlloc):
# - 2 and 3 ranks with 64 KiB slots (a vector takes many chunks): shared
#   buffers, every in-place allreduce exact (shared_buffers_check says what);
# - PLEXUS_SHM_WINDOWS=off, PLEXUS_SHM=off and one rank: ordinary memory,
#   the same checks pass;
# - one rank on its shared buffer, the others on their own: every rank
#   fails at once with a mismatch (no hang, no garbage);
# - a malformed PLEXUS_SHM_WINDOWS fails comm_create naming it;
# - plexus-bench --mem-alloc: every element right, in and out of place;
# - nothing is left in /dev/shm by the jobs.
#
#   shared_buffers.sh PLEXUS_RUN SHARED_BUFFERS_CHECK BACKEND PLEXUS_BENCH
set -uo pipefail
run=$1 check=$2 backend=$3 bench=$4
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
job() {  # job NPROC "ENV..." ARGS...: output in $out; returns the exit code
  local n=$1 envs=$2
  shift 2
  env PLEXUS_BACKEND="$backend" PLEXUS_TIMEOUT=60 $envs \
    timeout 240 "$run" -n "$n" "$check" "$@" >"$out" 2>&1
}
expect_ok() {  # expect_ok WHAT NPROC: every rank printed its counts, no failure
  local what=$1 n=$2
  [ "$(grep -c ' 0 failed' "$out")" -eq "$n" ] || { tail -20 "$out"; fail "$what"; }
}

job 2 PLEXUS_SHM_SLOT_KIB=64 --expect shared || true
expect_ok "2 ranks, 64 KiB slots, shared buffers" 2
job 3 PLEXUS_SHM_SLOT_KIB=64 --expect shared || true
expect_ok "3 ranks, 64 KiB slots, shared buffers" 3
job 2 PLEXUS_SHM_WINDOWS=off --expect ordinary || true
expect_ok "PLEXUS_SHM_WINDOWS=off: ordinary memory" 2
job 2 PLEXUS_SHM=off --expect ordinary || true
expect_ok "PLEXUS_SHM=off: ordinary memory" 2
job 1 "" --expect ordinary || true
expect_ok "one rank: ordinary memory" 1

start=$(date +%s)
job 3 "" --expect shared --mismatch || true
took=$(($(date +%s) - start))
expect_ok "a rank on its shared buffer, the others on their own: every rank fails with a mismatch" 3
[ "$took" -lt 30 ] || fail "the mismatch took $took s"
grep -m1 "collective mismatch" "$out"

job 2 PLEXUS_SHM_WINDOWS=bogus --expect shared
[ $? -ne 0 ] || fail "PLEXUS_SHM_WINDOWS=bogus: the job succeeded"
grep -q "PLEXUS_SHM_WINDOWS='bogus' is not one of auto" "$out" ||
  { tail -10 "$out"; fail "PLEXUS_SHM_WINDOWS=bogus: no error naming the setting"; }

env PLEXUS_BACKEND="$backend" PLEXUS_TIMEOUT=60 PLEXUS_SHM_SLOT_KIB=64 timeout 240 "$run" -n 2 \
  "$bench" --mem-alloc --blocking -b 8 -e 4M -f 8 -n 3 -w 1 -c 1 -d all >"$out" 2>&1 ||
  { tail -20 "$out"; fail "plexus-bench --mem-alloc: exit $?"; }
grep -q "buffers from mem_alloc" "$out" || fail "plexus-bench --mem-alloc does not say so"

# The buffers' files are unlinked at their first allreduce or when freed;
# their names carry rank 0's pid (see one_host_shm.sh).
for f in /dev/shm/plexus-shm-*-w*; do
  [ -e "$f" ] || continue
  pid=${f#/dev/shm/plexus-shm-}
  pid=${pid%%-*}
  [ -d "/proc/$pid" ] || fail "$f is left behind (its maker, pid $pid, is gone)"
done

[ "$failures" -eq 0 ] && echo "shared buffers on $backend: ok"
[ "$failures" -eq 0 ]
