// The one-host shared-memory allreduce (see one_host_shm.hpp for the why and
// the protocol).
#include "plexus/kit/one_host_shm.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <tuple>

#include "one_host_shm_layout.hpp"
#include "plexus/algos/comm_setting.hpp"
#include "plexus/algos/describe.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/kit/queue_transport.hpp"
#include "plexus/kit/settings.hpp"

namespace plexus::kit {

using namespace shm_layout;

namespace {

// The slots of one rank, both halves: PLEXUS_SHM_SLOT_KIB is one half.
constexpr int64_t kDefaultSlotKib = 512;
// The whole segment stays below this, whatever the number of ranks: slots
// shrink first (to kMinSlotBytes), then there is no segment.
constexpr uint64_t kMaxSegmentBytes = 256ull << 20;
constexpr uint64_t kMinSlotBytes = 64 << 10;

std::string Hex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

bool Random(uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t got = getrandom(p, n, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += got;
    n -= size_t(got);
  }
  return true;
}

// Set-up messages, exchanged as bytes over the out-of-band channel.
struct Hello {
  ProcessId id;
  uint32_t wants = 0;        // this rank's PLEXUS_SHM allows it and it sees all ranks on its host
  uint32_t bad_setting = 0;  // this rank fails comm_create for a malformed setting
};
struct Offer {
  uint32_t ok = 0;
  uint32_t reserved = 0;
  uint64_t bytes = 0;
  char name[kNameBytes] = {};
  uint8_t token[kTokenBytes] = {};
};

// The collective a rank announced; false when none yet or it is being
// written just now.
bool ReadAnnounced(const RankLines& line, algos::OpSignature* sig) {
  const uint64_t v1 = line.announce_version.load(std::memory_order_acquire);
  if (v1 == 0 || v1 % 2 != 0) return false;
  uint64_t f[4];
  // Acquire loads: the second look at the version cannot move before them.
  for (int i = 0; i < 4; ++i) f[i] = line.announced[i].load(std::memory_order_acquire);
  if (line.announce_version.load(std::memory_order_relaxed) != v1) return false;
  *sig = {f[0],
          plexus_collective_t(f[2] >> 32),
          plexus_dtype_t(uint32_t(f[2])),
          plexus_reduce_op_t(f[3]),
          f[1],
          0};
  return true;
}

// Has the peer whose lines these are published step target? A stamp is
// compared for equality: it is written only by inline operations, so a
// half that has had none for 2^31 steps would look ahead to a signed
// difference; no peer can be ahead on a half (it writes the half again only
// after this rank has published the next step). The counter moves with
// every step, so a signed difference is right for it.
bool Arrived(const RankLines& line, uint32_t target, int inline_half) {
  if (inline_half >= 0) {
    return line.sig[inline_half].stamp.load(std::memory_order_acquire) == target;
  }
  return Reached(line.published.load(std::memory_order_acquire), target);
}

// No buffer of a 64-bit Linux process is this large (47-bit address
// spaces, 56 with five-level page tables).
constexpr uint64_t kAddressSpaceBytes = 1ull << 57;

// Whether n blocks of count elements of esize bytes could be one buffer: a
// count far beyond any buffer (1 EiB) is this rank's error, said so, where a
// copy would end the process with SIGSEGV. (A transport that reads the
// buffer through the kernel gets EFAULT instead.) Only the size: a pointer
// may carry tag bits above the address (arm64 MTE, Intel LAM). A count too
// large for its buffer by less still faults, as any in-process copy does.
bool CouldBeOneBuffer(uint64_t n, uint64_t count, uint64_t esize) {
  uint64_t b = 0;
  if (__builtin_mul_overflow(count, esize, &b) || __builtin_mul_overflow(b, n, &b)) return false;
  return b <= kAddressSpaceBytes;
}

bool SameOperation(const algos::OpSignature& a, const algos::OpSignature& b) {
  return a.seq == b.seq && a.coll == b.coll && a.dtype == b.dtype && a.op == b.op &&
         a.count == b.count;
}

}  // namespace

uint8_t* OneHostShm::Slot(uint32_t rank, uint32_t half) const {
  return base_ + slots_offset_ + (uint64_t(rank) * 2 + half) * slot_bytes_;
}

algos::Status OneHostShm::Create(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                                 const OneHostShmOptions& options, std::unique_ptr<OneHostShm>* out,
                                 std::string* why_not) {
  out->reset();
  const std::string who = std::string(options.backend) + " rank " + std::to_string(config.rank);
  if (config.size < 2) {
    *why_not = "one rank";
    return {};
  }
  // A malformed setting fails comm_create on every rank, but only after the
  // first exchange: the others must not wait for this rank until the timeout.
  std::string bad_setting, mode, windows;
  if (std::string why; !ChoiceSetting(host, config, settings::Id::kShm, &mode, &why)) {
    bad_setting = why;
  }
  if (std::string why; !ChoiceSetting(host, config, settings::Id::kShmWindows, &windows, &why)) {
    bad_setting = why;
  }
  int64_t slot_kib = kDefaultSlotKib;
  if (std::string why; !IntSetting(host, config, settings::Id::kShmSlotKib, &slot_kib, &why)) {
    bad_setting = why;
  }
  uint64_t slot_bytes = uint64_t(slot_kib) << 10;
  while (slot_bytes > kMinSlotBytes &&
         SlotsOffset(config.size) + uint64_t(config.size) * 2 * slot_bytes > kMaxSegmentBytes) {
    slot_bytes /= 2;
  }
  const uint64_t bytes = SlotsOffset(config.size) + uint64_t(config.size) * 2 * slot_bytes;

  // 1. Does every rank want it, and are they all on this host (same kernel,
  //    pid and network namespaces, host name)?
  Hello hello;
  hello.id = ThisProcess();
  hello.wants = mode != "off" && config.local_size == config.size && hello.id.host_key != 0 &&
                bytes <= kMaxSegmentBytes;
  hello.bad_setting = !bad_setting.empty();
  std::vector<Hello> hellos(config.size);
  if (int32_t rc = host.oob_allgather(host.ctx, config.oob, &hello, hellos.data(), sizeof(Hello),
                                      config.timeout_ms);
      rc != PLEXUS_OK) {
    return {rc, who + ": out-of-band exchange for shared memory failed"};
  }
  if (!bad_setting.empty()) return {PLEXUS_ERR_INVALID_ARGUMENT, bad_setting};
  for (uint32_t r = 0; r < config.size; ++r) {
    if (hellos[r].bad_setting) {
      return {PLEXUS_ERR_INVALID_ARGUMENT,
              "rank " + std::to_string(r) +
                  " has a malformed PLEXUS_SHM, PLEXUS_SHM_WINDOWS or PLEXUS_SHM_SLOT_KIB"};
    }
  }
  for (uint32_t r = 0; r < config.size; ++r) {
    if (!hellos[r].wants) {
      *why_not = mode == "off" ? "PLEXUS_SHM=off"
                               : "rank " + std::to_string(r) + " does not share this host's memory";
      return {};
    }
    if (hellos[r].id.host_key != hellos[0].id.host_key) {
      *why_not = "rank " + std::to_string(r) + " is on another host or namespace than rank 0";
      return {};
    }
  }

  // 2. Rank 0 makes the segment and offers it.
  auto shm = std::unique_ptr<OneHostShm>(new OneHostShm);
  shm->backend_ = options.backend;
  shm->rank_ = config.rank;
  shm->size_ = config.size;
  shm->timeout_ms_ = config.timeout_ms;
  shm->spin_ = std::chrono::microseconds(options.spin_us);
  shm->slot_bytes_ = slot_bytes;
  shm->windows_enabled_ = windows != "off";
  shm->slots_offset_ = SlotsOffset(config.size);
  for (const Hello& h : hellos) shm->peers_.push_back(h.id);

  Offer offer;
  std::string failure;  // why this rank has no mapping
  int fd = -1;
  if (config.rank == 0) {
    uint8_t name_bits[8];
    if (!Random(name_bits, sizeof name_bits) || !Random(offer.token, kTokenBytes)) {
      failure = std::string("getrandom: ") + std::strerror(errno);
    } else {
      const std::string name =
          "/plexus-shm-" + std::to_string(getpid()) + "-" + Hex(name_bits, sizeof name_bits);
      std::snprintf(offer.name, sizeof offer.name, "%s", name.c_str());
      fd = shm_open(offer.name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0) {
        failure = std::string("shm_open ") + offer.name + ": " + std::strerror(errno);
      } else if (int e = posix_fallocate(fd, 0, off_t(bytes)); e != 0) {
        // Not ftruncate alone: a full /dev/shm would then be found by a
        // SIGBUS on first touch, not by an error here.
        failure =
            "reserving " + std::to_string(bytes >> 10) + " KiB in /dev/shm: " + std::strerror(e);
      }
    }
    offer.ok = failure.empty();
    offer.bytes = bytes;
  }
  if (int32_t rc =
          host.oob_broadcast(host.ctx, config.oob, &offer, sizeof offer, 0, config.timeout_ms);
      rc != PLEXUS_OK) {
    if (fd >= 0) {
      shm_unlink(offer.name);
      close(fd);
    }
    return {rc, who + ": out-of-band exchange for shared memory failed"};
  }
  offer.name[kNameBytes - 1] = '\0';

  // 3. The peers open it, believing it only if it is this user's alone and
  //    carries rank 0's token; everybody maps it.
  if (offer.ok && config.rank != 0) {
    fd = shm_open(offer.name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
    struct stat st {};
    if (fd < 0) {
      failure = std::string("shm_open ") + offer.name + ": " + std::strerror(errno);
    } else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
               (st.st_mode & 077) != 0 || uint64_t(st.st_size) != offer.bytes ||
               offer.bytes != bytes) {
      failure = std::string(offer.name) + " is not a segment of this user's alone of " +
                std::to_string(bytes) + " bytes";
    }
  }
  if (offer.ok && failure.empty()) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) {
      failure = std::string("mmap: ") + std::strerror(errno);
    } else {
      shm->base_ = static_cast<uint8_t*>(p);
      shm->mapped_bytes_ = bytes;
      auto* header = reinterpret_cast<Header*>(shm->base_);
      if (config.rank == 0) {
        // The rest of the segment is zero (fresh tmpfs pages): counters at 0.
        header->magic = kMagic;
        header->version = kVersion;
        header->ranks = config.size;
        header->slot_bytes = slot_bytes;
        std::memcpy(header->token, offer.token, kTokenBytes);
      }
    }
  }
  if (fd >= 0) close(fd);

  // 4. Everybody mapped? (Rank 0 has written the header before this.)
  uint32_t mapped = offer.ok && failure.empty();
  std::vector<uint32_t> all_mapped(config.size);
  int32_t rc = host.oob_allgather(host.ctx, config.oob, &mapped, all_mapped.data(), sizeof mapped,
                                  config.timeout_ms);
  if (config.rank == 0 && offer.ok) shm_unlink(offer.name);
  if (rc != PLEXUS_OK) return {rc, who + ": out-of-band exchange for shared memory failed"};
  if (mapped && config.rank != 0) {
    const auto* header = reinterpret_cast<const Header*>(shm->base_);
    if (header->magic != kMagic || header->version != kVersion || header->ranks != config.size ||
        header->slot_bytes != slot_bytes ||
        std::memcmp(header->token, offer.token, kTokenBytes) != 0) {
      failure = std::string(offer.name) + " does not carry rank 0's token";
      mapped = 0;
    }
  }
  // The token check's outcome must be the same everywhere too.
  if (int32_t rc2 = host.oob_allgather(host.ctx, config.oob, &mapped, all_mapped.data(),
                                       sizeof mapped, config.timeout_ms);
      rc2 != PLEXUS_OK) {
    return {rc2, who + ": out-of-band exchange for shared memory failed"};
  }
  for (uint32_t r = 0; r < config.size; ++r) {
    if (!all_mapped[r]) {
      *why_not =
          r == config.rank ? failure : "rank " + std::to_string(r) + " could not map the segment";
      if (!offer.ok && r == 0 && config.rank != 0) *why_not = "rank 0 could not make the segment";
      return {};
    }
  }
  shm->name_ = offer.name;
  std::memcpy(shm->token_, offer.token, sizeof shm->token_);
  *out = std::move(shm);
  return {};
}

