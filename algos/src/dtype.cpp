// Reduction kernels: one template per (element type, op), dispatched once per
// call so the inner loops are plain typed loops the compiler vectorises.
#include "plexus/algos/dtype.hpp"

#include <algorithm>
#include <type_traits>

#include "plexus/algos/half.hpp"

namespace plexus::algos {
namespace {

// out[i] = fn(a[i], b[i]); out may be a (or b), element for element.
template <typename T, typename Fn>
void Apply(void* out, const void* a, const void* b, uint64_t count, Fn fn) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  if (o == x) {  // the common in-place case, written so it vectorises
    for (uint64_t i = 0; i < count; ++i) o[i] = fn(o[i], y[i]);
  } else if (o == y) {  // received into the output (ring), likewise
    for (uint64_t i = 0; i < count; ++i) o[i] = fn(x[i], o[i]);
  } else {
    for (uint64_t i = 0; i < count; ++i) o[i] = fn(x[i], y[i]);
  }
}

template <typename T>
void ReduceTyped(void* out, const void* a, const void* b, uint64_t count, plexus_reduce_op_t op) {
  switch (op) {
    case PLEXUS_OP_SUM:
    case PLEXUS_OP_AVG:
      return Apply<T>(out, a, b, count, [](T x, T y) { return T(x + y); });
    case PLEXUS_OP_PROD:
      return Apply<T>(out, a, b, count, [](T x, T y) { return T(x * y); });
    case PLEXUS_OP_MIN:
      return Apply<T>(out, a, b, count, [](T x, T y) { return std::min(x, y); });
    case PLEXUS_OP_MAX:
      return Apply<T>(out, a, b, count, [](T x, T y) { return std::max(x, y); });
  }
}

// 16-bit floats reduce in binary32 and round once per element and step, as
// NCCL and Gloo do for half types.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void ReduceHalf(void* out, const void* a, const void* b, uint64_t count, plexus_reduce_op_t op) {
  auto run = [&](auto fn) {
    Apply<uint16_t>(out, a, b, count,
                    [&](uint16_t x, uint16_t y) { return FromFloat(fn(ToFloat(x), ToFloat(y))); });
  };
  switch (op) {
    case PLEXUS_OP_SUM:
    case PLEXUS_OP_AVG:
      return run([](float x, float y) { return x + y; });
    case PLEXUS_OP_PROD:
      return run([](float x, float y) { return x * y; });
    case PLEXUS_OP_MIN:
      return run([](float x, float y) { return std::min(x, y); });
    case PLEXUS_OP_MAX:
      return run([](float x, float y) { return std::max(x, y); });
  }
}

