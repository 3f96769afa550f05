#!/usr/bin/env bash
# Configures (once) and builds Plexus in ./build with warnings as errors.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  meson setup build -Dwerror=true
fi
ninja -C build
