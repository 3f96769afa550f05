// The worker thread of one communicator (see ucx_comm.hpp for the why).
//
// Every request the worker takes from the queue is completed exactly once,
// whatever happens: an exception from an algorithm (plexus-algos allocates
// scratch memory, which can throw std::bad_alloc) becomes an error status,
// never a crash or an exception through the ABI.
#include "ucx_comm.hpp"

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
  op.req = r;
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
      queue_cv_.notify_one();
    }
  }
  transport_->Wake();  // a worker driving point-to-point traffic picks it up
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
    (void)RunP2P(std::move(op));
    return;
  }
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

void UcxComm::WorkerLoop() {
  for (;;) {
    PendingOp op;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queue_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping, and nothing left to complete
      op = std::move(queue_.front());
      queue_.pop_front();
      if (!broken_.ok()) {
        const algos::Status broken = broken_;
        lock.unlock();
        Complete(op.req, broken.code, broken.message);
        continue;
      }
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
