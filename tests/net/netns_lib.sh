# Network-namespace hosts for tests, sourced by the tests in this directory.
#
# netns_setup N makes N "hosts": network namespaces <prefix>h0..h<N-1>, each
# with lo and one eth0 whose other end is a port of bridge br0 in a namespace
# of its own (<prefix>sw), and a private address 10.A.B.(k+1)/24. Nothing is
# added to the root namespace, so the tests' traffic never leaves the
# namespaces and only addresses made here are ever contacted. The prefix holds
# the shell's pid ("pxn12345"), so parallel tests never share a name; each
# has its own bridge, so they cannot collide on addresses either, and the
# subnet is picked among ones the root namespace does not use (the hosts see
# only their own, but a reader of `ip addr` should not be confused).
#
# Everything is removed on exit, whatever the exit (trap): the processes left
# in these namespaces (ours: nothing else runs there) are killed, then the
# namespaces, which takes their interfaces with them.
#
# Where namespaces cannot be made (not root, no `ip`, no permission inside a
# container) netns_setup exits 77, which meson counts as skipped, with a reason.

NETNS_PREFIX="pxn$$"
NETNS_SWITCH=""
NETNS_HOSTS=()   # namespace of host k
NETNS_ADDRS=()   # its address
NETNS_PIDS=()    # processes the test started, killed on exit
NETNS_TMP=""

netns_skip() {
  echo "skipped: $*"
  exit 77
}

netns_cleanup() {
  local p ns
  for p in "${NETNS_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for ns in "${NETNS_HOSTS[@]}" "$NETNS_SWITCH"; do
    [ -n "$ns" ] || continue
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  done
  [ -n "$NETNS_TMP" ] && rm -rf "$NETNS_TMP"
  return 0
}

# 10.A.B: A from 231 up, the first that no address or route of the root
# namespace uses; B from our pid.
netns_pick_subnet() {
  local a used
  used=$( (ip -4 -o addr show; ip -4 route show) 2>/dev/null)
  for a in 231 232 233 234 235 236 237 238 239; do
    if ! grep -Eq "(^|[^0-9.])10\.$a\." <<<"$used"; then
      echo "10.$a.$(($$ % 250 + 1))"
      return 0
    fi
  done
  return 1
}

netns_setup() {
  local n=$1 k ns subnet err
  command -v ip >/dev/null 2>&1 || netns_skip "no 'ip' command (iproute2)"
  [ "$(id -u)" = 0 ] || netns_skip "network namespaces need root (uid $(id -u))"
  subnet=$(netns_pick_subnet) || netns_skip "10.231-239.x.x are all in use here"
  NETNS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/plexus-netns.XXXXXX") || exit 1
  trap netns_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  NETNS_SWITCH="${NETNS_PREFIX}sw"
  if ! err=$(ip netns add "$NETNS_SWITCH" 2>&1); then
    NETNS_SWITCH=""
    netns_skip "'ip netns add' is not allowed here: $err"
  fi
  if ! err=$(ip -n "$NETNS_SWITCH" link add br0 type bridge 2>&1); then
    netns_skip "cannot make a bridge in a namespace: $err"
  fi
  ip -n "$NETNS_SWITCH" link set br0 up || return 1
  for ((k = 0; k < n; ++k)); do
    ns="${NETNS_PREFIX}h$k"
    ip netns add "$ns" || return 1
    NETNS_HOSTS+=("$ns")
    NETNS_ADDRS+=("$subnet.$((k + 1))")
    if ! err=$(ip -n "$NETNS_SWITCH" link add "p$k" type veth peer name eth0 netns "$ns" 2>&1); then
      netns_skip "cannot make a veth pair: $err"
    fi
    ip -n "$NETNS_SWITCH" link set "p$k" master br0 up || return 1
    ip -n "$ns" addr add "$subnet.$((k + 1))/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up || return 1
    ip -n "$ns" link set lo up || return 1
  done
  echo "hosts: ${NETNS_HOSTS[*]} at ${NETNS_ADDRS[*]} (bridge in $NETNS_SWITCH)"
}

