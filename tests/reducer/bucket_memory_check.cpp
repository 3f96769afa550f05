// The reducer's memory seam (plexus/reducer/bucket_memory.hpp), without
// LibTorch and without a device, run under plexus-run (tcp) with 1-3 ranks:
//  - HostBucketMemory's operations give exactly the values of the reducer's
//    host arithmetic (division, 16-bit rounding, conversion, fill, copies);
//  - a reducer on a counting BucketMemory (host memory underneath) gives
//    bit-identical averages to the default one, and every gradient byte it
//    moves goes through the seam: one copy_divided per mark_ready, one copy
//    per write-back, one placement_for_post per bucket, as many releases as
//    allocations;
//  - the comm hooks work through the seam too (the compress hooks allocate
//    their 16-bit buffer there and release it);
//  - errors: a parameter on another device than the buckets; a BucketMemory
//    of CUDA memory on a backend without it (names the backend and NCCL);
//  - the host control collectives run directly on a backend that takes host
//    memory (the memory is not touched).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "plexus/algos/half.hpp"
#include "plexus/plexus.hpp"
#include "plexus/reducer/bucket_memory.hpp"
#include "plexus/reducer/reducer.hpp"

using namespace plexus;
using namespace plexus::reducer;

namespace {

int g_failures = 0;
uint32_t g_rank = 0, g_size = 1;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "rank %u: FAILED: %s\n", g_rank, what.c_str());
    ++g_failures;
  }
}

template <typename F>
void ExpectError(const std::string& what, int32_t status, const std::string& needle, F&& f) {
  try {
    f();
    Check(false, what + ": no error");
  } catch (const Error& e) {
    Check(e.status() == status, what + ": status " + std::to_string(e.status()) + ", expected " +
                                    std::to_string(status) + ": " + e.what());
    Check(std::string(e.what()).find(needle) != std::string::npos,
          what + ": message lacks '" + needle + "': " + e.what());
  }
}

// Host memory that counts what the reducer asks of it, and may claim to be
// another kind of memory (for the construction errors).
class CountingMemory : public BucketMemory {
 public:
  explicit CountingMemory(plexus_memory_type_t type = PLEXUS_MEMORY_HOST, int device = -1)
      : type_(type), device_(device) {}
  plexus_memory_type_t memory_type() const override { return type_; }
  int device() const override { return device_; }
  std::string describe() const override {
    return type_ == PLEXUS_MEMORY_CUDA ? "cuda:" + std::to_string(device_) : "host memory";
  }
  void* allocate(uint64_t bytes) override {
    ++allocations;
    return host_.allocate(bytes);
  }
  void release(void* p) noexcept override {
    ++releases;
    host_.release(p);
  }
  void copy_divided(void* dst, const void* src, uint64_t count, DType dtype,
                    double divisor) override {
    ++copies_in;
    host_.copy_divided(dst, src, count, dtype, divisor);
  }
  void convert_divided(void* dst, DType to, const void* src, DType from, uint64_t count,
                       double divisor) override {
    ++conversions;
    host_.convert_divided(dst, to, src, from, count, divisor);
  }
  void zero(void* dst, uint64_t bytes) override {
    ++zeros;
    host_.zero(dst, bytes);
  }
  void copy(void* dst, const void* src, uint64_t bytes) override {
    ++copies;
    host_.copy(dst, src, bytes);
  }
  void copy_from_host(void* dst, const void* src, uint64_t bytes) override {
    ++staged;
    host_.copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, uint64_t bytes) override {
    ++staged;
    host_.copy_to_host(dst, src, bytes);
  }
  std::optional<plexus_placement> placement_for_post(bool stream_ordered) override {
    ++posts;
    return host_.placement_for_post(stream_ordered);
  }

  int allocations = 0, releases = 0, copies_in = 0, conversions = 0, zeros = 0, copies = 0,
      staged = 0, posts = 0;

 private:
  HostBucketMemory host_;
  plexus_memory_type_t type_;
  int device_;
};

uint16_t Half(float v) {
  return algos::FloatToFloat16(v);
}

