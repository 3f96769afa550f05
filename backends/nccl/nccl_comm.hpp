// One NCCL communicator of the backend and the requests posted on it.
//
// Completion (what "complete" means; backend.h, plexus_placement.stream):
//  - Posted on the caller's stream (plexus_placement.stream set): the ABI's
//    PLEXUS_CAP_STREAM_ORDERED says "complete" means "enqueued on the
//    stream". Such a request completes as soon as NCCL has taken the call
//    (returned ncclSuccess, or ncclInProgress that then settled): the
//    caller orders whatever reads the results on the same stream. This is
//    what keeps DDP's overlap (the reducer copies the bucket back on the same
//    stream after completion) and what torch's ProcessGroupNCCL does too. A
//    dead peer is then seen by a later own-stream request's timeout, by
//    NCCL's asynchronous error (asked by every test/wait), or by comm_destroy's
//    bounded finalize -- not by this request. One exception keeps the
//    in-order completion the ABI promises: if requests on the communicator's
//    own stream may still be running, a caller-stream request also waits for
//    an event recorded on the own stream behind them (the "gate").
//  - Posted without a stream (the communicator's own stream; barrier
//    always): complete when the GPU has finished it, seen by a CUDA event
//    recorded after the NCCL call. test() queries the event and NCCL's
//    asynchronous error; wait() polls the same way (WaitRequest says how long
//    it spins). Here the timeout detects a peer that never joined.
// Nothing on the post path synchronises with the device: a post is the NCCL
// call plus at most one cudaEventRecord.
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
// requests fail with ABORTED at once: NCCL never saw them). A group may mix
// streams: NCCL joins them ("Mixing multiple streams within the same group").
//
// Zero-count operations take their place in the posting order (ABI): a
// zero-count send/recv is queued like any other (no NCCL call, its event is
// recorded with its group), a zero-count collective launches what is queued
// and records its event like a real one. So none completes ahead of an
// earlier request.
//
// Non-blocking NCCL (config.blocking = 0): any NCCL call, a collective or
// ncclGroupEnd too, may return ncclInProgress -- at world size >= 2 every
// call with work does: NCCL then launches the kernel later from its own
// thread. Until ncclCommGetAsyncError stops saying ncclInProgress, the work
// is not on the stream yet, no other NCCL call may be made on the
// communicator and the events must not be recorded. A post therefore
// settles its call before it returns (SettleLocked, bounded by the timeout
// and ended by comm_abort): a post that returned means "enqueued on the
// stream", so work the caller queues on the same stream afterwards runs
// after the collective. A group launched by test()/wait() (which never
// block) is looked at once per call instead; its requests wait in
// in_progress_ until it settles.
//
// Failures: an asynchronous NCCL error (a peer's connection lost, a remote
// rank's abort) fails the request with PLEXUS_ERR_REMOTE and ncclGetLastError's
// text; a request that sees no progress on its communicator for timeout_ms
// (counted from when its NCCL call started or it was launched) fails with
// PLEXUS_ERR_TIMEOUT. Any error an NCCL call returns breaks the communicator
// too: on a non-blocking communicator NCCL stores even an argument error as
// the communicator's asynchronous error, so it could not be used again; the
// plugin checks every argument itself first, so that does not happen for
// bad input. Either way the communicator is aborted (ncclCommAbort stops
// NCCL's kernels) and every other pending request fails with the same error
// -- a request NCCL had been given only once ncclCommAbort has returned
// (nccl_released), so that its buffers are the caller's again when it
// completes (PLEXUS_CAP_ABORT).
//
// Devices: every entry point that calls CUDA or NCCL (post, test, wait,
// abort, destroy, ~CommCore) makes the communicator's device current for the
// call (DeviceGuard), on whatever thread calls it.
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
#include "plexus/kit/errors.hpp"

