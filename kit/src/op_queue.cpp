// The operation queue (see op_queue.hpp for the why).
//
// Every request the queue accepts is completed exactly once, whatever
// happens: an exception from an algorithm (plexus-algos allocates scratch
// memory, which can throw std::bad_alloc) becomes an error status, never a
// crash or an exception through the ABI.
#include "plexus/kit/op_queue.hpp"
#include "plexus/kit/worker_policy.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <list>
#include <new>

#include "plexus/algos/describe.hpp"
#include "plexus/algos/dtype.hpp"

namespace plexus::kit {

OpQueue::OpQueue(const plexus_host_v1& host, QueueTransport& transport, OpQueueOptions options,
                 std::unique_ptr<OneHostShm> one_host_shm)
    : host_(host),
      transport_(transport),
      options_(std::move(options)),
      one_host_shm_(std::move(one_host_shm)),
      sent_to_(options_.size),
      received_from_(options_.size) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

OpQueue::~OpQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  Abort();
  worker_.join();
}

OpQueue::Notification OpQueue::Complete(plexus_request* req, const algos::Status& st) {
  std::lock_guard<std::mutex> lock(req->mutex);
  if (!st.ok()) req->error = st.message;
  req->status.store(st.code, std::memory_order_release);
  // Under the lock: req is freed only under its mutex, after this (op_queue.hpp).
  if (req->waiters > 0) req->done_cv.notify_all();
  Notification n{req->notify, req->notify_arg, st.code};
  req->notify = nullptr;
  return n;
}

void OpQueue::CompleteInRun(plexus_request* req, const algos::Status& st) {
  Notification n = Complete(req, st);
  if (n.done) notifications_.push_back(n);
}

int32_t OpQueue::Enqueue(PendingOp op, plexus_request** req) {
  auto* r = new (std::nothrow) plexus_request;
  if (!r) {
    errors_.Set(std::string(options_.backend) + " " + algos::DescribeOp(op.sig) +
                ": out of memory for the request");
    return PLEXUS_ERR_SYSTEM;
  }
  r->default_timeout_ms = options_.timeout_ms;
  r->queue = this;
  op.req = r;
  bool wake_transport = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.code == PLEXUS_ERR_ABORTED) {
      // The ABI: posts after comm_abort fail at once, nothing posted.
      errors_.Set(std::string(options_.backend) + " " + algos::DescribeOp(op.sig) +
                  ": the communicator " + options_.name + " was aborted; posts after abort fail");
      delete r;
      return PLEXUS_ERR_ABORTED;
    }
    if (!broken_.ok()) {
      // Posting still succeeds so the caller gets the error from the
      // request, like every other failure of an operation that was accepted.
      r->status = broken_.code;
      r->error = "the communicator is broken by an earlier failure: " + broken_.message;
    } else {
      if (op.kind == Kind::kMessage) {
        uint64_t& counter =
            op.message->is_send ? sent_to_[op.message->peer] : received_from_[op.message->peer];
        op.sig.seq = counter++;
        op.message->sig = op.sig;
      } else {
        op.sig.seq = next_seq_++;
      }
      queue_.push_back(std::move(op));
      // The worker waits for queued work only while nothing runs; when an
      // operation runs, its end wakes the worker if work is left.
      if (!running_) queue_cv_.notify_one();
      // Only RunMessages takes in posts while it drives the transport; a
      // collective would just return from Drive and start over.
      wake_transport = running_messages_;
    }
  }
  if (wake_transport) transport_.Wake();
  *req = r;
  return PLEXUS_OK;
}

int32_t OpQueue::Post(algos::OpSignature sig, OpBody body, plexus_request** req) {
  PendingOp op;
  op.kind = body ? Kind::kCollective : Kind::kNothing;
  op.sig = sig;
  op.body = std::move(body);
  return Enqueue(std::move(op), req);
}

int32_t OpQueue::PostMessage(bool is_send, uint32_t peer, void* data, uint64_t count,
                             plexus_dtype_t dtype, plexus_request** req) {
  PendingOp op;
  op.kind = Kind::kMessage;
  // Both directions describe the message as a send from its sender, so the
  // receiver can check count and dtype against its own call, and errors on
  // either side read the same.
  op.sig = {0, PLEXUS_COLL_SEND, dtype, 0, count, is_send ? options_.rank : peer};
  op.message = transport_.NewMessage();
  op.message->is_send = is_send;
  op.message->peer = peer;
  op.message->data = static_cast<uint8_t*>(data);
  op.message->bytes = count * algos::DtypeSize(dtype);
  return Enqueue(std::move(op), req);
}

void OpQueue::RecordFailure(const algos::OpSignature& sig, const algos::Status& st) {
  const bool aborted = st.code == PLEXUS_ERR_ABORTED;
  if (host_.log) {
    const std::string line =
        options_.name + " rank " + std::to_string(options_.rank) + ": " + st.message;
    host_.log(host_.ctx, aborted ? PLEXUS_LOG_INFO : PLEXUS_LOG_ERROR, line.c_str());
  }
  if (!aborted) {  // abort is local: it leaves the peers alone
    transport_.Fail(sig, st);
    if (one_host_shm_) one_host_shm_->Fail(st);
  }
  errors_.Set(st.message);
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_.ok()) broken_ = st;
}

