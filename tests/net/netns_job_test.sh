#!/usr/bin/env bash
# A job across 3 network-namespace hosts (netns_lib.sh), one plexus-run per
# host, 2 ranks each, on the tcp backend:
#
#   netns_job_test.sh collectives PLEXUS_RUN PROG [ARGS...]
#     PROG (the collective battery) on 3 x 2 ranks: every launcher exits 0 and
#     every rank reports its checks passed, none failed (the battery compares
#     results bit for bit); each rank's local address is its host's eth0
#     address (node 2 gets it from PLEXUS_SOCKET_IFNAME=eth0, the others from
#     the route to the master).
#   netns_job_test.sh collectives-ucx PLEXUS_RUN PROG [ARGS...]
#     The same on the ucx backend with UCX_TLS=tcp (skipped when
#     libplexus-ucx.so is not built: NET_UCX_PLUGIN names the file looked for).
#   netns_job_test.sh loss PLEXUS_RUN PROG [ARGS...]
#     The battery on tcp with packets dropped at the bridge's ports (towards
#     every host): `tc netem loss 5%` where sch_netem exists; where it does not,
#     a token bucket (tbf) with a queue too short for TCP's bursts drops them
#     instead (tail drop), or the test is skipped when tc cannot do either. The
#     job slows but every check passes; the packets dropped are counted (tc -s)
#     and must be more than none.
#   netns_job_test.sh delay PLEXUS_RUN PROG [ARGS...]
#     The battery on tcp with every host's eth0 a port of the user-space delay
#     switch (NET_DELAY_SWITCH: tests/net/delay_switch.cpp), which holds each
#     frame NET_DELAY_US (default 1000) µs: tc netem's delay, for kernels
#     without sch_netem. A TCP round trip between two hosts must take at least
#     twice the delay (the switch is on the path), and every check passes.
#   netns_job_test.sh linkdown PLEXUS_RUN NET_LOOP_RANK [ELEMENTS]
#     net_loop_rank's allreduce loop; once it runs, node 1's eth0 is set down.
#     Every rank on nodes 0 and 2 must report an error naming ranks 2, 3
#     (node 1's) and no other as not having reached the allreduce, within
#     PLEXUS_TIMEOUT + 5 s of the cut; every launcher must exit non-zero,
#     nodes 0 and 2 naming node 1 with its host and ranks and their own first
#     rank to exit with its node and host; nothing may hang or be left.
#   netns_job_test.sh blip PLEXUS_RUN NET_LOOP_RANK [ELEMENTS]
#     The same loop; node 1's eth0 goes down for 1 s and comes back. TCP
#     retransmits: the loop goes on (PLEXUS_TIMEOUT 30 s, well above the
#     blip), then is told to stop; every launcher exits 0, every rank did the
#     same number of allreduces, every result right.
#   netns_job_test.sh kill PLEXUS_RUN PROG [ARGS...]
#     PROG runs for long; once the ranks are connected, every listening TCP
#     socket in every namespace (the store's, the ranks') must be on that
#     host's eth0 address, none on loopback or a wildcard; then node 1's
#     plexus-run is SIGKILLed. Nodes 0 and 2 must exit non-zero within
#     PLEXUS_TIMEOUT + 10 s, naming node 1 (with its host and ranks) and
#     their own first rank to exit with its node and host, and leave no
#     process behind in their namespaces.
#
#   netns_job_test.sh trace PLEXUS_RUN TRACE_CHECK PLEXUS_TRACE
#     trace_check hang on 3 x 2 ranks, each node with a PLEXUS_TRACE_DIR of
#     its own: rank 3 (node 1) stops posting at iteration 10, the others time
#     out, the job fails; node 0's plexus-run must collect nodes 1 and 2's
#     ranks' flight-recorder dumps into its directory through the store, and
#     plexus-trace there must read all 6 and say rank 3 never posted
#     allreduce #10 and last finished #9.
#   netns_job_test.sh ddp PLEXUS_RUN DDP_CHECK [ARGS...]
#     tests/ddp's equivalence check on 3 x 2 ranks (6 ranks with DDP equal one
#     process on the 6-fold batch, float64; parameters bit-identical on every
#     rank after every step): every launcher exits 0, rank 0 says it passed,
#     no rank says FAILED. With PLEXUS_HIERARCHY=on in the environment, rank 0
#     must also say its allreduces go in two levels. Skipped (77) when DDP_CHECK is "none": LibTorch
#     was not built.
#   netns_job_test.sh trainer PLEXUS_RUN TRAINER [ARGS...]
#     plexus-trainer (synthetic data, ARGS bound its steps) on NET_NODES (default
#     3) x 2 ranks: every launcher exits 0 and rank 0 prints its epoch summary
#     with the median step time, which is printed as "step time: X ms" for
#     the scaling table (NET_RATE=1gbit: a tbf rate limit at the bridge's ports;
#     NET_DELAY_US=1000 with NET_DELAY_SWITCH: the delay switch, as in "delay").
#     Skipped (77) when TRAINER is "none".
#
#   netns_job_test.sh hierarchy LOCAL PLEXUS_RUN PROG [ARGS...]
#     The battery (give it --same-bits) on 3 x 2 ranks with
#     PLEXUS_HIERARCHY=on and PLEXUS_LOCAL_BACKEND=LOCAL (tcp or ucx) under
#     the tcp backend: every allreduce goes in two levels (rank 0 says so, with
#     the backends of both), every check passes, float results have the same
#     bits on every rank. LOCAL ucx is skipped when libplexus-ucx.so is not
#     built (NET_UCX_PLUGIN).
#   netns_job_test.sh hierarchy-uneven LOCAL PLEXUS_RUN PROG [ARGS...]
#     The same on 3 + 2 + 1 ranks (hosts 0, 1, 2), started without plexus-run
#     (it runs as many ranks on every host) through the PLEXUS_* variables:
#     6 chunks, every check passes.
#   netns_job_test.sh hierarchy-stop|hierarchy-kill PLEXUS_RUN NET_LOOP_RANK [ELEMENTS]
#     net_loop_rank's allreduce loop on 3 x 2 ranks with PLEXUS_HIERARCHY=on;
#     once it runs, rank 1 (node 0) is sent SIGSTOP (frozen: the others time
#     out) or SIGKILL (gone: its connections break). Rank 0 waits for it
#     inside the host, the others across hosts or behind ranks that do: every
#     survivor must report an error naming rank 1 alone as not having reached
#     the allreduce, within PLEXUS_TIMEOUT + 5 s; every launcher exits non-zero.
#
#   netns_job_test.sh restart PLEXUS_RUN PROG [ARGS...]
#     The battery on 3 x 2 ranks, every plexus-run with --max-restarts 1; on
#     the first start rank 3 (node 1) is SIGKILLed before it connects. Every
#     launcher must say it starts its ranks again after rank 3 was killed,
#     then exit 0 saying the job finished after 1 restart; every rank passes
#     every check on the second start (PLEXUS_RESTART_COUNT=1).
#
#   netns_job_test.sh trainer-nodes PLEXUS_RUN TRAINER [ARGS...]
#     plexus-trainer on 3 x 2 ranks, every plexus-run with --nnodes 2:3
#     --max-restarts 1 --last-call 2 and the trainer with --checkpoint in a
#     directory every host sees; after its first epoch, node 2's eth0 goes
#     down. Nodes 0 and 1 must start again on those two (4 ranks), the
#     trainer must resume from its checkpoint on 4 ranks and finish, and both
#     launchers exit 0; node 2's exits non-zero. Skipped (77) when TRAINER is
#     "none".
#
#   netns_job_test.sh ifname PLEXUS_RUN PROG [ARGS...]
#     PLEXUS_SOCKET_IFNAME on one namespace host (lo, eth0 10.A.B.1, and
#     noip0 without an address), 2 ranks of PROG with the master at eth0's
#     address: "lo" makes 127.0.0.1 the local address and the job runs; an
#     unknown name and noip0 are errors that list the interfaces there are.
#
# Exit 0 pass, 1 fail, 77 skipped (no namespaces here).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/netns_lib.sh"

