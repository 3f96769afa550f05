// The worker thread of one communicator (see ucx_comm.hpp for the why).
//
// Every request the worker takes from the queue is completed exactly once,
// whatever happens: an exception from an algorithm (plexus-algos allocates
// scratch memory, which can throw std::bad_alloc) becomes an error status,
// never a crash or an exception through the ABI.
#include "ucx_comm.hpp"

#include <pthread.h>
#include <sched.h>

#include <list>
#include <new>

#include "plexus/algos/dtype.hpp"

namespace plexus::ucx {

UcxComm::UcxComm(const plexus_host_v1& host, uint32_t rank, uint32_t size, int64_t timeout_ms,
                 std::string name, std::unique_ptr<UcxTransport> transport)
    : host_(host),
      rank_(rank),
      size_(size),
      timeout_ms_(timeout_ms),
      name_(std::move(name)),
      transport_(std::move(transport)),
      sends_to_(size),
      recvs_from_(size) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

UcxComm::~UcxComm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  Abort();
  worker_.join();
  transport_.reset();  // the worker thread is gone: this thread may close the ucp_worker
}

void UcxComm::Complete(plexus_request* req, int32_t status, const std::string& error) {
  std::lock_guard<std::mutex> lock(req->mutex);
  req->status = status;
  if (status != PLEXUS_OK) req->error = error;
  // Notify under the lock: once a waiter sees the status it may free req.
  req->done_cv.notify_all();
}

int32_t UcxComm::Enqueue(PendingOp op, plexus_request** req) {
  auto* r = new (std::nothrow) plexus_request;
  if (!r) {
    SetError("out of memory posting " + DescribeOp(op.sig));
    return PLEXUS_ERR_SYSTEM;
  }
  r->default_timeout_ms = timeout_ms_;
  r->comm = this;
  op.req = r;
  bool wake_transport = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.code == PLEXUS_ERR_ABORTED) {
      // The ABI: posts after comm_abort fail at once, nothing posted.
      last_error_ = "ucx " + DescribeOp(op.sig) + ": the communicator " + name_ +
                    " was aborted; posts after abort fail";
      delete r;
      return PLEXUS_ERR_ABORTED;
    } else if (!broken_.ok()) {
      // Posting still succeeds so the caller gets the error from the
      // request, like every other failure of an operation that was accepted.
      r->status = broken_.code;
      r->error = "the communicator is broken by an earlier failure: " + broken_.message;
    } else {
      const bool p2p = !op.body;
      if (p2p) {
        uint64_t& counter =
            op.transfer.is_send ? sends_to_[op.transfer.peer] : recvs_from_[op.transfer.peer];
        op.sig.seq = counter++;
      } else {
        op.sig.seq = next_seq_++;
      }
      queue_.push_back(std::move(op));
      // The worker waits for queued work only while nothing runs; when an
      // operation runs, its end wakes the worker if work is left.
      if (!running_) queue_cv_.notify_one();
      wake_transport = running_p2p_;
    }
  }
  // Only RunP2P takes in posts while it drives the transport; a collective's
  // Drive would just return and start over, two wasted system calls.
  if (wake_transport) transport_->Wake();
  *req = r;
  return PLEXUS_OK;
}

int32_t UcxComm::Post(algos::OpSignature sig, OpBody body, plexus_request** req) {
  PendingOp op;
  op.sig = sig;
  op.body = std::move(body);
  return Enqueue(std::move(op), req);
}

int32_t UcxComm::PostP2P(bool is_send, uint32_t peer, void* data, uint64_t count,
                         plexus_dtype_t dtype, plexus_request** req) {
  PendingOp op;
  // Both directions describe the message as a "send" from its sender, so
  // that errors on either side read the same.
  op.sig = {0, PLEXUS_COLL_SEND, dtype, 0, count, is_send ? rank_ : peer};
  op.transfer.is_send = is_send;
  op.transfer.peer = peer;
  op.transfer.data = static_cast<uint8_t*>(data);
  op.transfer.bytes = count * algos::DtypeSize(dtype);
  return Enqueue(std::move(op), req);
}

void UcxComm::RecordFailure(const algos::OpSignature& sig, const algos::Status& st) {
  Log(host_, st.code == PLEXUS_ERR_ABORTED ? PLEXUS_LOG_INFO : PLEXUS_LOG_ERROR,
      name_ + " rank " + std::to_string(rank_) + ": " + st.message);
  if (st.code != PLEXUS_ERR_ABORTED) transport_->Fail(sig, st);
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_.ok()) broken_ = st;
  last_error_ = st.message;
}