void OpQueue::RunMessages(PendingOp first) {
  std::list<PendingOp> active;  // a list: the Messages' owners must not move
  algos::Status st;
  auto start = [&](PendingOp op) {
    active.push_back(std::move(op));
    algos::Status posted = transport_.PostMessage(active.back().message.get());
    if (!posted.ok() && st.ok()) st = posted;
  };
  transport_.StartClock();
  try {
    start(std::move(first));
    while (st.ok() && !active.empty()) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        while (!queue_.empty() && queue_.front().kind == Kind::kMessage && broken_.ok() &&
               st.ok()) {
          start(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      if (!st.ok()) break;
      // Requests complete in posting order: only the oldest ones that are done.
      while (!active.empty() && active.front().message->complete) {
        CompleteInRun(active.front().req, {});
        active.pop_front();
      }
      if (active.empty()) break;
      st = transport_.Drive([&] { return active.front().message->complete; });
    }
  } catch (const std::bad_alloc&) {
    st = {PLEXUS_ERR_SYSTEM, std::string(options_.backend) + " send/recv: out of memory"};
  } catch (const std::exception& e) {
    st = {PLEXUS_ERR_INTERNAL, std::string(options_.backend) + " send/recv: " + e.what()};
  }
  if (!st.ok()) {
    transport_.Cancel();
    RecordFailure(active.empty() ? algos::OpSignature{} : active.front().sig, st);
    for (PendingOp& a : active) CompleteInRun(a.req, st);
  }
}

void OpQueue::ExecuteCollective(PendingOp& op) {
  algos::Status st;
  if (one_host_shm_) one_host_shm_->Announce(op.sig);
  try {
    st = op.body(OpProviders{transport_, one_host_shm_.get()}, op.sig);
  } catch (const std::bad_alloc&) {
    st = {PLEXUS_ERR_SYSTEM, std::string(options_.backend) + " " + algos::DescribeOp(op.sig) +
                                 ": out of memory for the algorithm's scratch buffers"};
  } catch (const std::exception& e) {
    st = {PLEXUS_ERR_INTERNAL,
          std::string(options_.backend) + " " + algos::DescribeOp(op.sig) + ": " + e.what()};
  }
  if (!st.ok()) {
    transport_.Cancel();
    RecordFailure(op.sig, st);
  }
  CompleteInRun(op.req, st);
}

void OpQueue::Execute(PendingOp op) {
  switch (op.kind) {
    case Kind::kMessage: {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        running_messages_ = true;
      }
      RunMessages(std::move(op));
      break;
    }
    case Kind::kCollective:
      ExecuteCollective(op);
      break;
    case Kind::kNothing:
      CompleteInRun(op.req, {});
      break;
  }
  bool more;
  std::vector<Notification> notify;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
    running_messages_ = false;
    more = !queue_.empty() || stopping_;
    notify.swap(notifications_);
  }
  // The worker waits for queued work or, when stopping, for this operation
  // to end; otherwise waking it would only cost it (and, on a shared core,
  // this thread) a switch.
  if (more) queue_cv_.notify_all();
  for (const Notification& n : notify) n.Fire();
}

bool OpQueue::TakeFront(std::unique_lock<std::mutex>& lock, PendingOp* op) {
  *op = std::move(queue_.front());
  queue_.pop_front();
  if (!broken_.ok()) {
    const algos::Status broken = broken_;
    lock.unlock();
    Complete(op->req, broken).Fire();
    return false;
  }
  running_ = true;
  return true;
}

bool OpQueue::RunOnWorkerUntil(plexus_request* req, int64_t timeout_ms) {
  if (std::this_thread::get_id() != worker_.get_id()) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (req->status.load(std::memory_order_acquire) == PLEXUS_IN_PROGRESS) {
    PendingOp op;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Another thread may be running one inline; its end wakes this one.
      if (running_ || queue_.empty()) {
        if (queue_cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                              std::chrono::milliseconds(1))) ==
                std::cv_status::timeout &&
            std::chrono::steady_clock::now() >= deadline) {
          return true;
        }
        continue;
      }
      if (!TakeFront(lock, &op)) continue;
    }
    Execute(std::move(op));
  }
  return true;
}

void OpQueue::RunInlineIfNext(plexus_request* req) {
  PendingOp op;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (running_ || queue_.empty() || queue_.front().req != req || !broken_.ok()) return;
    // Larger operations stay with the worker, as the backend chose
    // (inline_max_bytes: where its hand-off is small beside them, or its
    // transport runs better on the thread that makes progress; tcp runs
    // every size inline, see docs/benchmarks.md).
    const algos::OpSignature& sig = queue_.front().sig;
    if (sig.count * algos::DtypeSize(sig.dtype) > options_.inline_max_bytes) return;
    op = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
  }
  Execute(std::move(op));
}

// (worker_policy.hpp says why.)
void SetWorkerWaitingPolicy(bool waiting) {
  sched_param param{};
  (void)pthread_setschedparam(pthread_self(), waiting ? SCHED_BATCH : SCHED_OTHER, &param);
}

