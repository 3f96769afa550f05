#!/usr/bin/env bash
# plexus-run -n 3 --elastic elastic_check HOW (kill or stop), on
# PLEXUS_BACKEND: rank 2 leaves at iteration 20; ranks 0 and 1 must recover
# (Communicator::shrink) within a bound (SIGKILL: 2 s from the failure;
# SIGSTOP: PLEXUS_TIMEOUT + 1 s from posting the allreduce rank 2 never
# joins: the others' timeout first), finish every iteration with every
# result right on 2 ranks, and plexus-run must exit 0, saying rank 2 left and
# why. HOW kill2: rank 1 dies too while the others recover; rank 0 must go on
# alone (within 2 timeouts: its first try waits for rank 1) and finish. Exit
# 77 (skipped) when the backend's plugin is not built.
# HOW rejoin (--max-restarts 1): rank 2 killed at iteration 20 is started
# again by plexus-run and joins at a grow() of ranks 0 and 1; all three end
# on 3 ranks, every result right. rejoin-die: the newcomer dies as soon as it
# joined, before the state comes; ranks 0 and 1 shrink again and end on 2.
# In rejoin, rank 2 leaves a flight-recorder dump before it dies, which must
# still be there, under a name of its own, beside the restarted rank's.
# rejoin-gone: rank 2 deletes its program (a copy) before it dies; plexus-run
# cannot start it again, says why, and the job goes on and ends on 2 ranks.
#
#   elastic_test.sh PLEXUS_RUN ELASTIC_CHECK kill|stop|kill2|rejoin|rejoin-die|rejoin-gone
set -u
run=${1:?plexus-run}
prog=${2:?elastic_check}
how=${3:?kill or stop}
backend=${PLEXUS_BACKEND:-tcp}
timeout_s=${PLEXUS_TIMEOUT:-3}
out=$(mktemp) err=$(mktemp) trace=$(mktemp -d)
copy=$(dirname "$prog")/elastic_check.gone.$$  # (beside it: the same RUNPATH)
trap 'rm -rf "$out" "$err" "$trace" "$copy"' EXIT

if ! "$run" -n 1 sh -c 'exit 0' 2>/dev/null; then
  echo "FAIL: plexus-run does not run"
  exit 1
fi
start=$(date +%s.%N)
iterations=40
restarts=()
extra=()
case $how in rejoin*) iterations=60 restarts=(--max-restarts 1) ;; esac
[ "$how" = rejoin ] && extra=("$trace") && export PLEXUS_TRACE_DIR=$trace
[ "$how" = rejoin-gone ] && cp "$prog" "$copy" && prog=$copy
timeout -k 5 90 "$run" -n 3 --elastic "${restarts[@]}" "$prog" "$how" $iterations "${extra[@]}" \
  >"$out" 2>"$err"
rc=$?
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "--- plexus-run exited $rc after $elapsed s; stdout:"
sed 's/^/  /' "$out"
echo "--- stderr:"
grep -v '^ *$' "$err" | tail -n 20 | sed 's/^/  /'
if grep -q "backend '$backend'.*not found\|no backend named '$backend'\|cannot load.*$backend" "$err"; then
  echo "skipped: the $backend backend is not built here"
  exit 77
fi

fail=0
check() { # condition message
  if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi
}
bound_ms=2000
[ "$how" = stop ] && bound_ms=$(((timeout_s + 1) * 1000))
check "[ $rc = 0 ]" "plexus-run exited 0 ($rc)"
if [ "$how" = rejoin ]; then
  for r in 0 1; do
    check "grep -Eq '^\[$r\] rank $r: recovered in [0-9]+ ms: 3 -> 2 ranks \(job ranks 0, 1\), iteration 20' '$out'" \
      "rank $r went on on 2 ranks at iteration 20"
    check "grep -Eq '^\[$r\] rank $r: grew at iteration [0-9]+: 2 -> 3 ranks \(job ranks 0, 1, 2\)' '$out'" \
      "rank $r grew back to 3 ranks"
    check "grep -Eq '^\[$r\] rank $r of 3: 60 iterations, 1 recovery, 1 grow, every result right' '$out'" \
      "rank $r finished 60 iterations on 3 ranks, every result right"
  done
  check "grep -Eq '^\[2\] rank 2: joined at iteration [0-9]+: 3 ranks \(job ranks 0, 1, 2\)' '$out'" \
    "the newcomer joined at the others' iteration"
  check "grep -Eq '^\[2\] rank 2 of 3: [0-9]+ iterations, 0 recoveries, 0 grows, every result right' '$out'" \
    "the newcomer finished with every result right"
  check "grep -q 'started rank 2 (pid [0-9]*) again (restart 1 of --max-restarts 1)' '$err'" \
    "plexus-run says it started rank 2 again"
  check "grep -Eq 'the job ended on 3 of 3 ranks \(--elastic\); left: rank 2 .*; started again: rank 2 \(pid [0-9]+\) at [0-9.]+ s, joined at [0-9.]+ s' '$err'" \
    "plexus-run's last word: 3 of 3 ranks, rank 2 left, started again and joined"
  reason() { sed -n 's/.*"reason": "\([A-Za-z0-9]*\)".*/\1/p' "$1" 2>/dev/null | head -n 1; }
  kept=$trace/rank-2.before-restart-1.json
  check "[ \"\$(reason '$kept')\" = SIGUSR1 ]" \
    "the first rank 2's dump (SIGUSR1) kept as $(basename "$kept") ($(reason "$kept"))"
  check "[ \"\$(reason '$trace/rank-2.json')\" = exit ]" \
    "the restarted rank 2's dump (at exit) is rank-2.json ($(reason "$trace/rank-2.json"))"
  exit $fail
