// UdsTransport: this backend's PeerTransport, one connected Unix stream
// socket per peer.
//
// plexus-algos runs every collective over PeerTransport::Exchange(), so this
// is most of what a vendor writes: move bytes between two ranks, and say
// clearly when that fails. Frames on one stream must follow each other, so
// each peer has a queue of sends and a queue of receives, and only the head of
// each is on the wire. Exchange() queues one step's transfers and drives them
// all at once, so a rank that sends and receives in the same step never
// deadlocks on a full socket buffer. Send/recv operations use the same queues
// through Post() and Drive(), so several can be in flight together.
//
// Every frame starts with a header that repeats the operation's signature;
// the receiver compares it with its own before it touches the payload. That
// is how two ranks in different collectives find out, and the error names
// both. A rank that gives up sends each peer a FAIL frame with its reason
// before it closes, so that every survivor names the rank at fault, not just
// the neighbour that left.
#pragma once

#include <poll.h>

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plexus/algos/describe.hpp"
#include "plexus/algos/transport.hpp"
#include "plexus/backend.h"
#include "plexus/kit/queue_transport.hpp"

namespace uds {

using plexus::algos::OpSignature;
using plexus::algos::Status;

// The 48 bytes in front of every payload, in host byte order (one host).
struct FrameHeader {
  uint32_t magic, kind;  // kind: kData or kFail (payload: the reason)
  uint64_t seq;
  uint32_t coll, dtype, op, root;
  uint64_t count;
  uint64_t bytes;  // payload bytes that follow
};

// One frame to send or receive (sig: what the frame says, or must say).
// Owned by whoever posted it; it must stay alive until it is complete or
// Drive() has failed.
struct Transfer final : plexus::kit::Message {
  Transfer() = default;
  Transfer(bool send, uint32_t to_or_from, const OpSignature& s, const void* buf, size_t n) {
    is_send = send;
    peer = to_or_from;
    sig = s;
    data = static_cast<uint8_t*>(const_cast<void*>(buf));
    bytes = n;
  }
  FrameHeader header{};  // progress, kept by the transport
  size_t header_done = 0, done = 0;
};

// "allreduce(seq 3, count 10, float32, sum)", for error messages.
using plexus::algos::DescribeOp;

class UdsTransport final : public plexus::kit::QueueTransport {
 public:
  // Takes ownership of fds: one non-blocking socket per peer, -1 at `rank`.
  // timeout_ms: how long Drive() may go without moving a byte.
  UdsTransport(uint32_t rank, std::vector<int> fds, int64_t timeout_ms);
  ~UdsTransport() override;

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return uint32_t(fds_.size()); }
  Status Exchange(const OpSignature& sig, std::span<const plexus::algos::SendSpec> sends,
                  std::span<const plexus::algos::RecvSpec> recvs) override;

  // What plexus::kit::OpQueue needs for send/recv and failures
  // (plexus/kit/queue_transport.hpp says what each must do):
  std::unique_ptr<plexus::kit::Message> NewMessage() override {
    return std::make_unique<Transfer>();
  }
  // Queues the message behind what is already queued for its peer and direction.
  Status PostMessage(plexus::kit::Message* m) override {
    Post(static_cast<Transfer*>(m));  // made by NewMessage
    return {};
  }
  // Moves bytes until done() is true or Wake() was called (both OK), or
  // fails: TIMEOUT after timeout_ms without progress, REMOTE when a peer
  // leaves or disagrees, ABORTED after Abort(). A failure empties the queues.
  Status Drive(const std::function<bool()>& done) override;
  void Cancel() override { DropQueued(); }
  void Wake() override;   // any thread: a running Drive() returns so its caller can post more
  void Abort() override;  // any thread: a running or later Drive() returns ABORTED
  // After a failure: tells every peer why (best effort, never blocks) and
  // shuts the sockets down, so that peers fail now instead of at their timeout.
  void Fail(const OpSignature& sig, const Status& why) override;

 private:
  void Post(Transfer* t);
  Status SendSome(Transfer& t, bool* moved);
  Status RecvSome(Transfer& t, bool* moved);
  Status CheckHeader(const Transfer& t);
  Status ReadFailText(uint32_t peer, uint64_t bytes);
  Status FailFrameWaiting(uint32_t peer);
  void DropQueued();

  const uint32_t rank_;
  std::vector<int> fds_;
  const int64_t timeout_ms_;
  int abort_fd_, wake_fd_;  // eventfds that wake poll(); abort is never drained
  std::atomic<bool> aborted_{false};
  std::vector<std::deque<Transfer*>> sendq_, recvq_;  // per peer
  std::vector<char> mid_send_;                        // per peer: a frame is half written
  std::vector<pollfd> pollfds_;
};

// Connects every pair of ranks (uds_connect.cpp). BLOCKS up to
// config.timeout_ms. dir: where the sockets live ("" = abstract namespace).
Status ConnectMesh(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                   const std::string& dir, std::vector<int>* fds);

inline void Log(const plexus_host_v1& host, int32_t level, const std::string& message) {
  if (host.log) host.log(host.ctx, level, message.c_str());  // a NULL logger: stay silent
}

}  // namespace uds
