#include "plexus/reducer/comm_hook.hpp"

#include <memory>
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

CommHook AllreduceHook() {
  return [](Communicator& comm, GradBucket& b) {
    CopyDivided(b.buffer, b.buffer, b.count, b.dtype, comm.size());
    return BucketFuture(comm.allreduce(b.buffer, b.buffer, b.count, b.dtype, ReduceOp::Sum));
  };
}

namespace {

CommHook CompressHook(DType wire) {
  return [wire](Communicator& comm, GradBucket& b) {
    if (b.dtype == wire) return AllreduceHook()(comm, b);
    // Owned by the continuation, which the bucket's future keeps until it completes.
    auto compressed = std::make_shared<std::vector<uint16_t>>(b.count);
    ConvertDivided(compressed->data(), wire, b.buffer, b.dtype, b.count, comm.size());
    Work work =
        comm.allreduce(compressed->data(), compressed->data(), b.count, wire, ReduceOp::Sum);
    void* buffer = b.buffer;
    const uint64_t count = b.count;
    const DType dtype = b.dtype;
    return BucketFuture(std::move(work), [compressed, buffer, count, dtype, wire] {
      ConvertDivided(buffer, dtype, compressed->data(), wire, count, 1.0);
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