mode=${1:?mode}
local_backend=""
case $mode in hierarchy | hierarchy-uneven)
  local_backend=${2:?local backend}
  shift
  ;;
esac
run=${2:?plexus-run}
shift 2
nodes=3
[ "$mode" = ifname ] && nodes=1
[ "$mode" = trainer ] && nodes=${NET_NODES:-3}
nproc=2
port=29400
timeout_s=10 # PLEXUS_TIMEOUT for the ranks
backend=tcp
run_opts=()  # more plexus-run options
case $mode in
collectives-ucx)
  backend=ucx
  [ -f "${NET_UCX_PLUGIN:-}" ] ||
    netns_skip "libplexus-ucx.so is not built (${NET_UCX_PLUGIN:-no path given}): UCX not found, or -Ducx=disabled"
  ;;
linkdown | hierarchy-stop | hierarchy-kill) run_opts=(--grace 20) ;;
restart) run_opts=(--max-restarts 1) ;;
trainer-nodes) run_opts=(--max-restarts 1 --last-call 2) ;;
hierarchy | hierarchy-uneven)
  [ "$local_backend" != ucx ] || [ -f "${NET_UCX_PLUGIN:-}" ] ||
    netns_skip "libplexus-ucx.so is not built (${NET_UCX_PLUGIN:-no path given}): UCX not found, or -Ducx=disabled"
  ;;
blip) timeout_s=30 ;;
trace) timeout_s=5 ;;
loss) timeout_s=60 ;; # well above TCP's retransmission backoff under loss
delay)
  [ -x "${NET_DELAY_SWITCH:-}" ] || netns_skip "the delay switch is not built (${NET_DELAY_SWITCH:-no path given})"
  timeout_s=60
  ;;
ddp | trainer | trainer-nodes)
  [ "${1:-none}" != none ] || netns_skip "LibTorch was not found when this build was configured (no ddp_check / plexus-trainer; see tests/ddp)"
  timeout_s=60
  ;;
esac

# A host cut off must be found (PLEXUS_TIMEOUT + 5 s) and the survivors'
# join (PLEXUS_TIMEOUT) must give up on it within the test's time.
[ $mode = trainer-nodes ] && timeout_s=10
netns_setup $nodes || { echo "FAIL: setting up the namespaces"; exit 1; }
delay_us=${NET_DELAY_US:-1000}
if [ $mode = delay ] || { [ $mode = trainer ] && [ -n "${NET_DELAY_US:-}" ]; }; then
  if ((nodes < 2)); then
    echo "one host: no link between hosts to delay (its ranks talk over its own loopback)"
  else
    netns_delay_links "$delay_us" "${NET_DELAY_SWITCH:-}" || { echo "FAIL: the delay switch"; exit 1; }
  fi
