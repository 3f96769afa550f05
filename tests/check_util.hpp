// The pass/fail tally of the multi-rank test programs (collectives_check,
// tcp_allreduce_algos_check): every check calls Expect, the first 20
// failures are printed with the rank, and main() reports the counts and
// exits non-zero if any failed.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace plexus_check {

inline int failures = 0;
inline int passes = 0;
inline uint32_t rank = 0;  // printed with each failure

inline void Expect(bool ok, const std::string& what) {
  if (ok) {
    ++passes;
    return;
  }
  if (++failures <= 20) std::fprintf(stderr, "rank %u: FAILED %s\n", rank, what.c_str());
}

// FNV-1a of bytes, continuing from h: to compare results across ranks.
inline uint64_t Fnv1a(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace plexus_check
