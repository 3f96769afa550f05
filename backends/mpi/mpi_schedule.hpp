// Allreduce on host memory as the backend's own schedule of MPI point-to-point
// messages (MPI_Isend/MPI_Irecv plus local reductions), instead of
// MPI_Iallreduce.
//
// Why not MPI_Iallreduce: Open MPI's non-blocking collectives (coll/libnbc) are
// much slower than its blocking ones (coll/tuned): a multiple of
// MPI_Allreduce's latency for small vectors (docs/benchmarks.md), and for fewer
// than 4 ranks always a binomial reduce+broadcast, which in place also copies
// the whole vector into a freshly malloc'ed buffer per call. Calling the
// blocking MPI_Allreduce instead (say, inline in wait) is not an option: the
// ABI's operations are non-blocking, wait() must honour its timeout and
// comm_abort(), and the MPI standard says non-blocking collectives do not match
// blocking ones, so a rank that chose the blocking call while another chose
// MPI_Iallreduce (the choice would depend on when each rank calls test/wait)
// would hang. Point-to-point messages match whatever the peer used to post
// them, and the schedules below are of the kind MPI's tuned allreduce runs.
//
// Algorithms (chosen from count, element size and the number of ranks only,
// so that every rank picks the same; UseRing in mpi_schedule.cpp has the
// sizes and the reasons, docs/benchmarks.md the measurements;
// PLEXUS_MPI_ALLREDUCE forces one):
//   - recursive doubling (with a fold for non-powers of two) for small
//     vectors: ceil(log2 n) (+2) rounds of whole-vector exchanges;
//   - ring reduce-scatter + ring allgather for large ones: 2 (n - 1) rounds
//     of 1/n of the vector each.
// Local reductions are MPI_Reduce_local (inout = in (op) inout), so native
// types get Open MPI's vectorised kernels, the ones its own MPI_Allreduce uses
// (plexus-algos' portable loops are slower end to end at large sizes: see
// docs/benchmarks.md), and float16/bfloat16 the backend's user-defined ops.
// Ring: out of place the left neighbour's partial sums land in recvbuf and
// sendbuf is reduced into them; in place a scratch block takes them. Recursive
// doubling: both partners compute (lower rank's data) (op) (higher rank's) with
// the lower one as `in`, as tuned's recursive doubling does, so that they agree
// to the bit (min/max of -0 and +0, NaN payloads); the rank that is `inout`
// first copies sendbuf to recvbuf when out of place, and a result that ends in
// scratch is copied to recvbuf. A ring block is reduced once and then passed
// on, so all ranks end with identical bytes there too.
//
// Matching: each chunk of an allreduce gets its own tag (a per-communicator
// sequence, identical on every rank because every rank posts the same
// allreduces in the same order), different from the tag of the ABI's
// send/recv, and MPI never reorders messages of one tag between two ranks.
// So the steps of different operations never match each other, whatever
// order the ranks progress them in. A message of fewer than 2^count_bits
// elements also carries its count in the tag (see TagLayout in
// mpi_requests.hpp) and is received with a plain MPI_Irecv of exactly that
// count; longer ones go through the matched probe (Match). The sequence
// wraps around after TagLayout::slots schedules; a schedule starts only once
// the one slots before it has finished (plexus_comm::TakeSlot), so that
// wrapping never pairs messages of different operations.
//
// Progress: a later step can only be posted by the backend, so every test()
// and wait() of the process (on any request, any communicator) first advances
// every active schedule (plexus_backend_ctx::AdvanceSchedules), as libnbc
// does from inside MPI's progress loop. A rank waiting for one operation thus
// never starves another that a peer needs to finish first.
//
// Abort: the request completes with PLEXUS_ERR_ABORTED at once, but its
// schedule keeps running in the background (the context advances it from
// every test/wait and when reaping), as an aborted MPI_Iallreduce would
// inside MPI: cancelling its receives instead would leave a peer that joins
// late with sends nobody matches (MPI sends larger than the eager limit wait
// for the receiver), where the ABI lets it complete.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "mpi_tags.hpp"
#include "plexus/backend.h"

namespace plexus::mpi {

// Which allreduce the backend runs on host memory (PLEXUS_MPI_ALLREDUCE):
// its own choice by size, always one of its schedules, or MPI_Iallreduce.
enum class AllreduceAlgorithm { kAuto, kRing, kRecursiveDoubling, kMpi };

// One allreduce of at most INT_MAX elements (a chunk of an ABI allreduce).
class AllreduceSchedule {
 public:
  struct Args {
    const void* send = nullptr;  // == recv: in place
    void* recv = nullptr;
    uint64_t count = 0;
    plexus_dtype_t dtype = 0;
    plexus_reduce_op_t op = 0;
    MPI_Datatype type = MPI_DATATYPE_NULL;  // element type for the messages
    MPI_Op op_mpi = MPI_OP_NULL;            // op as an MPI op, for MPI_Reduce_local
    MPI_Comm comm = MPI_COMM_NULL;
    // Its messages' tags: slot and kind (mpi_tags.hpp) in tags' layout.
    TagLayout tags;
    uint64_t slot = 0;
    int kind = 0;
    uint32_t rank = 0;
    uint32_t size = 1;
    uint8_t* scratch = nullptr;  // ScratchBytes(...) bytes, when that is non-zero
    AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;  // not kMpi
    // Every rank on one host, over shared memory (the same on every rank):
    // moves the 2-rank ring's threshold down (UseRing).
    bool shared_memory = false;
  };