fi
"$run" --make-token "$NETNS_TMP/token" >/dev/null || { echo "FAIL: --make-token"; exit 1; }

launchers=()
start_node() { # k env...
  local k=$1
  shift
  ip netns exec "${NETNS_HOSTS[$k]}" env PLEXUS_BACKEND=$backend PLEXUS_TIMEOUT=$timeout_s "$@" \
    "$run" --nnodes "${nnodes_opt:-$nodes}" --node-rank "$k" --master-addr "${NETNS_ADDRS[0]}" \
    --master-port $port --token-file "$NETNS_TMP/token" -n $nproc "${run_opts[@]}" "${prog[@]}" \
    >"$NETNS_TMP/out.$k" 2>"$NETNS_TMP/err.$k" &
  launchers[$k]=$!
  NETNS_PIDS+=($!)
}

show() {
  local k
  for ((k = 0; k < nodes; ++k)); do
    echo "--- node $k (${NETNS_HOSTS[$k]}, ${NETNS_ADDRS[$k]}): exit ${NETNS_RC[${launchers[$k]}]:-?}" \
      "after ${NETNS_AT[${launchers[$k]}]:-?} s"
    sed 's/^/  out: /' "$NETNS_TMP/out.$k" | tail -n 12
    grep -v 'local address' "$NETNS_TMP/err.$k" | sed 's/^/  err: /' | tail -n 12
  done
}

fail=0
check() { # condition message
  if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi
}

# The collective battery on 3 x 2 ranks (modes collectives, collectives-ucx,
# loss): every launcher exits 0, every rank passed every check; on tcp, each
# rank's local address is its host's.
battery() { # seconds
  local limit=$1 k l r
  for ((k = 0; k < nodes; ++k)); do
    if [ $k = 2 ]; then
      start_node $k PLEXUS_LOG_LEVEL=debug PLEXUS_SOCKET_IFNAME=eth0 "${node_env[@]}"
    else
      start_node $k PLEXUS_LOG_LEVEL=debug "${node_env[@]}"
    fi
  done
  netns_wait "$limit" "${launchers[@]}"
  show
  for ((k = 0; k < nodes; ++k)); do
    check "[ '${NETNS_RC[${launchers[$k]}]}' = 0 ]" \
      "node $k's plexus-run exited 0 (${NETNS_RC[${launchers[$k]}]}, after ${NETNS_AT[${launchers[$k]}]} s)"
    for ((l = 0; l < nproc; ++l)); do
      r=$((k * nproc + l))
      check "grep -Eq '^\[$r\] rank $r of $((nodes * nproc)) \($backend\): [1-9][0-9]* checks passed, 0 failed' '$NETNS_TMP/out.$k'" \
        "rank $r (node $k) passed every check"
      if [ $backend = ucx ]; then
        check "grep -q '^\[$r\] .*rank $r of $((nodes * nproc)): peers reached over tcp/eth0' '$NETNS_TMP/err.$k'" \
          "rank $r reached its peers over tcp/eth0"
      fi
      [ $backend = tcp ] || continue
      check "grep -q '^\[$r\] .*rank $r of $((nodes * nproc)) .*local address .${NETNS_ADDRS[$k]}.' '$NETNS_TMP/err.$k'" \
        "rank $r's local address is ${NETNS_ADDRS[$k]}"
    done
  done
}

# Waits (up to $1 s) until net_loop_rank's rank 0 has done $2 iterations;
# prints how many it has done.
progress() {
  cat "$NETNS_TMP/loop/progress" 2>/dev/null || echo 0
}
wait_progress() { # seconds iterations
  local deadline=$((SECONDS + $1))
  while (($(progress) < $2)); do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# Rank 0 says the allreduces go in two levels, on which backends.
says_two_level() { # file chunks
  check "grep -q 'allreduce, reduce, broadcast, reduce_scatter and allgather two-level over 3 hosts with .* ranks (inside hosts $local_backend, across hosts tcp, $2 chunks), PLEXUS_HIERARCHY=on' '$1'" \
    "rank 0 says those collectives go in two levels, inside hosts on $local_backend, across them on tcp, in $2 chunks"
}

node_env=()
case $mode in
collectives)
  prog=("$@")
  battery 240
  ;;
