// Multi-rank checks of plexus::reducer::Reducer on raw buffers, run under
// plexus-run (tcp) and mpirun (mpi) with 1-4 ranks. Gradients are small
// integers times the world size, so every average is an exact integer in
// every dtype (float16 and bfloat16 included) and results are compared exactly.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "plexus/algos/half.hpp"
#include "plexus/plexus.hpp"
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

// A gradient buffer of any of the four float dtypes, read and written as double.
struct Grad {
  DType dtype;
  std::vector<uint8_t> bytes;
  Grad(DType t, uint64_t n) : dtype(t), bytes(n * ElementSize(t)) {}
  uint64_t size() const { return bytes.size() / ElementSize(dtype); }
  void* data() { return bytes.data(); }
  double get(uint64_t i) const {
    uint16_t h;
    switch (dtype) {
      case DType::Float16:
        std::memcpy(&h, &bytes[2 * i], 2);
        return algos::Float16ToFloat(h);
      case DType::BFloat16:
        std::memcpy(&h, &bytes[2 * i], 2);
        return algos::BFloat16ToFloat(h);
      case DType::Float32: {
        float f;
        std::memcpy(&f, &bytes[4 * i], 4);
        return f;
      }
      default: {
        double d;
        std::memcpy(&d, &bytes[8 * i], 8);
        return d;
      }
    }
  }
  void set(uint64_t i, double v) {
    uint16_t h;
    switch (dtype) {
      case DType::Float16:
        h = algos::FloatToFloat16(float(v));
        std::memcpy(&bytes[2 * i], &h, 2);
        break;
      case DType::BFloat16:
        h = algos::FloatToBFloat16(float(v));
        std::memcpy(&bytes[2 * i], &h, 2);
        break;
      case DType::Float32: {
        float f = float(v);
        std::memcpy(&bytes[4 * i], &f, 4);
        break;
      }
      default:
        std::memcpy(&bytes[8 * i], &v, 8);
    }
  }
};

// Rank r's contribution to element k of parameter i in iteration t; the
// average over ranks is Expected(i, k, t).
double Contribution(uint32_t r, size_t i, uint64_t k, int t) {
  return double(g_size) * double((r + i + k % 7 + t) % 16);
}
double Expected(size_t i, uint64_t k, int t, uint32_t skip_rank = UINT32_MAX) {
  double sum = 0;
  for (uint32_t r = 0; r < g_size; ++r) {
    if (r != skip_rank) sum += Contribution(r, i, k, t);
  }
  return sum / g_size;
}

