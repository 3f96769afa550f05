// MpiTransport: the mpi backend's PeerTransport, over one MPI communicator
// of its own. plexus-algos runs every collective through Exchange() (MPI_Isend
// and MPI_Irecv of the step's messages, then MPI_Test until all completed);
// the ABI's send and recv go through PostMessage() and Drive(), so several
// can be in flight. The kit's OpQueue decides what runs when, as for every
// backend over a QueueTransport.
//
// Tags. A collective's message carries a 14-bit hash of its operation's
// signature (collective, dtype, op, count, root) and, below 65535 bytes, its
// exact length: ranks in different operations never match each other's
// messages, and a message of another length never matches a plain receive,
// so MPI cannot write past a buffer (Open MPI 4.1 writes a longer message
// past the end of a plain MPI_Irecv). Longer messages, and every message of
// the ABI's send/recv, are matched first (MPI_Improbe) and received only when
// their length is right (MPI_Imrecv); one of another length is received into
// a buffer of its own and fails the operation with REMOTE naming both sizes.
// Messages above the most elements one MPI call takes go in pieces.
//
// Threads: only the thread running the communicator's current operation
// calls in, except Wake() and Abort(), which only write atomics. MPI calls
// take the context's MpiLock (serialised when MPI granted less than
// MPI_THREAD_MULTIPLE).
//
// Waiting: MPI moves data only inside MPI calls, so while an operation could
// be moving data (spin_us plus its bytes at 0.25 GB/s since the last
// progress) Drive() tests back to back, yielding the CPU after the first
// 10 us; then it sleeps from 20 us up to 250 us between tests. A waiting
// operation that makes no progress for timeout_ms fails with TIMEOUT naming
// the ranks it waits for (REMOTE naming both operations when a peer sent
// something else in its place); either way it sends every peer a report of
// its operation and why, so that a peer still waiting fails at once, and a
// peer in another operation can name both.
//
// MPI cannot cancel a send or a collective: after a failure or an abort
// what MPI still holds goes to the context (plexus_backend_ctx::Abandon),
// which keeps it until it completes.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpi_context.hpp"
#include "plexus/algos/transport.hpp"
#include "plexus/kit/queue_transport.hpp"

namespace plexus::mpi {

using Clock = std::chrono::steady_clock;

// One message to send or receive, possibly in several MPI pieces. Owned by
// whoever posted it; it stays alive until complete or Cancel() has returned.
struct Transfer final : kit::Message {
  Transfer() = default;
  Transfer(bool send, uint32_t to_or_from, const algos::OpSignature& s, void* buf, size_t n) {
    is_send = send;
    peer = to_or_from;
    sig = s;
    data = static_cast<uint8_t*>(buf);
    bytes = n;
  }
  // Kept by the transport. A message longer than one MPI call takes goes in
  // pieces of piece_bytes (the last one shorter), all posted at once (sends
  // and plain receives) or matched in order (probed receives).
  uint64_t piece_bytes = 0;
  uint32_t pieces = 1;
  uint32_t matched = 0;  // probed receives: pieces matched so far
  bool probed = false;   // received through MPI_Improbe + MPI_Imrecv
  MPI_Request request = MPI_REQUEST_NULL;  // the only piece's
  std::vector<MPI_Request> more;           // with several pieces: every piece's
  uint64_t ticket = 0;                     // Start's batch

  uint64_t PieceBytes(uint32_t k) const {
    return std::min<uint64_t>(piece_bytes, bytes - uint64_t(k) * piece_bytes);
  }
  MPI_Request& RequestOf(uint32_t k) { return pieces == 1 ? request : more[k]; }
};

class MpiTransport final : public kit::QueueTransport {
 public:
  // Takes ownership of comm (an MPI communicator of this communicator's
  // ranks alone, with MPI_ERRORS_RETURN); ctx outlives it.
  MpiTransport(plexus_backend_ctx& ctx, MPI_Comm comm, uint32_t rank, uint32_t size,
               int64_t timeout_ms, int64_t spin_us, std::string name);
  // Cancels what is in flight and releases the MPI communicator (at once, or
  // once what MPI still holds on it has finished). Bounded.
  ~MpiTransport() override;

