// Ring allgatherv: RingAllgather with a block size per rank.
//
// Rank r first places its own block (recvcounts[r] elements, from sendbuf)
// at displs[r] of recvbuf, unless it is there already (in place). In step s
// (0 <= s < size-1) it sends block (r - s) to its right neighbour and
// receives block (r - s - 1) from its left neighbour straight into place.
// Each rank sends and receives every block but its own once: the bytes a
// rank must receive anyway, whatever the sizes.
//
// Ranks that disagree on the counts must fail, not deliver a wrong layout.
// PeerTransport::Exchange fails with REMOTE when a frame's payload differs
// from the bytes the receiver expects, and this algorithm leans on that: a
// block travels whole, as exactly one frame per step, also when it is empty
// (an empty frame). So the frame of step s from the left is always block
// (r - s - 1) on both sides, and its size is that block's size as the sender
// sees it, checked against this rank's recvcounts. Block b passes every
// rank from b + 1 round to b - 1, each one comparing its count with its left
// neighbour's (and b + 1 with b's sendcount), so any disagreement fails on
// some rank, which tells the others (the transport's Fail). Cutting blocks
// into segments would lose that: two different sizes can split into frames
// of which the first ones match.
#include <cstring>

#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"

namespace plexus::algos {

Status RingAllgatherv(PeerTransport& t, const OpSignature& sig, const void* sendbuf, void* recvbuf,
                      std::span<const uint64_t> recvcounts, std::span<const uint64_t> displs) {
  const size_t elem = DtypeSize(sig.dtype);
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  auto* out = static_cast<uint8_t*>(recvbuf);
  // recvbuf may be NULL where every block is empty: no arithmetic on it then.
  auto at = [&](uint32_t b) { return recvcounts[b] ? out + displs[b] * elem : out; };
  const uint64_t own_bytes = recvcounts[r] * elem;  // = the sendcount (the backend checked)
  if (own_bytes > 0 && sendbuf != at(r)) std::memmove(at(r), sendbuf, own_bytes);
  if (n == 1) return {};

  const uint32_t left = (r + n - 1) % n;
  const uint32_t right = (r + 1) % n;
  for (uint32_t s = 0; s + 1 < n; ++s) {
    const uint32_t send_b = (r + n - s) % n;
    const uint32_t recv_b = (r + 2 * n - s - 1) % n;
    const SendSpec send{right, at(send_b), recvcounts[send_b] * elem};
    const RecvSpec recv{left, at(recv_b), recvcounts[recv_b] * elem};
    PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, std::span(&send, 1), std::span(&recv, 1)));
  }
  return {};
}

Status Algorithm<PLEXUS_COLL_ALLGATHERV>::Run(PeerTransport& t, const OpSignature& sig,
                                              const abi::Call& call) {
  return RingAllgatherv(t, sig, call.sendbuf, call.recvbuf, {call.recvcounts, t.size()},
                        {call.rdispls, t.size()});
}

}  // namespace plexus::algos
