// Internal state behind plexus::Communicator and plexus::Work.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hierarchy/two_level.hpp"
#include "job.hpp"
#include "plugins/backend_calls.hpp"
#include "trace/flight_recorder.hpp"

namespace plexus::detail {

struct CommState {
  std::shared_ptr<Job> job;  // keeps the rendezvous store up
  std::shared_ptr<Backend> backend;
  plexus_comm* comm = nullptr;  // owned; destroyed by ~CommState
  uint32_t rank = 0;
  uint32_t size = 1;
  uint32_t local_rank = 0;
  uint32_t local_size = 1;
  int32_t device = -1;  // plexus_comm_config_v1.device, handed down to groups
  std::chrono::milliseconds timeout{0};
  std::string name;
  // The job rank of each rank of this communicator (identity for from_env).
  std::vector<uint32_t> job_ranks;
  // Groups made from this communicator so far (split/group): numbers their
  // names, the same on every rank because making one is collective.
  uint64_t groups_made = 0;
  // shrink(): the launcher's generation of the job's ranks this communicator
  // was made in (plexus-run --elastic; 0 for the first).
  uint64_t elastic_generation = 0;
  // grow(): the last generation it tried to grow to (tried once only), and
  // whether this rank came in by joining (from_env of a rank started again).
  uint64_t grow_tried = 0;
  bool joined = false;
  // The flight recorder of this communicator's collectives (null when
  // PLEXUS_TRACE_OPS=0); made with the Communicator.
  std::shared_ptr<FlightRecorder> recorder;
  // The last collective that failed here (seq 0: none), for shrink(), which
  // reports it as stalled so that the launcher can tell a frozen rank from
  // the ones that saw it fail.
  std::mutex last_failed_mutex;
  PostedOp last_failed{};
  // CommunicatorOptions::config: this communicator's settings, ahead of the
  // environment; the backend reads them through ConfigGetter (ABI 1.1).
  std::map<std::string, std::string> config;

  // plexus_comm_config_v1.get_config; ctx is the CommState. Thread-safe
  // (config is not changed after creation).
  static int64_t ConfigGetter(void* ctx, const char* key, char* buf, size_t len);

  // PLEXUS_DEBUG=detail (fingerprint_check.hpp): whether it is on, the mark
  // of a post in progress, and the collectives compared so far.
  bool debug_detail = false;
  std::atomic<bool> posting{false};
  uint64_t fingerprint_seq = 0;  // changed only while posting is held

  // Collectives posted so far (a Work's sequence number, for stall reports).
  std::atomic<uint64_t> collectives_posted{0};
  // Whether a failed collective reports, from the marks in the store, which
  // ranks it waited for. Off in the groups of a two-level communicator,
  // which reports against its own sequence instead (and at once: a grace
  // spent here would delay the other ranks' verdicts).
  bool stall_reports = true;
  // Set once an operation timed out or failed: teardown then waits only a
  // short grace for operations still running, not a whole timeout again.
  std::atomic<bool> failed{false};

  // Requests of Works dropped while still running, with what the flight
  // recorder knows of each (trace_slot 0: not recorded); completed, marked
  // finished and freed here.
  struct Orphan {
    plexus_request* request;
    PostedOp posted;
  };
  std::mutex orphans_mutex;
  std::vector<Orphan> orphans;

  // Two-level collectives across hosts (hierarchy/two_level.hpp); null
  // for a flat communicator. Uses only its own groups, not comm.
  std::unique_ptr<TwoLevel> two_level;
  // The last operation posted to two_level: a flat operation posted while
  // it runs completes after it (Work::after_), as operations complete in
  // posting order. Posting threads only (under the posting guard).
  std::shared_ptr<HostOp> last_host_op;

  void AdoptOrphan(plexus_request* req, const PostedOp& posted = {});
  // req (no longer in progress, status status) is done: marks its collective
  // finished in the flight recorder and frees it.
  void FreeFinished(plexus_request* req, const PostedOp& posted, int32_t status);
  ~CommState();
};

// Opens the backend spec names (a name or path, as PLEXUS_BACKEND takes),
// or the one already open in this process.
Status OpenNamedBackend(const std::string& spec, const Job& job, std::shared_ptr<Backend>* out);

}  // namespace plexus::detail
