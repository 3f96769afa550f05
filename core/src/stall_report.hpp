// The stall report: when a collective times out, which ranks was it waiting for?
//
// A backend can only say which peer sent nothing to this rank; the rank that
// stopped making progress (frozen by SIGSTOP, stuck in a loop outside Plexus,
// or never posting this collective) may be further away. So, on a timeout,
// every rank that timed out marks "I reached collective #seq and timed out" in
// the rendezvous store, waits a short grace for the others' marks, and names
// the ranks that never marked it: those did not reach the collective or
// stopped. It also leaves one job-wide line per rank
// ("plexus/stalled/<rank>") that plexus-run reads to blame the rank that
// stopped, not merely the first one to exit.
//
// Costs nothing until a timeout; after one, at most the grace (see .cpp)
// plus a few store round trips.
#pragma once

#include <cstdint>
#include <string>

namespace plexus::detail {

struct CommState;

// Job-wide key of rank's stall line; its value is
//   "<communicator> <seq> <what> <rank waited for> ..." (space-separated).
std::string StallKey(uint32_t rank);

// Marks collective #seq as reached (and failed) by this rank, so that ranks
// timing out in it do not blame this one: for failures other than a timeout,
// e.g. a peer's failure relayed by the backend. Never throws; BLOCKS up to 1 s.
void MarkReached(CommState& comm, uint64_t seq);

// Marks collective #seq (the seq-th collective posted on this communicator,
// counted from 1) as timed out on this rank and returns a sentence naming the
// ranks that have not marked it, e.g. "rank 1 did not reach it or stopped
// making progress; rank 2 timed out in it too", or "" when the store cannot
// tell (world size 1, no rendezvous store, store unreachable). Never throws.
// BLOCKS up to the grace period plus the store's round trips.
std::string ReportStall(CommState& comm, uint64_t seq, const char* what);

}  // namespace plexus::detail
