#include "data.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "plexus/algos/dtype.hpp"
#include "plexus/algos/half.hpp"

namespace plexus::conformance {
namespace {

enum class Kind { kSigned, kUnsigned, kFloat };

Kind KindOf(plexus_dtype_t dtype) {
  switch (dtype) {
    case PLEXUS_DTYPE_UINT8:
    case PLEXUS_DTYPE_UINT16:
    case PLEXUS_DTYPE_UINT32:
    case PLEXUS_DTYPE_UINT64:
      return Kind::kUnsigned;
    case PLEXUS_DTYPE_FLOAT16:
    case PLEXUS_DTYPE_BFLOAT16:
    case PLEXUS_DTYPE_FLOAT32:
    case PLEXUS_DTYPE_FLOAT64:
      return Kind::kFloat;
    default:
      return Kind::kSigned;
  }
}

// A well-mixed 64-bit hash of (a, b, c) (splitmix64's finaliser).
uint64_t Mix(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^
               (c + 0x94D049BB133111EBull);
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

// Largest |value| (in the dtype's units: integers, or quarters for floats)
// whose sums over size ranks stay exact.
int64_t Amplitude(plexus_dtype_t dtype, uint32_t size) {
  int64_t limit = 100 * int64_t(size);  // wide types: no limit but variety
  switch (dtype) {
    case PLEXUS_DTYPE_INT8:
      limit = 127;
      break;
    case PLEXUS_DTYPE_UINT8:
      limit = 255;
      break;
    case PLEXUS_DTYPE_FLOAT16:
      limit = 2048;  // quarters: 2048 quarters = 512, exact with 11 significant bits
      break;
    case PLEXUS_DTYPE_BFLOAT16:
      limit = 256;
      break;
    default:
      break;
  }
  int64_t a = limit / int64_t(size);
  return a > 100 ? 100 : a;
}

// Units of one input step: floats use quarters so that fractions are covered.
double Unit(plexus_dtype_t dtype) {
  return KindOf(dtype) == Kind::kFloat ? 0.25 : 1.0;
}

bool IsHalf(plexus_dtype_t dtype) {
  return dtype == PLEXUS_DTYPE_FLOAT16 || dtype == PLEXUS_DTYPE_BFLOAT16;
}

double ReduceValue(plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t rank, uint32_t size,
                   uint64_t salt, uint64_t i) {
  const Kind kind = KindOf(dtype);
  if (op == PLEXUS_OP_PROD) {
    double v = ((i + rank) % (uint64_t(size) + 1) == 0) ? 2 : 1;
    if (kind != Kind::kUnsigned && Mix(rank, i, salt) % 5 == 0) v = -v;
    return v;
  }
  const int64_t a = Amplitude(dtype, size);
  if (op == PLEXUS_OP_AVG && IsHalf(dtype)) {
    // base + d(rank), where the d of the ranks cancel: ranks 2k and 2k+1 add
    // +e and -e; the last of an odd number adds 0. The sum is size * base.
    const int64_t half = a / 2;
    const int64_t base = int64_t(Mix(0xB0, i, salt) % uint64_t(2 * half + 1)) - half;
    int64_t d = 0;
    if (!(size % 2 == 1 && rank == size - 1)) {
      const int64_t e = int64_t(Mix(rank / 2, i, salt ^ 0xD1) % uint64_t(half + 1));
      d = rank % 2 == 0 ? e : -e;
    }
    return double(base + d) * Unit(dtype);
  }
  const uint64_t h = Mix(rank, i, salt);
  if (kind == Kind::kUnsigned) return double(h % uint64_t(a + 1));
  return double(int64_t(h % uint64_t(2 * a + 1)) - a) * Unit(dtype);
}

double ReduceResult(plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t size, uint64_t salt,
                    uint64_t i) {
  double acc = ReduceValue(dtype, op, 0, size, salt, i);
  for (uint32_t r = 1; r < size; ++r) {
    const double v = ReduceValue(dtype, op, r, size, salt, i);
    switch (op) {
      case PLEXUS_OP_PROD:
        acc *= v;
        break;
      case PLEXUS_OP_MIN:
        acc = v < acc ? v : acc;
        break;
      case PLEXUS_OP_MAX:
        acc = v > acc ? v : acc;
        break;
      default:
        acc += v;
    }
  }
  if (op != PLEXUS_OP_AVG) return acc;
  switch (dtype) {
    case PLEXUS_DTYPE_FLOAT32:
      return double(float(acc) / float(size));  // one division, in float32
    case PLEXUS_DTYPE_FLOAT64:
    case PLEXUS_DTYPE_FLOAT16:
    case PLEXUS_DTYPE_BFLOAT16:
      return acc / double(size);  // halves: exact by construction
    default:
      return double(int64_t(acc) / int64_t(size));  // C truncation toward zero
  }
}

// Data-only collectives: wide values the dtype holds exactly.
double MoveValue(plexus_dtype_t dtype, uint32_t rank, uint64_t salt, uint64_t i) {
  const uint64_t h = Mix(rank ^ 0x5EED, i, salt);
  switch (dtype) {
    case PLEXUS_DTYPE_INT8:
      return double(int8_t(h));
    case PLEXUS_DTYPE_UINT8:
      return double(uint8_t(h));
    case PLEXUS_DTYPE_INT16:
      return double(int16_t(h));
    case PLEXUS_DTYPE_UINT16:
      return double(uint16_t(h));
    case PLEXUS_DTYPE_INT32:
      return double(int32_t(h));
    case PLEXUS_DTYPE_UINT32:
      return double(uint32_t(h));
    case PLEXUS_DTYPE_INT64:
      return double(int64_t(h % (uint64_t(1) << 53)) - (int64_t(1) << 52));
    case PLEXUS_DTYPE_UINT64:
      return double(h % (uint64_t(1) << 53));
    case PLEXUS_DTYPE_FLOAT16:
      return double(int64_t(h % 4097) - 2048) / 4;
    case PLEXUS_DTYPE_BFLOAT16:
      return double(int64_t(h % 513) - 256) / 4;
    case PLEXUS_DTYPE_FLOAT32:
      return double(int64_t(h % (uint64_t(1) << 24)) - (int64_t(1) << 23)) / 8;
    default:
      return double(int64_t(h % (uint64_t(1) << 52)) - (int64_t(1) << 51)) / 16;
  }
}

std::string Hex(const uint8_t* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += kDigits[p[i] >> 4];
    s += kDigits[p[i] & 15];
  }
  return s;
}

std::string Show(plexus_dtype_t dtype, const void* buffer, uint64_t index) {
  const double v = LoadElement(dtype, buffer, index);
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", v);
  const size_t width = ElementSize(dtype);
  return std::string(text) + " (0x" +
         Hex(static_cast<const uint8_t*>(buffer) + index * width, width) + ")";
}

}  // namespace

size_t ElementSize(plexus_dtype_t dtype) {
  return algos::DtypeSize(dtype);
}
const char* DtypeName(plexus_dtype_t dtype) {
  return algos::DtypeName(dtype);
}
const char* OpName(plexus_reduce_op_t op) {
  return algos::ReduceOpName(op);
}
const char* CollectiveName(plexus_collective_t coll) {
  return algos::CollectiveName(coll);
}

double LoadElement(plexus_dtype_t dtype, const void* buffer, uint64_t index) {
  const auto* p = static_cast<const uint8_t*>(buffer) + index * ElementSize(dtype);
  auto load = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (dtype) {
    case PLEXUS_DTYPE_INT8:
      return load(int8_t());
    case PLEXUS_DTYPE_UINT8:
      return load(uint8_t());
    case PLEXUS_DTYPE_INT16:
      return load(int16_t());
    case PLEXUS_DTYPE_UINT16:
      return load(uint16_t());
    case PLEXUS_DTYPE_INT32:
      return load(int32_t());
    case PLEXUS_DTYPE_UINT32:
      return load(uint32_t());
    case PLEXUS_DTYPE_INT64:
      return double(load(int64_t()));
    case PLEXUS_DTYPE_UINT64:
      return double(load(uint64_t()));
    case PLEXUS_DTYPE_FLOAT16:
      return algos::Float16ToFloat(load(uint16_t()));
    case PLEXUS_DTYPE_BFLOAT16:
      return algos::BFloat16ToFloat(load(uint16_t()));
    case PLEXUS_DTYPE_FLOAT32:
      return load(float());
    case PLEXUS_DTYPE_FLOAT64:
      return load(double());
    default:
      return 0;
  }
}

void StoreElement(plexus_dtype_t dtype, void* buffer, uint64_t index, double value) {
  auto* p = static_cast<uint8_t*>(buffer) + index * ElementSize(dtype);
  auto store = [p](auto v) { std::memcpy(p, &v, sizeof v); };
  switch (dtype) {
    case PLEXUS_DTYPE_INT8:
      return store(int8_t(value));
    case PLEXUS_DTYPE_UINT8:
      return store(uint8_t(value));
    case PLEXUS_DTYPE_INT16:
      return store(int16_t(value));
    case PLEXUS_DTYPE_UINT16:
      return store(uint16_t(value));
    case PLEXUS_DTYPE_INT32:
      return store(int32_t(value));
    case PLEXUS_DTYPE_UINT32:
      return store(uint32_t(value));
    case PLEXUS_DTYPE_INT64:
      return store(int64_t(value));
    case PLEXUS_DTYPE_UINT64:
      return store(uint64_t(value));
    case PLEXUS_DTYPE_FLOAT16:
      return store(algos::FloatToFloat16(float(value)));
    case PLEXUS_DTYPE_BFLOAT16:
      return store(algos::FloatToBFloat16(float(value)));
    case PLEXUS_DTYPE_FLOAT32:
      return store(float(value));
    case PLEXUS_DTYPE_FLOAT64:
      return store(value);
    default:
      return;
  }
}

void FillReduceInput(plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t rank, uint32_t size,
                     uint64_t salt, uint64_t first, uint64_t count, void* buffer) {
  for (uint64_t i = 0; i < count; ++i) {
    StoreElement(dtype, buffer, i, ReduceValue(dtype, op, rank, size, salt, first + i));
  }
}

void FillReduceResult(plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t size, uint64_t salt,
                      uint64_t first, uint64_t count, void* buffer) {
  for (uint64_t i = 0; i < count; ++i) {
    StoreElement(dtype, buffer, i, ReduceResult(dtype, op, size, salt, first + i));
  }
}

void FillMoveData(plexus_dtype_t dtype, uint32_t rank, uint64_t salt, uint64_t first,
                  uint64_t count, void* buffer) {
  for (uint64_t i = 0; i < count; ++i) {
    StoreElement(dtype, buffer, i, MoveValue(dtype, rank, salt, first + i));
  }
}

std::string CompareElements(plexus_dtype_t dtype, const void* got, const void* want,
                            uint64_t count) {
  const size_t width = ElementSize(dtype);
  if (std::memcmp(got, want, count * width) == 0) return {};
  uint64_t wrong = 0, first = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (std::memcmp(static_cast<const uint8_t*>(got) + i * width,
                    static_cast<const uint8_t*>(want) + i * width, width) != 0) {
      if (wrong++ == 0) first = i;
    }
  }
  return std::to_string(wrong) + " of " + std::to_string(count) + " elements wrong; element " +
         std::to_string(first) + ": got " + Show(dtype, got, first) + ", want " +
         Show(dtype, want, first);
}

std::string CompareBytes(const void* got, const void* want, size_t bytes) {
  const auto* g = static_cast<const uint8_t*>(got);
  const auto* w = static_cast<const uint8_t*>(want);
  for (size_t i = 0; i < bytes; ++i) {
    if (g[i] != w[i]) {
      return "byte " + std::to_string(i) + " of " + std::to_string(bytes) + " changed from 0x" +
             Hex(w + i, 1) + " to 0x" + Hex(g + i, 1);
    }
  }
  return {};
}

}  // namespace plexus::conformance
