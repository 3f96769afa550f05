#include "flight_recorder.hpp"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "comm_state.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/log.hpp"
#include "plexus/settings/environment.hpp"
#include "plexus/trace.hpp"

namespace plexus::detail {
namespace {

constexpr size_t kDefaultOps = 4096;
constexpr size_t kKeptRecorders = 64;        // communicators in a dump, newest
constexpr size_t kKeptSaid = 16;             // failure messages per communicator

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

size_t CapacityFromEnv() {
  int64_t n = kDefaultOps;  // the table's range ends at 2^20: 64 MiB a communicator
  if (std::string why; !settings::ReadInt(settings::Id::kTraceOps, &n, &why)) {
    LogLine(PLEXUS_LOG_WARN, "plexus", why + "; using " + std::to_string(kDefaultOps));
    return kDefaultOps;
  }
  return size_t(n);
}

size_t Capacity() {
  static const size_t capacity = CapacityFromEnv();
  return capacity;
}

// Which job the dumps belong to, the same on every rank without asking the
// others: the launcher's name for the job.
std::string JobId() {
  for (const char* name : {"PLEXUS_JOB_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE"}) {
    const char* v = settings::RawByName(name);
    if (v && *v) return v;
  }
  const char* job = std::getenv("SLURM_JOB_ID");
  if (job && *job) {
    const char* step = std::getenv("SLURM_STEP_ID");
    return std::string("slurm-") + job + "." + (step ? step : "?");
  }
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr && *addr && port && *port) return std::string(addr) + ":" + port;
  return "unknown";
}

struct Registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<FlightRecorder>> recorders;
  bool dumps_set_up = false;
  int64_t job_rank = -1;
  int64_t job_size = -1;
  std::string backend;
  std::mutex dump_mutex;  // one dump at a time
  int signal_pipe[2] = {-1, -1};
};

// plexus::trace::Mark's spans: a ring of their own, for the process.
struct SpanRing {
  static constexpr size_t kSize = 4096;
  struct alignas(32) Span {
    std::atomic<uint64_t> number{0};  // which mark (from 1)
    std::atomic<const char*> name{nullptr};
    std::atomic<int64_t> begin{0};  // steady_clock ns
    std::atomic<int64_t> end{0};
  };
  std::atomic<uint64_t> marks{0};
  Span ring[kSize];
};

SpanRing& Spans() {
  static SpanRing* spans = new SpanRing;  // never destroyed: dumps run at exit
  return *spans;
}

Registry& TheRegistry() {
  static Registry* r = new Registry;  // never destroyed: dumps run at exit
  return *r;
}

void OnSigusr1(int) {
  const int saved = errno;
  const char c = 1;
  (void)!::write(TheRegistry().signal_pipe[1], &c, 1);
  errno = saved;
}

// At exit, and on SIGUSR1 (a thread of its own: a signal handler may not
// write files), when PLEXUS_TRACE_DIR is set.
void SetUpDumps(Registry& r) {
  const char* dir = plexus::settings::Raw(plexus::settings::Id::kTraceDir);
  if (!dir || !*dir) return;
  // (Not in a child made by fork(): its dump would replace the parent's.)
  static const pid_t owner = ::getpid();
  std::atexit([] {
    if (::getpid() == owner) DumpTraces("exit");
  });
  struct sigaction old {};
  if (::sigaction(SIGUSR1, nullptr, &old) != 0 || old.sa_handler != SIG_DFL ||
      (old.sa_flags & SA_SIGINFO)) {
    return;  // the program's own
  }
  if (::pipe2(r.signal_pipe, O_CLOEXEC) != 0) return;
  // (A handler that found the pipe full must not block: a dump is coming.)
  ::fcntl(r.signal_pipe[1], F_SETFL, ::fcntl(r.signal_pipe[1], F_GETFL) | O_NONBLOCK);
  std::thread([fd = r.signal_pipe[0]] {
    char c;
    for (;;) {
      const ssize_t n = ::read(fd, &c, 1);
      if (n == 1) DumpTraces("SIGUSR1");
      if (n == 0 || (n < 0 && errno != EINTR)) return;
    }
  }).detach();
  struct sigaction sa {};
  sa.sa_handler = OnSigusr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &sa, nullptr);
}

}  // namespace

uint64_t TraceRealtimeNs() {
  timespec ts;
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000 + uint64_t(ts.tv_nsec);
}

