#include "rank_record.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "plexus/settings/environment.hpp"
#include "restarts.hpp"

namespace plexus::conformance {
namespace {

static_assert(std::is_trivially_copyable_v<RankRecord>);
static_assert(std::atomic_ref<uint32_t>::is_always_lock_free);

constexpr uint32_t kFree = 0, kWriting = 1, kHolding = 2;

RankRecord g_memory_record;  // when there is no shared file
RankRecord* g_record = &g_memory_record;
bool g_shared = false;
std::atomic<uint64_t> g_generation{0};
std::atomic<const char*> g_phase{"starting"};

std::atomic_ref<uint32_t> State(InFlightCall& call) {
  return std::atomic_ref<uint32_t>(call.state);
}

// Copies text into dest (capacity cap), always NUL-terminated.
void CopyText(char* dest, size_t cap, const char* text) {
  size_t n = 0;
  while (text[n] != '\0' && n + 1 < cap) ++n;
  std::memcpy(dest, text, n);
  dest[n] = '\0';
}

int32_t ThisThread() {
  const int saved = errno;
  const auto tid = int32_t(syscall(SYS_gettid));
  errno = saved;
  return tid;
}

// Async-signal-safe: appends the text of every held call but the one of
// thread skip, "; "-separated. Returns how many were appended.
int AppendOtherCalls(char* buf, size_t cap, int32_t skip) {
  int n = 0;
  for (InFlightCall& call : g_record->calls) {
    if (State(call).load(std::memory_order_acquire) != kHolding || call.thread == skip) continue;
    if (n++ > 0) AppendText(buf, cap, "; ");
    // A copy, so that a call ending meanwhile cannot leave half a text.
    char text[sizeof call.text];
    std::memcpy(text, call.text, sizeof text);
    text[sizeof text - 1] = '\0';
    AppendText(buf, cap, text);
  }
  return n;
}

}  // namespace

bool InitRankRecord(uint32_t rank) {
  const char* dir = plexus::settings::Raw(plexus::settings::Id::kConformanceState);
  if (dir && *dir) {
    const std::string path = RankRecordPath(dir, rank);
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0 && ftruncate(fd, sizeof(RankRecord)) == 0) {
      void* p = mmap(nullptr, sizeof(RankRecord), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        g_record = static_cast<RankRecord*>(p);  // zero-filled by ftruncate
        g_shared = true;
      }
    }
    if (fd >= 0) close(fd);
  }
  g_record->rank = rank;
  g_record->check_index = kNoCheck;
  CopyText(g_record->check, sizeof g_record->check, "startup");
  std::atomic_ref<uint32_t>(g_record->magic).store(RankRecord::kMagic, std::memory_order_release);
  return g_shared;
}

bool RankRecordShared() {
  return g_shared;
}

void SetCurrentCheck(int64_t index, const std::string& name, const std::string& group,
                     const std::string& capability) {
  g_phase.store("the suite's own code");
  g_record->check_index = index;
  CopyText(g_record->check, sizeof g_record->check, name.c_str());
  CopyText(g_record->group, sizeof g_record->group, group.c_str());
  CopyText(g_record->capability, sizeof g_record->capability, capability.c_str());
  g_generation.fetch_add(1);
}

uint64_t CheckGeneration() {
  return g_generation.load();
}

void SetPhase(const char* phase) {
  g_phase.store(phase);
}

const char* CurrentPhase() {
  return g_phase.load();
}

CallInFlight::CallInFlight(const char* text) {
  for (InFlightCall& call : g_record->calls) {
    uint32_t expected = kFree;
    if (!State(call).compare_exchange_strong(expected, kWriting, std::memory_order_acquire)) {
      continue;
    }
    call.thread = ThisThread();
    CopyText(call.text, sizeof call.text, text);
    State(call).store(kHolding, std::memory_order_release);
    slot_ = &call;
    return;
  }
}

CallInFlight::~CallInFlight() {
  if (slot_) State(*slot_).store(kFree, std::memory_order_release);
}

std::string CallsInFlight() {
  char buf[RankRecord::kCalls * sizeof(InFlightCall::text)] = "";
  AppendOtherCalls(buf, sizeof buf, 0);
  return buf;
}

void AppendText(char* buf, size_t cap, const char* text) {
  size_t at = 0;
  while (at < cap && buf[at] != '\0') ++at;
  if (at >= cap) return;
  CopyText(buf + at, cap - at, text);
}

void AppendCallsInFlightForSignal(char* buf, size_t cap) {
  const int32_t me = ThisThread();
  const InFlightCall* mine = nullptr;
  for (InFlightCall& call : g_record->calls) {
    if (State(call).load(std::memory_order_acquire) == kHolding && call.thread == me) mine = &call;
  }
  if (mine) {
    AppendText(buf, cap, ", in ");
    char text[sizeof mine->text];
    std::memcpy(text, mine->text, sizeof text);
    text[sizeof text - 1] = '\0';
    AppendText(buf, cap, text);
    char others[1024] = "";
    if (AppendOtherCalls(others, sizeof others, me) > 0) {
      AppendText(buf, cap, " (other threads were in: ");
      AppendText(buf, cap, others);
      AppendText(buf, cap, ")");
    }
    return;
  }
  char others[1024] = "";
  if (AppendOtherCalls(others, sizeof others, me) > 0) {
    AppendText(buf, cap, ", in a thread that was not calling the backend (one of its own?) while ");
    AppendText(buf, cap, "other threads were in: ");
    AppendText(buf, cap, others);
  } else {
    AppendText(buf, cap, ", while no call into the backend was in flight");
  }
}

void RecordEnding(RankEnding ending, const char* text) {
  CopyText(g_record->ending_text, sizeof g_record->ending_text, text);
  std::atomic_ref<uint32_t>(g_record->ending).store(uint32_t(ending), std::memory_order_release);
}

RankEnding CurrentEnding() {
  return RankEnding(std::atomic_ref<uint32_t>(g_record->ending).load(std::memory_order_acquire));
}

const char* CurrentCheckName() {
  return g_record->check;
}

uint32_t RecordedRank() {
  return g_record->rank;
}

std::string RankRecordPath(const std::string& dir, uint32_t rank) {
  return dir + "/rank-" + std::to_string(rank);
}

bool ReadRankRecord(const std::string& path, RankRecord* out) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t got = 0;
  auto* bytes = reinterpret_cast<char*>(out);
  while (got < sizeof *out) {
    const ssize_t n = read(fd, bytes + got, sizeof *out - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += size_t(n);
  }
  close(fd);
  if (got != sizeof *out || out->magic != RankRecord::kMagic) return false;
  // Whatever the rank left half-written, every text ends inside its buffer.
  out->check[sizeof out->check - 1] = '\0';
  out->group[sizeof out->group - 1] = '\0';
  out->capability[sizeof out->capability - 1] = '\0';
  out->ending_text[sizeof out->ending_text - 1] = '\0';
  for (InFlightCall& call : out->calls) call.text[sizeof call.text - 1] = '\0';
  return true;
}

}  // namespace plexus::conformance
