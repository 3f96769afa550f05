// Shared buffers of the one-host segment: MemAlloc, MemFree, and the
// allreduce that runs in place on them without a copy (see
// one_host_shm.hpp, MemAlloc, for the why and the protocol).
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "one_host_shm_layout.hpp"
#include "plexus/algos/describe.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/kit/one_host_shm.hpp"

namespace plexus::kit {

using namespace shm_layout;

namespace {

constexpr uint64_t kWindowMagic = 0x31304e4957584c50ull;  // "PLXWIN01"
// The header page in front of a buffer's bytes, which so start page-aligned.
constexpr uint64_t kHeaderPage = 4096;
// No buffer of a 64-bit Linux process is this large.
constexpr uint64_t kMaxWindowBytes = 1ull << 56;
// The done counter keeps 16 bits for the chunks of one operation.
constexpr uint64_t kMaxChunks = 0xffff;

struct WindowHeader {
  uint64_t magic;
  uint32_t rank;   // its owner
  uint32_t index;  // its owner's MemAlloc call
  uint64_t bytes;  // usable bytes after the page
  uint8_t token[kTokenBytes];
};

std::string ErrnoText(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// Maps a buffer's file whole (header page and bytes); null and *why on
// failure.
uint8_t* MapFile(int fd, uint64_t total, std::string* why) {
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    *why = ErrnoText("mmap");
    return nullptr;
  }
  return static_cast<uint8_t*>(p);
}

void Unmap(uint8_t* usable, uint64_t bytes) {
  if (usable) munmap(usable - kHeaderPage, kHeaderPage + bytes);
}

}  // namespace

std::string OneHostShm::WindowName(uint32_t rank, uint32_t index) const {
  return name_ + "-w" + std::to_string(index) + "-r" + std::to_string(rank);
}

algos::Status OneHostShm::MemAlloc(uint64_t bytes, void** out) {
  std::lock_guard<std::mutex> lock(windows_mutex_);
  const uint32_t index = windows_made_++;  // failed calls count too: every rank counts alike
  const std::string prefix =
      backend_ + " rank " + std::to_string(rank_) + " mem_alloc(" + std::to_string(bytes) + ")";
  if (!windows_enabled_) {
    return {PLEXUS_ERR_UNSUPPORTED, prefix + ": PLEXUS_SHM_WINDOWS=off"};
  }
  if (bytes == 0 || bytes > kMaxWindowBytes) {
    return {PLEXUS_ERR_INVALID_ARGUMENT,
            prefix + ": bytes must be at least 1 and at most 2^56 (a count larger than meant?)"};
  }
  const std::string name = WindowName(rank_, index);
  const uint64_t total = kHeaderPage + bytes;
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return {PLEXUS_ERR_SYSTEM, prefix + ": " + ErrnoText("shm_open " + name)};
  std::string why;
  uint8_t* p = nullptr;
  // Not ftruncate alone: a full /dev/shm would be found by a SIGBUS in a
  // collective, not here.
  if (int e = posix_fallocate(fd, 0, off_t(total)); e != 0) {
    why = "reserving " + std::to_string(total >> 10) + " KiB in /dev/shm: " + std::strerror(e);
  } else {
    p = MapFile(fd, total, &why);
  }
  close(fd);
  if (!p) {
    shm_unlink(name.c_str());
    return {PLEXUS_ERR_SYSTEM, prefix + ": " + why};
  }
  auto* header = reinterpret_cast<WindowHeader*>(p);
  header->magic = kWindowMagic;
  header->rank = rank_;
  header->index = index;
  header->bytes = bytes;
  std::memcpy(header->token, token_, kTokenBytes);
  auto w = std::make_shared<Window>();
  w->index = index;
  w->bytes = bytes;
  w->base = p + kHeaderPage;
  w->name = name;
  w->peers.assign(size_, nullptr);
  *out = w->base;
  windows_.push_back(std::move(w));
  return {};
}

algos::Status OneHostShm::MemFree(void* p) {
  std::lock_guard<std::mutex> lock(windows_mutex_);
  for (auto it = windows_.begin(); it != windows_.end(); ++it) {
    if ((*it)->base != p) continue;
    windows_.erase(it);  // unmapped now, or when an operation on it ends
    return {};
  }
  char where[32];
  std::snprintf(where, sizeof where, "%p", p);
  return {PLEXUS_ERR_INVALID_ARGUMENT, backend_ + " rank " + std::to_string(rank_) + " mem_free(" +
                                           where +
                                           "): not a buffer of this communicator's mem_alloc"};
}

OneHostShm::Window::~Window() {
  if (linked) shm_unlink(name.c_str());
  for (uint8_t* peer : peers) Unmap(peer, bytes);
  Unmap(base, bytes);
}

void OneHostShm::DropWindows() {
  std::lock_guard<std::mutex> lock(windows_mutex_);
  windows_.clear();
}

std::shared_ptr<OneHostShm::Window> OneHostShm::FindWindow(const uint8_t* p, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(windows_mutex_);
  const auto at = reinterpret_cast<uintptr_t>(p);
  for (auto& w : windows_) {
    const auto base = reinterpret_cast<uintptr_t>(w->base);
    if (at >= base && at - base <= w->bytes && bytes <= w->bytes - (at - base)) return w;
  }
  return nullptr;
}

algos::Status OneHostShm::MapPeers(Window& w, const algos::OpSignature& sig) {
  const uint64_t total = kHeaderPage + w.bytes;
  for (uint32_t r = 0; r < size_; ++r) {
    if (r == rank_ || w.peers[r]) continue;
    const std::string name = WindowName(r, w.index);
    auto fail = [&](const std::string& why) -> algos::Status {
      return {PLEXUS_ERR_SYSTEM, Prefix(sig) + ": rank " + std::to_string(r) + "'s shared buffer " +
                                     name + ": " + why};
    };
    const int fd = shm_open(name.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0) return fail(ErrnoText("shm_open"));
    struct stat st {};
    std::string why;
    uint8_t* p = nullptr;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 077) != 0 || uint64_t(st.st_size) != total) {
      why = "not a file of this user's alone of " + std::to_string(total) +
            " bytes (did every rank allocate the same sizes in the same order?)";
    } else {
      p = MapFile(fd, total, &why);
    }
    close(fd);
    if (!p) return fail(why);
    const auto* header = reinterpret_cast<const WindowHeader*>(p);
    if (header->magic != kWindowMagic || header->rank != r || header->index != w.index ||
        header->bytes != w.bytes || std::memcmp(header->token, token_, kTokenBytes) != 0) {
      munmap(p, total);
      return fail("does not carry this communicator's token, or is another buffer");
    }
    w.peers[r] = p + kHeaderPage;
  }
  return {};
}

