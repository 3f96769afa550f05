// Pairwise-exchange alltoallv: PairwiseAlltoall with a block size per pair
// of ranks. Rank r first copies its block to itself; then in step k
// (1 <= k < size) it sends its block for rank r + k (sendcounts[r + k]
// elements at sdispls[r + k]) and receives the block of rank r - k
// (recvcounts[r - k] elements at rdispls[r - k]), both at once. Every pair
// of ranks talks exactly once and no rank is ever the target of two senders
// in the same step.
//
// Ranks that disagree on a count must fail, not deliver a wrong layout.
// PeerTransport::Exchange fails with REMOTE when a frame's payload differs
// from the bytes the receiver expects, and this algorithm leans on that:
// every block travels whole, as exactly one frame, also when it is empty
// (an empty frame). So the one frame rank r - k sends r is always its block
// for r, and its size, sendcounts[r] there, is checked against
// recvcounts[r - k] here. Cutting blocks into segments would lose that: two
// different sizes can split into frames of which the first ones match.
#include <cstring>
#include <string>

#include "plexus/algos/collectives.hpp"
#include "plexus/algos/describe.hpp"
#include "plexus/algos/dtype.hpp"

namespace plexus::algos {

Status PairwiseAlltoallv(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                         std::span<const uint64_t> sendcounts, std::span<const uint64_t> sdispls,
                         void* recvbuf, std::span<const uint64_t> recvcounts,
                         std::span<const uint64_t> rdispls) {
  const size_t elem = DtypeSize(sig.dtype);
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  const auto* in = static_cast<const uint8_t*>(sendbuf);
  auto* out = static_cast<uint8_t*>(recvbuf);
  // A buffer may be NULL where all its blocks are empty: no arithmetic on it then.
  auto send_at = [&](uint32_t j) { return sendcounts[j] ? in + sdispls[j] * elem : in; };
  auto recv_at = [&](uint32_t j) { return recvcounts[j] ? out + rdispls[j] * elem : out; };
  // The block to itself has no peer to check it: the two counts must agree
  // here (kit::CheckCall refuses such a post; this is for other callers),
  // and failing before the first exchange makes the peers hear why.
  if (sendcounts[r] != recvcounts[r]) {
    return {PLEXUS_ERR_INVALID_ARGUMENT, DescribeOp(sig) + ": rank " + std::to_string(r) +
                                             " sends itself " + std::to_string(sendcounts[r]) +
                                             " elements but expects " +
                                             std::to_string(recvcounts[r])};
  }
  if (sendcounts[r] > 0) std::memcpy(recv_at(r), send_at(r), sendcounts[r] * elem);
  for (uint32_t k = 1; k < n; ++k) {
    const uint32_t to = (r + k) % n;
    const uint32_t from = (r + n - k) % n;
    const SendSpec send{to, send_at(to), sendcounts[to] * elem};
    const RecvSpec recv{from, recv_at(from), recvcounts[from] * elem};
    PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, std::span(&send, 1), std::span(&recv, 1)));
  }
  return {};
}

Status Algorithm<PLEXUS_COLL_ALLTOALLV>::Run(PeerTransport& t, const OpSignature& sig,
                                             const abi::Call& call) {
  const size_t n = t.size();
  return PairwiseAlltoallv(t, sig, call.sendbuf, {call.sendcounts, n}, {call.sdispls, n},
                           call.recvbuf, {call.recvcounts, n}, {call.rdispls, n});
}

}  // namespace plexus::algos
