// plexus::Communicator — a group of ranks and the backend that connects them.
//
//   auto comm = plexus::Communicator::from_env();   // backend from PLEXUS_BACKEND
//   std::vector<float> grad(n);
//   comm.allreduce(std::span(grad), plexus::ReduceOp::Sum).wait();
//
// from_env() is collective: every rank of the job calls it, in the same
// order as its other communicators. Every collective posts the operation and
// returns a plexus::Work at once; buffers must stay valid until the Work
// completes. Errors (bad arguments, an unsupported dtype, a dead peer, a
// timeout) are thrown as plexus::Error carrying the ABI status, the backend
// name and a message naming the operation.
//
// Thread safety: collectives may be posted from several threads if the
// backend's thread_level is PLEXUS_THREAD_MULTIPLE; every rank must post them
// in the same order. abort() may be called from any thread at any time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "plexus/backend.h"
#include "plexus/error.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/status.hpp"
#include "plexus/types.hpp"
#include "plexus/work.hpp"

namespace plexus {

struct CommunicatorOptions {
  // Backend name or path; empty = PLEXUS_BACKEND, or the best available.
  std::string backend;
  // Deadline for blocking work; zero = PLEXUS_TIMEOUT seconds (default 300).
  std::chrono::milliseconds timeout{0};
  // Device ordinal for GPU backends; -1 = the local rank.
  int device = -1;
  // Configuration keys given to the backend ahead of the environment.
  std::map<std::string, std::string> config;
};

struct Job;
namespace abi {
struct Call;
}
namespace detail {
struct CommState;
class TwoLevel;
}  // namespace detail

class Communicator {
 public:
  // Discovers rank and size from the launcher, joins the rendezvous, loads the
  // backend and creates the communicator. Throws plexus::Error.
  static Communicator from_env(const CommunicatorOptions& options = {});

  // Joins a communicator through a store the caller already has, instead of
  // the launcher's: PyTorch's c10d store under plexus_torch, or a program's
  // own. Collective over the `size` processes that call it with stores that
  // share their keys, each with its own rank; every key it writes begins
  // with "plexus/" (give each communicator a store of its own prefix, or
  // call it in the same order everywhere: calls on one store are numbered).
  // Where each rank runs is exchanged through the store; the job secret is
  // the environment's, or, with every rank on this host, one rank 0 makes
  // in a file only this user can read (so the store may be open to others).
  // Throws plexus::Error.
  static Communicator from_store(std::shared_ptr<RendezvousStore> store, uint32_t rank,
                                 uint32_t size, const CommunicatorOptions& options = {});

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  // Releases this handle. The backend communicator is destroyed once no Work
  // of it is left either; operations still running then are waited for (up
  // to the timeout) and, failing that, aborted.
  ~Communicator();

  uint32_t rank() const;
  uint32_t size() const;
  // This rank's place among the communicator's ranks on its host (its
  // ranks in order), and how many they are: for a group, its own members
  // on this host.
  uint32_t local_rank() const;
  uint32_t local_size() const;
  const std::string& backend_name() const;
  const std::string& backend_version() const;
  const std::string& backend_path() const;
  const plexus_capabilities& capabilities() const;
  std::chrono::milliseconds timeout() const;
  bool supports(plexus_collective_t coll) const;
  // How an allreduce of count elements of dtype in host memory goes: "flat"
  // (the backend's own algorithm) or "two-level" (PLEXUS_HIERARCHY: inside
  // each host, then across hosts). The same on every rank.
  const char* allreduce_scheme(uint64_t count, DType dtype) const;
  // The two-level layout, as rank 0 logs it ("two-level over 3 hosts with 2,
  // 2, 2 ranks (inside hosts ucx, across hosts tcp, 2 chunks)"), or "" when
  // every collective is flat.
  std::string hierarchy() const;

  // `bytes` (>= 1) of zero-filled host memory, 64-byte aligned, that this
  // communicator's collectives may run on without copying it: the backend's
  // shared buffers (ABI 1.3 mem_alloc; on one host an in-place allreduce of
  // a range at the same offset on every rank sums straight from every
  // rank's buffer, no copy in or out: DDP's buckets). COLLECTIVE: every
  // rank calls it with the same bytes, in the same order; it runs one
  // small allreduce so that every rank gets shared memory or every rank
  // ordinary memory (a backend without mem_alloc, ranks on several hosts,
  // PLEXUS_SHM=off, /dev/shm full: logged at INFO). Any collective takes
  // the memory as any other. It keeps this communicator's backend state
  // alive until released; release it with no collective on it pending.
  // Throws plexus::Error if the agreement fails (a broken communicator).
  std::shared_ptr<void> mem_alloc(uint64_t bytes);

