// TorchBucketMemory: the reducer's buckets in a LibTorch device's memory
// (CUDA), worked on with torch ops on that device's current stream.
//
// No CUDA header and no CUDA library here: allocations come from LibTorch's
// allocator for the device (the CUDA caching allocator, which keeps a block
// until the work ordered on its stream is done), the stream from c10's
// device-generic guard interface, and its handle from c10::Stream. The CUDA
// implementations of those are registered by libtorch_cuda, which the
// program links (or loads) when it uses CUDA tensors at all.
//
// On a CPU device it is host memory worked on with torch ops (what the
// tests compare with HostBucketMemory, where no GPU is present).
#pragma once

#include <c10/core/Device.h>
#include <torch/types.h>

#include <optional>
#include <string>
#include <unordered_map>

#include "plexus/reducer/bucket_memory.hpp"

namespace plexus::ddp {

class TorchBucketMemory final : public reducer::BucketMemory {
 public:
  explicit TorchBucketMemory(c10::Device device);

  plexus_memory_type_t memory_type() const override;
  int device() const override;
  std::string describe() const override;
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
  std::optional<plexus_placement> placement_for_post(bool stream_ordered) override;

  // The placement of a collective on a tensor of `device` (its current
  // stream), waiting for that stream first when !stream_ordered; nullopt for
  // the CPU.
  static std::optional<plexus_placement> PlacementFor(c10::Device device, bool stream_ordered);

 private:
  // count elements of dtype at p, as a tensor of this device (not owning).
  torch::Tensor View(const void* p, uint64_t count, DType dtype) const;
  // The divisor as a 0-dim tensor on the device: a true division (ATen
  // turns a division by a CPU scalar into a multiplication by its
  // reciprocal, which does not average a sum of multiples exactly).
  torch::Tensor Divisor(double divisor, DType dtype) const;

  c10::Device device_;
  std::unordered_map<void*, torch::Tensor> allocations_;
};

}  // namespace plexus::ddp
