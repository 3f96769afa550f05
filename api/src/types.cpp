#include "plexus/abi/types.hpp"

namespace plexus::abi {

size_t DtypeSize(plexus_dtype_t dtype) {
  switch (dtype) {
    case PLEXUS_DTYPE_INT8:
    case PLEXUS_DTYPE_UINT8:
      return 1;
    case PLEXUS_DTYPE_INT16:
    case PLEXUS_DTYPE_UINT16:
    case PLEXUS_DTYPE_FLOAT16:
    case PLEXUS_DTYPE_BFLOAT16:
      return 2;
    case PLEXUS_DTYPE_INT32:
    case PLEXUS_DTYPE_UINT32:
    case PLEXUS_DTYPE_FLOAT32:
      return 4;
    case PLEXUS_DTYPE_INT64:
    case PLEXUS_DTYPE_UINT64:
    case PLEXUS_DTYPE_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

const char* DtypeName(plexus_dtype_t dtype) {
  static const char* const kNames[] = {"unknown",  "int8",    "uint8",  "int16",  "uint16",
                                       "int32",    "uint32",  "int64",  "uint64", "float16",
                                       "bfloat16", "float32", "float64"};
  return dtype <= PLEXUS_DTYPE_MAX_V1 ? kNames[dtype] : "unknown";
}

const char* ReduceOpName(plexus_reduce_op_t op) {
  static const char* const kNames[] = {"unknown", "sum", "prod", "min", "max", "avg"};
  return op <= PLEXUS_OP_MAX_V1 ? kNames[op] : "unknown";
}

bool CanReduce(plexus_dtype_t dtype, plexus_reduce_op_t op) {
  return DtypeSize(dtype) != 0 && op >= PLEXUS_OP_SUM && op <= PLEXUS_OP_MAX_V1;
}

}  // namespace plexus::abi
