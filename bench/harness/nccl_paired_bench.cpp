// Plexus-NCCL against NCCL called directly, paired in one process per rank
// (run it under plexus-run -n N): the same allreduce sweep, 8 B to 1 GiB of
// float32 on CUDA device buffers, on the same kind of stream, block against
// block, alternating which goes first. Prints one nccl-tests-like row per
// size with both times and the ratio Plexus / NCCL (lower is better).
//
// Timed block: `iters` operations posted back to back, then one wait (the
// way nccl-tests times). Plexus posts through plexus::Communicator with the
// caller's stream in the placement and waits on the last Work; NCCL direct
// calls ncclAllReduce on the same stream and cudaStreamSynchronize. A second,
// "blocking" figure at 8 B times post+wait per operation (latency).
//
// Every peer at its defaults: NCCL's own environment is untouched.
//   nccl_paired_bench [--max-bytes N] [--reps R] [--json FILE]
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plexus/plexus.hpp"

namespace {

void Cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "nccl_paired_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void Nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) {
    std::fprintf(stderr, "nccl_paired_bench: %s: %s\n", what, ncclGetErrorString(r));
    std::exit(1);
  }
}

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int ItersFor(size_t bytes) {
  if (bytes >= (size_t(256) << 20)) return 5;
  if (bytes >= (size_t(16) << 20)) return 20;
  return 100;
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_bytes = size_t(1) << 30;
  int reps = 3;
  std::string json;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--max-bytes") max_bytes = std::strtoull(argv[i + 1], nullptr, 10);
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    if (a == "--json") json = argv[i + 1];
  }
  // Two communicators of the job: host memory over tcp to share NCCL's id
  // for the direct one, and the NCCL backend under test.
  plexus::CommunicatorOptions host_opts;
  host_opts.backend = "tcp";
  plexus::Communicator host = plexus::Communicator::from_env(host_opts);
  plexus::CommunicatorOptions gpu_opts;
  gpu_opts.backend = "nccl";
  plexus::Communicator comm = plexus::Communicator::from_env(gpu_opts);
  const uint32_t n = comm.size(), me = comm.rank();
  const int device = int(comm.local_rank());
  Cuda(cudaSetDevice(device), "cudaSetDevice");

  ncclUniqueId id{};
  if (me == 0) Nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  host.broadcast(&id, sizeof id, plexus::DType::UInt8, 0).wait();
  ncclComm_t direct = nullptr;
  Nccl(ncclCommInitRank(&direct, int(n), id, int(me)), "ncclCommInitRank");

  cudaStream_t stream;
  Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  void* buf = nullptr;
  Cuda(cudaMalloc(&buf, max_bytes), "cudaMalloc");
  Cuda(cudaMemset(buf, 0, max_bytes), "cudaMemset");
  Cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  plexus_placement where{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, device, 0, stream};

  auto plexus_block = [&](size_t count, int iters, bool blocking) {
    std::vector<plexus::Work> works;
    works.reserve(size_t(iters));
    const double t0 = Seconds();
    for (int i = 0; i < iters; ++i) {
      works.push_back(
          comm.allreduce(buf, buf, count, plexus::DType::Float32, plexus::ReduceOp::Sum, &where));
      if (blocking) works.back().wait();
    }
    for (auto& w : works) w.wait();
    return (Seconds() - t0) / iters;
  };
  auto nccl_block = [&](size_t count, int iters, bool blocking) {
    const double t0 = Seconds();
    for (int i = 0; i < iters; ++i) {
      Nccl(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, direct, stream), "ncclAllReduce");
      if (blocking) Cuda(cudaStreamSynchronize(stream), "sync");
    }
    Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return (Seconds() - t0) / iters;
  };

  FILE* out = json.empty() || me != 0 ? nullptr : std::fopen(json.c_str(), "w");
  if (out) std::fprintf(out, "[\n");
  if (me == 0) {
    std::printf("# nccl_paired_bench: %u rank(s), float32 sum allreduce, in place, %d reps\n", n,
                reps);
    std::printf("#%12s %12s %12s %12s %10s %12s\n", "bytes", "plexus_us", "nccl_us", "ratio",
                "busbw_GB/s", "mode");
  }
  bool first_row = true;
  auto row = [&](size_t bytes, bool blocking) {
    const size_t count = std::max<size_t>(1, bytes / 4);
    const int iters = blocking ? 200 : ItersFor(bytes);
    plexus_block(count, 2, blocking);  // warm-up both (first use connects)
    nccl_block(count, 2, blocking);
    std::vector<double> p, d;
    for (int r = 0; r < reps; ++r) {
      host.barrier().wait();
      if (r % 2 == 0) {
        p.push_back(plexus_block(count, iters, blocking));
        d.push_back(nccl_block(count, iters, blocking));
      } else {
        d.push_back(nccl_block(count, iters, blocking));
        p.push_back(plexus_block(count, iters, blocking));
      }
    }
    std::sort(p.begin(), p.end());
    std::sort(d.begin(), d.end());
    const double pm = p[p.size() / 2] * 1e6, dm = d[d.size() / 2] * 1e6;
    const double busbw = double(count * 4) / (dm * 1e-6) * (n > 1 ? 2.0 * (n - 1) / n : 1.0) / 1e9;
    if (me == 0) {
      std::printf(" %12zu %12.2f %12.2f %12.3f %10.1f %12s\n", count * 4, pm, dm, pm / dm, busbw,
                  blocking ? "blocking" : "pipelined");
      if (out) {
        std::fprintf(out,
                     "%s  {\"bytes\": %zu, \"plexus_us\": %.3f, \"nccl_us\": %.3f, \"ratio\": "
                     "%.4f, \"mode\": \"%s\"}",
                     first_row ? "" : ",\n", count * 4, pm, dm, pm / dm,
                     blocking ? "blocking" : "pipelined");
      }
      first_row = false;
    }
  };
  row(8, true);
  for (size_t bytes = 8; bytes <= max_bytes; bytes *= 8) row(bytes, false);
  if (max_bytes > 8 && (max_bytes & (max_bytes - 1)) == 0) {
    size_t last = 8;
    while (last * 8 <= max_bytes) last *= 8;
    if (last != max_bytes) row(max_bytes, false);
  }
  if (out) {
    std::fprintf(out, "\n]\n");
    std::fclose(out);
  }
  ncclCommDestroy(direct);
  cudaFree(buf);
  cudaStreamDestroy(stream);
  return 0;
}
