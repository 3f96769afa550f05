// What the mpi backend keeps per process: MPI's initialisation, whether its
// calls must be serialised, and what MPI still holds after an operation gave
// up on it (requests and the memory they may still use).
//
// MPI is initialised with MPI_Init_thread(MPI_THREAD_MULTIPLE) only if the
// application has not done so, and finalised in finalize() only if this
// backend initialised it. MPI cannot cancel a collective or an unmatched
// send, so a request that timed out or was aborted is not freed: the context
// keeps it, with its buffers, until MPI completes it (ReapAbandoned).
//
// MPI communicators are freed only at finalize: Open MPI gives a freed
// communicator's context id to the next one made, and a message still on
// its way to the old one (a peer's failure report, a mismatched operation's
// message nobody received) would then be delivered to the new one.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plexus/backend.h"

namespace plexus::mpi {

// Writes message through the host's logger; silent without one.
void Log(const plexus_host_v1& host, int32_t level, const std::string& message);
// MPI_Error_string of code, or "MPI error <code>".
std::string MpiErrorText(int code);
// The ABI status class of an MPI error code (never PLEXUS_OK for a failure).
int32_t StatusOfMpiError(int code);

// PLEXUS_MPI_ALLREDUCE: how allreduce on host memory runs when the ranks do
// not share a host's memory (plexus-algos by size and ranks, one of them, or
// MPI_Iallreduce).
enum class AllreduceChoice { kAuto, kRing, kRecursiveDoubling, kPair, kMpi };

// Requests MPI may still be working on, the memory they may still touch, and
// the communicator they run on.
struct Abandoned {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> requests;
  std::vector<std::unique_ptr<uint8_t[]>> memory;
};

}  // namespace plexus::mpi

struct plexus_backend_ctx {
  explicit plexus_backend_ctx(const plexus_host_v1& h) : host(h) {}

  // Initialises MPI if nobody did (MPI_Init_thread), or adopts the
  // application's MPI. Idempotent. state_mutex held. On failure *error says why.
  int32_t EnsureMpi(std::string* error);

  // Keeps a's requests (and memory) until MPI completes them.
  void Abandon(plexus::mpi::Abandoned a);
  // Tests what was abandoned, drops what finished; returns how many entries
  // are left.
  size_t ReapAbandoned();
  // comm is no longer used: freed by FreeRetired (see above why not now).
  void ReleaseComm(MPI_Comm comm);
  // MPI_Comm_free of every released communicator (finalize, before
  // MPI_Finalize, once nothing abandoned is left).
  void FreeRetired();

  // Waits for req up to timeout_ms (bounded; a rank that never comes is a
  // TIMEOUT), or until *aborted (if given) is raised (ABORTED). Either way req
  // and *keep (memory MPI may still use) go to Abandon. On an MPI error
  // *mpi_rc holds it and the result is its status.
  int32_t WaitRequest(MPI_Comm on, MPI_Request req, int64_t timeout_ms,
                      const std::atomic<bool>* aborted, std::unique_ptr<uint8_t[]>* keep,
                      int* mpi_rc);

  const plexus_host_v1 host;  // copy of the host's table (its pointers outlive us)
  // The most elements of one MPI message (PLEXUS_DEBUG_MPI_MAX_COUNT); set
  // at init, then read only.
  uint64_t max_count = 2147483647;
  plexus::mpi::AllreduceChoice allreduce = plexus::mpi::AllreduceChoice::kAuto;
  std::string library_version;  // "Open MPI v4.1.4", for log lines

  std::mutex state_mutex;  // guards MPI initialisation, comm_create and comm_split
  std::atomic<bool> mpi_ready{false};
  bool we_initialised = false;                     // MPI_Init_thread was ours: finalise it
  std::atomic<int> provided{MPI_THREAD_MULTIPLE};  // thread level MPI granted
  int tag_ub = 32767;                              // MPI_TAG_UB, set by EnsureMpi
  // An operation failed for want of a peer (a timeout, a peer that exited or
  // gave up): MPI_Finalize, which waits for every rank, could wait forever,
  // so finalize() skips it.
  std::atomic<bool> lost_peer{false};

  // Serialises every MPI call when MPI granted less than MPI_THREAD_MULTIPLE
  // (serialize is written once, before the first communicator exists).
  std::mutex mpi_mutex;
  bool serialize = false;

 private:
  size_t ReapLocked();  // abandoned_mutex_ held
  std::mutex abandoned_mutex_;
  std::vector<plexus::mpi::Abandoned> abandoned_;  // guarded by abandoned_mutex_
  std::vector<MPI_Comm> released_;                 // guarded by abandoned_mutex_
};

namespace plexus::mpi {

// Holds ctx.mpi_mutex for the scope when MPI calls must be serialised.
class MpiLock {
 public:
  explicit MpiLock(plexus_backend_ctx& ctx) : lock_(ctx.mpi_mutex, std::defer_lock) {
    if (ctx.serialize) lock_.lock();
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace plexus::mpi
