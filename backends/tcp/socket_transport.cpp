#include "socket_transport.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "frame.hpp"

namespace plexus::tcp {
namespace {

using Clock = std::chrono::steady_clock;

struct PendingSend {
  uint32_t peer;
  FrameHeader header;
  size_t header_done = 0;
  const uint8_t* data;
  size_t bytes;
  size_t done = 0;
  bool complete() const { return header_done == sizeof(FrameHeader) && done == bytes; }
};

struct PendingRecv {
  uint32_t peer;
  FrameHeader header;
  size_t header_done = 0;
  uint8_t* data;
  size_t bytes;
  size_t done = 0;
  bool header_checked = false;
  bool complete() const { return header_checked && done == bytes; }
};

std::string Errno(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }

}  // namespace

SocketTransport::SocketTransport(uint32_t rank, uint32_t size, std::vector<int> peer_fds,
                                 int64_t timeout_ms)
    : rank_(rank), size_(size), fds_(std::move(peer_fds)), timeout_ms_(timeout_ms) {
  abort_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

SocketTransport::~SocketTransport() {
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
  if (abort_fd_ >= 0) close(abort_fd_);
}

void SocketTransport::Abort() {
  aborted_.store(true);
  const uint64_t one = 1;
  if (abort_fd_ >= 0) (void)!write(abort_fd_, &one, sizeof one);
}

void SocketTransport::Fail(const std::string& reason) {
  std::call_once(failed_once_, [&] {
    const std::string text = reason.substr(0, kMaxFailText);
    const FrameHeader h = MakeFailHeader(text.size());
    for (uint32_t p = 0; p < size_; ++p) {
      if (fds_[p] < 0) continue;
      // Best effort: a FAIL frame fits any socket buffer unless the peer has
      // stopped reading, in which case it will see the shutdown instead.
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

algos::Status SocketTransport::ReadFailText(uint32_t peer, uint64_t bytes) {
  std::string text(bytes, '\0');
  size_t got = 0;
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

algos::Status SocketTransport::Exchange(const algos::OpSignature& sig,
                                        std::span<const algos::SendSpec> sends,
                                        std::span<const algos::RecvSpec> recvs) {
  std::vector<PendingSend> out;
  std::vector<PendingRecv> in;
  out.reserve(sends.size());
  in.reserve(recvs.size());
  for (const auto& s : sends) {
    if (s.peer >= size_ || s.peer == rank_) {
      return {PLEXUS_ERR_INTERNAL, "algorithm sent to invalid peer " + std::to_string(s.peer)};
    }
    out.push_back({s.peer, MakeDataHeader(sig, s.bytes), 0, static_cast<const uint8_t*>(s.data),
                   s.bytes});
  }
  for (const auto& r : recvs) {
    if (r.peer >= size_ || r.peer == rank_) {
      return {PLEXUS_ERR_INTERNAL, "algorithm received from invalid peer " +
                                       std::to_string(r.peer)};
    }
    in.push_back({r.peer, {}, 0, static_cast<uint8_t*>(r.data), r.bytes});
  }

  // One pollfd per distinct peer; a peer can be both sent to and received from.
  std::vector<pollfd> pfds;
  std::vector<uint32_t> pfd_peer;
  auto slot = [&](uint32_t peer) {
    for (size_t i = 0; i < pfd_peer.size(); ++i) {
      if (pfd_peer[i] == peer) return i;
    }
    pfd_peer.push_back(peer);
    pfds.push_back({fds_[peer], 0, 0});
    return pfd_peer.size() - 1;
  };
  std::vector<size_t> out_slot, in_slot;
  for (auto& s : out) out_slot.push_back(slot(s.peer));
  for (auto& r : in) in_slot.push_back(slot(r.peer));
  const size_t abort_index = pfds.size();
  pfds.push_back({abort_fd_, POLLIN, 0});

  auto last_progress = Clock::now();
  for (;;) {
    if (aborted_.load()) {
      return {PLEXUS_ERR_ABORTED, "communicator aborted during " + DescribeOp(sig)};
    }
    bool all_done = true;
    for (size_t i = 0; i < abort_index; ++i) pfds[i].events = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out[i].complete()) pfds[out_slot[i]].events |= POLLOUT, all_done = false;
    }
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].complete()) pfds[in_slot[i]].events |= POLLIN, all_done = false;
    }
    if (all_done) return {};

    const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() -
                                                                            last_progress);
    const int64_t left_ms = timeout_ms_ - idle.count();
    if (left_ms <= 0) {
      std::string waiting;
      for (auto& r : in) {
        if (!r.complete()) waiting += " " + std::to_string(r.peer);
      }
      for (auto& s : out) {
        if (!s.complete()) waiting += " " + std::to_string(s.peer);
      }
      return {PLEXUS_ERR_TIMEOUT, "no progress for " + std::to_string(timeout_ms_) + " ms in " +
                                      DescribeOp(sig) + " on rank " + std::to_string(rank_) +
                                      ", waiting for rank(s)" + waiting};
    }
    const int rc = poll(pfds.data(), pfds.size(), int(std::min<int64_t>(left_ms, 1000)));
    if (rc < 0) {
      if (errno == EINTR) continue;
      return {PLEXUS_ERR_SYSTEM, Errno("poll", errno)};
    }
    if (pfds[abort_index].revents) continue;  // loop top reports ABORTED

    bool progressed = false;
    for (size_t i = 0; i < out.size(); ++i) {
      PendingSend& s = out[i];
      const short rev = pfds[out_slot[i]].revents;
      if (s.complete() || !(rev & (POLLOUT | POLLERR | POLLHUP))) continue;
      iovec iov[2];
      int n_iov = 0;
      if (s.header_done < sizeof s.header) {
        iov[n_iov++] = {reinterpret_cast<uint8_t*>(&s.header) + s.header_done,
                        sizeof s.header - s.header_done};
      }
      if (s.done < s.bytes) iov[n_iov++] = {const_cast<uint8_t*>(s.data) + s.done, s.bytes - s.done};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = size_t(n_iov);
      const ssize_t n = sendmsg(fds_[s.peer], &msg, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
        return {PLEXUS_ERR_REMOTE, "lost connection to rank " + std::to_string(s.peer) +
                                       " while sending " + DescribeOp(sig) + " (" +
                                       Errno("send", errno) + ")"};
      }
      size_t sent = size_t(n);
      const size_t h = std::min(sent, sizeof s.header - s.header_done);
      s.header_done += h;
      s.done += sent - h;
      progressed = true;
    }
    for (size_t i = 0; i < in.size(); ++i) {
      PendingRecv& r = in[i];
      const short rev = pfds[in_slot[i]].revents;
      if (r.complete() || !(rev & (POLLIN | POLLERR | POLLHUP))) continue;
      ssize_t n;
      if (r.header_done < sizeof r.header) {
        n = recv(fds_[r.peer], reinterpret_cast<uint8_t*>(&r.header) + r.header_done,
                 sizeof r.header - r.header_done, 0);
      } else {
        n = recv(fds_[r.peer], r.data + r.done, r.bytes - r.done, 0);
      }
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        const std::string why = n == 0 ? "closed the connection" : Errno("recv", errno);
        return {PLEXUS_ERR_REMOTE, "rank " + std::to_string(r.peer) + " " + why + " during " +
                                       DescribeOp(sig) + " (seen by rank " +
                                       std::to_string(rank_) + "); did it exit or crash?"};
      }
      if (n < 0) continue;
      progressed = true;
      if (r.header_done < sizeof r.header) {
        r.header_done += size_t(n);
        if (r.header_done < sizeof r.header) continue;
        algos::Status st = ValidateHeader(r.header, sig, r.bytes, rank_, r.peer);
        if (!st.ok()) return st;
        if (r.header.kind == kFrameFail) return ReadFailText(r.peer, r.header.payload_bytes);
        r.header_checked = true;
      } else {
        r.done += size_t(n);
      }
    }
    if (progressed) last_progress = Clock::now();
  }
}

}  // namespace plexus::tcp
