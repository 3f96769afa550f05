// One UCX communicator: a transport (its ucp_worker and endpoints) and one
// worker thread that runs posted operations strictly in posting order.
// Posting only queues work, so every collective is asynchronous. Operations
// run one at a time: on the worker thread, or on a caller that blocks in
// wait() for the operation next in line (RunInlineIfNext), which saves the
// two thread hand-offs that dominate a small collective. Whichever thread
// runs an operation is the only one that drives the ucp_worker meanwhile
// (running_, under mutex_, hands it over). Other callers block in wait() on
// the request's condition variable. After the first failure the communicator
// is broken: every pending and later operation fails with that first error
// (the ABI's "After a failure"), because peers can no longer be assumed to be
// in step.
#pragma once

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
#include "ucx_transport.hpp"

namespace plexus::ucx {
class UcxComm;
}

// The ABI's opaque request type, defined by this backend.
struct plexus_request {
  plexus::ucx::UcxComm* comm = nullptr;  // not owned
  std::mutex mutex;
  std::condition_variable done_cv;
  int32_t status = PLEXUS_IN_PROGRESS;  // guarded by mutex
  std::string error;                    // why it failed (ABI 1.1 request_error); guarded by mutex
  int64_t default_timeout_ms = 0;       // wait(req, negative) waits this long
};

namespace plexus::ucx {

// The work of one collective: runs on the worker thread with the transport
// and the operation's signature (seq filled in).
using OpBody = std::function<algos::Status(algos::PeerTransport&, const algos::OpSignature&)>;

class UcxComm {
 public:
  // Takes ownership of a connected transport and starts the worker thread.
  UcxComm(const plexus_host_v1& host, uint32_t rank, uint32_t size, int64_t timeout_ms,
          std::string name, std::unique_ptr<UcxTransport> transport);
  ~UcxComm();  // aborts what is pending, joins the worker, then closes the transport

  uint32_t rank() const { return rank_; }
  uint32_t size() const { return size_; }

  // Queues a collective; on success *req is a new request owned by the caller.
  int32_t Post(algos::OpSignature sig, OpBody body, plexus_request** req);

  // Queues one point-to-point message of count elements to or from peer.
  // Consecutive point-to-point operations are in flight together, so a rank
  // may post a send and a receive to the same peer before waiting for either.
  int32_t PostP2P(bool is_send, uint32_t peer, void* data, uint64_t count, plexus_dtype_t dtype,
                  plexus_request** req);

  // Called by a thread about to block in wait() on req: when req is next in
  // line and nothing is running, runs it on the calling thread instead of
  // handing it to the worker thread and back. Returns at once otherwise.
  // Only operations of at most kInlineMaxBytes (count x element size).
  void RunInlineIfNext(plexus_request* req);
  static constexpr uint64_t kInlineMaxBytes = 128 << 10;

  void Abort();  // any thread, any time; idempotent
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
  // Runs op (popped from the queue with running_ set), completes it and
  // clears running_.
  void Execute(PendingOp op);
  void ExecuteCollective(PendingOp op);  // Execute's half for collectives
  // Runs the point-to-point operations at the head of the queue, taking in
  // more as they are posted, until none is left in flight.
  algos::Status RunP2P(PendingOp first);
  void RecordFailure(const algos::OpSignature& sig, const algos::Status& st);
  static void Complete(plexus_request* req, int32_t status, const std::string& error = {});

  const plexus_host_v1& host_;
  const uint32_t rank_;
  const uint32_t size_;
  const int64_t timeout_ms_;
  const std::string name_;
  std::unique_ptr<UcxTransport> transport_;

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

}  // namespace plexus::ucx