algos::Status OneHostShm::WindowAllreduce(const algos::OpSignature& sig, Window& w,
                                          uint64_t offset) {
  const uint64_t esize = algos::DtypeSize(sig.dtype);
  const uint64_t count = sig.count;
  const uint32_t half = chunk_ & 1;
  const uint32_t step1 = 2 * chunk_ + 1;
  // 1. Map the peers' buffers of this number (the first time): every rank's
  //    MemAlloc returned before any rank posted on it (the host agrees on
  //    the buffers with a collective), so their files are there; and once
  //    every rank has published step1 below, every rank has mapped mine.
  if (algos::Status st = MapPeers(w, sig); !st.ok()) return st;
  // 2. Posted: my line says which operation, on which buffer, where.
  SigLine& mine = LinesOf(base_, rank_).sig[half];
  WriteSignature(half, sig);
  mine.coll = sig.coll | kOnWindowFlag;
  const uint64_t where[2] = {w.index, offset};
  std::memcpy(mine.data, where, sizeof where);
  Publish(step1);
  if (algos::Status st = WaitAll(step1, sig); !st.ok()) return st;
  for (uint32_t r = 0; r < size_; ++r) {
    const SigLine& s = LinesOf(base_, r).sig[half];
    const algos::OpSignature theirs{
        s.seq, plexus_collective_t(s.coll & ~kOnWindowFlag), s.dtype, s.op, s.count, 0};
    if ((s.coll & kOnWindowFlag) == 0) {
      return Mismatch(sig, r, theirs, kOnOwnBuffers, kOnSharedBuffer);
    }
    uint64_t at[2];
    std::memcpy(at, s.data, sizeof at);
    if (theirs.seq != sig.seq || theirs.coll != sig.coll || theirs.dtype != sig.dtype ||
        theirs.op != sig.op || theirs.count != sig.count || at[0] != where[0] ||
        at[1] != where[1]) {
      auto on = [](const uint64_t* a) {
        return " in place on shared buffer #" + std::to_string(a[0]) + " at byte " +
               std::to_string(a[1]);
      };
      return Mismatch(sig, r, theirs, on(at), on(where));
    }
  }
  ++chunk_;
  if (w.linked) {  // every peer has mapped it: its name can go
    shm_unlink(w.name.c_str());
    w.linked = false;
  }
  // 3. Take chunks until none is left. The generation counts the window
  //    operations (the same on every rank), so it differs from the previous
  //    one's; the first rank here resets the two words from that one (every
  //    rank is past it: each published step1 only after it completed).
  const uint32_t generation = ++window_ops_;
  uint64_t chunk_elems = std::max<uint64_t>(1, slot_bytes_ / esize);
  if ((count + chunk_elems - 1) / chunk_elems > kMaxChunks) {
    chunk_elems = (count + kMaxChunks - 1) / kMaxChunks;
  }
  const uint64_t chunks = (count + chunk_elems - 1) / chunk_elems;
  WindowControl& control = ControlOf(base_);
  const uint32_t generation16 = generation & 0xffff;
  for (uint32_t d = control.done.load(std::memory_order_acquire);
       d >> 16 != generation16 &&
       !control.done.compare_exchange_weak(d, generation16 << 16, std::memory_order_acq_rel);) {
  }
  for (uint64_t c = control.claim.load(std::memory_order_acquire);
       c >> 32 != generation && !control.claim.compare_exchange_weak(c, uint64_t(generation) << 32,
                                                                     std::memory_order_acq_rel);) {
  }
  auto at = [&](uint32_t r, uint64_t element) {
    return (r == rank_ ? w.base : w.peers[r]) + offset + element * esize;
  };
  for (;;) {
    const uint64_t c = control.claim.fetch_add(1, std::memory_order_acq_rel);
    const uint64_t k = c & 0xffffffffu;
    if (c >> 32 != generation || k >= chunks) break;
    const uint64_t lo = k * chunk_elems;
    const uint64_t n = std::min(chunk_elems, count - lo);
    // In rank order into rank 0's buffer, whoever sums: every rank gets the
    // same bits, which the same chunk on another day would give too.
    uint8_t* acc = at(0, lo);
    for (uint32_t r = 1; r < size_; ++r) {
      if (sig.op == PLEXUS_OP_AVG && r + 1 == size_) {
        algos::ReduceToAverage(acc, acc, at(r, lo), n, sig.dtype, size_);
      } else {
        algos::ReduceTo(acc, acc, at(r, lo), n, sig.dtype, sig.op);
      }
    }
    for (uint32_t r = 1; r < size_; ++r) std::memcpy(at(r, lo), acc, n * esize);
    // seq_cst: with the sleeper's seq_cst count and load, either it sees
    // this value or this load sees it asleep.
    const uint32_t now = control.done.fetch_add(1, std::memory_order_seq_cst) + 1;
    if ((now & 0xffff) == chunks && control.done_sleepers.load(std::memory_order_seq_cst) > 0) {
      Futex(&control.done, FUTEX_WAKE, INT_MAX, nullptr);
    }
    if (algos::Status st = CheckPeers(sig); !st.ok()) {
      LeaveWindowOp(generation, chunks);
      return st;
    }
  }
  // 4. Wait for the chunks other ranks still sum.
  algos::Status st = WaitChunksDone(generation16 << 16 | uint32_t(chunks), sig);
  if (!st.ok()) LeaveWindowOp(generation, chunks);
  return st;
}