namespace {

// The time-stamp counter, where it ticks at a constant rate whatever the
// core's frequency and sleep state (CPUID 0x80000007 EDX bit 8).
bool InvariantTsc() {
#if defined(__x86_64__)
  unsigned max_leaf = 0, b, c, d;
  __asm__ volatile("cpuid" : "=a"(max_leaf), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u));
  if (max_leaf < 0x80000007u) return false;
  unsigned a;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000007u));
  return (d >> 8) & 1;
#else
  return false;
#endif
}

// Where the ticks started: wall-clock time and ticks read together.
struct Epoch {
  uint64_t ns;
  uint64_t ticks;
};
Epoch ReadEpoch(bool tsc) {
  const uint64_t ns = TraceRealtimeNs();
#if defined(__x86_64__)
  return Epoch{ns, tsc ? __builtin_ia32_rdtsc() : ns};
#else
  (void)tsc;
  return Epoch{ns, ns};
#endif
}

}  // namespace

extern const bool kTraceTsc = InvariantTsc();
static const Epoch kEpoch = ReadEpoch(kTraceTsc);

#if !defined(__x86_64__)
uint64_t TraceTicks() {
  return TraceRealtimeNs();
}
#endif

double TraceNsPerTick() {
  if (!kTraceTsc) return 1;
  // The rate over the process's life so far: the longer, the better known.
  const Epoch now = ReadEpoch(true);
  return now.ticks > kEpoch.ticks ? double(now.ns - kEpoch.ns) / double(now.ticks - kEpoch.ticks)
                                  : 0;
}

int64_t TraceNs(uint64_t ticks, double ns_per_tick) {
  if (!kTraceTsc || ticks == 0) return int64_t(ticks);
  return int64_t(kEpoch.ns) + int64_t((double(ticks) - double(kEpoch.ticks)) * ns_per_tick);
}

FlightRecorder::FlightRecorder(size_t capacity, std::string comm, uint32_t rank, uint32_t size,
                               std::vector<uint32_t> job_ranks, std::string backend)
    : capacity_(capacity),
      ring_(new Slot[capacity]),
      comm_(std::move(comm)),
      rank_(rank),
      size_(size),
      job_ranks_(std::move(job_ranks)),
      backend_(std::move(backend)) {}

void FlightRecorder::Posted(PostedOp* op, uint64_t seq, int32_t status) {
  const uint64_t number = posts_.load(std::memory_order_relaxed) + 1;
  Slot& s = ring_[(number - 1) % capacity_];
  const uint64_t now = TraceTicks();
  // A sequence lock: 0 while the slot is rewritten (a finish for the old post
  // misses it, a dump skips it), its number once whole.
  s.number.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.seq.store(seq - 1, std::memory_order_relaxed);  // from 0, as the errors count
  s.count.store(op->count, std::memory_order_relaxed);
  s.posted.store(op->posted_ticks ? op->posted_ticks : now, std::memory_order_relaxed);
  s.issued.store(now, std::memory_order_relaxed);
  s.finished.store(status == PLEXUS_OK ? 0 : now, std::memory_order_relaxed);
  s.kind.store((op->coll & 0xff) | (op->dtype & 0xff) << 8 | (op->op & 0xff) << 16,
               std::memory_order_relaxed);
  s.root.store(op->root, std::memory_order_relaxed);
  s.status.store(status, std::memory_order_relaxed);
  s.number.store(number, std::memory_order_release);
  posts_.store(number, std::memory_order_release);
  op->trace_slot = number;
}

void FlightRecorder::Finished(const PostedOp& op, int32_t status) {
  if (op.trace_slot == 0) return;
  Slot& s = ring_[(op.trace_slot - 1) % capacity_];
  if (s.number.load(std::memory_order_acquire) != op.trace_slot) return;  // overwritten
  s.status.store(status, std::memory_order_relaxed);
  s.finished.store(TraceTicks(), std::memory_order_release);
}

void FlightRecorder::Note(const PostedOp& op, int32_t status, const std::string& message) {
  std::lock_guard<std::mutex> lock(said_mutex_);
  if (said_.size() == kKeptSaid) said_.erase(said_.begin());
  said_.push_back(Said{op.seq ? op.seq - 1 : 0, status, int64_t(TraceRealtimeNs()), message});
}

