# A real Slurm cluster of its own for a test, sourced by the tests in this
# directory: Debian's slurm-wlm and munge (scripts/install-slurm.sh), nothing
# simulated.
#
# slurm_cluster_setup NODES CPUS makes NODES network-namespace hosts
# (tests/net/netns_lib.sh), each a Slurm node <prefix>n<k> of CPUS CPUs with a
# slurmd of its own; host 0 also runs the controller (slurmctld). A munged of
# the test's own (its own key and socket) authenticates them. Every file the
# cluster writes (configuration, state, spool, logs, the hosts file that
# names its nodes) is under $NETNS_TMP/slurm, and everything it started is
# killed on exit (netns_cleanup).
#
# slurm_in_host0 SECONDS COMMAND... runs a Slurm client (srun, sbatch,
# squeue...) on host 0, killed after SECONDS: the way a user on the cluster's
# login node would.
#
# Where Slurm cannot start (no slurmctld, no namespaces, a daemon that does
# not come up) the test exits 77 with the reason, which meson counts as skipped.

SLURM_LIB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../net/netns_lib.sh
. "$SLURM_LIB_DIR/../net/netns_lib.sh"

SLURM_NODES=()   # node name of host k
SLURM_DIR=""

slurm_show_logs() {
  local f
  for f in "$SLURM_DIR"/*.log; do
    [ -e "$f" ] || continue
    echo "--- $(basename "$f") (last 15 lines)"
    tail -n 15 "$f"
  done
}

slurm_cluster_setup() {
  local n=$1 cpus=$2 k prog err
  for prog in slurmctld slurmd srun sbatch sinfo munged nsenter unshare; do
    command -v "$prog" >/dev/null 2>&1 ||
      netns_skip "no $prog here (Slurm: scripts/install-slurm.sh installs slurm-wlm and munge)"
  done
  netns_setup "$n" || exit 1
  SLURM_DIR=$NETNS_TMP/slurm
  mkdir -p "$SLURM_DIR/state" "$SLURM_DIR/munge" && chmod 700 "$SLURM_DIR/munge"
  for ((k = 0; k < n; ++k)); do
    SLURM_NODES+=("${NETNS_PREFIX}n$k")
    mkdir -p "$SLURM_DIR/spool/${SLURM_NODES[$k]}"
  done
  # Host names: every host knows every node by address (slurm_on_host lays
  # this file over /etc/hosts).
  for ((k = 0; k < n; ++k)); do echo "${NETNS_ADDRS[$k]} ${SLURM_NODES[$k]}"; done \
    >"$SLURM_DIR/hosts"
  echo "127.0.0.1 localhost" >>"$SLURM_DIR/hosts"

  # munge: a key of our own, a daemon of our own on a socket of our own (seen
  # at the default path on the nodes: slurm_on_host).
  # /run/munge is only a mount point here (MUNGE's own place, empty when no
  # munged runs). It is left behind: tests running at once share it, and one
  # that removed it would pull it from under the others (mount exits 32).
  mkdir -p /run/munge || netns_skip "cannot make /run/munge"
  head -c 1024 /dev/urandom >"$SLURM_DIR/munge/munge.key" && chmod 400 "$SLURM_DIR/munge/munge.key"
  munged --force --foreground --socket="$SLURM_DIR/munge/munge.socket.2" \
    --key-file="$SLURM_DIR/munge/munge.key" --pid-file="$SLURM_DIR/munge/munged.pid" \
    --seed-file="$SLURM_DIR/munge/munged.seed" --log-file="$SLURM_DIR/munged.log" 2>/dev/null &
  NETNS_PIDS+=($!)
  disown $!

  local nodes
  nodes=$(
    IFS=,
    echo "${SLURM_NODES[*]}"
  )
  cat >"$SLURM_DIR/slurm.conf" <<EOF
ClusterName=${NETNS_PREFIX}
SlurmctldHost=${SLURM_NODES[0]}(${NETNS_ADDRS[0]})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SLURM_DIR/munge/munge.socket.2
CredType=cred/munge
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool/%n
TmpFS=$SLURM_DIR/spool/%n
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd-%n.pid
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
SlurmdLogFile=$SLURM_DIR/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=5
MessageTimeout=10
NodeName=DEFAULT CPUs=$cpus State=UNKNOWN
EOF
  for ((k = 0; k < n; ++k)); do
    echo "NodeName=${SLURM_NODES[$k]} NodeAddr=${NETNS_ADDRS[$k]}" >>"$SLURM_DIR/slurm.conf"
  done
  echo "PartitionName=test Nodes=$nodes Default=YES MaxTime=INFINITE State=UP" \
    >>"$SLURM_DIR/slurm.conf"
  export SLURM_CONF=$SLURM_DIR/slurm.conf

  for ((k = 0; k < 50; ++k)); do
    [ -S "$SLURM_DIR/munge/munge.socket.2" ] && break
    sleep 0.1
  done
  [ -S "$SLURM_DIR/munge/munge.socket.2" ] || { slurm_show_logs; netns_skip "munged did not start"; }

  slurm_on_host 0 slurmctld -D -i -f "$SLURM_CONF" >>"$SLURM_DIR/slurmctld.out" 2>&1 &
  for ((k = 0; k < n; ++k)); do
    slurm_on_host "$k" slurmd -D -N "${SLURM_NODES[$k]}" -f "$SLURM_CONF" \
      >>"$SLURM_DIR/slurmd-${SLURM_NODES[$k]}.out" 2>&1 &
  done
  local idle="" deadline=$(($(date +%s) + 30))
  while [ "$(date +%s)" -lt $deadline ]; do
    idle=$(slurm_in_host0 5 sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
    [ "$idle" = "$n" ] && break
    sleep 0.1
  done
  if [ "$idle" != "$n" ]; then
    slurm_in_host0 10 sinfo -N 2>&1
    slurm_show_logs
    netns_skip "the Slurm cluster did not come up in 30 s ($idle of $n nodes idle)"
  fi
  echo "slurm: $n node(s) ${SLURM_NODES[*]}, $cpus CPUs each, controller on ${SLURM_NODES[0]} ($(slurmctld -V))"
}

# slurm_on_host K COMMAND...: COMMAND as on node K: in its network namespace,
# under its node name, with the cluster's hosts file as /etc/hosts and its
# munged's socket at MUNGE's default place, /run/munge/munge.socket.2 (a mount
# namespace of its own, inherited by everything it starts: slurmd's tasks).
# Not `ip netns exec`: that remounts /sys, and slurmd wants the cgroup
# file systems under /sys/fs/cgroup that this machine has.
slurm_on_host() {
  local k=$1
  shift
  nsenter --net="/run/netns/${NETNS_HOSTS[$k]}" unshare --mount --uts --propagation private \
    /bin/sh -c 'mount --bind "$0" /etc/hosts && mount --bind "$1" /run/munge && hostname "$2" &&
      shift 2 && exec "$@"' \
    "$SLURM_DIR/hosts" "$SLURM_DIR/munge" "${SLURM_NODES[$k]}" "$@"
}

slurm_in_host0() {
  local limit=$1
  shift
  slurm_on_host 0 timeout -k 5 "$limit" "$@"
}
