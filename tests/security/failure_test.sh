#!/usr/bin/env bash
# Failure tests of a running job, through the real launcher, on the backend
# PLEXUS_BACKEND names (default tcp; tests/ucx runs them on ucx):
#
#   failure_test.sh kill|freeze|mismatch-root|mismatch-count|mismatch-kind PLEXUS_RUN FAULT_RANK
#
# kill: 3 ranks loop 4 MiB allreduces and rank 2 SIGKILLs itself mid-allreduce.
#   Every survivor must get a plexus::Error naming rank 2 within PLEXUS_TIMEOUT,
#   and plexus-run must exit non-zero naming rank 2; nothing may hang.
# freeze: like kill, but rank 1 stops itself with SIGSTOP (a hung rank). The
#   survivors' errors and plexus-run's report must name rank 1, the rank that
#   stopped making progress, not a healthy rank that merely exited first.
# mismatch-root: 3 ranks reduce, rank 0 to root 0 and the others to root 1;
#   nothing reaches the wire that could disagree, so they time out: some rank's
#   error and plexus-run's report must say the ranks posted different
#   collectives, naming both roots.
# mismatch-count / mismatch-kind: 2 ranks call different collectives (count
#   1000 vs 1001; allreduce vs broadcast). BOTH ranks must get an error that
#   names both sides.
#
# plexus-run stops the other ranks once one has died; fault_rank ignores
# SIGTERM and plexus-run runs with --grace 20, so survivors get to report. The
# whole job runs under timeout(1): a hang fails the test instead of the suite.
# The only timing assertion is "finished well within the bounds".
set -u

mode=$1
run=$2
prog=$3
out=$(mktemp -d "${TMPDIR:-/tmp}/plexus-failure.XXXXXX")
trap 'rm -rf "$out"' EXIT

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

case "$mode" in
  kill | freeze | mismatch-root) nproc=3 ;;
  mismatch-count | mismatch-kind) nproc=2 ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac

export PLEXUS_BACKEND=${PLEXUS_BACKEND:-tcp}
export PLEXUS_TIMEOUT=${FAILURE_TEST_TIMEOUT:-15}
limit=90  # seconds: PLEXUS_TIMEOUT + grace + start-up, with room to spare
start=$(date +%s)
grace=20
[ "$mode" = freeze ] && grace=10  # the frozen rank ignores SIGTERM; SIGKILL ends it after this
timeout -k 5 "$limit" "$run" --grace "$grace" -n "$nproc" "$prog" "$out" "$mode" >"$out/job.log" 2>&1
rc=$?
elapsed=$(($(date +%s) - start))
echo "--- plexus-run exited $rc after ${elapsed}s; its output:"
cat "$out/job.log"
echo "---"

[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || fail "the job hung: killed by timeout after ${limit}s"
[ "$rc" -ne 0 ] || fail "plexus-run exited 0 although a rank failed"
# Survivors report within PLEXUS_TIMEOUT (15 s) of the failure; allow start-up on a loaded machine.
[ "$elapsed" -lt 60 ] || fail "took ${elapsed}s, more than 60s"

show() {  # the error a rank wrote, for the log
  if [ -f "$out/rank$1.err" ]; then
    echo "rank $1 reported: $(cat "$out/rank$1.err")"
  else
    echo "rank $1 reported no error"
  fi
}

# survivors_name PATTERN RANK...: each survivor wrote an error matching PATTERN.
survivors_name() {
  local pattern=$1 r
  shift
  for r in "$@"; do
    show "$r"
    [ -f "$out/rank$r.err" ] || { fail "survivor rank $r wrote no error"; continue; }
    grep -Eq "$pattern" "$out/rank$r.err" || fail "rank $r's error does not match '$pattern'"
  done
}

case "$mode" in
  kill)
    survivors_name "rank 2" 0 1
    [ ! -f "$out/rank2.err" ] || fail "rank 2 reported an error instead of dying"
    grep -q "rank 2" "$out/job.log" || fail "plexus-run's output does not name rank 2"
    grep -qi "SIGKILL\|signal 9\|killed" "$out/job.log" ||
      fail "plexus-run's output does not say rank 2 was killed"
    ;;
  freeze)
    survivors_name "rank 1 |rank\(s\) 1" 0 2
    # Each survivor's time (start to error, teardown included) stays well
    # under twice the timeout: teardown after a failure is bounded by a short
    # grace, not a second PLEXUS_TIMEOUT (which it once waited).
    for r in 0 2; do
      [ -f "$out/rank$r.err" ] || continue
      t=$(cut -d' ' -f1 "$out/rank$r.err")
      awk -v t="$t" -v limit="$PLEXUS_TIMEOUT" 'BEGIN { exit !(t < 1.5 * limit + 3) }' ||
        fail "rank $r took ${t}s to report, more than 1.5 x PLEXUS_TIMEOUT + 3 s"
    done
    grep -q "plexus-run: rank 1 stopped making progress" "$out/job.log" ||
      fail "plexus-run does not report rank 1 as the rank that stopped making progress"
    grep -q "stopped by SIGSTOP" "$out/job.log" ||
      fail "plexus-run does not say rank 1 was stopped by SIGSTOP"
    ;;
  mismatch-root)
    for r in 0 1 2; do show "$r"; done
    cat "$out"/rank*.err 2>/dev/null | grep -q "posted different collectives.*root [01].*root [01]" ||
      fail "no rank's error says the ranks posted different collectives with roots 0 and 1"
    grep -q "plexus-run: the ranks posted different collectives on plexus/0: .*root 0.*root 1" \
      "$out/job.log" || fail "plexus-run does not say the ranks posted different roots"
    ;;
  mismatch-count | mismatch-kind)
    if [ "$mode" = mismatch-count ]; then
      want=("count 1000" "count 1001")
    else
      want=("allreduce" "broadcast")
    fi
    for r in 0 1; do
      show "$r"
      [ -f "$out/rank$r.err" ] || { fail "rank $r wrote no error"; continue; }
      for w in "rank 0" "rank 1" "${want[@]}"; do
        grep -q "$w" "$out/rank$r.err" || fail "rank $r's error does not mention '$w'"
      done
    done
    ;;
esac

if [ "$failures" -ne 0 ]; then
  echo "$mode: $failures failure(s)"
  exit 1
fi
echo "$mode: ok (${elapsed}s)"