trainer-nodes)
  prog=("$@" --checkpoint "$NETNS_TMP/ckpt")
  # Every launcher with --nnodes 2:3 (start_node passes --nnodes $nodes).
  nnodes_opt="2:$nodes"
  for ((k = 0; k < nodes; ++k)); do start_node $k OMP_NUM_THREADS=1; done
  deadline=$((SECONDS + 60))
  until grep -q '^\[0\] epoch 1/[0-9]* done' "$NETNS_TMP/out.0" 2>/dev/null; do
    ((SECONDS < deadline)) || break
    sleep 0.2
  done
  check "grep -q '^\[0\] epoch 1/[0-9]* done' '$NETNS_TMP/out.0'" "the trainer finished its first epoch on 6 ranks"
  ip -n "${NETNS_HOSTS[2]}" link set eth0 down
  echo "node 2's eth0 down at $SECONDS s"
  netns_wait 150 "${launchers[@]}"
  show
  for k in 0 1; do
    p=${launchers[$k]}
    check "[ '${NETNS_RC[$p]}' = 0 ]" "node $k's plexus-run exited 0 (${NETNS_RC[$p]}, after ${NETNS_AT[$p]} s)"
    check "grep -q 'node $k: starting its 2 ranks again (restart 1 of 1)' '$NETNS_TMP/err.$k'" \
      "node $k started its ranks again"
    check "grep -q 'node $k: start 1 on 2 of 3 nodes (0, 1): 4 ranks' '$NETNS_TMP/err.$k'" \
      "node $k's second start has nodes 0 and 1, 4 ranks"
  done
  p=${launchers[2]}
  check "[ '${NETNS_RC[$p]:-0}' != 0 ]" "node 2's plexus-run exited non-zero (${NETNS_RC[$p]:-?})"
  check "grep -Eq '^\[0\] plexus-trainer: resumed from .* after epoch [1-9][0-9]* \(step [0-9]+\), restart 1' '$NETNS_TMP/out.0'" \
    "the trainer resumed from its checkpoint on the second start"
  check "grep -q 'on tcp, 4 rank(s)' '$NETNS_TMP/out.0'" "the second start trained on 4 ranks"
  check "grep -Eq '^\[0\] epoch ([0-9]+)/\\1 done' '$NETNS_TMP/out.0'" "the trainer finished its last epoch"
  ;;
trace)
  prog=("$1" hang 3 10)
  tool=$2
  for ((k = 0; k < nodes; ++k)); do start_node $k PLEXUS_TRACE_DIR="$NETNS_TMP/trace.$k"; done
  netns_wait 90 "${launchers[@]}"
  show
  for ((k = 0; k < nodes; ++k)); do
    p=${launchers[$k]}
    check "[ '${NETNS_RC[$p]:-0}' != 0 ]" "node $k's plexus-run exited non-zero (${NETNS_RC[$p]:-?})"
  done
  check "grep -q 'node 0: collected 4 flight-recorder dump(s) of node(s) 1, 2 into $NETNS_TMP/trace.0' '$NETNS_TMP/err.0'" \
    "node 0 collected nodes 1 and 2's 4 dumps into its directory"
  modes=$(stat -c %a "$NETNS_TMP"/trace.0/rank-*.json 2>/dev/null | sort -u | tr '\n' ' ')
  check "[ '$modes' = '600 ' ]" "node 0's dumps, its own and those it collected, are its user's only (mode ${modes:-none})"
  python3 "$tool" "$NETNS_TMP/trace.0" >"$NETNS_TMP/verdict" 2>&1
  sed 's/^/  plexus-trace: /' "$NETNS_TMP/verdict"
  check "grep -q 'dumps from 6 of 6 ranks' '$NETNS_TMP/verdict'" "plexus-trace read the dumps of all 6 ranks"
  check "grep -Eq '^  rank 3 never posted allreduce #10 on plexus/0 .*; it last finished #9' '$NETNS_TMP/verdict'" \
    "plexus-trace: rank 3 never posted allreduce #10, it last finished #9"
  ;;
restart)
  # Rank 3 dies on the first start: its launcher reports it, node 0 gives
  # the verdict, every node stops its ranks and all start again.
  prog=(sh -c 'if [ "$PLEXUS_RESTART_COUNT" = 0 ] && [ "$RANK" = 3 ]; then kill -9 $$; fi; exec "$0" "$@"' "$@")
  battery 240
  for ((k = 0; k < nodes; ++k)); do
    check "grep -q 'node $k: starting its 2 ranks again (restart 1 of 1) after: rank 3 (node 1.*SIGKILL' '$NETNS_TMP/err.$k'" \
      "node $k's plexus-run started its ranks again after rank 3 was killed"
    check "grep -q 'the job finished after 1 restart' '$NETNS_TMP/err.$k'" \
      "node $k's plexus-run says the job finished after 1 restart"
  done
  ;;
hierarchy)
  prog=("$@")
  node_env=(PLEXUS_HIERARCHY=on PLEXUS_LOCAL_BACKEND=$local_backend)
  battery 240
  says_two_level "$NETNS_TMP/err.0" 2
  ;;
