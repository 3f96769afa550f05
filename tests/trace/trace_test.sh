#!/usr/bin/env bash
# The flight recorder end to end: plexus-run -n 3 trace_check MODE with
# PLEXUS_TRACE_DIR set, then plexus-trace on the dumps.
#   slow: rank 1 sleeps 20 ms before each of 40 allreduces; plexus-trace must
#     name rank 1 as the straggler, 20 ms late within 25 %, and no other
#     rank; its --chrome timeline must follow the trace event format, one
#     track per rank (chrome_check.py).
#   hang: rank 2 stops posting at iteration 10 (the others time out,
#     PLEXUS_TIMEOUT=3); plexus-run asks every rank for its dump before it
#     stops them; plexus-trace must say rank 2 never posted allreduce #10
#     (counted from 0, as the errors count) and that it last finished #9.
#   mismatch: rank 1 posts a broadcast where the others allreduce, under
#     PLEXUS_DEBUG=detail; plexus-trace must say the ranks disagree there.
#   dropped: every other allreduce's Work is dropped unwaited; the exit
#     dumps must show every allreduce finished, and plexus-trace name no
#     rank as missing.
# Exit 77 (skipped) when PLEXUS_BACKEND's plugin is not built.
#
#   trace_test.sh PLEXUS_RUN TRACE_CHECK PLEXUS_TRACE CHROME_CHECK slow|hang|mismatch|dropped
set -u
run=${1:?plexus-run} prog=${2:?trace_check} tool=${3:?plexus-trace} chrome_check=${4:?}
mode=${5:?slow, hang, mismatch or dropped}
backend=${PLEXUS_BACKEND:-tcp}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PLEXUS_TRACE_DIR=$work/dumps PLEXUS_TIMEOUT=${PLEXUS_TIMEOUT:-3}
case $mode in
  slow) args=(slow 1 20 40) ;;
  hang) args=(hang 2 10) ;;
  mismatch) args=(mismatch); export PLEXUS_DEBUG=detail ;;
  dropped) args=(dropped) ;;
esac
timeout -k 5 120 "$run" -n 3 "$prog" "${args[@]}" >"$work/out" 2>&1
rc=$?
echo "--- plexus-run exited $rc:"
tail -n 12 "$work/out" | sed 's/^/  /'
if grep -q "backend '$backend'.*not found\|no backend named '$backend'" "$work/out"; then
  echo "skipped: the $backend backend is not built here"
  exit 77
fi
echo "--- $(basename "$tool") $PLEXUS_TRACE_DIR:"
python3 "$tool" "$PLEXUS_TRACE_DIR" --chrome "$work/chrome.json" >"$work/verdict" 2>&1
trc=$?
sed 's/^/  /' "$work/verdict"
fail=0
check() { # condition message
  if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi
}
check "[ $trc = 0 ]" "plexus-trace exited 0 ($trc)"
check "! grep -q Traceback '$work/verdict'" "plexus-trace did not crash"
modes=$(stat -c %a "$PLEXUS_TRACE_DIR"/rank-*.json 2>/dev/null | sort -u | tr '\n' ' ')
check "[ '$modes' = '600 ' ]" "the dumps are readable by their owner only (mode ${modes:-none})"
case $mode in
  slow)
    check "[ $rc = 0 ]" "the job exited 0"
    line=$(grep -E '^  straggler: rank 1 arrives [0-9.]+ ms late' "$work/verdict")
    check '[ -n "$line" ]' "rank 1 is named as the straggler"
    ms=$(sed -E 's/.*arrives ([0-9.]+) ms late.*/\1/' <<<"$line")
    check "awk -v m='${ms:-0}' 'BEGIN { exit !(m >= 15 && m <= 25) }'" \
      "its lateness, ${ms:-?} ms, is within 25 % of 20 ms"
    check "[ \$(grep -c '^  straggler:' '$work/verdict') = 1 ]" "no other rank is named"
    check "python3 '$chrome_check' '$work/chrome.json' 3" \
      "the Chrome trace follows the trace event format, one track per rank"
    ;;
  hang)
    check "[ $rc != 0 ]" "the job failed ($rc)"
    check "grep -q 'flight-recorder dumps are in $PLEXUS_TRACE_DIR' '$work/out'" \
      "plexus-run says where the dumps are"
    check "grep -Eq '^  rank 2 never posted allreduce #10 on plexus/0 \\(ranks 0 and 1 did, and waited for it\\); it last finished #9 \\(allreduce\\) at [0-9:.]+ UTC' '$work/verdict'" \
      "plexus-trace: rank 2 never posted allreduce #10, it last finished #9"
    ;;
  dropped)
    check "[ $rc = 0 ]" "the job exited 0"
    unfinished=$(python3 -c '
import glob, json, sys
n = 0
for path in glob.glob(sys.argv[1] + "/rank-*.json"):
    for c in json.load(open(path))["communicators"]:
        f = c["fields"]
        n += sum(1 for row in c["ops"] if dict(zip(f, row))["finished_ns"] == 0)
print(n)' "$PLEXUS_TRACE_DIR")
    check "[ '$unfinished' = 0 ]" "every allreduce, dropped or waited, is finished in the dumps ($unfinished not)"
    check "! grep -q 'never posted\|never finished\|disagree' '$work/verdict'" \
      "plexus-trace names no rank as missing"
    ;;
  mismatch)
    check "[ $rc != 0 ]" "the job failed ($rc)"
    check "grep -Eq '^  the ranks disagree at collective #5 on plexus/0: (ranks 0 and 2 posted allreduce of 4096 int64 \\(sum\\); rank 1 posted broadcast of 4096 int64 from root 0|rank 1 posted broadcast of 4096 int64 from root 0; ranks 0 and 2 posted allreduce of 4096 int64 \\(sum\\))' '$work/verdict'" \
      "plexus-trace: the ranks disagree at #5, rank 1's broadcast against the others' allreduce"
    ;;
esac
exit $fail
