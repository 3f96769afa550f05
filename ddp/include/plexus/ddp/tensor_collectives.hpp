// Collectives on whole LibTorch tensors, in the tensor's own memory: a CPU
// tensor as host memory, a CUDA tensor as CUDA memory of its device, posted
// on that device's current stream. On a stream-ordered backend (NCCL) the
// returned Work completes once the operation is enqueued on the stream, so
// the torch ops that follow on the stream (t.cpu(), .item()) see its result.
//
//   auto sums = torch::tensor({loss, count}, torch::kFloat64).to(device);
//   plexus::ddp::allreduce(comm, sums).wait();
//
// The tensor must be contiguous, of a dtype Plexus communicates, and stay
// alive until the Work completes. Throws plexus::Error.
#pragma once

#include <torch/types.h>

#include "plexus/communicator.hpp"

namespace plexus::ddp {

Work allreduce(Communicator& comm, torch::Tensor& tensor, ReduceOp op = ReduceOp::Sum);
Work broadcast(Communicator& comm, torch::Tensor& tensor, uint32_t root);

}  // namespace plexus::ddp
