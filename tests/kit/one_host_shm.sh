#!/usr/bin/env bash
# The kit's one-host shared memory (kit/include/plexus/kit/one_host_shm.hpp)
# on a backend built on the kit:
# - with every rank on this host, each rank's comm_create says at info level
#   that allreduce, reduce_scatter and allgather go through shared memory,
#   and the collectives check (every dtype and op, 1 MiB vectors, in and out
#   of place) passes with 64 KiB slots, so that a vector takes many chunks,
#   both halves in turn, pieces of uneven size;
# - PLEXUS_SHM=off: the ranks say there is none, and the check passes;
# - a malformed PLEXUS_SHM fails comm_create naming the setting, on every
#   rank at once when only one rank has it;
# - nothing is left in /dev/shm by the job.
#
#   one_host_shm.sh PLEXUS_RUN COLLECTIVES_CHECK BACKEND
set -uo pipefail
run=$1 check=$2 backend=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
job() {  # job NPROC ENV...: runs the check, output in $out; returns its exit code
  local n=$1
  shift
  env PLEXUS_LOG_LEVEL=info PLEXUS_BACKEND="$backend" PLEXUS_TIMEOUT=60 "$@" \
    timeout 240 "$run" -n "$n" "$check" --large-bytes 1048576 >"$out" 2>&1
}

job 3 PLEXUS_SHM_SLOT_KIB=64
rc=$?
[ "$rc" -eq 0 ] || { tail -30 "$out"; fail "3 ranks, 64 KiB slots: the job exited $rc"; }
for r in 0 1 2; do
  grep -q "rank $r.*allreduce, reduce_scatter and allgather over shared memory (3 ranks, 2 x 64 KiB slots per rank)" "$out" ||
    fail "rank $r does not say that allreduce, reduce_scatter and allgather go over shared memory with 64 KiB slots"
done
grep -m1 "over shared memory" "$out"

job 2 PLEXUS_SHM=off
rc=$?
[ "$rc" -eq 0 ] || { tail -30 "$out"; fail "PLEXUS_SHM=off: the job exited $rc"; }
for r in 0 1; do
  grep -q "rank $r.*no shared memory: PLEXUS_SHM=off" "$out" ||
    fail "rank $r does not say that PLEXUS_SHM=off leaves shared memory out"
done
grep "over shared memory" "$out" && fail "PLEXUS_SHM=off: a rank uses shared memory"

job 2 PLEXUS_SHM=bogus
rc=$?
[ "$rc" -ne 0 ] || fail "PLEXUS_SHM=bogus: the job succeeded"
grep -q "PLEXUS_SHM='bogus' is not one of auto" "$out" ||
  { tail -10 "$out"; fail "PLEXUS_SHM=bogus: no error naming the setting"; }

# Only rank 1's setting is malformed: every rank fails at once (the others
# must not wait for it until PLEXUS_TIMEOUT, 60 s here). Rank 1's process
# stays 10 s after its failure, so that plexus-run (which stops the others
# when one exits) lets rank 0 fail by itself and say why.
start=$(date +%s)
PLEXUS_LOG_LEVEL=info PLEXUS_BACKEND="$backend" PLEXUS_TIMEOUT=60 timeout 240 "$run" -n 2 \
  bash -c 'if [ "$RANK" = 1 ]; then PLEXUS_SHM=bogus "$@"; rc=$?; sleep 10; exit $rc; fi
           exec "$@"' one "$check" --large-bytes 1048576 >"$out" 2>&1
rc=$?
took=$(($(date +%s) - start))
[ "$rc" -ne 0 ] || fail "rank 1's PLEXUS_SHM=bogus: the job succeeded"
[ "$took" -lt 30 ] || fail "rank 1's PLEXUS_SHM=bogus: the job took $took s (the others waited)"
grep -q "rank 1 has a malformed PLEXUS_SHM" "$out" ||
  { tail -10 "$out"; fail "rank 0's error does not name rank 1's malformed setting"; }

# Rank 0 unlinks the segment once every rank has mapped it; the names carry
# rank 0's pid, which plexus-run prints nowhere, so look for any left by
# this user that no process maps.
for f in /dev/shm/plexus-shm-*; do
  [ -e "$f" ] || continue
  pid=${f#/dev/shm/plexus-shm-}
  pid=${pid%%-*}
  [ -d "/proc/$pid" ] || fail "$f is left behind (its maker, pid $pid, is gone)"
done

[ "$failures" -eq 0 ] && echo "one-host shared memory on $backend: ok"
exit $((failures > 0))
