// Buffers handed to the backend, with guard bytes around them.
//
// Each buffer sits between two guard zones of a known pattern, so that a
// backend writing before or past the bytes it was given is caught. A buffer
// whose operation never completed may still be written by the backend (the
// ABI lets it until the request completes), so it is abandoned, never freed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace plexus::conformance {

class Buffer {
 public:
  static constexpr size_t kGuardBytes = 4096;  // wide: an overflow should hit guards, not the heap
  static constexpr uint8_t kGuardByte = 0xA5;
  static constexpr uint8_t kUnwrittenByte = 0x5A;  // recvbuf bytes before the operation

  Buffer() = default;
  // bytes of payload, every one kUnwrittenByte.
  explicit Buffer(size_t bytes);

  uint8_t* data() { return storage_.data() + kGuardBytes; }
  const uint8_t* data() const { return storage_.data() + kGuardBytes; }
  size_t size() const { return storage_.empty() ? 0 : storage_.size() - 2 * kGuardBytes; }

  // "" when both guard zones are intact, else what was overwritten.
  std::string CheckGuards(const std::string& what) const;

 private:
  std::vector<uint8_t> storage_;
};

// Keeps the buffer's memory until the process exits: the backend may still
// write it (its request never completed, or the backend says that aborted
// operations may still land).
void Abandon(Buffer&& buffer);

// Like Abandon, for a buffer whose request has completed (after an abort):
// the ABI says the backend no longer touches it, so its bytes are
// remembered now and compared later by ChangedWatchedBuffers().
void Watch(Buffer&& buffer, const std::string& what);

// "" when every watched buffer still holds the bytes it had when watched,
// else which ones changed.
std::string ChangedWatchedBuffers();
size_t WatchedBufferCount();

}  // namespace plexus::conformance
