#include "plexus/reducer/comm_hook.hpp"

#include <memory>
#include <optional>
#include <vector>

#include "gradient_math.hpp"

namespace plexus::reducer {

void BucketFuture::Complete() {
  done_ = true;
  if (then_) std::exchange(then_, nullptr)();
}

template <typename F>
void BucketFuture::Guarded(F&& step) {
  if (failure_) std::rethrow_exception(failure_);
  try {
    step();
  } catch (const Error& e) {
    // A timeout with the operation still pending may be waited on again;
    // anything else is final.
    if (e.status() != PLEXUS_ERR_TIMEOUT || work_.completed()) failure_ = std::current_exception();
    throw;
  }
}

bool BucketFuture::test() {
  if (done_) return true;
  bool complete = false;
  Guarded([&] {
    if (work_.test()) {
      Complete();
      complete = true;
    }
  });
  return complete;
}

void BucketFuture::wait(std::chrono::milliseconds timeout) {
  if (done_) return;
  Guarded([&] {
    work_.wait(timeout);
    Complete();
  });
}

namespace {

// The memory of a bucket; host memory for a GradBucket built without one.
std::shared_ptr<BucketMemory> MemoryOf(const GradBucket& b) {
  return b.memory ? b.memory : std::make_shared<HostBucketMemory>();
}

bool StreamOrdered(const Communicator& comm) {
  return (comm.capabilities().flags & PLEXUS_CAP_STREAM_ORDERED) != 0;
}

}  // namespace

CommHook AllreduceHook() {
  return [](Communicator& comm, GradBucket& b) {
    const std::shared_ptr<BucketMemory> memory = MemoryOf(b);
    memory->copy_divided(b.buffer, b.buffer, b.count, b.dtype, comm.size());
    const std::optional<plexus_placement> where = memory->placement_for_post(StreamOrdered(comm));
    return BucketFuture(comm.allreduce(b.buffer, b.buffer, b.count, b.dtype, ReduceOp::Sum,
                                       where ? &*where : nullptr));
  };
}

namespace {

CommHook CompressHook(DType wire) {
  return [wire](Communicator& comm, GradBucket& b) {
    if (b.dtype == wire) return AllreduceHook()(comm, b);
    const std::shared_ptr<BucketMemory> memory = MemoryOf(b);
    // Owned by the continuation, which the bucket's future keeps until it completes.
    std::shared_ptr<void> compressed(memory->allocate(b.count * ElementSize(wire)),
                                     [memory](void* p) { memory->release(p); });
    memory->convert_divided(compressed.get(), wire, b.buffer, b.dtype, b.count, comm.size());
    const std::optional<plexus_placement> where = memory->placement_for_post(StreamOrdered(comm));
    Work work = comm.allreduce(compressed.get(), compressed.get(), b.count, wire, ReduceOp::Sum,
                               where ? &*where : nullptr);
    void* buffer = b.buffer;
    const uint64_t count = b.count;
    const DType dtype = b.dtype;
    return BucketFuture(std::move(work), [memory, compressed, buffer, count, dtype, wire] {
      memory->convert_divided(buffer, dtype, compressed.get(), wire, count, 1.0);
    });
  };
}

}  // namespace

CommHook Fp16CompressHook() {
  return CompressHook(DType::Float16);
}
CommHook Bf16CompressHook() {
  return CompressHook(DType::BFloat16);
}

}  // namespace plexus::reducer