void OpQueue::WorkerLoop() {
  bool waiting_policy = false;
  for (;;) {
    PendingOp op;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Operations run one at a time, in order, whichever thread runs them.
      auto ready = [&] { return (!queue_.empty() && !running_) || stopping_; };
      if (!ready() && !waiting_policy) {
        lock.unlock();
        SetWorkerWaitingPolicy(true);
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
      if (!TakeFront(lock, &op)) continue;
    }
    if (waiting_policy) {
      SetWorkerWaitingPolicy(false);
      waiting_policy = false;
    }
    Execute(std::move(op));
  }
}

void OpQueue::Abort() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (broken_.ok()) {
      broken_ = {PLEXUS_ERR_ABORTED, "communicator " + options_.name + " was aborted"};
      errors_.Set(broken_.message);
    }
  }
  transport_.Abort();
  if (one_host_shm_) one_host_shm_->Abort();
  queue_cv_.notify_all();
}

// --- requests ---------------------------------------------------------------

int32_t QueuedRequests::Test(plexus_request& req) {
  return req.status.load(std::memory_order_acquire);
}

int32_t QueuedRequests::Wait(plexus_request& req, int64_t timeout_ms) {
  if (timeout_ms < 0) timeout_ms = req.default_timeout_ms;
  timeout_ms = std::min<int64_t>(timeout_ms, int64_t(1) << 40);  // no overflow in wait_for
  // An operation run on this thread cannot be left when the wait's own time
  // is up, so only a wait as long as the operation's deadline runs it here.
  // A request still in progress belongs to a live queue (comm_destroy
  // completes every pending one), so req.queue is only used then.
  int32_t status = req.status.load(std::memory_order_acquire);
  if (status == PLEXUS_IN_PROGRESS && timeout_ms >= req.default_timeout_ms && req.queue) {
    req.queue->RunInlineIfNext(&req);
    status = req.status.load(std::memory_order_acquire);
  }
  if (status != PLEXUS_IN_PROGRESS) return status;  // (typically: run inline just now)
  // The worker, waiting inside a request_notify function, would wait for itself.
  if (req.queue && req.queue->RunOnWorkerUntil(&req, timeout_ms)) {
    status = req.status.load(std::memory_order_acquire);
    return status != PLEXUS_IN_PROGRESS ? status : PLEXUS_ERR_TIMEOUT;
  }
  std::unique_lock<std::mutex> lock(req.mutex);
  ++req.waiters;
  const bool done = req.done_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
    return req.status.load(std::memory_order_acquire) != PLEXUS_IN_PROGRESS;
  });
  --req.waiters;
  return done ? req.status.load(std::memory_order_acquire) : PLEXUS_ERR_TIMEOUT;
}

int32_t QueuedRequests::Free(plexus_request* req) {
  {
    std::lock_guard<std::mutex> lock(req->mutex);
    if (req->status == PLEXUS_IN_PROGRESS) return PLEXUS_ERR_INVALID_USAGE;
  }
  delete req;
  return PLEXUS_OK;
}

size_t QueuedRequests::Error(plexus_request& req, char* buf, size_t len) {
  std::lock_guard<std::mutex> lock(req.mutex);
  CopyOut(req.error, buf, len);
  return req.error.size();
}

int32_t QueuedRequests::Notify(plexus_request& req, void (*done)(void* arg, int32_t status),
                               void* arg) {
  if (!done) return PLEXUS_ERR_INVALID_ARGUMENT;
  int32_t status;
  {
    std::lock_guard<std::mutex> lock(req.mutex);
    if (req.notify_asked) return PLEXUS_ERR_INVALID_USAGE;
    req.notify_asked = true;
    status = req.status.load(std::memory_order_acquire);
    if (status == PLEXUS_IN_PROGRESS) {
      req.notify = done;
      req.notify_arg = arg;
      return PLEXUS_OK;
    }
  }
  done(arg, status);  // complete already: here, now
  return PLEXUS_OK;
}

int32_t QueueMemAlloc(OpQueue& queue, uint64_t bytes, void** ptr_out) {
  OneHostShm* shm = queue.one_host_shm();
  if (!shm) {
    queue.errors().Set(std::string(queue.options().backend) +
                       " mem_alloc: no shared memory on this communicator (its ranks are not all "
                       "on this host, or PLEXUS_SHM=off)");
    return PLEXUS_ERR_UNSUPPORTED;
  }
  algos::Status st = shm->MemAlloc(bytes, ptr_out);
  if (!st.ok()) queue.errors().Set(st.message);
  return st.code;
}

int32_t QueueMemFree(OpQueue& queue, void* ptr) {
  OneHostShm* shm = queue.one_host_shm();
  algos::Status st = shm ? shm->MemFree(ptr)
                         : algos::Status{PLEXUS_ERR_INVALID_ARGUMENT,
                                         std::string(queue.options().backend) +
                                             " mem_free: this communicator has no shared memory"};
  if (!st.ok()) queue.errors().Set(st.message);
  return st.code;
}

}  // namespace plexus::kit
