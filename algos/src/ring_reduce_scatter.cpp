// Ring reduce-scatter: the first half of RingAllreduce, with equal blocks of
// sig.count elements and the block numbering shifted so that rank r ends up
// owning block r.
//
// The ranks work on a private copy of sendbuf (size * count elements). In
// step s (0 <= s < size-1) rank r sends block (r - s - 1) to its right
// neighbour and receives block (r - s - 2) from its left, reducing it into its
// copy. After size-1 steps block r is complete; it is divided by size for AVG
// and copied to recvbuf. Each rank moves (size-1)/size of the input: optimal.
#include <cstring>
#include <vector>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"

namespace plexus::algos {

Status RingReduceScatter(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                         void* recvbuf) {
  const size_t elem = DtypeSize(sig.dtype);
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  const uint64_t block_bytes = sig.count * elem;
  if (sig.count == 0) return {};
  std::vector<uint8_t> work(static_cast<const uint8_t*>(sendbuf),
                            static_cast<const uint8_t*>(sendbuf) + n * block_bytes);
  if (n > 1) {
    const uint32_t left = (r + n - 1) % n;
    const uint32_t right = (r + 1) % n;
    const uint64_t seg = std::max<uint64_t>(1, kSegmentBytes / elem);
    const uint64_t segs = SegmentCount(sig.count, seg);
    std::vector<uint8_t> scratch(std::min<uint64_t>(seg, sig.count) * elem);
    for (uint32_t s = 0; s + 1 < n; ++s) {
      const uint32_t send_b = (r + 2 * n - s - 1) % n;
      const uint32_t recv_b = (r + 2 * n - s - 2) % n;
      for (uint64_t k = 0; k < segs; ++k) {
        const uint64_t len = SegmentLength(sig.count, seg, k);
        const SendSpec send{right, work.data() + send_b * block_bytes + k * seg * elem, len * elem};
        const RecvSpec recv{left, scratch.data(), len * elem};
        PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, std::span(&send, 1), std::span(&recv, 1)));
        ReduceInto(work.data() + recv_b * block_bytes + k * seg * elem, scratch.data(), len,
                   sig.dtype, sig.op);
      }
    }
  }
  uint8_t* mine = work.data() + r * block_bytes;
  if (sig.op == PLEXUS_OP_AVG) FinishAverage(mine, sig.count, sig.dtype, n);
  std::memcpy(recvbuf, mine, block_bytes);
  return {};
}

}  // namespace plexus::algos
