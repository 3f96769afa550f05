// The byte mover behind MpiTransport (the why is in mpi_transport.hpp).
#include "mpi_transport.hpp"

#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "plexus/algos/describe.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/kit/failure_report.hpp"

namespace plexus::mpi {
namespace {

constexpr int kMessageTag = 0;  // the ABI's send/recv
constexpr int kControlTag = 1;  // failure reports
constexpr int kNarrowCollectiveTag = 2;  // every collective message where MPI_TAG_UB is small
constexpr int kCollectiveBit = 1 << 30;  // wide tags: bit 30, hash << 16, length
constexpr size_t kLengthInTag = 0xFFFF;  // shorter messages carry their length in the tag
constexpr auto kYieldAfter = std::chrono::microseconds(10);
constexpr auto kFirstNap = std::chrono::microseconds(20);
constexpr auto kLongestNap = std::chrono::microseconds(250);
constexpr uint64_t kBytesPerUs = 250;  // 0.25 GB/s: how long data may still be moving
constexpr int64_t kLingerMaxMs = 1000;
constexpr int64_t kCancelWaitMs = 300;
constexpr int64_t kControlSendWaitMs = 200;

std::string Rank(uint32_t r) {
  return "rank " + std::to_string(r);
}

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

bool IsCollective(const algos::OpSignature& s) {
  return s.coll != PLEXUS_COLL_SEND && s.coll != PLEXUS_COLL_RECV;
}

// 14 bits of the signature but its sequence number: every rank of one
// operation computes the same.
uint32_t SignatureHash(const algos::OpSignature& s) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t v : {uint64_t(s.coll), uint64_t(s.dtype), uint64_t(s.op), s.count,
                     uint64_t(s.root)}) {
    h = (h ^ v) * 1099511628211ull;
  }
  return uint32_t(h ^ (h >> 29) ^ (h >> 47)) & 0x3FFFu;
}

}  // namespace

MpiTransport::MpiTransport(plexus_backend_ctx& ctx, MPI_Comm comm, uint32_t rank, uint32_t size,
                           int64_t timeout_ms, int64_t spin_us, std::string name)
    : ctx_(ctx),
      comm_(comm),
      rank_(rank),
      size_(size),
      timeout_ms_(timeout_ms),
      spin_us_(spin_us),
      name_(std::move(name)),
      wide_tags_(ctx.tag_ub >= INT_MAX),
      max_piece_(std::min<uint64_t>(ctx.max_count, INT_MAX)),
      control_buf_(new uint8_t[kit::MaxFailureReportBytes()]) {
  last_progress_ = Clock::now();
  PostControlRecv();
}

MpiTransport::~MpiTransport() {
  Cancel();
  DrainUnexpected();
  std::vector<MPI_Request> control{control_req_};
  if (control_req_ != MPI_REQUEST_NULL) {
    MpiLock lock(ctx_);
    MPI_Cancel(&control[0]);
  }
  if (WaitRequests(control, 100) > 0) {
    Abandoned a;
    a.comm = comm_;
    a.requests = std::move(control);
    a.memory.push_back(std::move(control_buf_));  // (MPI may still write it)
    ctx_.Abandon(std::move(a));
  }
  ctx_.ReleaseComm(comm_);
}

