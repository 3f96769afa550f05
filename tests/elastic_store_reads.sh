#!/usr/bin/env bash
# plexus-run --elastic reads the ranks' marks from its store four times a
# second for the whole job: over one connection, not a new one each time (16
# connections in a 4 s job before). Every connection closed leaves one socket
# in TIME_WAIT on the side that closed it: the launcher's reader closed each
# of those (its side's remote port is the store's), so their count once the
# job is over is the count of connections it made and dropped.
#
#   elastic_store_reads.sh PLEXUS_RUN
set -u
run=${1:?plexus-run}
command -v ss >/dev/null || { echo "skipped: ss (iproute2) not found"; exit 77; }
"$run" -n 2 --elastic sleep 4 &
pid=$!
port=
for _ in $(seq 100); do
  # The launcher's listening socket is its store's.
  port=$(ss -Hltnp | awk -v p="pid=$pid," '$0 ~ p { n = split($4, a, ":"); print a[n]; exit }')
  [ -n "$port" ] && break
  sleep 0.05
done
wait $pid
rc=$?
closed=$(ss -Htan state time-wait "( dport = :$port )" | wc -l)
echo "plexus-run exited $rc; its store was on port ${port:-?}; connections it closed: $closed"
[ "$rc" = 0 ] || { echo "FAIL: plexus-run exited $rc"; exit 1; }
[ -n "$port" ] || { echo "FAIL: found no listening socket of plexus-run (pid $pid)"; exit 1; }
# (Its members writer and its mark reader, kept to the end; slack for a
# reconnection.)
if [ "$closed" -gt 2 ]; then
  echo "FAIL: plexus-run made and closed $closed connections to its store in a 4 s job"
  exit 1
fi
echo "ok: plexus-run kept its connections to its store"
