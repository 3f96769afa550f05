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
  kOneHostShm,         // the queue's one-host shared memory (one_host_shm.hpp); reduce_scatter
                       // and allgather go through it too
};

// The body of call (any collective but send and recv) on a communicator of
// `size` ranks: allreduce by `allreduce`, allgather and reduce_scatter
// through the one-host shared memory when `allreduce` is kOneHostShm,
// allreduce_coalesced packed into one allreduce by `allreduce`, and every
// other the list's algorithm (algos::Algorithm<code>). A collective of
// counts only keeps its buffers and nothing else in the closure, so
// std::function holds it in place (no allocation per post); one with
// arrays copies them here, since the caller's are borrowed for the post
// only.
OpBody AlgosBody(const Call& call, uint32_t size, AllreduceAlgo allreduce);

// Posts a checked call on queue: send and recv as messages, a zero-count
// collective as an operation that completes in its place without the peers
// (the ABI allows it; a barrier, always of count 0, does synchronise; the
// v-collectives, whose count is not the same on every rank, never skip),
// any other collective with AlgosBody; allreduce, allreduce_coalesced,
// reduce_scatter and allgather with kOneHostShm whenever the queue's
// transport has a one-host segment (whatever `allreduce` says). A backend's whole B::Post, once it
// has chosen how to all-reduce (by kit::CallBytes(call), which for
// allreduce_coalesced is the packed vector's size).
int32_t PostAlgos(OpQueue& queue, const Call& call, AllreduceAlgo allreduce,
                  plexus_request** req_out);

}  // namespace plexus::kit