void HostOperations() {
  HostBucketMemory m;
  Check(m.memory_type() == PLEXUS_MEMORY_HOST && m.device() == -1, "host memory type and device");
  Check(!m.placement_for_post(true) && !m.placement_for_post(false),
        "host memory posts without a placement");
  void* empty = m.allocate(0);
  Check(empty != nullptr, "allocate(0) gives a pointer");
  m.release(empty);
  auto* p = static_cast<uint8_t*>(m.allocate(100));
  Check(reinterpret_cast<uintptr_t>(p) % 64 == 0, "allocate aligns to 64 bytes");
  bool zeroed = true;
  for (int i = 0; i < 100; ++i) zeroed = zeroed && p[i] == 0;
  Check(zeroed, "allocate zero-fills");

  // float16: divided in float and rounded once; a multiple of the divisor exactly.
  const uint16_t h_in[3] = {Half(6.0f), Half(1.0f), Half(-7.5f)};
  uint16_t h_out[3];
  m.copy_divided(h_out, h_in, 3, DType::Float16, 3.0);
  Check(h_out[0] == Half(2.0f) && h_out[1] == Half(1.0f / 3.0f) && h_out[2] == Half(-2.5f),
        "float16 copy_divided by 3");
  // In place, float32 and float64.
  float f[2] = {9.0f, 1.0f};
  m.copy_divided(f, f, 2, DType::Float32, 3.0);
  Check(f[0] == 3.0f && f[1] == 1.0f / 3.0f, "float32 copy_divided in place");
  double d[2] = {9.0, 1.0};
  m.copy_divided(d, d, 2, DType::Float64, 1.0);
  Check(d[0] == 9.0 && d[1] == 1.0, "divisor 1 leaves the values");
  // float32 -> bfloat16 divided, and back.
  const float c_in[2] = {12.0f, 0.1f};
  uint16_t b[2];
  m.convert_divided(b, DType::BFloat16, c_in, DType::Float32, 2, 4.0);
  Check(b[0] == algos::FloatToBFloat16(3.0f) &&
            b[1] == algos::FloatToBFloat16(static_cast<float>(double(0.1f) / 4.0)),
        "convert_divided float32 -> bfloat16");
  float back[2];
  m.convert_divided(back, DType::Float32, b, DType::BFloat16, 2, 1.0);
  Check(back[0] == 3.0f && back[1] == algos::BFloat16ToFloat(b[1]), "bfloat16 -> float32");
  // zero, copy, and the host transfers.
  std::memset(p, 0xab, 100);
  m.zero(p + 10, 20);
  Check(p[9] == 0xab && p[10] == 0 && p[29] == 0 && p[30] == 0xab, "zero fills exactly its range");
  const char text[] = "bucket";
  m.copy_from_host(p, text, sizeof text);
  char out[sizeof text];
  m.copy_to_host(out, p, sizeof text);
  Check(std::strcmp(out, text) == 0, "copy_from_host then copy_to_host");
  m.copy(p + 50, p, sizeof text);
  Check(std::memcmp(p + 50, text, sizeof text) == 0, "copy within the memory");
  m.release(p);
}

std::vector<Parameter> Model() {
  const DType kinds[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  std::vector<Parameter> p;
  for (size_t i = 0; i < 8; ++i) {
    const uint64_t n = 3 + 11 * i;
    p.push_back({"p" + std::to_string(i), {int64_t(n)}, n, kinds[i % 4], -1});
  }
  return p;
}

// Gradients as raw bytes: element k of parameter i on rank r in iteration t
// is size * ((r + i + k + t) % 8), so every average is exact in every dtype.
std::vector<std::vector<uint8_t>> Gradients(const std::vector<Parameter>& params, int t) {
  std::vector<std::vector<uint8_t>> g;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<double> v(params[i].count);
    for (uint64_t k = 0; k < v.size(); ++k)
      v[k] = double(g_size) * double((g_rank + i + k + t) % 8);
    std::vector<uint8_t> bytes(params[i].count * ElementSize(params[i].dtype));
    HostBucketMemory().convert_divided(bytes.data(), params[i].dtype, v.data(), DType::Float64,
                                       v.size(), 1.0);
    g.push_back(std::move(bytes));
  }
  return g;
}

