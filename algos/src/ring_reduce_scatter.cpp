// Ring reduce-scatter: the first half of RingAllreduce, with the block
// numbering shifted so that rank r ends up owning block r; blocks of
// sig.count elements (reduce_scatter) or of a count per rank
// (reduce_scatterv).
//
// In step s (0 <= s < size-1) rank r sends its partial result for block
// (r - s - 1) to its right neighbour and receives the left neighbour's partial
// result for block (r - s - 2), which it combines with its own input for that
// block. Step 0 sends straight from sendbuf; later steps send what the step
// before produced. Partial results alternate between two block-sized buffers,
// and the last step writes block r straight into recvbuf (divided by size for
// AVG). Each rank moves (size-1)/size of the input: bandwidth-optimal. As in
// RingAllreduce, segment k+1 is on the wire while segment k is reduced.
#include <algorithm>
#include <cstring>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"
#include "scratch.hpp"

namespace plexus::algos {
namespace {

// The ring over size blocks, block b being count(b) elements at element
// displ(b) of sendbuf; rank r's result (count(r) elements) lands in recvbuf.
template <class Count, class Displ>
Status RingOverBlocks(PeerTransport& t, const OpSignature& sig, const void* sendbuf, void* recvbuf,
                      Count count, Displ displ) {
  const size_t elem = DtypeSize(sig.dtype);
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  const auto* in = static_cast<const uint8_t*>(sendbuf);
  auto* out = static_cast<uint8_t*>(recvbuf);
  // sendbuf (or recvbuf) may be NULL where its blocks are all empty: no
  // arithmetic on it then.
  auto block = [&](uint32_t b) { return count(b) ? in + displ(b) * elem : in; };
  if (n == 1) {
    if (count(0) && block(0) != out) std::memmove(out, block(0), count(0) * elem);
    return {};
  }
  uint64_t largest = 0;
  for (uint32_t b = 0; b < n; ++b) largest = std::max(largest, count(b));
  const uint32_t left = (r + n - 1) % n;
  const uint32_t right = (r + 1) % n;
  const uint64_t seg = std::max<uint64_t>(1, ReduceSegmentBytes(t) / elem);
  Scratch partial[2];
  for (auto& p : partial) p = Scratch(n > 2 ? largest * elem : 0);
  Scratch scratch[2];
  for (auto& sc : scratch) sc = Scratch(std::min<uint64_t>(seg, largest) * elem);

  for (uint32_t s = 0; s + 1 < n; ++s) {
    const uint32_t send_b = (r + 2 * n - s - 1) % n;
    const uint32_t recv_b = (r + 2 * n - s - 2) % n;
    const uint8_t* source = s == 0 ? block(send_b) : partial[(s + 1) % 2].data();
    const bool last = s + 2 == n;  // recv_b == r
    uint8_t* dest = last ? out : partial[s % 2].data();
    const uint64_t send_len = count(send_b), recv_len = count(recv_b);
    // Every step moves at least one frame each way, an empty one for an
    // empty block: ranks whose counts disagree meet a frame that says so
    // (the signature's hash of the counts, or its size), also where one of
    // them has nothing to move at all.
    const uint64_t segs =
        std::max<uint64_t>(1, std::max(SegmentCount(send_len, seg), SegmentCount(recv_len, seg)));
    uint64_t tickets[2] = {0, 0};
    auto start = [&](uint64_t k) {
      const uint64_t s_elems = SegmentLength(send_len, seg, k);
      const uint64_t r_elems = SegmentLength(recv_len, seg, k);
      const SendSpec send{right, source + k * seg * elem, s_elems * elem};
      const RecvSpec recv{left, scratch[k % 2].data(), r_elems * elem};
      return t.Start(sig, std::span(&send, s_elems || k == 0 ? 1 : 0),
                     std::span(&recv, r_elems || k == 0 ? 1 : 0), &tickets[k % 2]);
    };
    PLEXUS_ALGOS_RETURN_IF_ERROR(start(0));
    for (uint64_t k = 0; k < segs; ++k) {
      if (k + 1 < segs) PLEXUS_ALGOS_RETURN_IF_ERROR(start(k + 1));
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Finish(tickets[k % 2]));
      const uint64_t len = SegmentLength(recv_len, seg, k);
      const uint64_t at = k * seg * elem;
      if (len)
        ReduceTo(dest + at, block(recv_b) + at, scratch[k % 2].data(), len, sig.dtype, sig.op);
    }
  }
  if (sig.op == PLEXUS_OP_AVG) FinishAverage(out, count(r), sig.dtype, n);
  return {};
}

}  // namespace

Status RingReduceScatter(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                         void* recvbuf) {
  const uint64_t c = sig.count;
  if (c == 0) return {};  // every rank knows that nobody moves anything
  return RingOverBlocks(
      t, sig, sendbuf, recvbuf, [c](uint32_t) { return c; }, [c](uint32_t b) { return b * c; });
}

Status Algorithm<PLEXUS_COLL_REDUCE_SCATTERV>::Run(PeerTransport& t, const OpSignature& sig,
                                                   const abi::Call& call) {
  const uint64_t* counts = call.sendcounts;
  const uint64_t* displs = call.sdispls;
  return RingOverBlocks(
      t, sig, call.sendbuf, call.recvbuf, [counts](uint32_t b) { return counts[b]; },
      [displs](uint32_t b) { return displs[b]; });
}

Status Algorithm<PLEXUS_COLL_REDUCE_SCATTER>::Run(PeerTransport& t, const OpSignature& sig,
                                                  const abi::Call& call) {
  return RingReduceScatter(t, sig, call.sendbuf, call.recvbuf);
}

}  // namespace plexus::algos
