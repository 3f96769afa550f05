#!/usr/bin/env bash
# dist.init_process_group("plexus") across 2 network-namespace hosts x 2
# ranks under plexus-run --nnodes 2: torch's env:// rendezvous meets at
# MASTER_PORT, a free port node 0's launcher picked on its host and told the
# other launcher (its own store is at PLEXUS_MASTER_PORT).
#
#   netns_torch_env_test.sh BACKEND PLEXUS_RUN PYTHON PLEXUS_TORCH_DIR CHECK_SCRIPT
#
# Every launcher exits 0 and every rank prints "ok" (an allreduce on the
# plexus group and on a gloo group through the same torch store, exact).
set -u
backend=$1 run=$2 python=$3 pydir=$4 script=$5
skip() { echo "SKIP: $*"; exit 77; }
PYTHONPATH=$pydir "$python" -c 'import plexus_torch' 2>/dev/null || skip "$python cannot import plexus_torch from $pydir"
. "$(dirname "$0")/netns_lib.sh"
netns_setup 2 || exit $?
"$run" --make-token "$NETNS_TMP/token" >/dev/null || exit 1
port=29500  # (the namespaces are this test's own)
for k in 0 1; do
  # (gloo finds its interface by the host name, which names no namespace's eth0)
  ip netns exec "${NETNS_HOSTS[$k]}" env PYTHONPATH="$pydir" PLEXUS_BACKEND="$backend" \
    PLEXUS_TIMEOUT=60 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 UCX_TLS=tcp,self \
    "$run" --nnodes 2 --node-rank $k --master-addr "${NETNS_ADDRS[0]}" --master-port "$port" \
    --token-file "$NETNS_TMP/token" -n 2 "$python" "$script" >"$NETNS_TMP/out.$k" 2>&1 &
  pids[$k]=$!
  NETNS_PIDS+=($!)
done
fail=0
for k in 0 1; do
  if wait "${pids[$k]}"; then echo "ok: node $k's plexus-run exited 0"; else echo "FAIL: node $k's plexus-run exited $?"; fail=1; fi
done
for r in 0 1 2 3; do
  if grep -q "rank $r of 4: ok" "$NETNS_TMP"/out.*; then echo "ok: rank $r"; else echo "FAIL: rank $r"; fail=1; fi
done
[ $fail = 0 ] || sed 's/^/  out: /' "$NETNS_TMP"/out.* | grep -v "hostname of the client" | tail -n 30
exit $fail
