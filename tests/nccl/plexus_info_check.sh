#!/usr/bin/env bash
# plexus-info shows the NCCL backend: its version (NCCL, CUDA runtime and
# driver) and, without a GPU, why it is unusable here.
set -u
info=$1
out=$("$info" nccl 2>&1)
echo "$out"
grep -q "^nccl$" <<<"$out" || { echo "FAIL: nccl is not listed"; exit 1; }
grep -q "version: .*NCCL 2\.[0-9]*\.[0-9]*, CUDA runtime [0-9.]*, CUDA driver" <<<"$out" ||
  { echo "FAIL: no NCCL/CUDA versions in the version line"; exit 1; }
if grep -q "UNUSABLE here" <<<"$out"; then
  grep -q "UNUSABLE here: .*no CUDA device" <<<"$out" ||
    { echo "FAIL: unusable, but not for want of a CUDA device"; exit 1; }
  echo "ok: listed as unusable here, with the reason"
else
  grep -q "memory: *cuda$" <<<"$out" || { echo "FAIL: usable but memory is not 'cuda'"; exit 1; }
  grep -q "stream-ordered" <<<"$out" || { echo "FAIL: not stream-ordered"; exit 1; }
  echo "ok: usable here (a GPU is visible), CUDA memory only, stream-ordered"
fi
