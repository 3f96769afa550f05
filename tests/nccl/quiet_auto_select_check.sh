#!/usr/bin/env bash
# Without a GPU, automatic backend selection passes over nccl silently: a CPU
# job (PLEXUS_BACKEND unset) prints nothing about it. (It printed a "no CUDA
# device" warning from every job before the reason moved to INFO.)
set -u
run=$1 bench=$2
if [ -e /dev/nvidiactl ]; then
  echo "skipped: a GPU driver is present here, so nccl may be the backend chosen"
  exit 77
fi
out=$(env -u PLEXUS_BACKEND PLEXUS_TIMEOUT=30 "$run" -n 2 "$bench" -b 8 -e 8 -n 2 -w 1 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || { echo "FAIL: the job failed (exit $rc)"; exit 1; }
grep -q "# plexus-bench .*backend \(ucx\|mpi\|tcp\)" <<<"$out" ||
  { echo "FAIL: no other backend was chosen"; exit 1; }
if grep -qi "backend nccl\|CUDA device\|libnccl" <<<"$out"; then
  echo "FAIL: a CPU job printed something about nccl/CUDA"
  exit 1
fi
echo "ok: another backend chosen, nothing printed about nccl"
