// plexus::ddp::load_torch_cuda — LibTorch's CUDA support, loaded on demand.
//
// The torch wheel's CUDA kernels, allocator and streams live in
// libtorch_cuda.so, which registers them with LibTorch when it is loaded.
// Plexus' programs link torch_cpu and c10 only, so that a CPU job neither
// pays for loading the CUDA libraries (a noticeable start-up cost) nor
// needs them installed (PLEXUS_TORCH=cpu-libs installs the wheel without its
// NVIDIA dependencies); a program that wants CUDA tensors calls this first.
//
// Call it before anything asks LibTorch about CUDA (torch::cuda::
// is_available(), a tensor .to(torch::kCUDA)): LibTorch decides once, at the
// first question, whether CUDA is there. A program linked with torch_cuda
// itself may call it too (it then finds the library loaded).
#pragma once

#include <string>

namespace plexus::ddp {

// Loads libtorch_cuda.so from the directory of the libtorch_cpu.so this
// process runs with (RTLD_GLOBAL). Returns true on success (also when it was
// loaded already); otherwise false and, if why is non-null, *why says which
// file failed and the loader's reason (e.g. a missing libcublas). Loading
// succeeds without a GPU: torch::cuda::is_available() then says false.
bool load_torch_cuda(std::string* why = nullptr);

}  // namespace plexus::ddp
