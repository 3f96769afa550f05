// Per-rank numbers that decide plexus-bench's verdict (wrong elements, "can
// rank 0 write the JSON file"), gathered to rank 0 through the job's
// rendezvous store: never through the backend under test, whose wrong sum
// would hide its own wrong results (or, without a uint64 sum or allgather,
// leave rank 0 counting only its own).
//
// Collective: every rank calls Gather/Broadcast in the same order. Without a
// rendezvous store (plain mpirun, no MASTER_ADDR) it falls back to the
// backend's collectives and says so once on rank 0 (trusted() is false).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "plexus/plexus.hpp"

namespace plexus {
struct Job;
}

namespace plexus::bench {

class RankTally {
 public:
  explicit RankTally(Communicator& comm);

  // Every rank's value, indexed by rank, on rank 0; {local} on other ranks.
  std::vector<uint64_t> Gather(uint64_t local);
  // Rank 0's value on every rank.
  uint64_t Broadcast(uint64_t value_on_rank0);
  bool trusted() const { return job_ != nullptr; }

 private:
  std::string Key(uint64_t seq, uint32_t rank) const;

  Communicator& comm_;
  std::shared_ptr<Job> job_;  // null: no store, use the backend
  std::chrono::milliseconds timeout_;
  uint64_t seq_ = 0;
};

}  // namespace plexus::bench
