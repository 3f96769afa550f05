// One TCP communicator: a transport (the socket mesh) and one worker thread
// that runs posted operations strictly in posting order. Posting only queues
// work, so every collective is asynchronous; requests complete from the
// worker. After the first failure the communicator is broken: every pending
// and later operation fails with that first error, as NCCL does after an
// asynchronous error, because peers can no longer be in step.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plexus/algos/status.hpp"
#include "plexus/algos/transport.hpp"
#include "plexus/backend.h"
#include "socket_transport.hpp"

// The ABI's opaque request type, defined by this backend.
namespace plexus::tcp {
class TcpComm;
}

struct plexus_request {
  plexus::tcp::TcpComm* comm = nullptr;  // not owned
  std::mutex mutex;
  std::condition_variable done_cv;
  int32_t status = PLEXUS_IN_PROGRESS;  // guarded by mutex
  std::string error;                    // why it failed (ABI 1.1 request_error); guarded by mutex
  int64_t default_timeout_ms = 0;
};

namespace plexus::tcp {

// The work of one operation: runs on the worker with the transport and the
// operation's signature (seq filled in).
using OpBody = std::function<algos::Status(algos::PeerTransport&, const algos::OpSignature&)>;

class TcpComm {
 public:
  TcpComm(const plexus_host_v1& host, uint32_t rank, uint32_t size, int64_t timeout_ms,
          std::string name, std::unique_ptr<SocketTransport> transport);
  ~TcpComm();  // aborts what is pending and joins the worker

  uint32_t rank() const { return rank_; }
  uint32_t size() const { return size_; }

  // Queues a collective; on success *req is a new request owned by the caller.
  int32_t Post(algos::OpSignature sig, OpBody body, plexus_request** req);

  // Queues one point-to-point message of `bytes` bytes to or from peer.
  // Consecutive point-to-point operations are in flight together, so a rank
  // may post a send and a receive to the same peer before waiting for either.
  int32_t PostP2P(bool is_send, uint32_t peer, void* data, uint64_t count, plexus_dtype_t dtype,
                  plexus_request** req);

  // Called by a thread about to block in wait() on req: when req is next in
  // line and nothing is running, runs it on the calling thread instead of
  // handing it to the worker and back, which saves two thread switches per
  // operation (the latency of small collectives). Returns at once otherwise.
  // Only operations of at most kInlineMaxBytes (count x element size).
  void RunInlineIfNext(plexus_request* req);
  static constexpr uint64_t kInlineMaxBytes = 64 << 10;

  void Abort();
  void SetError(const std::string& message);
  size_t LastError(char* buf, size_t len);

 private:
  struct PendingOp {
    algos::OpSignature sig;
    OpBody body;  // empty for point-to-point
    plexus_request* req = nullptr;
    Transfer transfer;  // point-to-point only
  };
  int32_t Enqueue(PendingOp op, plexus_request** req);
  void WorkerLoop();
  // Runs op (popped from the queue with running_ set) and completes it.
  void Execute(PendingOp op);
  // Runs the point-to-point operations at the head of the queue, taking in
  // more as they are posted, until none is left in flight.
  algos::Status RunP2P(PendingOp first);
  void RecordFailure(const algos::Status& st);
  static void Complete(plexus_request* req, int32_t status, const std::string& error = {});

  const plexus_host_v1& host_;
  const uint32_t rank_;
  const uint32_t size_;
  const int64_t timeout_ms_;
  const std::string name_;
  std::unique_ptr<SocketTransport> transport_;

  std::mutex mutex_;  // guards everything below
  std::condition_variable queue_cv_;
  std::deque<PendingOp> queue_;
  uint64_t next_seq_ = 0;
  std::vector<uint64_t> sends_to_;  // per peer: point-to-point sequence numbers
  std::vector<uint64_t> recvs_from_;
  bool stopping_ = false;
  bool running_ = false;      // an operation is executing (worker or inline)
  bool running_p2p_ = false;  // ... and it is RunP2P, which takes in later posts
  algos::Status broken_;      // first failure; OK while healthy
  std::string last_error_;
  std::thread worker_;
};

}  // namespace plexus::tcp