# netns_wait SECONDS PID...: waits until every PID has exited or SECONDS have
# passed; sets NETNS_RC[pid] to each exit status (or "hung") and NETNS_AT[pid]
# to the seconds it took. Never waits longer.
declare -A NETNS_RC NETNS_AT
netns_wait() {
  local limit=$1 start now p rc pending
  shift
  start=$(date +%s.%N)
  while :; do
    pending=0
    for p in "$@"; do
      [ -n "${NETNS_RC[$p]:-}" ] && continue
      if kill -0 "$p" 2>/dev/null && [ "$(ps -o stat= -p "$p" 2>/dev/null | cut -c1)" != Z ]; then
        pending=1
        continue
      fi
      wait "$p"
      rc=$?
      NETNS_RC[$p]=$rc
      NETNS_AT[$p]=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    done
    [ $pending = 0 ] && return 0
    now=$(date +%s.%N)
    if awk -v a="$start" -v b="$now" -v l="$limit" 'BEGIN { exit !(b - a >= l) }'; then
      for p in "$@"; do
        if [ -z "${NETNS_RC[$p]:-}" ]; then
          NETNS_RC[$p]=hung
          NETNS_AT[$p]=$limit
          kill -KILL "$p" 2>/dev/null
        fi
      done
      return 1
    fi
    sleep 0.1
  done
}

