#!/usr/bin/env bash
# cuda_run.sh PROBE PLEXUS_RUN N PROGRAM ARGS...: when `PROBE cuda-available`
# (ddp_check) finds a CUDA device, runs `plexus-run -n N PROGRAM ARGS...`
# on the CUDA backend (PLEXUS_BACKEND, default nccl); otherwise prints why and
# exits 77 (skipped). The probe comes first because plexus-run reports a
# rank's 77 as a failure.
set -u
probe=$1 plexus_run=$2 n=$3
shift 3
"$probe" cuda-available || exit $?
export PLEXUS_BACKEND=${PLEXUS_BACKEND:-nccl}
exec "$plexus_run" -n "$n" "$@"
