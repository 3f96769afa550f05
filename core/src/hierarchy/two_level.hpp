// detail::TwoLevel — a communicator's collectives in two levels: inside each
// host on one backend (PLEXUS_LOCAL_BACKEND, default the job's), across
// hosts on the job's backend. Backend-agnostic: it is made of groups of the
// communicator and posts ordinary collectives on them.
//
// Reduce: as allreduce, but part 2 reduces each chunk to the root's host and
// only that host gathers (in the order allreduce takes).
//
// Broadcast: across hosts in the cross-host group that holds the root, then
// inside each host from the rank of that group (no reduction, so no order).
//
// Reduce_scatter and allgather: on a host of L ranks, each rank's block is
// cut into P / L sub-pieces, and chunk c of the host is sub-piece c / L of
// the block of its (c mod L)-th rank, the rank that owns chunk c (as in
// allreduce). Chunks are packed chunk by chunk, host by host, each padded
// to the largest host's sub-piece size. Reduce_scatter: reduce-scatter
// inside the host, in rounds of L chunks (each rank gets, for each chunk it
// owns, that chunk of every host summed over its own host), then
// reduce-scatter across hosts in each chunk's group (each owner gets its
// own sub-piece, summed over the hosts: the order of allreduce). Allgather,
// the mirror: allgather of each owned sub-piece across hosts, then
// allgather inside the host, round by round, then each block copied to its
// place. Both cut a large operation into pieces (a range of every block)
// and pipeline them, as allreduce does.
//
// Allreduce of count elements, with P chunks (HostLayout::chunks, the lcm of
// the hosts' rank counts) of B = ceil(count / P) elements, on a host of L
// ranks where this rank is the j-th:
//
//   1. reduce-scatter inside the host, in P / L rounds: round k covers
//      chunks kL .. kL+L-1 (contiguous), and this rank gets chunk kL + j
//      summed over its host;
//   2. allreduce of each owned chunk c across hosts, on the cross-host group
//      of chunk c (on every host, the rank that owns c), all rounds posted
//      at once: every rank of a host drives its own chunks, so all of a
//      host's links and cores work;
//   3. allgather inside the host, per round, in place.
//
// A round that runs past count is done in a scratch buffer padded to L * B
// (the padding's results are dropped). AVG sums in both levels and the
// chunk's owner divides by the communicator's size before the allgather.
//
// A large allreduce is cut into pieces (about 4 MiB each, at most 4), each
// done as above, as a pipeline: while one piece goes across hosts, the next
// is reduce-scattered and the one before gathered.
//
// The reduction order, the same on every rank: each element is the
// cross-host allreduce (the job backend's order over hosts, hosts in the
// order of their lowest rank) of the per-host sums (the local backend's
// reduce-scatter order over the host's ranks). Every rank of a host copies
// its chunks from their one owner, and the owners of a chunk get the same
// bits from their allreduce, so every rank ends with the same bits.
//
// Operations run in the order posted on one thread of the communicator's
// own; a failure breaks it (later operations fail at once, naming the
// first failure). Thread safety: Post* from the communicator's posting
// thread(s), Abort from any thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hierarchy/host_layout.hpp"
#include "host_op.hpp"
#include "plexus/communicator.hpp"
#include "plexus/abi/call.hpp"

namespace plexus::detail {

struct CommState;

class TwoLevel {
 public:
  // Every rank's layout entry (see MakeTwoLevel).
  static Status ExchangeLayout(Communicator& flat, const LayoutEntry& mine,
                               std::vector<LayoutEntry>* all);

  // Makes the host's group (on local_backend, "" for flat's own) and the
  // cross-host groups over flat. Collective over every rank of flat, which
  // must have taken the same layout. BLOCKS up to flat's timeout.
  static Status Make(Communicator& flat, const HostLayout& layout, const std::string& local_backend,
                     std::unique_ptr<TwoLevel>* out);
  // Runs the operations still queued (each bounded by the timeout), then
  // stops the thread.
  ~TwoLevel();

  // Whether coll of this many bytes (its largest buffer) goes in two levels.
  bool Takes(plexus_collective_t coll, uint64_t bytes) const;

  // Queues call, an allreduce, reduce, broadcast, reduce_scatter or
  // allgather of host memory that the caller checked as the backend would
  // have (the groups check it again, too late to tell the caller). Its
  // buffers are BORROWED until the returned op completes, when every part
  // has. posted: the collective as the communicator counted it (a failure is
  // reported against it, naming the rank at fault). earlier: a request of
  // the communicator's backend that completes once every operation posted
  // there before call has, or null; taken over: the op completes after it.
  std::shared_ptr<HostOp> Post(const abi::Call& call, const PostedOp& posted,
                               plexus_request* earlier);

