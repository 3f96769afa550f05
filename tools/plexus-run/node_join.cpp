// Across hosts: joining the other nodes' launchers for a start of the ranks.
#include "node_join.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "launcher.hpp"
#include "plexus/settings/environment.hpp"

namespace plexus::run {
namespace {

// The NodeGroup of this node for the start job.restart_count: its options,
// and how long a node may go unheard before it is lost.
NodeGroupConfig GroupConfig(const Options& opts, const JobInfo& job) {
  NodeGroupConfig gc;
  gc.nnodes = opts.nnodes;
  gc.node_rank = opts.node_rank;
  gc.nproc = opts.nproc;
  gc.master_addr = opts.master_addr;
  gc.master_port = job.master_port;
  gc.join_timeout = JoinTimeout();
  gc.start = job.restart_count;
  gc.min_nodes = opts.min_nodes;
  gc.last_call = opts.last_call;
  // A node is lost after as much silence as the ranks' collectives
  // tolerate (PLEXUS_TIMEOUT) and 5 s more, unless --node-timeout says
  // otherwise. Not less: the beats cross the same network as the ranks'
  // traffic, and a launcher that gave up on a node sooner than the ranks
  // give up on each other would end a job that TCP carries through a short
  // outage (tests/net 'blip'). A little more: ranks that time out in a
  // collective say which rank and which collective they waited for, a
  // sharper report than "node 1 stopped responding", and need a moment
  // to write it before their launcher stops them. Once the job is failing,
  // NodeGroup takes at most 5 s (kLostOnceFailing), so that a launcher that
  // was killed does not hold up the others' exit.
  gc.lost_after =
      opts.node_timeout.count() > 0 ? opts.node_timeout : gc.join_timeout + std::chrono::seconds(5);
  return gc;
}

}  // namespace

std::chrono::milliseconds JoinTimeout() {
  double seconds = 300;
  std::string why;  // a bad value is the ranks' error to report; wait the default
  if (!plexus::settings::ReadNumber(plexus::settings::Id::kTimeout, &seconds, &why)) seconds = 300;
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

std::optional<int> JoinNodes(const Options& opts, TcpStoreServer* server, JobInfo* job, int* start,
                             bool* sat_out, std::unique_ptr<NodeGroup>* out) {
  std::unique_ptr<NodeGroup> group;
  const NodeGroupConfig gc = GroupConfig(opts, *job);
  std::string error;
  if (!NodeGroup::Join(gc, &group, &error)) {
    std::fprintf(stderr, "plexus-run: node %d: %s\n", opts.node_rank, error.c_str());
    if (server) server->Stop();
    return kExitRankFailed;
  }
  *start = group->start();
  const std::vector<int> members = group->members();
  std::string list;
  for (int m : members) list += (list.empty() ? "" : ", ") + std::to_string(m);
  if (!group->is_member()) {
    // Too late for this start (--nnodes MIN:MAX): wait for the next.
    std::fprintf(stderr,
                 "plexus-run: node %d: the job runs on nodes %s (start %d) without this node; "
                 "it joins at the next restart\n",
                 opts.node_rank, list.c_str(), group->start());
    if (group->WaitOutStart()) {
      std::fprintf(stderr, "plexus-run: node %d: the job finished without this node\n",
                   opts.node_rank);
      return kExitOk;
    }
    *sat_out = true;
    return kExitRankFailed;
  }
  // The ranks of this start: the members' nodes in order, nproc each.
  job->restart_count = group->start();
  job->world_size = int(members.size()) * opts.nproc;
  job->node_rank = int(std::find(members.begin(), members.end(), opts.node_rank) - members.begin());
  if (int(members.size()) < opts.nnodes) {
    std::fprintf(stderr, "plexus-run: node %d: start %d on %zu of %d nodes (%s): %d ranks\n",
                 opts.node_rank, group->start(), members.size(), opts.nnodes, list.c_str(),
                 job->world_size);
  }
  *out = std::move(group);
  return std::nullopt;
}

}  // namespace plexus::run
