#!/usr/bin/env bash
# The main job for a fresh machine: install what is needed, build, and run the
# demo (one checked, timed allreduce over every backend that loads) on N ranks
# (default 4) with plexus-run.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks="${1:-4}"
scripts/install-deps.sh
scripts/build.sh
exec build/tools/plexus-run/plexus-run -n "$ranks" build/samples/demo/plexus-demo
