#include "plexus/launch_env.hpp"

#include "slurm_env.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "plexus/settings/environment.hpp"
#include "slurm_env.hpp"

namespace plexus {
namespace {

struct Scheme {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;  // may be nullptr
  const char* local_size;  // may be nullptr
};

constexpr Scheme kSchemes[] = {
    {"PLEXUS_* variables", "PLEXUS_RANK", "PLEXUS_WORLD_SIZE", "PLEXUS_LOCAL_RANK",
     "PLEXUS_LOCAL_WORLD_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
    {"PMI", "PMI_RANK", "PMI_SIZE", nullptr, nullptr},
};

Status ParseUnsigned(const EnvLookup& env, const char* name, uint64_t max, uint64_t* out) {
  const auto text = env(name);
  if (!text) return Status::InvalidArgument(std::string(name) + " is not set");
  uint64_t value = 0;
  const char* end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, value);
  if (text->empty() || ec != std::errc() || ptr != end || value > max) {
    return Status::InvalidArgument(std::string(name) + "='" + *text +
                                   "' is not a whole number from 0 to " + std::to_string(max));
  }
  *out = value;
  return Status::Ok();
}

// Under srun: the tasks on this node from SLURM_STEP_TASKS_PER_NODE (or
// SLURM_TASKS_PER_NODE) at SLURM_NODEID, which Slurm sets for every step
// (SLURM_NTASKS_PER_NODE only with --ntasks-per-node); and, where the user
// named no rendezvous point, the first host of the step's node list with a
// port derived from the job and step ids (slurm_env.hpp).
Status ApplySlurm(const EnvLookup& env, LaunchInfo* info) {
  // Slurm's batch step (the job script) and an salloc shell have the job's
  // SLURM_NTASKS but no step id: one process stands for them all, and the
  // other ranks will never come. Only srun starts the tasks.
  if (env("SLURM_JOB_ID") && !env("SLURM_STEP_ID") && !env("SLURM_STEPID") && info->size > 1) {
    return Status::InvalidUsage(
        "rank " + std::to_string(info->rank) + " of " + std::to_string(info->size) +
        " (from Slurm): this process runs in Slurm job " + *env("SLURM_JOB_ID") +
        " but not in a step that srun started (no SLURM_STEP_ID: the job script itself, or an "
        "salloc shell), so the other " +
        std::to_string(info->size - 1) +
        " rank(s) that SLURM_NTASKS=" + std::to_string(info->size) +
        " counts will never start. Start the program with srun: `srun PROG` (`srun "
        "--mpi=pmix PROG` for the mpi backend); or, for one process alone, "
        "PLEXUS_WORLD_SIZE=1 PLEXUS_RANK=0");
  }
  const char* per_node_var =
      env("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  if (auto per_node = env(per_node_var); per_node && env("SLURM_NODEID")) {
    std::vector<uint32_t> counts;
    Status st = slurm::ParseTasksPerNode(*per_node, &counts);
    if (!st.ok()) return Status::InvalidArgument(std::string(per_node_var) + ": " + st.message());
    uint64_t node = 0;
    st = ParseUnsigned(env, "SLURM_NODEID", UINT32_MAX, &node);
    if (!st.ok()) return st;
    if (node >= counts.size()) {
      return Status::InvalidArgument("SLURM_NODEID=" + std::to_string(node) + " is not a node of " +
                                     per_node_var + "='" + *per_node + "' (" +
                                     std::to_string(counts.size()) + " nodes)");
    }
    info->local_size = counts[node];
    info->node_rank = uint32_t(node);
    info->node_count = uint32_t(counts.size());
  }
  const bool named_master = env("PLEXUS_MASTER_ADDR") || env("MASTER_ADDR");
  const bool named_port = env("PLEXUS_MASTER_PORT") || env("MASTER_PORT");
  if (!named_master) {
    const char* list_var =
        env("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
    if (auto list = env(list_var)) {
      std::vector<std::string> hosts;
      Status st = slurm::ExpandNodeList(*list, &hosts);
      if (!st.ok()) return Status::InvalidArgument(std::string(list_var) + ": " + st.message());
      if (!hosts.empty()) info->master_addr = hosts.front();
    }
  }
  if (!named_port && env("SLURM_JOB_ID") && env("SLURM_STEP_ID")) {
    uint64_t job = 0, step = 0;
    Status st = ParseUnsigned(env, "SLURM_JOB_ID", UINT64_MAX >> 8, &job);
    if (st.ok()) st = ParseUnsigned(env, "SLURM_STEP_ID", UINT64_MAX >> 8, &step);
    if (!st.ok()) return st;
    info->master_port = slurm::StepPort(job, step);
  }
  return Status::Ok();
}

}  // namespace

EnvLookup ProcessEnv() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = settings::RawByName(name);
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

Status DiscoverLaunch(const EnvLookup& env, LaunchInfo* info) {
  *info = LaunchInfo{};
  info->source = "no launcher (single process)";
  for (const Scheme& s : kSchemes) {
    const bool has_rank = env(s.rank).has_value();
    const bool has_size = env(s.size).has_value();
    if (!has_rank && !has_size) continue;
    if (has_rank != has_size) {
      // An salloc shell has the job's SLURM_NTASKS but no SLURM_PROCID: only
      // srun starts tasks (ApplySlurm says the same of the batch step).
      if (std::string(s.source) == "Slurm" && has_size && env("SLURM_JOB_ID") &&
          !env("SLURM_STEP_ID") && !env("SLURM_STEPID")) {
        return Status::InvalidUsage(
            "this process runs in Slurm job " + *env("SLURM_JOB_ID") +
            " but not in a step that srun started (SLURM_NTASKS is set, SLURM_PROCID is not: an "
            "salloc shell?). Start the program with srun: `srun PROG` (`srun --mpi=pmix PROG` "
            "for the mpi backend)");
      }
      return Status::InvalidArgument(std::string(has_rank ? s.rank : s.size) + " is set but " +
                                     (has_rank ? s.size : s.rank) + " is not (" + s.source + ")");
    }
    uint64_t rank = 0, size = 0;
    Status st = ParseUnsigned(env, s.size, UINT32_MAX, &size);
    if (st.ok()) st = ParseUnsigned(env, s.rank, UINT32_MAX, &rank);
    if (!st.ok()) return st;
    if (size == 0 || rank >= size) {
      return Status::InvalidArgument(std::string(s.rank) + "=" + std::to_string(rank) +
                                     " is not below " + s.size + "=" + std::to_string(size));
    }
    info->rank = uint32_t(rank);
    info->size = uint32_t(size);
    info->local_rank = info->rank;
    info->local_size = info->size;
    if (s.local_rank && env(s.local_rank)) {
      uint64_t v = 0;
      if (ParseUnsigned(env, s.local_rank, UINT32_MAX, &v).ok()) info->local_rank = uint32_t(v);
    }
    if (s.local_size && env(s.local_size)) {
      uint64_t v = 0;
      // SLURM_NTASKS_PER_NODE is set only with --ntasks-per-node; under
      // Slurm, ApplySlurm reads the step's own count per node instead.
      if (ParseUnsigned(env, s.local_size, UINT32_MAX, &v).ok() && v > 0) {
        info->local_size = uint32_t(v);
      }
    }
    info->source = s.source;
    break;
  }

  if (info->source == std::string("Slurm")) {
    Status st = ApplySlurm(env, info);
    if (!st.ok()) return st;
  }

  const bool plexus_master = env("PLEXUS_MASTER_ADDR").has_value();
  const char* addr_var = plexus_master ? "PLEXUS_MASTER_ADDR" : "MASTER_ADDR";
  const char* port_var = env("PLEXUS_MASTER_PORT") ? "PLEXUS_MASTER_PORT" : "MASTER_PORT";
  if (auto addr = env(addr_var)) info->master_addr = *addr;
  if (env(port_var)) {
    uint64_t port = 0;
    Status st = ParseUnsigned(env, port_var, 65535, &port);
    if (!st.ok()) return st;
    // torchrun's agent serves its own TCPStore on MASTER_PORT; ours goes next to it.
    if (std::string(port_var) == "MASTER_PORT" && env("TORCHELASTIC_RUN_ID")) ++port;
    info->master_port = uint16_t(port);
  }
  if (auto hosted = env("PLEXUS_STORE_HOSTED")) info->store_hosted = (*hosted == "1");
  return Status::Ok();
}

bool HasRendezvous(const LaunchInfo& info) {
  return !info.master_addr.empty() && info.master_port != 0;
}

std::string NoRendezvousMessage(const LaunchInfo& info) {
  if (info.source == "Slurm") {
    return "rank " + std::to_string(info.rank) + " of " + std::to_string(info.size) +
           " (from Slurm) has no rendezvous point: Slurm gave no node list or job and step ids " +
           "(SLURM_STEP_NODELIST, SLURM_JOB_ID, SLURM_STEP_ID; is this an srun step?); set " +
           "MASTER_ADDR and MASTER_PORT";
  }
  return "rank " + std::to_string(info.rank) + " of " + std::to_string(info.size) + " (from " +
         info.source + ") has no rendezvous point: set MASTER_ADDR and MASTER_PORT (or " +
         "PLEXUS_MASTER_ADDR/PLEXUS_MASTER_PORT), or launch with plexus-run";
}

Status InterfaceAddress(const std::string& ifname, std::string* address) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return Status::System(std::string("PLEXUS_SOCKET_IFNAME: getifaddrs: ") + std::strerror(errno));
  }
  // Every interface with what it has, in the kernel's order: "lo (127.0.0.1)".
  std::vector<std::pair<std::string, std::string>> seen;
  bool exists = false;
  std::string found;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr) continue;
    const std::string name = a->ifa_name;
    std::string ipv4;
    if (a->ifa_addr != nullptr && a->ifa_addr->sa_family == AF_INET) {
      char text[INET_ADDRSTRLEN] = {};
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) ipv4 = text;
    }
    if (name == ifname) {
      exists = true;
      if (found.empty()) found = ipv4;
    }
    auto it =
        std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return s.first == name; });
    if (it == seen.end()) {
      seen.emplace_back(name, ipv4);
    } else if (it->second.empty()) {
      it->second = ipv4;
    }
  }
  freeifaddrs(list);
  if (!found.empty()) {
    *address = found;
    return Status::Ok();
  }
  std::string there;
  for (const auto& [name, ipv4] : seen) {
    if (!there.empty()) there += ", ";
    there += name + (ipv4.empty() ? " (no IPv4)" : " (" + ipv4 + ")");
  }
  if (there.empty()) there = "none";
  return Status::InvalidArgument(
      "PLEXUS_SOCKET_IFNAME='" + ifname +
      "': " + (exists ? "that interface has no IPv4 address" : "there is no such interface here") +
      "; the interfaces here are: " + there);
}

}  // namespace plexus
