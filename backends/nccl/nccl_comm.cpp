#include "nccl_comm.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "nccl_bootstrap.hpp"

namespace plexus::nccl {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

// While a request waits, ask NCCL for an asynchronous error this often (the
// event query is the cheap part; NCCL's query takes the mutex).
constexpr int64_t kAsyncPollNs = 1'000'000;

// How wait() polls the event. The targets: at most 2 us added to an 8-byte
// operation over NCCL used directly, and at most 1.03x from 1 MiB up.
// - Tight spin (back-to-back cudaEventQuery, a fraction of a microsecond
//   each, no yield) for the first 100 us: small NCCL operations within a node
//   complete within it, and a yield or a sleep would add its own wake-up
//   (a futex wake-up, or Linux's default 50 us timer slack) to them.
// - Yield until 4 ms: the thread stays runnable, so no timer slack, while a
//   waiter that has other threads to share the core with lets them run.
// - Then sleep elapsed/64, at most 500 us: a sleep ends at most one sleep
//   plus the timer slack after the event completed, which past 4 ms is under
//   1/64 + 50 us / 4 ms = 2.8% of the wait (the 1.03x bound), and an idle
//   wait no longer holds a core. Every iteration polls the request, which
//   sees a comm_abort from another thread, and the deadline bounds it all.
constexpr int64_t kTightSpinNs = 100'000;
constexpr int64_t kYieldUntilNs = 4'000'000;
constexpr int64_t kMinSleepNs = 10'000;
constexpr int64_t kMaxSleepNs = 500'000;

// Settling a non-blocking NCCL call (SettleLocked, Destroy): NCCL's own thread
// finishes it within microseconds once the peers are connected, so the first
// 100 us only yield (a sleep costs its wake-up plus Linux's 50 us timer slack,
// far more than the target of <= 2 us added to an 8-byte allreduce); after
// that, sleep elapsed/64 (first use: NCCL connects to its peers, milliseconds),
// at most 1 ms.
constexpr int64_t kSettleYieldNs = 100'000;
constexpr int64_t kSettleMaxSleepNs = 1'000'000;

void SettlePause(int64_t elapsed_ns) {
  if (elapsed_ns < kSettleYieldNs) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(
      std::chrono::nanoseconds(std::clamp(elapsed_ns / 64, kMinSleepNs, kSettleMaxSleepNs)));
}

// comm_destroy's bound on ncclCommFinalize (with the communicator's timeout,
// whichever is shorter): destroy must not hang on a dead peer.
constexpr int64_t kFinalizeMaxNs = 5'000'000'000;

std::string NcclFailureText(const CudaApi& api, ncclComm_t comm, ncclResult_t r) {
  const char* last = comm ? api.GetNcclLastError(comm) : nullptr;
  return std::string(api.GetNcclErrorString(r)) +
         (last && *last ? std::string(" (") + last + ")" : std::string());
}

}  // namespace

int64_t MsToNs(int64_t ms) {
  constexpr int64_t kMaxMs = INT64_MAX / 1'000'000 / 4;  // ~73 years
  return std::clamp<int64_t>(ms, 0, kMaxMs) * 1'000'000;
}

int64_t DeadlineAfterMs(int64_t now_ns, int64_t ms) {
  return now_ns + MsToNs(ms);  // now_ns (steady clock) is far below INT64_MAX / 4
}

int64_t RemainingMs(int64_t deadline_ns) {
  const int64_t left = deadline_ns - NowNs();
  return std::max<int64_t>(1, (left + 999'999) / 1'000'000);
}

CommCore::CommCore(const CudaApi* api, const plexus_host_v1& host, uint32_t rank, uint32_t size,
                   int device, int64_t timeout_ms, std::string name)
    : api_(api),
      host_(host),
      rank_(rank),
      size_(size),
      device_(device),
      timeout_ms_(timeout_ms),
      timeout_ns_(MsToNs(timeout_ms)),
      name_(std::move(name)) {
  NoteProgress();
}

CommCore::~CommCore() {
  // Reverse order of comm_create: the communicator (if comm_destroy did not
  // already), then events, scratch, stream. None of these waits for peers.
  // The last owner may be any thread (a request freed late): our device.
  DeviceGuard on_device(*api_, device_);
  if (nccl_) api_->CommAbort(nccl_);
  for (cudaEvent_t e : free_events_) api_->EventDestroy(e);
  if (scratch_) api_->Free(scratch_);
  if (stream_) api_->StreamDestroy(stream_);
}

void CommCore::Adopt(ncclComm_t comm, cudaStream_t stream, void* scratch) {
  std::lock_guard<std::mutex> lock(nccl_mutex_);
  nccl_ = comm;
  stream_ = stream;
  scratch_ = scratch;
  nccl_released_.store(comm == nullptr, std::memory_order_release);
}

bool CommCore::AcquireEvent(cudaEvent_t* event, std::string* why) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (!free_events_.empty()) {
      *event = free_events_.back();
      free_events_.pop_back();
      return true;
    }
  }
  // Events belong to the device current at creation: make it ours for the
  // call (a no-op inside Post, which already did).
  DeviceGuard on_device(*api_, device_);
  const cudaError_t e = api_->EventCreateWithFlags(event, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    api_->GetLastError();
    *why = std::string("cudaEventCreateWithFlags: ") + api_->GetErrorName(e) + ": " +
           api_->GetErrorString(e);
    return false;
  }
  return true;
}

