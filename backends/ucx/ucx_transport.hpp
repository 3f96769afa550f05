// UcxTransport: this backend's PeerTransport, one ucp_worker per communicator
// and one UCP endpoint per peer.
//
// plexus-algos runs every collective through Exchange(): post the step's
// receives (ucp_tag_recv_nbx) and sends (ucp_tag_send_nbx), then drive the
// worker until all of them have completed. The ABI's send/recv use Post()
// and Drive(), so several can be in flight while the worker takes in more.
// Tags (ucx_tag.hpp) keep operations, sources and communicators apart.
//
// Threads: after Connect() (which runs on the thread inside comm_create)
// only the thread running the communicator's current operation (its worker
// thread or a caller running it inline, handed over under the OpQueue's mutex)
// calls into this object, except Wake() and Abort(), which only write an
// eventfd and atomics. So the ucp_worker runs in UCS_THREAD_MODE_SERIALIZED:
// one thread at a time.
//
// Waiting: Drive() calls ucp_worker_progress() back to back for spin_us
// after the last event (yielding the CPU between tries after the first
// 10 us), then arms the worker (ucp_worker_arm) and sleeps in epoll_wait on
// the worker's event fd and the wake eventfd. A waiting operation spins at
// most spin_us at a time; an idle communicator does not touch the worker.
//
// Failures: a peer's endpoint error (UCP_ERR_HANDLING_MODE_PEER) marks that
// rank failed; a transfer with it then fails with PLEXUS_ERR_REMOTE naming
// it. When an operation makes no progress for timeout_ms the transport
// probes for messages of the same operation whose signature differs (a
// mismatch: REMOTE naming both sides), otherwise it is a TIMEOUT naming the
// ranks it waits for. Either way it sends every peer a control message with
// its operation and reason (as the TCP backend's FAIL frame), so that a peer
// still waiting fails at once naming this rank, and a peer in a different
// operation can say what each side posted. Before a failed operation
// completes, its receives are cancelled (ucp_request_cancel) and waited for,
// so UCX writes no buffer of a failed or aborted request afterwards.
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plexus/algos/transport.hpp"
#include "plexus/backend.h"
#include "plexus/kit/local_process.hpp"
#include "plexus/kit/queue_transport.hpp"

namespace plexus::ucx {

using Clock = std::chrono::steady_clock;
using kit::ProcessEnded;
using kit::ProcessId;
using kit::SameHost;
using kit::ThisProcess;

// One message to send or receive (sig: the operation it belongs to). Owned
// by whoever posted it; it must stay alive until it is complete or Cancel()
// has returned.
struct Transfer final : kit::Message {
  Transfer() = default;
  Transfer(bool send, uint32_t to_or_from, const algos::OpSignature& s, void* buf, size_t n) {
    is_send = send;
    peer = to_or_from;
    sig = s;
    data = static_cast<uint8_t*>(buf);
    bytes = n;
  }
  // Kept by the transport.
  uint64_t tag = 0;
  uint64_t probe_mask = 0;  // tag bits that say "same operation, same source"
  void* request = nullptr;  // the UCX request while in flight
  ucp_tag_recv_info_t info{};
};

// PLEXUS_UCX_ERR_MODE: which endpoints ask UCX to report a peer's failure.
//   kAuto: peers on other hosts (peers on this host are watched via /proc)
//   kPeer: every peer (in UCX 1.13 that puts peers on this host on tcp)
//   kNone: none (a dead remote peer is found by the operation timeout)
enum class ErrMode { kAuto, kPeer, kNone };

// The collective code of comm_create's hellos, in messages and DescribeOp.
constexpr plexus_collective_t kHelloColl = 0xff;

// UCX_MM_FIFO_SIZE as UCX reads it from the environment, else UCX's default.
uint32_t MmFifoSize();

// algos::DescribeOp, and comm_create's hellos: "allreduce(seq 3, count 10,
// float32, sum)", "the hello of comm_create", for error messages.
std::string DescribeOperation(const algos::OpSignature& sig);

class UcxTransport final : public kit::QueueTransport {
 public:
  // Does not take ownership of host, context or no_peer_errors, which
  // outlive it. *no_peer_errors: the context has been found to have no
  // transport for UCP_ERR_HANDLING_MODE_PEER (shared from one communicator
  // to the next, so that UCX reports that once, not per communicator).
  UcxTransport(const plexus_host_v1& host, ucp_context_h context, std::atomic<bool>* no_peer_errors,
               uint32_t rank, uint32_t size, int64_t timeout_ms, int64_t spin_us, std::string name);
  // Closes the endpoints without talking to peers (UCP_EP_CLOSE_FLAG_FORCE)
  // and destroys the worker. Bounded. Only after the worker thread stopped.
  ~UcxTransport() override;

