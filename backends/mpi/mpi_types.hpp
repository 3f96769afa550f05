// Mapping of the ABI's dtype and op codes onto MPI's, and the user-defined MPI
// ops that reduce float16 and bfloat16 (MPI has no predefined 16-bit floats).
#pragma once

#include <mpi.h>

#include "plexus/backend.h"

namespace plexus::mpi {

// The MPI datatype of one element of dtype: the sized C integer types,
// MPI_FLOAT and MPI_DOUBLE, and MPI_UINT16_T for float16 and bfloat16 (moved
// as raw bits; reduced with HalfOps). MPI_DATATYPE_NULL for an unknown code.
MPI_Datatype ToMpiType(plexus_dtype_t dtype);

// True for the two 16-bit float dtypes, which need user-defined ops.
inline bool IsHalf(plexus_dtype_t dtype) {
  return dtype == PLEXUS_DTYPE_FLOAT16 || dtype == PLEXUS_DTYPE_BFLOAT16;
}

// User-defined, commutative MPI ops for float16 and bfloat16 x sum, prod,
// min, max. Each converts both operands to binary32, applies the op and
// rounds back to nearest-even (plexus::algos::ReduceInto), as the TCP backend
// does. Create() after MPI is initialised and Free() before it is finalised,
// on one thread. Not copyable.
class HalfOps {
 public:
  HalfOps() = default;
  HalfOps(const HalfOps&) = delete;
  HalfOps& operator=(const HalfOps&) = delete;

  // Returns MPI_SUCCESS or the MPI error code; on failure nothing is left.
  int Create();
  void Free();
  bool created() const { return created_; }
  // The op for a 16-bit float dtype and sum/prod/min/max/avg (avg = sum).
  MPI_Op Get(plexus_dtype_t dtype, plexus_reduce_op_t op) const;

 private:
  // [0] float16, [1] bfloat16; index by op code 1..4.
  MPI_Op ops_[2][5] = {};
  bool created_ = false;
};

// The MPI op that reduces dtype with op: a predefined op for the native types
// (PLEXUS_OP_AVG maps to MPI_SUM; the division happens on completion), one of
// half_ops for float16/bfloat16. MPI_OP_NULL for unknown codes.
MPI_Op ToMpiOp(const HalfOps& half_ops, plexus_dtype_t dtype, plexus_reduce_op_t op);

}  // namespace plexus::mpi
