#include "log_limiter.hpp"

namespace plexus::store {

std::optional<std::string> LogLimiter::Flush(Clock::time_point now) {
  if (held_ == 0 || now < start_ + window_) return std::nullopt;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(window_).count();
  std::string line = std::to_string(held_) + " more like this in " + std::to_string(seconds) +
                     " s, not logged one by one (the last: " + last_held_ + ")";
  held_ = 0;
  last_held_.clear();
  return line;
}

std::vector<std::string> LogLimiter::Add(const std::string& text, Clock::time_point now) {
  std::vector<std::string> lines;
  if (auto summary = Flush(now)) lines.push_back(std::move(*summary));
  if (now >= start_ + window_) {
    start_ = now;
    printed_ = 0;
  }
  if (printed_ < burst_) {
    ++printed_;
    lines.push_back(text);
  } else {
    ++held_;
    last_held_ = text;
  }
  return lines;
}

std::optional<LogLimiter::Clock::time_point> LogLimiter::FlushAt() const {
  if (held_ == 0) return std::nullopt;
  return start_ + window_;
}

}  // namespace plexus::store