  // Creates the worker, exchanges worker addresses through the host's
  // out-of-band allgather, creates an endpoint to every peer and exchanges a
  // hello with each (which wires the endpoints up and proves every peer is
  // reachable). BLOCKS up to config.timeout_ms. Only inside comm_create
  // (ucx_connect.cpp).
  algos::Status Connect(const plexus_comm_config_v1& config, ErrMode err_mode);

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  algos::Status Exchange(const algos::OpSignature& sig, std::span<const algos::SendSpec> sends,
                         std::span<const algos::RecvSpec> recvs) override;

  // kit::QueueTransport (queue_transport.hpp says what each does):
  std::unique_ptr<kit::Message> NewMessage() override { return std::make_unique<Transfer>(); }
  // Starts a send or receive of a send/recv operation. An error posts nothing.
  algos::Status PostMessage(kit::Message* m) override {
    return Post(static_cast<Transfer*>(m));  // made by NewMessage
  }
  // Progresses the worker until done() is true or Wake() was called (both
  // OK), or fails: TIMEOUT after timeout_ms without a transfer completing,
  // REMOTE when a peer failed or disagrees, ABORTED after Abort(). After a
  // failure call Cancel() before the transfers' owners go away.
  algos::Status Drive(const std::function<bool()>& done) override;
  // Restarts the no-progress clock (a send/recv batch begins).
  void StartClock() override {
    last_progress_ = Clock::now();
    restart_clock_ = false;
  }
  // Cancels every transfer still in flight and waits (bounded) until UCX has
  // let go of their buffers. Idempotent.
  void Cancel() override;

  void Wake() override;   // any thread: a running Drive() returns so its caller can post more
  void Abort() override;  // any thread: a running or later Drive() returns ABORTED; idempotent
  // Tells every reachable peer, once and best effort (bounded), that this
  // rank failed in sig and why. Not after an abort: abort is local.
  void Fail(const algos::OpSignature& sig, const algos::Status& why) override;

  // The transports UCX picked to reach the peers ("posix/memory cma/memory"),
  // known after Connect.
  const std::string& transports() const { return transports_; }
  // What Connect did to warm the shared-memory transport ("" if nothing).
  const std::string& warm_up() const { return warm_up_; }
  // algos::PeerTransport::DirectMessageBytes: 0 (segments) unless set
  // before the first operation (every peer on this host: whole blocks).
  void set_direct_message_bytes(uint64_t bytes) { direct_message_bytes_ = bytes; }
  uint64_t DirectMessageBytes() const override { return direct_message_bytes_; }

 private:
  struct PeerSlot {  // the argument of the endpoint error callback
    UcxTransport* self = nullptr;
    uint32_t rank = 0;
    ucs_status_t status = UCS_OK;  // the endpoint's error; written during progress
    bool ended = false;            // its process on this host has exited (/proc)
  };
  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status);
  // Connect's exchanges: rounds messages of bytes sent to every rank in
  // peers and as many received from each, with hello tags numbered from
  // first_seq, driven to completion (hellos: one round of 0 bytes).
  //
  // The second use warms the shared-memory transport. UCX's sysv/posix
  // transport hands a message above its inline size (UCX_MM_FIFO_ELEM_SIZE)
  // through a FIFO of UCX_MM_FIFO_SIZE elements (64), each with its own receive
  // segment in shared memory; the first pass over each element page-faults in
  // both processes, so a communicator's first UCX_MM_FIFO_SIZE operations
  // through the FIFO are slower than the rest (see docs/benchmarks.md). So
  // Connect sends each peer on shared memory one FIFO's worth of kWarmBytes
  // messages (fewer each with many peers) before the communicator is handed
  // out.
  algos::Status Handshake(const std::vector<uint32_t>& peers, uint32_t first_seq, uint32_t rounds,
                          size_t bytes);
  static constexpr size_t kWarmBytes = 8192;
  algos::Status Post(Transfer* t);