size_t MpiTransport::WaitRequests(std::vector<MPI_Request>& reqs, int64_t ms) {
  const auto start = Clock::now();
  for (;;) {
    size_t left = 0;
    {
      MpiLock lock(ctx_);
      for (MPI_Request& r : reqs) {
        if (r == MPI_REQUEST_NULL) continue;
        int flag = 0;
        if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
          if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
          r = MPI_REQUEST_NULL;
        } else if (!flag) {
          ++left;
        }
      }
    }
    if (left == 0 || MsSince(start) >= ms) return left;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

int MpiTransport::TagOf(const algos::OpSignature& sig, uint64_t piece) const {
  if (!IsCollective(sig)) return kMessageTag;
  if (!wide_tags_) return kNarrowCollectiveTag;
  return kCollectiveBit | int(SignatureHash(sig) << 16) |
         int(std::min<uint64_t>(piece, kLengthInTag));
}

algos::Status MpiTransport::MpiFailure(const char* call, int rc, const Transfer& t) const {
  return {StatusOfMpiError(rc), std::string(call) + (t.is_send ? " to " : " from ") +
                                    Rank(t.peer) + " failed (" + MpiErrorText(rc) + ") in " +
                                    algos::DescribeOp(t.sig) + ", seen by " + Rank(rank_)};
}

algos::Status MpiTransport::Post(Transfer* t) {
  t->complete = false;
  // Whole elements in a piece, so that both sides split alike.
  const uint64_t elem = std::max<uint64_t>(1, algos::DtypeSize(t->sig.dtype));
  t->piece_bytes =
      std::max<uint64_t>(elem, std::min<uint64_t>(max_piece_ * elem, INT_MAX) / elem * elem);
  t->pieces = uint32_t(std::max<uint64_t>(1, (t->bytes + t->piece_bytes - 1) / t->piece_bytes));
  t->matched = 0;
  t->request = MPI_REQUEST_NULL;
  t->more.assign(t->pieces > 1 ? t->pieces : 0, MPI_REQUEST_NULL);
  // Receives whose length a tag cannot carry are matched first (Match).
  t->probed = !t->is_send && (!IsCollective(t->sig) || !wide_tags_ ||
                              std::min<uint64_t>(t->bytes, t->piece_bytes) >= kLengthInTag);
  if (!t->probed) {
    MpiLock lock(ctx_);
    for (uint32_t k = 0; k < t->pieces; ++k) {
      const uint64_t n = t->PieceBytes(k);
      uint8_t* at = t->data + uint64_t(k) * t->piece_bytes;
      const int tag = TagOf(t->sig, n);
      const int rc =
          t->is_send ? MPI_Isend(at, int(n), MPI_BYTE, int(t->peer), tag, comm_, &t->RequestOf(k))
                     : MPI_Irecv(at, int(n), MPI_BYTE, int(t->peer), tag, comm_, &t->RequestOf(k));
      if (rc != MPI_SUCCESS) {
        // The pieces already posted stay with MPI: Cancel() takes them.
        active_.push_back(t);
        return MpiFailure(t->is_send ? "MPI_Isend" : "MPI_Irecv", rc, *t);
      }
    }
  }
  active_.push_back(t);
  active_bytes_ += t->bytes;
  return {};
}

algos::Status MpiTransport::Match(Transfer* t) {
  while (t->matched < t->pieces) {
    const uint32_t k = t->matched;
    const uint64_t n = t->PieceBytes(k);
    const int tag = TagOf(t->sig, n);
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status status;
    int rc = MPI_Improbe(int(t->peer), tag, comm_, &flag, &msg, &status);
    if (rc != MPI_SUCCESS) return MpiFailure("MPI_Improbe", rc, *t);
    if (!flag) return {};
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (uint64_t(got) != n) {
      // Received into a buffer of its own (nothing is left pending), then failed.
      std::vector<uint8_t> discard(size_t(std::max(got, 1)));
      MPI_Mrecv(discard.data(), got, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
      if (!IsCollective(t->sig)) {
        const uint64_t elem = std::max<size_t>(1, algos::DtypeSize(t->sig.dtype));
        const uint64_t before = uint64_t(k) * t->piece_bytes / elem;
        return {PLEXUS_ERR_REMOTE,
                "recv from " + Rank(t->peer) + " (its message " + std::to_string(t->sig.seq) +
                    "): " + Rank(t->peer) + " sent " + std::to_string(before + uint64_t(got) / elem) +
                    (t->pieces > 1 ? " or more " : " ") + algos::DtypeName(t->sig.dtype) +
                    " elements where " + std::to_string(t->sig.count) + " were expected"};
      }
      return {PLEXUS_ERR_REMOTE, "message size mismatch in " + algos::DescribeOp(t->sig) + ": " +
                                     Rank(t->peer) + " sent " + std::to_string(got) +
                                     " bytes where " + Rank(rank_) + " expects " +
                                     std::to_string(n)};
    }
    rc = MPI_Imrecv(t->data + uint64_t(k) * t->piece_bytes, got, MPI_BYTE, &msg, &t->RequestOf(k));
    if (rc != MPI_SUCCESS) return MpiFailure("MPI_Imrecv", rc, *t);
    ++t->matched;
  }
  return {};
}

algos::Status MpiTransport::Reap(bool* moved) {
  MpiLock lock(ctx_);
  for (size_t i = 0; i < active_.size();) {
    Transfer* t = active_[i];
    if (t->probed && t->matched < t->pieces) {
      // MPI matches a peer's messages of one tag in order: a later receive
      // from the same peer must not take the message an earlier one waits for.
      const int tag = TagOf(t->sig, t->PieceBytes(t->matched));
      const bool behind =
          std::any_of(active_.begin(), active_.begin() + ptrdiff_t(i), [&](const Transfer* e) {
            return e->probed && e->matched < e->pieces && e->peer == t->peer &&
                   TagOf(e->sig, e->PieceBytes(e->matched)) == tag;
          });
      if (!behind) {
        if (algos::Status st = Match(t); !st.ok()) return st;
      }
    }
    bool all = !t->probed || t->matched == t->pieces;
    for (uint32_t k = 0; k < (t->probed ? t->matched : t->pieces); ++k) {
      MPI_Request& r = t->RequestOf(k);
      if (r == MPI_REQUEST_NULL) continue;
      int flag = 0;
      MPI_Status status;
      const int rc = MPI_Test(&r, &flag, &status);
      if (rc != MPI_SUCCESS) return MpiFailure("MPI_Test", rc, *t);
      if (!flag) {
        all = false;
        break;  // (pieces complete in order)
      }
      *moved = true;
    }
    if (!all) {
      ++i;
      continue;
    }
    *moved = true;
    t->complete = true;
    active_bytes_ -= t->bytes;
    active_.erase(active_.begin() + ptrdiff_t(i));
  }
  return {};
}

void MpiTransport::PostControlRecv() {
  MpiLock lock(ctx_);
  control_req_ = MPI_REQUEST_NULL;
  if (MPI_Irecv(control_buf_.get(), int(kit::MaxFailureReportBytes()), MPI_BYTE, MPI_ANY_SOURCE,
                kControlTag, comm_, &control_req_) != MPI_SUCCESS) {
    control_req_ = MPI_REQUEST_NULL;
  }
}

bool MpiTransport::TakeReport(algos::Status* st, bool defer_timeouts) {
  if (control_req_ == MPI_REQUEST_NULL) return false;
  int flag = 0, got = 0;
  MPI_Status status;
  {
    MpiLock lock(ctx_);
    if (MPI_Test(&control_req_, &flag, &status) != MPI_SUCCESS) {
      control_req_ = MPI_REQUEST_NULL;
      return false;
    }
    if (!flag) return false;
    MPI_Get_count(&status, MPI_BYTE, &got);
  }
  const uint32_t peer = uint32_t(status.MPI_SOURCE);
  kit::FailureReport r;
  const bool valid = got >= 0 && peer < size_ && peer != rank_ &&
                     kit::DecodeFailureReport({control_buf_.get(), size_t(got)}, &r);
  PostControlRecv();
  if (!valid) return false;
  *st = kit::DescribeFailureReport(rank_, current_, peer, r);
  const bool waits_for_sender = std::any_of(active_.begin(), active_.end(),
                                            [&](const Transfer* t) { return t->peer == peer; });
  return !(defer_timeouts && !active_.empty() && kit::ReportCanWait(r, *st, waits_for_sender));
}

algos::Status MpiTransport::Diagnose(int64_t idle_ms) {
  std::vector<bool> waiting(size_);
  for (const Transfer* t : active_) {
    if (t->is_send) continue;
    waiting[t->peer] = true;
    // The oldest message from that peer that nobody asked for: another
    // operation's, sent where this rank waits for one of its own.
    int flag = 0;
    MPI_Status status;
    {
      MpiLock lock(ctx_);
      if (MPI_Iprobe(int(t->peer), MPI_ANY_TAG, comm_, &flag, &status) != MPI_SUCCESS) flag = 0;
    }
    if (flag && status.MPI_TAG != kControlTag &&
        (status.MPI_TAG & ~0xFFFF) != (TagOf(t->sig, t->piece_bytes) & ~0xFFFF)) {
      const char* theirs = status.MPI_TAG == kMessageTag ? "a send" : "another collective";
      return {PLEXUS_ERR_REMOTE, "mismatch: " + Rank(t->peer) + " posted " + theirs + " where " +
                                     Rank(rank_) + " posted " + algos::DescribeOp(t->sig)};
    }
  }
  for (const Transfer* t : active_) waiting[t->peer] = true;
  return algos::NoProgress(rank_, idle_ms, waiting);
}

algos::Status MpiTransport::Linger(algos::Status mine) {
  const auto start = Clock::now();
  const int64_t bound = std::min<int64_t>(kLingerMaxMs, std::max<int64_t>(50, timeout_ms_ / 4));
  while (!aborted_.load() && MsSince(start) < bound) {
    algos::Status theirs;
    if (TakeReport(&theirs, false)) return theirs;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  return mine;
}

algos::OpSignature MpiTransport::WaitingFor() const {
  if (current_) return *current_;
  return active_.empty() ? algos::OpSignature{} : active_.front()->sig;
}

algos::Status MpiTransport::Drive(const std::function<bool()>& done) {
  Clock::time_point last_event = Clock::now();
  auto nap = kFirstNap;
  for (uint32_t round = 0;; ++round) {
    if (aborted_.load()) return {PLEXUS_ERR_ABORTED, "the communicator was aborted"};
    bool moved = false;
    algos::Status st = Reap(&moved);
    if (!st.ok()) return st;
    if (done()) return {};
    // A peer's report is looked for every 16th round: a test of the control
    // receive is a good part of a small operation's round.
    if (round % 16 == 15 && TakeReport(&st, true)) {
      // What this rank waited for may have completed meanwhile (a send whose
      // receiver then failed): then the report is not about it.
      bool late = false;
      if (Reap(&late).ok() && done()) return {};
      return st;
    }
    const auto now = Clock::now();
    if (moved) {
      last_progress_ = last_event = now;
      nap = kFirstNap;
      continue;
    }
    // MPI moves data only inside MPI calls: test back to back while data
    // may be on its way, then sleep.
    const auto spin = std::chrono::microseconds(spin_us_ + int64_t(active_bytes_ / kBytesPerUs));
    if (now - last_event < spin) {
      if (woken_.exchange(false)) return {};
      // Let a thread that waits for this CPU run first: it may be the peer.
      if (now - last_event > kYieldAfter) sched_yield();
      continue;
    }
    const int64_t idle = std::chrono::duration_cast<std::chrono::milliseconds>(now -
                                                                               last_progress_)
                             .count();
    if (idle >= timeout_ms_) {
      st = Diagnose(idle);
      // Tell the peers now, so that one in another operation answers with
      // its own report while this rank lingers, and both can name both.
      Fail(WaitingFor(), st);
      return Linger(st);
    }
    if (woken_.exchange(false)) return {};
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, kLongestNap);
  }
}

void MpiTransport::DrainUnexpected() {
  // After a failure nothing more runs here: a peer's send that nobody will
  // receive (another operation's, a mismatch) is taken into a scratch
  // buffer, so that it completes on the peer and leaves nothing pending.
  MpiLock lock(ctx_);
  std::vector<uint8_t> scratch;
  for (int taken = 0; taken < 1000; ++taken) {
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status status;
    if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, &msg, &status) != MPI_SUCCESS ||
        !flag) {
      return;
    }
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    scratch.resize(size_t(std::max(got, 1)));
    MPI_Mrecv(scratch.data(), got, MPI_BYTE, &msg, MPI_STATUS_IGNORE);
  }
}

