#!/usr/bin/env bash
# Runs a program on NP ranks of this host under Open MPI's mpirun, the way
# the mpi test suite needs it:
#
#   mpirun.sh MPIRUN NP PROG [ARGS...]
#
#  --allow-run-as-root     CI runs as root, which mpirun otherwise refuses
#  --oversubscribe         more ranks than the 2 cores of the CI machine
#  --bind-to none          other tests share the cores; pinned ranks would queue
#  --mca pml ob1 --mca btl self,vader,tcp
#                          shared memory and loopback TCP only: no probing of
#                          InfiniBand/UCX devices the test machine lacks, so no
#                          warnings and the same transport everywhere
#
# Plexus' host joins a rendezvous store under every launcher (it is how rank
# 0's choices reach the others), and mpirun gives it no address: rank 0 hosts
# it on a free port of 127.0.0.1 (PLEXUS_MASTER_ADDR/PORT). If another test
# grabs the port first, the run is retried on a new one. Like plexus-run, it
# gives the job a secret (PLEXUS_TOKEN, 64 hex digits) unless one is set, so
# that store and peers authenticate each other.
#
# Exits 77 (meson's "skipped") when mpirun cannot start a process at all here,
# after saying why; otherwise with the job's status.
set -uo pipefail
if [ $# -lt 3 ]; then
  echo "usage: mpirun.sh MPIRUN NP PROG [ARGS...]" >&2
  exit 2
fi
mpirun=$1 np=$2
shift 2

opts=(--allow-run-as-root --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader,tcp)

if ! probe=$("$mpirun" "${opts[@]}" -np 1 true 2>&1); then
  echo "skipped: $mpirun cannot start processes here:"
  echo "$probe"
  exit 77
fi

free_port() {
  "${PYTHON:-python3}" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 40000))
}

if [ -z "${PLEXUS_TOKEN:-}" ]; then
  PLEXUS_TOKEN=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
  export PLEXUS_TOKEN
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for attempt in 1 2 3; do
  port=$(free_port)
  PLEXUS_MASTER_ADDR=127.0.0.1 PLEXUS_MASTER_PORT=$port \
    "$mpirun" "${opts[@]}" -np "$np" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ] && grep -q "could not host the rendezvous store" "$log"; then
    echo "mpirun.sh: port $port was taken (attempt $attempt); retrying on another"
    continue
  fi
  exit "$rc"
done
exit "$rc"
