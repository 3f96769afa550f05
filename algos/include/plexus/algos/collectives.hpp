// Collective algorithms over a PeerTransport. Each function runs the whole
// collective on the calling thread, BLOCKING until it completes or fails; the
// caller's buffers are borrowed for the call. Arguments are assumed valid
// (the backend checks them before posting). Every rank must call the same
// function with the same signature.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "plexus/abi/call.hpp"
#include "plexus/algos/status.hpp"
#include "plexus/algos/transport.hpp"

namespace plexus::algos {

// Every collective of the list (abi/collectives.def) has one algorithm here
// that a backend built on the kit runs unless it chooses another:
// Algorithm<code>::Run, declared below for every line of the list, so that a
// collective added to the list is declared here with no edit, and the
// library does not link until its algorithm's file defines it. call's
// arrays must live until Run returns (the kit's copies: abi::OwnedCall).
// send and recv are declared but have none: the kit matches them as
// messages.
template <plexus_collective_t Code>
struct Algorithm;
#define PLEXUS_ABI_COLLECTIVE(slot, code, ...)                                          \
  template <>                                                                           \
  struct Algorithm<code> {                                                              \
    static Status Run(PeerTransport& t, const OpSignature& sig, const abi::Call& call); \
  };
#include "plexus/abi/collectives.def"
#undef PLEXUS_ABI_COLLECTIVE

// Ring reduce-scatter followed by ring allgather. sendbuf may equal recvbuf.
Status RingAllreduce(PeerTransport& t, const OpSignature& sig, const void* sendbuf, void* recvbuf);

// Two ranks: both send the whole vector and reduce locally, one step
// instead of the ring's two, bit-identical to RingAllreduce; for vectors up
// to about 1 MiB. Runs RingAllreduce on any other number of ranks. sendbuf
// may equal recvbuf.
Status PairExchangeAllreduce(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                             void* recvbuf);

// Recursive doubling (with a fold for non-powers of two): log2(size) rounds
// of whole-vector exchanges; for small vectors. sendbuf may equal recvbuf.
Status RecursiveDoublingAllreduce(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                                  void* recvbuf);

// Binomial tree towards sig.root, after AgreeOnRoot; only the root's recvbuf
// is written (and may equal sendbuf); other ranks' recvbuf is ignored.
Status BinomialReduce(PeerTransport& t, const OpSignature& sig, const void* sendbuf, void* recvbuf);

// Ring reduce-scatter of size blocks of sig.count elements; rank r receives
// block r. recvbuf may equal sendbuf + rank * count * elem_size.
Status RingReduceScatter(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                         void* recvbuf);

// Pairwise exchange; sendbuf and recvbuf hold size blocks and must not overlap.
Status PairwiseAlltoall(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                        void* recvbuf);

// Up to 4 KiB: the data carried with the root agreement (a dissemination
// of ceil(log2 size) rounds); larger: a binomial tree rooted at sig.root,
// after AgreeOnRoot. Ranks that named different roots fail as AgreeOnRoot
// says, with nothing delivered.
Status BinomialBroadcast(PeerTransport& t, const OpSignature& sig, void* buf);

// Fails with REMOTE on every rank, naming two ranks and their roots, when
// the ranks did not all post sig.root; OK when they did. ceil(log2 size)
// rounds of 16-byte exchanges (root_agreement.cpp). The rooted collectives
// run it first (a small broadcast carries it with its data).
Status AgreeOnRoot(PeerTransport& t, const OpSignature& sig);

// Ring allgather; sendbuf may equal recvbuf + rank * count * elem_size.
Status RingAllgather(PeerTransport& t, const OpSignature& sig, const void* sendbuf, void* recvbuf);

// Dissemination barrier: ceil(log2 size) rounds of empty frames.
Status DisseminationBarrier(PeerTransport& t, const OpSignature& sig);

// --- ABI 1.2 ---

// Binomial tree towards sig.root, after AgreeOnRoot: the root's recvbuf
// (size blocks of sig.count elements) receives every rank's sendbuf in rank
// order. Only the root's recvbuf is written; other ranks' recvbuf is
// ignored. On the root sendbuf may equal recvbuf + root * count * elem_size.
Status BinomialGather(PeerTransport& t, const OpSignature& sig, const void* sendbuf, void* recvbuf);

// Binomial tree from sig.root, after AgreeOnRoot: block r of the root's
// sendbuf (size blocks of sig.count elements) lands in rank r's recvbuf.
// Only the root's sendbuf is read; other ranks' sendbuf is ignored. On the
// root recvbuf may equal sendbuf + root * count * elem_size.
Status BinomialScatter(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                       void* recvbuf);

// Ring allgather of uneven blocks: rank r's sendbuf (recvcounts[r]
// elements) lands at recvbuf + displs[r] elements on every rank. Both spans
// have size entries; sig.count is not read (a backend puts something there
// that is the same on every rank). sendbuf may equal recvbuf + displs[rank]
// elements. Ranks whose counts disagree fail with REMOTE: each block is one
// frame, whose size Exchange checks.
Status RingAllgatherv(PeerTransport& t, const OpSignature& sig, const void* sendbuf, void* recvbuf,
                      std::span<const uint64_t> recvcounts, std::span<const uint64_t> displs);

// Pairwise exchange of uneven blocks: sendcounts[j] elements at sendbuf +
// sdispls[j] go to rank j, landing there at recvbuf + rdispls[rank]. The
// four spans have size entries; sig.count is not read. Receive blocks must
// not overlap each other or the send blocks. A count that disagrees with
// the peer's fails with REMOTE: each block is one frame, whose size
// Exchange checks; sendcounts[rank] != recvcounts[rank] (no peer to check)
// fails with INVALID_ARGUMENT before anything moves.
Status PairwiseAlltoallv(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                         std::span<const uint64_t> sendcounts, std::span<const uint64_t> sdispls,
                         void* recvbuf, std::span<const uint64_t> recvcounts,
                         std::span<const uint64_t> rdispls);

// An allreduce algorithm above (RingAllreduce, RecursiveDoublingAllreduce,
// PairExchangeAllreduce), or another provider's allreduce (the kit's
// one-host shared memory).
using AllreduceFn = std::function<Status(PeerTransport& t, const OpSignature& sig,
                                         const void* sendbuf, void* recvbuf)>;

// counts.size() allreduces of one dtype and op as one: the buffers are
// packed into one vector, all-reduced by `allreduce`, and unpacked.
// sig.count must be the sum of counts. recvbufs[i] receives op over ranks
// of sendbufs[i] (counts[i] elements); sendbufs[i] may equal recvbufs[i].
Status PackedAllreduceCoalesced(PeerTransport& t, const OpSignature& sig,
                                std::span<const void* const> sendbufs,
                                std::span<void* const> recvbufs, std::span<const uint64_t> counts,
                                const AllreduceFn& allreduce);

// reduce_scatterv (Algorithm<PLEXUS_COLL_REDUCE_SCATTERV>) is the ring
// reduce-scatter of uneven blocks: rank r receives op over ranks of the
// block of sendcounts[r] elements at sendbuf + sdispls[r] (recvbuf may be
// that block: in place). sig.count is not read. Ranks whose counts disagree
// fail with REMOTE: the kit's signature carries a hash of them.

}  // namespace plexus::algos
