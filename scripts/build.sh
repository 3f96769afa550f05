#!/usr/bin/env bash
# Configures (once) and builds Plexus in ./build with warnings as errors.
# Reconfigures when LibTorch (or scikit-learn, for the trainer's digits set)
# appeared in .venv/ after the first configure, so that the ddp/ layer, the
# trainer and their tests are built. Puts the plexus_torch package of the
# build on .venv's Python path.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  meson setup build -Dwerror=true
elif compgen -G ".venv/lib/python3*/site-packages/torch/lib/libtorch_cpu.so" >/dev/null &&
     ! grep -q "plexus-ddp" build/build.ninja; then
  meson setup --reconfigure build
elif compgen -G ".venv/lib/python3*/site-packages/sklearn/__init__.py" >/dev/null &&
     ! grep -q "digits.ptf" build/build.ninja; then
  meson setup --reconfigure build
fi
ninja -C build
# plexus_torch (built when .venv has torch): importable from .venv's python,
# so that `import plexus_torch` works under torchrun, mpirun and the rest.
if [ -d build/plexus_torch/python/plexus_torch ]; then
  for site in .venv/lib/python3*/site-packages; do
    [ -d "$site" ] && echo "$PWD/build/plexus_torch/python" >"$site/plexus-torch-build.pth"
  done
fi
