#!/usr/bin/env bash
# The collective battery on the mpi backend across 3 network-namespace hosts
# (netns_lib.sh) x 2 ranks, launched by Open MPI's mpirun the way it launches
# across machines: its rsh launcher, pointed at `ip netns exec` instead of ssh.
#
#   netns_mpi_test.sh MPIRUN MPI_PLUGIN PROG [ARGS...]
#
# mpirun runs in host 0's namespace; the hostfile holds the hosts' addresses
# (2 slots each, ranks 0-1 on host 0, 2-3 on host 1, 4-5 on host 2, or NET_SLOTS);
# plm_rsh_agent is a script that maps an address to its namespace and runs
# the command there under the host's own name (`ip netns exec NS unshare
# --uts sh -c ...`, as sshd on that machine would), which is how the orted
# daemons of hosts 1 and 2 start. MPI's traffic goes by TCP over eth0 (btl
# tcp,self, ranks on one host included). Plexus' store (its
# host side joins one under every launcher) is hosted by rank 0 at host 0's
# address; the job secret comes from a file (PLEXUS_TOKEN_FILE).
#
# NET_BACKEND=tcp NET_ENV="PLEXUS_HIERARCHY=on PLEXUS_LOCAL_BACKEND=mpi": the
# same launch with the tcp backend across hosts and mpi inside them (the
# two-level allreduce; every variable of NET_ENV is passed to the ranks);
# rank 0 must then say so. NET_SLOTS="3 2 1": that many ranks on each host
# (default 2 on each).
#
# Pass: mpirun exits 0; each of the 6 ranks reports its checks passed, none
# failed (the battery compares results bit for bit, so they are those of the
# single-host run); the agent started the daemons of hosts 1 and 2; mpirun's
# map puts 2 ranks on each host. Exit 77 (skipped, with the reason) without
# namespaces, mpirun, the mpi plugin, or when this Open MPI cannot start a
# process on the namespace hosts this way.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/netns_lib.sh"

mpirun=${1:?mpirun}
plugin=${2:?mpi plugin}
shift 2
nodes=3
read -ra slots <<<"${NET_SLOTS:-2 2 2}"
host_of=()  # rank -> host, as --map-by slot fills the hostfile's slots
for ((k = 0; k < nodes; ++k)); do
  for ((l = 0; l < ${slots[$k]}; ++l)); do host_of+=($k); done
done
np=${#host_of[@]}
port=29400
backend=${NET_BACKEND:-mpi}
read -ra net_env <<<"${NET_ENV:-}"
net_x=()
for v in "${net_env[@]}"; do net_x+=(-x "${v%%=*}"); done

[ -x "$mpirun" ] || netns_skip "mpirun not found (install openmpi-bin)"
[ -f "$plugin" ] || netns_skip "libplexus-mpi.so is not built ($plugin): no MPI found, or -Dmpi=disabled"
command -v timeout >/dev/null || netns_skip "no timeout(1)"

netns_setup $nodes || { echo "FAIL: setting up the namespaces"; exit 1; }
od -An -N32 -tx1 /dev/urandom | tr -d ' \n' >"$NETNS_TMP/token" && chmod 600 "$NETNS_TMP/token"

netns_mpirun_setup "${slots[*]}"
opts=("${NETNS_MPIRUN_OPTS[@]}")

# Can this Open MPI start processes on the namespace hosts this way at all?
if ! probe=$(netns_in_host0 60 "$mpirun" "${opts[@]}" -np $np --map-by slot \
  sh -c 'echo "$OMPI_COMM_WORLD_RANK $(ip -4 -o addr show dev eth0 | awk "{print \$4}")"' 2>&1); then
  echo "$probe" | tail -n 20 | sed 's/^/  probe: /'
  netns_skip "$mpirun cannot start processes on the namespace hosts through an rsh agent (ip netns exec)"
fi
echo "where each rank runs (rank, its eth0 address):"
sort -n <<<"$probe" | sed 's/^/  /'

fail=0
check() { # condition message
  if eval "$1"; then echo "ok: $2"; else echo "FAIL: $2"; fail=1; fi
}
for ((r = 0; r < np; ++r)); do
  k=${host_of[$r]}
  check "grep -Eq '^$r ${NETNS_ADDRS[$k]//./\\.}/' <<<\"\$probe\"" "rank $r runs on host $k (${NETNS_ADDRS[$k]})"
done

start=$(date +%s)
rc=0
netns_in_host0 240 env PLEXUS_BACKEND=$backend PLEXUS_TIMEOUT=60 PLEXUS_MASTER_ADDR="${NETNS_ADDRS[0]}" \
  PLEXUS_MASTER_PORT=$port PLEXUS_TOKEN_FILE="$NETNS_TMP/token" PLEXUS_LOG_LEVEL=info "${net_env[@]}" \
  "$mpirun" "${opts[@]}" -np $np --map-by slot --display-map \
  -x PLEXUS_BACKEND -x PLEXUS_TIMEOUT -x PLEXUS_MASTER_ADDR -x PLEXUS_MASTER_PORT -x PLEXUS_TOKEN_FILE \
  -x PLEXUS_LOG_LEVEL "${net_x[@]}" "$@" >"$NETNS_TMP/out" 2>&1 || rc=$?
elapsed=$(($(date +%s) - start))
echo "--- mpirun exited $rc after ${elapsed} s; its output:"
grep -v '^ *$' "$NETNS_TMP/out" | tail -n 40 | sed 's/^/  /'
echo "--- the rsh agent's calls:"
cut -c1-160 "$NETNS_TMP/agent.log" | sed 's/^/  /'

check "[ $rc = 0 ]" "mpirun exited 0 ($rc, after $elapsed s)"
for ((r = 0; r < np; ++r)); do
  check "grep -Eq '^rank $r of $np \($backend\): [1-9][0-9]* checks passed, 0 failed' '$NETNS_TMP/out'" \
    "rank $r (host ${host_of[$r]}) passed every check"
done
for ((k = 1; k < nodes; ++k)); do
  check "grep -q '^${NETNS_ADDRS[$k]} -> ${NETNS_HOSTS[$k]}: .*orted' '$NETNS_TMP/agent.log'" \
    "the agent started host $k's orted in ${NETNS_HOSTS[$k]}"
done
if grep -q 'PLEXUS_HIERARCHY=on' <<<"${NET_ENV:-}"; then
  lcm=1
  gcd() { local a=$1 b=$2; while ((b)); do set -- $b $((a % b)); a=$1 b=$2; done; echo $a; }
  for n in "${slots[@]}"; do ((n > 1)) && lcm=$((lcm * n / $(gcd $lcm $n))); done
  layout=$(IFS=,; echo "${slots[*]}" | sed 's/,/, /g')
  check "grep -q 'allreduce, reduce, broadcast, reduce_scatter and allgather two-level over 3 hosts with $layout ranks (inside hosts mpi, across hosts $backend, $lcm chunks)' '$NETNS_TMP/out'" \
    "rank 0 says those collectives go in two levels, inside hosts on mpi, across them on $backend, in $lcm chunks"
fi
exit $fail
