// The plexus-algos algorithm that runs each collective, as an OpBody for
// OpQueue::Post: what a backend over a QueueTransport posts, once it has
// chosen how to all-reduce.
#pragma once

#include "plexus/kit/call.hpp"
#include "plexus/kit/op_queue.hpp"

namespace plexus::kit {

enum class AllreduceAlgo {
  kRing,               // bandwidth-optimal; large vectors
  kRecursiveDoubling,  // log2(size) whole-vector steps; small vectors
  kPairExchange,       // 2 ranks: one step, each reduces the whole vector
};

// The body of call (any collective but send and recv): allreduce by
// `allreduce`, broadcast and reduce by binomial trees, allgather and
// reduce_scatter by rings, alltoall pairwise, barrier by dissemination.
// The closure holds the buffers and nothing else, so std::function keeps it
// in place (no allocation per post).
OpBody AlgosBody(const Call& call, AllreduceAlgo allreduce);

// Posts a checked call on queue: send and recv as messages, a zero-count
// collective as an operation that completes in its place without the peers
// (the ABI allows it; a barrier, always of count 0, does synchronise), any
// other collective with AlgosBody. A backend's whole B::Post, once it has
// chosen how to all-reduce.
int32_t PostAlgos(OpQueue& queue, const Call& call, AllreduceAlgo allreduce,
                  plexus_request** req_out);

}  // namespace plexus::kit
