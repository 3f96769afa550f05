// One NCCL communicator of the backend and the requests posted on it.
//
// Completion: every posted operation records a CUDA event on the stream it
// was enqueued on (the caller's plexus_placement.stream, or the
// communicator's own stream); a request is complete when its event is. test()
// queries the event and, every so often, ncclCommGetAsyncError; wait() polls
// the same way (WaitRequest says how long it spins). Nothing on the post path
// synchronises with the device: a post is the NCCL call plus one
// cudaEventRecord.
//
// Point-to-point: the ABI lets a rank post a send and a recv to the same peer
// before it waits for either, on both ranks in the same order. NCCL runs
// ncclSend/ncclRecv issued one by one in order on the GPU, each blocking
// until matched, so send-then-recv on both ranks would deadlock. Consecutive
// send/recv posts are therefore queued (checked, with their events) and
// launched together in one ncclGroupStart/ncclGroupEnd, whose operations
// progress independently (NCCL's "Point-to-point communication" guide; the
// same as torch's batch_isend_irecv). The queue is launched before the next
// collective is enqueued (stream order is kept) and when any request of the
// communicator is tested or waited on; comm_abort/comm_destroy drop it (its
// requests fail with ABORTED: launching work that abort stops at once would
// change nothing). A group may mix streams: NCCL joins them ("Mixing
// multiple streams within the same group").
//
// Non-blocking NCCL (config.blocking = 0): any NCCL call, a collective or
// ncclGroupEnd too, may return ncclInProgress, meaning NCCL is still
// enqueueing it (connecting to peers on first use). Until
// ncclCommGetAsyncError stops saying ncclInProgress, no other NCCL call may
// be made on the communicator and the events must not be recorded, so the
// requests of such a call wait in in_progress_ and their events are recorded
// when it settles: by the next post (which must wait for it, bounded by the
// timeout and by comm_abort) or by any test/wait (one look each).
//
// Failures: an asynchronous NCCL error (a peer's connection lost, a remote
// rank's abort) fails the request with PLEXUS_ERR_REMOTE and ncclGetLastError's
// text; a request that sees no progress on its communicator for timeout_ms
// fails with PLEXUS_ERR_TIMEOUT. Either way the communicator is aborted
// (ncclCommAbort stops NCCL's kernels, so the others' buffers are free again)
// and every other pending request fails with the same error.
//
// Threads: one mutex guards the ncclComm_t (NCCL calls on one communicator
// must not overlap); comm_abort may come from any thread at any time and
// takes the same mutex, after raising a flag that ends any wait for NCCL's
// non-blocking progress at once. test() never blocks on that mutex.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_api.hpp"
#include "plexus/backend.h"

namespace plexus::nccl {

int64_t NowNs();

// What a communicator's requests share. Requests hold it by shared_ptr, so a
// request freed after comm_destroy (a caller's bug) still finds its events.
class CommCore {
 public:
  CommCore(const CudaApi* api, const plexus_host_v1& host, uint32_t rank, uint32_t size, int device,
           int64_t timeout_ms, std::string name);
  ~CommCore();  // destroys the events, the stream and the scratch buffer
  CommCore(const CommCore&) = delete;
  CommCore& operator=(const CommCore&) = delete;

  const CudaApi& api() const { return *api_; }
  uint32_t rank() const { return rank_; }
  uint32_t size() const { return size_; }
  int device() const { return device_; }
  int64_t timeout_ms() const { return timeout_ms_; }
  const std::string& name() const { return name_; }

  // Set once by comm_create: the communicator, its own stream, a 4-byte
  // device buffer for barrier. Owned from then on.
  void Adopt(ncclComm_t comm, cudaStream_t stream, void* scratch);
  cudaStream_t own_stream() const { return stream_; }
  void* scratch() const { return scratch_; }

  // The ncclComm_t for a post; nullptr once aborted. Hold post_mutex() while
  // using it (and while polling a non-blocking call's progress).
  std::mutex& post_mutex() { return nccl_mutex_; }
  ncclComm_t nccl_locked() const { return nccl_; }

  // A request whose NCCL call has been made (or is queued) but whose event
  // is not recorded yet, and the stream to record it on.
  struct Pending {
    plexus_request* req;
    cudaStream_t stream;
  };
  // A send or recv waiting for the next group launch.
  struct QueuedP2P {
    Pending pending;
    bool is_send;
    void* buf;
    size_t count;  // NCCL elements
    ncclDataType_t type;
    int peer;
    uint64_t plexus_count;  // for messages: what the caller posted
    const char* dtype_name;
  };