  // Untyped forms: counts are elements of dtype. Host memory unless a
  // placement is given.
  Work allreduce(const void* send, void* recv, uint64_t count, DType dtype, ReduceOp op,
                 const plexus_placement* where = nullptr);
  Work broadcast(void* buf, uint64_t count, DType dtype, uint32_t root,
                 const plexus_placement* where = nullptr);
  Work reduce(const void* send, void* recv, uint64_t count, DType dtype, ReduceOp op, uint32_t root,
              const plexus_placement* where = nullptr);
  Work allgather(const void* send, void* recv, uint64_t count, DType dtype,
                 const plexus_placement* where = nullptr);
  Work reduce_scatter(const void* send, void* recv, uint64_t count, DType dtype, ReduceOp op,
                      const plexus_placement* where = nullptr);
  Work alltoall(const void* send, void* recv, uint64_t count, DType dtype,
                const plexus_placement* where = nullptr);
  Work send(const void* buf, uint64_t count, DType dtype, uint32_t peer,
            const plexus_placement* where = nullptr);
  Work recv(void* buf, uint64_t count, DType dtype, uint32_t peer,
            const plexus_placement* where = nullptr);
  Work barrier();

  // ABI 1.2 collectives. A backend built for 1.0 or 1.1 refuses them with
  // PLEXUS_ERR_UNSUPPORTED (supports() tells beforehand).
  //
  // gather: every rank's send (count elements) lands in root's recv (size() *
  // count) in rank order; recv of other ranks is not touched (may be NULL).
  // In place on root: send == recv + root * count.
  Work gather(const void* send, void* recv, uint64_t count, DType dtype, uint32_t root,
              const plexus_placement* where = nullptr);
  // scatter: block r (count elements) of root's send (size() * count) lands
  // in rank r's recv; send of other ranks is not read (may be NULL). In place
  // on root: recv == send + root * count.
  Work scatter(const void* send, void* recv, uint64_t count, DType dtype, uint32_t root,
               const plexus_placement* where = nullptr);
  // allgatherv: rank r's send (send_count == recv_counts[r] elements) lands
  // at recv + displs[r] on every rank. Both spans hold size() entries (in
  // elements); they are copied before the call returns. In place: send ==
  // recv + displs[rank()].
  Work allgatherv(const void* send, uint64_t send_count, void* recv,
                  std::span<const uint64_t> recv_counts, std::span<const uint64_t> displs,
                  DType dtype, const plexus_placement* where = nullptr);
  // alltoallv: send_counts[j] elements at send + send_displs[j] go to rank
  // j, landing at its recv + recv_displs[rank()]; rank j's recv_counts[i]
  // must equal rank i's send_counts[j]. Four spans of size() entries, copied
  // before the call returns. Not in place.
  Work alltoallv(const void* send, std::span<const uint64_t> send_counts,
                 std::span<const uint64_t> send_displs, void* recv,
                 std::span<const uint64_t> recv_counts, std::span<const uint64_t> recv_displs,
                 DType dtype, const plexus_placement* where = nullptr);
  // Several allreduces of one dtype and op in one post, which the backend
  // may fuse (c10d's allreduce_coalesced, a DDP bucket of views): recvs[i]
  // receives op over ranks of sends[i] (counts[i] elements). The spans are
  // copied before the call returns; the buffers follow the usual rules.
  Work allreduce_coalesced(std::span<const void* const> sends, std::span<void* const> recvs,
                           std::span<const uint64_t> counts, DType dtype, ReduceOp op,
                           const plexus_placement* where = nullptr);

  // Any collective of the list (plexus/abi/collectives.def), with the
  // arguments its C slot takes (backend.h): every method above is this with
  // its own; a collective added to the list is posted here (reduce_scatterv:
  // call.sendcounts, call.sdispls, call.count = this rank's block). Per-rank
  // arrays hold size() entries, copied before the call returns. Checked by
  // its traits (root or peer, byte size, the ranks' fingerprints) and by the
  // backend; posted in two levels where the scheme takes it.
  Work Post(const abi::Call& call);

