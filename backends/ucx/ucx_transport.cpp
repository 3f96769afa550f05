// The byte mover behind UcxTransport (the why is in ucx_transport.hpp).
#include "ucx_transport.hpp"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "plexus/abi/collectives.hpp"
#include "plexus/algos/describe.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/kit/failure_report.hpp"
#include "ucx_tag.hpp"

namespace plexus::ucx {
namespace {

// Past this much of a spin, Drive() yields the CPU between tries: on a
// shared core the peer (or this rank's other thread) may need it to answer.
constexpr auto kYieldAfter = std::chrono::microseconds(10);
// A watched local peer's process is looked up after an operation has waited
// this long, and again at this interval.
constexpr int64_t kLivenessCheckMs = 100;
// Longest single sleep: the worker is progressed at least this often while
// an operation waits (UCX's keepalive runs from progress).
constexpr int64_t kMaxSleepMs = 100;
// After a failure: how long to wait for peers' control messages, and for UCX
// to release cancelled receives.
constexpr int64_t kLingerMaxMs = 1000;
constexpr int64_t kCancelWaitMs = 300;
constexpr int64_t kForceCloseWaitMs = 700;
constexpr int64_t kControlSendWaitMs = 200;

std::string Rank(uint32_t r) {
  return "rank " + std::to_string(r);
}

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// Not send/recv, not comm_create's hello (kHelloColl): abi::IsSequenced. The
// collectives of ABI 1.2 (codes above recv's) are collectives too: with the
// send/recv tag they would lose their signature bits, so ranks in different
// operations could match each other's frames, and collide with messages
// numbered like their operation.
bool IsCollective(const algos::OpSignature& s) {
  return plexus::abi::IsSequenced(s.coll);
}

}  // namespace

std::string DescribeOperation(const algos::OpSignature& s) {
  return s.coll == kHelloColl ? "the hello of comm_create" : algos::DescribeOp(s);
}

UcxTransport::UcxTransport(const plexus_host_v1& host, ucp_context_h context,
                           std::atomic<bool>* no_peer_errors, uint32_t rank, uint32_t size,
                           int64_t timeout_ms, int64_t spin_us, std::string name)
    : host_(host),
      context_(context),
      no_peer_errors_(no_peer_errors),
      rank_(rank),
      size_(size),
      timeout_ms_(timeout_ms),
      spin_(std::chrono::microseconds(spin_us)),
      name_(std::move(name)),
      eps_(size, nullptr),
      slots_(new PeerSlot[size]),
      peers_(size),
      watch_(size),
      control_buf_(kit::MaxFailureReportBytes()) {
  for (uint32_t p = 0; p < size; ++p) slots_[p] = {this, p, UCS_OK, false};
}

UcxTransport::~UcxTransport() {
  if (worker_) {
    Cancel();
    if (control_req_) {
      ucp_request_cancel(worker_, control_req_);
      WaitRequests({control_req_}, 100);
      ucp_request_free(control_req_);
      control_req_ = nullptr;
    }
    DrainUnexpected();
    // FORCE: no flush and no message to the peer (which may be dead), and
    // outstanding sends on the endpoint complete with an error.
    for (uint32_t p = 0; p < size_; ++p) CloseEndpoint(p);
    if (WaitRequests(closing_, 1000) > 0) {
      Log(host_, PLEXUS_LOG_WARN, name_ + ": endpoints still closing after 1 s");
    }
    for (void* r : closing_) {
      if (r) ucp_request_free(r);
    }
    ucp_worker_destroy(worker_);
  }
  if (epoll_fd_ >= 0) close(epoll_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void UcxTransport::DrainUnexpected() {
  // Messages nobody received (a peer's failure report, the data of a
  // mismatched or abandoned operation) would make UCX warn about each at
  // ucp_worker_destroy. Small ones are received and dropped; a large
  // (rendezvous) one would need its sender, which may be gone, so it stays.
  constexpr size_t kMaxDrain = 64 << 10;
  // A member: it must outlive a receive that is still running at destroy.
  drain_buf_.resize(kMaxDrain);
  std::vector<void*> reqs;
  ucp_tag_recv_info_t info{};
  for (int i = 0; i < 1024; ++i) {
    ucp_tag_message_h msg = ucp_tag_probe_nb(worker_, 0, 0, 0, &info);
    if (!msg || info.length > kMaxDrain) break;
    msg = ucp_tag_probe_nb(worker_, 0, 0, 1, &info);
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    void* r = ucp_tag_msg_recv_nbx(worker_, drain_buf_.data(), drain_buf_.size(), msg, &param);
    if (UCS_PTR_IS_ERR(r)) break;
    reqs.push_back(r);
    if (WaitRequests({r}, 50) > 0) break;
  }
  for (void* r : reqs) {
    if (r) ucp_request_free(r);
  }
}

void UcxTransport::OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* slot = static_cast<PeerSlot*>(arg);
  if (slot->status == UCS_OK) slot->status = status;
}

std::string UcxTransport::PeerError(uint32_t peer) const {
  if (slots_[peer].ended) {
    return Rank(peer) + " is unreachable (its process " + std::to_string(peers_[peer].pid) +
           " on this host has exited)";
  }
  return Rank(peer) + " is unreachable (UCX: " + ucs_status_string(slots_[peer].status) + ")";
}

void UcxTransport::CloseEndpoint(uint32_t peer) {
  if (!eps_[peer]) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* r = ucp_ep_close_nbx(eps_[peer], &param);
  eps_[peer] = nullptr;
  if (r && !UCS_PTR_IS_ERR(r)) closing_.push_back(r);
}

void UcxTransport::Wake() {
  woken_.store(true);
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof one);
}

void UcxTransport::Abort() {
  aborted_.store(true);
  Wake();
}

size_t UcxTransport::WaitRequests(const std::vector<void*>& reqs, int64_t ms) {
  const auto start = Clock::now();
  for (;;) {
    size_t pending = 0;
    for (void* r : reqs) {
      if (r && ucp_request_check_status(r) == UCS_INPROGRESS) ++pending;
    }
    if (pending == 0 || MsSince(start) >= ms) return pending;
    if (ucp_worker_progress(worker_) == 0) {
      // Nothing moved: sleep a little instead of spinning through the bound.
      (void)Sleep(1);
    }
  }
}

algos::Status UcxTransport::PostSend(uint32_t peer, const void* data, size_t bytes, uint64_t tag,
                                     void** request) {
  *request = nullptr;
  if (!eps_[peer]) {
    return {PLEXUS_ERR_REMOTE, PeerError(peer) + ", seen by " + Rank(rank_)};
  }
  ucp_request_param_t param{};
  void* r = ucp_tag_send_nbx(eps_[peer], data, bytes, tag, &param);
  if (UCS_PTR_IS_ERR(r)) {
    return {PLEXUS_ERR_REMOTE,
            Rank(peer) + " is unreachable (UCX send: " + ucs_status_string(UCS_PTR_STATUS(r)) +
                "), seen by " + Rank(rank_)};
  }
  *request = r;  // NULL: completed at once
  return {};
}

algos::Status UcxTransport::PostRecv(void* data, size_t bytes, uint64_t tag, uint64_t mask,
                                     void** request, ucp_tag_recv_info_t* info) {
  ucp_request_param_t param{};
  // No immediate completion: UCX 1.13 does not always fill recv_info when a
  // receive completes inside the call (the received length read 0), so the
  // length always comes from ucp_tag_recv_request_test.
  param.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  void* r = ucp_tag_recv_nbx(worker_, data, bytes, tag, mask, &param);
  if (UCS_PTR_IS_ERR(r)) {
    *request = nullptr;
    return {PLEXUS_ERR_SYSTEM,
            std::string("ucp_tag_recv_nbx: ") + ucs_status_string(UCS_PTR_STATUS(r))};
  }
  *request = r;
  *info = {};
  return {};
}

algos::Status UcxTransport::Post(Transfer* t) {
  t->complete = false;
  t->request = nullptr;
  t->info = {};
  const algos::OpSignature& s = t->sig;
  const uint32_t source = t->is_send ? rank_ : t->peer;
  if (IsCollective(s)) {
    t->tag = MakeTag(TagKind::kCollective, comm_id_, source, s.seq, CollectiveSignature(s));
  } else {
    t->tag =
        MakeTag(TagKind::kPointToPoint, comm_id_, source, s.seq, uint64_t(s.dtype & 0xf) << 16);
  }
  t->probe_mask = kMaskNoSignature;
  algos::Status st = t->is_send
                         ? PostSend(t->peer, t->data, t->bytes, t->tag, &t->request)
                         : PostRecv(t->data, t->bytes, t->tag, kMaskAll, &t->request, &t->info);
  if (!st.ok()) {
    st.message += " in " + DescribeOperation(s);
    return st;
  }
  if (!t->request) {
    st = CheckTransfer(*t, UCS_OK);
    t->complete = true;
    return st;
  }
  active_.push_back(t);
  return {};
}

algos::Status UcxTransport::CheckTransfer(const Transfer& t, ucs_status_t status) const {
  if (status == UCS_OK && (t.is_send || t.info.length == t.bytes)) return {};
  // Only a failure pays for its description (every transfer passes here).
  const std::string op = DescribeOperation(t.sig);
  if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    // UCX wrote nothing past the buffer (tests/ucx/truncation_check.cpp).
    return {PLEXUS_ERR_REMOTE, "message size mismatch in " + op + ": " + Rank(t.peer) +
                                   " sent more than the " + std::to_string(t.bytes) + " bytes " +
                                   Rank(rank_) + " expects"};
  }
  if (status != UCS_OK) {
    if (slots_[t.peer].status != UCS_OK) {
      return {PLEXUS_ERR_REMOTE, PeerError(t.peer) + " during " + op + ", seen by " + Rank(rank_)};
    }
    return {PLEXUS_ERR_REMOTE, std::string(t.is_send ? "sending to " : "receiving from ") +
                                   Rank(t.peer) + " failed (UCX: " + ucs_status_string(status) +
                                   ") during " + op + ", seen by " + Rank(rank_)};
  }
  if (!t.is_send && t.info.length != t.bytes) {
    const size_t elem = std::max<size_t>(1, algos::DtypeSize(t.sig.dtype));
    const bool p2p = !IsCollective(t.sig);
    std::string what = Rank(t.peer) + " sent " + std::to_string(t.info.length) + " bytes";
    if (p2p) what += " (" + std::to_string(t.info.length / elem) + " elements)";
    return {PLEXUS_ERR_REMOTE, "message size mismatch in " + op + ": " + what + ", " + Rank(rank_) +
                                   " expects " + std::to_string(t.bytes) +
                                   (p2p ? " (count " + std::to_string(t.sig.count) + ")" : "")};
  }
  return {};
}

