// detail::HostOp — an operation the host runs itself, out of several backend
// operations (a two-level allreduce: hierarchy/), completed by a host
// thread. A Work holds one instead of a backend request.
//
// Thread safety: Complete from the thread that runs the operation, once;
// Test and Wait from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>

#include "plexus/backend.h"

namespace plexus::detail {

class HostOp {
 public:
  // code: PLEXUS_OK or an error status; message says what failed (empty on success).
  void Complete(int32_t code, std::string message) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      code_ = code;
      message_ = std::move(message);
      done_ = true;
    }
    cv_.notify_all();
  }
  // PLEXUS_OK, PLEXUS_IN_PROGRESS or the error. Never blocks for long.
  int32_t Test() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_ ? code_ : PLEXUS_IN_PROGRESS;
  }
  // Like Test, after waiting up to timeout for the operation to complete.
  int32_t Wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return done_; });
    return done_ ? code_ : PLEXUS_IN_PROGRESS;
  }
  // What failed; only after Test or Wait returned an error.
  std::string Message() {
    std::lock_guard<std::mutex> lock(mu_);
    return message_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  int32_t code_ = PLEXUS_IN_PROGRESS;
  std::string message_;
};

}  // namespace plexus::detail
