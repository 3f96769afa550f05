// The environment each rank is started with: the launcher's own environment,
// untouched, plus the variables that tell a rank who it is and where the
// rendezvous store is. Both the torchrun names (RANK, MASTER_ADDR, ...) and the
// PLEXUS_ ones are set, so a program finds them whichever it looks for first.
// Nothing else is added, removed or changed (NCCL_*, UCX_*, OMPI_* included).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace plexus::run {

struct JobInfo {
  int world_size = 0;        // ranks in the whole job
  int local_world_size = 0;  // ranks on this host (-n); 0: world_size (one host)
  int node_rank = 0;         // this host's node rank (--node-rank)
  std::string master_addr;
  uint16_t master_port = 0;
  // MASTER_PORT: where torch.distributed's env:// rendezvous meets (its rank 0
  // hosts a store there, as under torchrun), on master_addr; 0: master_port.
  uint16_t torch_port = 0;
  bool store_hosted = true;  // the launcher serves the store; ranks only connect
  std::string token;         // PLEXUS_TOKEN
  int restart_count = 0;     // PLEXUS_RESTART_COUNT: starts after the first (--max-restarts)
};

struct VariableDoc {
  const char* name;
  const char* meaning;
};

// Every variable BuildRankEnvironment sets, in the order --help lists them.
std::span<const VariableDoc> RankVariables();

// base holds "NAME=value" entries (the launcher's environ). Returns base with
// every RankVariables() entry replaced by the values of the rank-th rank on
// this host: RANK = node_rank * local_world_size + rank, LOCAL_RANK = rank
// (on one host both are rank).
std::vector<std::string> BuildRankEnvironment(const std::vector<std::string>& base,
                                              const JobInfo& job, int rank);

}  // namespace plexus::run
