#!/usr/bin/env bash
# The GPU suite of the NCCL backend: ONE script for a machine with one or
# more NVIDIA GPUs. It builds what it needs, then runs
#   - every collective on CUDA device buffers, checked exactly, at world size
#     1, and at 2 where there are two GPUs (NCCL refuses two ranks on one GPU);
#     every dtype incl. float16/bfloat16, every op, in place and not;
#   - ABI 1.2 (gather, scatter, allgatherv, alltoallv, allreduce_coalesced,
#     comm_split) through the plugin's table, one thread per GPU, up to 3;
#   - stream ordering on a caller's stream; host memory refused (UNSUPPORTED);
#   - with two GPUs: comm.abort() from another thread, and a departed peer
#     (the survivor fails within its timeout, no hang);
#   - the allreduce sweep 8 B .. 1 GiB through Plexus-NCCL beside NCCL called
#     directly (bench/harness/nccl_paired_bench), as ratios;
# and prints ONE summary line (starting "GPU SUITE:"). Under 5 minutes on one
# GPU once built. Without a GPU it says why and exits 77 (meson: skipped).
#
# Usage: tests/gpu/run.sh [--build-dir DIR] [--dry-run] [--direct]
#   --build-dir DIR  use (and, if needed, configure) this build directory;
#                    default: build-gpu in the repository root
#   --dry-run        do everything that needs no GPU (tool checks, build,
#                    plexus-info) and print the GPU commands instead of running them
#   --direct         build with the C++ compiler alone (no meson/ninja), as
#                    is done anyway where meson or ninja is missing
#
# What a bare machine needs: bash, a C++20 compiler (g++ >= 11), libsodium's
# headers and library (sodium.h, -lsodium: the rendezvous handshake), the
# CUDA toolkit with NCCL (nccl.h, libnccl.so.2, libcudart.so) under
# $CUDA_HOME, $CUDA_PATH or /usr/local/cuda, and the NVIDIA driver. meson and
# ninja are used when present; without them (and no network to install them)
# everything needed is compiled directly, in parallel, into DIR/direct.
# Not needed: MPI, UCX, doctest. LibTorch with CUDA (a torch wheel: .venv/ of
# scripts/install-torch.sh, python3's torch, or PLEXUS_TORCH_PATH) and meson
# are needed for the DDP and trainer steps only; without them those steps say
# "skipped" (they build into DIR-torch, about 10 LibTorch units).
#
# Hooks: tests/gpu/hooks/NAME.sh (if present) runs as step NAME with
# arguments BUILD_DIR PLEXUS_RUN GPUS and the suite's environment; its result
# joins the summary line (exit 77: "skipped"): DDP on CUDA (ddp_cuda.sh: the
# equivalence test in four variants) and the sample trainer (trainer_cuda.sh).
set -u -o pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=""
dry=0
direct=0
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    --direct) direct=1; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ -n "$build" ] || build=$root/build-gpu
case $build in /*) ;; *) build=$PWD/$build ;; esac
log() { echo "[gpu-suite] $*"; }

# --- 1. GPUs -----------------------------------------------------------------
gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  why="nvidia-smi -L lists $gpus GPU(s)"
elif [ -e /dev/nvidiactl ]; then
  why="nvidia-smi is missing but /dev/nvidiactl exists; counting /dev/nvidia[0-9]*"
  gpus=$(ls /dev/nvidia[0-9]* 2>/dev/null | wc -l)
else
  why="no nvidia-smi and no /dev/nvidiactl (no NVIDIA driver)"
fi
if [ -n "${CUDA_VISIBLE_DEVICES+x}" ]; then
  visible=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c . || true)
  [ "$visible" -lt "$gpus" ] && gpus=$visible
  why="$why; CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
fi
if [ "$gpus" -eq 0 ] && [ $dry -eq 0 ]; then
  echo "skipped: no GPU visible ($why)"
  exit 77
fi
log "$why"

# --- 2. tools and build -----------------------------------------------------
cuda=""
for c in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
  if [ -n "$c" ] && [ -f "$c/include/nccl.h" ] && [ -f "$c/include/cuda_runtime_api.h" ]; then
    cuda=$c; break
  fi
done
[ -n "$cuda" ] || { echo "GPU SUITE: FAIL (no CUDA toolkit with nccl.h under \$CUDA_HOME, \$CUDA_PATH or /usr/local/cuda)"; exit 1; }
export PATH=$PATH:$HOME/.local/bin
if [ $direct -eq 0 ] && { ! command -v meson >/dev/null || ! command -v ninja >/dev/null; }; then
  log "meson/ninja missing: trying python3 -m pip install --user meson ninja (30 s at most)"
  timeout 30 python3 -m pip install --user -q --retries 0 --timeout 5 meson ninja >/dev/null 2>&1 ||
    { log "could not install them (no network?): compiling directly"; direct=1; }
  command -v meson >/dev/null && command -v ninja >/dev/null || direct=1
fi
if [ $direct -eq 1 ] && [ -f "$build/build.ninja" ] && command -v ninja >/dev/null; then
  direct=0  # an already configured build directory only needs ninja
fi

# Compiles the libraries, plugins, tools and GPU programs with the compiler
# alone (the sources meson would use; keep in step with the meson.build files
# of api, auth, algos, core (with src/store, src/plugins), backends/tcp, backends/nccl,
# tools/plexus-run, tools/plexus-info, tests/gpu).
direct_build() {
  local out=$build/direct ver
  ver=$(sed -n "s/^ *version : '\([^']*\)'.*/\1/p" "$root/meson.build" | head -1)
  mkdir -p "$out/obj" "$out/lib" "$out/bin" || return 1
  local inc=(-I"$root/api/include" -I"$root/auth/include" -I"$root/algos/include"
             -I"$root/core/include" -I"$root/core/src")
  local cxx=(c++ -std=c++20 -O2 -fPIC -pthread "${inc[@]}" -isystem "$cuda/include"
             -DPLEXUS_VERSION_STRING="\"$ver\"" -DPLEXUS_VERSION="\"$ver\""
             -DPLEXUS_INSTALLED_PLUGIN_DIR="\"$out/lib\"" -DPLEXUS_BUILD_PLUGIN_DIRS="\"$out/lib\""
             -DPLEXUS_BUILD_LIB_DIR="\"$out/lib\"" -DPLEXUS_CUDA_LIBDIR="\"$cuda/lib64\"")
  local srcs=() f
  for f in auth/src/handshake.cpp algos/src/*.cpp core/src/*.cpp core/src/store/*.cpp \
           core/src/plugins/*.cpp \
           backends/tcp/{tcp_plugin,tcp_comm,socket_transport,mesh_connect,frame}.cpp \
           backends/nccl/{nccl_plugin,nccl_comm,nccl_bootstrap,cuda_api}.cpp \
           tools/plexus-run/*.cpp tools/plexus-info/main.cpp tests/gpu/gpu_collectives.cpp \
           bench/harness/nccl_paired_bench.cpp; do
    srcs+=("$f")
  done
  # One object per source, named after its path; all cores at once.
  # Always rebuilt: a source's object does not know its headers.
  printf '%s\n' "${srcs[@]}" | xargs -P "$(nproc 2>/dev/null || echo 2)" -I{} sh -c '
    out=$0 src=$1; shift
    exec "$@" -c "$src/{}" -o "$out/obj/$(echo "{}" | tr / _).o"' "$out" "$root" "${cxx[@]}" ||
    return 1
  local o=$out/obj
  local algos=("$o"/algos_src_*.o) auth=("$o"/auth_src_handshake.cpp.o)
  local core=("$o"/core_src_*.o)  # core_src_store_*, core_src_plugins_* included
  local link=(-L"$out/lib" -lplexus -Wl,-rpath,"$out/lib:$cuda/lib64")
  "${cxx[@]}" -shared -o "$out/lib/libplexus.so" "${core[@]}" "${algos[@]}" "${auth[@]}" \
    -lsodium -ldl -Wl,-soname,libplexus.so &&
  "${cxx[@]}" -shared -o "$out/lib/libplexus-tcp.so" "$o"/backends_tcp_*.o "${algos[@]}" \
    "${auth[@]}" -lsodium -Wl,--no-undefined \
    -Wl,--version-script="$root/backends/tcp/exports.map" &&
  "${cxx[@]}" -shared -o "$out/lib/libplexus-nccl.so" "$o"/backends_nccl_*.o -ldl \
    -Wl,--no-undefined -Wl,--version-script="$root/backends/nccl/exports.map" &&
  "${cxx[@]}" -o "$out/bin/plexus-run" "$o"/tools_plexus-run_*.o "${link[@]}" &&
  "${cxx[@]}" -o "$out/bin/plexus-info" "$o"/tools_plexus-info_main.cpp.o "${link[@]}" &&
  "${cxx[@]}" -o "$out/bin/gpu_collectives" "$o"/tests_gpu_gpu_collectives.cpp.o "${link[@]}" \
    -L"$cuda/lib64" -lcudart -ldl &&
  "${cxx[@]}" -o "$out/bin/nccl_paired_bench" "$o"/bench_harness_nccl_paired_bench.cpp.o \
    "${link[@]}" -L"$cuda/lib64" -lcudart -lnccl
}

if [ $direct -eq 1 ]; then
  [ -f "$cuda/lib64/libnccl.so" ] || [ -f "$cuda/lib64/libnccl.so.2" ] || {
    echo "GPU SUITE: FAIL (no libnccl.so under $cuda/lib64 for the direct build)"; exit 1; }
  echo '#include <sodium.h>' | c++ -x c++ -fsyntax-only - 2>/dev/null || {
    echo "GPU SUITE: FAIL (libsodium's headers (sodium.h) are needed and missing)"; exit 1; }
  log "building directly with $(c++ --version | head -1) into $build/direct"
  mkdir -p "$build"
  direct_build >"$build/gpu-suite-build.log" 2>&1 ||
    { tail -30 "$build/gpu-suite-build.log"; echo "GPU SUITE: FAIL (direct build)"; exit 1; }
  bin=$build/direct/bin
  run=$bin/plexus-run
  info=$bin/plexus-info
  plugin=$build/direct/lib/libplexus-nccl.so
else
if [ ! -f "$build/build.ninja" ]; then
  log "configuring $build"
  CUDA_HOME=$cuda meson setup "$build" "$root" -Dnccl=enabled -Dtorch=disabled \
    -Dmpi=disabled -Ducx=disabled >"$build.setup.log" 2>&1 ||
    { tail -20 "$build.setup.log"; echo "GPU SUITE: FAIL (meson setup)"; exit 1; }
fi
targets=(backends/nccl/libplexus-nccl.so backends/tcp/libplexus-tcp.so
         tools/plexus-run/plexus-run tools/plexus-info/plexus-info)
have_meson_gpu=0
ninja -C "$build" -t targets all 2>/dev/null | grep -q '^tests/gpu/gpu_collectives:' && have_meson_gpu=1
[ $have_meson_gpu -eq 1 ] && targets+=(tests/gpu/gpu_collectives tests/gpu/nccl_paired_bench)
log "building ${targets[*]}"
ninja -C "$build" "${targets[@]}" >"$build/gpu-suite-build.log" 2>&1 ||
  { tail -30 "$build/gpu-suite-build.log"; echo "GPU SUITE: FAIL (build)"; exit 1; }
bin=$build/tests/gpu
if [ $have_meson_gpu -eq 0 ]; then
  # tests/ is not configured (no doctest): compile the two programs directly.
  bin=$build/gpu-suite-bin
  mkdir -p "$bin"
  common=(-std=c++20 -O2 -I"$root/api/include" -I"$root/core/include" -I"$root/algos/include"
          -isystem "$cuda/include" -L"$build/core" -lplexus -L"$cuda/lib64" -lcudart
          -Wl,-rpath,"$build/core:$cuda/lib64" -pthread)
  c++ "$root/tests/gpu/gpu_collectives.cpp" -o "$bin/gpu_collectives" "${common[@]}" -ldl &&
    c++ "$root/bench/harness/nccl_paired_bench.cpp" -o "$bin/nccl_paired_bench" "${common[@]}" -lnccl ||
    { echo "GPU SUITE: FAIL (compiling the GPU programs)"; exit 1; }
fi
run=$build/tools/plexus-run/plexus-run
info=$build/tools/plexus-info/plexus-info
plugin=$build/backends/nccl/libplexus-nccl.so
fi
"$info" nccl | sed 's/^/[gpu-suite] /'

# --- 3. the runs ------------------------------------------------------------
declare -A result
failed=0
step() {  # step NAME SECONDS ENV... -- CMD...
  local name=$1 secs=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  if [ $dry -eq 1 ]; then
    log "dry run: would run ($name): ${envs[*]} timeout $secs $*"
    result[$name]=dry
    return
  fi
  log "$name: $*"
  local out rc
  out=$(env "${envs[@]}" timeout "$secs" "$@" 2>&1); rc=$?
  echo "$out" | sed "s/^/[$name] /"
  if [ $rc -eq 0 ]; then
    result[$name]=ok
  elif [ $rc -eq 77 ]; then  # the step says why it could not run here
    result[$name]=skipped
  else
    result[$name]="FAIL(rc=$rc)"; failed=1
  fi
  eval "out_$name=\$out"
}
base=(PLEXUS_TIMEOUT=60)
# The collective runs: a 20 s operation timeout, so that a hang is a clear
# TIMEOUT well inside each step's own limit; NCCL's warnings shown.
coll=(PLEXUS_TIMEOUT=20 NCCL_DEBUG=WARN PLEXUS_BACKEND=nccl)
step world1 150 "${coll[@]}" -- "$run" -n 1 "$bin/gpu_collectives"
# ABI 1.2 (gather, scatter, allgatherv, alltoallv, allreduce_coalesced,
# comm_split) through the plugin's table, one thread per GPU (up to 3).
step abi12 150 NCCL_DEBUG=WARN -- "$bin/gpu_collectives" --abi12 "$plugin"
if [ "$gpus" -ge 2 ] || [ $dry -eq 1 ]; then
  step world2 150 "${coll[@]}" -- "$run" -n 2 "$bin/gpu_collectives"
  step abort 60 "${coll[@]}" -- "$run" -n 2 "$bin/gpu_collectives" --abort
  step dead_peer 60 "${coll[@]}" -- "$run" -n 2 "$bin/gpu_collectives" --dead-peer
else
  result[world2]="skipped(1 GPU)"; result[abort]="skipped(1 GPU)"; result[dead_peer]="skipped(1 GPU)"
fi
bench_ranks=1
[ "$gpus" -ge 2 ] && bench_ranks=2
step bench 180 "${base[@]}" -- "$run" -n $bench_ranks "$bin/nccl_paired_bench" \
  --max-bytes 1073741824 --reps 3 --json "$build/gpu-suite-bench.json"

# Hooks (see the header): DDP on CUDA and the sample trainer on CUDA are
# wired in by dropping tests/gpu/hooks/ddp_cuda.sh and trainer_cuda.sh.
hooks_text=""
for h in ddp_cuda trainer_cuda; do
  if [ -f "$root/tests/gpu/hooks/$h.sh" ]; then
    step "$h" 600 "${base[@]}" PLEXUS_BACKEND=nccl -- bash "$root/tests/gpu/hooks/$h.sh" \
      "$build" "$run" "$gpus"
  else
    result[$h]="not-wired"
  fi
  hooks_text="$hooks_text $h=${result[$h]}"
done

# --- 4. one summary line ----------------------------------------------------
stream=ok
printf '%s\n%s\n' "${out_world1:-}" "${out_world2:-}" | grep -q "FAIL .*caller's stream" &&
  { stream=FAIL; failed=1; }
bench_text="${result[bench]}"
if [ "${result[bench]}" = ok ] && [ -f "$build/gpu-suite-bench.json" ]; then
  bench_text=$(python3 - "$build/gpu-suite-bench.json" <<'PY' 2>/dev/null || echo "ok (no python3 to summarise)"
import json, sys
rows = json.load(open(sys.argv[1]))
lat = [r for r in rows if r["mode"] == "blocking"]
big = [r for r in rows if r["mode"] == "pipelined" and r["bytes"] >= 1 << 20]
parts = []
if lat:
    r = lat[0]
    parts.append("8B blocking x%.3f (%+.2f us)" % (r["ratio"], r["plexus_us"] - r["nccl_us"]))
if big:
    w = max(big, key=lambda r: r["ratio"])
    parts.append(">=1MiB worst x%.3f at %d B" % (w["ratio"], w["bytes"]))
print(", ".join(parts))
PY
)
fi
verdict=PASS
[ $failed -eq 0 ] || verdict=FAIL
[ $dry -eq 1 ] && verdict=DRY-RUN
echo "GPU SUITE: $verdict gpus=$gpus world1=${result[world1]} abi12=${result[abi12]} world2=${result[world2]} stream=$stream abort=${result[abort]} dead_peer=${result[dead_peer]}$hooks_text bench: $bench_text (plexus/nccl, ranks=$bench_ranks)"
[ $failed -eq 0 ]
