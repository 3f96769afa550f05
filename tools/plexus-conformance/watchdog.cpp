#include "watchdog.hpp"

#include <unistd.h>

#include <cstdio>

#include "crash_report.hpp"
#include "rank_record.hpp"

namespace plexus::conformance {

constexpr int kExitHung = 3;

Watchdog::Watchdog(uint32_t rank, const std::string& launcher)
    : rank_(rank), cannot_restart_(CannotRestartNote(launcher)), thread_([this] { Loop(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::Arm(const std::string& check, int64_t limit_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = true;
  teardown_ = false;
  check_ = check;
  limit_ms_ = limit_ms;
  deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  cv_.notify_all();
}

void Watchdog::ArmTeardown(int64_t limit_ms, int exit_status) {
  Arm("teardown", limit_ms);
  std::lock_guard<std::mutex> lock(mutex_);
  teardown_ = true;
  exit_status_ = exit_status;
}

void Watchdog::Disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
  cv_.notify_all();
}

void Watchdog::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!quit_) {
    if (!armed_) {
      cv_.wait(lock);
      continue;
    }
    if (cv_.wait_until(lock, deadline_) != std::cv_status::timeout) continue;
    if (!armed_ || quit_ || std::chrono::steady_clock::now() < deadline_) continue;
    if (teardown_) {
      RecordEnding(RankEnding::kReturned, "");  // the run itself is over
      std::fprintf(stderr,
                   "plexus-conformance[%u]: comm_destroy/finalize of the backend did not return "
                   "within %lld s; exiting without waiting for it\n",
                   rank_, static_cast<long long>(limit_ms_ / 1000));
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(exit_status_);
    }
    // The call the check is stuck in says more than the check's name: the
    // ranks, roots and counts it was given.
    const std::string calls = CallsInFlight();
    const std::string why =
        "did not finish within " + std::to_string(limit_ms_ / 1000) + " s" +
        (calls.empty() ? ", while no call into the backend was in flight" : ", in " + calls) +
        " (last activity: " + CurrentPhase() + "): a call blocked past every deadline it was given";
    RecordEnding(RankEnding::kHung, why.c_str());
    if (RankRecordShared()) {
      // The process that started the ranks prints the FAIL line and starts
      // them again.
      std::fprintf(stderr, "plexus-conformance[%u]: FAIL %s: %s\n", rank_, check_.c_str(),
                   why.c_str());
    } else {
      if (rank_ == 0) {
        std::printf(
            "FAIL  %s  rank 0: %s\n%s\nRESULT: the suite could not finish: DOES NOT CONFORM\n",
            check_.c_str(), why.c_str(), cannot_restart_.c_str());
        std::fflush(stdout);
      }
      std::fprintf(stderr, "plexus-conformance[%u]: FAIL %s: %s; stopping the suite\n", rank_,
                   check_.c_str(), why.c_str());
    }
    std::fflush(stderr);
    _exit(kExitHung);
  }
}

}  // namespace plexus::conformance