  // Groups: communicators over a subset of this one's ranks. Both are
  // collective over EVERY rank of this communicator (like MPI_Comm_split
  // and torch.distributed.new_group), posted in the same order as its
  // collectives, and BLOCK until the group is made (up to timeout()).
  //
  // split: ranks that give the same color form one communicator, ranked by
  // (key, rank here). kNoColor joins none and gets std::nullopt.
  static constexpr uint32_t kNoColor = PLEXUS_SPLIT_NO_COLOR;
  std::optional<Communicator> split(uint32_t color, uint32_t key);
  // group: the communicator of ranks, in that order (ranks[i] becomes rank
  // i); every rank passes the same list, without repeats. A rank outside it
  // gets std::nullopt. A list that differs between ranks, a repeat or a rank
  // >= size() fails on every rank with INVALID_ARGUMENT.
  std::optional<Communicator> group(std::span<const uint32_t> ranks);
  // Elastic (plexus-run --elastic): after a collective failed because a rank
  // left the job (it died, or stopped making progress and the launcher took
  // it out), waits until the launcher names the ranks left (up to
  // timeout()), aborts this communicator and returns one over those of its
  // ranks that are left, ranked in this one's order. Collective over them.
  // INVALID_USAGE outside plexus-run --elastic; REMOTE when this rank was
  // taken out itself; TIMEOUT when no rank left (every rank failing alike is
  // not a rank leaving). Like NCCL's ncclCommShrink, but the launcher, which
  // saw the rank exit, says who left.
  Communicator shrink();
  // Elastic: at a step where every rank of this communicator calls it (a
  // commit), lets in the ranks plexus-run --elastic started again: when the
  // launcher says that ranks wait to join (--max-restarts), returns a
  // communicator over this one's ranks and them, ranked by job rank;
  // otherwise std::nullopt, and this one goes on. Collective over this
  // communicator (a small allreduce, to agree); BLOCKS while the newcomers
  // join (up to timeout()). A newcomer that fails to join leaves this one
  // unchanged on every rank. The newcomer's side is from_env(), which in a
  // rank started again returns its part of the same communicator, with
  // joined() true: it must take the state from the others (a broadcast from
  // a rank whose joined() is false). Like NCCL's ncclCommGrow.
  std::optional<Communicator> grow();
  // True on the communicator from_env() made for a rank plexus-run
  // --elastic started again, which joined ranks already under way.
  bool joined() const;
  // The rank in the whole job of each rank of this communicator (0, 1, ...
  // for a communicator from from_env).
  const std::vector<uint32_t>& job_ranks() const;

  // Typed forms over spans; sizes are checked (INVALID_ARGUMENT otherwise).
  template <Element T>
  Work allreduce(std::span<T> inout, ReduceOp op = ReduceOp::Sum) {
    return allreduce(inout.data(), inout.data(), inout.size(), kDTypeOf<T>, op);
  }
  template <Element T>
  Work allreduce(std::span<const T> send, std::span<T> recv, ReduceOp op = ReduceOp::Sum) {
    CheckSpan(send.size() == recv.size(), "allreduce: send and recv sizes differ");
    return allreduce(send.data(), recv.data(), send.size(), kDTypeOf<T>, op);
  }
  template <Element T>
  Work broadcast(std::span<T> buf, uint32_t root) {
    return broadcast(buf.data(), buf.size(), kDTypeOf<T>, root);
  }
  // recv.size() must be size() * send.size().
  template <Element T>
  Work allgather(std::span<const T> send, std::span<T> recv) {
    CheckSpan(recv.size() == send.size() * size(), "allgather: recv must hold size() * send");
    return allgather(send.data(), recv.data(), send.size(), kDTypeOf<T>);
  }

