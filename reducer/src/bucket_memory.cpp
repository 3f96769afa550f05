#include "plexus/reducer/bucket_memory.hpp"

#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "gradient_math.hpp"
#include "plexus/error.hpp"

namespace plexus::reducer {

namespace {

constexpr std::align_val_t kAlignment{64};

// A device buffer for one staged collective, freed on every path.
class Staged {
 public:
  Staged(BucketMemory& memory, uint64_t bytes) : memory_(memory), p_(memory.allocate(bytes)) {}
  ~Staged() { memory_.release(p_); }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  void* get() const { return p_; }

 private:
  BucketMemory& memory_;
  void* p_;
};

// The placement of `memory` for a collective, as a pointer (null for host).
struct PostPlacement {
  std::optional<plexus_placement> placement;
  PostPlacement(Communicator& comm, BucketMemory& memory)
      : placement(memory.placement_for_post(
            (comm.capabilities().flags & PLEXUS_CAP_STREAM_ORDERED) != 0)) {}
  const plexus_placement* get() const { return placement ? &*placement : nullptr; }
};

}  // namespace

void* HostBucketMemory::allocate(uint64_t bytes) {
  const size_t n = bytes == 0 ? 1 : static_cast<size_t>(bytes);
  void* p = ::operator new(n, kAlignment);
  std::memset(p, 0, n);
  return p;
}

void HostBucketMemory::release(void* p) noexcept {
  ::operator delete(p, kAlignment);
}

void HostBucketMemory::copy_divided(void* dst, const void* src, uint64_t count, DType dtype,
                                    double divisor) {
  CopyDivided(dst, src, count, dtype, divisor);
}

void HostBucketMemory::convert_divided(void* dst, DType to, const void* src, DType from,
                                       uint64_t count, double divisor) {
  ConvertDivided(dst, to, src, from, count, divisor);
}

void HostBucketMemory::zero(void* dst, uint64_t bytes) {
  std::memset(dst, 0, bytes);
}

void HostBucketMemory::copy(void* dst, const void* src, uint64_t bytes) {
  if (dst != src) std::memcpy(dst, src, bytes);
}

void HostBucketMemory::copy_from_host(void* dst, const void* host_src, uint64_t bytes) {
  copy(dst, host_src, bytes);
}

void HostBucketMemory::copy_to_host(void* host_dst, const void* src, uint64_t bytes) {
  copy(host_dst, src, bytes);
}

bool TakesHostMemory(const Communicator& comm) {
  return (comm.capabilities().memory_types & (1u << PLEXUS_MEMORY_HOST)) != 0;
}

void HostAllreduce(Communicator& comm, BucketMemory& memory, void* buf, uint64_t count, DType dtype,
                   ReduceOp op) {
  if (TakesHostMemory(comm) || count == 0) {
    comm.allreduce(buf, buf, count, dtype, op).wait();
    return;
  }
  const uint64_t bytes = count * ElementSize(dtype);
  Staged staged(memory, bytes);
  memory.copy_from_host(staged.get(), buf, bytes);
  PostPlacement where(comm, memory);
  comm.allreduce(staged.get(), staged.get(), count, dtype, op, where.get()).wait();
  memory.copy_to_host(buf, staged.get(), bytes);
}

void HostBroadcast(Communicator& comm, BucketMemory& memory, void* buf, uint64_t count, DType dtype,
                   uint32_t root) {
  if (TakesHostMemory(comm) || count == 0) {
    comm.broadcast(buf, count, dtype, root).wait();
    return;
  }
  const uint64_t bytes = count * ElementSize(dtype);
  Staged staged(memory, bytes);
  memory.copy_from_host(staged.get(), buf, bytes);
  PostPlacement where(comm, memory);
  comm.broadcast(staged.get(), count, dtype, root, where.get()).wait();
  memory.copy_to_host(buf, staged.get(), bytes);
}

void HostAllgather(Communicator& comm, BucketMemory& memory, const void* send, void* recv,
                   uint64_t count, DType dtype) {
  if (TakesHostMemory(comm) || count == 0) {
    comm.allgather(send, recv, count, dtype).wait();
    return;
  }
  const uint64_t bytes = count * ElementSize(dtype);
  Staged in(memory, bytes);
  Staged out(memory, bytes * comm.size());
  memory.copy_from_host(in.get(), send, bytes);
  PostPlacement where(comm, memory);
  comm.allgather(in.get(), out.get(), count, dtype, where.get()).wait();
  memory.copy_to_host(recv, out.get(), bytes * comm.size());
}

}  // namespace plexus::reducer
