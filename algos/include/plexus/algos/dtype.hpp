// Reduction kernels for the ABI dtypes and ops. Sizes and names are the
// ABI's (plexus/abi/types.hpp, collectives.hpp), named here too for the
// algorithms and the backends that use them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plexus/abi/collectives.hpp"
#include "plexus/abi/types.hpp"
#include "plexus/backend.h"

namespace plexus::algos {

using abi::CanReduce;
using abi::CollectiveName;
using abi::DtypeName;
using abi::DtypeSize;
using abi::ReduceOpName;

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
