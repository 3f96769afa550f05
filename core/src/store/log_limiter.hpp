// A rate limit for log lines that strangers can cause (refused store
// clients): the first `burst` lines of each window are printed, the rest
// only counted, and once the window has passed one line says how many were
// held back and repeats the last of them. 2000 refused connections thus
// cost a dozen lines, not 2000, while the first refusals still show who
// and why.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace plexus::store {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  LogLimiter(size_t burst, Clock::duration window) : burst_(burst), window_(window) {}

  // The lines to print now for text: a summary of the previous window if it
  // held lines back, then text itself unless this window's burst is spent.
  std::vector<std::string> Add(const std::string& text, Clock::time_point now);
  // The summary line once the window has passed with lines held back.
  std::optional<std::string> Flush(Clock::time_point now);
  // When Flush has something to say (nullopt: nothing held back).
  std::optional<Clock::time_point> FlushAt() const;

 private:
  const size_t burst_;
  const Clock::duration window_;
  Clock::time_point start_{};
  size_t printed_ = 0;
  size_t held_ = 0;
  std::string last_held_;
};

}  // namespace plexus::store
