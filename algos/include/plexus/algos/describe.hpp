// One operation in words, for error messages and logs.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "plexus/algos/transport.hpp"

namespace plexus::algos {

// "allreduce(seq 3, count 10, float32, sum)", "broadcast(seq 4, count 8,
// int8, root 2)", "send(seq 0, count 5, float64, from rank 1)",
// "alltoallv(seq 5, int32)", "allgatherv(seq 6, total count 12, int32)".
std::string DescribeOp(const OpSignature& sig);

// Whether two ranks' signatures name the same operation: every field equal.
bool SameOp(const OpSignature& a, const OpSignature& b);

// REMOTE, the words of every transport when a peer's frame or failure report
// names another operation than this rank's at the same point:
// "collective mismatch: rank 2 posted <theirs> where rank 0 (this rank)
// posted <mine>". The wheres, when given, follow each description (" at
// byte 0 of the segment").
Status CollectiveMismatch(uint32_t me, const OpSignature& mine, uint32_t peer,
                          const OpSignature& theirs, std::string_view my_where = {},
                          std::string_view their_where = {});

// TIMEOUT, the words of every transport when an operation stalls: "rank 0
// made no progress for 1000 ms waiting for rank(s) 1 3". waiting: by rank,
// whether this rank waits for it.
Status NoProgress(uint32_t me, int64_t idle_ms, const std::vector<bool>& waiting);

}  // namespace plexus::algos
