// The byte mover behind UdsTransport (the why is in uds_transport.hpp).
//
// Non-blocking sockets and one poll() loop. poll() also watches two eventfds,
// so Abort() and Wake() from another thread interrupt a sleeping Drive() at
// once; the loop never spins, and no progress for timeout_ms is an error
// naming the ranks it was waiting for.
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "plexus/algos/dtype.hpp"
#include "uds_transport.hpp"

namespace uds {
namespace {

constexpr uint32_t kMagic = 0x53445850;  // "PXDS"
constexpr uint32_t kData = 0, kFail = 1;
constexpr uint64_t kMaxFailText = 1024;
static_assert(sizeof(FrameHeader) == 48, "the header is the wire format");
using Clock = std::chrono::steady_clock;

bool Retry(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

std::string Rank(uint32_t r) {
  return "rank " + std::to_string(r);
}

}  // namespace

UdsTransport::UdsTransport(uint32_t rank, std::vector<int> fds, int64_t timeout_ms)
    : rank_(rank),
      fds_(std::move(fds)),
      timeout_ms_(timeout_ms),
      abort_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      sendq_(fds_.size()),
      recvq_(fds_.size()),
      mid_send_(fds_.size()),
      pollfds_(fds_.size() + 2) {}

UdsTransport::~UdsTransport() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
  close(abort_fd_);
  close(wake_fd_);
}

void UdsTransport::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void UdsTransport::Abort() {
  aborted_.store(true);
  const uint64_t one = 1;
  (void)!write(abort_fd_, &one, sizeof one);
}

void UdsTransport::Fail(const OpSignature& sig, const Status& why) {
  (void)sig;  // the reason names the operation
  DropQueued();
  const std::string text = why.message.substr(0, kMaxFailText);
  FrameHeader h{kMagic, kFail, 0, 0, 0, 0, 0, 0, text.size()};
  for (uint32_t p = 0; p < fds_.size(); ++p) {
    if (fds_[p] < 0) continue;
    if (!mid_send_[p]) {  // inside a half-sent frame the peer would take it for payload
      iovec iov[2] = {{&h, sizeof h}, {const_cast<char*>(text.data()), text.size()}};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      (void)sendmsg(fds_[p], &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    shutdown(fds_[p], SHUT_RDWR);  // the peer reads the reason, then end of file
  }
}

Status UdsTransport::ReadFailText(uint32_t peer, uint64_t bytes) {
  std::string text(std::min(bytes, kMaxFailText), '\0');
  size_t got = 0;
  pollfd pfd{fds_[peer], POLLIN, 0};
  while (got < text.size() && poll(&pfd, 1, 1000) == 1) {
    const ssize_t n = recv(fds_[peer], text.data() + got, text.size() - got, MSG_DONTWAIT);
    if (n <= 0) break;
    got += size_t(n);
  }
  text.resize(got);
  return {PLEXUS_ERR_REMOTE, Rank(peer) + " failed: " + text};
}

// After a send to peer failed: the reason peer left, if its FAIL frame waits
// at a frame boundary; else OK.
Status UdsTransport::FailFrameWaiting(uint32_t peer) {
  FrameHeader h;
  if ((!recvq_[peer].empty() && recvq_[peer].front()->header_done > 0) ||
      recv(fds_[peer], &h, sizeof h, MSG_PEEK | MSG_DONTWAIT) != ssize_t(sizeof h) ||
      h.magic != kMagic || h.kind != kFail) {
    return {};
  }
  (void)!recv(fds_[peer], &h, sizeof h, MSG_DONTWAIT);
  return ReadFailText(peer, h.bytes);
}

void UdsTransport::DropQueued() {
  for (auto& q : sendq_) q.clear();
  for (auto& q : recvq_) q.clear();
}

void UdsTransport::Post(Transfer* t) {
  const OpSignature& s = t->sig;
  t->header = {kMagic, kData, s.seq, s.coll, s.dtype, s.op, s.root, s.count, t->bytes};
  t->header_done = t->done = 0;
  t->complete = false;
  (t->is_send ? sendq_ : recvq_)[t->peer].push_back(t);
}

Status UdsTransport::CheckHeader(const Transfer& t) {
  const FrameHeader& h = t.header;
  const OpSignature& mine = t.sig;
  const OpSignature theirs{h.seq, h.coll, h.dtype, h.op, h.count, h.root};
  if (h.magic != kMagic) {
    return {PLEXUS_ERR_REMOTE, "malformed frame from " + Rank(t.peer) + " (bad magic)"};
  }
  if (h.kind == kFail) return ReadFailText(t.peer, h.bytes);
  if (!SameOp(theirs, mine)) {
    return CollectiveMismatch(rank_, mine, t.peer, theirs);
  }
  if (h.bytes != t.bytes) {  // same call, different algorithm step: a bug or a version skew
    return {PLEXUS_ERR_REMOTE, "frame size mismatch in " + DescribeOp(mine) + ": " + Rank(rank_) +
                                   " expects " + std::to_string(t.bytes) + " bytes, " +
                                   Rank(t.peer) + " sent " + std::to_string(h.bytes)};
  }
  return {};
}

Status UdsTransport::SendSome(Transfer& t, bool* moved) {
  iovec iov[2];
  size_t n_iov = 0;
  if (t.header_done < sizeof t.header) {
    iov[n_iov++] = {reinterpret_cast<char*>(&t.header) + t.header_done,
                    sizeof t.header - t.header_done};
  }
  if (t.done < t.bytes) iov[n_iov++] = {t.data + t.done, t.bytes - t.done};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = n_iov;
  const ssize_t n = sendmsg(fds_[t.peer], &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0 && Retry(errno)) return {};
  if (n < 0) {
    const int err = errno;
    Status why = FailFrameWaiting(t.peer);  // says more than "broken pipe"
    if (!why.ok()) return why;
    return {PLEXUS_ERR_REMOTE, Rank(t.peer) + " is gone (" + std::strerror(err) + ") during " +
                                   DescribeOp(t.sig) + ", seen by " + Rank(rank_)};
  }
  const size_t h = std::min(size_t(n), sizeof t.header - t.header_done);
  t.header_done += h;
  t.done += size_t(n) - h;
  t.complete = t.header_done == sizeof t.header && t.done == t.bytes;
  mid_send_[t.peer] = !t.complete;
  *moved = true;
  return {};
}

Status UdsTransport::RecvSome(Transfer& t, bool* moved) {
  // The header alone first: after a mismatch nothing lands in the caller's buffer.
  const bool in_header = t.header_done < sizeof t.header;
  const ssize_t n = in_header
                        ? recv(fds_[t.peer], reinterpret_cast<char*>(&t.header) + t.header_done,
                               sizeof t.header - t.header_done, MSG_DONTWAIT)
                        : recv(fds_[t.peer], t.data + t.done, t.bytes - t.done, MSG_DONTWAIT);
  if (n < 0 && Retry(errno)) return {};
  if (n <= 0) {
    const std::string why =
        n == 0 ? "closed the connection" : "is gone (" + std::string(std::strerror(errno)) + ")";
    return {PLEXUS_ERR_REMOTE, Rank(t.peer) + " " + why + " during " + DescribeOp(t.sig) +
                                   ", seen by " + Rank(rank_) + "; did it exit or crash?"};
  }
  *moved = true;
  (in_header ? t.header_done : t.done) += size_t(n);
  if (in_header && t.header_done == sizeof t.header) {
    Status st = CheckHeader(t);
    if (!st.ok()) return st;
  }
  t.complete = t.header_done == sizeof t.header && t.done == t.bytes;
  return {};
}

Status UdsTransport::Drive(const std::function<bool()>& done) {
  const uint32_t n = size();
  auto last_progress = Clock::now();
  for (;;) {
    Status st;
    bool moved = false;
    if (aborted_.load()) st = {PLEXUS_ERR_ABORTED, "the communicator was aborted"};
    for (uint32_t p = 0; p < n && st.ok(); ++p) {  // each queue head, as far as it goes
      for (auto* q : {&sendq_[p], &recvq_[p]}) {
        while (st.ok() && !q->empty()) {
          st = q->front()->is_send ? SendSome(*q->front(), &moved) : RecvSome(*q->front(), &moved);
          if (!q->front()->complete) break;
          q->pop_front();
        }
      }
    }
    const auto now = Clock::now();
    if (moved) last_progress = now;
    const int64_t idle =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress).count();
    if (st.ok() && idle >= timeout_ms_) {
      std::vector<bool> waiting(n);
      for (uint32_t p = 0; p < n; ++p) waiting[p] = !sendq_[p].empty() || !recvq_[p].empty();
      st = plexus::algos::NoProgress(rank_, timeout_ms_, waiting);
    }
    if (!st.ok()) {
      DropQueued();
      return st;
    }
    if (done()) return {};
    if (moved) continue;
    // Sleep until a socket we have work for is ready, or until abort or wake.
    for (uint32_t p = 0; p < n; ++p) {
      const int events = (recvq_[p].empty() ? 0 : POLLIN) | (sendq_[p].empty() ? 0 : POLLOUT);
      pollfds_[p] = {events ? fds_[p] : -1, short(events), 0};
    }
    pollfds_[n] = {abort_fd_, POLLIN, 0};
    pollfds_[n + 1] = {wake_fd_, POLLIN, 0};
    (void)poll(pollfds_.data(), n + 2, int(std::min<int64_t>(timeout_ms_ - idle, 1000)));
    if (pollfds_[n + 1].revents & POLLIN) {
      uint64_t count;
      (void)!read(wake_fd_, &count, sizeof count);
      return {};
    }
  }
}

Status UdsTransport::Exchange(const OpSignature& sig,
                              std::span<const plexus::algos::SendSpec> sends,
                              std::span<const plexus::algos::RecvSpec> recvs) {
  std::vector<Transfer> batch;
  batch.reserve(sends.size() + recvs.size());
  for (const auto& s : sends) {
    batch.emplace_back(true, s.peer, sig, s.data, s.bytes);
  }
  for (const auto& r : recvs) {
    batch.emplace_back(false, r.peer, sig, r.data, r.bytes);
  }
  for (Transfer& t : batch) Post(&t);
  auto all_done = [&] {
    for (const Transfer& t : batch) {
      if (!t.complete) return false;
    }
    return true;
  };
  for (;;) {
    Status st = Drive(all_done);
    if (!st.ok() && (st.code == PLEXUS_ERR_TIMEOUT || st.code == PLEXUS_ERR_ABORTED)) {
      st.message += " in " + DescribeOp(sig);
    }
    if (!st.ok() || all_done()) return st;
    // Woken because a send/recv was posted: it waits for this collective.
  }
}

}  // namespace uds
