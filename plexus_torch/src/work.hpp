// The work of an operation: PlexusWork (a c10d::Work over the plexus::Works
// one c10d call posted) and the completion thread that completes the works
// whose futures were asked for.
//
// Whoever waits runs a work (Work::wait, is_completed: a small operation
// runs on the caller's thread, as plexus::Communicator does); once
// get_future() is asked for (DDP's comm hooks, FSDP), the backend's
// completion thread waits for it instead and completes the future.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "plexus/work.hpp"

namespace plexus_torch {

class CompletionThread;

// What a work is, for messages; formatted only when one is needed.
struct OpLabel {
  const char* op = "";
  std::optional<at::ScalarType> dtype;
  int64_t numel = 0;
  std::string Text() const;  // "allreduce (Float, 37 elements)"
};

class PlexusWork : public c10d::Work {
 public:
  PlexusWork(int rank, c10d::OpType type, OpLabel what, std::vector<at::Tensor> outputs,
             std::shared_ptr<CompletionThread> completer, std::chrono::milliseconds timeout);
  ~PlexusWork() override;

  // Set up by the backend before the work is handed out.
  std::vector<plexus::Work> posted;
  // Run in order once every posted operation succeeded: unpack, fold, copy back.
  std::vector<std::function<void()>> finishers;
  std::vector<at::Tensor> keep;  // buffers the posted operations use

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override;
  std::chrono::milliseconds getTimeout() const override { return timeout_; }

  // The completion thread: waits (up to the communicator's timeout) and completes.
  void CompleteOnThread();
  // Completes the work from the backend's own completion of its posted
  // operations (plexus::Work::notify_when_done, ABI 1.5), on the thread
  // that completes the last one. False, nothing done, where one cannot tell:
  // the completion thread waits instead.
  bool CompleteWhenNotified();
  // Runs the work to completion on this thread now (a blocking c10d call);
  // a failure is kept for wait() to raise.
  void Settle();

 private:
  // Waits for every posted operation, then finishes. The caller holds
  // drive_mutex_. A timeout given by the caller (not the communicator's)
  // leaves the work pending and throws.
  void Drive(std::chrono::milliseconds timeout, bool callers_timeout);
  void Complete(std::exception_ptr error);

  const OpLabel what_;
  std::vector<at::Tensor> outputs_;
  std::shared_ptr<CompletionThread> completer_;
  const std::chrono::milliseconds timeout_;
  std::mutex drive_mutex_;  // held by whoever drives `posted` (plexus::Work is single-threaded)
  bool on_thread_ = false;  // guarded by mutex_ (c10d::Work's): the completion thread drives it
  // Guarded by mutex_: the outcome (exception_) is set, and the future, if
  // any, is being completed; completed_ follows once it is (see Complete).
  bool decided_ = false;
  std::thread::id deciding_thread_;  // guarded by mutex_: whose Complete runs the callbacks
  c10::intrusive_ptr<c10::ivalue::Future> future_;  // guarded by mutex_
};

// Waits for the works whose futures were asked for, in order, and completes
// them, where the backend cannot tell of their completion itself (no
// request_notify: nccl, plugins older than ABI 1.5). Shared by a backend and
// its works (a work may outlive its backend); the thread starts with the
// first work it gets, and ends when the backend goes and the queue is empty.
class CompletionThread {
 public:
  // timeout: the longest a work it completes may wait (the communicator's).
  explicit CompletionThread(std::chrono::milliseconds timeout);
  ~CompletionThread();
  // False once stopping: the caller completes the work itself.
  bool Add(c10::intrusive_ptr<PlexusWork> work);
  void Stop();  // the backend is going: finish the queue, then end
  // At interpreter exit (atexit, without the GIL): stops every completion
  // thread in the process, the detached ones of backends already gone
  // included, and waits for each to finish its queue, up to the longest
  // timeout among them + 5 s in all (*bound says how long that was). A
  // future's callbacks may be Python code, which takes the GIL: a thread
  // still running one once Python finalises is ended by Python in the middle
  // of C++ frames (std::terminate). Returns how many were still running.
  static int StopAllAndWait(std::chrono::milliseconds* bound);

 private:
  struct Queue {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<c10::intrusive_ptr<PlexusWork>> works;
    bool stop = false;
    bool started = false;                  // the thread was started (by the first Add)
    bool finished = false;                 // the loop has returned: it touches no work any more
    std::chrono::milliseconds timeout{0};  // set at construction, then read only
  };
  static void Loop(std::shared_ptr<Queue> q);
  std::shared_ptr<Queue> queue_;
  std::thread thread_;
};

namespace detail {

// message as a torch.distributed.DistBackendError (what went wrong at run
// time: a dead peer, a timeout, a mismatch), ready to be thrown or kept.
std::exception_ptr BackendError(const std::string& message);

}  // namespace detail
}  // namespace plexus_torch
