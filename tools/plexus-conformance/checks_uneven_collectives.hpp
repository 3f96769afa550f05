// What the checks of the uneven collectives of ABI 1.2 share (checks_uneven_collectives.cpp).
#pragma once

#include <string>
#include <vector>

#include "check.hpp"
#include "plexus/backend.h"

namespace plexus::conformance {

// gather, scatter, allgatherv, alltoallv, allreduce_coalesced.
const std::vector<plexus_collective_t>& Collectives12();

// Why a collective the capabilities do not claim gets no checks: "backend is
// ABI 1.1: no gather" for an older table, else "gather is not claimed
// (capabilities.collectives)".
std::string NotClaimedReason(const Context& ctx, plexus_collective_t coll);

// A small valid post of a 1.2 collective on the shared communicator (gather
// and scatter: 5 elements from root 0; allgatherv and alltoallv: uneven
// counts; allreduce_coalesced: five buffers), checked exactly. SKIP when the
// slot is not there.
Outcome RunSmall12(Context& ctx, plexus_collective_t coll, plexus_dtype_t dtype,
                   plexus_reduce_op_t op);

}  // namespace plexus::conformance
