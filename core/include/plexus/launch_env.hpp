// Discovers this process's place in the job from the launcher's environment.
//
// Order (the first complete pair wins): PLEXUS_RANK/PLEXUS_WORLD_SIZE;
// torchrun's RANK/WORLD_SIZE; Open MPI's OMPI_COMM_WORLD_RANK/SIZE; Slurm's
// SLURM_PROCID/SLURM_NTASKS; PMI_RANK/PMI_SIZE. None at all means a single
// process (rank 0 of 1). The rendezvous point is PLEXUS_MASTER_ADDR/PORT,
// else MASTER_ADDR/MASTER_PORT (under torchrun, whose own store already holds
// MASTER_PORT, Plexus uses MASTER_PORT + 1).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "plexus/status.hpp"

namespace plexus {

struct LaunchInfo {
  uint32_t rank = 0;
  uint32_t size = 1;
  uint32_t local_rank = 0;
  uint32_t local_size = 1;
  std::string master_addr;    // empty when the launcher gave none
  uint16_t master_port = 0;   // 0 when the launcher gave none
  bool store_hosted = false;  // PLEXUS_STORE_HOSTED=1: a launcher hosts the store; only connect
  uint32_t node_rank = 0;     // this host's place among the job's hosts, where the launcher says (Slurm)
  uint32_t node_count = 0;    // the job's hosts, where the launcher says (Slurm); 0: not told
  std::string source;         // which launcher's variables were used, for messages
};

// Looks up one environment variable; std::nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const char*)>;

// The process environment (getenv).
EnvLookup ProcessEnv();

// Fills *info. Malformed or inconsistent values (a rank that is not a number,
// rank >= size, only one of a pair) are INVALID_ARGUMENT naming the variable.
// A missing rendezvous point is not an error here: a backend that brings its
// own bootstrap (MPI under mpirun) needs none; see HasRendezvous.
Status DiscoverLaunch(const EnvLookup& env, LaunchInfo* info);

// Whether the launcher named a rendezvous point (address and port).
bool HasRendezvous(const LaunchInfo& info);

// What to tell a user whose job needs a rendezvous point and has none.
std::string NoRendezvousMessage(const LaunchInfo& info);

// PLEXUS_SOCKET_IFNAME (like NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME): the
// name of the network interface whose IPv4 address this process's backends
// listen on and give to their peers, instead of the address that reaches the
// master. Fills *address with that interface's first IPv4 address. An
// interface that does not exist, or has no IPv4 address, is INVALID_ARGUMENT
// naming the interfaces there are (and their addresses).
Status InterfaceAddress(const std::string& ifname, std::string* address);

}  // namespace plexus