std::string FlightRecorder::Json() const {
  std::string j = "{\"name\": " + JsonString(comm_) + ", \"rank\": " + std::to_string(rank_) +
                  ", \"size\": " + std::to_string(size_) +
                  ", \"backend\": " + JsonString(backend_) + ", \"job_ranks\": [";
  for (size_t i = 0; i < job_ranks_.size(); ++i) {
    j += (i ? ", " : "") + std::to_string(job_ranks_[i]);
  }
  const uint64_t posts = posts_.load(std::memory_order_acquire);
  j += "], \"capacity\": " + std::to_string(capacity_) + ", \"posts\": " + std::to_string(posts) +
       ",\n   \"fields\": [\"seq\", \"collective\", \"count\", \"dtype\", \"op\", \"root\", "
       "\"posted_ns\", \"issued_ns\", \"finished_ns\", \"status\"],\n   \"ops\": [";
  const uint64_t first = posts > capacity_ ? posts - capacity_ + 1 : 1;
  const double rate = TraceNsPerTick();
  bool any = false;
  for (uint64_t n = first; n <= posts; ++n) {
    const Slot& s = ring_[(n - 1) % capacity_];
    if (s.number.load(std::memory_order_acquire) != n) continue;  // being rewritten
    const uint64_t seq = s.seq.load(std::memory_order_relaxed);
    const uint64_t count = s.count.load(std::memory_order_relaxed);
    const uint64_t posted = s.posted.load(std::memory_order_relaxed);
    const uint64_t issued = s.issued.load(std::memory_order_relaxed);
    const uint64_t finished = s.finished.load(std::memory_order_relaxed);
    const uint32_t kind = s.kind.load(std::memory_order_relaxed);
    const uint32_t root = s.root.load(std::memory_order_relaxed);
    const int32_t status = s.status.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.number.load(std::memory_order_relaxed) != n) continue;  // rewritten meanwhile
    const auto coll = plexus_collective_t(kind & 0xff);
    const bool reduces = coll == PLEXUS_COLL_ALLREDUCE || coll == PLEXUS_COLL_REDUCE ||
                         coll == PLEXUS_COLL_REDUCE_SCATTER;
    const bool rooted = coll == PLEXUS_COLL_BROADCAST || coll == PLEXUS_COLL_REDUCE ||
                        coll == PLEXUS_COLL_GATHER || coll == PLEXUS_COLL_SCATTER;
    j += std::string(any ? ",\n    [" : "\n    [") + std::to_string(seq) + ", \"" +
         algos::CollectiveName(coll) + "\", " + std::to_string(count) + ", \"" +
         (coll == PLEXUS_COLL_BARRIER ? "-" : algos::DtypeName(plexus_dtype_t(kind >> 8 & 0xff))) +
         "\", \"" + (reduces ? algos::ReduceOpName(plexus_reduce_op_t(kind >> 16 & 0xff)) : "-") +
         "\", " + (rooted ? std::to_string(root) : std::string("-1")) + ", " +
         std::to_string(TraceNs(posted, rate)) + ", " + std::to_string(TraceNs(issued, rate)) +
         ", " + std::to_string(TraceNs(finished, rate)) + ", " + std::to_string(status) + "]";
    any = true;
  }
  j += any ? "\n   ],\n   \"failures\": [" : "],\n   \"failures\": [";
  std::lock_guard<std::mutex> lock(said_mutex_);
  for (size_t i = 0; i < said_.size(); ++i) {
    j += std::string(i ? ",\n    " : "\n    ") + "{\"seq\": " + std::to_string(said_[i].seq) +
         ", \"status\": " + std::to_string(said_[i].status) +
         ", \"at_ns\": " + std::to_string(said_[i].at_ns) +
         ", \"message\": " + JsonString(said_[i].message) + "}";
  }
  return j + "]}";
}

std::shared_ptr<FlightRecorder> NewRecorder(const CommState& s) {
  const size_t capacity = Capacity();
  if (capacity == 0) return nullptr;
  auto recorder = std::make_shared<FlightRecorder>(capacity, s.name, s.rank, s.size, s.job_ranks,
                                                   s.backend ? s.backend->name() : "");
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.job_rank < 0 && s.rank < s.job_ranks.size()) {
    r.job_rank = s.job_ranks[s.rank];
    r.job_size = s.job && s.job->launch.size ? s.job->launch.size : s.size;
    r.backend = s.backend ? s.backend->name() : "";
  }
  if (r.recorders.size() == kKeptRecorders) {
    // The oldest of the communicators gone first (only the registry holds
    // them), else the oldest.
    auto gone = std::find_if(r.recorders.begin(), r.recorders.end(),
                             [](const auto& p) { return p.use_count() == 1; });
    r.recorders.erase(gone != r.recorders.end() ? gone : r.recorders.begin());
  }
  r.recorders.push_back(recorder);
  if (!std::exchange(r.dumps_set_up, true)) SetUpDumps(r);
  return recorder;
}

