#include "plexus/kit/errors.hpp"

#include <algorithm>

namespace plexus::kit {

void CopyOut(const std::string& message, char* buf, size_t len) {
  if (!buf || len == 0) return;
  const size_t n = std::min(len - 1, message.size());
  message.copy(buf, n);
  buf[n] = '\0';
}

void ErrorSlot::Set(std::string message) {
  std::lock_guard<std::mutex> lock(mutex_);
  message_ = std::move(message);
}

size_t ErrorSlot::Copy(char* buf, size_t len) const {
  std::lock_guard<std::mutex> lock(mutex_);
  CopyOut(message_, buf, len);
  return message_.size();
}

}  // namespace plexus::kit