hierarchy-uneven)
  per_host=(3 2 1)
  r=0
  pids=()
  for ((k = 0; k < nodes; ++k)); do
    for ((l = 0; l < ${per_host[$k]}; ++l)); do
      ip netns exec "${NETNS_HOSTS[$k]}" env PLEXUS_BACKEND=tcp PLEXUS_TIMEOUT=$timeout_s \
        PLEXUS_LOG_LEVEL=info PLEXUS_RANK=$r PLEXUS_WORLD_SIZE=6 PLEXUS_LOCAL_RANK=$l \
        PLEXUS_LOCAL_WORLD_SIZE=${per_host[$k]} PLEXUS_MASTER_ADDR="${NETNS_ADDRS[0]}" \
        PLEXUS_MASTER_PORT=$port PLEXUS_TOKEN_FILE="$NETNS_TMP/token" PLEXUS_HIERARCHY=on \
        PLEXUS_LOCAL_BACKEND=$local_backend "$@" >"$NETNS_TMP/out.r$r" 2>"$NETNS_TMP/err.r$r" &
      pids[$r]=$!
      NETNS_PIDS+=($!)
      r=$((r + 1))
    done
  done
  netns_wait 240 "${pids[@]}"
  for ((r = 0; r < 6; ++r)); do
    p=${pids[$r]}
    echo "--- rank $r: exit ${NETNS_RC[$p]:-?} after ${NETNS_AT[$p]:-?} s"
    sed 's/^/  out: /' "$NETNS_TMP/out.r$r" | tail -n 4
    sed 's/^/  err: /' "$NETNS_TMP/err.r$r" | tail -n 4
    check "[ '${NETNS_RC[$p]}' = 0 ]" "rank $r exited 0 (${NETNS_RC[$p]}, after ${NETNS_AT[$p]} s)"
    check "grep -Eq '^rank $r of 6 \(tcp\): [1-9][0-9]* checks passed, 0 failed' '$NETNS_TMP/out.r$r'" \
      "rank $r passed every check"
  done
  says_two_level "$NETNS_TMP/err.r0" 6
  ;;
hierarchy-stop | hierarchy-kill)
  mkdir -p "$NETNS_TMP/loop"
  prog=("$1" "$NETNS_TMP/loop" "${@:2}")
  for ((k = 0; k < nodes; ++k)); do start_node $k PLEXUS_HIERARCHY=on; done
  if ! wait_progress 60 3; then
    netns_wait 1 "${launchers[@]}"
    show
    echo "FAIL: the allreduce loop did not get going within 60 s"
    exit 1
  fi
  victim=$(ip netns pids "${NETNS_HOSTS[0]}" | while read -r p; do
    tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -qx 'RANK=1' && echo $p; done | head -n 1)
  [ -n "$victim" ] || { echo "FAIL: rank 1's process not found"; exit 1; }
  before=$(progress)
  cut=$(date +%s.%N)
  sig=STOP
  [ $mode = hierarchy-kill ] && sig=KILL
  kill -$sig "$victim"
  echo "SIG$sig to rank 1 (pid $victim, node 0) after $before allreduces"
  limit=$((timeout_s + 20 + 15)) # PLEXUS_TIMEOUT + --grace + start-up and teardown
  netns_wait $limit "${launchers[@]}"
  [ $sig = STOP ] && kill -KILL "$victim" 2>/dev/null
  show
  names='ranks? ([0-9]+(, | and ))*[0-9]+( \([^)]*\))? ha(s|ve) not reached'
  for r in 0 2 3 4 5; do
    f=$NETNS_TMP/loop/rank$r.err
    [ -f "$f" ] && echo "rank $r reported $(awk -v c="$cut" '{ printf "%.1f s after the signal:", $1 - c; $1 = ""; print }' "$f")"
    list=$(grep -Eo "$names" "$f" 2>/dev/null | head -n 1 | sed -E 's/ ha(s|ve) not reached//')
    check "[ '$list' = 'rank 1 (node 0)' ]" \
      "rank $r reported an error naming rank 1 alone, and its node, as not having reached the allreduce (it says: '${list:-nothing}')"
    check "[ -f '$f' ] && awk -v c=$cut -v l=$((timeout_s + 5)) '{ exit !(\$1 - c <= l) }' '$f'" \
      "rank $r reported within PLEXUS_TIMEOUT + 5 s ($((timeout_s + 5)) s) of the signal"
  done
  for ((k = 0; k < nodes; ++k)); do
    p=${launchers[$k]}
    check "[ '${NETNS_RC[$p]}' != hung ] && [ '${NETNS_RC[$p]}' != 0 ]" \
      "node $k's plexus-run exited non-zero (${NETNS_RC[$p]}) within $limit s (${NETNS_AT[$p]} s)"
  done
  ;;
collectives-ucx)
  prog=("$@")
  node_env=(UCX_TLS=tcp)
  battery 240
  ;;
delay)
  prog=("$@")
  rtt=$(netns_tcp_rtt_ms 0 2)
  if [ -n "$rtt" ]; then
    check "awk -v r='$rtt' -v d='$delay_us' 'BEGIN { exit !(r * 1000 >= 2 * d) }'" \
      "a TCP round trip from node 0 to node 2 takes $rtt ms, at least 2 x $delay_us us"
  else
    echo "no python3: the round trip is not measured"
  fi
  battery 240
  kill -TERM $(ip netns pids "$NETNS_SWITCH") 2>/dev/null
  sleep 0.3
  sed 's/^/switch: /' "$NETNS_TMP/delay_switch.log"
  check "grep -Eq 'port ${NETNS_HOSTS[0]}: [1-9][0-9]* frames in, [1-9][0-9]* out' '$NETNS_TMP/delay_switch.log'" \
    "the switch forwarded node 0's frames"
  ;;
