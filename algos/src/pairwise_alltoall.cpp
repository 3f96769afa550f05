// Pairwise-exchange alltoall. Rank r first copies its own block; then in step
// k (1 <= k < size) it sends block (r + k) to rank r + k and receives block
// (r - k) from rank r - k, both at once. Every pair of ranks talks exactly
// once and no rank is ever the target of two senders in the same step.
#include <cstring>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"

namespace plexus::algos {

Status PairwiseAlltoall(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                        void* recvbuf) {
  const size_t elem = DtypeSize(sig.dtype);
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  const uint64_t block_bytes = sig.count * elem;
  if (sig.count == 0) return {};
  const auto* in = static_cast<const uint8_t*>(sendbuf);
  auto* out = static_cast<uint8_t*>(recvbuf);
  std::memcpy(out + r * block_bytes, in + r * block_bytes, block_bytes);
  const uint64_t seg = std::max<uint64_t>(1, kSegmentBytes / elem);
  const uint64_t segs = SegmentCount(sig.count, seg);
  for (uint32_t k = 1; k < n; ++k) {
    const uint32_t to = (r + k) % n;
    const uint32_t from = (r + n - k) % n;
    for (uint64_t s = 0; s < segs; ++s) {
      const uint64_t bytes = SegmentLength(sig.count, seg, s) * elem;
      const SendSpec send{to, in + to * block_bytes + s * seg * elem, bytes};
      const RecvSpec recv{from, out + from * block_bytes + s * seg * elem, bytes};
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, std::span(&send, 1), std::span(&recv, 1)));
    }
  }
  return {};
}

Status Algorithm<PLEXUS_COLL_ALLTOALL>::Run(PeerTransport& t, const OpSignature& sig,
                                            const abi::Call& call) {
  return PairwiseAlltoall(t, sig, call.sendbuf, call.recvbuf);
}

}  // namespace plexus::algos
