// Element sizes, names and reduction kernels for the ABI dtypes and ops.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plexus/backend.h"

namespace plexus::algos {

// Size in bytes of one element, or 0 for a code that is not a dtype.
size_t DtypeSize(plexus_dtype_t dtype);

// "float32", "bfloat16", ...; "dtype(<n>)" is not produced: unknown codes give "unknown".
const char* DtypeName(plexus_dtype_t dtype);

// "sum", "prod", "min", "max", "avg"; "unknown" otherwise.
const char* ReduceOpName(plexus_reduce_op_t op);

// "allreduce", "broadcast", ...; "unknown" otherwise.
const char* CollectiveName(plexus_collective_t coll);

// True when dtype and op are codes this library can reduce.
bool CanReduce(plexus_dtype_t dtype, plexus_reduce_op_t op);

// acc[i] = acc[i] (op) in[i] for i < count. For PLEXUS_OP_AVG this sums; the
// caller divides once at the end with FinishAverage. acc and in may not overlap
// partially (they may be equal). Preconditions: CanReduce(dtype, op).
void ReduceInto(void* acc, const void* in, uint64_t count, plexus_dtype_t dtype,
                plexus_reduce_op_t op);

// out[i] = a[i] (op) b[i]: like ReduceInto but leaves a untouched, which
// saves an algorithm a copy. out may equal a or b (element for element;
// equal to a is the case written to vectorise); no partial overlap.
void ReduceTo(void* out, const void* a, const void* b, uint64_t count, plexus_dtype_t dtype,
              plexus_reduce_op_t op);

// out[i] = (a[i] + b[i]) / divisor: the last reduction of AVG and
// FinishAverage in one pass. Gives exactly the bytes of ReduceTo(SUM)
// followed by FinishAverage (float32/float64 round the sum to their own type
// before dividing; other dtypes take the two passes).
void ReduceToAverage(void* out, const void* a, const void* b, uint64_t count, plexus_dtype_t dtype,
                     uint32_t divisor);

// buf[i] /= divisor (integers truncate toward zero), the last step of AVG.
void FinishAverage(void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t divisor);

}  // namespace plexus::algos
