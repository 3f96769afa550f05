#include "mpi_types.hpp"

#include "plexus/algos/dtype.hpp"

namespace plexus::mpi {
namespace {

// MPI_User_function for dtype D and op O: inout[i] = in[i] (op) inout[i].
// The ops are commutative, so ReduceInto's acc (op) in order is the same.
template <plexus_dtype_t D, plexus_reduce_op_t O>
void HalfReduce(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  if (*len > 0) algos::ReduceInto(inout, in, uint64_t(*len), D, O);
}

template <plexus_dtype_t D>
constexpr MPI_User_function* kHalfFunctions[5] = {
    nullptr, &HalfReduce<D, PLEXUS_OP_SUM>, &HalfReduce<D, PLEXUS_OP_PROD>,
    &HalfReduce<D, PLEXUS_OP_MIN>, &HalfReduce<D, PLEXUS_OP_MAX>};

}  // namespace

MPI_Datatype ToMpiType(plexus_dtype_t dtype) {
  switch (dtype) {
    case PLEXUS_DTYPE_INT8:
      return MPI_INT8_T;
    case PLEXUS_DTYPE_UINT8:
      return MPI_UINT8_T;
    case PLEXUS_DTYPE_INT16:
      return MPI_INT16_T;
    case PLEXUS_DTYPE_UINT16:
      return MPI_UINT16_T;
    case PLEXUS_DTYPE_INT32:
      return MPI_INT32_T;
    case PLEXUS_DTYPE_UINT32:
      return MPI_UINT32_T;
    case PLEXUS_DTYPE_INT64:
      return MPI_INT64_T;
    case PLEXUS_DTYPE_UINT64:
      return MPI_UINT64_T;
    case PLEXUS_DTYPE_FLOAT16:
      return MPI_UINT16_T;
    case PLEXUS_DTYPE_BFLOAT16:
      return MPI_UINT16_T;
    case PLEXUS_DTYPE_FLOAT32:
      return MPI_FLOAT;
    case PLEXUS_DTYPE_FLOAT64:
      return MPI_DOUBLE;
    default:
      return MPI_DATATYPE_NULL;
  }
}

int HalfOps::Create() {
  if (created_) return MPI_SUCCESS;
  for (int h = 0; h < 2; ++h) {
    for (plexus_reduce_op_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX; ++op) {
      MPI_User_function* fn = h == 0 ? kHalfFunctions<PLEXUS_DTYPE_FLOAT16>[op]
                                     : kHalfFunctions<PLEXUS_DTYPE_BFLOAT16>[op];
      const int rc = MPI_Op_create(fn, /*commute=*/1, &ops_[h][op]);
      if (rc != MPI_SUCCESS) {
        ops_[h][op] = MPI_OP_NULL;
        created_ = true;  // so that Free() releases the ones made so far
        Free();
        return rc;
      }
    }
  }
  created_ = true;
  return MPI_SUCCESS;
}

void HalfOps::Free() {
  if (!created_) return;
  for (auto& row : ops_) {
    for (MPI_Op& op : row) {
      if (op != MPI_OP_NULL && op != MPI_Op{}) MPI_Op_free(&op);
      op = MPI_OP_NULL;
    }
  }
  created_ = false;
}

MPI_Op HalfOps::Get(plexus_dtype_t dtype, plexus_reduce_op_t op) const {
  if (!created_ || !IsHalf(dtype) || op < PLEXUS_OP_SUM || op > PLEXUS_OP_MAX_V1) {
    return MPI_OP_NULL;
  }
  if (op == PLEXUS_OP_AVG) op = PLEXUS_OP_SUM;
  return ops_[dtype == PLEXUS_DTYPE_FLOAT16 ? 0 : 1][op];
}

MPI_Op ToMpiOp(const HalfOps& half_ops, plexus_dtype_t dtype, plexus_reduce_op_t op) {
  if (ToMpiType(dtype) == MPI_DATATYPE_NULL) return MPI_OP_NULL;
  if (IsHalf(dtype)) return half_ops.Get(dtype, op);
  switch (op) {
    case PLEXUS_OP_SUM:
    case PLEXUS_OP_AVG:
      return MPI_SUM;
    case PLEXUS_OP_PROD:
      return MPI_PROD;
    case PLEXUS_OP_MIN:
      return MPI_MIN;
    case PLEXUS_OP_MAX:
      return MPI_MAX;
    default:
      return MPI_OP_NULL;
  }
}

}  // namespace plexus::mpi