void MpiTransport::Cancel() {
  if (active_.empty()) return;
  // Receives are cancelled and waited for (bounded); sends cannot be
  // cancelled and only read their buffers: MPI keeps them, and so does the
  // context, without a wait here (one that waits for its receiver would
  // delay this rank's failure report past the peer's patience).
  std::vector<MPI_Request> recvs, sends;
  {
    MpiLock lock(ctx_);
    for (Transfer* t : active_) {
      for (uint32_t k = 0; k < t->pieces; ++k) {
        MPI_Request& r = t->RequestOf(k);
        if (r == MPI_REQUEST_NULL) continue;
        if (!t->is_send) MPI_Cancel(&r);
        (t->is_send ? sends : recvs).push_back(r);
        r = MPI_REQUEST_NULL;
      }
    }
  }
  active_.clear();
  active_bytes_ = 0;
  DrainUnexpected();
  if (WaitRequests(recvs, kCancelWaitMs) > 0) {
    Log(ctx_.host, PLEXUS_LOG_WARN,
        name_ + ": a receive of a failed operation is still in MPI after cancelling it; its "
                "buffer may still be written");
    sends.insert(sends.end(), recvs.begin(), recvs.end());
  }
  std::erase(sends, MPI_REQUEST_NULL);
  if (!sends.empty()) {
    Abandoned a;
    a.comm = comm_;
    a.requests = std::move(sends);
    ctx_.Abandon(std::move(a));
  }
}

