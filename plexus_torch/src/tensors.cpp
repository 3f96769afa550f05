#include "tensors.hpp"

#include <c10/util/Exception.h>

#include "plexus/ddp/torch_dtype.hpp"
#include "work.hpp"

namespace plexus_torch::detail {

Flat AsFlat(const at::Tensor& t, const char* op, const std::string& backend) {
  TORCH_CHECK(t.defined(), "plexus ", op, ": an undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "plexus ", op, ": ", t.layout(),
              " tensors are not supported (dense tensors only)");
  // A complex tensor travels as (re, im) pairs of its real type.
  const auto dtype = plexus::ddp::DTypeOf(t.is_complex() ? c10::toRealValueType(t.scalar_type())
                                                         : t.scalar_type());
  TORCH_CHECK(dtype.has_value(), "plexus ", op, ": ", t.scalar_type(),
              " tensors are not supported by Plexus (backend ", backend, ")");
  Flat f;
  f.copied = !t.is_contiguous();
  f.tensor = f.copied ? t.contiguous() : t;
  f.dtype = *dtype;
  f.count = uint64_t(t.numel()) * (t.is_complex() ? 2 : 1);
  f.data = f.tensor.data_ptr();
  f.placement.struct_size = sizeof f.placement;
  f.placement.device = -1;
  if (t.is_cuda()) {
    f.placement.memory_type = PLEXUS_MEMORY_CUDA;
    f.placement.device = t.device().index();
  } else {
    TORCH_CHECK(t.is_cpu(), "plexus ", op, ": ", t.device(),
                " tensors are not supported (cpu, and cuda on a backend with CUDA memory)");
    f.placement.memory_type = PLEXUS_MEMORY_HOST;
  }
  return f;
}

// An output that was not contiguous gets the result back after the operation.
void CopyBackLater(PlexusWork& w, const at::Tensor& caller, const Flat& f) {
  if (!f.copied) return;
  w.finishers.push_back([caller, copy = f.tensor]() mutable { caller.copy_(copy); });
}

const at::Tensor& OneTensor(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "plexus ", op, ": one tensor per call (got ", tensors.size(),
              "; one process per device)");
  return tensors[0];
}

uint32_t CheckedRank(int64_t r, int size, const char* what, const char* op) {
  TORCH_CHECK(r >= 0 && r < size, "plexus ", op, ": ", what, " ", r, " is not a rank of this ",
              "group (size ", size, ")");
  return uint32_t(r);
}

// Packs tensors (each flattened) into one contiguous buffer of their dtype.
at::Tensor Pack(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of packed into each of tensors.
void Unpack(const at::Tensor& packed, std::vector<at::Tensor>& tensors) {
  int64_t at = 0;
  for (auto& t : tensors) {
    t.copy_(packed.narrow(0, at, t.numel()).view(t.sizes()));
    at += t.numel();
  }
}

void CheckSameKind(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "plexus ", op, ": tensors of ", a.scalar_type(),
              " and ", b.scalar_type(), " (one dtype per call)");
  TORCH_CHECK(a.device() == b.device(), "plexus ", op, ": tensors on ", a.device(), " and ",
              b.device());
}

}  // namespace plexus_torch::detail
