#include "scratch.hpp"

#include <new>
#include <utility>

namespace plexus::algos {
namespace {

// Four buffers cover the most one run holds (ring reduce-scatter: two
// partials and two segment buffers); buffers above 4 MiB are not kept, so a
// thread holds at most 16 MiB between runs.
constexpr int kCached = 4;
constexpr uint64_t kLargestCached = uint64_t{4} << 20;

struct Entry {
  uint8_t* data = nullptr;
  uint64_t capacity = 0;
};

struct Cache {
  Entry entries[kCached];
  ~Cache() {
    for (Entry& e : entries) delete[] e.data;
  }
};

thread_local Cache cache;

}  // namespace

Scratch::Scratch(uint64_t bytes) {
  if (bytes == 0) return;
  // The smallest cached buffer that is large enough.
  Entry* best = nullptr;
  for (Entry& e : cache.entries) {
    if (e.data && e.capacity >= bytes && (!best || e.capacity < best->capacity)) best = &e;
  }
  if (best) {
    data_ = std::exchange(best->data, nullptr);
    capacity_ = std::exchange(best->capacity, 0);
    return;
  }
  data_ = new uint8_t[bytes];  // default-initialised: no zero fill
  capacity_ = bytes;
}

Scratch::~Scratch() {
  if (!data_) return;
  if (capacity_ <= kLargestCached) {
    // An empty slot, else the smallest buffer if it is smaller than this one.
    Entry* slot = nullptr;
    for (Entry& e : cache.entries) {
      if (!e.data) {
        slot = &e;
        break;
      }
      if (e.capacity < capacity_ && (!slot || e.capacity < slot->capacity)) slot = &e;
    }
    if (slot) {
      delete[] slot->data;
      slot->data = data_;
      slot->capacity = capacity_;
      return;
    }
  }
  delete[] data_;
}

Scratch::Scratch(Scratch&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

Scratch& Scratch::operator=(Scratch&& other) noexcept {
  if (this != &other) {
    Scratch old(std::move(*this));  // returned to the cache as it goes
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

}  // namespace plexus::algos
