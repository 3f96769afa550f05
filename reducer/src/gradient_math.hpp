// Element-wise work on gradient buffers in host memory: copy with a division,
// divide in place, and the casts of the compression hooks. Gradients are
// floating point: float16, bfloat16, float32 or float64.
#pragma once

#include <cstdint>

#include "plexus/types.hpp"

namespace plexus::reducer {

bool IsGradientDType(DType t);

// dst[i] = src[i] / divisor (a plain copy when divisor is 1). dst and src may
// be the same buffer. Division rather than multiplication by 1/divisor, so
// that a sum of multiples of the divisor averages exactly.
void CopyDivided(void* dst, const void* src, uint64_t count, DType dtype, double divisor);

// dst[i] = src[i] / divisor, converted from `from` to `to` (both gradient dtypes).
void ConvertDivided(void* dst, DType to, const void* src, DType from, uint64_t count,
                    double divisor);

}  // namespace plexus::reducer