loss)
  prog=("$@")
  sw=$NETNS_SWITCH
  how=""
  if err=$(tc -n "$sw" qdisc add dev p0 root netem loss 5% 2>&1); then
    how="netem loss 5%"
    for ((k = 1; k < nodes; ++k)); do tc -n "$sw" qdisc add dev "p$k" root netem loss 5% || exit 1; done
  else
    echo "tc netem is not available here ($err): packets are dropped by a token bucket instead"
    tbf=(tbf rate 1gbit burst 64kb limit 96kb)
    if err=$(tc -n "$sw" qdisc add dev p0 root "${tbf[@]}" 2>&1); then
      how="${tbf[*]} (tail drop when TCP's bursts overflow the queue)"
      for ((k = 1; k < nodes; ++k)); do tc -n "$sw" qdisc add dev "p$k" root "${tbf[@]}" || exit 1; done
    else
      netns_skip "tc can neither add netem nor tbf here: $err"
    fi
  fi
  echo "on the bridge's ports p0..p$((nodes - 1)) (towards each host): $how"
  battery 240
  sent=0 dropped=0
  for ((k = 0; k < nodes; ++k)); do
    line=$(tc -s -n "$sw" qdisc show dev "p$k" | grep -m1 'Sent')
    echo "p$k: $line"
    s=$(sed -E 's/.* ([0-9]+) pkt.*/\1/' <<<"$line")
    d=$(sed -E 's/.*dropped ([0-9]+).*/\1/' <<<"$line")
    sent=$((sent + s)) dropped=$((dropped + d))
  done
  echo "packets dropped at the bridge: $dropped of $((sent + dropped))" \
    "($(awk -v d=$dropped -v t=$((sent + dropped)) 'BEGIN { printf "%.2f", t ? 100 * d / t : 0 }') %)"
  check "[ $dropped -gt 0 ]" "packets were dropped ($dropped), and the battery still passed"
  ;;
linkdown | blip)
  mkdir -p "$NETNS_TMP/loop"
  prog=("$1" "$NETNS_TMP/loop" "${@:2}")
  for ((k = 0; k < nodes; ++k)); do start_node $k; done
  if ! wait_progress 60 3; then
    netns_wait 1 "${launchers[@]}"
    show
    echo "FAIL: the allreduce loop did not get going within 60 s"
    exit 1
  fi
  before=$(progress)
  cut=$(date +%s.%N)
  ip -n "${NETNS_HOSTS[1]}" link set eth0 down || { echo "FAIL: cannot set eth0 down"; exit 1; }
  echo "node 1's eth0 set down after $before allreduces"
  if [ $mode = blip ]; then
    sleep 1
    during=$(progress)
    ip -n "${NETNS_HOSTS[1]}" link set eth0 up || { echo "FAIL: cannot set eth0 up"; exit 1; }
    up=$(date +%s.%N)
    echo "node 1's eth0 up again after $(awk -v a="$cut" -v b="$up" 'BEGIN { printf "%.1f", b - a }') s"
    wait_progress 30 $((during + 1))
    echo "the loop moved on $(awk -v a="$up" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s after the link came up"
    check "[ $during -le $((before + 1)) ]" \
      "the blip stopped the loop ($before allreduces before it, $during at its end)"
    ok_after=0
    wait_progress 60 $((before + 20)) && ok_after=1
    after=$(progress)
    touch "$NETNS_TMP/loop/stop"
    netns_wait 60 "${launchers[@]}"
    show
    check "[ $ok_after = 1 ]" "the loop went on after the blip ($before allreduces before, $after when told to stop)"
    for ((k = 0; k < nodes; ++k)); do
      p=${launchers[$k]}
      check "[ '${NETNS_RC[$p]}' = 0 ]" "node $k's plexus-run exited 0 (${NETNS_RC[$p]}, after ${NETNS_AT[$p]} s)"
    done
    n0=$(cat "$NETNS_TMP/loop/rank0.ok" 2>/dev/null)
    for ((r = 0; r < nodes * nproc; ++r)); do
      check "[ -f '$NETNS_TMP/loop/rank$r.ok' ] && [ \"\$(cat '$NETNS_TMP/loop/rank$r.ok')\" = '$n0' ]" \
        "rank $r did $n0 allreduces, every result right"
    done
    check "! ls '$NETNS_TMP/loop/'*.err '$NETNS_TMP/loop/'*.bad >/dev/null 2>&1" "no rank reported an error"
  else
    limit=$((timeout_s + 20 + 15)) # PLEXUS_TIMEOUT + --grace + start-up and teardown
    netns_wait $limit "${launchers[@]}"
    show
    for ((r = 0; r < nodes * nproc; ++r)); do
      f=$NETNS_TMP/loop/rank$r.err
      [ -f "$f" ] && echo "rank $r reported $(awk -v c="$cut" '{ printf "%.1f s after the cut:", $1 - c; $1 = ""; print }' "$f")"
    done
    # Every survivor names node 1's ranks, and them alone: one that timed
    # out itself in its stall report ("ranks 2, 3 (node 1) have not reached
    # ..."), one
    # whose error is a peer's failure passed on (REMOTE) beside it ("... (ranks
    # 2, 3 have not reached ...: the failure above may only have been passed
    # on)"); ranks already in the next collective count as past this one.
    names='ranks? ([0-9]+(, | and ))*[23]((, | and )[0-9]+)*( \([^)]*\))? ha(s|ve) not reached'
    for r in 0 1 4 5; do
      f=$NETNS_TMP/loop/rank$r.err
      list=$(grep -Eo "$names" "$f" 2>/dev/null | head -n 1 | sed -E 's/ ha(s|ve) not reached//')
      check "[ '$list' = 'ranks 2, 3 (node 1)' ]" \
        "rank $r reported an error naming node 1's ranks 2, 3 alone, and their node, as not having reached the allreduce (it says: '${list:-nothing}')"
      check "[ -f '$f' ] && awk -v c=$cut -v l=$((timeout_s + 5)) '{ exit !(\$1 - c <= l) }' '$f'" \
        "rank $r reported within PLEXUS_TIMEOUT + 5 s ($((timeout_s + 5)) s) of the cut"
    done
    for ((k = 0; k < nodes; ++k)); do
      p=${launchers[$k]}
      check "[ '${NETNS_RC[$p]}' != hung ] && [ '${NETNS_RC[$p]}' != 0 ]" \
        "node $k's plexus-run exited non-zero (${NETNS_RC[$p]}) within $limit s (${NETNS_AT[$p]} s)"
      check "[ -z \"\$(ip netns pids ${NETNS_HOSTS[$k]})\" ]" "nothing left running on node $k"
    done
    for k in 0 2; do
      check "grep -Eq '^plexus-run: node 1 \(host [^,]+, ranks 2 and 3\) stopped responding' '$NETNS_TMP/err.$k'" \
        "node $k's plexus-run names node 1 with its host and ranks"
      # After the verdict, what happened here: the first rank to exit (with
      # its node and host), or, when the verdict came first, the ranks stopped.
      check "grep -Eq '^plexus-run: .*(; on node $k, .*rank [0-9]+ \(node $k, host [^,]+, pid [0-9]+\) exited|; stopped 2 ranks here on node $k)' '$NETNS_TMP/err.$k'" \
        "node $k's plexus-run names its own first rank to exit with its node and host, or the ranks it stopped"
    done
  fi
  ;;