  // The functions below need post_mutex() held. Requests in the queues are
  // PENDING (so never freed) while they are there, and are touched only under
  // the mutex; every failure path empties the queues before any request can
  // be finished with the failure (DropQueuesLocked).
  //
  // After a call returned r: records the events of reqs (ncclSuccess), or
  // keeps them until the call settles (ncclInProgress), or fails: then the
  // communicator is aborted unless NCCL rejected the arguments of a single
  // call (group: always). Returns PLEXUS_OK or the error, *why set.
  int32_t AfterCallLocked(ncclResult_t r, const Pending* reqs, size_t n, bool group,
                          const std::string& what, std::string* why);
  // Waits (block) or looks once for the call in progress to settle and
  // records its events. PLEXUS_OK when nothing is in progress any more,
  // PLEXUS_IN_PROGRESS (only when !block), else an error (aborted).
  int32_t SettleLocked(bool block, std::string* why);
  void QueueP2PLocked(const QueuedP2P& op) { queued_.push_back(op); }
  // Launches the queued sends/recvs as one group, settling first. block as
  // for SettleLocked. PLEXUS_OK when the queue is empty afterwards.
  int32_t LaunchQueuedLocked(bool block, std::string* why);
  // Forgets the queues without touching their requests (after a failure).
  void DropQueuesLocked();
  // Aborts with the mutex already held (see Abort).
  void AbortLocked(int32_t code, const std::string& message);

  // An event for one request, from the pool (created on the device when the
  // pool is empty); returned with ReleaseEvent.
  bool AcquireEvent(cudaEvent_t* event, std::string* why);
  void ReleaseEvent(cudaEvent_t event);

  // Aborts the NCCL communicator (idempotent). code/message become the
  // failure every pending and later request reports; the first one wins.
  // user: comm_abort (PLEXUS_ERR_ABORTED) rather than a detected failure.
  void Abort(int32_t code, const std::string& message);
  bool abort_requested() const { return abort_requested_.load(std::memory_order_acquire); }
  // 0 while healthy, else the failure class; message in *text.
  int32_t Failure(std::string* text) const;

  // The asynchronous error of the communicator, if any (ncclSuccess when
  // none, or when the mutex is busy and block is false).
  ncclResult_t AsyncError(bool block, std::string* text);

  void NoteProgress() { last_progress_ns_.store(NowNs(), std::memory_order_relaxed); }
  int64_t last_progress_ns() const { return last_progress_ns_.load(std::memory_order_relaxed); }
  uint64_t NextSeq() { return ++seq_; }

  void SetError(const std::string& message);
  size_t LastError(char* buf, size_t len) const;
  void Log(int32_t level, const std::string& message) const;

  // Pointer check cache: the last two buffers found to be device memory of
  // this device (a training loop posts the same buffers again and again).
  bool KnownDevicePointer(const void* p) const;
  void RememberDevicePointer(const void* p);

 private:
  const CudaApi* api_;
  plexus_host_v1 host_;
  uint32_t rank_;
  uint32_t size_;
  int device_;
  int64_t timeout_ms_;
  std::string name_;

  std::mutex nccl_mutex_;
  ncclComm_t nccl_ = nullptr;            // guarded by nccl_mutex_
  std::vector<QueuedP2P> queued_;        // guarded by nccl_mutex_
  std::vector<Pending> in_progress_;     // guarded by nccl_mutex_: the call NCCL still enqueues
  std::string in_progress_what_;         // guarded by nccl_mutex_
  int64_t in_progress_since_ns_ = 0;     // guarded by nccl_mutex_
  std::vector<Pending> record_scratch_;  // guarded by nccl_mutex_; reused, no allocation per launch
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;
  std::atomic<bool> abort_requested_{false};

  mutable std::mutex state_mutex_;  // guards the fields below
  int32_t failure_code_ = 0;
  std::string failure_text_;
  std::string last_error_;
  std::vector<cudaEvent_t> free_events_;
  const void* known_ptrs_[2] = {nullptr, nullptr};
  unsigned known_next_ = 0;

  std::atomic<int64_t> last_progress_ns_{0};
  std::atomic<uint64_t> seq_{0};
};

}  // namespace plexus::nccl

// One posted operation.
struct plexus_request {
  std::shared_ptr<plexus::nccl::CommCore> core;
  cudaEvent_t event = nullptr;  // nullptr: completed at post (count 0)
  // The event is recorded (after the NCCL call settled); until then the
  // request sits in its core's queue or in-progress list. Written under the
  // core's post mutex.
  std::atomic<bool> launched{false};
  const char* op = "";  // "allreduce", static storage; with seq in messages
  uint64_t seq = 0;     // this communicator's count of posts, from 1
  int64_t posted_ns = 0;
  std::mutex mutex;  // guards status and error
  int32_t status = PLEXUS_IN_PROGRESS;
  std::string error;

  ~plexus_request();  // gives the event back
};

namespace plexus::nccl {

// Advances req without blocking (it may launch queued point-to-point
// operations, which NCCL's non-blocking mode keeps short); returns its status
// (PLEXUS_IN_PROGRESS while pending). poll_async: also ask NCCL for an
// asynchronous error this time.
int32_t PollRequest(plexus_request* req, bool poll_async);
// wait() of the ABI.
int32_t WaitRequest(plexus_request* req, int64_t timeout_ms);

}  // namespace plexus::nccl
