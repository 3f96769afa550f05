// Making a communicator over some of a job's ranks: what split(), group(),
// shrink() and grow() share (comm_split.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm_state.hpp"
#include "plexus/status.hpp"

namespace plexus::detail {

// What each rank says about itself before a group is made.
struct SplitEntry {
  uint32_t color;
  uint32_t key;
  uint64_t host;       // where it runs: ranks with the same value share a host
  uint64_t list_hash;  // group(): its list, to find ranks given another one
};
static_assert(sizeof(SplitEntry) == 24);

// Makes this rank's group from every rank's entry (all[r]: rank r of p's).
// *out is left empty for a rank that joins none. Collective over p, or with
// survivors over the group's ranks alone: then never through p's backend
// communicator (shrink: it is broken; grow: p stands for ranks that have
// none together yet), and nothing waits for the ranks outside.
// backend: the group's, or null for p's. base: the group's store prefix.
Status MakeGroup(CommState& p, const std::vector<SplitEntry>& all, const std::string& base,
                 std::shared_ptr<Backend> backend, std::shared_ptr<CommState>* out,
                 bool survivors = false);

}  // namespace plexus::detail