# netns_mpirun_setup SLOTS: Open MPI's mpirun across the hosts, its rsh
# launcher pointed at `ip netns exec` instead of ssh. Writes an agent script
# ("AGENT HOST COMMAND...": runs the shell command line COMMAND, as ssh would
# pass it, in the namespace of the host whose address is HOST, under that
# host's own host name; every call is logged to $NETNS_TMP/agent.log) and a
# hostfile (the hosts' addresses, SLOTS slots each), and sets
# NETNS_MPIRUN_OPTS to the mpirun options that use them, with MPI's and Open
# MPI's own traffic on eth0 by TCP (btl tcp,self). Run mpirun in host 0's
# namespace (netns_in_host0).
#
# Why a host name each (a UTS namespace, `unshare --uts`): Open MPI names a
# daemon's session directory after the host name and the job, so daemons
# that share both share the directory, and its hwloc topology file. With the
# one name of this machine, one of the three daemons died at start-up in
# about 1 launch of 10 and mpirun waited for it forever (8 hangs in 85
# launches; none in 90 with a name per host).
NETNS_MPIRUN_OPTS=()
netns_mpirun_setup() { # SLOTS: one number for every host, or one per host ("3 2 1")
  local -a slots=($1)
  local k agent=$NETNS_TMP/netns-rsh hostfile=$NETNS_TMP/hostfile
  command -v unshare >/dev/null || netns_skip "no unshare(1) (util-linux) to give each host its name"
  : >"$hostfile"
  {
    echo '#!/bin/sh'
    echo 'host=$1; shift'
    echo 'case $host in'
    for ((k = 0; k < ${#NETNS_HOSTS[@]}; ++k)); do
      echo "${NETNS_ADDRS[$k]}) ns=${NETNS_HOSTS[$k]} ;;"
      echo "${NETNS_ADDRS[$k]} slots=${slots[$k]:-${slots[0]}}" >>"$hostfile"
    done
    echo '*) echo "netns-rsh: unknown host $host" >&2; exit 255 ;;'
    echo 'esac'
    echo "echo \"\$host -> \$ns: \$*\" >>'$NETNS_TMP/agent.log'"
    echo 'exec ip netns exec "$ns" unshare --uts /bin/sh -c "hostname $ns && exec /bin/sh -c \"\$0\"" "$*"'
  } >"$agent"
  chmod +x "$agent"
  # Every namespace shares /tmp: each job gets session directories of its own.
  mkdir -p "$NETNS_TMP/ompi"
  NETNS_MPIRUN_OPTS=(--allow-run-as-root --oversubscribe --bind-to none --hostfile "$hostfile"
    --mca orte_tmpdir_base "$NETNS_TMP/ompi"
    --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1
    --mca oob_tcp_if_include eth0 --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include eth0)
}

# netns_in_host0 SECONDS COMMAND...: COMMAND in host 0's namespace, under its
# own host name (as the agent of netns_mpirun_setup runs the other hosts'),
# killed (timeout(1)) after SECONDS.
netns_in_host0() {
  local limit=$1
  shift
  ip netns exec "${NETNS_HOSTS[0]}" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' \
    "${NETNS_HOSTS[0]}" timeout -k 5 "$limit" "$@"
}

# netns_delay_links DELAY_US SWITCH_PROG: after netns_setup, every host's eth0
# becomes a port of SWITCH_PROG (tests/net/delay_switch.cpp), a user-space
# switch that holds each frame DELAY_US microseconds, instead of the bridge:
# tc netem's `delay` for kernels without sch_netem. The hosts keep their
# addresses; the switch runs in the switch namespace (so cleanup kills it) and
# logs to $NETNS_TMP/delay_switch.log. Returns non-zero, saying why, if the
# switch cannot be made.
netns_delay_links() {
  local delay_us=$1 prog=$2 k ready=$NETNS_TMP/delay_switch.ready
  for ((k = 0; k < ${#NETNS_HOSTS[@]}; ++k)); do
    ip -n "$NETNS_SWITCH" link del "p$k" 2>/dev/null # takes the host's eth0 with it
  done
  ip netns exec "$NETNS_SWITCH" "$prog" --delay-us "$delay_us" --ready "$ready" "${NETNS_HOSTS[@]}" \
    >"$NETNS_TMP/delay_switch.log" 2>&1 &
  NETNS_PIDS+=($!)
  for ((k = 0; k < 100; ++k)); do
    [ -e "$ready" ] && break
    kill -0 $! 2>/dev/null || break
    sleep 0.05
  done
  if [ ! -e "$ready" ]; then
    echo "the delay switch did not start: $(tail -n 3 "$NETNS_TMP/delay_switch.log")"
    return 1
  fi
  for ((k = 0; k < ${#NETNS_HOSTS[@]}; ++k)); do
    ip -n "${NETNS_HOSTS[$k]}" addr add "${NETNS_ADDRS[$k]}/24" dev eth0 || return 1
    # A longer queue than tun's 500 frames: the kernel drops at the tap when
    # the switch falls behind, and TCP's bursts at a few GB/s are longer.
    ip -n "${NETNS_HOSTS[$k]}" link set eth0 txqueuelen 10000 up || return 1
  done
  echo "links: $(head -n 1 "$NETNS_TMP/delay_switch.log")"
}

# netns_tcp_rtt_ms A B: the median round trip, in ms, of a 1-byte exchange
# over TCP from host A to host B (indices), with python3 (ping is not always
# installed); prints nothing when python3 is missing or the exchange fails.
netns_tcp_rtt_ms() {
  command -v python3 >/dev/null || return 0
  ip netns exec "${NETNS_HOSTS[$2]}" timeout 10 python3 -c '
import socket, sys
s = socket.create_server((sys.argv[1], 0)); print(s.getsockname()[1], flush=True)
c, _ = s.accept()
while c.recv(1): c.sendall(b"q")' "${NETNS_ADDRS[$2]}" | {
    read -r port || exit 0
    ip netns exec "${NETNS_HOSTS[$1]}" timeout 10 python3 -c '
import socket, sys, time
c = socket.create_connection((sys.argv[1], int(sys.argv[2])))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t = []
for i in range(11):
    a = time.perf_counter(); c.sendall(b"p"); c.recv(1); t.append(time.perf_counter() - a)
print("%.3f" % (sorted(t)[5] * 1e3))' "${NETNS_ADDRS[$2]}" "$port"
  }
}
