#!/usr/bin/env bash
# The same binary gives byte-identical results on the tcp and the ucx
# backend, both under plexus-run:
#
#   same_results.sh PLEXUS_RUN NP SAME_RESULTS [VAR=VALUE ...]
#
# SAME_RESULTS is tests/mpi/same_results.cpp: a fixed set of collectives
# (every dtype x op of allreduce, reduce and reduce_scatter, in and out of
# place; broadcast; allgather; alltoall; a send/recv ring) whose raw results
# each rank writes to OUTDIR/<collective>.<rank>. Every file of the tcp run
# must exist in the ucx run and be identical, and the other way round. The
# VAR=VALUE settings apply to the ucx run (e.g. UCX_TLS=tcp).
set -uo pipefail
if [ $# -lt 3 ]; then
  echo "usage: same_results.sh PLEXUS_RUN NP SAME_RESULTS [VAR=VALUE ...]" >&2
  exit 2
fi
plexus_run=$1 np=$2 prog=$3
shift 3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir "$dir/tcp" "$dir/ucx"

echo "== tcp, plexus-run -n $np"
PLEXUS_BACKEND=tcp PLEXUS_TIMEOUT=60 timeout 240 "$plexus_run" -n "$np" "$prog" "$dir/tcp" ||
  { echo "FAILED: the tcp run"; exit 1; }
echo "== ucx, plexus-run -n $np $*"
env "$@" PLEXUS_BACKEND=ucx PLEXUS_TIMEOUT=60 timeout 240 "$plexus_run" -n "$np" "$prog" "$dir/ucx" ||
  { echo "FAILED: the ucx run"; exit 1; }

failures=0 identical=0
for f in "$dir"/tcp/*; do
  name=$(basename "$f")
  if [ ! -e "$dir/ucx/$name" ]; then
    echo "FAILED: the ucx run wrote no $name"
    failures=$((failures + 1))
  elif cmp "$f" "$dir/ucx/$name"; then
    identical=$((identical + 1))
  else
    failures=$((failures + 1))
  fi
done
for f in "$dir"/ucx/*; do
  [ -e "$dir/tcp/$(basename "$f")" ] || {
    echo "FAILED: only the ucx run wrote $(basename "$f")"
    failures=$((failures + 1))
  }
done
colls=$(ls "$dir/tcp" | sed 's/\.[0-9]*$//' | sort -u | tr '\n' ' ')
echo "identical on tcp and ucx: $identical files of $np ranks ($colls)"
if [ "$identical" -eq 0 ]; then
  echo "FAILED: nothing was compared"
  failures=$((failures + 1))
fi
[ $failures -eq 0 ] && echo "same results: OK" || echo "same results: $failures failure(s)"
[ $failures -eq 0 ]
