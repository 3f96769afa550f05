#!/usr/bin/env bash
# GPU suite hook: DDP on CUDA tensors over the NCCL backend, checked against
# a local model step by step (tests/ddp/ddp_check.cpp's equivalence), with
# default buckets, many small buckets with unused parameters, the fp16 hook
# and bucket views. Arguments: BUILD_DIR PLEXUS_RUN GPUS (run.sh passes them).
set -u -o pipefail
torch_targets=(tests/ddp/ddp_check)
. "$(dirname "$0")/torch_build.sh"
check=$tbuild/tests/ddp/ddp_check
"$check" cuda-available || exit $?
status=0
for extra in "" "--bucket-cap-mb 0.0002 --unused" "--hook fp16" "--bucket-view --bucket-cap-mb 0.0002"; do
  # shellcheck disable=SC2086 # the variants are words
  if PLEXUS_BACKEND=nccl "$tbuild/tools/plexus-run/plexus-run" -n "$granks" "$check" equivalence \
       --device cuda $extra; then
    echo "ok: ddp equivalence on cuda, $granks rank(s) ${extra:-(default buckets)}"
  else
    echo "FAIL: ddp equivalence on cuda, $granks rank(s) ${extra:-(default buckets)}"
    status=1
  fi
done
exit $status