void CommCore::ReleaseEvent(cudaEvent_t event) {
  if (!event) return;
  try {
    std::lock_guard<std::mutex> lock(state_mutex_);
    free_events_.push_back(event);
  } catch (...) {
    api_->EventDestroy(event);
  }
}

void CommCore::Abort(int32_t code, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (failure_code_ == 0) {
      failure_code_ = code;
      failure_text_ = message;
    }
  }
  // Raised before taking the mutex: a post waiting for NCCL's non-blocking
  // progress under it sees the flag and lets go.
  abort_requested_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> lock(nccl_mutex_);
  AbortLocked(code, message);
}

void CommCore::AbortLocked(int32_t code, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (failure_code_ == 0) {
      failure_code_ = code;
      failure_text_ = message;
    }
  }
  abort_requested_.store(true, std::memory_order_release);
  DropQueuesLocked();
  if (nccl_) {
    // Local and bounded: NCCL's kernels leave, its threads stop, its device
    // memory is freed (which waits for the kernels), and no peer is asked.
    DeviceGuard on_device(*api_, device_);
    api_->CommAbort(nccl_);
    nccl_ = nullptr;
  }
  // Only now may a request NCCL was given report the failure: its buffers
  // are the caller's again (PLEXUS_CAP_ABORT). Set after the call returned.
  nccl_released_.store(true, std::memory_order_release);
}

void CommCore::Destroy() {
  DeviceGuard on_device(*api_, device_);
  std::string why;
  if (Failure(&why) == 0) {
    std::lock_guard<std::mutex> lock(nccl_mutex_);
    // Queued sends/recvs (a caller that broke the precondition) were never
    // given to NCCL: finalize cannot flush them; abort instead.
    if (nccl_ && queued_.empty() && !abort_requested() && SettleLocked(true, &why) == PLEXUS_OK &&
        nccl_) {
      const int64_t start = NowNs();
      const int64_t deadline = start + std::min(timeout_ns_, kFinalizeMaxNs);
      ncclResult_t r = api_->CommFinalize(nccl_);
      while (r == ncclSuccess || r == ncclInProgress) {
        ncclResult_t async = ncclInProgress;
        const ncclResult_t q = api_->CommGetAsyncError(nccl_, &async);
        r = q != ncclSuccess ? q : async;
        if (r != ncclInProgress || abort_requested()) break;
        const int64_t now = NowNs();
        if (now >= deadline) break;
        SettlePause(now - start);
      }
      if (r == ncclSuccess) {
        // Quiescent: ncclCommDestroy only frees local resources now.
        const ncclResult_t d = api_->CommDestroy(nccl_);
        nccl_ = nullptr;
        nccl_released_.store(true, std::memory_order_release);
        if (d != ncclSuccess) {
          Log(PLEXUS_LOG_WARN,
              "nccl comm_destroy (" + name_ + "): ncclCommDestroy: " + api_->GetNcclErrorString(d));
        }
      } else {
        Log(PLEXUS_LOG_WARN,
            "nccl comm_destroy (" + name_ + ", rank " + std::to_string(rank_) +
                "): ncclCommFinalize " +
                (r == ncclInProgress ? std::string("did not finish in time")
                                     : std::string("failed: ") + api_->GetNcclErrorString(r)) +
                "; aborting the communicator instead");
      }
    }
  }
  // Broken, or finalize failed or overran: abort (a no-op on the NCCL side
  // once destroyed above; it still fails any request a buggy caller kept).
  Abort(PLEXUS_ERR_ABORTED, "the communicator was destroyed");
}

