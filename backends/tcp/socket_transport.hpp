// SocketTransport: the TCP backend's PeerTransport. One connected,
// non-blocking stream socket per peer, driven with epoll (after a bounded
// spin, see below).
//
// Transfers are queued per peer and direction; only the head of each queue is
// on the wire, because frames on one stream must follow each other. Exchange()
// (what collective algorithms use) queues a step's sends and receives and
// drives them all together, so a rank that sends and receives in one step can
// never deadlock on full socket buffers. Point-to-point operations use the
// same queues through Post() and Drive(), which lets several of them be in
// flight at once while the worker keeps accepting new ones.
//
// Two eventfds wake a blocked Drive(): abort (any thread; the transport is
// unusable afterwards) and wake (new work was posted; Drive returns so the
// caller can add it).
//
// Before it sleeps in epoll_wait, Drive keeps retrying its sockets for a
// bounded time (the spin, set per transport): on loopback or a fast network
// a small message's answer arrives within a few microseconds, sooner than a
// sleep and a wake-up take. The spin is bounded and restarts only on
// progress, so an idle or stalled rank still sleeps; after a few
// microseconds it yields the CPU at every try, so a peer on the same core is
// not held up by it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "frame.hpp"
#include "plexus/algos/transport.hpp"
#include "plexus/kit/queue_transport.hpp"

namespace plexus::tcp {

// One frame to send or to receive (sig: what the frame says, or must say).
// Owned by whoever posted it; must outlive its completion (or the failure of
// the transport).
struct Transfer final : kit::Message {
  // Progress, owned by the transport.
  FrameHeader header{};
  size_t header_done = 0;
  size_t done = 0;
};

class SocketTransport final : public kit::QueueTransport {
 public:
  // Takes ownership of peer_fds (index = peer rank; -1 at index rank).
  // timeout_ms: how long the transport may go without progress.
  // spin_us: how long Drive retries without progress before it sleeps.
  // pipeline_depth: PipelineDepth(); 0 chooses by where the peers are.
  SocketTransport(uint32_t rank, uint32_t size, std::vector<int> peer_fds, int64_t timeout_ms,
                  int64_t spin_us = 0, uint32_t pipeline_depth = 0);
  ~SocketTransport() override;

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  algos::Status Exchange(const algos::OpSignature& sig, std::span<const algos::SendSpec> sends,
                         std::span<const algos::RecvSpec> recvs) override;
  algos::Status Start(const algos::OpSignature& sig, std::span<const algos::SendSpec> sends,
                      std::span<const algos::RecvSpec> recvs, uint64_t* ticket) override;
  algos::Status Finish(uint64_t ticket) override;
  // As given, else 2 when every peer is on this host and
  // kRemotePipelineDepth when one is not.
  uint32_t PipelineDepth() const override { return pipeline_depth_; }

  // kit::QueueTransport (queue_transport.hpp says what each does):
  std::unique_ptr<kit::Message> NewMessage() override { return std::make_unique<Transfer>(); }
  // Queues the message behind those already queued for its peer and direction.
  algos::Status PostMessage(kit::Message* m) override;
  // Moves queued transfers until done() is true, the wake eventfd fires
  // (returns OK), no progress is made for the timeout (TIMEOUT naming the
  // peers), a peer fails (REMOTE) or Abort() is called (ABORTED).
  algos::Status Drive(const std::function<bool()>& done) override;
  // Forgets every queued transfer and started batch.
  void Cancel() override;
  // Tells every peer, best effort and within a short bound, why this rank is
  // giving up (a FAIL frame), then shuts the sockets down so no peer waits
  // for a timeout.
  void Fail(const algos::OpSignature& sig, const algos::Status& why) override;
  void Wake() override;
  void Abort() override;

 private:
  // Queues t behind the transfers already queued for its peer and direction.
  void Post(Transfer* t);
  // Forgets every queued transfer (after a failure, before their owners go).
  void DropQueued();
  // Reads the rest of a FAIL frame's text (prefix already read) and reports it.
  algos::Status ReadFailText(uint32_t peer, std::string prefix, uint64_t bytes);
  // After a send to peer failed: the reason in a FAIL frame the peer sent
  // before it went (waiting unread at a frame boundary), or OK if none.
  algos::Status FailFrameWaiting(uint32_t peer);
  algos::Status LocalBufferFault(const Transfer& t, const char* call) const;
  algos::Status Describe(int32_t code, const std::string& what, uint32_t peer,
                         const algos::OpSignature& sig, const std::string& hint = "") const;
  // One non-blocking I/O attempt on the head transfer; sets *progressed.
  algos::Status SendSome(Transfer& t, bool* progressed);
  algos::Status RecvSome(Transfer& t, bool* progressed);

  const uint32_t rank_;
  const uint32_t size_;
  std::vector<int> fds_;
  const int64_t timeout_ms_;
  const std::chrono::nanoseconds spin_;
  // How long a spin goes before it lets other threads on this CPU run first.
  static constexpr std::chrono::microseconds kYieldAfter{10};
  int abort_fd_ = -1;
  int wake_fd_ = -1;
  int epoll_fd_ = -1;
  // epoll keys of the two eventfds (peer sockets use their rank).
  static constexpr uint32_t kAbortKey = 0xFFFFFFFE;
  static constexpr uint32_t kWakeKey = 0xFFFFFFFF;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> woken_{false};  // Wake() called; seen by a spinning Drive
  std::once_flag failed_once_;
  std::vector<std::deque<Transfer*>> sendq_;  // per peer
  std::vector<std::deque<Transfer*>> recvq_;  // per peer

  // Batches started by Start() and not yet finished, oldest first. A deque
  // keeps the Transfer addresses in the queues valid as batches come and go.
  struct Batch {
    uint64_t ticket = 0;
    algos::OpSignature sig;
    std::vector<Transfer> transfers;
  };
  std::deque<Batch> batches_;
  uint64_t last_ticket_ = 0;
  uint32_t pipeline_depth_ = 2;
};

}  // namespace plexus::tcp
