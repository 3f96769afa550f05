// The one map between LibTorch's scalar types and Plexus' dtypes, for the
// code that faces torch: ddp/ and plexus_torch/ (header only, so that
// plexus_torch needs no libplexus-ddp).
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>

#include "plexus/types.hpp"

namespace plexus::ddp {

// Plexus' dtype of a real scalar type (bool travels as uint8); nullopt for
// one Plexus has no dtype for. Complex tensors are pairs of their real type
// (c10::toRealValueType), which the caller decides to use or not.
inline std::optional<DType> DTypeOf(c10::ScalarType s) {
  switch (s) {
    case c10::ScalarType::Char:
      return DType::Int8;
    case c10::ScalarType::Byte:
    case c10::ScalarType::Bool:
      return DType::UInt8;
    case c10::ScalarType::Short:
      return DType::Int16;
    case c10::ScalarType::UInt16:
      return DType::UInt16;
    case c10::ScalarType::Int:
      return DType::Int32;
    case c10::ScalarType::UInt32:
      return DType::UInt32;
    case c10::ScalarType::Long:
      return DType::Int64;
    case c10::ScalarType::UInt64:
      return DType::UInt64;
    case c10::ScalarType::Half:
      return DType::Float16;
    case c10::ScalarType::BFloat16:
      return DType::BFloat16;
    case c10::ScalarType::Float:
      return DType::Float32;
    case c10::ScalarType::Double:
      return DType::Float64;
    default:
      return std::nullopt;
  }
}

// The scalar type of a Plexus dtype (uint8 is Byte).
inline c10::ScalarType ScalarTypeOf(DType d) {
  switch (d) {
    case DType::Int8:
      return c10::ScalarType::Char;
    case DType::UInt8:
      return c10::ScalarType::Byte;
    case DType::Int16:
      return c10::ScalarType::Short;
    case DType::UInt16:
      return c10::ScalarType::UInt16;
    case DType::Int32:
      return c10::ScalarType::Int;
    case DType::UInt32:
      return c10::ScalarType::UInt32;
    case DType::Int64:
      return c10::ScalarType::Long;
    case DType::UInt64:
      return c10::ScalarType::UInt64;
    case DType::Float16:
      return c10::ScalarType::Half;
    case DType::BFloat16:
      return c10::ScalarType::BFloat16;
    case DType::Float32:
      return c10::ScalarType::Float;
    case DType::Float64:
      return c10::ScalarType::Double;
  }
  return c10::ScalarType::Undefined;
}

}  // namespace plexus::ddp
