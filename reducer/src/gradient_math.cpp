#include "gradient_math.hpp"

#include <cstring>

#include "plexus/algos/half.hpp"

namespace plexus::reducer {

namespace {

double Load(const void* p, DType t, uint64_t i) {
  switch (t) {
    case DType::Float16:
      return algos::Float16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::BFloat16:
      return algos::BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::Float32:
      return static_cast<const float*>(p)[i];
    default:
      return static_cast<const double*>(p)[i];
  }
}

void Store(void* p, DType t, uint64_t i, double v) {
  switch (t) {
    case DType::Float16:
      static_cast<uint16_t*>(p)[i] = algos::FloatToFloat16(static_cast<float>(v));
      break;
    case DType::BFloat16:
      static_cast<uint16_t*>(p)[i] = algos::FloatToBFloat16(static_cast<float>(v));
      break;
    case DType::Float32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    default:
      static_cast<double*>(p)[i] = v;
  }
}

template <typename T>
void DivideLoop(T* dst, const T* src, uint64_t n, T d) {
  for (uint64_t i = 0; i < n; ++i) dst[i] = src[i] / d;
}

}  // namespace

bool IsGradientDType(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}

void CopyDivided(void* dst, const void* src, uint64_t count, DType dtype, double divisor) {
  if (divisor == 1.0) {
    if (dst != src) std::memcpy(dst, src, count * ElementSize(dtype));
    return;
  }
  switch (dtype) {
    case DType::Float32:
      DivideLoop(static_cast<float*>(dst), static_cast<const float*>(src), count,
                 static_cast<float>(divisor));
      return;
    case DType::Float64:
      DivideLoop(static_cast<double*>(dst), static_cast<const double*>(src), count, divisor);
      return;
    default:  // the 16-bit floats: in float, rounded once on the way back
      for (uint64_t i = 0; i < count; ++i) {
        Store(dst, dtype, i, static_cast<float>(Load(src, dtype, i)) / static_cast<float>(divisor));
      }
  }
}

void ConvertDivided(void* dst, DType to, const void* src, DType from, uint64_t count,
                    double divisor) {
  if (to == from) return CopyDivided(dst, src, count, to, divisor);
  for (uint64_t i = 0; i < count; ++i) Store(dst, to, i, Load(src, from, i) / divisor);
}

}  // namespace plexus::reducer
