// The last line of defence against a backend call that never returns.
//
// Waits are bounded by their timeout argument, but a backend can still block
// inside wait(), test(), a post or comm_create without honouring it. The
// runner arms the watchdog around each check with a generous limit; if the
// check has not finished by then, the watchdog reports the check as FAIL,
// naming the calls into the backend in flight with their arguments, records
// it in the rank record (rank_record.hpp), and ends the process with exit
// status 3, which makes plexus-run (or mpirun) stop the job. When the suite
// started the ranks itself, it then starts them again past the check
// (restarts.hpp), which prints the FAIL line; otherwise rank 0 prints it on
// stdout, every rank on stderr. A hung backend thus fails the check instead
// of hanging the suite.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace plexus::conformance {

class Watchdog {
 public:
  // launcher: who started the ranks, for the note that the run ends here.
  Watchdog(uint32_t rank, const std::string& launcher);
  ~Watchdog();

  // As a check: on expiry, a FAIL line for check and exit status 3.
  void Arm(const std::string& check, int64_t limit_ms);
  // Around teardown (finalize may wait for a peer that is gone): on expiry,
  // a warning on stderr and exit with exit_status, the run's own result.
  void ArmTeardown(int64_t limit_ms, int exit_status);
  void Disarm();

 private:
  void Loop();

  uint32_t rank_;
  std::string cannot_restart_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool quit_ = false;
  bool armed_ = false;
  std::string check_;
  int64_t limit_ms_ = 0;
  bool teardown_ = false;
  int exit_status_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::thread thread_;
};

}  // namespace plexus::conformance
