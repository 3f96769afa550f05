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
#   netns_job_test.sh kill PLEXUS_RUN PROG [ARGS...]
#     PROG runs for long; once the ranks are connected, node 1's plexus-run is
#     SIGKILLed. Nodes 0 and 2 must exit non-zero within PLEXUS_TIMEOUT + 10 s,
#     naming node 1, and leave no process behind in their namespaces.
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
run=${2:?plexus-run}
shift 2
nodes=3
[ "$mode" = ifname ] && nodes=1
nproc=2
port=29400
timeout_s=10 # PLEXUS_TIMEOUT for the ranks

netns_setup $nodes || { echo "FAIL: setting up the namespaces"; exit 1; }
"$run" --make-token "$NETNS_TMP/token" >/dev/null || { echo "FAIL: --make-token"; exit 1; }

launchers=()
start_node() { # k env...
  local k=$1
  shift
  ip netns exec "${NETNS_HOSTS[$k]}" env PLEXUS_BACKEND=tcp PLEXUS_TIMEOUT=$timeout_s "$@" \
    "$run" --nnodes $nodes --node-rank "$k" --master-addr "${NETNS_ADDRS[0]}" \
    --master-port $port --token-file "$NETNS_TMP/token" -n $nproc "${prog[@]}" \
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

case $mode in
collectives)
  prog=("$@")
  for ((k = 0; k < nodes; ++k)); do
    if [ $k = 2 ]; then
      start_node $k PLEXUS_LOG_LEVEL=debug PLEXUS_SOCKET_IFNAME=eth0
    else
      start_node $k PLEXUS_LOG_LEVEL=debug
    fi
  done
  netns_wait 240 "${launchers[@]}"
  show
  for ((k = 0; k < nodes; ++k)); do
    check "[ '${NETNS_RC[${launchers[$k]}]}' = 0 ]" "node $k's plexus-run exited 0"
    for ((l = 0; l < nproc; ++l)); do
      r=$((k * nproc + l))
      check "grep -Eq '^\[$r\] rank $r of $((nodes * nproc)) \(tcp\): [1-9][0-9]* checks passed, 0 failed' '$NETNS_TMP/out.$k'" \
        "rank $r (node $k) passed every check"
      check "grep -q '^\[$r\] .*rank $r of $((nodes * nproc)) .*local address .${NETNS_ADDRS[$k]}.' '$NETNS_TMP/err.$k'" \
        "rank $r's local address is ${NETNS_ADDRS[$k]}"
    done
  done
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
    check "grep -q '^plexus-run: node 1 .*stopped responding' '$NETNS_TMP/err.$k'" \
      "node $k's plexus-run names node 1"
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