ddp | trainer)
  prog=("$@")
  if [ $mode = trainer ] && [ -n "${NET_RATE:-}" ]; then
    for ((k = 0; k < nodes; ++k)); do
      tc -n "$NETNS_SWITCH" qdisc add dev "p$k" root tbf rate "$NET_RATE" burst 256kb latency 50ms ||
        { echo "FAIL: tc tbf rate $NET_RATE"; exit 1; }
    done
    echo "tbf rate $NET_RATE at the bridge's ports p0..p$((nodes - 1))"
  fi
  for ((k = 0; k < nodes; ++k)); do
    start_node $k OMP_NUM_THREADS=1 ${PLEXUS_HIERARCHY:+PLEXUS_LOG_LEVEL=info}
  done
  netns_wait 110 "${launchers[@]}"
  show
  for ((k = 0; k < nodes; ++k)); do
    p=${launchers[$k]}
    check "[ '${NETNS_RC[$p]}' = 0 ]" "node $k's plexus-run exited 0 (${NETNS_RC[$p]}, after ${NETNS_AT[$p]} s)"
  done
  check "! grep -q 'FAILED' '$NETNS_TMP'/out.* '$NETNS_TMP'/err.*" "no rank said FAILED"
  if [ "${PLEXUS_HIERARCHY:-}" = on ]; then
    check "grep -q 'allreduce, reduce, broadcast, reduce_scatter and allgather two-level over $nodes hosts with' '$NETNS_TMP/err.0'" \
      "rank 0 says the allreduces go in two levels (PLEXUS_HIERARCHY=on)"
    if [ $mode = trainer ]; then
      check "grep -Eq '^\[0\] buckets: [1-9][0-9]* two-level, 0 flat; two-level over' '$NETNS_TMP/out.0'" \
        "the trainer says every bucket went in two levels"
    fi
  fi
  if [ $mode = ddp ]; then
    check "grep -q '^\[0\] ddp_check equivalence passed on $((nodes * nproc)) rank(s)' '$NETNS_TMP/out.0'" \
      "rank 0: DDP on $((nodes * nproc)) ranks across $nodes hosts equals one process on the $((nodes * nproc))-fold batch"
  else
    summary=$(grep -m1 '^\[0\] epoch [0-9]*/[0-9]* done: .*step [0-9.]* ms median' "$NETNS_TMP/out.0")
    check "[ -n '$summary' ]" "rank 0 printed its epoch summary on $((nodes * nproc)) ranks"
    grep -q "on tcp, $((nodes * nproc)) rank(s)" "$NETNS_TMP/out.0" ||
      check false "the trainer ran on tcp with $((nodes * nproc)) ranks"
    echo "step time: $(sed -E 's/.*step ([0-9.]+) ms median.*/\1/' <<<"$summary") ms median" \
      "($nodes host(s) x $nproc ranks, tcp${NET_RATE:+, tbf rate $NET_RATE}${NET_DELAY_US:+, delay $NET_DELAY_US us})"
  fi
  ;;