void CommCore::NoteOwnStreamDone(uint64_t seq) {
  uint64_t seen = own_done_seq_.load(std::memory_order_relaxed);
  while (seen < seq && !own_done_seq_.compare_exchange_weak(seen, seq, std::memory_order_release,
                                                            std::memory_order_relaxed)) {
  }
}

void CommCore::MarkHanded(const Pending* reqs, size_t n) {
  for (size_t i = 0; i < n; ++i) reqs[i].req->handed.store(true, std::memory_order_release);
}

void CommCore::DropQueuesLocked() {
  // The requests are not touched: once failed they may be finished and
  // freed by their owners at any time.
  queued_.clear();
  in_progress_.clear();
}

namespace {

// Records the events of n requests whose NCCL call has been enqueued, in
// order; a request counts as launched from then on. A caller-stream request
// needs no event (complete = enqueued) unless own-stream work may still run
// ahead of it: then its event, recorded on the own stream, is its gate.
int32_t RecordEvents(CommCore& c, const CommCore::Pending* reqs, size_t n, std::string* why) {
  const CudaApi& api = c.api();
  const int64_t now = NowNs();
  for (size_t i = 0; i < n; ++i) {
    plexus_request* req = reqs[i].req;
    cudaStream_t on = reqs[i].stream;
    bool record = true;
    if (req->stream_ordered) {
      record = c.OwnStreamBusyLocked();
      on = c.own_stream();
      req->gated.store(record, std::memory_order_release);
    } else {
      c.NoteOwnStreamLaunchedLocked(req->seq);
    }
    const cudaError_t e = record ? api.EventRecord(req->event, on) : cudaSuccess;
    if (e != cudaSuccess) {
      api.GetLastError();
      // The operation is on the stream but cannot be tracked: stop it.
      *why = std::string("nccl ") + req->op + " #" + std::to_string(req->seq) +
             ": cudaEventRecord after the NCCL call: " + api.GetErrorName(e) + ": " +
             api.GetErrorString(e);
      c.AbortLocked(PLEXUS_ERR_SYSTEM, *why);
      return PLEXUS_ERR_SYSTEM;
    }
    req->launched_ns.store(now, std::memory_order_relaxed);
    req->launched.store(true, std::memory_order_release);
  }
  return PLEXUS_OK;
}

}  // namespace

int32_t CommCore::AfterCallLocked(ncclResult_t r, const Pending* reqs, size_t n, int64_t start_ns,
                                  const std::string& what, std::string* why) {
  if (r == ncclSuccess) return RecordEvents(*this, reqs, n, why);
  if (r == ncclInProgress) {
    in_progress_.assign(reqs, reqs + n);
    in_progress_what_ = what;
    in_progress_since_ns_ = start_ns;
    return PLEXUS_OK;
  }
  *why = what + ": " + NcclFailureText(*api_, nccl_, r);
  int32_t code = StatusOfNccl(r);
  // A non-blocking communicator keeps any error of a call, an argument error
  // too, as its asynchronous error: it cannot be used again, so abort it.
  // The plugin checked every argument before the call, so NCCL refusing one
  // is our bug (INTERNAL), not the caller's (INVALID_ARGUMENT would tell the
  // caller the communicator is still usable).
  if (code == PLEXUS_ERR_INVALID_ARGUMENT || code == PLEXUS_ERR_INVALID_USAGE) {
    code = PLEXUS_ERR_INTERNAL;
  }
  AbortLocked(code, *why);
  return code;
}

