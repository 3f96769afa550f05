// The stall report: when a collective times out, which ranks was it waiting for?
//
// A backend can only say which peer sent nothing to this rank; the rank that
// stopped making progress (frozen by SIGSTOP, stuck in a loop outside Plexus,
// or never posting this collective) may be further away, and ranks that
// posted different collectives may simply wait for each other with nothing on
// the wire (a reduce with root 0 on one rank and root 1 on the others). So, on
// a timeout, every rank that timed out marks "I reached collective #seq, and
// posted it as <fingerprint>" in the rendezvous store, waits a short grace for
// the others' marks, and names the ranks that never marked it (they did not
// reach it, or stopped) and those that posted something else. It also leaves
// one job-wide line per rank ("plexus/rank/<rank>/stalled") that plexus-run reads
// to blame the rank that stopped, not merely the first one to exit.
//
// Costs nothing until a timeout; after one, at most the grace (see .cpp)
// plus a few store round trips.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plexus/rendezvous_store.hpp"
#include "plexus/work.hpp"

namespace plexus::detail {

struct CommState;

// Marks collective `op` as reached (and failed) by this rank, so that ranks
// timing out in it do not blame this one: for failures other than a timeout,
// e.g. a peer's failure relayed by the backend. Returns a sentence naming
// ranks that posted a different collective, or else ranks that have not
// reached it which `error` does not name already, if the marks say so within
// a moment (window; 0: the default, 300 ms); else "". Never throws; BLOCKS up
// to about the window plus the store's round trips.
std::string MarkReached(CommState& comm, const PostedOp& op, const std::string& error,
                        std::chrono::milliseconds window = std::chrono::milliseconds(0));

// Marks collective `op` as timed out on this rank and returns a sentence
// naming the ranks that have not marked it and those that posted a different
// collective, e.g. "rank 1 has not reached allreduce(#3, ...) on plexus/0 or
// stopped making progress ...; rank 2 reached it too", or "" when the store
// cannot tell (world size 1, no rendezvous store, store unreachable). Never
// throws. BLOCKS up to the grace period plus the store's round trips.
std::string ReportStall(CommState& comm, const PostedOp& op);

// ReportStall's marks without its wait: the line plexus-run --elastic reads
// to take out the ranks this one waited for. Never throws; a few store
// round trips.
void MarkStalled(CommState& comm, const PostedOp& op);

// For plexus-run, once the ranks are gone: one line per rank of the job that
// timed out in a collective ("" for the others),
//   "<communicator> <seq> <collective> <rank it waited for> ...",
// the ranks waited for being those that never marked that collective (nor
// the next one, which a rank that completed it would have reached, nor the
// one before, where a rank that failed is stuck waiting too).
std::vector<std::string> StallLines(RendezvousStore& store, uint32_t world_size);

// For plexus-run: when ranks that timed out posted different collectives,
// "ranks 1, 2 posted reduce(#0, count 8, float32, sum, root 1), rank 0 posted
// reduce(#0, ..., root 0) on plexus/0"; else "". list_ranks, when given,
// writes each group of ranks (ascending) instead of RankList, e.g. with their
// nodes: "ranks 1 (node 0, host a) and 2 (node 1, host b)".
using RankLister = std::function<std::string(const std::vector<uint32_t>&)>;
std::string StallMismatch(RendezvousStore& store, uint32_t world_size,
                          const RankLister& list_ranks = {});

}  // namespace plexus::detail
