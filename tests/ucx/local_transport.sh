#!/usr/bin/env bash
# Ranks on one host reach each other over UCX's shared memory, not over tcp
# on loopback (which UCX 1.13 picks when an endpoint asks for peer failure
# reports: the backend's default therefore asks for them only for peers on
# other hosts and watches local peers through /proc). On one host the
# backend raises UCX's rendezvous threshold to 1 MiB (and says so), unless
# UCX_RNDV_THRESH is set or the host has fewer CPUs than ranks. Also: a
# malformed PLEXUS_UCX_SPIN_US fails comm_create naming the setting.
#
#   local_transport.sh PLEXUS_RUN PROG DEMO
#
# PROG is any 2-rank Plexus program (tests/ucx/truncation_check), DEMO one
# that runs at any size (samples/demo/plexus-demo).
set -uo pipefail
run=$1 prog=$2 demo=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

PLEXUS_LOG_LEVEL=info PLEXUS_BACKEND=ucx PLEXUS_TIMEOUT=30 timeout 120 "$run" -n 2 "$prog" >"$out" 2>&1
rc=$?
grep "resources:\|peers reached over" "$out"
if ! grep -q "resources:.*\(sysv\|posix\)/memory" "$out"; then
  echo "skipped: UCX offers no shared-memory transport here"
  exit 77
fi
[ "$rc" -eq 0 ] || { cat "$out"; fail "the job exited $rc"; }
for r in 0 1; do
  grep -q "rank $r of 2: peers reached over" "$out" || fail "rank $r logged no transports"
done
grep "peers reached over" "$out" | grep -q "tcp/" && fail "a rank reaches its local peer over tcp"
grep "peers reached over" "$out" | grep -vq "\(sysv\|posix\)/memory" &&
  fail "a rank does not reach its local peer over shared memory"
cpus=$(getconf _NPROCESSORS_ONLN)
if [ "$cpus" -ge 2 ]; then
  for r in 0 1; do
    grep "rank $r of 2: peers reached over" "$out" | grep -q "messages below 1 MiB are copied through shared memory" ||
      fail "rank $r does not say that it copies messages below 1 MiB through shared memory"
  done
else
  echo "one CPU: the 2-rank job keeps UCX's threshold, not checked"
fi
# The shared-memory FIFO is walked once before the communicator is handed
# out (its first pass page-faults: 2.7 instead of 1.0 us per 512 B allreduce
# for the first 64), as long as UCX's FIFO is.
for r in 0 1; do
  grep "rank $r of 2: peers reached over" "$out" |
    grep -q "shared memory warmed up: 64 messages of 8 KiB each way with 1 peer(s) (UCX_MM_FIFO_SIZE 64)" ||
    fail "rank $r did not warm its shared memory with UCX's default FIFO of 64"
done
UCX_MM_FIFO_SIZE=32 PLEXUS_LOG_LEVEL=info PLEXUS_BACKEND=ucx PLEXUS_TIMEOUT=30 timeout 120 "$run" -n 2 "$prog" >"$out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || { cat "$out"; fail "the job with UCX_MM_FIFO_SIZE=32 exited $rc"; }
for r in 0 1; do
  grep "rank $r of 2: peers reached over" "$out" |
    grep -q "shared memory warmed up: 32 messages of 8 KiB each way with 1 peer(s) (UCX_MM_FIFO_SIZE 32)" ||
    fail "UCX_MM_FIFO_SIZE=32: rank $r did not warm up with 32 messages"
done

# More ranks than CPUs: UCX's own threshold (eager copies would wait for the
# receiver to be scheduled).
n=$((cpus + 1))
PLEXUS_LOG_LEVEL=info PLEXUS_BACKEND=ucx PLEXUS_TIMEOUT=60 timeout 240 \
  "$run" -n "$n" "$demo" --count 16 --iters 2 >"$out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || { tail -n 20 "$out"; fail "the $n-rank job on $cpus CPUs exited $rc"; }
[ "$(grep -c "of $n: peers reached over" "$out")" -eq "$n" ] ||
  fail "$n ranks on $cpus CPUs: not every rank logged its transports"
grep "peers reached over" "$out" | grep -q "copied through shared memory" &&
  fail "$n ranks on $cpus CPUs: the backend still raised the threshold"

# The user's UCX_RNDV_THRESH wins: the backend leaves the threshold alone.
UCX_RNDV_THRESH=auto PLEXUS_LOG_LEVEL=info PLEXUS_BACKEND=ucx PLEXUS_TIMEOUT=30 timeout 120 \
  "$run" -n 2 "$prog" >"$out" 2>&1
rc=$?
[ "$rc" -eq 0 ] || { cat "$out"; fail "the job with UCX_RNDV_THRESH=auto exited $rc"; }
[ "$(grep -c "peers reached over" "$out")" -ge 2 ] || fail "UCX_RNDV_THRESH=auto: no transports logged"
grep "peers reached over" "$out" | grep -q "copied through shared memory" &&
  fail "UCX_RNDV_THRESH=auto: the backend still set its own threshold"

PLEXUS_UCX_SPIN_US=soon PLEXUS_BACKEND=ucx PLEXUS_TIMEOUT=30 timeout 120 "$run" -n 2 "$prog" >"$out" 2>&1
rc=$?
[ "$rc" -ne 0 ] || fail "PLEXUS_UCX_SPIN_US=soon was accepted"
grep -q "PLEXUS_UCX_SPIN_US='soon'" "$out" || { cat "$out"; fail "the error does not name PLEXUS_UCX_SPIN_US"; }

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "ok"
