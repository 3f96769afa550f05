// The process's membership in a job: launch information, the rendezvous
// store client and, on the rank that hosts it, the store server. Created by
// the first Communicator::from_env() and kept for the life of the process so
// that later communicators rendezvous through the same store.
#pragma once

#include <atomic>
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

}  // namespace plexus