void MpiTransport::Fail(const algos::OpSignature& sig, const algos::Status& why) {
  if (failed_once_ || aborted_.load()) return;
  failed_once_ = true;
  // A peer that made no progress or exited may be stopped or gone:
  // MPI_Finalize would wait for it. (Not after a mismatch: both sides live.)
  if (why.code == PLEXUS_ERR_TIMEOUT || why.message.find("exited") != std::string::npos) {
    ctx_.lost_peer.store(true);
  }
  const std::vector<uint8_t> report = kit::EncodeFailureReport(sig, why);
  auto msg = std::make_unique<uint8_t[]>(report.size());
  std::memcpy(msg.get(), report.data(), report.size());
  std::vector<MPI_Request> sends;
  {
    MpiLock lock(ctx_);
    for (uint32_t p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      MPI_Request r = MPI_REQUEST_NULL;
      if (MPI_Isend(msg.get(), int(report.size()), MPI_BYTE, int(p), kControlTag, comm_, &r) ==
          MPI_SUCCESS) {
        sends.push_back(r);
      }
    }
  }
  if (WaitRequests(sends, kControlSendWaitMs) > 0) {
    Abandoned a;
    a.comm = comm_;
    a.requests = std::move(sends);
    a.memory.push_back(std::move(msg));
    ctx_.Abandon(std::move(a));
  }
}

