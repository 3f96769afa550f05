#include "mpi_one_host.hpp"

#include <string>
#include <utility>

#include "mpi_requests.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/kit/worker_policy.hpp"

namespace plexus::mpi {

algos::Status OneHostRunner::Create(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                                    std::unique_ptr<OneHostRunner>* out, std::string* why_not) {
  kit::OneHostShmOptions options;
  options.backend = "mpi";
  std::unique_ptr<kit::OneHostShm> shm;
  algos::Status st = kit::OneHostShm::Create(host, config, options, &shm, why_not);
  if (!st.ok() || !shm) return st;
  *out = std::unique_ptr<OneHostRunner>(new OneHostRunner(std::move(shm)));
  return {};
}

OneHostRunner::OneHostRunner(std::unique_ptr<kit::OneHostShm> shm)
    : shm_(std::move(shm)), thread_(&OneHostRunner::Loop, this) {}

OneHostRunner::~OneHostRunner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  shm_->Abort();  // a job still waiting for peers ends now, ABORTED
  cv_.notify_all();
  thread_.join();
}

void OneHostRunner::Post(plexus_request* req, const algos::OpSignature& sig, const void* send,
                         void* recv) {
  bool idle;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back({req, sig, send, recv});
    idle = !running_;
  }
  if (idle) cv_.notify_all();
}

int32_t OneHostRunner::Wait(plexus_request* req, int64_t timeout_ms) {
  auto done = [&] { return req->status.load(std::memory_order_acquire) != PLEXUS_IN_PROGRESS; };
  if (done()) return req->status.load(std::memory_order_acquire);
  const bool inline_ok = timeout_ms >= req->comm->timeout_ms && req->bytes <= kInlineMaxBytes;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (done()) return req->status.load(std::memory_order_acquire);
    // Only a wait as long as the communicator's own runs it here (as the
    // kit's OpQueue): the allreduce blocks until every rank has come, which
    // a shorter wait, or a wait(0) that is a test, must not.
    if (inline_ok && !running_ && !jobs_.empty() && jobs_.front().req == req) {
      const Job job = jobs_.front();
      jobs_.pop_front();
      running_ = true;
      lock.unlock();
      return Run(job);  // (req may be freed once its status is out)
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !done()) {
      return PLEXUS_ERR_TIMEOUT;
    }
  }
}

void OneHostRunner::Loop() {
  bool waiting_policy = false;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      auto ready = [&] { return !running_ && (stop_ || !jobs_.empty()); };
      if (!ready() && !waiting_policy) {
        lock.unlock();
        kit::SetWorkerWaitingPolicy(true);  // so a waiting caller runs a small job itself
        waiting_policy = true;
        lock.lock();
      }
      cv_.wait(lock, ready);
      if (jobs_.empty()) return;  // stopping, nothing left
      job = jobs_.front();
      jobs_.pop_front();
      running_ = true;
    }
    if (waiting_policy) {
      kit::SetWorkerWaitingPolicy(false);
      waiting_policy = false;
    }
    Run(job);
  }
}

int32_t OneHostRunner::Run(const Job& job) {
  plexus_request* req = job.req;
  plexus_comm* comm = req->comm;
  algos::Status st;
  try {
    if (!failed_.ok()) {
      st = {failed_.code, "mpi over shared memory: an earlier collective failed on this rank (" +
                              failed_.message + ")"};
    } else if (comm->aborted.load()) {
      st = {PLEXUS_ERR_ABORTED, "mpi " + std::string(algos::CollectiveName(job.sig.coll)) +
                                    ": the communicator " + comm->name + " was aborted"};
    } else {
      st = shm_->Run(job.sig, job.send, job.recv);
      if (!st.ok()) {
        failed_ = st;
        shm_->Fail(st);  // the peers waiting for this rank fail at once, with its reason
        comm->Break(st.code, st.message);
      }
    }
    // A peer that made no progress, exited or gave up on one (anything but
    // a mismatch or an abort) may never reach MPI_Finalize either.
    if (st.code == PLEXUS_ERR_TIMEOUT ||
        (st.code == PLEXUS_ERR_REMOTE &&
         st.message.find("collective mismatch") == std::string::npos)) {
      comm->ctx->one_host_lost_peer.store(true);
    }
    if (!st.ok()) comm->SetError(st.message);  // before the status, which ends the request
  } catch (...) {  // (strings: bad_alloc) the request completes whatever happens
    st = {PLEXUS_ERR_INTERNAL, ""};
  }
  const int32_t status = st.ok() ? PLEXUS_OK : st.code;
  {
    std::lock_guard<std::mutex> lock(req->mutex);
    // The last touch of req: once the status is out, its owner may free it.
    req->status.store(status, std::memory_order_release);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
  }
  cv_.notify_all();
  return status;
}

}  // namespace plexus::mpi