std::vector<Parameter> Model() {
  const DType kinds[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  std::vector<Parameter> p;
  for (size_t i = 0; i < 12; ++i) {
    const uint64_t n = 5 + 13 * i;
    p.push_back({"layer" + std::to_string(i) + ".weight", {int64_t(n)}, n, kinds[i % 4], -1});
  }
  return p;
}

std::vector<Grad> Buffers(const std::vector<Parameter>& params) {
  std::vector<Grad> g;
  for (const Parameter& p : params) g.emplace_back(p.dtype, p.count);
  return g;
}

void Fill(std::vector<Grad>& g, int t) {
  for (size_t i = 0; i < g.size(); ++i) {
    for (uint64_t k = 0; k < g[i].size(); ++k) g[i].set(k, Contribution(g_rank, i, k, t));
  }
}

void CheckAverages(std::vector<Grad>& g, int t, const std::string& what) {
  for (size_t i = 0; i < g.size(); ++i) {
    for (uint64_t k = 0; k < g[i].size(); ++k) {
      if (g[i].get(k) != Expected(i, k, t)) {
        Check(false, what + ": iteration " + std::to_string(t) + " parameter " + std::to_string(i) +
                         "[" + std::to_string(k) + "] = " + std::to_string(g[i].get(k)) +
                         ", expected " + std::to_string(Expected(i, k, t)));
        return;
      }
    }
  }
}

// Backward in a rank-dependent order: ranks disagree on the ready order, and
// the rebuild must follow rank 0's on every rank.
std::vector<size_t> ReadyOrder(size_t n, int t) {
  std::vector<size_t> order;
  for (size_t k = 0; k < n; ++k) order.push_back((n - 1 - k + g_rank * 3 + t) % n);
  return order;
}

uint64_t BucketSignature(const ReducerStats& s) {
  uint64_t h = 1469598103934665603ull;
  for (const BucketInfo& b : s.buckets) {
    for (size_t p : b.parameters) h = (h ^ (p + 1)) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  }
  return h;
}

void SameOnEveryRank(Communicator& comm, uint64_t value, const std::string& what) {
  std::vector<uint64_t> all(comm.size());
  comm.allgather(&value, all.data(), 1, DType::UInt64).wait();
  for (uint32_t r = 1; r < comm.size(); ++r)
    Check(all[r] == all[0], what + " differs on rank " + std::to_string(r));
}

void Averages(Communicator& comm, bool bucket_views) {
  const auto params = Model();
  ReducerOptions o;
  o.first_bucket_bytes = 64;
  o.bucket_cap_bytes = 256;
  Reducer reducer(comm, params, o);
  Check(reducer.stats().buckets.size() == 4, "first iteration: one bucket per dtype");
  auto grads = Buffers(params);
  for (int t = 0; t < 4; ++t) {
    Fill(grads, t);
    reducer.prepare_for_backward();
    for (size_t i : ReadyOrder(params.size(), t)) {
      void* where = grads[i].data();
      if (bucket_views) {  // write the gradient into its bucket, as DDP does with views
        where = reducer.bucket_view(i);
        std::memcpy(where, grads[i].data(), grads[i].bytes.size());
      }
      reducer.mark_ready(i, where);
    }
    reducer.finalize();
    if (bucket_views) {
      for (size_t i = 0; i < params.size(); ++i) {
        std::memcpy(grads[i].data(), reducer.bucket_view(i), grads[i].bytes.size());
      }
    }
    CheckAverages(grads, t, bucket_views ? "bucket views" : "averages");
  }
  const ReducerStats s = reducer.stats();
  Check(s.has_rebuilt_bucket, "buckets were rebuilt after iteration 1");
  Check(s.buckets.size() > 4,
        "rebuilt into many buckets (" + std::to_string(s.buckets.size()) + ")");
  // Rank 0's ready order of iteration 1 decides: its first bucket holds the
  // first parameter it marked ready.
  std::vector<size_t> order0;
  for (size_t k = 0; k < params.size(); ++k)
    order0.push_back((params.size() - 1 - k + 0 + 0) % params.size());
  Check(s.buckets.front().parameters.front() == order0.front(),
        "first rebuilt bucket follows rank 0's order");
  SameOnEveryRank(comm, BucketSignature(s), "rebuilt bucket assignment");
  Check(s.iterations == 4, "4 iterations counted");
}

void UnusedParameters(Communicator& comm) {
  const auto params = Model();
  ReducerOptions o;
  o.find_unused_parameters = true;
  o.first_bucket_bytes = 64;
  o.bucket_cap_bytes = 256;
  Reducer reducer(comm, params, o);
  auto grads = Buffers(params);
  for (int t = 0; t < 3; ++t) {
    Fill(grads, t);
    // Parameter 1 is unused everywhere; parameter 2 only on rank 0.
    std::vector<size_t> unused = {1};
    if (g_rank == 0) unused.push_back(2);
    for (uint64_t k = 0; k < grads[1].size(); ++k) grads[1].set(k, 77);
    reducer.prepare_for_backward(unused);
    for (size_t i : ReadyOrder(params.size(), t)) {
      if (i != 1 && !(i == 2 && g_rank == 0)) reducer.mark_ready(i, grads[i].data());
    }
    reducer.finalize();
    Check(!reducer.globally_used(1), "parameter 1 is unused on every rank");
    Check(grads[1].get(0) == 77, "a parameter unused everywhere keeps its gradient");
    Check(reducer.globally_used(2) == (g_size > 1), "parameter 2 is used on some rank");
    Check(reducer.needs_gradient(2) == (g_rank == 0 && g_size > 1),
          "needs_gradient(2) on rank 0 only");
    for (size_t i = 0; i < params.size(); ++i) {
      if (i == 1) continue;
      for (uint64_t k = 0; k < grads[i].size(); ++k) {
        const double want = i == 2 ? Expected(i, k, t, 0) : Expected(i, k, t);
        double got = grads[i].get(k);
        if (i == 2 && g_rank == 0) {  // the average is in the bucket
          Grad view(params[i].dtype, params[i].count);
          std::memcpy(view.data(), reducer.bucket_view(i), view.bytes.size());
          got = view.get(k);
        }
        if (got != want) {
          Check(false, "unused: parameter " + std::to_string(i) + "[" + std::to_string(k) +
                           "] = " + std::to_string(got) + ", expected " + std::to_string(want));
          break;
        }
      }
    }
  }
  Check(!reducer.stats().has_rebuilt_bucket, "no rebuild with find_unused_parameters (as PyTorch)");
}

void NoSync(Communicator& comm) {
  const auto params = Model();
  Reducer reducer(comm, params, {});
  auto grads = Buffers(params);
  auto step1 = Buffers(params);
  Fill(step1, 1);
  Fill(grads, 2);
  {
    auto guard = reducer.no_sync();
    Check(!reducer.require_backward_grad_sync(), "no_sync turns sync off");
    reducer.prepare_for_backward();  // all no-ops
    reducer.mark_ready(0, grads[0].data());
    reducer.finalize();
  }
  Check(reducer.require_backward_grad_sync(), "sync back on after the guard");
  // Accumulate step 1 into step 2's gradients, then synchronise.
  for (size_t i = 0; i < grads.size(); ++i) {
    for (uint64_t k = 0; k < grads[i].size(); ++k)
      grads[i].set(k, grads[i].get(k) + step1[i].get(k));
  }
  reducer.prepare_for_backward();
  for (size_t i = 0; i < params.size(); ++i) reducer.mark_ready(i, grads[i].data());
  reducer.finalize();
  for (size_t i = 0; i < grads.size(); ++i) {
    for (uint64_t k = 0; k < grads[i].size(); ++k) {
      if (grads[i].get(k) != Expected(i, k, 1) + Expected(i, k, 2)) {
        Check(false, "no_sync: parameter " + std::to_string(i) + " is not the average of the sums");
        return;
      }
    }
  }
}

void Hooks(Communicator& comm, const char* name, CommHook hook) {
  const auto params = Model();
  Reducer reducer(comm, params, {});
  reducer.register_comm_hook(hook);
  size_t seen = 0;
  bool last_seen = false;
  if (std::string(name) == "custom") {
    // A user hook sees the undivided bucket and the parameter list.
    Reducer custom(comm, params, {});
    custom.register_comm_hook([&](Communicator& c, GradBucket& b) {
      seen += b.parameters.size();  // first iteration: one bucket per dtype
      last_seen = b.is_last() && b.bucket_count == 4;
      return AllreduceHook()(c, b);
    });
    auto grads = Buffers(params);
    Fill(grads, 0);
    custom.prepare_for_backward();
    for (size_t i = 0; i < params.size(); ++i) custom.mark_ready(i, grads[i].data());
    custom.finalize();
    CheckAverages(grads, 0, "custom hook");
    Check(seen == params.size() && last_seen, "custom hook saw every parameter, last bucket last");
    return;
  }
  auto grads = Buffers(params);
  for (int t = 0; t < 3; ++t) {
    Fill(grads, t);
    reducer.prepare_for_backward();
    for (size_t i : ReadyOrder(params.size(), t)) reducer.mark_ready(i, grads[i].data());
    reducer.finalize();
    CheckAverages(grads, t, name);
  }
  Check(reducer.stats().comm_hook, "stats say a hook is registered");
}

template <typename F>
void ExpectError(const std::string& what, const std::string& needle, F&& f) {
  try {
    f();
    Check(false, what + ": no error");
  } catch (const Error& e) {
    Check(std::string(e.what()).find(needle) != std::string::npos,
          what + ": message lacks '" + needle + "': " + e.what());
  }
}

// ReducerOptions::ready_order: an earlier run's order (its stats) makes the
// buckets as that run's were after its rebuild, from the first iteration on,
// and the averages stay right; a wrong size is an error.
void GivenReadyOrder(Communicator& comm) {
  const auto params = Model();
  ReducerOptions o;
  o.first_bucket_bytes = 64;
  o.bucket_cap_bytes = 256;
  ReducerStats earlier;
  {
    Reducer first(comm, params, o);
    auto grads = Buffers(params);
    for (int t = 0; t < 2; ++t) {
      Fill(grads, t);
      first.prepare_for_backward();
      for (size_t i : ReadyOrder(params.size(), t)) first.mark_ready(i, grads[i].data());
      first.finalize();
    }
    earlier = first.stats();
  }
  Check(earlier.ready_order.size() == params.size(), "stats give the rebuild's ready order");
  o.ready_order = earlier.ready_order;
  Reducer again(comm, params, o);
  Check(BucketSignature(again.stats()) != BucketSignature(earlier),
        "before the first iteration the buckets are still one per dtype");
  auto grads = Buffers(params);
  Fill(grads, 0);
  again.prepare_for_backward();
  Check(BucketSignature(again.stats()) == BucketSignature(earlier),
        "with ready_order the first iteration runs on the earlier run's rebuilt buckets");
  for (size_t i : ReadyOrder(params.size(), 1)) again.mark_ready(i, grads[i].data());
  again.finalize();
  CheckAverages(grads, 0, "averages with a given ready order");
  o.ready_order.pop_back();
  ExpectError("a ready order of the wrong size", "ready_order has",
              [&] { Reducer bad(comm, params, o); });
}

void Errors(Communicator& comm) {
  const auto params = Model();
  Reducer reducer(comm, params, {});
  auto grads = Buffers(params);
  Fill(grads, 0);
  reducer.prepare_for_backward();
  reducer.mark_ready(3, grads[3].data());
  ExpectError("marked twice", "'layer3.weight' (index 3) was marked ready twice",
              [&] { reducer.mark_ready(3, grads[3].data()); });
  ExpectError("null gradient", "null gradient", [&] { reducer.mark_ready(4, nullptr); });
  ExpectError("index out of range", "out of range",
              [&] { reducer.mark_ready(99, grads[0].data()); });
  // Parameters 5 and 7 produce no gradient: named after the others were reduced.
  for (size_t i = 0; i < params.size(); ++i) {
    if (i != 3 && i != 5 && i != 7) reducer.mark_ready(i, grads[i].data());
  }
  ExpectError("no gradient", "'layer5.weight', 'layer7.weight'", [&] { reducer.finalize(); });
  // The reducer is usable again, and the ranks are still in step.
  Fill(grads, 1);
  reducer.prepare_for_backward();
  for (size_t i = 0; i < params.size(); ++i) reducer.mark_ready(i, grads[i].data());
  reducer.finalize();
  CheckAverages(grads, 1, "after an error");
  ExpectError("finalize twice", "without prepare_for_backward", [&] { reducer.finalize(); });
  ExpectError("hook too late", "before the first iteration",
              [&] { reducer.register_comm_hook(AllreduceHook()); });
  // A hook that fails (on every rank alike, so the ranks stay in step): the
  // error names the bucket, and the reducer refuses to go on.
  Reducer failing(comm, params, {});
  failing.register_comm_hook([](Communicator&, GradBucket& b) -> BucketFuture {
    if (b.index == 0) throw std::runtime_error("compression failed");
    return BucketFuture();
  });
  failing.prepare_for_backward();
  ExpectError("failing hook", "all-reduce of bucket 0 of 4", [&] {
    for (size_t i = 0; i < params.size(); ++i) failing.mark_ready(i, grads[i].data());
    failing.finalize();
  });
  ExpectError("after a failure", "unusable after an earlier failure", [&] { failing.finalize(); });
  ExpectError("after a failure", "compression failed", [&] { failing.prepare_for_backward(); });
  std::vector<Parameter> ints = {{"steps", {1}, 1, DType::Int64, -1}};
  ExpectError("integer gradient", "'steps' has dtype int64", [&] { Reducer r(comm, ints, {}); });
}

void Replicas(Communicator& comm) {
  auto params = Model();
  VerifyReplicas(comm, params);  // the same everywhere: no error
  if (comm.size() < 2) return;
  if (comm.rank() == comm.size() - 1) params[4].shape = {7, 3};
  const std::string needle = "rank(s) " + std::to_string(comm.size() - 1) +
                             " differ from rank 0; first difference, parameter #4: rank 0 has "
                             "'layer4.weight' float32 [57], rank " +
                             std::to_string(comm.size() - 1) +
                             " has 'layer4.weight' float32 [7, 3]";
  ExpectError("shapes differ", needle, [&] { VerifyReplicas(comm, params); });
}

}  // namespace

int main() {
  try {
    auto comm = Communicator::from_env();
    g_rank = comm.rank();
    g_size = comm.size();
    Averages(comm, false);
    Averages(comm, true);
    GivenReadyOrder(comm);
    UnusedParameters(comm);
    NoSync(comm);
    Hooks(comm, "allreduce hook", AllreduceHook());
    Hooks(comm, "fp16 compress hook", Fp16CompressHook());
    Hooks(comm, "bf16 compress hook", Bf16CompressHook());
    Hooks(comm, "custom", nullptr);
    Errors(comm);
    Replicas(comm);
    comm.barrier().wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %u: error: %s\n", g_rank, e.what());
    return 1;
  }
  if (g_failures) return 1;
  if (g_rank == 0) std::printf("reducer checks passed on %u rank(s)\n", g_size);
  return 0;
}
