#include "torch_bucket_memory.hpp"

#include <c10/core/Stream.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include "plexus/ddp/torch_dtype.hpp"
#include "plexus/error.hpp"

namespace plexus::ddp {

TorchBucketMemory::TorchBucketMemory(c10::Device device) : device_(device) {}

plexus_memory_type_t TorchBucketMemory::memory_type() const {
  return device_.is_cuda() ? PLEXUS_MEMORY_CUDA : PLEXUS_MEMORY_HOST;
}

int TorchBucketMemory::device() const {
  return device_.is_cpu() ? -1 : device_.index();
}

std::string TorchBucketMemory::describe() const {
  return device_.is_cpu() ? "host memory" : device_.str();
}

void* TorchBucketMemory::allocate(uint64_t bytes) {
  torch::Tensor t = torch::zeros({static_cast<int64_t>(bytes == 0 ? 1 : bytes)},
                                 torch::TensorOptions().dtype(torch::kUInt8).device(device_));
  void* p = t.data_ptr();
  allocations_.emplace(p, std::move(t));
  return p;
}

void TorchBucketMemory::release(void* p) noexcept {
  allocations_.erase(p);
}

torch::Tensor TorchBucketMemory::View(const void* p, uint64_t count, DType dtype) const {
  return torch::from_blob(const_cast<void*>(p), {static_cast<int64_t>(count)},
                          torch::TensorOptions().dtype(ScalarTypeOf(dtype)).device(device_));
}

torch::Tensor TorchBucketMemory::Divisor(double divisor, DType dtype) const {
  return torch::full({}, divisor,
                     torch::TensorOptions()
                         .dtype(dtype == DType::Float64 ? torch::kFloat64 : torch::kFloat32)
                         .device(device_));
}

void TorchBucketMemory::copy_divided(void* dst, const void* src, uint64_t count, DType dtype,
                                     double divisor) {
  if (count == 0) return;
  torch::NoGradGuard no_grad;
  torch::Tensor d = View(dst, count, dtype);
  torch::Tensor s = View(src, count, dtype);
  if (divisor == 1.0) {
    if (dst != src) d.copy_(s);
  } else if (dtype == DType::Float16 || dtype == DType::BFloat16) {
    // In float, rounded once, as the host does (ATen would first round the
    // divisor to the 16-bit type: 257 is 256 in bfloat16).
    d.copy_(s.to(torch::kFloat32).div_(Divisor(divisor, DType::Float32)));
  } else if (dst != src) {
    torch::div_out(d, s, Divisor(divisor, dtype));
  } else {
    d.div_(Divisor(divisor, dtype));
  }
}

void TorchBucketMemory::convert_divided(void* dst, DType to, const void* src, DType from,
                                        uint64_t count, double divisor) {
  if (to == from) return copy_divided(dst, src, count, to, divisor);
  if (count == 0) return;
  torch::NoGradGuard no_grad;
  torch::Tensor wide = View(src, count, from).to(torch::kFloat64);
  if (divisor != 1.0) wide.div_(Divisor(divisor, DType::Float64));
  // double -> float -> 16-bit, as the host's Store does.
  if (to == DType::Float16 || to == DType::BFloat16) wide = wide.to(torch::kFloat32);
  View(dst, count, to).copy_(wide);
}

void TorchBucketMemory::zero(void* dst, uint64_t bytes) {
  if (bytes == 0) return;
  View(dst, bytes, DType::UInt8).zero_();
}

void TorchBucketMemory::copy(void* dst, const void* src, uint64_t bytes) {
  if (bytes == 0 || dst == src) return;
  View(dst, bytes, DType::UInt8).copy_(View(src, bytes, DType::UInt8));
}

void TorchBucketMemory::copy_from_host(void* dst, const void* host_src, uint64_t bytes) {
  if (bytes == 0) return;
  torch::Tensor host =
      torch::from_blob(const_cast<void*>(host_src), {static_cast<int64_t>(bytes)}, torch::kUInt8);
  // Not non_blocking: the host bytes have been read when copy_ returns.
  View(dst, bytes, DType::UInt8).copy_(host);
}

void TorchBucketMemory::copy_to_host(void* host_dst, const void* src, uint64_t bytes) {
  if (bytes == 0) return;
  torch::Tensor host = torch::from_blob(host_dst, {static_cast<int64_t>(bytes)}, torch::kUInt8);
  // A device-to-pageable-host copy_ waits for the stream, then for the copy.
  host.copy_(View(src, bytes, DType::UInt8));
}

std::optional<plexus_placement> TorchBucketMemory::PlacementFor(c10::Device device,
                                                                bool stream_ordered) {
  if (device.is_cpu()) return std::nullopt;
  const c10::impl::VirtualGuardImpl guard(device.type());
  const c10::Stream stream = guard.getStream(device);    // the current stream of this thread
  if (!stream_ordered) guard.synchronizeStream(stream);  // such a backend reads at once
  plexus_placement p{};
  p.struct_size = sizeof(plexus_placement);
  p.memory_type = device.is_cuda() ? PLEXUS_MEMORY_CUDA : PLEXUS_MEMORY_HOST;
  p.device = device.index();
  p.reserved = 0;
  p.stream = guard.getStreamNativeHandle(stream);
  return p;
}

std::optional<plexus_placement> TorchBucketMemory::placement_for_post(bool stream_ordered) {
  return PlacementFor(device_, stream_ordered);
}

}  // namespace plexus::ddp
