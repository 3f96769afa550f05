#!/usr/bin/env bash
# Installs the torch wheel from PyPI into .venv/ (git-ignored): LibTorch for
# the ddp/ layer and, since the wheel is the Python package too, the Python
# torch that the sampler comparison, the trainer tests and bench/compare-trainer
# run PyTorch DDP with; and scikit-learn, whose bundled digits images the
# build exports for plexus-trainer --data digits (nothing is downloaded at
# run time). Idempotent. About 5.6 GB installed (pip's cache makes later
# installs quicker than the first).
#
# Set PLEXUS_TORCH=cpu-libs for LibTorch alone (553 MB, no working Python
# torch: the Python comparison then skips). PLEXUS_TORCH=none skips torch.
set -euo pipefail
cd "$(dirname "$0")/.."
version=2.15.0
mode="${PLEXUS_TORCH:-full}"
[ "$mode" = none ] && exit 0
py=.venv/bin/python3
if [ -x "$py" ] && "$py" - "$version" <<'PY' 2>/dev/null
import importlib.metadata as m, sys
sys.exit(0 if m.version("torch") == sys.argv[1] and m.version("scikit-learn") else 1)
PY
then
  exit 0
fi
echo "install-torch: installing torch $version into .venv ($mode)"
python3 -m venv .venv
if [ "$mode" = cpu-libs ]; then
  "$py" -m pip install -q --no-deps "torch==$version" nvidia-cuda-runtime==13.2.86 nvidia-cuda-cupti==13.2.86
  "$py" -m pip install -q scikit-learn
else
  "$py" -m pip install -q "torch==$version" scikit-learn
fi
echo "install-torch: done ($(du -sh .venv | cut -f1))"
