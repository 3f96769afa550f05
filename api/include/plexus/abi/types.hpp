// The ABI's dtype and reduce-op codes: sizes and names.
#pragma once

#include <cstddef>

#include "plexus/backend.h"

namespace plexus::abi {

// Bytes per element; 0 for a code that is not a dtype of ABI 1.
size_t DtypeSize(plexus_dtype_t dtype);

// "float32", ...; "unknown" for a code that is not a dtype of ABI 1.
const char* DtypeName(plexus_dtype_t dtype);

// "sum", ...; "unknown" for a code that is not an op of ABI 1.
const char* ReduceOpName(plexus_reduce_op_t op);

// Whether dtype and op are codes of ABI 1 (every op applies to every dtype).
bool CanReduce(plexus_dtype_t dtype, plexus_reduce_op_t op);

}  // namespace plexus::abi
