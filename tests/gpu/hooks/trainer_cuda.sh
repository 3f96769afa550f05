#!/usr/bin/env bash
# GPU suite hook: a short plexus-trainer run with --device cuda on the NCCL
# backend (its synthetic data set: no download). Arguments: BUILD_DIR
# PLEXUS_RUN GPUS (run.sh passes them).
set -u -o pipefail
torch_targets=(samples/trainer/plexus-trainer tests/ddp/ddp_check)
. "$(dirname "$0")/torch_build.sh"
"$tbuild/tests/ddp/ddp_check" cuda-available || exit $?
PLEXUS_BACKEND=nccl "$tbuild/tools/plexus-run/plexus-run" -n "$granks" \
  "$tbuild/samples/trainer/plexus-trainer" --device cuda --max-steps 20 --epochs 1 \
  --samples 2048 --log-every 5
