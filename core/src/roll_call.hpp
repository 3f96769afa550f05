// The roll call: as a job starts, before any communicator exists, every rank
// says through the rendezvous store who it is, and waits until every rank
// has. Launches that cannot work then fail at once on the ranks that can
// tell, naming the problem, instead of a timeout on some key later: two
// processes claiming one rank, ranks started with different world sizes or
// different PLEXUS_BACKEND values, and a rank that never comes ("rank 2 never
// joined", not "waiting for key 'plexus/0/oob/0/2'").
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/launch_env.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/status.hpp"

namespace plexus {

// BLOCKS until every rank of launch.size has answered, or timeout.
Status RollCall(const LaunchInfo& launch, RendezvousStore& store,
                std::chrono::milliseconds timeout);

// Which nodes the given ranks (of the job) run on, from their roll-call
// cards, for error messages: " (node 1)" or " (2 and 3 on node 1, 5 on node
// 2)". "" when the cards name no node (a job on one host, or a launcher that
// sets no GROUP_RANK) or cannot all be read within `wait` in all. BLOCKS up
// to `wait`; never fails.
std::string RankNodes(RendezvousStore& store, const std::vector<uint32_t>& ranks,
                      std::chrono::milliseconds wait);

}  // namespace plexus