  // Only root's recv is written; other ranks may pass an empty recv.
  template <Element T>
  Work reduce(std::span<const T> send, std::span<T> recv, ReduceOp op, uint32_t root) {
    CheckSpan(rank() != root || recv.size() == send.size(), "reduce: root's recv size differs");
    return reduce(send.data(), recv.data(), send.size(), kDTypeOf<T>, op, root);
  }
  // send.size() must be size() * recv.size(); rank r receives block r reduced.
  template <Element T>
  Work reduce_scatter(std::span<const T> send, std::span<T> recv, ReduceOp op = ReduceOp::Sum) {
    CheckSpan(send.size() == recv.size() * size(), "reduce_scatter: send must hold size() * recv");
    return reduce_scatter(send.data(), recv.data(), recv.size(), kDTypeOf<T>, op);
  }
  // Both spans hold size() blocks; block j of send goes to rank j.
  template <Element T>
  Work alltoall(std::span<const T> send, std::span<T> recv) {
    CheckSpan(send.size() == recv.size() && send.size() % size() == 0,
              "alltoall: send and recv must both hold size() equal blocks");
    return alltoall(send.data(), recv.data(), send.size() / size(), kDTypeOf<T>);
  }
  // recv.size() must be size() * send.size() on root; other ranks may pass
  // an empty recv.
  template <Element T>
  Work gather(std::span<const T> send, std::span<T> recv, uint32_t root) {
    CheckSpan(rank() != root || recv.size() == send.size() * size(),
              "gather: root's recv must hold size() * send");
    return gather(send.data(), recv.data(), send.size(), kDTypeOf<T>, root);
  }
  // send.size() must be size() * recv.size() on root; other ranks may pass
  // an empty send.
  template <Element T>
  Work scatter(std::span<const T> send, std::span<T> recv, uint32_t root) {
    CheckSpan(rank() != root || send.size() == recv.size() * size(),
              "scatter: root's send must hold size() * recv");
    return scatter(send.data(), recv.data(), recv.size(), kDTypeOf<T>, root);
  }
  // Rank r's block lands after those of ranks 0..r-1: recv holds the sum of
  // recv_counts, and send.size() == recv_counts[rank()].
  template <Element T>
  Work allgatherv(std::span<const T> send, std::span<T> recv,
                  std::span<const uint64_t> recv_counts) {
    const std::vector<uint64_t> displs = PackedDispls(recv_counts, recv.size(), "allgatherv");
    return allgatherv(send.data(), send.size(), recv.data(), recv_counts, displs, kDTypeOf<T>);
  }
  // Blocks packed in rank order on both sides (as all_to_all_single with
  // split sizes): send holds the sum of send_counts, recv of recv_counts.
  template <Element T>
  Work alltoallv(std::span<const T> send, std::span<const uint64_t> send_counts, std::span<T> recv,
                 std::span<const uint64_t> recv_counts) {
    const std::vector<uint64_t> sd = PackedDispls(send_counts, send.size(), "alltoallv send");
    const std::vector<uint64_t> rd = PackedDispls(recv_counts, recv.size(), "alltoallv recv");
    return alltoallv(send.data(), send_counts, sd, recv.data(), recv_counts, rd, kDTypeOf<T>);
  }
  template <Element T>
  Work send(std::span<const T> buf, uint32_t peer) {
    return send(buf.data(), buf.size(), kDTypeOf<T>, peer);
  }
  template <Element T>
  Work recv(std::span<T> buf, uint32_t peer) {
    return recv(buf.data(), buf.size(), kDTypeOf<T>, peer);
  }

  // Aborts every pending operation (they fail with PLEXUS_ERR_ABORTED) and
  // makes the communicator unusable. Any thread; idempotent.
  void abort();

 private:
  friend class detail::TwoLevel;
  explicit Communicator(std::shared_ptr<detail::CommState> state);
  // split() with the group on another backend (a name or path as
  // PLEXUS_BACKEND takes; "" = this one's): the two-level scheme's groups
  // inside hosts (PLEXUS_LOCAL_BACKEND).
  std::optional<Communicator> SplitOver(uint32_t color, uint32_t key,
                                        const std::string& backend_spec);
  // The rest of from_env and from_store once the job is known: loads the
  // backend and creates the backend communicator named name.
  static Communicator Join(std::shared_ptr<Job> job, std::string name,
                           const CommunicatorOptions& options, std::chrono::milliseconds timeout);
  // Join's first half: the state of a communicator named name, its backend
  // loaded, not yet created.
  static std::shared_ptr<detail::CommState> NewState(std::shared_ptr<Job> job, std::string name,
                                                     const CommunicatorOptions& options,
                                                     std::chrono::milliseconds timeout);
  // from_env in a rank started again into an elastic job: joins the others
  // in their grow() to generation (PLEXUS_ELASTIC_JOIN).
  static Communicator JoinElastic(std::shared_ptr<Job> job, std::string name, uint64_t generation,
                                  const CommunicatorOptions& options,
                                  std::chrono::milliseconds timeout);
  // The group split() or group() made (none for a rank outside every
  // group), or throws st.
  static std::optional<Communicator> Made(const Status& st, std::shared_ptr<detail::CommState> made,
                                          const detail::CommState& parent);
  static void CheckSpan(bool ok, const char* what);
  // Displacements of blocks packed in rank order; checks that counts has
  // size() entries whose sum is total (INVALID_ARGUMENT otherwise).
  std::vector<uint64_t> PackedDispls(std::span<const uint64_t> counts, uint64_t total,
                                     const char* what) const;
  // Throws st, a refusal of coll's arguments before anything was posted
  // (the flight recorder notes the attempt).
  Work Refused(const Status& st, plexus_collective_t coll);
  // collective: what was posted, counted here in the communicator's sequence
  // (for stall reports); nullptr for send/recv.
  Work Start(const Status& posted, plexus_request* req, const char* what,
             detail::PostedOp* collective);
  detail::CommState& state() const;

  std::shared_ptr<detail::CommState> state_;
};

}  // namespace plexus
