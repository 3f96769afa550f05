// The process's membership in a job: launch information, the rendezvous
// store client and, on the rank that hosts it, the store server. Created by
// the first Communicator::from_env() and kept for the life of the process so
// that later communicators rendezvous through the same store.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "job_secret.hpp"
#include "plexus/launch_env.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/status.hpp"

namespace plexus {

struct Job {
  LaunchInfo launch;
  std::unique_ptr<TcpStoreServer> server;  // only on rank 0 when no launcher hosts the store
  std::unique_ptr<RendezvousStore> store;
  std::string local_address;  // this host's address towards the master ("" for one process)
  JobSecret secret;           // what the store and the backends authenticate with
  // False when the launcher named no rendezvous point (e.g. plain mpirun):
  // then `store` fails every call with a message that says what to set, and
  // only backends with their own bootstrap (MPI) can create communicators.
  bool has_rendezvous = true;
  std::atomic<uint64_t> next_comm{0};
};

// The process-wide Job, created on first use with the given timeout.
Status GetJob(std::chrono::milliseconds timeout, std::shared_ptr<Job>* out);

// A Job over a store the caller gives (Communicator::from_store): rank and
// size are the caller's; where each rank runs is exchanged through the store
// (keys under "plexus/rank/<rank>/"), which gives local_rank and local_size;
// this host's address is PLEXUS_SOCKET_IFNAME's, else the one towards
// MASTER_ADDR when that is set, else loopback (then every rank must be on
// this host). *token_config: the secret the communicator's backend is to
// authenticate with ("" to leave it to the environment), *secret_file: a
// private file rank 0 made for it and removes once every rank has joined
// (job_secret.hpp, ChooseStoreSecret). Collective over the ranks.
Status MakeStoreJob(std::unique_ptr<RendezvousStore> store, uint32_t rank, uint32_t size,
                    const std::string& name, std::chrono::milliseconds timeout,
                    std::shared_ptr<Job>* out, std::string* token_config,
                    std::string* secret_file);

// Which host this process runs on, as a number ranks can compare: the host's
// name and its address towards the rendezvous (network-namespace "hosts"
// share a hostname but not an address).
uint64_t HostIdentity(const std::string& local_address);

// FNV-1a of bytes, continuing from h: a cheap fingerprint, not a defence.
inline uint64_t Fnv1a(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace plexus