algos::Status UcxTransport::Reap(bool* moved) {
  algos::Status first;
  for (size_t i = 0; i < active_.size();) {
    Transfer* t = active_[i];
    const ucs_status_t s = t->is_send ? ucp_request_check_status(t->request)
                                      : ucp_tag_recv_request_test(t->request, &t->info);
    if (s == UCS_INPROGRESS) {
      // A peer whose endpoint failed will never send what we wait for.
      if (first.ok() && slots_[t->peer].status != UCS_OK) {
        first = {PLEXUS_ERR_REMOTE, PeerError(t->peer) + " during " + DescribeOperation(t->sig) +
                                        ", seen by " + Rank(rank_)};
      }
      ++i;
      continue;
    }
    ucp_request_free(t->request);
    t->request = nullptr;
    t->complete = true;
    *moved = true;
    active_.erase(active_.begin() + ptrdiff_t(i));
    algos::Status st = CheckTransfer(*t, s);
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

algos::Status UcxTransport::Sleep(int64_t ms) {
  const ucs_status_t armed = ucp_worker_arm(worker_);
  if (armed == UCS_ERR_BUSY) return {};  // events are waiting: progress again
  if (armed != UCS_OK) {
    return {PLEXUS_ERR_SYSTEM, std::string("ucp_worker_arm: ") + ucs_status_string(armed)};
  }
  epoll_event events[2];
  const int n = epoll_wait(epoll_fd_, events, 2, int(std::clamp<int64_t>(ms, 0, kMaxSleepMs)));
  if (n < 0 && errno != EINTR) {
    return {PLEXUS_ERR_SYSTEM, std::string("epoll_wait: ") + std::strerror(errno)};
  }
  for (int i = 0; i < n; ++i) {
    if (events[i].data.fd == wake_fd_) {
      woken_.store(false);
      uint64_t value;
      (void)!read(wake_fd_, &value, sizeof value);
      return {PLEXUS_IN_PROGRESS, "woken"};
    }
  }
  return {};
}

void UcxTransport::PostControlRecv() {
  control_req_ = nullptr;
  control_info_ = {};
  void* r = nullptr;
  const uint64_t tag = MakeTag(TagKind::kControl, comm_id_, 0, 0, 0);
  if (PostRecv(control_buf_.data(), control_buf_.size(), tag, kMaskKindComm, &r, &control_info_)
          .ok()) {
    control_req_ = r;
    if (!r) control_req_ = reinterpret_cast<void*>(uintptr_t(1));  // completed at once
  }
}

bool UcxTransport::TakeReport(algos::Status* st, bool defer_timeouts) {
  if (!control_req_) return false;
  ucs_status_t s = UCS_OK;
  if (control_req_ != reinterpret_cast<void*>(uintptr_t(1))) {
    s = ucp_tag_recv_request_test(control_req_, &control_info_);
    if (s == UCS_INPROGRESS) return false;
    ucp_request_free(control_req_);
  }
  control_req_ = nullptr;
  const uint32_t peer = TagSource(control_info_.sender_tag);
  kit::FailureReport r;
  const bool valid =
      (s == UCS_OK || s == UCS_ERR_MESSAGE_TRUNCATED) && peer < size_ && peer != rank_ &&
      kit::DecodeFailureReport(
          {control_buf_.data(), std::min(control_info_.length, control_buf_.size())}, &r);
  PostControlRecv();
  if (!valid) return false;
  *st = kit::DescribeFailureReport(rank_, current_, peer, r);
  // A peer this rank waits for, mismatches and other failures end the wait.
  const bool waits_for_sender = std::any_of(active_.begin(), active_.end(),
                                            [&](const Transfer* t) { return t->peer == peer; });
  return !(defer_timeouts && !active_.empty() && kit::ReportCanWait(r, *st, waits_for_sender));
}

algos::Status UcxTransport::ProbeMismatch() {
  for (const Transfer* t : active_) {
    if (t->is_send) continue;
    ucp_tag_recv_info_t info{};
    if (!ucp_tag_probe_nb(worker_, t->tag, t->probe_mask, 0, &info)) continue;
    if (info.sender_tag == t->tag) continue;  // ours after all; it will complete
    // Same operation number and source, different signature: the peer posted
    // something else here.
    const SignatureFields theirs = DecodeSignature(info.sender_tag);
    std::string what;
    if (IsCollective(t->sig)) {
      what = std::string(algos::CollectiveName(theirs.coll));
      if (theirs.dtype) what += std::string(" of ") + algos::DtypeName(theirs.dtype);
      if (theirs.op) what += std::string(" with op ") + algos::ReduceOpName(theirs.op);
      if (theirs.coll == t->sig.coll && theirs.dtype == t->sig.dtype && theirs.op == t->sig.op) {
        what += " with another count or root";
      }
      what += " as its operation number " + std::to_string(t->sig.seq);
    } else {
      what = std::string("a send of ") + algos::DtypeName((info.sender_tag >> 16) & 0xf) +
             " elements as message " + std::to_string(t->sig.seq);
    }
    return {PLEXUS_ERR_REMOTE, "mismatch: " + Rank(t->peer) + " posted " + what + " where " +
                                   Rank(rank_) + " posted " + DescribeOperation(t->sig)};
  }
  return {};
}

algos::Status UcxTransport::Diagnose(int64_t idle_ms) {
  algos::Status st = ProbeMismatch();
  if (!st.ok()) return st;
  std::vector<bool> waiting(size_);
  for (const Transfer* t : active_) waiting[t->peer] = true;
  return algos::NoProgress(rank_, idle_ms, waiting);
}

algos::Status UcxTransport::Linger(algos::Status mine) {
  const auto start = Clock::now();
  const int64_t bound = std::min<int64_t>(kLingerMaxMs, std::max<int64_t>(50, timeout_ms_ / 4));
  while (!aborted_.load() && MsSince(start) < bound) {
    algos::Status theirs;
    if (TakeReport(&theirs, false)) return theirs;
    if (ucp_worker_progress(worker_) == 0) (void)Sleep(bound - MsSince(start));
  }
  return mine;
}

void UcxTransport::CheckLocalPeers() {
  for (const Transfer* t : active_) {
    PeerSlot& slot = slots_[t->peer];
    if (watch_[t->peer] && slot.status == UCS_OK && ProcessEnded(peers_[t->peer])) {
      slot.status = UCS_ERR_CONNECTION_RESET;
      slot.ended = true;
    }
  }
}

algos::OpSignature UcxTransport::WaitingFor() const {
  if (current_) return *current_;
  return active_.empty() ? algos::OpSignature{} : active_.front()->sig;
}

algos::Status UcxTransport::Drive(const std::function<bool()>& done) {
  // The clocks start at the first round without news, so that an operation
  // that completes while UCX reports events never reads them.
  Clock::time_point last_event{};
  bool event_seen = false;
  for (;;) {
    if (aborted_.load()) return {PLEXUS_ERR_ABORTED, "the communicator was aborted"};
    const unsigned events = ucp_worker_progress(worker_);
    bool moved = false;
    algos::Status st = Reap(&moved);
    if (!st.ok()) return st;
    if (TakeReport(&st, true)) return st;
    if (done()) return {};
    // The clock is read at most once per idle round and not while UCX
    // reports events: on shared memory a clock read is a noticeable part of
    // a small operation. A pass with events counts as now for the spin.
    if (events > 0 && !moved) {
      event_seen = true;
      continue;
    }
    const auto now = Clock::now();
    if (last_event == Clock::time_point{}) last_event = now;
    if (restart_clock_) {
      last_progress_ = now;
      restart_clock_ = false;
    }
    if (moved) last_progress_ = now;
    if (moved || event_seen) {
      last_event = now;
      event_seen = false;
      if (moved) continue;
    }
    if (now - last_event < spin_) {
      // The answer may be microseconds away (shared memory): retry rather
      // than sleep, but return to a caller that has new work as a sleeping
      // Drive would.
      if (woken_.exchange(false)) {
        uint64_t value;
        (void)!read(wake_fd_, &value, sizeof value);
        return {};
      }
      // Past the few microseconds an answer takes when the peer has a CPU of
      // its own, let a thread that waits for this CPU run first: it may be
      // the peer. With nothing else to run, sched_yield returns at once.
      // (Not yielding measured no better on a loaded 2-core machine.)
      if (now - last_event > kYieldAfter) sched_yield();
      continue;
    }
    const int64_t idle = MsSince(last_progress_);
    if (idle >= kLivenessCheckMs && now >= next_liveness_check_) {
      next_liveness_check_ = now + std::chrono::milliseconds(kLivenessCheckMs);
      CheckLocalPeers();  // a peer found dead fails in Reap, next round
      continue;
    }
    // Before sleeping: has a peer sent a different operation in the place
    // of the one we wait for? Then it will never send ours: fail now.
    if (st = ProbeMismatch(); !st.ok()) {
      Fail(WaitingFor(), st);
      return Linger(st);
    }
    if (idle >= timeout_ms_) {
      st = Diagnose(idle);
      // Tell the peers now, so that one in another operation answers with
      // its own report while we linger, and both sides can name both ops.
      Fail(WaitingFor(), st);
      return Linger(st);
    }
    st = Sleep(timeout_ms_ - idle);
    if (st.code == PLEXUS_IN_PROGRESS) return {};  // woken: the caller takes in new work
    if (!st.ok()) return st;
  }
}

void UcxTransport::Cancel() {
  if (active_.empty()) return;
  std::vector<void*> recvs;
  for (Transfer* t : active_) {
    if (!t->is_send) {
      ucp_request_cancel(worker_, t->request);
      recvs.push_back(t->request);
    }
  }
  if (WaitRequests(recvs, kCancelWaitMs) > 0) {
    // Receives that had matched a message cannot be cancelled; closing the
    // endpoint of their sender fails them.
    for (Transfer* t : active_) {
      if (!t->is_send && ucp_request_check_status(t->request) == UCS_INPROGRESS) {
        CloseEndpoint(t->peer);
      }
    }
    if (WaitRequests(recvs, kForceCloseWaitMs) > 0) {
      Log(host_, PLEXUS_LOG_WARN,
          name_ +
              ": a receive of a failed operation is still in UCX after cancelling it; "
              "its buffer may still be written");
    }
  }
  // Sends only read their buffers; a pending one is released by UCX when it ends.
  for (Transfer* t : active_) {
    ucp_request_free(t->request);
    t->request = nullptr;
  }
  active_.clear();
}

void UcxTransport::Fail(const algos::OpSignature& sig, const algos::Status& why) {
  if (failed_once_ || aborted_.load() || !worker_) return;
  failed_once_ = true;
  const std::vector<uint8_t> msg = kit::EncodeFailureReport(sig, why);
  const uint64_t tag = MakeTag(TagKind::kControl, comm_id_, rank_, 0, 0);
  std::vector<void*> sends;
  for (uint32_t p = 0; p < size_; ++p) {
    if (p == rank_ || !eps_[p] || slots_[p].status != UCS_OK) continue;
    void* r = nullptr;
    if (PostSend(p, msg.data(), msg.size(), tag, &r).ok() && r) sends.push_back(r);
  }
  (void)WaitRequests(sends, kControlSendWaitMs);  // msg must outlive them, or be released
  for (void* r : sends) {
    if (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_request_cancel(worker_, r);
  }
  (void)WaitRequests(sends, 50);
  for (void* r : sends) ucp_request_free(r);
}

algos::Status UcxTransport::Exchange(const algos::OpSignature& sig,
                                     std::span<const algos::SendSpec> sends,
                                     std::span<const algos::RecvSpec> recvs) {
  // The batch lives in a member so that a small exchange allocates nothing;
  // Transfers are addressed from active_, so it is not resized until they end.
  // Built in place (a Transfer is a kit::Message, with a vtable): filling it
  // with blanks and then copying each in costs the 8-byte allreduce a
  // measurable share (see docs/benchmarks.md).
  std::vector<Transfer>& batch = batch_;
  batch.clear();
  batch.reserve(sends.size() + recvs.size());
  // Receives first: a message that finds its receive posted lands in place.
  for (const auto& r : recvs) {
    if (r.peer >= size_ || r.peer == rank_) {
      return {PLEXUS_ERR_INTERNAL,
              "algorithm received from invalid peer " + std::to_string(r.peer)};
    }
    batch.emplace_back(false, r.peer, sig, r.data, r.bytes);
  }
  for (const auto& s : sends) {
    if (s.peer >= size_ || s.peer == rank_) {
      return {PLEXUS_ERR_INTERNAL, "algorithm sent to invalid peer " + std::to_string(s.peer)};
    }
    batch.emplace_back(true, s.peer, sig, const_cast<void*>(s.data), s.bytes);
  }
  current_ = &sig;
  restart_clock_ = true;  // Drive starts the no-progress clock if it has to wait
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
      st.message += " in " + DescribeOperation(sig);
    }
    Cancel();
  }
  current_ = nullptr;
  return st;
}

}  // namespace plexus::ucx
