// One operation in words, for error messages and logs.
#pragma once

#include <string>

#include "plexus/algos/transport.hpp"

namespace plexus::algos {

// "allreduce(seq 3, count 10, float32, sum)", "broadcast(seq 4, count 8,
// int8, root 2)", "send(seq 0, count 5, float64, from rank 1)",
// "alltoallv(seq 5, int32)", "allgatherv(seq 6, total count 12, int32)".
std::string DescribeOp(const OpSignature& sig);

}  // namespace plexus::algos
