// Across hosts (--nnodes > 1): this node's launcher joins the others' for one
// start of the ranks (NodeGroup, node_group.hpp), and learns its place in it.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "node_group.hpp"
#include "options.hpp"
#include "plexus/rendezvous_store.hpp"
#include "rank_environment.hpp"

namespace plexus::run {

// How long launchers wait for each other to join: PLEXUS_TIMEOUT seconds
// (default 300), like every other wait of the job.
std::chrono::milliseconds JoinTimeout();

// Joins the other nodes' launchers for the start job->restart_count, before
// any rank starts; *start becomes the start node 0 runs (a late node joins
// node 0's). std::nullopt when this node is in it: *group joined (not yet
// started), job's world size, node rank and restart count those of the start.
// Otherwise plexus-run's exit code for this start: kExitRankFailed when the
// join failed (server, where hosted here, stopped), or for a node that came
// too late (--nnodes MIN:MAX) and sat the start out, kExitOk when the job
// finished without it, else kExitRankFailed with *sat_out set (join the next).
std::optional<int> JoinNodes(const Options& opts, TcpStoreServer* server, JobInfo* job, int* start,
                             bool* sat_out, std::unique_ptr<NodeGroup>* group);

}  // namespace plexus::run
