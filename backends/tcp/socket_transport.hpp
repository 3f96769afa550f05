// SocketTransport: the TCP backend's PeerTransport. One connected,
// non-blocking stream socket per peer; Exchange() drives all of a step's
// sends and receives with poll(), so it never spins and never deadlocks on a
// full socket buffer. An eventfd lets Abort() wake a blocked Exchange from
// any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "plexus/algos/transport.hpp"

namespace plexus::tcp {

class SocketTransport final : public algos::PeerTransport {
 public:
  // Takes ownership of peer_fds (index = peer rank; -1 at index rank).
  // timeout_ms: how long Exchange may go without progress.
  SocketTransport(uint32_t rank, uint32_t size, std::vector<int> peer_fds, int64_t timeout_ms);
  ~SocketTransport() override;

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  algos::Status Exchange(const algos::OpSignature& sig, std::span<const algos::SendSpec> sends,
                         std::span<const algos::RecvSpec> recvs) override;

  // Makes a running or later Exchange return ABORTED. Any thread; idempotent.
  void Abort();

  // Tells every peer, best effort and within a short bound, why this rank is
  // giving up, then shuts the sockets down so no peer waits for a timeout.
  // Called by the owner after a failed Exchange.
  void Fail(const std::string& reason);

 private:
  algos::Status ReadFailText(uint32_t peer, uint64_t bytes);

  const uint32_t rank_;
  const uint32_t size_;
  std::vector<int> fds_;
  const int64_t timeout_ms_;
  int abort_fd_ = -1;
  std::atomic<bool> aborted_{false};
  std::once_flag failed_once_;
};

}  // namespace plexus::tcp
