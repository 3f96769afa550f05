#!/usr/bin/env bash
# What a trainer author does outside this tree: install Plexus, compile the
# README's DDP program against the installed headers with pkg-config (plus
# LibTorch's flags), and run that one binary under the installed plexus-run
# on 2 ranks.
#
#   installed_headers.sh BUILD_DIR SOURCE.cpp TORCH_DIR
set -euo pipefail
build=$1 source=$2 torch=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
meson install -C "$build" --no-rebuild --destdir "$work/root" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; exit 1; }
pc=$(dirname "$(find "$work/root" -name plexus-ddp.pc | head -n 1)")
[ -d "$pc" ] || { echo "plexus-ddp.pc was not installed"; exit 1; }
libdir=$(dirname "$pc")
export PKG_CONFIG_PATH=$pc PKG_CONFIG_SYSROOT_DIR=$work/root
flags=$(pkg-config --cflags --libs plexus-ddp)
echo "pkg-config --cflags --libs plexus-ddp: $flags"
${CXX:-c++} -std=c++20 -O1 "$source" -o "$work/trainer" $flags \
  -isystem "$torch/include" -isystem "$torch/include/torch/csrc/api/include" \
  -D_GLIBCXX_USE_CXX11_ABI=1 -L"$torch/lib" -Wl,--no-as-needed -ltorch_cpu -lc10 \
  -Wl,--as-needed -Wl,-rpath,"$torch/lib" -Wl,-rpath,"$libdir"
echo "compiled $(basename "$source") against $work/root"
run=$(find "$work/root" -name plexus-run -type f | head -n 1)
PLEXUS_PLUGIN_PATH=$libdir/plexus PLEXUS_BACKEND=tcp OMP_NUM_THREADS=1 \
  "$run" -n 2 "$work/trainer" 2 | tee "$work/out.log"
grep -q "epoch 1: mean loss" "$work/out.log"
