# Sourced by ddp_cuda.sh and trainer_cuda.sh (tests/gpu/run.sh hooks): finds a
# LibTorch with CUDA and builds the LibTorch targets into BUILD-torch. Sets
# $tbuild and $granks (ranks: 2 where there are two GPUs, else 1; NCCL refuses
# two ranks on one GPU). Exits 77 (the suite reports "skipped") with the
# reason when this machine has no LibTorch or no meson. The hook sets
# torch_targets (ninja targets) before sourcing it.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
build=$1 gpus=$3
granks=1
[ "$gpus" -ge 2 ] && granks=2
torch_path=${PLEXUS_TORCH_PATH:-}
if [ -z "$torch_path" ]; then
  for py in "$root/.venv/bin/python3" python3; do
    torch_path=$("$py" -c 'import torch, os; print(os.path.dirname(torch.__file__))' 2>/dev/null) &&
      [ -n "$torch_path" ] && break
    torch_path=""
  done
fi
if [ -z "$torch_path" ] || [ ! -f "$torch_path/lib/libtorch_cuda.so" ]; then
  echo "skipped: no LibTorch with CUDA here (set PLEXUS_TORCH_PATH to the torch package directory, or run scripts/install-torch.sh)"
  exit 77
fi
command -v meson >/dev/null && command -v ninja >/dev/null ||
  { echo "skipped: LibTorch found at $torch_path, but meson/ninja are missing to build against it"; exit 77; }
tbuild=$build-torch
if [ ! -f "$tbuild/build.ninja" ]; then
  meson setup "$tbuild" "$root" -Dtorch_path="$torch_path" -Dnccl=enabled -Dmpi=disabled \
    -Ducx=disabled >"$tbuild.setup.log" 2>&1 || { tail -20 "$tbuild.setup.log"; exit 1; }
fi
ninja -C "$tbuild" backends/nccl/libplexus-nccl.so backends/tcp/libplexus-tcp.so \
  tools/plexus-run/plexus-run "${torch_targets[@]}" >"$tbuild/torch-build.log" 2>&1 ||
  { tail -30 "$tbuild/torch-build.log"; exit 1; }
