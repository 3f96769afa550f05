// Every call the suite makes into the plugin, recorded while it runs.
//
// Each function below calls the table's function pointer and returns what
// it returns, unchanged (the suite observes the raw plugin; see main.cpp).
// Around the call it records the call in flight with its arguments as a
// vendor wants to read them, e.g.
//   broadcast(buf=NULL, count 4, int32, root 0, placement NULL (host))
//   wait(req of allreduce #3 (count 1009, int32, sum), timeout 1000 ms)
// in this rank's record (rank_record.hpp), which the crash report and the
// watchdog print. Requests are named by the post that returned them, "#N"
// counting that collective's posts in the running check; communicators by
// the name the suite gave them.
//
// Every collective goes through post(), which takes an abi::Call and calls
// the slot of call.coll (abi::Invoke); its text is written from the list
// of collectives (plexus/abi/collectives.def): the slot's name and the
// arguments its traits say it takes. The other functions carry the ABI's
// slot names, so that a call reads like the ABI. Nothing else in the suite
// calls a plugin function pointer (the entry function aside, which
// checks_table traces itself).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "plexus/abi/call.hpp"
#include "plexus/backend.h"

namespace plexus::conformance {

class TracedCalls {
 public:
  // Does not take ownership of table, which must outlive this.
  explicit TracedCalls(const plexus_backend_v1* table) : table_(table) {}

  int32_t init(const plexus_host_v1* host, plexus_backend_ctx** ctx_out) const;
  void finalize(plexus_backend_ctx* ctx) const;
  int32_t get_capabilities(plexus_backend_ctx* ctx, plexus_capabilities* caps) const;
  // Names *comm_out after config->name when it succeeds.
  int32_t comm_create(plexus_backend_ctx* ctx, const plexus_comm_config_v1* config,
                      plexus_comm** comm_out, char* err, size_t err_len) const;
  void comm_destroy(plexus_comm* comm) const;
  int32_t comm_abort(plexus_comm* comm) const;
  size_t comm_last_error(plexus_comm* comm, char* buf, size_t len) const;

  // Posts call through the plugin's slot for call.coll (abi::Invoke) and
  // returns its status. The caller has checked that the slot is there: the
  // collectives of ABI 1.2 only when Plugin::HasCollective says so. The
  // per-rank arrays (allgatherv, alltoallv) are printed with the
  // communicator's size as their length (as far as the suite made the
  // communicator).
  int32_t post(plexus_comm* comm, const abi::Call& call, plexus_request** req_out) const;

  // ABI 1.2: only when Plugin::has_comm_split says the slot is there.
  // Names *comm_out after config->name when it succeeds with a communicator.
  int32_t comm_split(plexus_comm* comm, uint32_t color, uint32_t key,
                     const plexus_comm_config_v1* config, plexus_comm** comm_out, char* err,
                     size_t err_len) const;

  // ABI 1.3: only when Plugin::NoMemAllocReason() is "".
  int32_t mem_alloc(plexus_comm* comm, uint64_t bytes, void** ptr_out) const;
  int32_t mem_free(plexus_comm* comm, void* ptr) const;

  int32_t test(plexus_request* req) const;
  int32_t wait(plexus_request* req, int64_t timeout_ms) const;
  int32_t request_free(plexus_request* req) const;
  size_t request_error(plexus_request* req, char* buf, size_t len) const;
  // ABI 1.5: only when Plugin::has_request_notify().
  int32_t request_notify(plexus_request* req, void (*done)(void*, int32_t), void* arg) const;

 private:
  // "comm 'conformance/abort/4'" (or its address if the suite did not make it).
  std::string CommName(plexus_comm* comm) const;
  // " on comm 'name'" for a communicator other than the shared one, else "".
  std::string CommSuffix(plexus_comm* comm) const;
  // The size of a communicator the suite made, 0 if unknown.
  uint32_t CommSize(plexus_comm* comm) const;
  // "[4, 0, 7]" for the first n entries of a (at most 8 shown), or "NULL".
  std::string Array(const uint64_t* a, uint32_t n) const;
  // Records a communicator a comm_create or comm_split returned.
  void NameComm(plexus_comm* comm, const plexus_comm_config_v1* config) const;
  // "req of allreduce #3 (count 1009, int32, sum)", or what req is if not ours.
  std::string RequestText(plexus_request* req) const;
  // After a post: names *req_out when the post returned OK and a request.
  void NamePosted(int32_t rc, plexus_request** req_out, const char* collective,
                  const std::string& details) const;

  const plexus_backend_v1* table_;
  mutable std::mutex mutex_;
  mutable std::map<plexus_comm*, std::string> comm_names_;
  mutable std::map<plexus_comm*, uint32_t> comm_sizes_;
  mutable std::map<plexus_request*, std::string> request_names_;
  mutable std::map<std::string, int> posts_;  // per collective, in the check of posts_generation_
  mutable uint64_t posts_generation_ = 0;
};

}  // namespace plexus::conformance
