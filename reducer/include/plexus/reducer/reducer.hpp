// plexus::reducer::Reducer — gradient bucketing for data-parallel training,
// over any backend, on raw gradient buffers (no LibTorch).
//
// It does what PyTorch DDP's C++ Reducer (torch/csrc/distributed/c10d/
// reducer.cpp) does, with its names and defaults:
//
//   Reducer reducer(comm, parameters, {});
//   for each step:
//     reducer.prepare_for_backward(unused);     // backward is about to run
//     ... as each gradient is computed:
//     reducer.mark_ready(i, grad_i);            // copies grad_i into its bucket; a full
//                                               // bucket starts its all-reduce at once
//     reducer.finalize();                       // waits; grad_i now holds the average
//
// Buckets. At construction the gradients are bucketed by
// ComputeBucketAssignmentBySize, and the bucket list is reversed (gradients
// of the last parameters are computed first). As in PyTorch, the first
// iteration then uses one bucket per dtype unless find_unused_parameters is
// set; after the first synchronised iteration the buckets are rebuilt once,
// in the order the gradients became ready on rank 0 (broadcast, so ranks
// whose orders differ still agree), with limits {first_bucket_bytes,
// bucket_cap_bytes}. Buckets start their all-reduce strictly in index order.
//
// Unused parameters (find_unused_parameters): prepare_for_backward is told
// which parameters take no part; they count as ready with a zero gradient at
// once. A bitmap of the parameters used anywhere is all-reduced: a parameter
// unused on every rank keeps its gradient untouched; one unused here but used
// elsewhere receives the average (needs_gradient() says so).
//
// no_sync: while a NoSyncGuard lives, the reducer does nothing: the caller's
// gradients accumulate where they are and the next synchronised iteration
// reduces their sum.
//
// Averaging: without a comm hook, float32/float64 buckets are all-reduced
// with PLEXUS_OP_AVG (the backend divides, off the training thread);
// float16/bfloat16 gradients are divided by the world size as they are
// copied into their bucket and then summed (PyTorch's way for every dtype),
// so that a 16-bit sum cannot overflow.
//
// Bucket views (gradient_as_bucket_view in DDP): bucket_view(i) is the place
// of gradient i in its bucket; a gradient passed to mark_ready at that very
// address is used in place (no copy in, no copy back). A rebuild moves the
// views (the values move with them): call bucket_view again after
// prepare_for_backward when buckets_generation() changed.
//
// Memory: the buckets live in a BucketMemory (bucket_memory.hpp), host
// memory unless the constructor is given another; gradients, bucket views
// and the comm hooks' buffers are then in that memory, and every bucket's
// all-reduce is posted with its placement (a CUDA device and the current
// stream). The reducer's small control collectives (the ready order, the
// used-parameter bitmap) stay in host memory unless the backend takes device
// memory only; then they are staged through the BucketMemory.
//
// Errors are thrown as plexus::Error and say what and where: a parameter
// marked ready twice, parameters that produced no gradient (named, with the
// fix), a bucket whose all-reduce failed (its index and parameters), ranks
// whose parameters differ (VerifyReplicas).
//
// Thread safety: none; one thread calls everything (autograd's, for DDP).
// The reducer holds a reference to comm, which must outlive it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "plexus/communicator.hpp"
#include "plexus/reducer/bucket_assignment.hpp"
#include "plexus/reducer/bucket_memory.hpp"
#include "plexus/reducer/comm_hook.hpp"