int32_t CommCore::SettleLocked(bool block, std::string* why) {
  while (!in_progress_.empty()) {
    if (abort_requested() || !nccl_) {
      DropQueuesLocked();
      const int32_t f = Failure(why);
      if (f == 0) *why = "aborted";
      return f != 0 ? f : PLEXUS_ERR_ABORTED;
    }
    ncclResult_t async = ncclInProgress;
    ncclResult_t r = api_->CommGetAsyncError(nccl_, &async);
    if (r == ncclSuccess) r = async;
    if (r == ncclSuccess) {
      // Moved out first: a failed record aborts, which empties the lists.
      record_scratch_.swap(in_progress_);
      in_progress_.clear();
      NoteProgress();
      const int32_t rc = RecordEvents(*this, record_scratch_.data(), record_scratch_.size(), why);
      record_scratch_.clear();
      return rc;
    }
    if (r != ncclInProgress) {
      *why = in_progress_what_ + ": NCCL failed while it completed the call in the background: " +
             NcclFailureText(*api_, nccl_, r);
      const int32_t code =
          r == ncclInvalidArgument || r == ncclInvalidUsage ? PLEXUS_ERR_INTERNAL : StatusOfNccl(r);
      AbortLocked(code, *why);
      return code;
    }
    const int64_t elapsed = NowNs() - in_progress_since_ns_;
    if (elapsed >= timeout_ns_) {
      *why = in_progress_what_ + ": NCCL did not finish enqueueing the call within " +
             std::to_string(timeout_ms_) +
             " ms (it connects to the peers on first use; one of them is missing, stuck, or "
             "never posted the matching operation); the communicator was aborted";
      AbortLocked(PLEXUS_ERR_TIMEOUT, *why);
      return PLEXUS_ERR_TIMEOUT;
    }
    if (!block) return PLEXUS_IN_PROGRESS;
    // Holding the mutex is fine: comm_abort raises its flag first, seen above.
    SettlePause(elapsed);
  }
  return PLEXUS_OK;
}

int32_t CommCore::LaunchQueuedLocked(bool block, std::string* why) {
  if (queued_.empty()) return PLEXUS_OK;
  int32_t rc = SettleLocked(block, why);
  if (rc != PLEXUS_OK) return rc;
  if (abort_requested() || !nccl_) {
    DropQueuesLocked();
    const int32_t f = Failure(why);
    return f != 0 ? f : PLEXUS_ERR_ABORTED;
  }
  // One group, in posting order: NCCL keeps the order of operations to the
  // same peer within a group and lets all of them progress together.
  // Zero-count entries make no NCCL call (their events come with the group,
  // which keeps them in order); a queue of only those needs no group.
  bool any_call = false;
  for (const QueuedP2P& q : queued_) any_call = any_call || q.count > 0;
  const int64_t start = NowNs();
  ncclResult_t r = ncclSuccess;
  size_t bad = queued_.size();
  if (any_call) {
    r = api_->GroupStart();
    if (r == ncclSuccess) {
      for (size_t i = 0; i < queued_.size(); ++i) {
        const QueuedP2P& q = queued_[i];
        if (q.count == 0) continue;
        MarkHanded(&q.pending, 1);
        const ncclResult_t ri =
            q.is_send ? api_->Send(q.buf, q.count, q.type, q.peer, nccl_, q.pending.stream)
                      : api_->Recv(q.buf, q.count, q.type, q.peer, nccl_, q.pending.stream);
        if (ri != ncclSuccess && ri != ncclInProgress) {
          r = ri;
          bad = i;
          break;
        }
      }
      // Always closed, even after a failed call; its result covers the launch.
      const ncclResult_t end = api_->GroupEnd();
      if (r == ncclSuccess) r = end;
    }
  }
  std::string what;
  if (r != ncclSuccess) {
    // Only built when needed (a failure, or a launch NCCL completes in the
    // background, whose messages come later): names each operation (op, seq,
    // count, dtype, peer), the failed one first where NCCL refused one call.
    const auto one = [](const QueuedP2P& q) {
      return std::string(q.is_send ? "send" : "recv") + " #" + std::to_string(q.pending.req->seq) +
             " (" + std::to_string(q.plexus_count) + " x " + q.dtype_name +
             (q.is_send ? " to" : " from") + " peer " + std::to_string(q.peer) + ")";
    };
    what = "nccl ";
    if (bad < queued_.size()) what += one(queued_[bad]) + ", in ";
    what += "a group of " + std::to_string(queued_.size()) + " point-to-point operation(s): ";
    for (size_t i = 0; i < queued_.size() && i < 4; ++i) what += (i ? ", " : "") + one(queued_[i]);
    if (queued_.size() > 4) what += ", ...";
    what += " (" + name_ + ", rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
  }
  record_scratch_.clear();
  for (const QueuedP2P& q : queued_) record_scratch_.push_back(q.pending);
  queued_.clear();
  rc = AfterCallLocked(r, record_scratch_.data(), record_scratch_.size(), start, what, why);
  record_scratch_.clear();
  return rc;
}

int32_t CommCore::Failure(std::string* text) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (failure_code_ != 0) *text = failure_text_;
  return failure_code_;
}