void DumpTraces(const char* reason) {
  const char* dir = plexus::settings::Raw(plexus::settings::Id::kTraceDir);
  if (!dir || !*dir) return;
  try {
    Registry& r = TheRegistry();
    std::lock_guard<std::mutex> dumping(r.dump_mutex);
    std::vector<std::shared_ptr<FlightRecorder>> recorders;
    int64_t job_rank, job_size;
    std::string backend;
    {
      std::lock_guard<std::mutex> lock(r.mutex);
      recorders = r.recorders;
      job_rank = r.job_rank;
      job_size = r.job_size;
      backend = r.backend;
    }
    if (job_rank < 0) return;  // no communicator yet
    char host[256] = "";
    ::gethostname(host, sizeof host - 1);
    std::string j =
        "{\"format\": \"plexus-trace\", \"version\": 1, \"job\": " + JsonString(JobId()) +
        ", \"rank\": " + std::to_string(job_rank) + ", \"size\": " + std::to_string(job_size) +
        ", \"host\": " + JsonString(host) + ", \"pid\": " + std::to_string(long(::getpid())) +
        ", \"backend\": " + JsonString(backend) + ", \"reason\": " + JsonString(reason) +
        ", \"dumped_ns\": " + std::to_string(TraceRealtimeNs()) + ",\n \"communicators\": [";
    for (size_t i = 0; i < recorders.size(); ++i) {
      j += std::string(i ? ",\n  " : "\n  ") + recorders[i]->Json();
    }
    // The spans, in wall-clock time like the collectives.
    j += "],\n \"spans\": [";
    const int64_t steady_to_wall =
        int64_t(TraceRealtimeNs()) - std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::steady_clock::now().time_since_epoch())
                                         .count();
    SpanRing& spans = Spans();
    const uint64_t marks = spans.marks.load(std::memory_order_acquire);
    bool any = false;
    for (uint64_t n = marks > SpanRing::kSize ? marks - SpanRing::kSize + 1 : 1; n <= marks; ++n) {
      const SpanRing::Span& s = spans.ring[(n - 1) % SpanRing::kSize];
      const char* name = s.name.load(std::memory_order_relaxed);
      if (s.number.load(std::memory_order_acquire) != n || !name) continue;
      j += std::string(any ? ",\n  [" : "\n  [") + JsonString(name) + ", " +
           std::to_string(s.begin.load(std::memory_order_relaxed) + steady_to_wall) + ", " +
           std::to_string(s.end.load(std::memory_order_relaxed) + steady_to_wall) + "]";
      any = true;
    }
    j += "]}\n";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string path = std::string(dir) + "/rank-" + std::to_string(job_rank) + ".json";
    const std::string tmp = path + ".tmp." + std::to_string(long(::getpid()));
    // (A new file, never one a link points to: DIR may be shared. Only its
    // owner may read it: it names the job's ranks, hosts and timings.)
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    FILE* f = fd >= 0 ? ::fdopen(fd, "w") : nullptr;
    if (fd >= 0 && !f) ::close(fd);
    bool ok = f && std::fwrite(j.data(), 1, j.size(), f) == j.size();
    if (f) ok = std::fclose(f) == 0 && ok;
    if (ok) ok = std::rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok) {
      std::remove(tmp.c_str());
      LogLine(PLEXUS_LOG_WARN, "plexus",
              "could not write the flight recorder's dump " + path + ": " + std::strerror(errno));
      return;
    }
    LogLine(PLEXUS_LOG_INFO, "plexus",
            std::string("flight recorder: wrote ") + path + " (" + reason + ")");
  } catch (...) {
    // Out of memory while dumping: the dump is lost, the program is not.
  }
}

}  // namespace plexus::detail

namespace plexus::trace {

void Mark(const char* name, std::chrono::steady_clock::time_point begin,
          std::chrono::steady_clock::time_point end) {
  if (detail::Capacity() == 0 || !name) return;
  detail::SpanRing& spans = detail::Spans();
  const uint64_t number = spans.marks.fetch_add(1, std::memory_order_acq_rel) + 1;
  detail::SpanRing::Span& s = spans.ring[(number - 1) % detail::SpanRing::kSize];
  s.number.store(0, std::memory_order_relaxed);
  s.name.store(name, std::memory_order_relaxed);
  s.begin.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(begin.time_since_epoch()).count(),
      std::memory_order_relaxed);
  s.end.store(std::chrono::duration_cast<std::chrono::nanoseconds>(end.time_since_epoch()).count(),
              std::memory_order_relaxed);
  s.number.store(number, std::memory_order_release);
}

}  // namespace plexus::trace
