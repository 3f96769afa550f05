#include "work.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "plexus/error.hpp"

namespace plexus_torch {

namespace detail {

// What went wrong at run time (a dead peer, a timeout, a mismatch) reaches
// Python as torch.distributed.DistBackendError, like NCCL's and Gloo's.
std::exception_ptr BackendError(const std::string& message) {
  try {
    C10_THROW_ERROR(DistBackendError, message);
  } catch (...) {
    return std::current_exception();
  }
}

}  // namespace detail

using detail::BackendError;

namespace {

// Every completion thread's queue, for StopAllAndWait; expired ones are
// dropped as new threads are added.
std::mutex g_queues_mutex;
std::vector<std::weak_ptr<void>> g_queues;

// The works whose futures complete on the backends' threads and have not yet.
std::mutex g_notified_mutex;
std::condition_variable g_notified_cv;
int g_notified = 0;

std::exception_ptr ToTorch(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error&) {
    return e;
  } catch (const std::exception& x) {
    return BackendError(x.what());
  } catch (...) {
    return BackendError("plexus: unknown exception");
  }
}

}  // namespace

std::string OpLabel::Text() const {
  if (!dtype) return op;
  return std::string(op) + " (" + std::string(c10::toString(*dtype)) + ", " +
         std::to_string(numel) + " elements)";
}

// --- PlexusWork ------------------------------------------------------------------

PlexusWork::PlexusWork(int rank, c10d::OpType type, OpLabel what, std::vector<at::Tensor> outputs,
                       std::shared_ptr<CompletionThread> completer,
                       std::chrono::milliseconds timeout)
    : c10d::Work(rank, type),
      what_(what),
      outputs_(std::move(outputs)),
      completer_(std::move(completer)),
      timeout_(timeout) {}

PlexusWork::~PlexusWork() = default;

// The future completes before the work says it has (completed_, which
// wait() and isCompleted() read), so that a caller reading fut.value() as
// soon as w.wait() returns finds it done, as on Gloo and NCCL. Its callbacks
// run here, outside mutex_.
void PlexusWork::Complete(std::exception_ptr error) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (decided_) return;
    decided_ = true;
    deciding_thread_ = std::this_thread::get_id();
    exception_ = error;
    future = future_;
    if (recordFunctionEndCallback_) {
      recordFunctionEndCallback_();
      recordFunctionEndCallback_ = nullptr;
    }
  }
  if (future) {
    if (error) {
      future->setError(error);
    } else {
      future->markCompleted(c10::IValue(outputs_));
    }
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completed_ = true;
  }
  cv_.notify_all();
}

void PlexusWork::Drive(std::chrono::milliseconds timeout, bool callers_timeout) {
  for (plexus::Work& w : posted) {
    try {
      w.wait(timeout);
    } catch (const plexus::Error& e) {
      if (e.status() == PLEXUS_ERR_TIMEOUT && callers_timeout) {
        // The caller's own limit: the operation goes on; wait again later.
        std::rethrow_exception(BackendError(what_.Text() + " did not complete within the " +
                                            std::to_string(timeout.count()) + " ms given to " +
                                            "wait(): " + e.what()));
      }
      Complete(BackendError(e.what()));
      return;
    } catch (...) {
      Complete(ToTorch(std::current_exception()));
      return;
    }
  }
  try {
    for (auto& f : finishers) f();
  } catch (...) {
    Complete(ToTorch(std::current_exception()));
    return;
  }
  Complete(nullptr);
}

bool PlexusWork::isCompleted() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
    if (on_thread_) return false;
  }
  std::unique_lock<std::mutex> drive(drive_mutex_, std::try_to_lock);
  if (!drive.owns_lock()) return false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return true;
  }
  try {
    for (plexus::Work& w : posted) {
      if (!w.test()) return false;
    }
  } catch (const plexus::Error& e) {
    Complete(BackendError(e.what()));
    return true;
  }
  Drive(std::chrono::milliseconds(-1), false);  // every one is done: finish
  return true;
}

bool PlexusWork::isSuccess() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ && !exception_;
}

std::exception_ptr PlexusWork::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return exception_;
}

bool PlexusWork::wait(std::chrono::milliseconds timeout) {
  const bool callers = timeout.count() > 0;  // c10d's kNoTimeout is 0
  bool on_thread = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // From a callback of the future, on the thread completing it: decided.
    if (decided_ && deciding_thread_ == std::this_thread::get_id()) {
      if (exception_) std::rethrow_exception(exception_);
      return true;
    }
    on_thread = on_thread_ && !completed_;
  }
  if (on_thread) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (callers) {
      if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
        std::rethrow_exception(BackendError(what_.Text() + " did not complete within the " +
                                            std::to_string(timeout.count()) +
                                            " ms given to wait()"));
      }
    } else {
      cv_.wait(lock, [&] { return completed_; });
    }
  } else {
    std::lock_guard<std::mutex> drive(drive_mutex_);
    bool done = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done = completed_;
    }
    if (!done) Drive(callers ? timeout : std::chrono::milliseconds(-1), callers);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

