// What the host gives every backend: the plexus_host_v1 table (logger,
// configuration, out-of-band exchange over the rendezvous store, local
// address). One HostServices lives as long as the backend it was given to.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plexus/backend.h"
#include "plexus/rendezvous_store.hpp"

// One communicator's out-of-band channel: the store, a key prefix unique to
// the communicator, and a call counter that keeps successive exchanges apart.
// Owned by the host; valid during comm_create (or comm_split).
struct plexus_oob {
  plexus::RendezvousStore* store;  // not owned
  std::string prefix;              // "<communicator name>/oob"
  uint32_t rank;                   // in the communicator being made
  uint32_t size;
  uint64_t calls = 0;
  // A group's ranks in the job, by group rank (members[rank] is this
  // process); empty for a communicator over the whole job. Each part is
  // written under its writer's own job rank (store::RankKey): the store
  // takes it from that rank's connection only.
  std::vector<uint32_t> members;

  uint32_t JobRank(uint32_t r) const { return members.empty() ? r : members[r]; }
  // "rank 2" or, in a group, "rank 2 (job rank 5)".
  std::string RankName(uint32_t r) const {
    std::string s = "rank " + std::to_string(r);
    if (!members.empty()) s += " (job rank " + std::to_string(members[r]) + ")";
    return s;
  }
};

namespace plexus {

class HostServices {
 public:
  // overrides: configuration keys that win over the environment.
  HostServices(std::string backend_name, std::string local_address,
               std::map<std::string, std::string> overrides);
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;

  const plexus_host_v1* table() const { return &table_; }

  // The last error, warning or info line the backend logged (even below the
  // log threshold), so a failed init can say why. Thread-safe.
  // The last warning or error the backend logged (or the host noted), if it
  // was at max_level or worse; "" otherwise.
  std::string LastProblem(int32_t max_level = PLEXUS_LOG_WARN) const;
  void NoteProblem(const std::string& message);

 private:
  static void Log(void* ctx, int32_t level, const char* message);
  static int64_t GetConfig(void* ctx, const char* key, char* buf, size_t len);
  static int32_t OobAllgather(void* ctx, plexus_oob* oob, const void* in, void* out,
                              uint64_t bytes_per_rank, int64_t timeout_ms);
  static int32_t OobBroadcast(void* ctx, plexus_oob* oob, void* buf, uint64_t bytes, uint32_t root,
                              int64_t timeout_ms);

  std::string backend_name_;
  std::string local_address_;
  std::map<std::string, std::string> overrides_;
  plexus_host_v1 table_{};
  mutable std::mutex problem_mutex_;
  std::string last_problem_;
  int32_t last_problem_level_ = PLEXUS_LOG_ERROR;
};

}  // namespace plexus