algos::Status UcxComm::RunP2P(PendingOp first) {
  std::list<PendingOp> active;  // a list: Transfer addresses must not move
  algos::Status st;
  auto start = [&](PendingOp op) {
    active.push_back(std::move(op));
    PendingOp& a = active.back();
    a.transfer.sig = a.sig;
    algos::Status posted = transport_->Post(&a.transfer);
    if (!posted.ok() && st.ok()) st = posted;
  };
  transport_->StartClock();
  try {
    start(std::move(first));
    while (st.ok() && !active.empty()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        while (!queue_.empty() && !queue_.front().body && broken_.ok() && st.ok()) {
          start(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      if (!st.ok()) break;
      // Requests complete in posting order: only the oldest ones that are done.
      while (!active.empty() && active.front().transfer.complete) {
        Complete(active.front().req, PLEXUS_OK);
        active.pop_front();
      }
      if (active.empty()) break;
      st = transport_->Drive([&] { return active.front().transfer.complete; });
    }
  } catch (const std::bad_alloc&) {
    st = {PLEXUS_ERR_SYSTEM, "out of memory in send/recv"};
  } catch (const std::exception& e) {
    st = {PLEXUS_ERR_INTERNAL, std::string("send/recv: ") + e.what()};
  }
  if (!st.ok()) {
    transport_->Cancel();
    RecordFailure(active.empty() ? algos::OpSignature{} : active.front().sig, st);
    for (PendingOp& a : active) Complete(a.req, st.code, st.message);
  }
  return st;
}

void UcxComm::Execute(PendingOp op) {
  if (!op.body) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_p2p_ = true;
    }
    (void)RunP2P(std::move(op));
  } else {
    ExecuteCollective(std::move(op));
  }
  bool more;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    running_p2p_ = false;
    more = !queue_.empty() || stopping_;
  }
  // The worker waits for queued work or, when stopping, for this operation
  // to end; otherwise waking it would only cost it (and, on a shared core,
  // this thread) a switch.
  if (more) queue_cv_.notify_all();
}

void UcxComm::RunInlineIfNext(plexus_request* req) {
  PendingOp op;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_ || queue_.empty() || queue_.front().req != req || !broken_.ok()) return;
    // Larger operations stay with the worker: the hand-off is small beside
    // them, and the algorithms' scratch buffers are then allocated in the
    // worker's malloc arena, which keeps their pages from one operation to
    // the next, where the caller's main arena returns them to the kernel on
    // free and faults them back in. Measured on 2 ranks (shared memory):
    // run inline, a 128 KiB allreduce took 35-44 us instead of 52-61 us,
    // but a 256 KiB one 200-215 us instead of 83-85 us.
    const algos::OpSignature& sig = queue_.front().sig;
    if (sig.count * algos::DtypeSize(sig.dtype) > kInlineMaxBytes) return;
    op = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
  }
  Execute(std::move(op));
}

void UcxComm::ExecuteCollective(PendingOp op) {
  algos::Status st;
  // count == 0 completes without talking to peers (the ABI allows it); a
  // barrier always has count 0 and must synchronise.
  if (op.sig.count > 0 || op.sig.coll == PLEXUS_COLL_BARRIER) {
    try {
      st = op.body(*transport_, op.sig);
    } catch (const std::bad_alloc&) {
      st = {PLEXUS_ERR_SYSTEM, "out of memory in " + DescribeOp(op.sig)};
    } catch (const std::exception& e) {
      st = {PLEXUS_ERR_INTERNAL, DescribeOp(op.sig) + ": " + e.what()};
    }
    if (!st.ok()) {
      transport_->Cancel();
      RecordFailure(op.sig, st);
    }
  }
  Complete(op.req, st.code, st.message);
}

namespace {

// The worker thread waits for work as a SCHED_BATCH thread and runs it as a
// normal one (the TCP backend's recipe). A post wakes the waiting worker, but
// the kernel lets a woken batch thread run only when the posting thread
// blocks or its time slice ends, never by preempting it; so a caller that
// posts and then waits (a blocking allreduce) runs the operation itself
// without a switch to the worker and back, while a caller that goes on
// computing still has it run within a time slice. The nice value is
// unchanged, so the worker gets the same share of the CPU either way.
void SetWaitingPolicy(bool waiting) {
  sched_param param{};
  (void)pthread_setschedparam(pthread_self(), waiting ? SCHED_BATCH : SCHED_OTHER, &param);
}

}  // namespace

void UcxComm::WorkerLoop() {
  bool waiting_policy = false;
  for (;;) {
    PendingOp op;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Operations run one at a time, in order, whichever thread runs them.
      auto ready = [&] { return (!queue_.empty() && !running_) || stopping_; };
      if (!ready() && !waiting_policy) {
        lock.unlock();
        SetWaitingPolicy(true);
        waiting_policy = true;
        lock.lock();
      }
      queue_cv_.wait(lock, ready);
      if (stopping_) {
        // An operation running on a caller's thread ends first (abort has
        // been requested, so it ends within its bounded cancel).
        queue_cv_.wait(lock, [&] { return !running_; });
        if (queue_.empty()) return;  // nothing left to complete
      }
      op = std::move(queue_.front());
      queue_.pop_front();
      if (!broken_.ok()) {
        const algos::Status broken = broken_;
        lock.unlock();
        Complete(op.req, broken.code, broken.message);
        continue;
      }
      running_ = true;
    }
    if (waiting_policy) {
      SetWaitingPolicy(false);
      waiting_policy = false;
    }
    Execute(std::move(op));
  }
}

void UcxComm::Abort() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.ok()) {
      broken_ = algos::Status(PLEXUS_ERR_ABORTED, "communicator " + name_ + " was aborted");
      last_error_ = broken_.message;
    }
  }
  transport_->Abort();
  queue_cv_.notify_all();
}

void UcxComm::SetError(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_error_ = message;
}

size_t UcxComm::LastError(char* buf, size_t len) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buf && len > 0) {
    const size_t n = std::min(len - 1, last_error_.size());
    last_error_.copy(buf, n);
    buf[n] = '\0';
  }
  return last_error_.size();
}

}  // namespace plexus::ucx