// Runs `iterations` iterations (the second rebuilds the buckets) and
// returns every gradient after every iteration, concatenated.
std::vector<uint8_t> Train(Communicator& comm, std::shared_ptr<BucketMemory> memory, CommHook hook,
                           int iterations, ReducerOptions options = {}) {
  const auto params = Model();
  Reducer reducer(comm, params, options, std::move(memory));
  if (hook) reducer.register_comm_hook(std::move(hook));
  std::vector<uint8_t> all;
  for (int t = 0; t < iterations; ++t) {
    auto grads = Gradients(params, t);
    reducer.prepare_for_backward();
    for (size_t k = params.size(); k-- > 0;) reducer.mark_ready(k, grads[k].data());
    reducer.finalize();
    for (const auto& g : grads) all.insert(all.end(), g.begin(), g.end());
  }
  return all;
}

void ThroughTheSeam(Communicator& comm) {
  const int kIterations = 3;
  ReducerOptions small;
  small.bucket_cap_bytes = 64;
  small.first_bucket_bytes = 64;
  const auto reference = Train(comm, nullptr, nullptr, kIterations, small);
  auto counting = std::make_shared<CountingMemory>();
  std::vector<uint8_t> seen;
  uint64_t buckets_after_rebuild = 0;
  {
    const auto params = Model();
    Reducer reducer(comm, params, small, counting);
    for (int t = 0; t < kIterations; ++t) {
      auto grads = Gradients(params, t);
      reducer.prepare_for_backward();
      for (size_t k = params.size(); k-- > 0;) reducer.mark_ready(k, grads[k].data());
      reducer.finalize();
      for (const auto& g : grads) seen.insert(seen.end(), g.begin(), g.end());
    }
    buckets_after_rebuild = reducer.stats().buckets.size();
    Check(reducer.stats().has_rebuilt_bucket, "the buckets were rebuilt");
  }
  Check(seen == reference, "a reducer on a BucketMemory gives the default reducer's bytes");
  const int n = static_cast<int>(Model().size());
  // First iteration: one bucket per dtype (4); then the rebuilt buckets.
  const int posts = 4 + static_cast<int>(buckets_after_rebuild) * (kIterations - 1);
  Check(counting->copies_in == n * kIterations,
        "one copy_divided per mark_ready (" + std::to_string(counting->copies_in) + ")");
  Check(counting->copies == n * kIterations + n,
        "one copy per write-back, and one per parameter at the rebuild (" +
            std::to_string(counting->copies) + ")");
  Check(counting->posts == posts, "one placement_for_post per bucket all-reduce (" +
                                      std::to_string(counting->posts) + ", expected " +
                                      std::to_string(posts) + ")");
  Check(counting->allocations == 4 + static_cast<int>(buckets_after_rebuild),
        "one allocation per bucket built (" + std::to_string(counting->allocations) + ")");
  Check(counting->releases == counting->allocations, "every bucket released");
  Check(counting->staged == 0 && counting->zeros == 0 && counting->conversions == 0,
        "no staging, fills or conversions on a host backend without unused parameters");

  // Unused parameters: their zeros are written through the seam.
  ReducerOptions unused_options;
  unused_options.find_unused_parameters = true;
  auto unused_memory = std::make_shared<CountingMemory>();
  {
    const auto params = Model();
    Reducer reducer(comm, params, unused_options, unused_memory);
    auto grads = Gradients(params, 0);
    const size_t unused[] = {1, 5};
    reducer.prepare_for_backward(unused);
    for (size_t k = params.size(); k-- > 0;) {
      if (k != 1 && k != 5) reducer.mark_ready(k, grads[k].data());
    }
    reducer.finalize();
    Check(reducer.globally_used(0) && !reducer.globally_used(1), "used bitmap through the seam");
  }
  Check(unused_memory->zeros == 2, "unused parameters zero-filled through the seam (" +
                                       std::to_string(unused_memory->zeros) + ")");
  Check(unused_memory->releases == unused_memory->allocations, "every bucket released");

  // The hooks: the same bytes as on host memory, buffers through the seam.
  for (const char* name : {"allreduce", "fp16", "bf16"}) {
    auto make = [&] {
      return std::string(name) == "fp16"   ? Fp16CompressHook()
             : std::string(name) == "bf16" ? Bf16CompressHook()
                                           : AllreduceHook();
    };
    const auto want = Train(comm, nullptr, make(), 2);
    auto memory = std::make_shared<CountingMemory>();
    const auto got = Train(comm, memory, make(), 2);
    Check(got == want, std::string(name) + " hook: the same bytes through a BucketMemory");
    Check(memory->releases == memory->allocations,
          std::string(name) + " hook: every buffer released (" +
              std::to_string(memory->allocations) + " allocations, " +
              std::to_string(memory->releases) + " releases)");
    if (std::string(name) != "allreduce") {
      Check(memory->conversions > 0 && memory->allocations > 4,
            std::string(name) + " hook converts and allocates through the seam");
    } else {
      const int n = static_cast<int>(Model().size());
      Check(memory->copies_in > 2 * n, "allreduce hook divides through the seam");
    }
  }
}