OneHostShm::~OneHostShm() {
  DropWindows();
  if (base_) munmap(base_, mapped_bytes_);
}

std::string OneHostShm::Describe() const {
  return std::to_string(size_) + " ranks, 2 x " + std::to_string(slot_bytes_ >> 10) +
         " KiB slots per rank";
}

std::string OneHostShm::Prefix(const algos::OpSignature& sig) const {
  return backend_ + " " + algos::DescribeOp(sig) + " over shared memory";
}

void OneHostShm::Publish(uint32_t value) {
  RankLines& me = LinesOf(base_, rank_);
  me.published.store(value, std::memory_order_seq_cst);
  // seq_cst on both sides (here and in WaitFor): either the sleeper sees the
  // new value before it sleeps, or this load sees the sleeper.
  if (me.sleepers.load(std::memory_order_seq_cst) > 0) {
    Futex(&me.published, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

void OneHostShm::WakeAll() {
  for (uint32_t r = 0; r < size_; ++r)
    Futex(&LinesOf(base_, r).published, FUTEX_WAKE, INT_MAX, nullptr);
  Futex(&ControlOf(base_).done, FUTEX_WAKE, INT_MAX, nullptr);
}

void OneHostShm::Fail(const algos::Status& why) {
  if (failed_.exchange(true)) return;
  RankLines& me = LinesOf(base_, rank_);
  me.code = why.code;
  std::snprintf(me.reason, sizeof me.reason, "%s", why.message.c_str());
  me.failed.store(1, std::memory_order_release);
  WakeAll();
}

void OneHostShm::Abort() {
  aborted_.store(true);
  WakeAll();
}

algos::Status OneHostShm::CheckPeers(const algos::OpSignature& sig) const {
  if (aborted_.load(std::memory_order_relaxed)) {
    return {PLEXUS_ERR_ABORTED, Prefix(sig) + ": the communicator was aborted"};
  }
  for (uint32_t r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const RankLines& peer = LinesOf(base_, r);
    if (peer.failed.load(std::memory_order_acquire)) {
      char reason[kReasonBytes];
      std::memcpy(reason, peer.reason, sizeof reason);
      reason[sizeof reason - 1] = '\0';
      return {PLEXUS_ERR_REMOTE,
              Prefix(sig) + ": rank " + std::to_string(r) + " gave up on it: " + reason};
    }
    // A peer that runs another collective in this one's place (over its
    // transport, say) would never come: say so now, not at the timeout.
    if (algos::OpSignature theirs;
        ReadAnnounced(peer, &theirs) && theirs.seq == sig.seq && !SameOperation(theirs, sig)) {
      return Mismatch(sig, r, theirs);
    }
  }
  return {};
}

algos::Status OneHostShm::CheckBuffers(const algos::OpSignature& sig, const void* sendbuf,
                                       uint64_t send_blocks, const void* recvbuf,
                                       uint64_t recv_blocks) const {
  const uint64_t esize = algos::DtypeSize(sig.dtype);
  for (const auto& [p, blocks, name] :
       {std::tuple{sendbuf, send_blocks, "sendbuf"},
        std::tuple{static_cast<const void*>(recvbuf), recv_blocks, "recvbuf"}}) {
    if (!CouldBeOneBuffer(blocks, sig.count, esize)) {
      char where[32];
      std::snprintf(where, sizeof where, "%p", p);
      return {PLEXUS_ERR_INVALID_ARGUMENT,
              Prefix(sig) + ": this rank's " + name + " at " + where + " would hold " +
                  std::to_string(blocks) + " x " + std::to_string(sig.count) + " elements of " +
                  std::to_string(esize) +
                  " bytes, more than any address space holds (a count larger than the buffer?)"};
    }
  }
  return {};
}

algos::Status OneHostShm::Mismatch(const algos::OpSignature& sig, uint32_t peer,
                                   const algos::OpSignature& theirs, const std::string& their_where,
                                   const std::string& my_where) const {
  algos::Status st = algos::CollectiveMismatch(rank_, sig, peer, theirs, my_where, their_where);
  st.message = backend_ + " over shared memory: " + st.message;
  return st;
}

void OneHostShm::Announce(const algos::OpSignature& sig) {
  RankLines& me = LinesOf(base_, rank_);
  // The read-modify-write acquires: the stores below cannot move before it.
  const uint64_t v = me.announce_version.fetch_add(1, std::memory_order_acq_rel);
  // Release stores: the odd version is visible before any of them.
  me.announced[0].store(sig.seq, std::memory_order_release);
  me.announced[1].store(sig.count, std::memory_order_release);
  me.announced[2].store(uint64_t(sig.coll) << 32 | sig.dtype, std::memory_order_release);
  me.announced[3].store(sig.op, std::memory_order_release);
  me.announce_version.store(v + 2, std::memory_order_release);
}

algos::Status OneHostShm::CheckSignatures(uint32_t half, const algos::OpSignature& sig) const {
  for (uint32_t r = 0; r < size_; ++r) {
    const SigLine& s = LinesOf(base_, r).sig[half];
    if (s.seq == sig.seq && s.coll == sig.coll && s.dtype == sig.dtype && s.op == sig.op &&
        s.count == sig.count) {
      continue;
    }
    const bool theirs_on_window = (s.coll & kOnWindowFlag) != 0;
    return Mismatch(
        sig, r, {s.seq, plexus_collective_t(s.coll & ~kOnWindowFlag), s.dtype, s.op, s.count, 0},
        theirs_on_window ? kOnSharedBuffer : "", theirs_on_window ? kOnOwnBuffers : "");
  }
  return {};
}

algos::Status OneHostShm::WaitFor(uint32_t peer, uint32_t target, const algos::OpSignature& sig,
                                  int inline_half) {
  RankLines& line = LinesOf(base_, peer);
  const Clock::time_point start = Clock::now();
  // Spin first: on shared memory the answer is often a few hundred ns away.
  for (unsigned i = 1;; ++i) {
    if (Arrived(line, target, inline_half)) return {};
    if (i % 64 != 0) continue;
    const auto spun = Clock::now() - start;
    if (spun >= spin_) break;
    if (spun > kYieldAfter) sched_yield();
    if (algos::Status st = CheckPeers(sig); !st.ok()) return st;
  }
  // Then sleep on the peer's counter, waking to look for failures.
  Clock::time_point next_liveness = start + std::chrono::milliseconds(kCheckMs);
  for (;;) {
    if (algos::Status st = CheckPeers(sig); !st.ok()) return st;
    const Clock::time_point now = Clock::now();
    const int64_t waited_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
    if (now >= next_liveness) {
      next_liveness = now + std::chrono::milliseconds(kCheckMs);
      // (It may have published and exited since we last looked.)
      if (ProcessEnded(peers_[peer]) &&
          !Reached(line.published.load(std::memory_order_acquire), target)) {
        return {PLEXUS_ERR_REMOTE, Prefix(sig) + ": rank " + std::to_string(peer) + " (pid " +
                                       std::to_string(peers_[peer].pid) +
                                       " on this host) has exited"};
      }
    }
    if (waited_ms >= timeout_ms_) {
      algos::OpSignature last;
      const std::string its_last =
          ReadAnnounced(line, &last) ? algos::DescribeOp(last) : std::string("none yet");
      return {PLEXUS_ERR_TIMEOUT, backend_ + " over shared memory: rank " + std::to_string(rank_) +
                                      " made no progress for " + std::to_string(waited_ms) +
                                      " ms waiting for rank(s) " + std::to_string(peer) + " in " +
                                      algos::DescribeOp(sig) + " (the collective rank " +
                                      std::to_string(peer) + " runs: " + its_last + ")"};
    }
    line.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t seen = line.published.load(std::memory_order_seq_cst);
    // An abort or a failure wakes sleepers without changing the counter; one
    // that came since CheckPeers above is seen here (one in the few
    // instructions before the futex call costs at most kCheckMs).
    if (!Reached(seen, target) && CheckPeers(sig).ok()) {
      const int64_t ms = std::min<int64_t>(kCheckMs, timeout_ms_ - waited_ms);
      const timespec ts{time_t(ms / 1000), long(ms % 1000) * 1000000L};
      Futex(&line.published, FUTEX_WAIT, seen, &ts);
    }
    line.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (Reached(line.published.load(std::memory_order_acquire), target)) return {};
  }
}

algos::Status OneHostShm::WaitAll(uint32_t target, const algos::OpSignature& sig, int inline_half) {
  for (uint32_t r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    if (Arrived(LinesOf(base_, r), target, inline_half)) continue;
    if (algos::Status st = WaitFor(r, target, sig, inline_half); !st.ok()) return st;
  }
  return {};
}

void OneHostShm::WriteSignature(uint32_t half, const algos::OpSignature& sig) {
  SigLine& line = LinesOf(base_, rank_).sig[half];
  line.seq = sig.seq;
  line.count = sig.count;
  line.coll = sig.coll;
  line.dtype = sig.dtype;
  line.op = sig.op;
}

algos::Status OneHostShm::AllreduceInline(const algos::OpSignature& sig, const uint8_t* send,
                                          uint8_t* recv) {
  const uint64_t n = sig.count;
  const uint64_t bytes = n * algos::DtypeSize(sig.dtype);
  const uint32_t half = chunk_ & 1;
  const uint32_t step1 = 2 * chunk_ + 1;
  SigLine& mine = LinesOf(base_, rank_).sig[half];
  WriteSignature(half, sig);
  std::memcpy(mine.data, send, bytes);
  mine.stamp.store(step1, std::memory_order_release);
  Publish(step1);  // for peers asleep on the counter
  if (algos::Status st = WaitAll(step1, sig, int(half)); !st.ok()) return st;
  if (algos::Status st = CheckSignatures(half, sig); !st.ok()) return st;
  auto part = [&](uint32_t r) -> const uint8_t* { return LinesOf(base_, r).sig[half].data; };
  algos::ReduceTo(recv, part(0), part(1), n, sig.dtype, sig.op);
  for (uint32_t r = 2; r < size_; ++r) algos::ReduceInto(recv, part(r), n, sig.dtype, sig.op);
  if (sig.op == PLEXUS_OP_AVG) algos::FinishAverage(recv, n, sig.dtype, size_);
  ++chunk_;
  return {};
}

algos::Status OneHostShm::Allreduce(const algos::OpSignature& sig, const void* sendbuf,
                                    void* recvbuf) {
  if (aborted_.load(std::memory_order_relaxed)) {
    return {PLEXUS_ERR_ABORTED, Prefix(sig) + ": the communicator was aborted"};
  }
  const uint64_t esize = algos::DtypeSize(sig.dtype);
  const uint64_t count = sig.count;
  const auto* send = static_cast<const uint8_t*>(sendbuf);
  auto* recv = static_cast<uint8_t*>(recvbuf);
  const plexus_dtype_t dtype = sig.dtype;
  const plexus_reduce_op_t op = sig.op;
  if (algos::Status st = CheckBuffers(sig, sendbuf, 1, recvbuf, 1); !st.ok()) return st;
  const bool small = count * esize <= std::min(kReduceAllMaxBytes, slot_bytes_);
  const uint64_t chunk_elems = slot_bytes_ / esize;
  if (count * esize <= kInlineBytes) return AllreduceInline(sig, send, recv);
  // In place on a shared buffer (MemAlloc) of every rank: no copies.
  if (sendbuf == recvbuf && count * esize > kReduceAllMaxBytes) {
    if (std::shared_ptr<Window> w = FindWindow(recv, count * esize)) {
      return WindowAllreduce(sig, *w, uint64_t(recv - w->base));
    }
  }
  // Sums elements [lo, hi) of the chunk in `half` over all ranks into out:
  // small (every rank sums the whole chunk, so all must take one order): in
  // rank order, every part from the slots; large (this rank alone sums its
  // piece): its own part first, from its own buffer (own, which out may be:
  // in place the kernels then run as acc op= in), then the others' in rank
  // order from their slots.
  auto sum = [&](uint8_t* out, const uint8_t* own, uint32_t half, uint64_t lo, uint64_t hi,
                 bool own_first) {
    const uint64_t n = hi - lo;
    if (n == 0) return;
    auto part = [&](uint32_t r) -> const uint8_t* { return Slot(r, half) + lo * esize; };
    if (own_first) {
      bool first = true;
      for (uint32_t r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        if (first) {
          algos::ReduceTo(out, own, part(r), n, dtype, op);
          first = false;
        } else {
          algos::ReduceInto(out, part(r), n, dtype, op);
        }
      }
    } else {
      algos::ReduceTo(out, part(0), part(1), n, dtype, op);
      for (uint32_t r = 2; r < size_; ++r) algos::ReduceInto(out, part(r), n, dtype, op);
    }
    if (op == PLEXUS_OP_AVG) algos::FinishAverage(out, n, dtype, size_);
  };
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(chunk_elems, count - done);
    const uint32_t half = chunk_ & 1;
    const uint32_t step1 = 2 * chunk_ + 1;
    uint8_t* mine = Slot(rank_, half);
    const uint8_t* in = send + done * esize;
    uint8_t* out = recv + done * esize;
    // My piece of a large chunk: peers never read it from my slot before I
    // have put the sum there, so only the other pieces are copied in.
    const uint64_t lo = small ? 0 : n * rank_ / size_;
    const uint64_t hi = small ? 0 : n * (rank_ + 1) / size_;
    std::memcpy(mine, in, lo * esize);
    std::memcpy(mine + hi * esize, in + hi * esize, (n - hi) * esize);
    if (done == 0) WriteSignature(half, sig);
    Publish(step1);
    if (algos::Status st = WaitAll(step1, sig); !st.ok()) return st;
    if (done == 0) {
      if (algos::Status st = CheckSignatures(half, sig); !st.ok()) return st;
    }
    if (small) {
      sum(out, nullptr, half, 0, n, false);  // (in place: in is overwritten first)
    } else {
      sum(out + lo * esize, in + lo * esize, half, lo, hi, true);
      std::memcpy(mine + lo * esize, out + lo * esize, (hi - lo) * esize);
      Publish(step1 + 1);
      if (algos::Status st = WaitAll(step1 + 1, sig); !st.ok()) return st;
      for (uint32_t r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        const uint64_t rlo = n * r / size_;
        const uint64_t rhi = n * (r + 1) / size_;
        std::memcpy(out + rlo * esize, Slot(r, half) + rlo * esize, (rhi - rlo) * esize);
      }
    }
    ++chunk_;
    done += n;
  }
  return {};
}

algos::Status OneHostShm::ReduceScatter(const algos::OpSignature& sig, const void* sendbuf,
                                        void* recvbuf) {
  if (aborted_.load(std::memory_order_relaxed)) {
    return {PLEXUS_ERR_ABORTED, Prefix(sig) + ": the communicator was aborted"};
  }
  const uint64_t esize = algos::DtypeSize(sig.dtype);
  const uint64_t count = sig.count;  // of each block
  if (algos::Status st = CheckBuffers(sig, sendbuf, size_, recvbuf, 1); !st.ok()) return st;
  const auto* send = static_cast<const uint8_t*>(sendbuf);
  auto* recv = static_cast<uint8_t*>(recvbuf);
  // Every block's range of the chunk lies in the slot at r * n (mine unused).
  const uint64_t piece = slot_bytes_ / (esize * size_);
  if (piece == 0) {
    return {PLEXUS_ERR_INTERNAL, Prefix(sig) + ": slots of " + std::to_string(slot_bytes_) +
                                     " bytes hold no element of each of " + std::to_string(size_) +
                                     " blocks"};
  }
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(piece, count - done);
    const uint32_t half = chunk_ & 1;
    const uint32_t step1 = 2 * chunk_ + 1;
    uint8_t* mine = Slot(rank_, half);
    for (uint32_t r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      std::memcpy(mine + r * n * esize, send + (r * count + done) * esize, n * esize);
    }
    if (done == 0) WriteSignature(half, sig);
    Publish(step1);
    if (algos::Status st = WaitAll(step1, sig); !st.ok()) return st;
    if (done == 0) {
      if (algos::Status st = CheckSignatures(half, sig); !st.ok()) return st;
    }
    // Mine first, from my own buffer (out may be it: in place), then the
    // others' in rank order.
    uint8_t* out = recv + done * esize;
    const uint8_t* own = send + (uint64_t(rank_) * count + done) * esize;
    bool first = true;
    for (uint32_t r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const uint8_t* theirs = Slot(r, half) + rank_ * n * esize;
      if (first) {
        algos::ReduceTo(out, own, theirs, n, sig.dtype, sig.op);
        first = false;
      } else {
        algos::ReduceInto(out, theirs, n, sig.dtype, sig.op);
      }
    }
    if (sig.op == PLEXUS_OP_AVG) algos::FinishAverage(out, n, sig.dtype, size_);
    ++chunk_;
    done += n;
  }
  return {};
}

algos::Status OneHostShm::Allgather(const algos::OpSignature& sig, const void* sendbuf,
                                    void* recvbuf) {
  if (aborted_.load(std::memory_order_relaxed)) {
    return {PLEXUS_ERR_ABORTED, Prefix(sig) + ": the communicator was aborted"};
  }
  const uint64_t esize = algos::DtypeSize(sig.dtype);
  const uint64_t count = sig.count;  // of each rank
  if (algos::Status st = CheckBuffers(sig, sendbuf, 1, recvbuf, size_); !st.ok()) return st;
  const auto* send = static_cast<const uint8_t*>(sendbuf);
  auto* recv = static_cast<uint8_t*>(recvbuf);
  uint8_t* own_block = recv + uint64_t(rank_) * count * esize;
  const uint64_t piece = slot_bytes_ / esize;
  for (uint64_t done = 0; done < count;) {
    const uint64_t n = std::min(piece, count - done);
    const uint32_t half = chunk_ & 1;
    const uint32_t step1 = 2 * chunk_ + 1;
    std::memcpy(Slot(rank_, half), send + done * esize, n * esize);
    if (done == 0) WriteSignature(half, sig);
    Publish(step1);
    // My own block while the peers catch up (nothing to do in place).
    if (send != own_block) std::memcpy(own_block + done * esize, send + done * esize, n * esize);
    if (algos::Status st = WaitAll(step1, sig); !st.ok()) return st;
    if (done == 0) {
      if (algos::Status st = CheckSignatures(half, sig); !st.ok()) return st;
    }
    for (uint32_t r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      std::memcpy(recv + (r * count + done) * esize, Slot(r, half), n * esize);
    }
    ++chunk_;
    done += n;
  }
  return {};
}

bool OneHostShm::Runs(plexus_collective_t coll) {
  return coll == PLEXUS_COLL_ALLREDUCE || coll == PLEXUS_COLL_REDUCE_SCATTER ||
         coll == PLEXUS_COLL_ALLGATHER;
}

algos::Status OneHostShm::Run(const algos::OpSignature& sig, const void* sendbuf, void* recvbuf) {
  switch (sig.coll) {
    case PLEXUS_COLL_ALLREDUCE:
      return Allreduce(sig, sendbuf, recvbuf);
    case PLEXUS_COLL_REDUCE_SCATTER:
      return ReduceScatter(sig, sendbuf, recvbuf);
    case PLEXUS_COLL_ALLGATHER:
      return Allgather(sig, sendbuf, recvbuf);
    default:
      return {PLEXUS_ERR_INTERNAL, Prefix(sig) + ": not a collective the segment runs"};
  }
}

algos::Status MakeOneHostShm(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                             const OneHostShmOptions& options, std::unique_ptr<OneHostShm>* shm,
                             std::string* info) {
  std::unique_ptr<OneHostShm> made;
  std::string why_not;
  algos::Status st = OneHostShm::Create(host, config, options, &made, &why_not);
  if (!st.ok()) return st;
  *info =
      made ? "allreduce, reduce_scatter and allgather over shared memory (" + made->Describe() + ")"
           : "no shared memory: " + why_not;
  *shm = std::move(made);
  return {};
}

}  // namespace plexus::kit
