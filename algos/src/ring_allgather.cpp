// Ring allgather: every rank's block travels once around the ring.
//
// Rank r first places its own block at position r of recvbuf. In step s
// (0 <= s < size-1) it sends block (r - s) to its right neighbour and receives
// block (r - s - 1) from its left neighbour directly into place. Each rank
// sends and receives (size-1)/size of the result: bandwidth-optimal.
#include <cstring>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"

namespace plexus::algos {

Status RingAllgather(PeerTransport& t, const OpSignature& sig, const void* sendbuf, void* recvbuf) {
  const size_t elem = DtypeSize(sig.dtype);
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  const uint64_t block_bytes = sig.count * elem;
  auto* out = static_cast<uint8_t*>(recvbuf);
  if (sendbuf != out + r * block_bytes && block_bytes > 0) {
    std::memmove(out + r * block_bytes, sendbuf, block_bytes);
  }
  if (n == 1 || sig.count == 0) return {};

  const uint32_t left = (r + n - 1) % n;
  const uint32_t right = (r + 1) % n;
  // Everything is received straight into place: the transport's direct
  // message size, else the usual segments.
  const uint64_t direct = t.DirectMessageBytes();
  const uint64_t seg = std::max<uint64_t>(1, (direct ? direct : kSegmentBytes) / elem);
  const uint64_t segs = SegmentCount(sig.count, seg);
  for (uint32_t s = 0; s + 1 < n; ++s) {
    const uint32_t send_b = (r + n - s) % n;
    const uint32_t recv_b = (r + 2 * n - s - 1) % n;
    for (uint64_t k = 0; k < segs; ++k) {
      const uint64_t bytes = SegmentLength(sig.count, seg, k) * elem;
      const SendSpec send{right, out + send_b * block_bytes + k * seg * elem, bytes};
      const RecvSpec recv{left, out + recv_b * block_bytes + k * seg * elem, bytes};
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, std::span(&send, 1), std::span(&recv, 1)));
    }
  }
  return {};
}

Status Algorithm<PLEXUS_COLL_ALLGATHER>::Run(PeerTransport& t, const OpSignature& sig,
                                             const abi::Call& call) {
  return RingAllgather(t, sig, call.sendbuf, call.recvbuf);
}

}  // namespace plexus::algos