  uint32_t rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  algos::Status Exchange(const algos::OpSignature& sig, std::span<const algos::SendSpec> sends,
                         std::span<const algos::RecvSpec> recvs) override;
  // Pipelining (algos::PeerTransport): Start posts a batch and returns;
  // Finish drives until that batch and every one before it completed, so an
  // algorithm reduces one segment while the next is in flight.
  algos::Status Start(const algos::OpSignature& sig, std::span<const algos::SendSpec> sends,
                      std::span<const algos::RecvSpec> recvs, uint64_t* ticket) override;
  algos::Status Finish(uint64_t ticket) override;
  // MPI moves a long message itself (rendezvous, one copy on one host): a
  // step that receives straight into the caller's buffer sends whole blocks.
  uint64_t DirectMessageBytes() const override { return uint64_t(1) << 30; }
  // Likewise for steps that reduce what they receive: while one segment is
  // reduced, MPI moves nothing (no MPI call runs), so segments only add
  // messages; up to 16 MiB a block is one message.
  uint64_t ReduceMessageBytes() const override { return uint64_t(16) << 20; }

  // kit::QueueTransport (queue_transport.hpp says what each does):
  std::unique_ptr<kit::Message> NewMessage() override { return std::make_unique<Transfer>(); }
  algos::Status PostMessage(kit::Message* m) override {
    return Post(static_cast<Transfer*>(m));  // made by NewMessage
  }
  algos::Status Drive(const std::function<bool()>& done) override;
  void StartClock() override { last_progress_ = Clock::now(); }
  void Cancel() override;
  void Fail(const algos::OpSignature& sig, const algos::Status& why) override;
  void Wake() override { woken_.store(true); }
  void Abort() override { aborted_.store(true); }

  // A collective of MPI's own (start posts it on the communicator: one
  // MPI_I* call, returning its MPI status), waited for under the same rules
  // (timeout, abort). A request left in MPI goes to the context. call names
  // it in messages ("MPI_Iallreduce").
  algos::Status RunNative(const algos::OpSignature& sig, const char* call,
                          const std::function<int(MPI_Comm, MPI_Request*)>& start);

  MPI_Comm comm() const { return comm_; }

 private:
  algos::Status Post(Transfer* t);
  int TagOf(const algos::OpSignature& sig, uint64_t piece) const;
  // Matches t's next pieces as far as their messages have arrived. MPI lock held.
  algos::Status Match(Transfer* t);
  // Matches probing receives and tests every piece in flight; completes
  // the transfers whose last piece arrived.
  algos::Status Reap(bool* moved);
  algos::Status MpiFailure(const char* call, int rc, const Transfer& t) const;
  // A peer's failure report, if one arrived: true and *st says what it
  // means. With defer_timeouts a peer's TIMEOUT that is not about this rank
  // is noted but does not end the wait.
  bool TakeReport(algos::Status* st, bool defer_timeouts);
  void PostControlRecv();
  algos::Status Diagnose(int64_t idle_ms);
  algos::Status Linger(algos::Status mine);
  algos::OpSignature WaitingFor() const;
  // Receives (and drops) every message that has arrived unasked for.
  void DrainUnexpected();
  // Validates an algorithm's batch and appends its transfers (receives
  // first: a message that finds its receive posted lands in place) to to.
  template <class Batch>
  algos::Status AddBatch(const algos::OpSignature& sig, std::span<const algos::SendSpec> sends,
                         std::span<const algos::RecvSpec> recvs, Batch& to);
  // Tests reqs (nulls skipped) until all complete or ms passed; returns how
  // many are still pending.
  size_t WaitRequests(std::vector<MPI_Request>& reqs, int64_t ms);

  plexus_backend_ctx& ctx_;
  MPI_Comm comm_;
  const uint32_t rank_, size_;
  const int64_t timeout_ms_;
  const int64_t spin_us_;
  const std::string name_;
  const bool wide_tags_;      // MPI_TAG_UB leaves room for the signature and length
  const uint64_t max_piece_;  // the most bytes of one MPI message

  std::vector<Transfer> batch_;       // Exchange's transfers, reused
  std::deque<Transfer> started_;      // Start's transfers, oldest first (stable addresses)
  uint64_t next_ticket_ = 1;
  algos::OpSignature started_sig_;    // the operation of the started batches
  std::vector<Transfer*> active_;     // transfers in flight, in posting order
  uint64_t active_bytes_ = 0;         // their total, for the spin
  const algos::OpSignature* current_ = nullptr;  // the collective in Exchange, if any
  Clock::time_point last_progress_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> woken_{false};
  bool failed_once_ = false;  // Fail() ran

  std::unique_ptr<uint8_t[]> control_buf_;  // the failure reports' receive (kit/failure_report.hpp)
  MPI_Request control_req_ = MPI_REQUEST_NULL;
};

}  // namespace plexus::mpi