template <typename T>
void DivideTyped(void* buf, uint64_t count, uint32_t divisor) {
  T* p = static_cast<T*>(buf);
  for (uint64_t i = 0; i < count; ++i) {
    // Divide in a wide type: T(divisor) would wrap for small T and large worlds.
    if constexpr (std::is_floating_point_v<T>) {
      p[i] = T(p[i] / T(divisor));
    } else if constexpr (std::is_signed_v<T>) {
      p[i] = T(int64_t(p[i]) / int64_t(divisor));
    } else {
      p[i] = T(uint64_t(p[i]) / uint64_t(divisor));
    }
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void DivideHalf(void* buf, uint64_t count, uint32_t divisor) {
  uint16_t* p = static_cast<uint16_t*>(buf);
  for (uint64_t i = 0; i < count; ++i) p[i] = FromFloat(ToFloat(p[i]) / float(divisor));
}

}  // namespace

void ReduceTo(void* out, const void* a, const void* b, uint64_t count, plexus_dtype_t dtype,
              plexus_reduce_op_t op) {
  switch (dtype) {
    case PLEXUS_DTYPE_INT8:
      return ReduceTyped<int8_t>(out, a, b, count, op);
    case PLEXUS_DTYPE_UINT8:
      return ReduceTyped<uint8_t>(out, a, b, count, op);
    case PLEXUS_DTYPE_INT16:
      return ReduceTyped<int16_t>(out, a, b, count, op);
    case PLEXUS_DTYPE_UINT16:
      return ReduceTyped<uint16_t>(out, a, b, count, op);
    case PLEXUS_DTYPE_INT32:
      return ReduceTyped<int32_t>(out, a, b, count, op);
    case PLEXUS_DTYPE_UINT32:
      return ReduceTyped<uint32_t>(out, a, b, count, op);
    case PLEXUS_DTYPE_INT64:
      return ReduceTyped<int64_t>(out, a, b, count, op);
    case PLEXUS_DTYPE_UINT64:
      return ReduceTyped<uint64_t>(out, a, b, count, op);
    case PLEXUS_DTYPE_FLOAT16:
      return ReduceHalf<Float16ToFloat, FloatToFloat16>(out, a, b, count, op);
    case PLEXUS_DTYPE_BFLOAT16:
      return ReduceHalf<BFloat16ToFloat, FloatToBFloat16>(out, a, b, count, op);
    case PLEXUS_DTYPE_FLOAT32:
      return ReduceTyped<float>(out, a, b, count, op);
    case PLEXUS_DTYPE_FLOAT64:
      return ReduceTyped<double>(out, a, b, count, op);
  }
}

void ReduceInto(void* acc, const void* in, uint64_t count, plexus_dtype_t dtype,
                plexus_reduce_op_t op) {
  ReduceTo(acc, acc, in, count, dtype, op);
}

void FinishAverage(void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t divisor) {
  if (divisor <= 1) return;
  switch (dtype) {
    case PLEXUS_DTYPE_INT8:
      return DivideTyped<int8_t>(buf, count, divisor);
    case PLEXUS_DTYPE_UINT8:
      return DivideTyped<uint8_t>(buf, count, divisor);
    case PLEXUS_DTYPE_INT16:
      return DivideTyped<int16_t>(buf, count, divisor);
    case PLEXUS_DTYPE_UINT16:
      return DivideTyped<uint16_t>(buf, count, divisor);
    case PLEXUS_DTYPE_INT32:
      return DivideTyped<int32_t>(buf, count, divisor);
    case PLEXUS_DTYPE_UINT32:
      return DivideTyped<uint32_t>(buf, count, divisor);
    case PLEXUS_DTYPE_INT64:
      return DivideTyped<int64_t>(buf, count, divisor);
    case PLEXUS_DTYPE_UINT64:
      return DivideTyped<uint64_t>(buf, count, divisor);
    case PLEXUS_DTYPE_FLOAT16:
      return DivideHalf<Float16ToFloat, FloatToFloat16>(buf, count, divisor);
    case PLEXUS_DTYPE_BFLOAT16:
      return DivideHalf<BFloat16ToFloat, FloatToBFloat16>(buf, count, divisor);
    case PLEXUS_DTYPE_FLOAT32:
      return DivideTyped<float>(buf, count, divisor);
    case PLEXUS_DTYPE_FLOAT64:
      return DivideTyped<double>(buf, count, divisor);
  }
}

void ReduceToAverage(void* out, const void* a, const void* b, uint64_t count, plexus_dtype_t dtype,
                     uint32_t divisor) {
  if (divisor > 1 && dtype == PLEXUS_DTYPE_FLOAT32) {
    const float d = float(divisor);
    return Apply<float>(out, a, b, count,
                        [d](float x, float y) { return float(float(x + y) / d); });
  }
  if (divisor > 1 && dtype == PLEXUS_DTYPE_FLOAT64) {
    const double d = double(divisor);
    return Apply<double>(out, a, b, count,
                         [d](double x, double y) { return double(double(x + y) / d); });
  }
  ReduceTo(out, a, b, count, dtype, PLEXUS_OP_SUM);
  FinishAverage(out, count, dtype, divisor);
}

}  // namespace plexus::algos
