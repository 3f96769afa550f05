#include "socket_transport.hpp"

#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

namespace plexus::tcp {
namespace {

using Clock = std::chrono::steady_clock;

std::string Errno(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

bool WouldBlock(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

void Drain(int fd) {
  uint64_t value;
  (void)!read(fd, &value, sizeof value);
}

// Segments in flight for a ring across hosts: 16 x 256 KiB covers a 1 ms,
// 2 GB/s link. Across namespace hosts joined by a switch that holds every
// frame 1 ms (tests/net/delay_switch.cpp), busbw grows with every doubling
// up to 16 (see docs/benchmarks.md).
constexpr uint32_t kRemotePipelineDepth = 16;

// Whether a connected socket's two ends have different addresses: the peer
// is on another host (ranks of one host all use the same local address, the
// one that routes to the master, or loopback).
bool PeerIsRemote(int fd) {
  sockaddr_storage mine{}, theirs{};
  socklen_t a = sizeof mine, b = sizeof theirs;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &a) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&theirs), &b) != 0 ||
      mine.ss_family != theirs.ss_family) {
    return false;
  }
  if (mine.ss_family == AF_INET) {
    return reinterpret_cast<sockaddr_in&>(mine).sin_addr.s_addr !=
           reinterpret_cast<sockaddr_in&>(theirs).sin_addr.s_addr;
  }
  if (mine.ss_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<sockaddr_in6&>(mine).sin6_addr,
                       &reinterpret_cast<sockaddr_in6&>(theirs).sin6_addr, sizeof(in6_addr)) != 0;
  }
  return false;
}

}  // namespace

SocketTransport::SocketTransport(uint32_t rank, uint32_t size, std::vector<int> peer_fds,
                                 int64_t timeout_ms, int64_t spin_us, uint32_t pipeline_depth)
    : rank_(rank),
      size_(size),
      fds_(std::move(peer_fds)),
      timeout_ms_(timeout_ms),
      spin_(std::chrono::microseconds(spin_us)),
      sendq_(size),
      recvq_(size) {
  if (pipeline_depth > 0) pipeline_depth_ = pipeline_depth;
  abort_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  // Every socket is registered once, edge-triggered for both directions:
  // Drive() always tries every queue head until it would block before it
  // sleeps, so an edge is never needed twice. The eventfds are
  // level-triggered; the abort one is never drained.
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  for (uint32_t p = 0; p < size_; ++p) {
    if (fds_[p] < 0) continue;
    if (pipeline_depth == 0 && PeerIsRemote(fds_[p])) pipeline_depth_ = kRemotePipelineDepth;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u32 = p;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fds_[p], &ev);
  }
  for (int fd : {abort_fd_, wake_fd_}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = fd == abort_fd_ ? kAbortKey : kWakeKey;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }
}

SocketTransport::~SocketTransport() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
  if (abort_fd_ >= 0) close(abort_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  if (epoll_fd_ >= 0) close(epoll_fd_);
}

void SocketTransport::Abort() {
  aborted_.store(true);
  const uint64_t one = 1;
  if (abort_fd_ >= 0) (void)!write(abort_fd_, &one, sizeof one);
}

void SocketTransport::Wake() {
  woken_.store(true);
  const uint64_t one = 1;
  if (wake_fd_ >= 0) (void)!write(wake_fd_, &one, sizeof one);
}

