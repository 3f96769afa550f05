// gloo_allreduce_bench: Gloo's ring allreduce (float32, sum) over its TCP
// transport on 127.0.0.1, timed the way plexus-bench times a collective, so
// bench/compare can set Plexus beside Gloo (DESIGN.md, "Performance method").
//
//   RANK=r WORLD_SIZE=n gloo_allreduce_bench --store DIR [--prefix P]
//       [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [--json FILE]
//
// Launch one process per rank with RANK and WORLD_SIZE set (plexus-run does).
// The ranks meet through a gloo::rendezvous::FileStore in DIR (a fresh, empty
// directory per run; P scopes the keys) and connect a full mesh of TCP pairs.
// Each call is gloo::allreduce with the ring algorithm, out of place, as
// PyTorch's ProcessGroupGloo issues it: options (and the unbound buffers they
// register) are built per call. Per size: WARMUP untimed calls, gloo::barrier,
// ITERS back-to-back blocking calls, the per-rank average reduced with max,
// then (-c 1) one call on inputs whose sum is exact, wrong elements summed over
// ranks. Rank 0 prints rows and, with --json, writes them in plexus-bench's
// JSON schema (in_place is null).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/config.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

namespace {

struct Args {
  unsigned long long min_bytes = 8, max_bytes = 64ull << 20, factor = 2;
  int iters = 20, warmup = 5, check = 1;
  std::string store, prefix = "gloo-bench", json;
};

struct Row {
  unsigned long long size = 0;
  double time_us = 0, algbw = 0, busbw = 0;
  long long wrong = -1;  // -1: not checked
};

bool ParseSize(const char* s, unsigned long long* out) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s) return false;
  if (*end) {
    switch (*end) {
      case 'K':
      case 'k':
        v <<= 10;
        break;
      case 'M':
      case 'm':
        v <<= 20;
        break;
      case 'G':
      case 'g':
        v <<= 30;
        break;
      default:
        return false;
    }
    if (end[1]) return false;
  }
  *out = v;
  return true;
}

bool Parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) return false;
    const char* v = argv[i + 1];
    bool ok = true;
    if (k == "-b") {
      ok = ParseSize(v, &a->min_bytes);
    } else if (k == "-e") {
      ok = ParseSize(v, &a->max_bytes);
    } else if (k == "-f") {
      ok = ParseSize(v, &a->factor) && a->factor >= 2;
    } else if (k == "-n") {
      a->iters = std::atoi(v);
      ok = a->iters >= 1;
    } else if (k == "-w") {
      a->warmup = std::atoi(v);
      ok = a->warmup >= 0;
    } else if (k == "-c") {
      a->check = std::atoi(v);
    } else if (k == "--store") {
      a->store = v;
    } else if (k == "--prefix") {
      a->prefix = v;
    } else if (k == "--json") {
      a->json = v;
    } else {
      ok = false;
    }
    if (!ok) return false;
  }
  return !a->store.empty() && a->min_bytes <= a->max_bytes;
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

void Allreduce(const std::shared_ptr<gloo::Context>& ctx, const float* send, float* recv,
               size_t count) {
  gloo::AllreduceOptions opts(ctx);
  opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  opts.setInput(const_cast<float*>(send), count);
  opts.setOutput(recv, count);
  opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
  gloo::allreduce(opts);
}

template <typename T>
T Reduce(const std::shared_ptr<gloo::Context>& ctx, T local, ReduceFn fn) {
  T out = local;
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput(&out, 1);
  opts.setReduceFunction(fn);
  gloo::allreduce(opts);
  return out;
}

void Barrier(const std::shared_ptr<gloo::Context>& ctx) {
  gloo::BarrierOptions opts(ctx);
  gloo::barrier(opts);
}

