// One rank's state for the whole run: the job (launch info and store), the
// plugin, the exchange, and the shared communicator most checks run on.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "exchange.hpp"
#include "job.hpp"
#include "options.hpp"
#include "plugin.hpp"

namespace plexus::conformance {

class Session {
 public:
  Session(const Options& options, std::shared_ptr<Job> job, std::unique_ptr<Plugin> plugin);
  ~Session();  // destroys the shared communicator (unless leaked); the plugin finalizes

  const Options& options() const { return options_; }
  Plugin& plugin() { return *plugin_; }
  Exchange& exchange() { return exchange_; }
  const LaunchInfo& launch() const { return job_->launch; }
  uint32_t rank() const { return job_->launch.rank; }
  uint32_t size() const { return job_->launch.size; }

  // The capabilities every rank builds its check list from: rank 0's.
  const plexus_capabilities& plan_caps() const { return plan_caps_; }
  void set_plan_caps(const plexus_capabilities& caps) { plan_caps_ = caps; }

  // Collective: every rank calls it with the same purpose, in the same order.
  // The name is "conformance/<purpose>/<n>", unique within the job.
  int32_t CreateComm(const std::string& purpose, int64_t timeout_ms, plexus_comm** comm,
                     std::string* error, std::string* name = nullptr);
  // comm_destroy, or nothing when a request of comm was leaked (the backend
  // may still be working on it; destroying would pull the memory from under it).
  void DestroyComm(plexus_comm* comm, bool leaked_request);

  // The shared communicator (timeout --timeout). Renew replaces it on every
  // rank (collective); the old one is destroyed unless it was marked leaked.
  plexus_comm* main_comm() const { return main_comm_; }
  void MarkMainLeaked() { main_leaked_ = true; }
  int32_t RenewMainComm(std::string* error);

  // A rank that left on purpose during check seq (the dead-peer checks):
  // not waited for at the end, and its result of every later check is a
  // SKIP that rank 0 fills in (exchange.hpp).
  void MarkRankGone(uint32_t rank, uint64_t seq) {
    gone_.at(rank) = true;
    exchange_.MarkGone(rank, seq);
  }
  bool gone(uint32_t rank) const { return gone_.at(rank); }
  bool any_gone() const;

  // The job's rendezvous store, for the out-of-band channels of groups.
  RendezvousStore* store() const { return job_->store.get(); }

 private:
  const Options& options_;
  std::shared_ptr<Job> job_;
  std::unique_ptr<Plugin> plugin_;
  Exchange exchange_;
  plexus_capabilities plan_caps_{};
  plexus_comm* main_comm_ = nullptr;
  bool main_leaked_ = false;
  uint64_t next_comm_ = 0;
  std::vector<bool> gone_;
};

}  // namespace plexus::conformance