  // Aborts the groups; operations queued or running fail with ABORTED.
  void Abort();

  // "two-level over 3 hosts with 2, 2, 2 ranks (local ucx, cross-host tcp)".
  const std::string& description() const { return description_; }

 private:
  struct Op;
  struct Piece;
  struct Blocks;
  // A posted part of an operation, and what to call it in an error.
  struct Part {
    Work work;
    const char* part;
    std::string where;
  };
  TwoLevel() = default;
  void Run();
  // Waits for (up to the timeout) and frees the request Post took.
  void AwaitEarlier(plexus_request* earlier);
  // Cuts a into pieces (scratch for the last one's tail, copied in).
  void Plan(const Op& a, std::vector<Piece>* pieces) const;
  void RunAllreduce(const Op& a);
  void RunBroadcast(const Op& a);
  // Where chunk c of host g lies in piece p (see RunReduceScatter).
  void ChunkOf(const Blocks& p, uint32_t g, uint64_t c, uint32_t* rank, uint64_t* offset,
               uint64_t* valid) const;
  // fn(c, g, rank, offset, valid) for every chunk c of every host g of p.
  void ForEachChunk(
      const Blocks& p,
      const std::function<void(uint64_t, uint32_t, uint32_t, uint64_t, uint64_t)>& fn) const;
  void CutBlocks(const Op& a, std::vector<Blocks>* pieces) const;
  void RunReduceScatter(const Op& a);
  void RunAllgather(const Op& a);
  // The groups, as an error names them.
  std::string HostGroup() const;
  std::string CrossGroup(size_t k) const;  // the group of this rank's k-th chunk
  // Completes a's op at once if an earlier one broke the communicator.
  bool Broken(const Op& a);
  // Steps 0..steps-1: post(t) posts step t's parts, which are waited for,
  // then after(t) runs. A failure completes a's op with the verdict.
  void RunSteps(const Op& a, size_t steps,
                const std::function<void(size_t, std::vector<Part>&)>& post,
                const std::function<void(size_t)>& after);
  // Waits for parts in order (*part and *where name the one waited for),
  // looking every kPoll for a failure of this operation on a rank of its
  // groups (failed_key_); then aborts the groups here and throws PeerFailed.
  // Throws a part's own error.
  void WaitParts(std::vector<Part>& parts, const char** part, std::string* where);
  // After a failure: aborts the groups and waits for the parts still running.
  void Drain(std::vector<Part>& parts);
  struct PeerFailed {};
  // Tells the other ranks this one failed in a two-level operation.
  void SayFailed();
  // Completes a's op with code and a message that says where it failed.
  void Fail(const Op& a, int32_t code, const char* part, const std::string& where,
            const std::string& what, const std::string& verdict);
  bool FailedElsewhere();
  void AbortGroups();

  // The communicator this serves (which owns this object): its size, and
  // its stall reports, which name the rank at fault across both levels.
  CommState* flat_ = nullptr;
  HostLayout layout_;
  std::optional<Communicator> local_;  // none on a host of one rank
  // The cross-host groups of this rank's chunks, round by round.
  std::vector<Communicator> cross_;
  std::string description_;
  std::chrono::milliseconds timeout_{0};
  // "<communicator>/two-level/failed", under each rank's own store keys
  // (which only that rank may write, so no other process can stop the job
  // this way): set by a rank once a two-level operation failed or stopped
  // there. A rank waiting in one part for a rank of its group that failed
  // in another part would otherwise wait until that rank exits (and its
  // verdict come too late to tell the rank at fault from the slow ones).
  std::string failed_key_;
  // The job ranks of this rank's groups (but itself), whose marks it watches.
  std::vector<uint32_t> watched_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  int32_t broken_code_ = 0;  // first failure: later operations fail at once
  std::string broken_message_;
  std::thread worker_;
};

// What the two-level scheme needs from a communicator, in order: whether it
// is on (PLEXUS_HIERARCHY, checked alike on every rank) and for which
// layout; then, when it pays, the groups. Collective over every rank of
// flat. *out stays null for a flat communicator; the choice is logged at
// INFO with its reason.
Status MakeTwoLevel(Communicator& flat, const std::string& local_address,
                    uint32_t launch_local_rank, uint32_t launch_local_size,
                    std::unique_ptr<TwoLevel>* out);

}  // namespace plexus::detail