kill)
  prog=("$@")
  for ((k = 0; k < nodes; ++k)); do start_node $k; done
  # Running once node 1's ranks have connected to ranks on other hosts: TCP
  # connections between two different addresses of ours, not to the store.
  deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)); do
    n=$(ip netns exec "${NETNS_HOSTS[1]}" ss -Htn state established 2>/dev/null |
      grep -v ":$port\b" | grep -c "${NETNS_ADDRS[1]}")
    ((n >= 4)) && break
    sleep 0.2
  done
  sleep 1
  for ((k = 0; k < nodes; ++k)); do
    check "kill -0 ${launchers[$k]} 2>/dev/null" "node $k's plexus-run is running before the kill"
    # ss -Htan: "LISTEN 0 4096 10.231.5.1:29400 0.0.0.0:*", "ESTAB 0 0
    # 10.231.5.1:29400 10.231.5.2:41234": the local address is field 4. The
    # TCP backend listens only while its mesh connects, so the connections
    # are checked too: every one made here starts from this host's address.
    sockets=$(ip netns exec "${NETNS_HOSTS[$k]}" ss -Htan | awk '{ print $1 "@" $4 }')
    stray=$(grep -v "@${NETNS_ADDRS[$k]}:" <<<"$sockets" | tr '\n' ' ')
    check "[ -n '$sockets' ] && [ -z '$stray' ]" \
      "node $k: every TCP socket (listening or connected, $(wc -l <<<"$sockets")) is on ${NETNS_ADDRS[$k]}${stray:+ (not: $stray)}"
  done
  ranks_1=$(ip netns pids "${NETNS_HOSTS[1]}" | grep -vx "${launchers[1]}" | tr '\n' ' ')
  echo "SIGKILL to node 1's plexus-run (pid ${launchers[1]}; its ranks: $ranks_1)"
  kill -KILL "${launchers[1]}"
  netns_wait $((timeout_s + 10)) "${launchers[0]}" "${launchers[2]}" "${launchers[1]}"
  show
  for k in 0 2; do
    p=${launchers[$k]}
    check "[ '${NETNS_RC[$p]}' != hung ] && [ '${NETNS_RC[$p]}' != 0 ]" \
      "node $k's plexus-run exited non-zero (${NETNS_RC[$p]}) within $((timeout_s + 10)) s (${NETNS_AT[$p]} s)"
    check "grep -Eq '^plexus-run: node 1 \(host [^,]+, ranks 2 and 3\) stopped responding' '$NETNS_TMP/err.$k'" \
      "node $k's plexus-run names node 1 with its host and ranks"
    check "grep -Eq '^plexus-run: .*; on node $k, .*rank [0-9]+ \(node $k, host [^,]+, pid [0-9]+\) ' '$NETNS_TMP/err.$k'" \
      "node $k's plexus-run names its own first rank to exit with its node and host"
    check "[ -z \"\$(ip netns pids ${NETNS_HOSTS[$k]})\" ]" "nothing left running on node $k"
  done
  check "[ -z \"\$(ip netns pids ${NETNS_HOSTS[1]})\" ]" "node 1's ranks died with their launcher"
  ;;
ifname)
  ns=${NETNS_HOSTS[0]}
  ip -n "$ns" link add noip0 type veth peer name noip1 && ip -n "$ns" link set noip0 up || {
    echo "FAIL: cannot add noip0 (a veth without an address)"
    exit 1
  }
  prog=("$@")
  lo_rc=0
  ip netns exec "$ns" env PLEXUS_BACKEND=tcp PLEXUS_TIMEOUT=$timeout_s PLEXUS_LOG_LEVEL=debug \
    PLEXUS_SOCKET_IFNAME=lo "$run" --timeout 60 --master-addr "${NETNS_ADDRS[0]}" -n 2 "${prog[@]}" \
    >"$NETNS_TMP/out.lo" 2>"$NETNS_TMP/err.lo" || lo_rc=$?
  sed 's/^/  out: /' "$NETNS_TMP/out.lo"
  grep 'local address' "$NETNS_TMP/err.lo" | sed 's/^/  err: /'
  check "[ $lo_rc = 0 ]" "PLEXUS_SOCKET_IFNAME=lo: the job ran (exit $lo_rc)"
  check "[ \$(grep -c \"local address '127.0.0.1' (PLEXUS_SOCKET_IFNAME=lo)\" '$NETNS_TMP/err.lo') = 2 ]" \
    "PLEXUS_SOCKET_IFNAME=lo: both ranks' local address is 127.0.0.1"
  for name in nosuch0 noip0; do
    rc=0
    ip netns exec "$ns" env PLEXUS_BACKEND=tcp PLEXUS_TIMEOUT=$timeout_s \
      PLEXUS_SOCKET_IFNAME=$name "$run" --timeout 60 --master-addr "${NETNS_ADDRS[0]}" -n 2 \
      "${prog[@]}" >"$NETNS_TMP/out.$name" 2>"$NETNS_TMP/err.$name" || rc=$?
    sed 's/^/  err: /' "$NETNS_TMP/err.$name" | head -n 6
    check "[ $rc != 0 ]" "PLEXUS_SOCKET_IFNAME=$name: the job fails (exit $rc)"
    why="there is no such interface here"
    [ $name = noip0 ] && why="that interface has no IPv4 address"
    check "grep -q \"PLEXUS_SOCKET_IFNAME='$name': $why; the interfaces here are: .*lo (127.0.0.1).*eth0 (${NETNS_ADDRS[0]})\" '$NETNS_TMP/err.$name'" \
      "PLEXUS_SOCKET_IFNAME=$name: '$why', listing lo and eth0 with their addresses"
    check "grep -q 'noip0 (no IPv4)' '$NETNS_TMP/err.$name'" \
      "PLEXUS_SOCKET_IFNAME=$name: noip0 listed as having no IPv4 address"
  done
  ;;
*)
  echo "unknown mode '$mode'"
  exit 2
  ;;
esac
exit $fail
