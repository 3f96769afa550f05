#include "plexus/work.hpp"

#include <algorithm>
#include <thread>

#include "comm_state.hpp"
#include "host_op.hpp"
#include "plexus/error.hpp"
#include "slurm_step_end.hpp"
#include "stall_report.hpp"

namespace plexus {
namespace {

// What notify_when_done hands the backend: the function, and a reference
// to the communicator that keeps it alive while the function runs.
struct Notified {
  std::shared_ptr<detail::CommState> comm;
  std::function<void()> done;
};

void RunNotified(Notified* n) noexcept {
  try {
    n->done();
  } catch (...) {  // (the contract says it does not throw; nothing may leave here)
  }
  n->done = nullptr;  // what it captured goes now
  // The last reference ends the communicator, whose backend then joins the
  // thread that runs this (its worker, or the two-level one): that end
  // happens on a thread of its own instead.
  std::shared_ptr<detail::CommState> comm = std::move(n->comm);
  delete n;
  if (comm.use_count() != 1) return;
  auto* last = new std::shared_ptr<detail::CommState>(std::move(comm));
  try {
    std::thread([last] { delete last; }).detach();
  } catch (...) {
    // No thread to be had: the communicator is left to the process's end,
    // which is better than joining this thread from itself.
  }
}

void RunNotifiedFromBackend(void* arg, int32_t /*status*/) {
  RunNotified(static_cast<Notified*>(arg));
}

}  // namespace

Work::Work(std::shared_ptr<detail::CommState> comm, plexus_request* request, const char* what,
           const detail::PostedOp& posted)
    : comm_(std::move(comm)), request_(request), what_(what), posted_(posted) {}

Work::Work(std::shared_ptr<detail::CommState> comm, std::shared_ptr<detail::HostOp> op,
           const char* what, const detail::PostedOp& posted)
    : comm_(std::move(comm)), host_op_(std::move(op)), what_(what), posted_(posted) {}

Work::Work(Work&& other) noexcept
    : comm_(std::move(other.comm_)),
      request_(std::exchange(other.request_, nullptr)),
      host_op_(std::move(other.host_op_)),
      after_(std::move(other.after_)),
      what_(other.what_),
      posted_(other.posted_) {}

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    this->~Work();
    new (this) Work(std::move(other));
  }
  return *this;
}

Work::~Work() {
  if (!request_) return;
  // Dropped without a wait: still marked finished in the flight recorder
  // when it ends, so that plexus-trace does not take it for a hang.
  const int32_t status = comm_->backend->Test(request_);
  if (status == PLEXUS_IN_PROGRESS) {
    comm_->AdoptOrphan(request_, posted_);  // still running: the communicator frees it later
  } else {
    comm_->FreeFinished(request_, posted_, status);
  }
}

std::string Work::StallReport() {
  if (!comm_->stall_reports) return "";
  const std::string report = detail::ReportStall(*comm_, posted_);
  return report.empty() ? "" : ": " + report;
}

void Work::Finish(int32_t code) {
  if (posted_.trace_slot) comm_->recorder->Finished(posted_, code);
  if (code == PLEXUS_OK) {  // (no strings built on the fast path)
    comm_->backend->FreeRequest(request_);
    request_ = nullptr;
    return;
  }
  comm_->failed = true;
  if (posted_.seq != 0) {
    std::lock_guard<std::mutex> lock(comm_->last_failed_mutex);
    comm_->last_failed = posted_;
  }
  if (code == PLEXUS_ERR_REMOTE || code == PLEXUS_ERR_TIMEOUT) {
    EndSlurmStepAfterExit(std::string(what_) + " failed");
  }
  Status st = comm_->backend->Describe(comm_->comm, code, what_ + (" on " + comm_->backend->name()),
                                       request_);
  comm_->backend->FreeRequest(request_);
  request_ = nullptr;
  if (st.ok()) return;
  std::string message = st.message();
  if (code == PLEXUS_ERR_TIMEOUT) {
    message += StallReport();
  } else {
    // Marked so that ranks timing out here do not blame this one; a rank
    // that posted something else may be why this failed.
    const std::string differ =
        comm_->stall_reports ? detail::MarkReached(*comm_, posted_, message) : "";
    if (!differ.empty()) message += " (" + differ + ")";
  }
  Traced(st.code(), message);
  throw Error(st.code(), comm_->backend->name(), message);
}

void Work::Traced(int32_t code, const std::string& message) {
  if (!posted_.trace_slot) return;
  comm_->recorder->Note(posted_, code, std::string(what_) + ": " + message);
  detail::DumpTraces(code == PLEXUS_ERR_TIMEOUT ? "timeout" : "failure");
}

// A host operation (two-level allreduce) runs on the communicator's own
// thread, which keeps it alive when its Work is dropped; its sub-operations
// time out by themselves and their errors say which rank stopped.
void Work::FinishHostOp(int32_t code) {
  std::shared_ptr<detail::HostOp> op = std::move(host_op_);
  if (posted_.trace_slot) comm_->recorder->Finished(posted_, code);
  if (code == PLEXUS_OK) return;
  comm_->failed = true;
  if (code == PLEXUS_ERR_REMOTE || code == PLEXUS_ERR_TIMEOUT) {
    EndSlurmStepAfterExit(std::string(what_) + " failed");
  }
  const std::string message = op->Message();
  Traced(code, message);
  throw Error(code, comm_->backend->name(), message);
}

