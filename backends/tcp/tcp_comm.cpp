#include "tcp_comm.hpp"

#include "frame.hpp"
#include "tcp_log.hpp"

namespace plexus::tcp {

TcpComm::TcpComm(const plexus_host_v1& host, uint32_t rank, uint32_t size, int64_t timeout_ms,
                 std::string name, std::unique_ptr<SocketTransport> transport)
    : host_(host),
      rank_(rank),
      size_(size),
      timeout_ms_(timeout_ms),
      name_(std::move(name)),
      transport_(std::move(transport)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

TcpComm::~TcpComm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  Abort();
  worker_.join();
}

void TcpComm::Complete(plexus_request* req, int32_t status) {
  {
    std::lock_guard<std::mutex> lock(req->mutex);
    req->status = status;
  }
  req->done_cv.notify_all();
}

int32_t TcpComm::Post(algos::OpSignature sig, OpBody body, plexus_request** req) {
  auto* r = new (std::nothrow) plexus_request;
  if (!r) {
    SetError("out of memory posting " + DescribeOp(sig));
    return PLEXUS_ERR_SYSTEM;
  }
  r->default_timeout_ms = timeout_ms_;
  std::lock_guard<std::mutex> lock(mutex_);
  sig.seq = next_seq_++;
  if (!broken_.ok()) {
    // Posting still succeeds so the caller gets the error from the request,
    // like every other failure of an operation that was accepted.
    r->status = broken_.code;
  } else {
    queue_.push_back({sig, std::move(body), r});
    queue_cv_.notify_one();
  }
  *req = r;
  return PLEXUS_OK;
}

void TcpComm::WorkerLoop() {
  for (;;) {
    PendingOp op;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queue_cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping, and nothing left to complete
      op = std::move(queue_.front());
      queue_.pop_front();
      if (!broken_.ok()) {
        lock.unlock();
        Complete(op.req, broken_.code);
        continue;
      }
    }
    algos::Status st = op.body(*transport_, op.sig);
    if (!st.ok()) {
      Log(host_, st.code == PLEXUS_ERR_ABORTED ? PLEXUS_LOG_INFO : PLEXUS_LOG_ERROR,
          name_ + " rank " + std::to_string(rank_) + ": " + st.message);
      if (st.code != PLEXUS_ERR_ABORTED) transport_->Fail(st.message);
      std::lock_guard<std::mutex> lock(mutex_);
      if (broken_.ok()) broken_ = st;
      last_error_ = st.message;
    }
    Complete(op.req, st.code);
  }
}

void TcpComm::Abort() {
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

void TcpComm::SetError(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_error_ = message;
}

size_t TcpComm::LastError(char* buf, size_t len) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buf && len > 0) {
    const size_t n = std::min(len - 1, last_error_.size());
    last_error_.copy(buf, n);
    buf[n] = '\0';
  }
  return last_error_.size();
}

}  // namespace plexus::tcp