c10::intrusive_ptr<c10::ivalue::Future> PlexusWork::getFuture() {
  bool hand_over = false;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {
      std::vector<c10::Device> devices;
      for (const auto& t : outputs_) {
        if (t.defined() && !t.is_cpu() &&
            std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
          devices.push_back(t.device());
        }
      }
      future_ = c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()), devices);
      if (decided_) {  // (Complete found no future to complete)
        if (exception_) {
          future_->setError(exception_);
        } else {
          future_->markCompleted(c10::IValue(outputs_));
        }
      } else if (!on_thread_) {
        on_thread_ = true;
        hand_over = true;
      }
    }
    future = future_;
  }
  if (hand_over && !CompleteWhenNotified() &&
      !completer_->Add(c10::intrusive_ptr<PlexusWork>::reclaim_copy(this))) {
    CompleteOnThread();  // the backend is gone: complete it here
  }
  return future;
}

bool PlexusWork::CompleteWhenNotified() {
  for (const plexus::Work& w : posted) {
    if (!w.can_notify()) return false;
  }
  // One arrival per posted operation, and one for this registration, so
  // that nothing completes the work before every operation is registered.
  struct Countdown {
    std::atomic<size_t> left;
    c10::intrusive_ptr<PlexusWork> work;
  };
  auto countdown = std::make_shared<Countdown>();
  countdown->left = posted.size() + 1;
  countdown->work = c10::intrusive_ptr<PlexusWork>::reclaim_copy(this);
  {
    std::lock_guard<std::mutex> lock(g_notified_mutex);
    ++g_notified;
  }
  auto arrive = [countdown] {
    if (countdown->left.fetch_sub(1) != 1) return;
    c10::intrusive_ptr<PlexusWork> work = std::move(countdown->work);
    work->CompleteOnThread();  // every operation is done: no wait; never throws
    work.reset();              // (the future's callbacks, Python's included, go with it)
    {
      std::lock_guard<std::mutex> lock(g_notified_mutex);
      --g_notified;
    }
    g_notified_cv.notify_all();
  };
  for (plexus::Work& w : posted) {
    // can_notify said yes; should the backend refuse after all, this
    // arrival comes now and the last one's Drive waits for that operation.
    if (!w.notify_when_done(arrive)) arrive();
  }
  arrive();
  return true;
}

std::vector<at::Tensor> PlexusWork::result() {
  return outputs_;
}

void PlexusWork::Settle() {
  CompleteOnThread();
}

void PlexusWork::CompleteOnThread() {
  std::lock_guard<std::mutex> drive(drive_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (completed_) return;
  }
  Drive(std::chrono::milliseconds(-1), false);
}

// --- CompletionThread ---------------------------------------------------------------

CompletionThread::CompletionThread(std::chrono::milliseconds timeout)
    : queue_(std::make_shared<Queue>()) {
  queue_->timeout = timeout;  // (read only by StopAllAndWait, after the registration below)
  std::lock_guard<std::mutex> lock(g_queues_mutex);
  std::erase_if(g_queues, [](const std::weak_ptr<void>& q) { return q.expired(); });
  g_queues.push_back(queue_);
}

CompletionThread::~CompletionThread() {
  Stop();
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the last owner was a work completed on it; the loop ends by itself
  } else if (thread_.joinable()) {
    thread_.join();
  }
}

bool CompletionThread::Add(c10::intrusive_ptr<PlexusWork> work) {
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    if (queue_->stop) return false;
    queue_->works.push_back(std::move(work));
    if (!queue_->started) {
      queue_->started = true;
      thread_ = std::thread(&CompletionThread::Loop, queue_);
    }
  }
  queue_->cv.notify_one();
  return true;
}

void CompletionThread::Stop() {
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    queue_->stop = true;
  }
  queue_->cv.notify_one();
}

void CompletionThread::Loop(std::shared_ptr<Queue> q) {
  for (;;) {
    c10::intrusive_ptr<PlexusWork> work;
    {
      std::unique_lock<std::mutex> lock(q->mutex);
      q->cv.wait(lock, [&] { return q->stop || !q->works.empty(); });
      if (q->works.empty()) {  // stopping, nothing left
        q->finished = true;
        q->cv.notify_all();
        return;
      }
      work = std::move(q->works.front());
      q->works.pop_front();
    }
    work->CompleteOnThread();  // never throws: failures complete the work
    // `work` goes here, its future and the future's callbacks with it
    // (Python's included), before the loop can report finished.
  }
}

int CompletionThread::StopAllAndWait(std::chrono::milliseconds* bound) {
  std::vector<std::shared_ptr<Queue>> queues;
  std::chrono::milliseconds longest{0};
  {
    std::lock_guard<std::mutex> lock(g_queues_mutex);
    for (const auto& weak : g_queues) {
      if (auto q = weak.lock()) {
        queues.push_back(std::static_pointer_cast<Queue>(q));
        longest = std::max(longest, queues.back()->timeout);
      }
    }
  }
  *bound = longest + std::chrono::seconds(5);
  const auto deadline = std::chrono::steady_clock::now() + *bound;
  int running = 0;
  for (const auto& q : queues) {
    std::unique_lock<std::mutex> lock(q->mutex);
    q->stop = true;
    q->cv.notify_all();
    if (!q->cv.wait_until(lock, deadline, [&] { return q->finished || !q->started; })) ++running;
  }
  // And the works completing on the backends' threads (CompleteWhenNotified).
  std::unique_lock<std::mutex> lock(g_notified_mutex);
  if (!g_notified_cv.wait_until(lock, deadline, [] { return g_notified == 0; })) {
    running += g_notified;
  }
  return running;
}

}  // namespace plexus_torch