bool Work::TestHostOp() {
  const int32_t rc = host_op_->Test();
  if (rc == PLEXUS_IN_PROGRESS) return false;
  FinishHostOp(rc);
  return true;
}

void Work::WaitHostOp(std::chrono::milliseconds timeout) {
  const auto limit = timeout.count() < 0 ? comm_->timeout : timeout;
  const bool full_wait = limit >= comm_->timeout;
  // Each of its (at most three) parts waits up to the timeout and then says
  // which rank it waited for; operations queued behind a failed one fail at
  // once. A full wait waits for that message rather than say less.
  int32_t rc = host_op_->Wait(full_wait ? 3 * limit + std::chrono::seconds(2) : limit);
  if (rc == PLEXUS_IN_PROGRESS) {
    const std::string message = std::string(what_) + " on rank " + std::to_string(comm_->rank) +
                                " did not complete within " + std::to_string(limit.count()) +
                                " ms (still pending; wait again or abort)";
    if (full_wait) {
      comm_->failed = true;
      Traced(PLEXUS_ERR_TIMEOUT, message);
    }
    throw Error(PLEXUS_ERR_TIMEOUT, comm_->backend->name(), message);
  }
  FinishHostOp(rc);
}

// Not for a two-level operation: its worker runs the host's operations one
// after the other, so a done that waited for the next would wait for itself.
bool Work::can_notify() const {
  return !host_op_ && !after_ && (!request_ || comm_->backend->HasNotify());
}

bool Work::notify_when_done(std::function<void()> done) {
  if (host_op_ || after_) return false;
  if (!request_) {
    done();
    return true;
  }
  if (!comm_->backend->HasNotify()) return false;
  auto* n = new Notified{comm_, std::move(done)};
  if (comm_->backend->Notify(request_, RunNotifiedFromBackend, n) != PLEXUS_OK) {
    delete n;
    return false;
  }
  return true;
}

bool Work::test() {
  if (after_) {
    if (after_->Test() == PLEXUS_IN_PROGRESS) return false;
    after_.reset();
  }
  if (host_op_) return TestHostOp();
  if (!request_) return true;
  const int32_t rc = comm_->backend->Test(request_);
  if (rc == PLEXUS_IN_PROGRESS) return false;
  Finish(rc);
  return true;
}

// Waits for the two-level operation posted before this one (its own Work
// reports how it ended).
void Work::WaitAfter(std::chrono::milliseconds timeout) {
  const auto limit = timeout.count() < 0 ? comm_->timeout : timeout;
  const bool full_wait = limit >= comm_->timeout;
  if (after_->Wait(full_wait ? 3 * limit + std::chrono::seconds(2) : limit) == PLEXUS_IN_PROGRESS) {
    throw Error(PLEXUS_ERR_TIMEOUT, comm_->backend->name(),
                std::string(what_) + " on rank " + std::to_string(comm_->rank) +
                    " did not complete within " + std::to_string(limit.count()) +
                    " ms: the two-level operation posted before it is still running");
  }
  after_.reset();
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (after_) WaitAfter(timeout);
  if (host_op_) return WaitHostOp(timeout);
  if (!request_) return;
  const auto limit = timeout.count() < 0 ? comm_->timeout : timeout;
  int32_t rc = comm_->backend->Wait(request_, limit.count());
  if (rc == PLEXUS_ERR_TIMEOUT) {
    // Either the wait ran out (request still pending) or the operation
    // itself failed with TIMEOUT; test() tells which.
    rc = comm_->backend->Test(request_);
    // A backend times its operations out by the same PLEXUS_TIMEOUT, a moment
    // after this wait started; its own error names the peer it waited for, so
    // give it that moment before saying less.
    const bool full_wait = limit >= comm_->timeout;
    if (rc == PLEXUS_IN_PROGRESS && full_wait) {
      const auto extra = std::min(limit / 10, std::chrono::milliseconds(500));
      rc = comm_->backend->Wait(request_, extra.count());
      if (rc == PLEXUS_ERR_TIMEOUT) rc = comm_->backend->Test(request_);
    }
    if (rc == PLEXUS_IN_PROGRESS) {
      // A short wait (polling) is the caller's business; a full one is a failure.
      if (full_wait) {
        comm_->failed = true;
        EndSlurmStepAfterExit(std::string(what_) + " timed out");
      }
      const std::string message = std::string(what_) + " on rank " + std::to_string(comm_->rank) +
                                  " did not complete within " + std::to_string(limit.count()) +
                                  " ms (still pending; wait again or abort)" +
                                  (full_wait ? StallReport() : std::string());
      if (full_wait) Traced(PLEXUS_ERR_TIMEOUT, message);
      throw Error(PLEXUS_ERR_TIMEOUT, comm_->backend->name(), message);
    }
  }
  Finish(rc);
}

}  // namespace plexus
