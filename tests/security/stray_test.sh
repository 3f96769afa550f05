#!/usr/bin/env bash
# A process that has the job's secret but is not part of the job (a second job
# started with the same token file, a stray or late launcher, a script) against
# a running job under plexus-run. The stray either is a plexus-run itself or
# speaks the store protocol with tests/security/store_client.py and the token:
#
#   stray_test.sh MODE PLEXUS_RUN FAULT_RANK STORE_CLIENT
#
#   f4        3 ranks loop allreduces; the stray writes stall lines and marks
#             saying ranks 1 and 2 waited for rank 0, then rank 1 is SIGKILLed:
#             the writes are refused and plexus-run names rank 1, not rank 0.
#   f5        3 nodes (--local-nodes, 1 rank each) run; a stray launcher with
#             --nnodes 4 --node-rank 3 and a second --node-rank 1 each join:
#             both are refused, saying why, and the job ends well (exit 0).
#   f6        the same job; the stray writes a verdict and node 2's failure
#             report ("rank 2 ... exited with code 3") and claims node 2 (all
#             refused), and reads node 0's and node 1's keys with ADD 0 (which
#             must not create them): the job ends well.
#   f7        the same job with --node-timeout 3; node 2's launcher is SIGKILLed
#             while the stray beats for it: nodes 0 and 1 name node 2.
#   node0     the same job with --node-timeout 3; node 0's launcher is
#             SIGKILLed: nodes 1 and 2 say node 0 is gone, silent for at least
#             3 s, and exit within 1.5 s of the silence the message states.
#
# Exit 0 pass, 1 fail; skipped (77) without python3.
set -u
mode=${1:?mode}
run=${2:?plexus-run}
fault_rank=${3:?fault_rank}
client=${4:?store_client.py}
python=$(command -v python3 || echo /usr/bin/python3)
[ -x "$python" ] || { echo "SKIP: no python3"; exit 77; }

