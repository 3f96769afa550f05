#include "rank_environment.hpp"

#include <string_view>

namespace plexus::run {
namespace {

constexpr VariableDoc kVariables[] = {
    {"RANK", "this rank, 0..WORLD_SIZE-1: --node-rank * -n + LOCAL_RANK"},
    {"WORLD_SIZE", "number of ranks in the job: --nnodes * -n"},
    {"LOCAL_RANK", "rank on this host, 0..LOCAL_WORLD_SIZE-1 (equal to RANK on one host)"},
    {"LOCAL_WORLD_SIZE", "ranks on this host: -n (equal to WORLD_SIZE on one host)"},
    {"GROUP_RANK", "this host's node rank: --node-rank (0 on one host), as torchrun sets it"},
    {"MASTER_ADDR", "address of the rendezvous store (--master-addr)"},
    {"MASTER_PORT",
     "a free port there for torch.distributed's env:// rendezvous, whose rank 0 hosts a store "
     "of its own (as under torchrun); not the rendezvous store's, which is PLEXUS_MASTER_PORT"},
    {"PLEXUS_RANK", "same as RANK"},
    {"PLEXUS_WORLD_SIZE", "same as WORLD_SIZE"},
    {"PLEXUS_LOCAL_RANK", "same as LOCAL_RANK"},
    {"PLEXUS_LOCAL_WORLD_SIZE", "same as LOCAL_WORLD_SIZE"},
    {"PLEXUS_GROUP_RANK", "same as GROUP_RANK"},
    {"PLEXUS_MASTER_ADDR", "same as MASTER_ADDR"},
    {"PLEXUS_MASTER_PORT", "port of the rendezvous store (Plexus prefers it to MASTER_PORT)"},
    {"PLEXUS_STORE_HOSTED",
     "1: plexus-run serves the store, ranks only connect; 0 with --no-store (rank 0 hosts it)"},
    {"PLEXUS_TOKEN",
     "job secret authenticating store and TCP peers: 64 hex digits from getrandom(), "
     "or the caller's PLEXUS_TOKEN if set and non-empty, or what --token-file holds"},
    {"PLEXUS_RESTART_COUNT",
     "how many times the ranks were started again after a failure (--max-restarts): 0 the "
     "first time"},
    {"TORCHELASTIC_RESTART_COUNT", "same as PLEXUS_RESTART_COUNT, as torchrun sets it"},
};

bool IsOurs(std::string_view entry) {
  size_t eq = entry.find('=');
  std::string_view name = entry.substr(0, eq);
  for (const VariableDoc& v : kVariables) {
    if (name == v.name) return true;
  }
  return false;
}

}  // namespace

std::span<const VariableDoc> RankVariables() {
  return kVariables;
}

std::vector<std::string> BuildRankEnvironment(const std::vector<std::string>& base,
                                              const JobInfo& job, int rank) {
  std::vector<std::string> env;
  env.reserve(base.size() + std::size(kVariables));
  for (const std::string& entry : base) {
    // Dropping stale copies matters: a nested launch or a user's RANK=7 in the
    // shell must not leave two definitions for getenv() to pick from.
    if (!IsOurs(entry)) env.push_back(entry);
  }
  const int local_size = job.local_world_size > 0 ? job.local_world_size : job.world_size;
  const std::string r = std::to_string(job.node_rank * local_size + rank);
  const std::string n = std::to_string(job.world_size);
  const std::string lr = std::to_string(rank);
  const std::string ln = std::to_string(local_size);
  const std::string port = std::to_string(job.master_port);
  const std::string torch_port = std::to_string(job.torch_port ? job.torch_port : job.master_port);
  for (const char* prefix : {"", "PLEXUS_"}) {
    const std::string p = prefix;
    env.push_back(p + "RANK=" + r);
    env.push_back(p + "WORLD_SIZE=" + n);
    env.push_back(p + "LOCAL_RANK=" + lr);
    env.push_back(p + "LOCAL_WORLD_SIZE=" + ln);
    env.push_back(p + "GROUP_RANK=" + std::to_string(job.node_rank));
    env.push_back(p + "MASTER_ADDR=" + job.master_addr);
    env.push_back(p + "MASTER_PORT=" + (p.empty() ? torch_port : port));
  }
  env.push_back(std::string("PLEXUS_STORE_HOSTED=") + (job.store_hosted ? "1" : "0"));
  env.push_back("PLEXUS_TOKEN=" + job.token);
  env.push_back("PLEXUS_RESTART_COUNT=" + std::to_string(job.restart_count));
  env.push_back("TORCHELASTIC_RESTART_COUNT=" + std::to_string(job.restart_count));
  return env;
}

}  // namespace plexus::run
