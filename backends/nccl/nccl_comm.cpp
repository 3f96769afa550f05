#include "nccl_comm.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

namespace plexus::nccl {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

void WriteText(char* buf, size_t len, const std::string& text) {
  if (!buf || len == 0) return;
  const size_t n = std::min(len - 1, text.size());
  text.copy(buf, n);
  buf[n] = '\0';
}

// While a request waits, ask NCCL for an asynchronous error this often (the
// event query is the cheap part; NCCL's query takes the mutex).
constexpr int64_t kAsyncPollNs = 1'000'000;
// A wait spins (yielding) this long before it starts to sleep: NCCL's
// small operations finish within it. Sleeps then grow to kMaxSleepUs.
constexpr int64_t kSpinNs = 200'000;
constexpr int64_t kFirstSleepUs = 10;
constexpr int64_t kMaxSleepUs = 500;

}  // namespace

CommCore::CommCore(const CudaApi* api, const plexus_host_v1& host, uint32_t rank, uint32_t size,
                   int device, int64_t timeout_ms, std::string name)
    : api_(api),
      host_(host),
      rank_(rank),
      size_(size),
      device_(device),
      timeout_ms_(timeout_ms),
      name_(std::move(name)) {
  NoteProgress();
}

CommCore::~CommCore() {
  // Reverse order of comm_create: the communicator (if comm_destroy did not
  // already), then events, scratch, stream. None of these waits for peers.
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
  // call, and give the calling thread its own device back.
  int previous = -1;
  if (api_->GetDevice(&previous) != cudaSuccess) previous = -1;
  if (previous != device_) api_->SetDevice(device_);
  const cudaError_t e = api_->EventCreateWithFlags(event, cudaEventDisableTiming);
  if (previous >= 0 && previous != device_) api_->SetDevice(previous);
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
  if (nccl_) {
    // Local and bounded: NCCL's kernels leave, its threads stop, its device
    // memory is freed (which waits for the kernels), and no peer is asked.
    api_->CommAbort(nccl_);
    nccl_ = nullptr;
  }
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

void CommCore::SetError(const std::string& message) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  last_error_ = message;
}

size_t CommCore::LastError(char* buf, size_t len) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  WriteText(buf, len, last_error_);
  return last_error_.size();
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
  // A failure seen anywhere on the communicator (or comm_abort) ends every
  // pending request: NCCL's kernels were stopped, the result is unknown.
  if (const int32_t f = c.Failure(&why)) return Finish(req, f, where() + ": " + why);
  if (!req->event) return Finish(req, PLEXUS_OK, "");

  const cudaError_t q = api.EventQuery(req->event);
  if (q == cudaSuccess) {
    std::string text;
    const ncclResult_t a = c.AsyncError(true, &text);
    if (const int32_t f = c.Failure(&why)) return Finish(req, f, where() + ": " + why);
    if (a != ncclSuccess && a != ncclInProgress) {
      const std::string msg = "NCCL reported an asynchronous error: " + text;
      c.Abort(PLEXUS_ERR_REMOTE, msg);
      return Finish(req, PLEXUS_ERR_REMOTE, where() + ": " + msg);
    }
    c.NoteProgress();
    return Finish(req, PLEXUS_OK, "");
  }
  if (q != cudaErrorNotReady) {
    api.GetLastError();  // clears a non-sticky error; a sticky one stays
    const std::string msg =
        std::string("cudaEventQuery: ") + api.GetErrorName(q) + ": " + api.GetErrorString(q);
    c.Abort(PLEXUS_ERR_SYSTEM, msg);
    return Finish(req, PLEXUS_ERR_SYSTEM, where() + ": " + msg);
  }
  if (poll_async) {
    std::string text;
    const ncclResult_t a = c.AsyncError(false, &text);
    if (a != ncclSuccess && a != ncclInProgress) {
      // NCCL saw a connection fail or a peer abort; it does not say which rank.
      const std::string msg =
          "NCCL reported an asynchronous error (a peer failed or aborted): " + text;
      c.Abort(PLEXUS_ERR_REMOTE, msg);
      return Finish(req, PLEXUS_ERR_REMOTE, where() + ": " + msg);
    }
  }
  const int64_t since = std::max(req->posted_ns, c.last_progress_ns());
  if (NowNs() - since >= c.timeout_ms() * 1'000'000) {
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
    return Finish(req, PLEXUS_ERR_TIMEOUT, where() + ": " + msg);
  }
  return PLEXUS_IN_PROGRESS;
}

int32_t WaitRequest(plexus_request* req, int64_t timeout_ms) {
  if (timeout_ms < 0) timeout_ms = req->core->timeout_ms();
  const int64_t start = NowNs();
  const int64_t deadline = start + timeout_ms * 1'000'000;
  int64_t next_async = start;
  int64_t sleep_us = kFirstSleepUs;
  for (;;) {
    const int64_t now = NowNs();
    const bool poll_async = now >= next_async;
    if (poll_async) next_async = now + kAsyncPollNs;
    const int32_t st = PollRequest(req, poll_async);
    if (st != PLEXUS_IN_PROGRESS) return st;
    if (now >= deadline) return PLEXUS_ERR_TIMEOUT;
    if (now - start < kSpinNs) {
      std::this_thread::yield();
      continue;
    }
    const int64_t left_us = (deadline - now) / 1000 + 1;
    std::this_thread::sleep_for(std::chrono::microseconds(std::min(sleep_us, left_us)));
    sleep_us = std::min(sleep_us * 3 / 2 + 1, kMaxSleepUs);
  }
}

}  // namespace plexus::nccl

plexus_request::~plexus_request() {
  if (core && event) core->ReleaseEvent(event);
}