tmp=$(mktemp -d /tmp/plexus-stray-XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
check() {
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else fail "$what"; fi
}
all_refused() { grep -q "^refused" "$1" && ! grep -q "^ok" "$1"; }
show() {
  local f
  for f in "$tmp"/*.log "$tmp"/out/*; do
    [ -f "$f" ] && { echo "--- $f"; sed 's/^/    /' "$f"; }
  done
}
now_ms() { date +%s%3N; }

port=$("$python" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')
token=$tmp/token
"$run" --make-token "$token" >/dev/null || { echo "FAIL: plexus-run --make-token"; exit 1; }
mkdir -p "$tmp/out"
stray() { "$python" "$client" --token-file "$token" "$@"; }
export PLEXUS_TIMEOUT=${PLEXUS_TIMEOUT_TEST:-10}
unset PLEXUS_TOKEN PLEXUS_TOKEN_FILE

# node K NNODES NODE_TIMEOUT PROG...: one launcher of a job on this host, in the background.
node() {
  local k=$1 nnodes=$2 node_timeout=$3
  shift 3
  timeout -k 5 60 "$run" --nnodes "$nnodes" --node-rank "$k" --local-nodes --master-port "$port" \
    --token-file "$token" --node-timeout "$node_timeout" -n 1 "$@" >"$tmp/node$k.log" 2>&1 &
  eval "node$k=$!"
}
# kill_launcher K: SIGKILL node K's plexus-run (the child of its timeout(1)).
kill_launcher() {
  local wrapper
  eval "wrapper=\$node$1"
  kill -9 $(pgrep -P "$wrapper" -x plexus-run)
}
# A job of 3 nodes whose ranks sleep for SECONDS; waits until every node joined.
three_nodes() {
  local seconds=$1 node_timeout=${2:-30}
  node 0 3 "$node_timeout" sleep "$seconds"
  node 1 3 "$node_timeout" sleep "$seconds"
  node 2 3 "$node_timeout" sleep "$seconds"
  wait_key plexus/node/2/launch/info plexus/launch/node/2
  sleep 0.5
}
# wait_key KEY [OLD_KEY]: until KEY (or the key of before the identities) is in the store.
wait_key() {
  local i key
  for i in $(seq 200); do
    for key in "$@"; do
      stray --tries 5 127.0.0.1 "$port" get "$key" 0 2>/dev/null | grep -q "^ok" && return 0
    done
    sleep 0.1
  done
  echo "FAIL: $1 never appeared"
  return 1
}

case "$mode" in
  f4)
    PLEXUS_BACKEND=tcp FAULT_RANK_SECONDS=30 timeout -k 5 90 "$run" --master-port "$port" \
      --token-file "$token" -n 3 "$fault_rank" "$tmp/out" loop >"$tmp/job.log" 2>&1 &
    job=$!
    wait_key plexus/rank/2/join/card plexus/join/card/2
    sleep 1
    # Lines and marks (today's keys and before's) that say ranks 1 and 2 timed
    # out in allreduce #5 and rank 0 never reached it.
    args=()
    for r in 1 2; do
      args+=(set "plexus/rank/$r/stalled" "plexus/0 5 allreduce" ';' set "plexus/stalled/$r" "plexus/0 5 allreduce" ';')
    done
    stray 127.0.0.1 "$port" "${args[@]}" >"$tmp/stray.log" 2>&1
    pid1=$(stray 127.0.0.1 "$port" get plexus/rank/1/join/card | tr ' ' '\n' | sed -n 's/^pid=//p')
    [ -n "$pid1" ] || pid1=$(stray 127.0.0.1 "$port" get plexus/join/card/1 | tr ' ' '\n' | sed -n 's/^pid=//p')
    echo "killing rank 1 (pid $pid1)"
    kill -9 "$pid1"
    wait $job
    grep "^plexus-run:" "$tmp/job.log"
    check "the stray's stall lines were refused" \
      grep -q "^refused.*belongs to rank 1" "$tmp/stray.log"
    check "plexus-run names rank 1, killed by SIGKILL" \
      grep -q "rank 1 (pid $pid1) was killed by signal 9" "$tmp/job.log"
    check "plexus-run blames no rank for stopping (no rank timed out)" \
      bash -c "! grep -q 'stopped making progress' '$tmp/job.log'"
    ;;
  f5)
    three_nodes 6
    timeout -k 5 30 "$run" --nnodes 4 --node-rank 3 --local-nodes --master-port "$port" \
      --token-file "$token" -n 1 true >"$tmp/stray4.log" 2>&1
    rc4=$?
    timeout -k 5 30 "$run" --nnodes 3 --node-rank 1 --local-nodes --master-port "$port" \
      --token-file "$token" -n 1 true >"$tmp/stray1.log" 2>&1
    rc1=$?
    wait $node0; rc_0=$?
    wait $node1; rc_1=$?
    wait $node2; rc_2=$?
    check "the stray --nnodes 4 --node-rank 3 launcher is refused (exit $rc4)" test $rc4 -ne 0
    check "it is told why" grep -q "was started with --nnodes 3 but node 3 with --nnodes 4" \
      "$tmp/stray4.log"
    check "the second --node-rank 1 launcher is refused (exit $rc1)" test $rc1 -ne 0
    check "it is told why" grep -q "another plexus-run has joined this job as node 1" \
      "$tmp/stray1.log"
    check "the job's 3 launchers exit 0 (got $rc_0 $rc_1 $rc_2)" test "$rc_0$rc_1$rc_2" = 000
    ;;
  f6)
    three_nodes 6
    line="rank 2 (node 2, host vm, pid 31337) exited with code 3"
    stray 127.0.0.1 "$port" set plexus/node/0/launch/failed "2 $line" ';' \
      set plexus/node/2/launch/report "1 4 $line" >"$tmp/stray.log" 2>&1
    stray --as node/2 127.0.0.1 "$port" set plexus/node/2/launch/report "1 4 $line" \
      >>"$tmp/stray.log" 2>&1
    # ADDs of 0 (reads) of node 0's verdict and all_done, and of node 1's
    # done, left and report: they must not create those keys.
    stray 127.0.0.1 "$port" add plexus/node/0/launch/failed 0 ';' \
      add plexus/node/0/launch/all_done 0 ';' add plexus/node/1/launch/done 0 ';' \
      add plexus/node/1/launch/left 0 ';' add plexus/node/1/launch/report 0 \
      >"$tmp/stray-reads.log" 2>&1
    # Before's keys, where anyone with the secret could give the verdict.
    stray 127.0.0.1 "$port" set plexus/launch/failed "$line" ';' add plexus/launch/reports 1 ';' \
      set plexus/launch/report/1 "4 $line" >"$tmp/stray-old.log" 2>&1
    wait $node0; rc_0=$?
    wait $node1; rc_1=$?
    wait $node2; rc_2=$?
    check "the stray's verdict, report and claim of node 2 were refused" all_refused "$tmp/stray.log"
    check "its ADDs of 0 were answered as reads (0)" \
      test "$(grep -c '^ok 0$' "$tmp/stray-reads.log")" = 5
    check "the job's 3 launchers exit 0 (got $rc_0 $rc_1 $rc_2)" test "$rc_0$rc_1$rc_2" = 000
    check "no launcher repeats the forged verdict" bash -c "! grep -q 31337 '$tmp'/node*.log"
    ;;
  f7)
    three_nodes 40 3
    stray 127.0.0.1 "$port" repeat 100 100 add plexus/node/2/launch/beat 1 >"$tmp/stray.log" 2>&1 &
    stray 127.0.0.1 "$port" repeat 100 100 add plexus/launch/beat/2 1 >/dev/null 2>&1 &
    sleep 0.3
    kill_launcher 2
    start=$(now_ms)
    wait $node0; rc_0=$?
    wait $node1; rc_1=$?
    took=$(($(now_ms) - start))
    cat "$tmp/node0.log" "$tmp/node1.log"
    check "the stray's beats for node 2 were refused" all_refused "$tmp/stray.log"
    check "nodes 0 and 1 fail (got $rc_0 $rc_1)" test "$rc_0$rc_1" = 11
    for k in 0 1; do
      check "node $k names node 2 as the one that stopped responding" \
        grep -q "node 2 (host .*rank 2) stopped responding" "$tmp/node$k.log"
    done
    check "within 3 s + 5 s of the kill (took $took ms)" test $took -lt 8000
    ;;
  node0)
    three_nodes 40 3
    kill_launcher 0
    start=$(now_ms)
    wait $node1; rc_1=$?
    t1=$(($(now_ms) - start))
    wait $node2; rc_2=$?
    t2=$(($(now_ms) - start))
    cat "$tmp/node1.log" "$tmp/node2.log"
    check "nodes 1 and 2 fail (got $rc_1 $rc_2)" test "$rc_1$rc_2" = 11
    # The silence the message states: at least --node-timeout, and what it was.
    # Counted from node 0's last answer, up to one beat (0.2 s) before the kill.
    for k in 1 2; do
      said=$(sed -n 's/.*node 0 (host .*) is gone: .* has not answered for \([0-9.]*\) s.*/\1/p' \
        "$tmp/node$k.log" | head -n 1)
      eval "took=\$t$k"
      check "node $k says node 0 is gone, silent for ${said:-?} s (--node-timeout 3)" \
        "$python" -c "import sys; sys.exit(not 3.0 <= float('${said:-0}') < 4.5)"
      check "node $k exits within 1.5 s of the silence it states (took $took ms)" \
        "$python" -c "import sys; s = float('${said:-0}') * 1000; sys.exit(not s - 300 <= $took <= s + 1500)"
    done
    ;;
  *)
    echo "unknown mode $mode" >&2
    exit 2
    ;;
esac

if [ $failures -ne 0 ]; then show; fi
echo "stray $mode: $failures failure(s)"
[ $failures -eq 0 ]
