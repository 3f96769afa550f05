// The worker of one communicator (see uds_comm.hpp for the why).
//
// Two rules keep it simple. Only the worker thread touches the transport's
// queues, so the transport needs no lock; other threads reach it only through
// Wake() and Abort(), which write to eventfds. And every request the worker
// takes from the queue is completed exactly once, whatever happens: an
// exception from an algorithm (plexus-algos allocates scratch memory, which
// can throw std::bad_alloc) becomes an error status, never a crash.
#include "uds_comm.hpp"

#include <list>
#include <new>

#include "plexus/algos/dtype.hpp"

namespace uds {

namespace {

void Complete(plexus_request* req, const Status& st) {
  std::lock_guard<std::mutex> lock(req->mutex);
  req->status = st.code;
  if (!st.ok()) req->error = st.message;
  // Notify under the lock: once a waiter sees the status it may free req.
  req->done.notify_all();
}

}  // namespace

UdsComm::UdsComm(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                 std::unique_ptr<UdsTransport> transport)
    : host_(host),
      rank_(config.rank),
      timeout_ms_(config.timeout_ms),
      name_(config.name),
      transport_(std::move(transport)),
      sent_to_(config.size),
      received_from_(config.size) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

UdsComm::~UdsComm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  Abort();  // the running operation stops at once; queued ones fail ABORTED
  worker_.join();
}

int32_t UdsComm::Post(OpSignature sig, OpBody body, void* p2p_buf, plexus_request** req_out) {
  auto req = std::make_unique<plexus_request>();
  req->default_wait_ms = timeout_ms_;
  Op op{sig, std::move(body), req.get(), {}};
  const bool p2p = sig.coll == PLEXUS_COLL_SEND || sig.coll == PLEXUS_COLL_RECV;
  if (p2p) {
    op.transfer = {sig.coll == PLEXUS_COLL_SEND,
                   sig.root,
                   {},
                   static_cast<uint8_t*>(p2p_buf),
                   sig.count * plexus::algos::DtypeSize(sig.dtype)};
    // Both ends describe the message as a send from its sender, so the
    // receiver can check count and dtype against its own call.
    op.sig = {0, PLEXUS_COLL_SEND, sig.dtype, 0, sig.count, op.transfer.is_send ? rank_ : sig.root};
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.ok()) {
      last_error_ = std::string("cannot post ") + plexus::algos::CollectiveName(sig.coll) +
                    ": the communicator is broken: " + broken_.message;
      return broken_.code;
    }
    // Collectives are numbered per communicator, messages per peer and direction.
    op.sig.seq = !p2p ? next_seq_++ : (op.transfer.is_send ? sent_to_ : received_from_)[sig.root]++;
    op.transfer.sig = op.sig;
    queue_.push_back(std::move(op));
  }
  queue_cv_.notify_one();
  if (p2p) transport_->Wake();  // a worker driving send/recv takes it in at once
  *req_out = req.release();
  return PLEXUS_OK;
}

// Runs the send/recv at the head of the queue together with every send/recv
// posted behind it, until none is left in flight. All of them move at once
// (a rank may post a send and a recv to the same peer and then wait), but
// requests complete in posting order, as the ABI promises.
Status UdsComm::RunP2P(Op first) {
  std::list<Op> active;  // a list: Transfer addresses must not move
  Status st;
  try {
    active.push_back(std::move(first));
    transport_->Post(&active.back().transfer);
    while (st.ok() && !active.empty()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        while (!queue_.empty() && !queue_.front().body && broken_.ok()) {
          active.push_back(std::move(queue_.front()));
          queue_.pop_front();
          transport_->Post(&active.back().transfer);
        }
      }
      st = transport_->Drive([&] { return active.front().transfer.complete; });
      while (st.ok() && !active.empty() && active.front().transfer.complete) {
        Complete(active.front().req, st);
        active.pop_front();
      }
    }
  } catch (const std::exception& e) {
    st = {PLEXUS_ERR_INTERNAL, std::string("send/recv: ") + e.what()};
  }
  if (!st.ok()) RecordFailure(st);
  for (Op& op : active) Complete(op.req, st);
  return st;
}

void UdsComm::WorkerLoop() {
  for (;;) {
    Op op;
    Status broken;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to complete
      op = std::move(queue_.front());
      queue_.pop_front();
      broken = broken_;
    }
    if (!broken.ok()) {
      Complete(op.req, broken);
    } else if (!op.body) {
      RunP2P(std::move(op));
    } else {
      Status st;
      try {
        st = op.body(*transport_, op.sig);
      } catch (const std::bad_alloc&) {
        st = {PLEXUS_ERR_SYSTEM, "out of memory in " + DescribeOp(op.sig)};
      } catch (const std::exception& e) {
        st = {PLEXUS_ERR_INTERNAL, DescribeOp(op.sig) + ": " + e.what()};
      }
      if (!st.ok()) RecordFailure(st);
      Complete(op.req, st);
    }
  }
}

void UdsComm::RecordFailure(const Status& st) {
  const bool aborted = st.code == PLEXUS_ERR_ABORTED;
  Log(host_, aborted ? PLEXUS_LOG_INFO : PLEXUS_LOG_ERROR,
      name_ + " rank " + std::to_string(rank_) + ": " + st.message);
  if (!aborted) transport_->Fail(st.message);  // abort is local: it leaves the peers alone
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_.ok()) broken_ = st;
  last_error_ = st.message;
}

void UdsComm::Abort() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.ok()) {
      broken_ = {PLEXUS_ERR_ABORTED, "communicator " + name_ + " was aborted"};
      last_error_ = broken_.message;
    }
  }
  transport_->Abort();
  queue_cv_.notify_all();
}

int32_t UdsComm::Reject(int32_t code, const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  last_error_ = message;
  return code;
}

size_t UdsComm::LastError(char* buf, size_t len) {
  std::lock_guard<std::mutex> lock(mutex_);
  CopyOut(last_error_, buf, len);
  return last_error_.size();
}

void CopyOut(const std::string& s, char* buf, size_t len) {
  if (!buf || len == 0) return;
  const size_t n = std::min(len - 1, s.size());
  s.copy(buf, n);
  buf[n] = '\0';
}

}  // namespace uds