namespace plexus::reducer {

inline constexpr uint64_t kDefaultFirstBucketBytes =
    1024 * 1024;  // dist._DEFAULT_FIRST_BUCKET_BYTES
inline constexpr uint64_t kDefaultBucketCapBytes = 25ull * 1024 * 1024;  // bucket_cap_mb = 25

// One parameter's gradient as the reducer sees it.
struct Parameter {
  std::string name;              // for errors and statistics ("fc1.weight")
  std::vector<int64_t> shape;    // for the cross-rank check; {count} if unknown
  uint64_t count = 0;            // elements
  DType dtype = DType::Float32;  // float16, bfloat16, float32 or float64
  int device = -1;               // -1 = host memory, else the device of the BucketMemory
};

struct ReducerOptions {
  uint64_t bucket_cap_bytes = kDefaultBucketCapBytes;
  uint64_t first_bucket_bytes = kDefaultFirstBucketBytes;
  bool find_unused_parameters = false;
  // With find_unused_parameters: the first iteration's unused set is the
  // same every iteration (the graph is static); also enables the rebuild.
  bool static_graph = false;
  // The order gradients became ready in an earlier run of the same model
  // (ReducerStats::ready_order, saved with a checkpoint), or empty. Given,
  // the buckets are rebuilt by it before the first iteration rather than
  // after it, so that a run resumed from a checkpoint reduces every step
  // as the uninterrupted run did: with 3 ranks or more an element's sum
  // rounds by where its bucket puts it, and the first iteration's single
  // bucket puts it elsewhere. Give it on every rank or on none (rank 0's is
  // used); one entry per parameter. Unused without a rebuild
  // (find_unused_parameters without static_graph).
  std::vector<size_t> ready_order;
};

struct BucketInfo {
  uint64_t bytes = 0;
  DType dtype = DType::Float32;
  uint64_t size_limit = 0;
  std::vector<size_t> parameters;
  // How its allreduce goes: "flat" or "two-level" (Communicator::allreduce_scheme).
  std::string comm_scheme = "flat";
};

// Times of one synchronised iteration, in microseconds (DDPLoggingData's names).
struct IterationTimes {
  double backward_compute_time = 0;               // prepare_for_backward -> last mark_ready
  double backward_comm_time = 0;                  // first bucket launched -> every bucket reduced
  double backward_compute_comm_overlap_time = 0;  // first launch -> last mark_ready
  double comm_not_hidden_time = 0;  // last mark_ready -> finalize done (what backward waited)
};

struct ReducerStats {
  std::vector<BucketInfo> buckets;
  bool has_rebuilt_bucket = false;
  // The parameters in the order the buckets were rebuilt by (the ready order
  // of rank 0's first iteration); empty before the rebuild.
  std::vector<size_t> ready_order;
  uint64_t iterations = 0;  // synchronised iterations finalized
  IterationTimes last;      // of the last iteration
  IterationTimes average;   // over every iteration but the first
  uint64_t bucket_cap_bytes = 0;
  uint64_t first_bucket_bytes = 0;
  bool find_unused_parameters = false;
  bool comm_hook = false;
  std::string backend;
  uint32_t world_size = 0;
};

class Reducer {
 public:
  // Checks the parameters (non-empty, float dtypes, on memory's device) and
  // buckets them in `memory` (null: host memory). Not collective: call
  // VerifyReplicas first to check that every rank has the same parameters.
  // Throws plexus::Error, UNSUPPORTED when the backend cannot communicate
  // that memory.
  Reducer(Communicator& comm, std::vector<Parameter> parameters, ReducerOptions options = {},
          std::shared_ptr<BucketMemory> memory = nullptr);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Starts a synchronised iteration. Collective on the iteration that
  // rebuilds the buckets (the second). `unused`: parameters that take no part
  // (only with find_unused_parameters). No-op under no_sync.
  void prepare_for_backward(std::span<const size_t> unused = {});

  // Gradient `index` is ready at `grad` (count elements of its dtype). The
  // reducer reads it now, and writes the average back to it in finalize(),
  // so it must stay valid until then. No-op under no_sync.
  void mark_ready(size_t index, void* grad);

  // Parameter `index` takes no part in this iteration after all: a zero
  // gradient, not counted as used here (find_unused_parameters only). The
  // same as naming it to prepare_for_backward, later (DDP does it at the
  // first gradient of backward, so nothing is posted between forward and
  // backward).
  void mark_unused(size_t index);

  // Waits for every bucket and writes the averages back. Throws plexus::Error
  // if a parameter produced no gradient (after reducing the rest, so ranks
  // stay in step) or a bucket's reduction failed. No-op under no_sync.
  void finalize();

  // True when this iteration has started and not been finalized.
  bool in_backward() const;
  // After finalize(): parameter `index` was unused here but used on another
  // rank, so its average is at bucket_view(index) and no gradient holds it.
  bool needs_gradient(size_t index) const;
  // After finalize() with find_unused_parameters: used on some rank.
  bool globally_used(size_t index) const;

  // Where gradient `index` lives in its bucket (see "Bucket views").
  void* bucket_view(size_t index);
  // Changes whenever the buckets (and so the views) are rebuilt.
  uint64_t buckets_generation() const;

  // A joined rank's share of an iteration (uneven inputs): an iteration in
  // which every gradient is zero and no gradient is written back. Collective.
  void run_zero_iteration();

  // Replaces the default averaging (see comm_hook.hpp). Before the first
  // iteration only (INVALID_USAGE otherwise).
  void register_comm_hook(CommHook hook);

  class NoSyncGuard {
   public:
    explicit NoSyncGuard(Reducer& r);
    ~NoSyncGuard();
    NoSyncGuard(NoSyncGuard&& other) noexcept;
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(NoSyncGuard&&) = delete;

   private:
    Reducer* reducer_;  // null once moved from
    bool previous_;
  };
  // While the guard lives, gradients are not synchronised (see "no_sync").
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  bool require_backward_grad_sync() const;

  const std::vector<Parameter>& parameters() const;
  ReducerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Checks, collectively, that every rank has the same parameters (names,
// shapes, dtypes, in the same order). Throws plexus::Error on every rank when
// they differ, naming the first parameter that differs and the ranks.
void VerifyReplicas(Communicator& comm, std::span<const Parameter> parameters);
// The same, for a backend that may take device memory only: its collectives
// go through `memory` when the backend takes no host memory.
void VerifyReplicas(Communicator& comm, std::span<const Parameter> parameters,
                    BucketMemory& memory);

}  // namespace plexus::reducer
