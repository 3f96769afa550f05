// What this rank is doing, kept where a crash cannot take it away.
//
// The check now running and every call into the backend in flight (the ABI
// function with its arguments, preformatted by traced_calls) live in one
// fixed-size record of plain bytes, so that the fatal-signal handler and the
// watchdog can print them with nothing but write().
//
// When the suite started its ranks itself (see restarts.hpp), the record is
// a file shared with the process that started them (mmap MAP_SHARED): after
// the rank is gone -- crashed, hung and stopped by the watchdog, killed by
// SIGKILL, or ended by a backend's own signal handler that replaced ours --
// that process still reads which check and which call the rank was in and
// how it ended, and starts the ranks again past that check. Otherwise the
// record is ordinary memory of this process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace plexus::conformance {

// A check_index before the check list exists (loading, initialising), and
// after its last check (teardown).
constexpr int64_t kNoCheck = -1;
constexpr int64_t kAfterTheChecks = INT64_MAX;

// How a rank ended, as its record says.
enum class RankEnding : uint32_t {
  kRunning = 0,   // still running, or ended without a word (SIGKILL, _exit, another handler)
  kCrashed = 1,   // a fatal signal reached our handler
  kHung = 2,      // the watchdog ended it
  kExited = 3,    // exit() was called while a check ran (by the backend: the suite never does)
  kReturned = 4,  // the rank finished its run normally
};

// One call into the backend in flight on one thread.
struct InFlightCall {
  uint32_t state;  // 0 free, 1 being written, 2 holds a call (accessed with std::atomic_ref)
  int32_t thread;  // the calling thread's id (gettid)
  char text[504];  // e.g. "broadcast(buf=NULL, count 4, int32, root 0, placement NULL (host))"
};

// The record's layout, in memory and in the shared file alike.
struct RankRecord {
  static constexpr uint32_t kMagic = 0x504c5852;  // "PLXR"
  static constexpr size_t kCalls = 8;

  uint32_t magic;
  uint32_t rank;
  int64_t check_index;  // position of the running check in the check list, or kNoCheck
  char check[512];      // its name ("load and init", "teardown ..." outside the list)
  char group[64];
  char capability[128];
  InFlightCall calls[kCalls];
  uint32_t ending;         // RankEnding (std::atomic_ref)
  char ending_text[3072];  // for kCrashed/kHung/kExited: the report, after "rank N: "
};

// Call once, first thing in a rank: a shared file when the suite started the
// ranks itself ($PLEXUS_CONFORMANCE_STATE), else process memory. Returns
// whether the record is shared (the ranks can be started again).
bool InitRankRecord(uint32_t rank);
bool RankRecordShared();

// The step now running: a check of the list (index, group, capability), or a
// step outside it (index kNoCheck, or the last check's index for a step that
// follows it such as replacing the shared communicator).
void SetCurrentCheck(int64_t index, const std::string& name, const std::string& group = {},
                     const std::string& capability = {});
// Changes with every SetCurrentCheck (traced_calls numbers posts per check).
uint64_t CheckGeneration();

// What the running check is doing right now, e.g. "backend wait()" or
// "rendezvous store: barrier" (a string literal): the crash report and the
// watchdog name it, which tells a hang in the backend from one elsewhere.
void SetPhase(const char* phase);
const char* CurrentPhase();

// Records a call into the backend for its duration (a slot of the record;
// when every slot is taken the call goes unrecorded). text is copied.
class CallInFlight {
 public:
  explicit CallInFlight(const char* text);
  ~CallInFlight();
  CallInFlight(const CallInFlight&) = delete;
  CallInFlight& operator=(const CallInFlight&) = delete;

 private:
  InFlightCall* slot_ = nullptr;
};

// The calls in flight, "; "-separated ("" when none), for the watchdog.
std::string CallsInFlight();

// Async-signal-safe: appends to buf (NUL-terminated, capacity cap) the call
// in flight on the calling thread and those on other threads, as
// ", in X" / ", in a thread that was not calling the backend (calls in
// flight elsewhere: Y)" / ", while no call into the backend was in flight".
void AppendCallsInFlightForSignal(char* buf, size_t cap);
// Async-signal-safe strcat bounded by cap.
void AppendText(char* buf, size_t cap, const char* text);

// Async-signal-safe: how this rank ended, and why (copied).
void RecordEnding(RankEnding ending, const char* text);
RankEnding CurrentEnding();
const char* CurrentCheckName();  // the record's own buffer
uint32_t RecordedRank();

// For the process that started the ranks: the record file of rank in dir,
// and reading one back. False when it does not exist or is not a record.
std::string RankRecordPath(const std::string& dir, uint32_t rank);
bool ReadRankRecord(const std::string& path, RankRecord* out);

}  // namespace plexus::conformance