template <class Batch>
algos::Status MpiTransport::AddBatch(const algos::OpSignature& sig,
                                     std::span<const algos::SendSpec> sends,
                                     std::span<const algos::RecvSpec> recvs, Batch& to) {
  for (const auto& r : recvs) {
    if (r.peer >= size_ || r.peer == rank_) {
      return {PLEXUS_ERR_INTERNAL,
              "algorithm received from invalid peer " + std::to_string(r.peer)};
    }
  }
  for (const auto& s : sends) {
    if (s.peer >= size_ || s.peer == rank_) {
      return {PLEXUS_ERR_INTERNAL, "algorithm sent to invalid peer " + std::to_string(s.peer)};
    }
  }
  for (const auto& r : recvs) to.emplace_back(false, r.peer, sig, r.data, r.bytes);
  for (const auto& s : sends)
    to.emplace_back(true, s.peer, sig, const_cast<void*>(s.data), s.bytes);
  return {};
}

algos::Status MpiTransport::Exchange(const algos::OpSignature& sig,
                                     std::span<const algos::SendSpec> sends,
                                     std::span<const algos::RecvSpec> recvs) {
  // The batch lives in a member so that a small exchange allocates nothing;
  // Transfers are addressed from active_, so it is not resized until they end.
  std::vector<Transfer>& batch = batch_;
  batch.clear();
  batch.reserve(sends.size() + recvs.size());
  if (algos::Status st = AddBatch(sig, sends, recvs, batch); !st.ok()) return st;
  current_ = &sig;
  last_progress_ = Clock::now();
  auto all_done = [&] {
    for (const Transfer& t : batch) {
      if (!t.complete) return false;
    }
    return true;
  };
  algos::Status st;
  for (Transfer& t : batch) {
    st = Post(&t);
    if (!st.ok()) break;
  }
  while (st.ok() && !all_done()) st = Drive(all_done);
  if (!st.ok()) {
    if (st.code == PLEXUS_ERR_TIMEOUT || st.code == PLEXUS_ERR_ABORTED) {
      st.message += " in " + algos::DescribeOp(sig);
    }
    Cancel();
  }
  current_ = nullptr;
  return st;
}

