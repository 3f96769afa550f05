// Scratch memory for one run of an algorithm, reused from run to run on the
// same thread.
//
// Why not a std::vector per run: resize() zero-fills (a pass over up to 2 x
// 256 KiB per ring step that the received data then overwrites), and freeing
// a few hundred KiB lets malloc hand the pages back to the kernel, so the
// next run faults them in again, page by page, on a caller's thread (see
// docs/benchmarks.md). A per-thread cache keeps the last few buffers: no
// locks, and each backend thread (worker or waiting caller) warms its own.
#pragma once

#include <cstdint>

namespace plexus::algos {

class Scratch {
 public:
  Scratch() = default;
  // At least `bytes` bytes, uninitialised. Throws std::bad_alloc (the
  // backends turn it into an error of the operation).
  explicit Scratch(uint64_t bytes);
  ~Scratch();
  Scratch(Scratch&& other) noexcept;
  Scratch& operator=(Scratch&& other) noexcept;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  uint8_t* data() const { return data_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
};

}  // namespace plexus::algos
