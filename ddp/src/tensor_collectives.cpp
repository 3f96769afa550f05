#include "plexus/ddp/tensor_collectives.hpp"

#include <optional>
#include <string>

#include "plexus/ddp/torch_dtype.hpp"
#include "plexus/error.hpp"
#include "torch_bucket_memory.hpp"

namespace plexus::ddp {

namespace {

DType Checked(const torch::Tensor& t, const char* what) {
  if (!t.defined() || !t.is_contiguous() || (!t.device().is_cpu() && !t.device().is_cuda())) {
    throw Error(PLEXUS_ERR_INVALID_ARGUMENT, "plexus",
                std::string(what) + ": the tensor must be defined, contiguous, on CPU or CUDA");
  }
  const c10::ScalarType s = t.scalar_type();
  // (bool would travel as uint8 and sum past true.)
  if (const auto d = DTypeOf(s); d && s != c10::ScalarType::Bool) return *d;
  throw Error(PLEXUS_ERR_UNSUPPORTED, "plexus",
              std::string(what) + ": dtype " + c10::toString(s) + " is not communicated");
}

std::optional<plexus_placement> Where(const Communicator& comm, const torch::Tensor& t) {
  return TorchBucketMemory::PlacementFor(
      t.device(), (comm.capabilities().flags & PLEXUS_CAP_STREAM_ORDERED) != 0);
}

}  // namespace

Work allreduce(Communicator& comm, torch::Tensor& tensor, ReduceOp op) {
  const DType dtype = Checked(tensor, "plexus::ddp::allreduce");
  const auto where = Where(comm, tensor);
  return comm.allreduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), dtype, op,
                        where ? &*where : nullptr);
}

Work broadcast(Communicator& comm, torch::Tensor& tensor, uint32_t root) {
  const DType dtype = Checked(tensor, "plexus::ddp::broadcast");
  const auto where = Where(comm, tensor);
  return comm.broadcast(tensor.data_ptr(), tensor.numel(), dtype, root, where ? &*where : nullptr);
}

}  // namespace plexus::ddp
