// Element types and reduction operators of the C++ API, and the mapping from
// C++ element types to them. The numeric values are the ABI codes.
#pragma once

#include <cstdint>
#include <type_traits>

#include "plexus/backend.h"

namespace plexus {

enum class DType : uint32_t {
  Int8 = PLEXUS_DTYPE_INT8,
  UInt8 = PLEXUS_DTYPE_UINT8,
  Int16 = PLEXUS_DTYPE_INT16,
  UInt16 = PLEXUS_DTYPE_UINT16,
  Int32 = PLEXUS_DTYPE_INT32,
  UInt32 = PLEXUS_DTYPE_UINT32,
  Int64 = PLEXUS_DTYPE_INT64,
  UInt64 = PLEXUS_DTYPE_UINT64,
  Float16 = PLEXUS_DTYPE_FLOAT16,
  BFloat16 = PLEXUS_DTYPE_BFLOAT16,
  Float32 = PLEXUS_DTYPE_FLOAT32,
  Float64 = PLEXUS_DTYPE_FLOAT64,
};

enum class ReduceOp : uint32_t {
  Sum = PLEXUS_OP_SUM,
  Prod = PLEXUS_OP_PROD,
  Min = PLEXUS_OP_MIN,
  Max = PLEXUS_OP_MAX,
  Avg = PLEXUS_OP_AVG,
};

// Storage types for the 16-bit floats: the raw bits, nothing more. Convert
// with plexus::algos::Float16ToFloat and friends (plexus/algos/half.hpp).
struct float16_t {
  uint16_t bits;
};
struct bfloat16_t {
  uint16_t bits;
};

inline constexpr DType kAllDTypes[] = {
    DType::Int8,  DType::UInt8,  DType::Int16,   DType::UInt16,   DType::Int32,   DType::UInt32,
    DType::Int64, DType::UInt64, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min,
                                             ReduceOp::Max, ReduceOp::Avg};

size_t ElementSize(DType t);
const char* ToString(DType t);
const char* ToString(ReduceOp op);

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::Int8;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::UInt8;
};
template <>
struct DTypeOf<int16_t> {
  static constexpr DType value = DType::Int16;
};
template <>
struct DTypeOf<uint16_t> {
  static constexpr DType value = DType::UInt16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct DTypeOf<uint32_t> {
  static constexpr DType value = DType::UInt32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct DTypeOf<uint64_t> {
  static constexpr DType value = DType::UInt64;
};
template <>
struct DTypeOf<float16_t> {
  static constexpr DType value = DType::Float16;
};
template <>
struct DTypeOf<bfloat16_t> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::Float64;
};

// A type the typed collectives accept.
template <typename T>
concept Element = requires {
  DTypeOf<std::remove_const_t<T>>::value;
};

template <Element T>
inline constexpr DType kDTypeOf = DTypeOf<std::remove_const_t<T>>::value;

}  // namespace plexus
