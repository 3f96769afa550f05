// What torch's reduce ops need that the Plexus ABI lacks: PREMUL_SUM as a
// multiply then a sum, BAND/BOR/BXOR as an allgather folded here, bool as
// bytes (SUM/MAX = or, PRODUCT/MIN = and); and the refusals, with the op's
// name, of what cannot be built.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <string>

#include "plexus/types.hpp"

namespace plexus_torch::detail {

// How torch's ReduceOp runs on Plexus: natively (op), as a multiply then a sum
// (PREMUL_SUM), or as an allgather folded here (bitwise ops, which the Plexus
// ABI does not have).
struct Reduction {
  enum Kind { kNative, kPremul, kFold } kind = kNative;
  plexus::ReduceOp op = plexus::ReduceOp::Sum;
  c10d::ReduceOp::RedOpType fold = c10d::ReduceOp::BAND;
};

// How rop runs on tensors like t for operation op (a RuntimeError naming
// backend for what cannot run).
Reduction ReductionOf(const c10d::ReduceOp& rop, const at::Tensor& t, const char* op,
                      const std::string& backend);

// PREMUL_SUM's factor, applied to t in place.
void Premultiply(const c10d::ReduceOp& rop, at::Tensor& t);

// Folds rows [size, n] of gathered with the bitwise op into a tensor of n.
at::Tensor Fold(const at::Tensor& gathered, c10d::ReduceOp::RedOpType op);

}  // namespace plexus_torch::detail
