// The kit's one-host shared-memory segment (kit/one_host_shm.hpp) under
// the MPI backend: when every rank of a communicator shares this host,
// allreduce, reduce_scatter and allgather on host memory go through the
// segment instead of MPI.
//
// The segment's allreduce blocks its caller until every rank has done its
// part, while an MPI backend's post must return at once (DDP posts a bucket
// and goes on with backward). So a communicator with a segment has one
// thread, which runs its allreduces in posting order (the same order on
// every rank) and completes their requests, as the kit's OpQueue does for
// tcp and ucx; a wait() for the operation next in line of at most
// kInlineMaxBytes runs it on the waiting thread instead (two thread
// hand-offs less per small allreduce; with mpirun's --bind-to core the
// thread shares the caller's core), and a wait for anything else sleeps
// until it completes. Every other collective still goes through MPI, and
// announces itself to the segment when posted, so that a rank waiting in
// shared memory for a peer that posted another collective in that place
// fails at once, naming both, rather than at the timeout.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "plexus/algos/transport.hpp"
#include "plexus/backend.h"
#include "plexus/kit/one_host_shm.hpp"

struct plexus_comm;
struct plexus_request;

namespace plexus::mpi {

class OneHostRunner {
 public:
  // Makes the segment for a communicator's ranks: collective over host's
  // oob_allgather/oob_broadcast on config.oob (every rank calls it in
  // comm_create; the MPI backend passes an exchange over the new MPI
  // communicator there, mpirun giving the host no store). *out stays null,
  // with *why_not saying why, where there is none to make (ranks on several
  // hosts, PLEXUS_SHM=off); a failed set-up exchange or a malformed
  // PLEXUS_SHM is an error status, the same on every rank.
  static algos::Status Create(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                              std::unique_ptr<OneHostRunner>* out, std::string* why_not);
  // Aborts what runs, then ends the thread.
  ~OneHostRunner();
  OneHostRunner(const OneHostRunner&) = delete;
  OneHostRunner& operator=(const OneHostRunner&) = delete;

  static constexpr uint64_t kInlineMaxBytes = 64 << 10;

  // Queues req's allreduce (sig, send, recv borrowed until req completes).
  // req's status is set, last, by whichever thread runs it: the caller must
  // not free it before (the ABI's free refuses an operation in progress).
  void Post(plexus_request* req, const algos::OpSignature& sig, const void* send, void* recv);
  // wait(req) for up to timeout_ms (>= 0): req's status, or
  // PLEXUS_ERR_TIMEOUT with req left pending. Runs req here when it is next
  // in line, small, and timeout_ms is at least the communicator's timeout.
  int32_t Wait(plexus_request* req, int64_t timeout_ms);
  // A collective posted through MPI in place sig.seq (see the file comment).
  void Announce(const algos::OpSignature& sig) { shm_->Announce(sig); }
  // comm_abort: whatever waits in the segment fails with ABORTED at once.
  void Abort() { shm_->Abort(); }
  std::string Describe() const { return shm_->Describe(); }
  // mem_alloc and mem_free (ABI 1.3): the segment's shared buffers.
  algos::Status MemAlloc(uint64_t bytes, void** out) { return shm_->MemAlloc(bytes, out); }
  algos::Status MemFree(void* p) { return shm_->MemFree(p); }

 private:
  struct Job {
    plexus_request* req;
    algos::OpSignature sig;
    const void* send;
    void* recv;
  };
  explicit OneHostRunner(std::unique_ptr<kit::OneHostShm> shm);
  void Loop();
  // Runs job (the caller took it off jobs_ and set running_) and completes
  // its request; then clears running_ and wakes everyone. Returns the
  // status it gave the request (which its owner may have freed by then).
  // Never throws.
  int32_t Run(const Job& job);

  std::unique_ptr<kit::OneHostShm> shm_;
  algos::Status failed_;  // the first failure (every later job fails with it); the running thread's
  std::mutex mutex_;
  std::condition_variable cv_;  // jobs queued, running_ cleared, a request completed, stop
  std::deque<Job> jobs_;        // guarded by mutex_
  bool running_ = false;        // a thread runs a job; guarded by mutex_
  bool stop_ = false;           // guarded by mutex_
  std::thread thread_;          // last: started once the rest exists
};

}  // namespace plexus::mpi