ncclResult_t CommCore::AsyncError(bool block, std::string* text) {
  std::unique_lock<std::mutex> lock(nccl_mutex_, std::defer_lock);
  if (block) {
    lock.lock();
  } else if (!lock.try_lock()) {
    return ncclSuccess;  // a post or an abort holds it; ask next time
  }
  if (!nccl_) return ncclSuccess;  // aborted: Failure() says why
  ncclResult_t async = ncclSuccess;
  const ncclResult_t r = api_->CommGetAsyncError(nccl_, &async);
  if (r != ncclSuccess) async = r;
  if (async != ncclSuccess && async != ncclInProgress) {
    const char* last = api_->GetNcclLastError(nccl_);
    *text = std::string(api_->GetNcclErrorString(async)) +
            (last && *last ? std::string(": ") + last : std::string());
  }
  return async;
}

void CommCore::Log(int32_t level, const std::string& message) const {
  if (host_.log) host_.log(host_.ctx, level, message.c_str());
}

bool CommCore::KnownDevicePointer(const void* p) const {
  return p == known_ptrs_[0] || p == known_ptrs_[1];
}

void CommCore::RememberDevicePointer(const void* p) {
  known_ptrs_[known_next_] = p;
  known_next_ ^= 1u;
}

namespace {

int32_t Finish(plexus_request* req, int32_t code, const std::string& text) {
  req->status = code;
  if (code != PLEXUS_OK) {
    req->error = text;
    req->core->SetError(text);
  }
  return code;
}

}  // namespace

