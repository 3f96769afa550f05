#include "plexus/types.hpp"

#include "plexus/algos/dtype.hpp"

namespace plexus {

size_t ElementSize(DType t) {
  return algos::DtypeSize(static_cast<plexus_dtype_t>(t));
}
const char* ToString(DType t) {
  return algos::DtypeName(static_cast<plexus_dtype_t>(t));
}
const char* ToString(ReduceOp op) {
  return algos::ReduceOpName(static_cast<plexus_reduce_op_t>(op));
}

}  // namespace plexus