bool WriteJson(const Args& a, int ranks, const std::vector<Row>& rows) {
  std::FILE* f = std::fopen(a.json.c_str(), "w");
  if (!f) {
    std::perror(a.json.c_str());
    return false;
  }
  std::fprintf(f, "{\n  \"tool\": \"gloo_allreduce_bench\",\n  \"backend\": \"gloo\",\n");
  std::fprintf(f, "  \"backend_version\": \"%d.%d.%d (ring, tcp)\",\n", GLOO_VERSION_MAJOR,
               GLOO_VERSION_MINOR, GLOO_VERSION_PATCH);
  std::fprintf(f, "  \"ranks\": %d,\n  \"collective\": \"allreduce\",\n", ranks);
  std::fprintf(f, "  \"timing\": \"blocking\",\n  \"iters\": %d,\n  \"warmup_iters\": %d,\n",
               a.iters, a.warmup);
  std::fprintf(f, "  \"check\": %s,\n  \"complete\": true,\n  \"rows\": [",
               a.check ? "true" : "false");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::fprintf(f,
                 "%s\n    {\"size\": %llu, \"count\": %llu, \"type\": \"float32\", "
                 "\"redop\": \"sum\", \"root\": -1, \"out_of_place\": {\"time_us\": %.9g, "
                 "\"algbw_gbs\": %.9g, \"busbw_gbs\": %.9g, \"wrong\": %s}, \"in_place\": null}",
                 i ? "," : "", r.size, r.size / 4, r.time_us, r.algbw, r.busbw,
                 r.wrong < 0 ? "null" : std::to_string(r.wrong).c_str());
  }
  std::fprintf(f, "\n  ]\n}\n");
  return std::fclose(f) == 0;
}

int Run(const Args& a) {
  const char* rank_env = std::getenv("RANK");
  const char* size_env = std::getenv("WORLD_SIZE");
  const int rank = rank_env ? std::atoi(rank_env) : 0;
  const int size = size_env ? std::atoi(size_env) : 1;

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  attr.ai_family = AF_INET;
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(a.store);
  gloo::rendezvous::PrefixStore store(a.prefix, file_store);
  auto rctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  rctx->setTimeout(std::chrono::seconds(120));
  rctx->connectFullMesh(store, dev);
  std::shared_ptr<gloo::Context> ctx = rctx;

  const size_t max_count = size_t(a.max_bytes / 4);
  std::vector<float> send(max_count + 1, 0.0f), recv(max_count + 1, 0.0f);
  const double bus_factor = size > 1 ? 2.0 * (size - 1) / size : 0.0;
  if (rank == 0) {
    std::printf("# gloo_allreduce_bench: gloo::allreduce (ring) float32 sum over tcp, %d rank(s)\n",
                size);
    std::printf("#       size         count      time     algbw     busbw  #wrong\n");
    std::printf("#        (B)    (elements)      (us)    (GB/s)    (GB/s)\n");
    std::fflush(stdout);
  }
  std::vector<Row> rows;
  long long total_wrong = 0;
  for (unsigned long long bytes = a.min_bytes;;) {
    const size_t count = size_t(bytes / 4);
    for (int i = 0; i < a.warmup; ++i) Allreduce(ctx, send.data(), recv.data(), count);
    Barrier(ctx);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < a.iters; ++i) Allreduce(ctx, send.data(), recv.data(), count);
    const double local =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / a.iters;
    const double seconds = Reduce<double>(ctx, local, &gloo::max<double>);
    Row r;
    r.size = count * 4ull;
    r.time_us = seconds * 1e6;
    r.algbw = seconds > 0 ? double(r.size) / seconds / 1e9 : 0.0;
    r.busbw = r.algbw * bus_factor;
    if (a.check) {
      // Small integers: every partial sum is exact in float32.
      for (size_t i = 0; i < count; ++i) send[i] = float((i * 7) % 13 + size_t(rank));
      std::fill(recv.begin(), recv.begin() + long(count), -1.0f);
      Allreduce(ctx, send.data(), recv.data(), count);
      long long wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        const float want = float(size_t(size) * ((i * 7) % 13) + size_t(size * (size - 1) / 2));
        wrong += recv[i] != want;
      }
      r.wrong = Reduce<long long>(ctx, wrong, &gloo::sum<long long>);
      total_wrong += r.wrong;
    }
    rows.push_back(r);
    if (rank == 0) {
      const std::string wrong = r.wrong < 0 ? "N/A" : std::to_string(r.wrong);
      std::printf("%12llu  %12llu  %8.2f  %8.3f  %8.3f  %6s\n", r.size, r.size / 4, r.time_us,
                  r.algbw, r.busbw, wrong.c_str());
      std::fflush(stdout);
    }
    if (bytes > a.max_bytes / a.factor) break;
    bytes *= a.factor;
  }
  int rc = total_wrong == 0 ? 0 : 1;
  if (rank == 0) {
    std::printf("# Out of bounds values : %lld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
    std::fflush(stdout);
    if (!a.json.empty() && !WriteJson(a, size, rows)) rc = 1;
  }
  Barrier(ctx);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!Parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: RANK=r WORLD_SIZE=n gloo_allreduce_bench --store DIR [--prefix P] "
                 "[-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [--json FILE]\n");
    return 2;
  }
  try {
    return Run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce_bench: %s\n", e.what());
    return 1;
  }
}