int32_t PollRequest(plexus_request* req, bool poll_async) {
  std::lock_guard<std::mutex> lock(req->mutex);
  if (req->status != PLEXUS_IN_PROGRESS) return req->status;
  CommCore& c = *req->core;
  const CudaApi& api = c.api();
  // Built only on failure: the polling loop must not allocate.
  const auto where = [&] {
    return std::string("nccl ") + req->op + " #" + std::to_string(req->seq) + " (" + c.name() +
           ", rank " + std::to_string(c.rank()) + " of " + std::to_string(c.size()) + ")";
  };
  std::string why;
  // A failure (or comm_abort) ends the request -- but one NCCL was given
  // only once ncclCommAbort has returned: until then its kernel may still
  // read or write the buffers (PLEXUS_CAP_ABORT promises they are the
  // caller's once it completes). The aborting thread is inside that bounded
  // call; wait() polls again.
  const auto fail = [&](int32_t code, const std::string& text) {
    if (req->handed.load(std::memory_order_acquire) && !c.nccl_released()) {
      return int32_t(PLEXUS_IN_PROGRESS);
    }
    return Finish(req, code, where() + ": " + text);
  };

  if (!req->launched.load(std::memory_order_acquire)) {
    // Queued (a send/recv waiting for its group) or enqueued by NCCL in the
    // background: move things on. The mutex is held by another thread only
    // for one NCCL call or a bounded settle; look again next time, unless
    // an abort is under way (then wait for it, to see the queues dropped).
    std::unique_lock<std::mutex> nl(c.post_mutex(), std::try_to_lock);
    if (!nl.owns_lock()) {
      if (!c.abort_requested()) return PLEXUS_IN_PROGRESS;
      nl.lock();
    }
    // Settling (also without blocking) fails a call that made no progress
    // for timeout_ms since it started (not since req was posted: a request
    // first looked at late is not late itself).
    if (c.Failure(&why) == 0) {
      if (c.SettleLocked(false, &why) == PLEXUS_OK) c.LaunchQueuedLocked(false, &why);
    }
    if (!req->launched.load(std::memory_order_acquire)) {
      if (const int32_t f = c.Failure(&why)) {
        // The queues must not name req once its owner may free it (every
        // failure path has emptied them already; this is the guarantee).
        c.DropQueuesLocked();
        return fail(f, why);
      }
      return PLEXUS_IN_PROGRESS;
    }
  }
  // A failure seen anywhere on the communicator (or comm_abort) ends every
  // pending request: NCCL's kernels were stopped, the result is unknown.
  if (const int32_t f = c.Failure(&why)) return fail(f, why);

  // Caller's stream, nothing ahead of it on the own stream: complete now
  // (complete = enqueued on the stream; nccl_comm.hpp).
  const bool needs_event = !req->stream_ordered || req->gated.load(std::memory_order_acquire);
  const cudaError_t q = needs_event ? api.EventQuery(req->event) : cudaSuccess;
  if (q == cudaSuccess) {
    // An operation NCCL's abort (after a peer failed) cut short completes
    // too: ask NCCL. Without blocking: a post may hold the mutex for a while
    // (a first-use connection); the periodic asks in wait() cover that case.
    std::string text;
    const ncclResult_t a = c.AsyncError(false, &text);
    if (a != ncclSuccess && a != ncclInProgress) {
      const std::string msg = "NCCL reported an asynchronous error: " + text;
      c.Abort(PLEXUS_ERR_REMOTE, msg);
    }
    // Checked after the event: a comm_abort that came meanwhile wins over OK.
    if (const int32_t f = c.Failure(&why)) return fail(f, why);
    if (!req->stream_ordered) c.NoteOwnStreamDone(req->seq);
    c.NoteProgress();
    return Finish(req, PLEXUS_OK, "");
  }
  // cudaEventQuery's cudaErrorNotReady is also left as the runtime's last
  // error: clear it (as PyTorch does), or a LibTorch sharing this libcudart
  // would find it in its own cudaGetLastError() and fail there.
  api.GetLastError();  // also clears a non-sticky real error; a sticky one stays
  if (q != cudaErrorNotReady) {
    const std::string msg =
        std::string("cudaEventQuery: ") + api.GetErrorName(q) + ": " + api.GetErrorString(q);
    c.Abort(PLEXUS_ERR_SYSTEM, msg);
    return fail(PLEXUS_ERR_SYSTEM, msg);
  }
  if (poll_async) {
    std::string text;
    const ncclResult_t a = c.AsyncError(false, &text);
    if (a != ncclSuccess && a != ncclInProgress) {
      // NCCL saw a connection fail or a peer abort; it does not say which rank.
      const std::string msg =
          "NCCL reported an asynchronous error (a peer failed or aborted): " + text;
      c.Abort(PLEXUS_ERR_REMOTE, msg);
      if (const int32_t f = c.Failure(&why)) return fail(f, why);
      return fail(PLEXUS_ERR_REMOTE, msg);
    }
  }
  // No progress counted from the launch (not the post: a request first
  // polled late is not late), or from the last completion on the
  // communicator, whichever is later.
  const int64_t since =
      std::max(req->launched_ns.load(std::memory_order_relaxed), c.last_progress_ns());
  if (NowNs() - since >= c.timeout_ns()) {
    std::string others;
    if (c.size() <= 16) {
      for (uint32_t r = 0; r < c.size(); ++r) {
        if (r != c.rank()) others += (others.empty() ? "" : ", ") + std::to_string(r);
      }
    } else {
      others = "the other " + std::to_string(c.size() - 1) + " ranks";
    }
    const std::string msg =
        "no progress for " + std::to_string(c.timeout_ms()) +
        " ms; waited for the GPU operation to complete, which needs every rank of the "
        "communicator (NCCL does not say which of " +
        (c.size() == 1 ? std::string("them") : "ranks " + others) +
        " stopped, froze or never posted it); the communicator was aborted";
    c.Abort(PLEXUS_ERR_TIMEOUT, msg);
    if (const int32_t f = c.Failure(&why)) return fail(f, why);
    return fail(PLEXUS_ERR_TIMEOUT, msg);
  }
  return PLEXUS_IN_PROGRESS;
}

int32_t WaitRequest(plexus_request* req, int64_t timeout_ms) {
  if (timeout_ms < 0) timeout_ms = req->core->timeout_ms();
  const int64_t start = NowNs();
  const int64_t deadline = DeadlineAfterMs(start, timeout_ms);
  int64_t next_async = start + kAsyncPollNs;
  for (;;) {
    const int64_t now = NowNs();
    const bool poll_async = now >= next_async;
    if (poll_async) next_async = now + kAsyncPollNs;
    const int32_t st = PollRequest(req, poll_async);
    if (st != PLEXUS_IN_PROGRESS) return st;
    if (now >= deadline) return PLEXUS_ERR_TIMEOUT;  // the request stays pending
    const int64_t elapsed = now - start;
    if (elapsed < kTightSpinNs) continue;
    if (elapsed < kYieldUntilNs) {
      std::this_thread::yield();
      continue;
    }
    const int64_t sleep_ns =
        std::min({std::max(elapsed / 64, kMinSleepNs), kMaxSleepNs, deadline - now + 1000});
    std::this_thread::sleep_for(std::chrono::nanoseconds(sleep_ns));
  }
}

}  // namespace plexus::nccl

plexus_request::~plexus_request() {
  if (core && event) core->ReleaseEvent(event);
}
