// Inputs and expected outputs of plexus-bench's checked iterations.
//
// Every buffer holds a periodic sequence of small integers, stored in the
// buffer's dtype: element i is pattern[(offset + i) % pattern.size()]. The
// values are chosen so that every reduction is exact in any order and in
// every dtype, int8 and bfloat16 included (up to 128 ranks):
//   sum, avg  small integers; on signed types rank 0 carries -(n-1) and the
//             others +1 on top of a common base, so the sum is n * base and
//             the average the base exactly; unsigned types add rank % 2;
//   prod      +-1 (signed types only) and 2 (on at most six ranks), so every
//             partial product is a power of two of magnitude <= 64;
//   min, max  integers in [-30, 30] (signed) or [0, 60] (unsigned).
// Results are compared bit for bit with the value stored the same way.
#pragma once

#include <cstdint>
#include <vector>

#include "plexus/types.hpp"

namespace plexus::bench {

using Pattern = std::vector<int64_t>;

// Rank r's input of a reduction with op over n ranks.
Pattern ReductionInput(DType t, ReduceOp op, uint32_t r, uint32_t n);
// The reduction of ReductionInput over ranks 0..n-1.
Pattern ReductionResult(DType t, ReduceOp op, uint32_t n);
// Data moved by broadcast, allgather, alltoall and sendrecv; tag names the
// sender (and block), so that a misplaced block is caught.
Pattern DataPattern();
uint64_t DataOffset(uint64_t tag);

// Writes count elements of dtype t at buf: element i = p[(offset + i) % p.size()].
void Fill(DType t, void* buf, uint64_t count, const Pattern& p, uint64_t offset = 0);
// Number of the count elements at buf that differ from what Fill would write.
uint64_t CountWrong(DType t, const void* buf, uint64_t count, const Pattern& p,
                    uint64_t offset = 0);

// The byte every output buffer is set to before a checked operation.
inline constexpr unsigned char kSentinel = 0xA5;
// Number of the count elements of size elem_size at buf that are not all kSentinel.
uint64_t CountTouched(const void* buf, uint64_t count, size_t elem_size);

}  // namespace plexus::bench