fi
if [ "$how" = rejoin-die ]; then
  for r in 0 1; do
    check "grep -Eq '^\[$r\] rank $r: recovered in [0-9]+ ms: 3 -> 2 ranks \(job ranks 0, 1\), iteration [0-9]+' '$out'" \
      "rank $r went on on 2 ranks after the newcomer died"
    check "grep -Eq '^\[$r\] rank $r of 2: 60 iterations, 2 recoveries, 1 grow, every result right' '$out'" \
      "rank $r finished 60 iterations on 2 ranks, every result right"
  done
  check "grep -Eq 'the job ended on 2 of 3 ranks \(--elastic\); left: rank 2 .*; rank 2 .*; started again: rank 2' '$err'" \
    "plexus-run's last word: 2 of 3 ranks, rank 2 left twice"
  exit $fail
fi
if [ "$how" = rejoin-gone ]; then
  for r in 0 1; do
    check "grep -Eq '^\[$r\] rank $r of 2: 60 iterations, 1 recovery, [0-9]+ grows?, every result right' '$out'" \
      "rank $r finished 60 iterations on 2 ranks, every result right"
  done
  check "grep -Eq 'could not start rank 2 again \(restart 1 of --max-restarts 1\): cannot execute .*: No such file or directory; the job goes on without it \(--elastic\): ranks 0 and 1 left' '$err'" \
    "plexus-run says it could not start rank 2 again, and why"
  check "grep -Eq 'the job ended on 2 of 3 ranks \(--elastic\); left: rank 2 .*; rank 2 at [0-9.]+ s: could not be started again' '$err'" \
    "plexus-run's last word: 2 of 3 ranks, rank 2 left and could not be started again"
  exit $fail
fi
if [ "$how" = kill2 ]; then
  check "grep -Eq '^\[0\] rank 0 of 1: 40 iterations, 1 recovery, 0 grows, every result right' '$out'" \
    "rank 0 finished 40 iterations alone, every result right"
  line=$(grep -E "^\[0\] rank 0: recovered in [0-9]+ ms: 3 -> 1 ranks \(job ranks 0\), iteration 20" "$out")
  check "[ -n '$line' ]" "rank 0 recovered from 3 ranks to itself at iteration 20"
  ms=$(sed -E 's/.*recovered in ([0-9]+) ms.*/\1/' <<<"$line")
  check "[ -n '$ms' ] && [ '$ms' -le $((2 * timeout_s * 1000 + 1000)) ]" \
    "rank 0 recovered within two timeouts (${ms:-?} ms)"
  check "grep -q 'the job ended on 1 of 3 ranks (--elastic); left: rank 2 .*; rank 1 ' '$err'" \
    "plexus-run's last word: the job ended on 1 of 3 ranks, ranks 2 and 1 left"
  exit $fail
fi
for r in 0 1; do
  check "grep -Eq '^\[$r\] rank $r of 2: 40 iterations, 1 recovery, 0 grows, every result right' '$out'" \
    "rank $r finished 40 iterations on 2 ranks, every result right"
  line=$(grep -E "^\[$r\] rank $r: recovered in [0-9]+ ms: 3 -> 2 ranks \(job ranks 0, 1\), iteration 20" "$out")
  check "[ -n '$line' ]" "rank $r recovered from 3 to 2 ranks (job ranks 0, 1) at iteration 20"
  # SIGKILL: from the failure to the new communicator. SIGSTOP: from posting
  # the allreduce (as rank 2 froze), so the bound covers the timeout too.
  if [ "$how" = stop ]; then
    ms=$(sed -E 's/.*; ([0-9]+) ms after its allreduce was posted.*/\1/' <<<"$line")
    since="after it posted the allreduce rank 2 froze in"
  else
    ms=$(sed -E 's/.*recovered in ([0-9]+) ms.*/\1/' <<<"$line")
    since="after its allreduce failed"
  fi
  check "[ -n '$ms' ] && [ '$ms' -le $bound_ms ]" "rank $r recovered within $bound_ms ms (${ms:-?} ms $since)"
done
if [ "$how" = kill ]; then
  check "grep -q 'rank 2 (pid [0-9]*) was killed by signal 9 (SIGKILL); the job goes on without it (--elastic): ranks 0 and 1 left' '$err'" \
    "plexus-run says rank 2 was killed and the job goes on with ranks 0 and 1"
else
  check "grep -Eq 'rank 2 \\(pid [0-9]+\\) stopped making progress \\((ranks 0 and 1|rank [01]) timed out waiting for it in allreduce #[0-9]+ on plexus/0\\), taken out; was killed by signal 9 \\(SIGKILL\\); the job goes on without it' '$err'" \
    "plexus-run says rank 2 stopped making progress, took it out, and the job goes on"
fi
check "grep -q 'the job ended on 2 of 3 ranks (--elastic); left: rank 2' '$err'" \
  "plexus-run's last word: the job ended on 2 of 3 ranks, rank 2 left"
exit $fail