void SocketTransport::Fail(const algos::OpSignature& sig, const algos::Status& why) {
  (void)sig;  // the reason names the operation
  std::call_once(failed_once_, [&] {
    const std::string text = why.message.substr(0, kMaxFailText);
    const FrameHeader h = MakeFailHeader(text.size());
    for (uint32_t p = 0; p < size_; ++p) {
      if (fds_[p] < 0) continue;
      // Best effort: a FAIL frame fits any socket buffer unless the peer has
      // stopped reading, in which case it will see the shutdown instead.
      // (If a data frame was half sent, the peer reports a malformed frame.)
      iovec iov[2] = {{const_cast<FrameHeader*>(&h), sizeof h},
                      {const_cast<char*>(text.data()), text.size()}};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = 2;
      (void)sendmsg(fds_[p], &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      shutdown(fds_[p], SHUT_RDWR);
    }
  });
}

algos::Status SocketTransport::ReadFailText(uint32_t peer, std::string prefix, uint64_t bytes) {
  std::string text = std::move(prefix);
  size_t got = text.size();
  text.resize(bytes);
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  while (got < bytes && Clock::now() < deadline) {
    pollfd p{fds_[peer], POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fds_[peer], text.data() + got, bytes - got, 0);
    if (n <= 0) break;
    got += size_t(n);
  }
  text.resize(got);
  return {PLEXUS_ERR_REMOTE, "rank " + std::to_string(peer) + " failed: " + text};
}

algos::Status SocketTransport::FailFrameWaiting(uint32_t peer) {
  // Only at a frame boundary: inside a data frame the next bytes are payload.
  if (!recvq_[peer].empty() && recvq_[peer].front()->header_done > 0) return {};
  FrameHeader h;
  const ssize_t n = recv(fds_[peer], &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
  if (n != ssize_t(sizeof h) || h.magic != kFrameMagic || h.version != kFrameVersion ||
      h.kind != kFrameFail || h.payload_bytes > kMaxFailText) {
    return {};
  }
  if (recv(fds_[peer], &h, sizeof h, MSG_DONTWAIT) != ssize_t(sizeof h)) return {};
  return ReadFailText(peer, "", h.payload_bytes);
}

algos::Status SocketTransport::Describe(int32_t code, const std::string& what, uint32_t peer,
                                        const algos::OpSignature& sig,
                                        const std::string& hint) const {
  return {code, "rank " + std::to_string(peer) + " " + what + " during " + DescribeOp(sig) +
                    " (seen by rank " + std::to_string(rank_) + ")" + hint};
}

// EFAULT: the kernel could not read (send) or write (recv) this rank's own
// buffer, a local error (typically a count larger than the buffer), not
// the peer's.
algos::Status SocketTransport::LocalBufferFault(const Transfer& t, const char* call) const {
  const bool sending = std::string_view(call) == "send";
  return {PLEXUS_ERR_SYSTEM,
          "rank " + std::to_string(rank_) + "'s own buffer is not " +
              (sending ? "readable" : "writable") + " (" + call + ": Bad address) at byte " +
              std::to_string(t.done) + " of the " + std::to_string(t.bytes) + "-byte message " +
              (sending ? "to" : "from") + " rank " + std::to_string(t.peer) + " during " +
              DescribeOp(t.sig) + ": is the count larger than the buffer?"};
}

void SocketTransport::Post(Transfer* t) {
  t->header_done = 0;
  t->done = 0;
  t->complete = false;
  if (t->is_send) {
    t->header = MakeDataHeader(t->sig, t->bytes);
    sendq_[t->peer].push_back(t);
  } else {
    recvq_[t->peer].push_back(t);
  }
}

algos::Status SocketTransport::SendSome(Transfer& t, bool* progressed) {
  iovec iov[2];
  int n_iov = 0;
  if (t.header_done < sizeof t.header) {
    iov[n_iov++] = {reinterpret_cast<uint8_t*>(&t.header) + t.header_done,
                    sizeof t.header - t.header_done};
  }
  if (t.done < t.bytes) iov[n_iov++] = {t.data + t.done, t.bytes - t.done};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = size_t(n_iov);
  const ssize_t n = sendmsg(fds_[t.peer], &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n < 0) {
    if (WouldBlock(errno)) return {};
    const int err = errno;
    if (err == EFAULT) return LocalBufferFault(t, "send");
    // A peer that failed first sent its reason before closing: that says
    // more than the broken pipe its close left behind.
    algos::Status why = FailFrameWaiting(t.peer);
    if (!why.ok()) return why;
    return Describe(PLEXUS_ERR_REMOTE, "is unreachable (" + Errno("send", err) + ")", t.peer,
                    t.sig);
  }
  const size_t sent = size_t(n);
  const size_t h = std::min(sent, sizeof t.header - t.header_done);
  t.header_done += h;
  t.done += sent - h;
  t.complete = t.header_done == sizeof t.header && t.done == t.bytes;
  *progressed = true;
  return {};
}

algos::Status SocketTransport::RecvSome(Transfer& t, bool* progressed) {
  const bool in_header = t.header_done < sizeof t.header;
  ssize_t n;
  if (in_header) {
    // Read the header and, optimistically, the payload this rank expects in
    // one call; if the header turns out not to match, the comm fails anyway.
    iovec iov[2] = {
        {reinterpret_cast<uint8_t*>(&t.header) + t.header_done, sizeof t.header - t.header_done},
        {t.data, t.bytes}};
    n = readv(fds_[t.peer], iov, t.bytes ? 2 : 1);
  } else {
    n = recv(fds_[t.peer], t.data + t.done, t.bytes - t.done, MSG_DONTWAIT);
  }
  if (n < 0 && errno == EFAULT) return LocalBufferFault(t, "recv");
  if (n == 0 || (n < 0 && !WouldBlock(errno))) {
    const std::string why = n == 0 ? "closed the connection" : Errno("recv", errno);
    return Describe(PLEXUS_ERR_REMOTE, why, t.peer, t.sig, "; did it exit or crash?");
  }
  if (n < 0) return {};
  *progressed = true;
  size_t got = size_t(n);
  if (in_header) {
    const size_t h = std::min(got, sizeof t.header - t.header_done);
    t.header_done += h;
    got -= h;
    if (t.header_done == sizeof t.header) {
      algos::Status st = ValidateHeader(t.header, t.sig, t.bytes, rank_, t.peer);
      if (!st.ok()) return st;
      if (t.header.kind == kFrameFail) {
        // Some of the text may already sit in t.data from the readv above.
        const size_t have = std::min<size_t>(got, t.header.payload_bytes);
        std::string prefix = have ? std::string(reinterpret_cast<char*>(t.data), have) : "";
        return ReadFailText(t.peer, std::move(prefix), t.header.payload_bytes);
      }
    }
  }
  t.done += got;
  t.complete = t.header_done == sizeof t.header && t.done == t.bytes;
  return {};
}

algos::Status SocketTransport::Drive(const std::function<bool()>& done) {
  auto last_progress = Clock::now();
  epoll_event events[16];
  for (;;) {
    if (aborted_.load()) return {PLEXUS_ERR_ABORTED, "communicator aborted"};
    // Try every head until it would block: data is often already there, and
    // the edge-triggered registration relies on it.
    bool progressed = false;
    for (uint32_t p = 0; p < size_; ++p) {
      while (!sendq_[p].empty()) {
        Transfer& t = *sendq_[p].front();
        bool moved = false;
        algos::Status st = SendSome(t, &moved);
        if (!st.ok()) return st;
        progressed |= moved;
        if (!t.complete) break;
        sendq_[p].pop_front();
      }
      while (!recvq_[p].empty()) {
        Transfer& t = *recvq_[p].front();
        bool moved = false;
        algos::Status st = RecvSome(t, &moved);
        if (!st.ok()) return st;
        progressed |= moved;
        if (!t.complete) break;
        recvq_[p].pop_front();
      }
    }
    if (done()) return {};
    const auto now = Clock::now();
    if (progressed) {
      last_progress = now;
      continue;  // something moved: try again before sleeping
    }
    if (now - last_progress < spin_) {
      // The answer may be microseconds away: retry rather than sleep, but
      // return to a caller that has new work as a sleeping Drive would.
      if (woken_.exchange(false)) {
        Drain(wake_fd_);
        return {};
      }
      // Past the few microseconds an answer takes when the peer has a CPU
      // of its own, let any thread that waits for this CPU run first: it
      // may be the peer (two ranks on one core), which the spin would
      // otherwise hold up for the whole spin. With nothing else to run,
      // sched_yield returns at once.
      if (now - last_progress > kYieldAfter) sched_yield();
      continue;
    }
    const int64_t idle_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - last_progress).count();
    if (idle_ms >= timeout_ms_) {
      std::vector<bool> waiting(size_);
      for (uint32_t p = 0; p < size_; ++p) waiting[p] = !sendq_[p].empty() || !recvq_[p].empty();
      return algos::NoProgress(rank_, timeout_ms_, waiting);
    }
    const int n =
        epoll_wait(epoll_fd_, events, 16, int(std::min<int64_t>(timeout_ms_ - idle_ms, 1000)));
    if (n < 0 && errno != EINTR) return {PLEXUS_ERR_SYSTEM, Errno("epoll_wait", errno)};
    for (int i = 0; i < n; ++i) {
      if (events[i].data.u32 == kWakeKey) {
        woken_.store(false);
        Drain(wake_fd_);
        return {};
      }
    }
  }
}

void SocketTransport::DropQueued() {
  for (auto& q : sendq_) q.clear();
  for (auto& q : recvq_) q.clear();
}

algos::Status SocketTransport::PostMessage(kit::Message* m) {
  Post(static_cast<Transfer*>(m));  // made by NewMessage
  return {};
}

void SocketTransport::Cancel() {
  DropQueued();
  batches_.clear();
}

algos::Status SocketTransport::Start(const algos::OpSignature& sig,
                                     std::span<const algos::SendSpec> sends,
                                     std::span<const algos::RecvSpec> recvs, uint64_t* ticket) {
  for (const auto& s : sends) {
    if (s.peer >= size_ || s.peer == rank_) {
      return {PLEXUS_ERR_INTERNAL, "algorithm sent to invalid peer " + std::to_string(s.peer)};
    }
  }
  for (const auto& r : recvs) {
    if (r.peer >= size_ || r.peer == rank_) {
      return {PLEXUS_ERR_INTERNAL,
              "algorithm received from invalid peer " + std::to_string(r.peer)};
    }
  }
  Batch& batch = batches_.emplace_back();
  batch.ticket = ++last_ticket_;
  batch.sig = sig;
  batch.transfers.resize(sends.size() + recvs.size());
  size_t i = 0;
  for (const auto& s : sends) {
    Transfer& t = batch.transfers[i++];
    t.is_send = true;
    t.peer = s.peer;
    t.sig = sig;
    t.data = const_cast<uint8_t*>(static_cast<const uint8_t*>(s.data));
    t.bytes = s.bytes;
  }
  for (const auto& r : recvs) {
    Transfer& t = batch.transfers[i++];
    t.peer = r.peer;
    t.sig = sig;
    t.data = static_cast<uint8_t*>(r.data);
    t.bytes = r.bytes;
  }
  for (Transfer& t : batch.transfers) Post(&t);
  *ticket = batch.ticket;
  return {};
}

algos::Status SocketTransport::Finish(uint64_t ticket) {
  auto covered_done = [&] {
    for (const Batch& b : batches_) {
      if (b.ticket > ticket) break;
      for (const Transfer& t : b.transfers) {
        if (!t.complete) return false;
      }
    }
    return true;
  };
  for (;;) {
    algos::Status st = Drive(covered_done);
    if (!st.ok()) {
      if (st.code == PLEXUS_ERR_TIMEOUT || st.code == PLEXUS_ERR_ABORTED) {
        st.message +=
            " in " + DescribeOp(batches_.empty() ? algos::OpSignature{} : batches_.front().sig);
      }
      DropQueued();
      batches_.clear();
      return st;
    }
    if (covered_done()) break;
    // Woken for new posts: collectives don't take them mid-step; keep going.
  }
  while (!batches_.empty() && batches_.front().ticket <= ticket) batches_.pop_front();
  return {};
}

algos::Status SocketTransport::Exchange(const algos::OpSignature& sig,
                                        std::span<const algos::SendSpec> sends,
                                        std::span<const algos::RecvSpec> recvs) {
  uint64_t ticket = 0;
  algos::Status st = Start(sig, sends, recvs, &ticket);
  if (!st.ok()) return st;
  return Finish(ticket);
}

}  // namespace plexus::tcp