void OneHostShm::LeaveWindowOp(uint32_t generation, uint64_t chunks) {
  WindowControl& control = ControlOf(base_);
  uint64_t c = control.claim.load(std::memory_order_acquire);
  while (c >> 32 == generation && (c & 0xffffffffu) < chunks &&
         !control.claim.compare_exchange_weak(c, uint64_t(generation) << 32 | chunks,
                                              std::memory_order_acq_rel)) {
  }
  if (c >> 32 != generation) return;
  const uint64_t taken = std::min<uint64_t>(c & 0xffffffffu, chunks);
  const uint32_t generation16 = generation & 0xffff;
  // A peer sums a chunk in well under a millisecond; one parked by the
  // scheduler, or stopped, may take longer: give up after a second (its
  // process, if it ever runs again, finds the communicator failed).
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(1);
  for (;;) {
    const uint32_t d = control.done.load(std::memory_order_acquire);
    if (d >> 16 != generation16 || (d & 0xffff) >= taken) return;
    if (Clock::now() >= give_up) return;
    sched_yield();
  }
}

algos::Status OneHostShm::WaitChunksDone(uint32_t target, const algos::OpSignature& sig) {
  WindowControl& control = ControlOf(base_);
  const Clock::time_point start = Clock::now();
  for (unsigned i = 1;; ++i) {
    if (control.done.load(std::memory_order_acquire) == target) return {};
    if (i % 64 != 0) continue;
    const auto spun = Clock::now() - start;
    if (spun >= spin_) break;
    if (spun > kYieldAfter) sched_yield();
    if (algos::Status st = CheckPeers(sig); !st.ok()) return st;
  }
  // Sleep on the counter; no progress for the timeout fails, a peer's exit
  // (which may hold a chunk) within kCheckMs.
  uint32_t last = control.done.load(std::memory_order_acquire);
  Clock::time_point last_change = Clock::now();
  Clock::time_point next_liveness = last_change;
  for (;;) {
    if (algos::Status st = CheckPeers(sig); !st.ok()) return st;
    const Clock::time_point now = Clock::now();
    const uint32_t seen = control.done.load(std::memory_order_acquire);
    if (seen == target) return {};
    if (seen != last) {
      last = seen;
      last_change = now;
    }
    if (now >= next_liveness) {
      next_liveness = now + std::chrono::milliseconds(kCheckMs);
      for (uint32_t r = 0; r < size_; ++r) {
        if (r == rank_ || !ProcessEnded(peers_[r])) continue;
        if (control.done.load(std::memory_order_acquire) == target) return {};
        return {PLEXUS_ERR_REMOTE,
                Prefix(sig) + ": rank " + std::to_string(r) + " (pid " +
                    std::to_string(peers_[r].pid) + " on this host) has exited with " +
                    std::to_string((target & 0xffff) - (seen & 0xffff)) + " chunk(s) not done"};
      }
    }
    const int64_t waited_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - last_change).count();
    if (waited_ms >= timeout_ms_) {
      return {PLEXUS_ERR_TIMEOUT, Prefix(sig) + ": no chunk done for " + std::to_string(waited_ms) +
                                      " ms (" + std::to_string(seen & 0xffff) + " of " +
                                      std::to_string(target & 0xffff) + " done)"};
    }
    control.done_sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (control.done.load(std::memory_order_seq_cst) == seen && CheckPeers(sig).ok()) {
      const int64_t ms = std::min<int64_t>(kCheckMs, timeout_ms_ - waited_ms);
      const timespec ts{time_t(ms / 1000), long(ms % 1000) * 1000000L};
      Futex(&control.done, FUTEX_WAIT, seen, &ts);
    }
    control.done_sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace plexus::kit
