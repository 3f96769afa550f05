// The flight recorder: every communicator keeps its last N collectives (a
// ring, PLEXUS_TRACE_OPS entries, default 4096; 0 turns it off) with their
// signature and times, and the process writes them all to
// PLEXUS_TRACE_DIR/rank-R.json on a failure, on SIGUSR1 and at exit.
// tools/plexus-trace reads the ranks' files together. The format is in
// docs/trace.md.
//
// Cost: one slot (a cache line) written when a collective is posted and one
// time when it is seen finished; no lock, no allocation; the clock is the
// CPU's time-stamp counter where it runs at a constant rate (x86's invariant
// TSC, read in a few ns), converted to wall-clock time only when dumped.
// A post and its finish may run on different threads; the dump reads while
// they write and takes each slot as it finds it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plexus/work.hpp"

namespace plexus::detail {

struct CommState;

// Now, in the recorder's clock's ticks (the invariant TSC, else
// CLOCK_REALTIME's nanoseconds). TraceNs turns ticks into nanoseconds since
// the epoch (CLOCK_REALTIME: comparable across hosts as far as their clocks
// agree; plexus-trace aligns them by the collectives), at the rate measured
// over the process's life so far.
#if defined(__x86_64__)
inline uint64_t TraceTicks() {
  extern const bool kTraceTsc;
  if (kTraceTsc) return __builtin_ia32_rdtsc();
  extern uint64_t TraceRealtimeNs();
  return TraceRealtimeNs();
}
#else
uint64_t TraceTicks();
#endif
double TraceNsPerTick();
int64_t TraceNs(uint64_t ticks, double ns_per_tick);

class FlightRecorder {
 public:
  // One communicator's: its name, this rank in it, its job ranks, backend.
  FlightRecorder(size_t capacity, std::string comm, uint32_t rank, uint32_t size,
                 std::vector<uint32_t> job_ranks, std::string backend);

  // A collective was posted: op's signature and posted_ticks (set by the
  // caller when the post began), seq its place in the communicator's
  // sequence (the one it would have had when the post failed), status the
  // post's (PLEXUS_OK, or why it failed: then it is also finished).
  // Sets op->trace_slot, for Finished. One thread at a time (posts are).
  void Posted(PostedOp* op, uint64_t seq, int32_t status);
  // The collective of that slot was seen finished (status PLEXUS_OK or its
  // error). Any thread.
  void Finished(const PostedOp& op, int32_t status);
  // What a failure said (the error and its stall report), kept with the
  // ring (the last few).
  void Note(const PostedOp& op, int32_t status, const std::string& message);

  // This communicator as a JSON object (docs/trace.md).
  std::string Json() const;

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> number{0};  // which post this slot holds (from 1)
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> posted{0};    // ticks
    std::atomic<uint64_t> issued{0};    // ticks: the backend had it
    std::atomic<uint64_t> finished{0};  // ticks; 0 while running
    std::atomic<uint32_t> kind{0};      // collective | dtype << 8 | op << 16
    std::atomic<uint32_t> root{0};
    std::atomic<int32_t> status{0};
  };
  static_assert(sizeof(Slot) == 64);
  struct Said {
    uint64_t seq;
    int32_t status;
    int64_t at_ns;
    std::string message;
  };

  const size_t capacity_;
  std::unique_ptr<Slot[]> ring_;
  std::atomic<uint64_t> posts_{0};  // recorded so far
  const std::string comm_;
  const uint32_t rank_, size_;
  const std::vector<uint32_t> job_ranks_;
  const std::string backend_;
  mutable std::mutex said_mutex_;
  std::vector<Said> said_;
};

// A recorder for a communicator just made, registered for the dumps; null
// when PLEXUS_TRACE_OPS=0. The first also sets up the dumps when
// PLEXUS_TRACE_DIR is set: at exit, and on SIGUSR1 unless the program has a
// handler of its own.
std::shared_ptr<FlightRecorder> NewRecorder(const CommState& s);

// Writes every registered recorder (this process's communicators, newest
// 64) to PLEXUS_TRACE_DIR/rank-R.json, R this process's job rank, replacing
// an earlier dump; reason: "failure", "timeout", "SIGUSR1", "exit". Nothing
// when PLEXUS_TRACE_DIR is unset. Thread-safe; never throws.
void DumpTraces(const char* reason);

}  // namespace plexus::detail
