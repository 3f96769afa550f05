#include "buffer.hpp"

#include <cstring>
#include <mutex>

namespace plexus::conformance {

Buffer::Buffer(size_t bytes) : storage_(bytes + 2 * kGuardBytes, kUnwrittenByte) {
  std::memset(storage_.data(), kGuardByte, kGuardBytes);
  std::memset(storage_.data() + kGuardBytes + bytes, kGuardByte, kGuardBytes);
}

std::string Buffer::CheckGuards(const std::string& what) const {
  if (storage_.empty()) return {};
  const size_t n = size();
  for (size_t i = 0; i < kGuardBytes; ++i) {
    if (storage_[i] != kGuardByte) {
      return what + ": byte " + std::to_string(kGuardBytes - i) +
             " before the buffer was overwritten";
    }
  }
  for (size_t i = 0; i < kGuardBytes; ++i) {
    if (storage_[kGuardBytes + n + i] != kGuardByte) {
      return what + ": byte " + std::to_string(i) + " past the end of the buffer (" +
             std::to_string(n) + " bytes) was overwritten";
    }
  }
  return {};
}

namespace {
struct Watched {
  Buffer buffer;
  std::vector<uint8_t> snapshot;  // payload and guards, as they were
  std::string what;
};
std::mutex g_watch_mutex;
auto* g_watched = new std::vector<Watched>;  // never destroyed, on purpose
}  // namespace

void Watch(Buffer&& buffer, const std::string& what) {
  const uint8_t* begin = buffer.data() - Buffer::kGuardBytes;
  std::vector<uint8_t> snapshot(begin, begin + buffer.size() + 2 * Buffer::kGuardBytes);
  std::lock_guard<std::mutex> lock(g_watch_mutex);
  g_watched->push_back({std::move(buffer), std::move(snapshot), what});
}

std::string ChangedWatchedBuffers() {
  std::lock_guard<std::mutex> lock(g_watch_mutex);
  std::string out;
  for (const Watched& w : *g_watched) {
    const uint8_t* begin = w.buffer.data() - Buffer::kGuardBytes;
    for (size_t i = 0; i < w.snapshot.size(); ++i) {
      if (begin[i] != w.snapshot[i]) {
        out += (out.empty() ? "" : "; ") + w.what + " (byte " +
               std::to_string(int64_t(i) - int64_t(Buffer::kGuardBytes)) + ")";
        break;
      }
    }
  }
  return out;
}

size_t WatchedBufferCount() {
  std::lock_guard<std::mutex> lock(g_watch_mutex);
  return g_watched->size();
}

void Abandon(Buffer&& buffer) {
  static std::mutex mutex;
  static auto* kept = new std::vector<Buffer>;  // never destroyed, on purpose
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(buffer));
}

}  // namespace plexus::conformance
