// One communicator: the transport, a queue of posted operations and one worker
// thread that runs them in posting order.
//
// The ABI's collectives only post; something has to move bytes while the
// application computes, and every rank must put the same operations on the
// wire in the same order. One thread per communicator, running one operation
// at a time from a FIFO, is the simplest design that gives both. The one
// exception: consecutive send/recv operations run together, so a rank can
// post a send and a recv to the same peer and then wait for both.
//
// Requests carry their own mutex and condition variable, so test() is a locked
// read that never blocks and wait() sleeps until the worker completes the
// request. After the first failure the communicator is BROKEN (the ABI's
// "After a failure"): whatever is queued fails with that error and later posts
// are refused, because the peers can no longer be assumed to be in step.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "uds_transport.hpp"

// The ABI's opaque request type, defined by this backend.
struct plexus_request {
  std::mutex mutex;
  std::condition_variable done;
  int32_t status = PLEXUS_IN_PROGRESS;  // guarded by mutex
  std::string error;                    // guarded by mutex; why status < 0
  int64_t default_wait_ms = 0;          // wait(req, negative) waits this long
};

namespace uds {

// The work of one collective, run on the worker with the transport and the
// operation's signature (seq filled in).
using OpBody = std::function<Status(plexus::algos::PeerTransport&, const OpSignature&)>;

class UdsComm {
 public:
  UdsComm(const plexus_host_v1& host, const plexus_comm_config_v1& config,
          std::unique_ptr<UdsTransport> transport);
  ~UdsComm();  // aborts what is left and joins the worker: bounded

  uint32_t rank() const { return rank_; }
  uint32_t size() const { return transport_->size(); }

  // Queues an operation; on success *req is a new request owned by the
  // caller. A collective brings its body; a send/recv (sig.coll SEND or RECV,
  // sig.root the peer) brings its buffer in p2p_buf instead. Any thread.
  int32_t Post(OpSignature sig, OpBody body, void* p2p_buf, plexus_request** req);

  void Abort();  // any thread, any time; idempotent
  // Records message as the last error and returns code (for refused posts).
  int32_t Reject(int32_t code, const std::string& message);
  size_t LastError(char* buf, size_t len);

 private:
  struct Op {
    OpSignature sig;
    OpBody body;  // empty for send/recv, which use transfer instead
    plexus_request* req = nullptr;
    Transfer transfer;
  };
  void WorkerLoop();
  Status RunP2P(Op first);
  void RecordFailure(const Status& st);

  const plexus_host_v1& host_;
  const uint32_t rank_;
  const int64_t timeout_ms_;
  const std::string name_;
  std::unique_ptr<UdsTransport> transport_;

  std::mutex mutex_;  // guards everything below
  std::condition_variable queue_cv_;
  std::deque<Op> queue_;
  uint64_t next_seq_ = 0;                          // collectives, same on every rank
  std::vector<uint64_t> sent_to_, received_from_;  // send/recv, per peer
  bool stopping_ = false;
  Status broken_;  // the first failure; OK while healthy
  std::string last_error_;
  std::thread worker_;
};

// Copies s into buf (len bytes, NUL-terminated, truncated if need be).
void CopyOut(const std::string& s, char* buf, size_t len);

}  // namespace uds
