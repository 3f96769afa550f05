// Communication hooks: how one bucket of gradients is all-reduced.
//
// As in PyTorch DDP (register_comm_hook), a hook receives a GradBucket, the
// bucket's flat buffer of gradients, and starts its reduction; it returns a
// BucketFuture that completes once the buffer holds the bucket's *average*
// over the ranks. The reducer runs the hooks of one iteration in bucket
// order, from the thread that calls mark_ready/finalize.
//
// Without a hook the reducer averages (see reducer.hpp). With a hook the
// gradients arrive undivided: the hook averages. The bucket may be in device
// memory (GradBucket::memory says where): a hook touches it only through
// that BucketMemory.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>

#include "plexus/communicator.hpp"
#include "plexus/reducer/bucket_memory.hpp"

namespace plexus::reducer {

struct GradBucket {
  size_t index = 0;         // bucket index; buckets are reduced in index order
  size_t bucket_count = 0;  // buckets in this iteration
  void* buffer = nullptr;   // flat gradients of the bucket; the hook leaves the average here
  uint64_t count = 0;       // elements of dtype in buffer
  DType dtype = DType::Float32;
  std::span<const size_t> parameters;  // parameter indices, in the bucket's order
  // Where buffer lives: work on it through memory, and post collectives on it
  // with memory->placement_for_post(). Never null when the reducer calls.
  std::shared_ptr<BucketMemory> memory;

  bool is_last() const { return index + 1 == bucket_count; }
};

// A Work plus what to do once it has completed (e.g. cast a compressed
// buffer back). Move-only. Not thread-safe. A failure is kept: every later
// test() or wait() throws it again, so a failed bucket never reads as done.
// Destroying a future that is still running drops its Work (the
// communicator finishes it) and its continuation (what it owns is freed):
// the reducer waits for its futures, or keeps them, before that can happen.
class BucketFuture {
 public:
  BucketFuture() = default;  // already complete
  explicit BucketFuture(Work work, std::function<void()> then = nullptr)
      : work_(std::move(work)), then_(std::move(then)), done_(false) {}

  // True once complete (the continuation has run). Throws plexus::Error if
  // the operation failed. Never blocks.
  bool test();
  // Blocks until complete; timeout < 0 = the communicator's. Throws plexus::Error.
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));
  // Completed, successfully or not.
  bool done() const { return done_ || failure_ != nullptr; }
  // The operation may still be using its buffers.
  bool in_flight() const { return !done() && !work_.completed(); }

 private:
  void Complete();
  template <typename F>
  void Guarded(F&& step);
  Work work_;
  std::function<void()> then_;
  bool done_ = true;
  std::exception_ptr failure_;
};

// The hook: called with the communicator the reducer runs on. Must not block
// on the reduction itself (return a BucketFuture instead) and must leave the
// average in bucket.buffer once its future completes.
using CommHook = std::function<BucketFuture(Communicator& comm, GradBucket& bucket)>;

// Divide by the world size, then all-reduce the sum in place (PyTorch's allreduce_hook).
CommHook AllreduceHook();
// Divide by the world size, cast to float16 (bfloat16), all-reduce the sum of
// the 16-bit values, cast back into the bucket (PyTorch's fp16_compress_hook
// and bf16_compress_hook). The division comes first so that the 16-bit sum
// cannot overflow where the average would not. Halves the bytes sent.
CommHook Fp16CompressHook();
CommHook Bf16CompressHook();

}  // namespace plexus::reducer