algos::Status MpiTransport::Start(const algos::OpSignature& sig,
                                  std::span<const algos::SendSpec> sends,
                                  std::span<const algos::RecvSpec> recvs, uint64_t* ticket) {
  if (started_.empty()) {
    started_sig_ = sig;
    last_progress_ = Clock::now();
  }
  const size_t first = started_.size();
  if (algos::Status st = AddBatch(sig, sends, recvs, started_); !st.ok()) return st;
  const uint64_t mine = next_ticket_++;
  for (size_t i = first; i < started_.size(); ++i) {
    started_[i].ticket = mine;
    if (algos::Status st = Post(&started_[i]); !st.ok()) {
      started_.resize(i);  // (the rest was never posted; Cancel takes what was)
      Cancel();
      started_.clear();
      return st;
    }
  }
  *ticket = mine;
  return {};
}

algos::Status MpiTransport::Finish(uint64_t ticket) {
  auto done = [&] {
    for (const Transfer& t : started_) {
      if (t.ticket > ticket) break;
      if (!t.complete) return false;
    }
    return true;
  };
  current_ = &started_sig_;
  algos::Status st;
  while (st.ok() && !done()) st = Drive(done);
  current_ = nullptr;
  if (!st.ok()) {
    if (st.code == PLEXUS_ERR_TIMEOUT || st.code == PLEXUS_ERR_ABORTED) {
      st.message += " in " + algos::DescribeOp(started_sig_);
    }
    Cancel();
    started_.clear();
    return st;
  }
  while (!started_.empty() && started_.front().ticket <= ticket) started_.pop_front();
  return {};
}

algos::Status MpiTransport::RunNative(const algos::OpSignature& sig, const char* call,
                                      const std::function<int(MPI_Comm, MPI_Request*)>& start) {
  MPI_Request req = MPI_REQUEST_NULL;
  int rc;
  {
    MpiLock lock(ctx_);
    rc = start(comm_, &req);
  }
  auto failed = [&](int code) -> algos::Status {
    return {StatusOfMpiError(code), std::string(call) + " failed (" + MpiErrorText(code) +
                                        ") in " + algos::DescribeOp(sig)};
  };
  if (rc != MPI_SUCCESS) return failed(rc);
  const auto begin = Clock::now();
  auto nap = kFirstNap;
  for (;;) {
    int flag = 0;
    {
      MpiLock lock(ctx_);
      rc = MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    }
    if (rc != MPI_SUCCESS) return failed(rc);
    if (flag) return {};
    const bool aborted = aborted_.load();
    const int64_t waited = MsSince(begin);
    if (aborted || waited >= timeout_ms_) {
      Abandoned a;  // MPI cannot cancel a collective: it keeps the request
      a.comm = comm_;
      a.requests.push_back(req);
      ctx_.Abandon(std::move(a));
      if (aborted) return {PLEXUS_ERR_ABORTED, "the communicator was aborted"};
      return {PLEXUS_ERR_TIMEOUT, std::string(call) + " of " + algos::DescribeOp(sig) +
                                      " did not complete within " + std::to_string(waited) +
                                      " ms on " + Rank(rank_) +
                                      " (MPI does not say which rank it waits for)"};
    }
    if (Clock::now() - begin > std::chrono::microseconds(spin_us_)) {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, kLongestNap);
    }
  }
}

}  // namespace plexus::mpi
