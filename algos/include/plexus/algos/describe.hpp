// One operation in words, for error messages and logs.
#pragma once

#include <string>

#include "plexus/algos/transport.hpp"

namespace plexus::algos {

// "allreduce(seq 3, count 10, float32, sum)", "broadcast(seq 4, count 8,
// int8, root 2)", "send(seq 0, count 5, float64, from rank 1)".
std::string DescribeOp(const OpSignature& sig);

}  // namespace plexus::algos
