// The roll call: as a job starts, before any communicator exists, every rank
// says through the rendezvous store who it is, and waits until every rank
// has. Launches that cannot work then fail at once on the ranks that can
// tell, naming the problem, instead of a timeout on some key later: ranks
// started with different world sizes or different PLEXUS_BACKEND values, and a
// rank that never comes ("rank 2 never joined", not "waiting for key
// 'plexus/rank/2/plexus/0/oob/0/ag'").
//
// Two processes claiming one rank are told apart before this, by the store:
// each rank's connection claims the identity "rank/R" (store_protocol.hpp),
// and the second claimant is refused, naming the first. Only that one fails:
// a process that is not part of the job (a stray, a second job pointed at the
// same store with the same secret) cannot end the job by claiming a rank that
// is taken. Each rank's card lives under its own "plexus/rank/R/", which only
// that rank's connection may write.
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
// automatic_secret: the job's secret is the automatic one of a job on one host
// (job_secret.hpp), which a rank on another host cannot have: the message for
// ranks that never joined then says so.
Status RollCall(const LaunchInfo& launch, RendezvousStore& store, std::chrono::milliseconds timeout,
                bool automatic_secret = false);

// "host a, pid 123": this process, as the roll call and the store's identity
// claims show it to others.
std::string RollCallLabel();

// Which nodes the given ranks (of the job) run on, from their roll-call
// cards, for error messages: " (node 1)" or " (2 and 3 on node 1, 5 on node
// 2)". "" when the cards name no node (a job on one host, or a launcher that
// sets no GROUP_RANK) or cannot all be read within `wait` in all. BLOCKS up
// to `wait`; never fails.
std::string RankNodes(RendezvousStore& store, const std::vector<uint32_t>& ranks,
                      std::chrono::milliseconds wait);

}  // namespace plexus
