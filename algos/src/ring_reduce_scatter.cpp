// Ring reduce-scatter: the first half of RingAllreduce, with equal blocks of
// sig.count elements and the block numbering shifted so that rank r ends up
// owning block r.
//
// In step s (0 <= s < size-1) rank r sends its partial result for block
// (r - s - 1) to its right neighbour and receives the left neighbour's partial
// result for block (r - s - 2), which it combines with its own input for that
// block. Step 0 sends straight from sendbuf; later steps send what the step
// before produced. Partial results alternate between two block-sized buffers,
// and the last step writes block r straight into recvbuf (divided by size for
// AVG). Each rank moves (size-1)/size of the input: bandwidth-optimal. As in
// RingAllreduce, segment k+1 is on the wire while segment k is reduced.
#include <cstring>
#include <vector>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"
#include "scratch.hpp"

namespace plexus::algos {

Status RingReduceScatter(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                         void* recvbuf) {
  const size_t elem = DtypeSize(sig.dtype);
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  const uint64_t block_bytes = sig.count * elem;
  if (sig.count == 0) return {};
  const auto* in = static_cast<const uint8_t*>(sendbuf);
  auto* out = static_cast<uint8_t*>(recvbuf);
  if (n == 1) {
    if (in != out) std::memmove(out, in, block_bytes);
    return {};
  }
  const uint32_t left = (r + n - 1) % n;
  const uint32_t right = (r + 1) % n;
  const uint64_t seg = std::max<uint64_t>(1, ReduceSegmentBytes(t) / elem);
  const uint64_t segs = SegmentCount(sig.count, seg);
  Scratch partial[2];
  for (auto& p : partial) p = Scratch(n > 2 ? block_bytes : 0);
  Scratch scratch[2];
  for (auto& sc : scratch) sc = Scratch(std::min<uint64_t>(seg, sig.count) * elem);

  for (uint32_t s = 0; s + 1 < n; ++s) {
    const uint32_t send_b = (r + 2 * n - s - 1) % n;
    const uint32_t recv_b = (r + 2 * n - s - 2) % n;
    const uint8_t* source = s == 0 ? in + send_b * block_bytes : partial[(s + 1) % 2].data();
    const bool last = s + 2 == n;  // recv_b == r
    uint8_t* dest = last ? out : partial[s % 2].data();
    uint64_t tickets[2] = {0, 0};
    auto start = [&](uint64_t k) {
      const uint64_t bytes = SegmentLength(sig.count, seg, k) * elem;
      const SendSpec send{right, source + k * seg * elem, bytes};
      const RecvSpec recv{left, scratch[k % 2].data(), bytes};
      return t.Start(sig, std::span(&send, 1), std::span(&recv, 1), &tickets[k % 2]);
    };
    PLEXUS_ALGOS_RETURN_IF_ERROR(start(0));
    for (uint64_t k = 0; k < segs; ++k) {
      if (k + 1 < segs) PLEXUS_ALGOS_RETURN_IF_ERROR(start(k + 1));
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Finish(tickets[k % 2]));
      const uint64_t len = SegmentLength(sig.count, seg, k);
      const uint64_t at = k * seg * elem;
      ReduceTo(dest + at, in + recv_b * block_bytes + at, scratch[k % 2].data(), len, sig.dtype,
               sig.op);
    }
  }
  if (sig.op == PLEXUS_OP_AVG) FinishAverage(out, sig.count, sig.dtype, n);
  return {};
}

}  // namespace plexus::algos