  algos::Status PostSend(uint32_t peer, const void* data, size_t bytes, uint64_t tag,
                         void** request);
  algos::Status PostRecv(void* data, size_t bytes, uint64_t tag, uint64_t mask, void** request,
                         ucp_tag_recv_info_t* info);
  // Checks every transfer in flight; completes the ones UCX has finished.
  algos::Status Reap(bool* moved);
  algos::Status CheckTransfer(const Transfer& t, ucs_status_t status) const;
  // Arms the worker and sleeps until an event, a wake-up or until ms passed.
  algos::Status Sleep(int64_t ms);
  // A control message from a peer, if one arrived: true and *st says what it
  // means for the current operation. Reposts the receive. With
  // defer_timeouts, a peer's TIMEOUT is noted but does not end the wait.
  bool TakeReport(algos::Status* st, bool defer_timeouts);
  void PostControlRecv();
  // A waiting receive's peer sent a message of another operation in its
  // place (same sequence number, other signature): REMOTE saying so, else OK.
  algos::Status ProbeMismatch();
  // At the operation timeout: a mismatch found by probing, else TIMEOUT.
  algos::Status Diagnose(int64_t idle_ms);
  // The operation Drive() waits for: the collective, or the oldest transfer's.
  algos::OpSignature WaitingFor() const;
  // After our own failure: waits briefly for a report of the peers we wait for.
  algos::Status Linger(algos::Status mine);
  // Waits until every request in reqs (nulls skipped) completed, up to ms;
  // returns how many are still pending.
  size_t WaitRequests(const std::vector<void*>& reqs, int64_t ms);
  void CloseEndpoint(uint32_t peer);
  void DrainUnexpected();  // at destruction: receives what nobody asked for
  std::string PeerError(uint32_t peer) const;
  // While an operation has waited a while: marks a watched peer (on this
  // host, no UCX error handling) whose process has exited as failed, so that
  // Reap fails the transfers with it.
  void CheckLocalPeers();

  const plexus_host_v1& host_;
  ucp_context_h context_;
  std::atomic<bool>* no_peer_errors_;
  const uint32_t rank_, size_;
  const int64_t timeout_ms_;
  const std::chrono::microseconds spin_;  // Drive's busy-poll before sleeping
  std::vector<Transfer> batch_;           // Exchange's transfers, reused
  const std::string name_;
  uint32_t comm_id_ = 0;

  ucp_worker_h worker_ = nullptr;
  int worker_fd_ = -1, wake_fd_ = -1, epoll_fd_ = -1;
  std::vector<ucp_ep_h> eps_;          // by rank; null for this rank and closed ones
  std::vector<void*> closing_;         // close requests of endpoints closed early
  std::unique_ptr<PeerSlot[]> slots_;  // by rank; stable addresses for UCX
  std::vector<Transfer*> active_;      // transfers in flight
  std::vector<ProcessId> peers_;       // by rank, from Connect
  std::vector<bool> watch_;            // by rank: on this host without UCX error handling
  Clock::time_point next_liveness_check_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> woken_{false};               // Wake() was called; a spinning Drive returns
  bool failed_once_ = false;                     // Fail() ran
  const algos::OpSignature* current_ = nullptr;  // the collective in Exchange, if any
  Clock::time_point last_progress_;
  bool restart_clock_ = false;  // Exchange began: the next clock read restarts last_progress_

  std::vector<uint8_t> control_buf_;  // the failure reports' receive (kit/failure_report.hpp)
  void* control_req_ = nullptr;
  ucp_tag_recv_info_t control_info_{};
  std::vector<uint8_t> drain_buf_;
  std::string transports_;
  std::string warm_up_;
  uint64_t direct_message_bytes_ = 0;
};

inline void Log(const plexus_host_v1& host, int32_t level, const std::string& message) {
  if (host.log) host.log(host.ctx, level, message.c_str());
}

}  // namespace plexus::ucx
