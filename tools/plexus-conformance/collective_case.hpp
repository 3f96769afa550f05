// One collective of the list (plexus/abi/collectives.def) posted with
// buffers, inputs and expected results derived from its traits alone: which
// buffers it takes, which side holds a block per rank, whether it reduces,
// where its root is and its in-place form. A collective added to the list
// in one of the existing layouts is checked with no code here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "check.hpp"
#include "plexus/backend.h"

namespace plexus::conformance {

// How the per-rank counts of a v-collective (Layout::kPerRankCounts) or the
// buffers of a buffer list (Layout::kBufferList) are chosen.
enum class Pattern {
  kNone,              // Layout::kCount: count elements per block
  kUneven,            // small uneven counts, zero on some ranks
  kLarge,             // large uneven counts, zero on some ranks
  kAllZero,           // every count 0
  kOneRank,           // only the last rank's block has elements
  kOverlappingSends,  // counts differ per pair (alltoallv): every send block starts at sendbuf
  kSeparate,          // buffer list: one allocation per buffer
  kBucket,            // buffer list: adjacent views of one allocation (a DDP bucket)
  kSingle,            // buffer list: one buffer
};

struct CollectiveCase {
  plexus_collective_t coll;
  plexus_dtype_t dtype;
  plexus_reduce_op_t op = 0;  // reductions
  uint64_t count = 0;         // Layout::kCount: per block
  uint32_t root = 0;          // Root::kRoot
  bool in_place = false;      // in the collective's in-place form
  Pattern pattern = Pattern::kNone;
};

// The patterns coll is checked with for op (kNone for Layout::kCount);
// a reduction's other ops than sum get fewer.
std::vector<Pattern> PatternsOf(plexus_collective_t coll, plexus_reduce_op_t op);

// "allreduce int32 sum" (the summary row's capability).
std::string CaseCapability(const CollectiveCase& c);
// "allreduce int32 sum count=1009 in-place", "gather int32 count=5 root=2",
// "allgatherv int32 counts=7,0,33".
std::string CaseName(const CollectiveCase& c, uint32_t size, uint64_t max_count);

// Posts c on comm, waits with a bound and checks every rank's results
// exactly, the buffers that must stay as they were, and the request
// protocol. SKIP when the slot is not there.
Outcome RunCollectiveCase(Context& ctx, const CollectiveCase& c, plexus_comm* comm);

// A small case of coll on the shared communicator: 5 elements per block
// from root 0, or the uneven counts, or five separate buffers.
Outcome RunSmall(Context& ctx, plexus_collective_t coll, plexus_dtype_t dtype,
                 plexus_reduce_op_t op);

// Why a collective the capabilities do not claim gets no checks: "backend is
// ABI 1.1: no gather" for an older table, else "gather is not claimed
// (capabilities.collectives)".
std::string NotClaimedReason(const Context& ctx, plexus_collective_t coll);

}  // namespace plexus::conformance
