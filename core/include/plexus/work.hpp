// plexus::Work — the handle of one posted operation.
//
// Like c10d's Work: test() polls, wait() blocks with a timeout; a failure is
// thrown as plexus::Error. Dropping a Work that is still running is allowed:
// the operation keeps going and its request is released by the communicator.
// A Work may be moved, not copied. Not thread-safe per object.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "plexus/backend.h"

namespace plexus {

namespace detail {
struct CommState;
class HostOp;
// A posted collective, as the stall report describes it: its place in the
// communicator's sequence (from 1; 0: not a collective) and its signature.
struct PostedOp {
  uint64_t seq = 0;
  uint64_t count = 0;
  uint32_t coll = 0;
  uint32_t dtype = 0;
  uint32_t op = 0;
  uint32_t root = 0;
  // The flight recorder's (trace/flight_recorder.hpp): when the post began
  // (its clock's ticks), and the post's number in the communicator's ring
  // (0: not recorded).
  uint64_t posted_ticks = 0;
  uint64_t trace_slot = 0;
};
}  // namespace detail

class Work {
 public:
  Work() = default;  // an already-completed, empty Work
  Work(Work&& other) noexcept;
  Work& operator=(Work&& other) noexcept;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;
  ~Work();

  // True when the operation has completed successfully; false while it runs.
  // Throws plexus::Error when it failed. Never blocks.
  bool test();

  // Blocks until the operation completes. timeout < 0 (the default) means the
  // communicator's timeout. Throws plexus::Error with status PLEXUS_ERR_TIMEOUT
  // if it did not complete in time (the Work stays valid; wait again or
  // abort), or with the operation's error if it failed.
  void wait(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));

  // True once test() or wait() has seen the operation complete (either way).
  bool completed() const { return request_ == nullptr && host_op_ == nullptr; }

  // Whether notify_when_done can tell of this operation's completion: the
  // backend has request_notify (ABI 1.5: tcp, ucx, mpi, kit plugins), or it
  // has completed. Not an operation the host runs in two levels.
  bool can_notify() const;
  // Calls done() once the operation has completed, either way (test() or
  // wait() then say how), on the thread that completes it (a backend's, or
  // one inside test() or wait()); at once, here, when it has already. done
  // must not throw and should be short; it may call test() or wait() on this
  // Work, and post and wait on any communicator. At most once per Work. False
  // (nothing registered) where can_notify() is false: the caller waits itself.
  bool notify_when_done(std::function<void()> done);

 private:
  friend class Communicator;
  Work(std::shared_ptr<detail::CommState> comm, plexus_request* request, const char* what,
       const detail::PostedOp& posted);
  // An operation the host runs itself (a two-level allreduce).
  Work(std::shared_ptr<detail::CommState> comm, std::shared_ptr<detail::HostOp> op,
       const char* what, const detail::PostedOp& posted);
  void Finish(int32_t code);        // frees the request; throws on failure
  void FinishHostOp(int32_t code);  // drops host_op_; throws on failure
  bool TestHostOp();
  void WaitHostOp(std::chrono::milliseconds timeout);
  void WaitAfter(std::chrono::milliseconds timeout);
  // On a timeout of a collective: which ranks it waited for, from the store.
  std::string StallReport();
  // A failure of a recorded collective: kept with the flight recorder's
  // ring, which is dumped (PLEXUS_TRACE_DIR).
  void Traced(int32_t code, const std::string& message);

  std::shared_ptr<detail::CommState> comm_;
  plexus_request* request_ = nullptr;
  std::shared_ptr<detail::HostOp> host_op_;  // instead of request_
  // A two-level operation posted before this flat one and still running
  // then: this one is not complete before it (posting order).
  std::shared_ptr<detail::HostOp> after_;
  const char* what_ = "";
  detail::PostedOp posted_;  // posted_.seq == 0: not a collective
};

}  // namespace plexus
