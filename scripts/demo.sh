#!/usr/bin/env bash
# The main job for a fresh machine: install what is needed (Debian packages,
# the torch wheel and scikit-learn into .venv/), build, and train the same
# models on every Plexus backend that loads here and on PyTorch's own DDP,
# side by side (bench/compare-trainer), on RANKS ranks (default 2):
#
#   1. accuracy: scikit-learn's handwritten digits, an MLP and a small CNN,
#      10 epochs each, every step timed;
#   2. speed: an MLP of 16 x Linear(1024) (15.8 M parameters, 63 MB of
#      gradients) for 20 timed steps, where communication matters.
#
# Each prints its table and writes table.txt, summary.json and plot.svg under
# bench/results/.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks="${1:-2}"
scripts/install-deps.sh
scripts/install-torch.sh
scripts/build.sh
stamp=$(date +%Y%m%d_%H%M%S)
status=0
bench/compare-trainer --ranks "$ranks" --data digits --epochs 10 --sweep mlp:3x256,cnn \
  --repeat 2 --out "bench/results/demo_${stamp}_digits" || status=$?
bench/compare-trainer --ranks "$ranks" --sweep mlp:16x1024 --variants default,views --repeat 3 \
  --out "bench/results/demo_${stamp}_speed" || status=$?
exit $status
