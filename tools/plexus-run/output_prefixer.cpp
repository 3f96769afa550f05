#include "output_prefixer.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace plexus::run {

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Someone handed us a non-blocking stdout; behave as if it blocked.
      pollfd p{fd, POLLOUT, 0};
      (void)::poll(&p, 1, -1);
      continue;
    }
    return false;
  }
  return true;
}

OutputPrefixer::OutputPrefixer(std::string prefix, int out_fd)
    : prefix_(std::move(prefix)), out_fd_(out_fd) {}

void OutputPrefixer::Emit(std::string& out, const char* line, size_t size) {
  out.append(prefix_);
  out.append(line, size);
  out.push_back('\n');
}

void OutputPrefixer::Feed(const char* data, size_t size) {
  std::string out;
  const char* end = data + size;
  while (data < end) {
    const char* nl = static_cast<const char*>(std::memchr(data, '\n', end - data));
    if (nl == nullptr) {
      pending_.append(data, end - data);
      break;
    }
    if (pending_.empty()) {
      Emit(out, data, nl - data);
    } else {
      pending_.append(data, nl - data);
      Emit(out, pending_.data(), pending_.size());
      pending_.clear();
    }
    data = nl + 1;
  }
  // Cap the unfinished line: emit it in full-size pieces, keep the remainder.
  while (pending_.size() >= kMaxLineBytes) {
    Emit(out, pending_.data(), kMaxLineBytes);
    pending_.erase(0, kMaxLineBytes);
  }
  Write(out);
}

void OutputPrefixer::Flush() {
  if (pending_.empty()) return;
  std::string out;
  Emit(out, pending_.data(), pending_.size());
  pending_.clear();
  Write(out);
}

void OutputPrefixer::Write(const std::string& out) {
  if (out.empty() || broken_) return;
  // All complete lines of this chunk go out in one call; only this thread
  // writes to out_fd_, so no other rank's bytes can land inside a line.
  if (!WriteAll(out_fd_, out.data(), out.size())) broken_ = true;
}

}  // namespace plexus::run