void Errors(Communicator& comm) {
  auto params = Model();
  params[3].device = 0;
  ExpectError("parameter on a device, buckets on the host", PLEXUS_ERR_INVALID_ARGUMENT,
              "parameter 'p3' is on device 0 but the buckets are in host memory",
              [&] { Reducer r(comm, params, {}); });
  auto device_params = Model();
  for (auto& p : device_params) p.device = 0;
  device_params[2].device = 1;
  auto cuda = std::make_shared<CountingMemory>(PLEXUS_MEMORY_CUDA, 0);
  ExpectError("parameters on two devices", PLEXUS_ERR_INVALID_ARGUMENT,
              "parameter 'p2' is on device 1 but the buckets are in cuda:0",
              [&] { Reducer r(comm, device_params, {}, cuda); });
  device_params[2].device = 0;
  if ((comm.capabilities().memory_types & (1u << PLEXUS_MEMORY_CUDA)) == 0) {
    ExpectError("CUDA buckets on a host-only backend", PLEXUS_ERR_UNSUPPORTED,
                "backend '" + comm.backend_name() +
                    "' cannot communicate cuda:0, where the buckets are: use a backend with CUDA "
                    "memory, e.g. NCCL (PLEXUS_BACKEND=nccl)",
                [&] { Reducer r(comm, device_params, {}, cuda); });
    Check(cuda->allocations == 0, "nothing allocated by a refused reducer");
  }
}

void HostControl(Communicator& comm) {
  CountingMemory memory;
  int64_t v[2] = {int64_t(g_rank), 1};
  HostAllreduce(comm, memory, v, 2, DType::Int64, ReduceOp::Sum);
  Check(v[0] == int64_t(g_size) * (g_size - 1) / 2 && v[1] == int64_t(g_size), "HostAllreduce");
  uint64_t x = g_rank == 0 ? 42 : 0;
  HostBroadcast(comm, memory, &x, 1, DType::UInt64, 0);
  Check(x == 42, "HostBroadcast");
  const uint32_t mine = g_rank * 10;
  std::vector<uint32_t> all(g_size);
  HostAllgather(comm, memory, &mine, all.data(), 1, DType::UInt32);
  bool ok = true;
  for (uint32_t r = 0; r < g_size; ++r) ok = ok && all[r] == r * 10;
  Check(ok, "HostAllgather");
  Check(TakesHostMemory(comm), "the test backend takes host memory");
  Check(memory.allocations == 0 && memory.staged == 0,
        "a backend that takes host memory gets the control data directly");
  VerifyReplicas(comm, Model(), memory);
  Check(memory.allocations == 0, "VerifyReplicas on host memory directly");
}

}  // namespace

int main() {
  try {
    auto comm = Communicator::from_env();
    g_rank = comm.rank();
    g_size = comm.size();
    HostOperations();
    ThroughTheSeam(comm);
    Errors(comm);
    HostControl(comm);
    comm.barrier().wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %u: error: %s\n", g_rank, e.what());
    return 1;
  }
  if (g_failures) return 1;
  if (g_rank == 0) std::printf("bucket memory checks passed on %u rank(s)\n", g_size);
  return 0;
}
