// Input values whose results are exact in any order, and the results.
//
// Every element of every rank's input is a function of (rank, index, salt),
// so any rank can compute what every other rank sent and hence the exact
// expected output, and two checks with different salts never see the same
// data (a backend that returns a stale buffer fails).
//
// Reductions: small integers (quarters for float types), with a magnitude
// chosen so that every partial sum over the ranks is exact in the dtype
// (float16 holds integers to 2048, bfloat16 to 256, int8 to 127, ...); for
// prod, values of +-1 and one 2 per element, so products are +-1 or +-2.
// The order in which a backend combines ranks then cannot change a bit.
// avg follows the header: sum, then one division by the size; integers
// truncate toward zero (negative sums included), float32/float64 divide the
// exact sum once in their own precision. For float16/bfloat16, whose
// division a backend may do in float32 and round once more, the inputs of
// avg sum to a multiple of the size so the quotient is exact either way.
//
// Data-only collectives move values from a wider range; they must arrive
// bit for bit.
#pragma once

#include <cstdint>
#include <string>

#include "plexus/backend.h"

namespace plexus::conformance {

// Bytes per element (0 for an unknown code) and names, from plexus-algos.
size_t ElementSize(plexus_dtype_t dtype);
const char* DtypeName(plexus_dtype_t dtype);
const char* OpName(plexus_reduce_op_t op);
const char* CollectiveName(plexus_collective_t coll);

// Element index of buffer as a double / from a double that the dtype holds exactly.
double LoadElement(plexus_dtype_t dtype, const void* buffer, uint64_t index);
void StoreElement(plexus_dtype_t dtype, void* buffer, uint64_t index, double value);

// Fills count elements of buffer with rank's reduction input for op,
// elements first..first+count of its logical vector.
void FillReduceInput(plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t rank, uint32_t size,
                     uint64_t salt, uint64_t first, uint64_t count, void* buffer);
// The exact result of reducing element first..first+count over all ranks.
void FillReduceResult(plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t size, uint64_t salt,
                      uint64_t first, uint64_t count, void* buffer);

// Fills count elements with the data rank sends (elements first..first+count).
void FillMoveData(plexus_dtype_t dtype, uint32_t rank, uint64_t salt, uint64_t first,
                  uint64_t count, void* buffer);

// "" when got equals want (count elements), else how many elements differ and
// the first of them, with values, e.g. "3 of 1009 elements wrong; element 7:
// got 5, want 4".
std::string CompareElements(plexus_dtype_t dtype, const void* got, const void* want,
                            uint64_t count);

// "" when the bytes are equal, else the first differing byte offset.
std::string CompareBytes(const void* got, const void* want, size_t bytes);

}  // namespace plexus::conformance
