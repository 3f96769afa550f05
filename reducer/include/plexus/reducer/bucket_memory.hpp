// plexus::reducer::BucketMemory — where the reducer keeps its buckets and how
// it moves gradients in and out of them.
//
// The reducer itself never touches gradient bytes: every copy, division and
// fill goes through this interface, so that one reducer serves host memory
// (HostBucketMemory, below: plain loops and memcpy) and device memory (the
// LibTorch implementation in ddp/, which runs torch ops on CUDA tensors)
// without knowing about either.
//
// Ordering. An implementation for an asynchronous device enqueues its work
// in order on the device's current stream (CUDA's current stream, for the
// thread that calls) and returns at once, except where a function says it
// blocks. placement_for_post() names that stream, so that a collective
// posted with it is ordered after the copies that filled the bucket; on a
// stream-ordered backend (PLEXUS_CAP_STREAM_ORDERED) a completed collective
// is only *enqueued*, and the copies back, enqueued on the same stream after
// it, read its result. For a backend that is not stream-ordered,
// placement_for_post() first waits for the stream, because such a backend
// reads the buffer as soon as the collective is posted.
//
// Pointers passed in are of this memory (device pointers for a device)
// unless a name says "host". Counts are elements of the dtype; bytes are
// bytes. Errors are thrown as plexus::Error. Thread safety: as the reducer,
// one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "plexus/backend.h"
#include "plexus/communicator.hpp"
#include "plexus/types.hpp"

namespace plexus::reducer {

class BucketMemory {
 public:
  virtual ~BucketMemory() = default;

  // PLEXUS_MEMORY_HOST or PLEXUS_MEMORY_CUDA.
  virtual plexus_memory_type_t memory_type() const = 0;
  // Device ordinal for device memory; -1 for host memory. Parameters given to
  // a reducer on this memory must carry this device.
  virtual int device() const = 0;
  // "host memory", "cuda:0": for messages.
  virtual std::string describe() const = 0;

  // `bytes` bytes (at least one), zero-filled, aligned for every gradient
  // dtype. The caller frees them with release().
  virtual void* allocate(uint64_t bytes) = 0;
  // Frees what allocate() returned. Work already ordered on the stream may
  // still use it (a device allocator must keep it until that work is done).
  virtual void release(void* p) noexcept = 0;

  // dst[i] = src[i] / divisor, a plain copy when divisor is 1; dst and src
  // may be the same buffer. A division, not a multiplication by 1/divisor,
  // so that a sum of multiples of the divisor averages exactly; 16-bit
  // values are divided in float and rounded once.
  virtual void copy_divided(void* dst, const void* src, uint64_t count, DType dtype,
                            double divisor) = 0;
  // dst[i] = src[i] / divisor, converted from `from` to `to` (both gradient
  // dtypes; computed in double, then rounded to `to`).
  virtual void convert_divided(void* dst, DType to, const void* src, DType from, uint64_t count,
                               double divisor) = 0;
  virtual void zero(void* dst, uint64_t bytes) = 0;
  // Within this memory; the ranges do not overlap (or are the same).
  virtual void copy(void* dst, const void* src, uint64_t bytes) = 0;

  // Between host memory and this memory, for the reducer's small control
  // data on a backend that takes device memory only. copy_from_host has read
  // `host_src` when it returns; copy_to_host blocks until `host_dst` holds
  // the bytes (it waits for the work ordered before it).
  virtual void copy_from_host(void* dst, const void* host_src, uint64_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, uint64_t bytes) = 0;

  // Called just before a collective on this memory is posted: the placement
  // to post it with, or nullopt for host memory (posted without one). With
  // stream_ordered false, first waits until the work on the stream is done.
  virtual std::optional<plexus_placement> placement_for_post(bool stream_ordered) = 0;
};

// Host memory: plain loops and memcpy, nothing asynchronous.
class HostBucketMemory final : public BucketMemory {
 public:
  plexus_memory_type_t memory_type() const override { return PLEXUS_MEMORY_HOST; }
  int device() const override { return -1; }
  std::string describe() const override { return "host memory"; }
  void* allocate(uint64_t bytes) override;
  void release(void* p) noexcept override;
  void copy_divided(void* dst, const void* src, uint64_t count, DType dtype,
                    double divisor) override;
  void convert_divided(void* dst, DType to, const void* src, DType from, uint64_t count,
                       double divisor) override;
  void zero(void* dst, uint64_t bytes) override;
  void copy(void* dst, const void* src, uint64_t bytes) override;
  void copy_from_host(void* dst, const void* host_src, uint64_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, uint64_t bytes) override;
  std::optional<plexus_placement> placement_for_post(bool) override { return std::nullopt; }
};

// A collective on a small host buffer (flags, the used-parameter bitmap, the
// gradient ready order, the replica fingerprints), blocking until its
// result is in the buffer. Posted on host memory when the backend takes
// host memory; otherwise (NCCL takes device memory only) staged through
// `memory`: copied in, reduced there, copied back. Throws plexus::Error.
bool TakesHostMemory(const Communicator& comm);
void HostAllreduce(Communicator& comm, BucketMemory& memory, void* buf, uint64_t count, DType dtype,
                   ReduceOp op);
void HostBroadcast(Communicator& comm, BucketMemory& memory, void* buf, uint64_t count, DType dtype,
                   uint32_t root);
// recv holds comm.size() * count elements.
void HostAllgather(Communicator& comm, BucketMemory& memory, const void* send, void* recv,
                   uint64_t count, DType dtype);

}  // namespace plexus::reducer