namespace plexus::nccl {

int64_t NowNs();
// ms as ns, clamped so that "for ever" (INT64_MAX ms) does not overflow.
int64_t MsToNs(int64_t ms);
// now + ms in ns, without overflow.
int64_t DeadlineAfterMs(int64_t now_ns, int64_t ms);
// What is left of a deadline in whole ms, at least 1 (for a callee that
// takes a timeout and treats 0 as "do not wait").
int64_t RemainingMs(int64_t deadline_ns);

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
  int64_t timeout_ns() const { return timeout_ns_; }
  // Stable for the core's life: NCCL keeps ncclConfig_t.commName's pointer.
  const std::string& name() const { return name_; }
  // The host's table (comm_split reaches the new group's out-of-band channel through it).
  const plexus_host_v1& host() const { return host_; }

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
    size_t count;  // NCCL elements; 0: no NCCL call, the event comes with the group
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
  // Marks reqs as given to NCCL: from now on a failure completes them only
  // once NCCL has released their buffers (nccl_released).
  static void MarkHanded(const Pending* reqs, size_t n);
  // After a call returned r (started at start_ns): records the events of
  // reqs (ncclSuccess), or keeps them until the call settles
  // (ncclInProgress), or fails: then the communicator is aborted (any NCCL
  // error poisons a non-blocking communicator; arguments are checked before
  // any call, so an NCCL argument error is INTERNAL). Returns PLEXUS_OK or
  // the error, *why set.
  int32_t AfterCallLocked(ncclResult_t r, const Pending* reqs, size_t n, int64_t start_ns,
                          const std::string& what, std::string* why);
  // Waits (block) or looks once for the call in progress to settle and
  // records its events. PLEXUS_OK when nothing is in progress any more,
  // PLEXUS_IN_PROGRESS (only when !block), else an error (aborted). Either
  // way a call that made no progress for timeout_ms since it started fails
  // with TIMEOUT.
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
  void Abort(int32_t code, const std::string& message);
  // comm_destroy: a healthy communicator is finalized (its operations
  // flushed) and destroyed, bounded by min(timeout, 5 s); a broken one, or
  // one whose finalize fails or overruns, is aborted.
  void Destroy();
  bool abort_requested() const { return abort_requested_.load(std::memory_order_acquire); }
  // NCCL has let go of every buffer it was given: ncclCommAbort (or
  // ncclCommDestroy) returned, or no NCCL communicator was ever adopted.
  bool nccl_released() const { return nccl_released_.load(std::memory_order_acquire); }
  // The caller-stream requests' gate: whether work launched on the own
  // stream may still be running (then their completion waits for an event
  // recorded on the own stream behind it), and the note that an own-stream
  // request has completed.
  bool OwnStreamBusyLocked() const {
    return own_last_seq_ > own_done_seq_.load(std::memory_order_acquire);
  }
  void NoteOwnStreamDone(uint64_t seq);
  void NoteOwnStreamLaunchedLocked(uint64_t seq) { own_last_seq_ = seq; }
  // 0 while healthy, else the failure class; message in *text.
  int32_t Failure(std::string* text) const;

  // The asynchronous error of the communicator, if any (ncclSuccess when
  // none, or when the mutex is busy and block is false).
  ncclResult_t AsyncError(bool block, std::string* text);

  void NoteProgress() { last_progress_ns_.store(NowNs(), std::memory_order_relaxed); }
  int64_t last_progress_ns() const { return last_progress_ns_.load(std::memory_order_relaxed); }
  uint64_t NextSeq() { return ++seq_; }

  // The communicator's last error (comm_last_error).
  kit::ErrorSlot& errors() { return errors_; }
  void SetError(std::string message) { errors_.Set(std::move(message)); }
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
  int64_t timeout_ns_;
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
  std::atomic<bool> nccl_released_{true};  // false from Adopt until abort/destroy
  uint64_t own_last_seq_ = 0;              // guarded by nccl_mutex_
  std::atomic<uint64_t> own_done_seq_{0};

  mutable std::mutex state_mutex_;  // guards the fields below
  int32_t failure_code_ = 0;
  std::string failure_text_;
  std::vector<cudaEvent_t> free_events_;
  const void* known_ptrs_[2] = {nullptr, nullptr};
  unsigned known_next_ = 0;

  kit::ErrorSlot errors_;
  std::atomic<int64_t> last_progress_ns_{0};
  std::atomic<uint64_t> seq_{0};
};

}  // namespace plexus::nccl

// One posted operation.
struct plexus_request {
  std::shared_ptr<plexus::nccl::CommCore> core;
  cudaEvent_t event = nullptr;  // from the core's pool; given back by the destructor
  // Posted on the caller's stream: complete once enqueued (nccl_comm.hpp),
  // unless gated (its event was recorded on the own stream, behind own-stream
  // work that may still run).
  bool stream_ordered = false;
  std::atomic<bool> gated{false};
  // The NCCL call was made (maybe still in progress): buffers are NCCL's
  // until it completes or NCCL is aborted. False for queued sends/recvs and
  // zero-count operations.
  std::atomic<bool> handed{false};
  // The NCCL call has settled and the event (if any) is recorded; until then
  // the request sits in its core's queue or in-progress list. Written under
  // the core's post mutex.
  std::atomic<bool> launched{false};
  std::atomic<int64_t> launched_ns{0};  // when: no-progress is counted from here
  const char* op = "";                  // "allreduce", static storage; with seq in messages
  uint64_t seq = 0;                     // this communicator's count of posts, from 1
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
