// The one-host segment's layout and its small helpers, shared by the
// segment's two files: one_host_shm.cpp (set-up, and the collectives through
// the slots) and one_host_windows.cpp (shared buffers, mem_alloc). Internal
// to the kit: every rank runs the same build, and the header's version says
// which layout a segment has.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>

namespace plexus::kit::shm_layout {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x3130484d53584c50ull;  // "PLXSHM01"
constexpr uint32_t kVersion = 2;                    // 2: the window control line
constexpr size_t kTokenBytes = 16;
constexpr size_t kNameBytes = 64;
constexpr size_t kReasonBytes = 512;

// While a rank sleeps on a peer: how often it wakes to look for an abort,
// a failure or the peer's exit.
constexpr int64_t kCheckMs = 100;
// Past this much of a spin, the waiter yields the CPU between tries.
constexpr auto kYieldAfter = std::chrono::microseconds(10);

struct alignas(64) Header {
  uint64_t magic;
  uint32_t version;
  uint32_t ranks;
  uint64_t slot_bytes;
  uint8_t token[kTokenBytes];
};

// The one allreduce on shared buffers in progress (one_host_windows.cpp):
// which chunk is the next to take, and how many are done. Both carry the
// operation's generation (its step 2k+1), so that a rank still looking at
// the previous operation's words can tell. Written by every rank.
struct alignas(64) WindowControl {
  std::atomic<uint64_t> claim;             // generation << 32 | next chunk to take
  alignas(64) std::atomic<uint32_t> done;  // (generation & 0xffff) << 16 | chunks done
  std::atomic<uint32_t> done_sleepers;     // ranks asleep on done
};

// What rank r's chunk k carries, in half k % 2: peers compare it with their
// own operation at the first chunk of each.
// Vectors of at most this many bytes travel in the line itself
// (OneHostShm::kInlineBytes).
constexpr size_t kLineData = 32;

// In SigLine::coll: the operation runs on shared buffers (data holds which
// window and where in it), so that a rank in the slots' protocol sees a
// mismatch, not a partner.
constexpr uint32_t kOnWindowFlag = 0x10000;
// For mismatch messages: where each side's operation runs.
constexpr const char* kOnSharedBuffer = " in place on a shared buffer (mem_alloc)";
constexpr const char* kOnOwnBuffers = " on buffers of its own";

struct alignas(64) SigLine {
  uint64_t seq;
  uint64_t count;
  uint32_t coll;
  uint32_t dtype;
  uint32_t op;
  // The step (2k+1) whose vector is in data: written last. A peer waiting
  // for a vector this small watches this word, so the one line it fetches
  // brings the signature and the data with it.
  std::atomic<uint32_t> stamp;
  uint8_t data[kLineData];
};
static_assert(sizeof(SigLine) == 64);

// Rank r's flags: each line has one writer, so that nobody's store evicts a
// line someone else polls.
struct RankLines {
  alignas(64) std::atomic<uint32_t> published;  // written by the rank
  alignas(64) std::atomic<uint32_t> sleepers;   // peers asleep on published
  SigLine sig[2];                               // by half; written by the rank
  // The collective this rank runs now (Announce), any of them, under a
  // sequence lock: odd while it is written.
  alignas(64) std::atomic<uint64_t> announce_version;
  std::atomic<uint64_t> announced[4];        // seq, count, coll << 32 | dtype, op
  alignas(64) std::atomic<uint32_t> failed;  // written by the rank, once
  int32_t code;
  char reason[kReasonBytes];
};

inline size_t ControlOffset() {
  return sizeof(Header);
}

inline size_t LinesOffset() {
  return sizeof(Header) + sizeof(WindowControl);
}

inline size_t SlotsOffset(uint32_t ranks) {
  const size_t page = 4096;
  const size_t end = LinesOffset() + size_t(ranks) * sizeof(RankLines);
  return (end + page - 1) / page * page;
}

inline RankLines& LinesOf(uint8_t* base, uint32_t rank) {
  return reinterpret_cast<RankLines*>(base + LinesOffset())[rank];
}

inline WindowControl& ControlOf(uint8_t* base) {
  return *reinterpret_cast<WindowControl*>(base + ControlOffset());
}

inline int Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return int(syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0));
}

inline bool Reached(uint32_t published, uint32_t target) {
  return int32_t(published - target) >= 0;
}

}  // namespace plexus::kit::shm_layout