  // Bytes of scratch memory the schedule for these arguments needs.
  static uint64_t ScratchBytes(uint64_t count, plexus_dtype_t dtype, uint32_t size, bool in_place,
                               AllreduceAlgorithm algorithm, bool shared_memory);

  explicit AllreduceSchedule(const Args& args);

  // Posts the first step (or finishes at once: one rank, count 0). Returns
  // MPI_SUCCESS or the failing MPI call's code (*call names it); after a
  // failure the caller hands what is in flight over with TakeRequests().
  int Start(const char** call);
  // Tests the current step; when it is complete, reduces and posts the next
  // one, as far as it gets without blocking. Returns MPI_SUCCESS (done() says
  // whether it finished) or an MPI error code (*call names the failing call).
  int Advance(const char** call);
  bool done() const { return finished_; }
  // Start() has run (false while the schedule waits for its tag slot).
  bool started() const { return next_ > 0 || finished_; }
  // The element count the current step receives (0: none, or not started),
  // and the count field a message of count elements carries in its tag.
  uint64_t ExpectedCount() const;
  uint64_t CountField(uint64_t count) const { return a_.tags.CountField(count); }
  // Whether a message from peer with this count field and ring bit is one
  // this schedule still receives (the current step or a later one).
  bool ExpectsFrom(int peer, uint64_t count_field, bool ring) const;

  // Moves the MPI requests still in flight into *out, and the memory they
  // may still write into *keep, after a failure: the schedule is finished
  // (dead) afterwards. A plain receive still posted is cancelled first (its
  // peer may never send; a matched probe's receive is already matched). (An
  // aborted schedule is not taken apart but kept running to its end, see
  // Abandoned.) Call with the MPI lock.
  void TakeRequests(std::vector<MPI_Request>* out, std::vector<std::unique_ptr<uint8_t[]>>* keep);

  // Steps completed so far: the operation's progress, for its timeout.
  size_t steps_done() const { return finished_ ? steps_.size() : (next_ > 0 ? next_ - 1 : 0); }
  size_t step_count() const { return steps_.size(); }
  // The peer the current step waits for (a message from it, or the end of a
  // send to it), -1 when none; *receiving says which.
  int WaitingFor(bool* receiving) const;
  // After Advance failed: what went wrong, in words (may be empty).
  const std::string& error() const { return error_; }
  const char* algorithm_name() const;
  bool ring() const { return ring_; }
  plexus_reduce_op_t op() const { return a_.op; }

 private:
  // One round: at most one message each way, then at most one reduction.
  struct Step {
    int send_to = -1;  // rank, or -1 for no send
    const void* send_buf = nullptr;
    uint64_t send_count = 0;  // elements
    int recv_from = -1;       // rank, or -1 for no receive
    void* recv_buf = nullptr;
    uint64_t count = 0;  // elements received (and reduced)
    // After both messages, when inout is set: inout = in (op) inout over
    // count elements (MPI_Reduce_local).
    const void* in = nullptr;
    void* inout = nullptr;
  };

  // The steps, inline up to kInline (recursive doubling up to 16 ranks, the
  // ring up to 4): a small allreduce allocates nothing for them.
  class StepList {
   public:
    void push_back(const Step& s) {
      if (n_ < kInline && heap_.empty()) {
        std::memcpy(&inline_[n_ * sizeof(Step)], &s, sizeof s);
      } else {
        if (heap_.empty()) {
          heap_.resize(kInline);
          std::memcpy(heap_.data(), inline_, sizeof inline_);
        }
        heap_.push_back(s);
      }
      ++n_;
    }
    Step operator[](size_t i) const {
      if (!heap_.empty()) return heap_[i];
      Step s;
      std::memcpy(&s, &inline_[i * sizeof(Step)], sizeof s);
      return s;
    }
    size_t size() const { return n_; }
    bool empty() const { return n_ == 0; }

   private:
    static constexpr size_t kInline = 6;
    static_assert(std::is_trivially_copyable_v<Step>);
    alignas(Step) unsigned char inline_[kInline * sizeof(Step)];  // raw: nothing to initialise
    std::vector<Step> heap_;
    size_t n_ = 0;
  };

  void PlanRecursiveDoubling();
  void PlanRing();
  int Post(const Step& s, const char** call);

  // Matches the current step's message with MPI_Improbe and receives it
  // with MPI_Imrecv: into recv_buf when it has the expected size, otherwise
  // into a buffer of its own size (the step then fails, naming both counts).
  // Never a plain MPI_Irecv: Open MPI 4.1 writes a truncated message past
  // the end of the receive buffer (measured: vader and tcp BTLs, all 96
  // extra bytes of a 24-element overrun), so a peer with a larger count
  // would corrupt this rank's memory.
  int Match(const Step& s, const char** call);

  Args a_;
  size_t es_ = 0;
  bool ring_ = false;
  int TagOf(uint64_t count) const;      // the tag of a message of count elements
  bool matching_ = false;               // the current step's message is not matched yet
  bool plain_recv_ = false;             // reqs_[0] is a plain MPI_Irecv (exact count)
  std::unique_ptr<uint8_t[]> discard_;  // a mismatched message is received here
  std::string error_;
  StepList steps_;
  size_t next_ = 0;  // steps_[next_ - 1] is in flight once Start() ran
  bool finished_ = false;
  bool copy_in_ = false;                 // Start() copies sendbuf to recvbuf first
  const void* copy_out_from_ = nullptr;  // the result is here; copy it to recvbuf at the end
  MPI_Request reqs_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // [0] recv, [1] send
};

}  // namespace plexus::mpi
