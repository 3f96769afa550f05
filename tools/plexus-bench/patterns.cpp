#include "patterns.hpp"

#include <algorithm>
#include <cstring>

#include "plexus/algos/half.hpp"

namespace plexus::bench {
namespace {

namespace algos = plexus::algos;

bool IsSigned(DType t) {
  switch (t) {
    case DType::UInt8:
    case DType::UInt16:
    case DType::UInt32:
    case DType::UInt64:
      return false;
    default:
      return true;
  }
}

// Stores the small integer v as one element of type t at dst.
void Put(DType t, void* dst, int64_t v) {
  auto store = [dst](auto x) { std::memcpy(dst, &x, sizeof x); };
  switch (t) {
    case DType::Int8:
      store(int8_t(v));
      break;
    case DType::UInt8:
      store(uint8_t(v));
      break;
    case DType::Int16:
      store(int16_t(v));
      break;
    case DType::UInt16:
      store(uint16_t(v));
      break;
    case DType::Int32:
      store(int32_t(v));
      break;
    case DType::UInt32:
      store(uint32_t(v));
      break;
    case DType::Int64:
      store(int64_t(v));
      break;
    case DType::UInt64:
      store(uint64_t(v));
      break;
    case DType::Float16:
      store(algos::FloatToFloat16(float(v)));
      break;
    case DType::BFloat16:
      store(algos::FloatToBFloat16(float(v)));
      break;
    case DType::Float32:
      store(float(v));
      break;
    case DType::Float64:
      store(double(v));
      break;
  }
}

// Period of the sum/avg base sequence: keeps n * base within int8 and exact in bfloat16.
uint32_t SumPeriod(uint32_t n) {
  return std::clamp<uint32_t>(100 / std::max(n, 1u), 1u, 13u);
}

int64_t InputAt(DType t, ReduceOp op, uint32_t r, uint32_t n, uint64_t i) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: {
      const int64_t base = int64_t(i * 7 % SumPeriod(n));
      if (!IsSigned(t)) return base + (r & 1);
      if (n == 1) return base;
      return base + (r == 0 ? -int64_t(n - 1) : 1);
    }
    case ReduceOp::Prod:
      if (IsSigned(t) && (i + 2 * r) % 7 == 3) return -1;
      return (r < 6 && (i + r) % 5 == 0) ? 2 : 1;
    case ReduceOp::Min:
    case ReduceOp::Max:
      return int64_t((i * 31 + r * 17) % 61) - (IsSigned(t) ? 30 : 0);
  }
  return 0;
}

size_t Period(ReduceOp op, uint32_t n) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return SumPeriod(n);
    case ReduceOp::Prod:
      return 35;
    case ReduceOp::Min:
    case ReduceOp::Max:
      return 61;
  }
  return 1;
}

// The pattern stored in dtype t from element `offset` on, whole periods of it
// repeated to about 64 KiB (at least one), so that Fill and CountWrong work in
// large memcpy/memcmp strides; *period_bytes is one period's size.
std::vector<unsigned char> Encode(DType t, const Pattern& p, uint64_t offset,
                                  size_t* period_bytes) {
  const size_t es = ElementSize(t);
  const size_t period = p.size();
  *period_bytes = period * es;
  const size_t reps = std::max<size_t>(1, (64u << 10) / *period_bytes);
  std::vector<unsigned char> bytes(reps * *period_bytes);
  for (size_t k = 0; k < reps * period; ++k) {
    Put(t, bytes.data() + k * es, p[(offset + k) % period]);
  }
  return bytes;
}

}  // namespace

Pattern ReductionInput(DType t, ReduceOp op, uint32_t r, uint32_t n) {
  Pattern p(Period(op, n));
  for (size_t i = 0; i < p.size(); ++i) p[i] = InputAt(t, op, r, n, i);
  return p;
}

Pattern ReductionResult(DType t, ReduceOp op, uint32_t n) {
  Pattern p(Period(op, n));
  for (size_t i = 0; i < p.size(); ++i) {
    int64_t acc = InputAt(t, op, 0, n, i);
    for (uint32_t r = 1; r < n; ++r) {
      const int64_t x = InputAt(t, op, r, n, i);
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          acc += x;
          break;
        case ReduceOp::Prod:
          acc *= x;
          break;
        case ReduceOp::Min:
          acc = std::min(acc, x);
          break;
        case ReduceOp::Max:
          acc = std::max(acc, x);
          break;
      }
    }
    // Integers truncate toward zero (as C++ division does); for floats the
    // signed inputs make the sum a multiple of n, so the quotient is exact.
    if (op == ReduceOp::Avg) acc /= int64_t(n);
    p[i] = acc;
  }
  return p;
}

Pattern DataPattern() {
  Pattern p(97);
  for (size_t i = 0; i < p.size(); ++i) p[i] = int64_t(i);
  return p;
}

uint64_t DataOffset(uint64_t tag) {
  return tag * 13 + 1;
}

void Fill(DType t, void* buf, uint64_t count, const Pattern& p, uint64_t offset) {
  if (count == 0) return;
  size_t period_bytes = 0;
  const auto block = Encode(t, p, offset % p.size(), &period_bytes);
  auto* out = static_cast<unsigned char*>(buf);
  uint64_t left = count * ElementSize(t);
  while (left > 0) {
    const size_t n = size_t(std::min<uint64_t>(left, block.size()));
    std::memcpy(out, block.data(), n);
    out += n;
    left -= n;
  }
}

uint64_t CountWrong(DType t, const void* buf, uint64_t count, const Pattern& p, uint64_t offset) {
  if (count == 0) return 0;
  size_t period_bytes = 0;
  const auto block = Encode(t, p, offset % p.size(), &period_bytes);
  const size_t es = ElementSize(t);
  const auto* in = static_cast<const unsigned char*>(buf);
  uint64_t left = count * es, wrong = 0;
  while (left > 0) {
    const size_t n = size_t(std::min<uint64_t>(left, block.size()));
    if (std::memcmp(in, block.data(), n) != 0) {
      for (size_t k = 0; k < n; k += es) wrong += std::memcmp(in + k, block.data() + k, es) != 0;
    }
    in += n;
    left -= n;
  }
  return wrong;
}

uint64_t CountTouched(const void* buf, uint64_t count, size_t elem_size) {
  const auto* in = static_cast<const unsigned char*>(buf);
  uint64_t touched = 0;
  for (uint64_t i = 0; i < count; ++i) {
    for (size_t k = 0; k < elem_size; ++k) {
      if (in[i * elem_size + k] != kSentinel) {
        ++touched;
        break;
      }
    }
  }
  return touched;
}

}  // namespace plexus::bench
