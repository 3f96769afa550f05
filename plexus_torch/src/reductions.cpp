#include "reductions.hpp"

#include <c10/util/Exception.h>

namespace plexus_torch::detail {
namespace {

const char* OpName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "sum";
    case c10d::ReduceOp::AVG:
      return "avg";
    case c10d::ReduceOp::PRODUCT:
      return "product";
    case c10d::ReduceOp::MIN:
      return "min";
    case c10d::ReduceOp::MAX:
      return "max";
    case c10d::ReduceOp::BAND:
      return "band";
    case c10d::ReduceOp::BOR:
      return "bor";
    case c10d::ReduceOp::BXOR:
      return "bxor";
    case c10d::ReduceOp::PREMUL_SUM:
      return "premul_sum";
    default:
      return "unknown";
  }
}

}  // namespace

Reduction ReductionOf(const c10d::ReduceOp& rop, const at::Tensor& t, const char* op,
                      const std::string& backend) {
  const auto o = rop.op_;
  const bool is_bool = t.scalar_type() == at::kBool;
  const bool integral = at::isIntegralType(t.scalar_type(), /*includeBool=*/true);
  auto refuse = [&](const char* why) {
    TORCH_CHECK(false, "plexus ", op, ": ReduceOp.", OpName(o), " on ", t.scalar_type(),
                " tensors is not supported (", why, "; backend ", backend, ")");
  };
  if (t.is_complex() && o != c10d::ReduceOp::SUM && o != c10d::ReduceOp::AVG &&
      o != c10d::ReduceOp::PREMUL_SUM) {
    refuse("complex numbers have no order, and their product is not elementwise");
  }
  Reduction r;
  switch (o) {
    case c10d::ReduceOp::SUM:
      r.op = is_bool ? plexus::ReduceOp::Max : plexus::ReduceOp::Sum;  // bool: or
      return r;
    case c10d::ReduceOp::AVG:
      if (is_bool) refuse("a mean of booleans is not a boolean");
      r.op = plexus::ReduceOp::Avg;
      return r;
    case c10d::ReduceOp::PRODUCT:
      r.op = is_bool ? plexus::ReduceOp::Min : plexus::ReduceOp::Prod;  // bool: and
      return r;
    case c10d::ReduceOp::MIN:
      r.op = plexus::ReduceOp::Min;
      return r;
    case c10d::ReduceOp::MAX:
      r.op = plexus::ReduceOp::Max;
      return r;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (!integral) refuse("bitwise operations take integer and bool tensors");
      if (is_bool && o != c10d::ReduceOp::BXOR) {
        r.op = o == c10d::ReduceOp::BAND ? plexus::ReduceOp::Min : plexus::ReduceOp::Max;
        return r;
      }
      r.kind = Reduction::kFold;
      r.fold = o;
      return r;
    case c10d::ReduceOp::PREMUL_SUM:
      if (integral) refuse("the factor is a floating-point number");
      r.kind = Reduction::kPremul;
      return r;
    default:
      refuse("unknown ReduceOp");
  }
  return r;
}

// PREMUL_SUM's factor, applied to t in place.
void Premultiply(const c10d::ReduceOp& rop, at::Tensor& t) {
  auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(rop.supplement_.get());
  TORCH_CHECK(s != nullptr, "plexus: ReduceOp.PREMUL_SUM without its factor");
  if (s->tensor_factor.defined()) {
    t.mul_(s->tensor_factor.to(t.device()));
  } else {
    t.mul_(s->double_factor);
  }
}

// Folds rows [size, n] of gathered with the bitwise op into a tensor of n.
at::Tensor Fold(const at::Tensor& gathered, c10d::ReduceOp::RedOpType op) {
  at::Tensor acc = gathered[0].clone();
  for (int64_t r = 1; r < gathered.size(0); ++r) {
    if (op == c10d::ReduceOp::BAND) acc.bitwise_and_(gathered[r]);
    if (op == c10d::ReduceOp::BOR) acc.bitwise_or_(gathered[r]);
    if (op == c10d::ReduceOp::BXOR) acc.bitwise_xor_(gathered[r]);
  }
  return acc;
}

}  // namespace plexus_torch::detail
