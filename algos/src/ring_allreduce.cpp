// Ring allreduce: reduce-scatter, then allgather, both around the ring
// rank -> rank+1.
//
// The vector is cut into `size` blocks. In step s (0 <= s < size-1) of the
// reduce-scatter phase every rank sends block (rank - s) to its right
// neighbour and receives block (rank - s - 1) from its left neighbour, which
// it reduces into its copy. After size-1 steps rank r holds block (r + 1)
// fully reduced (and divides it by size for AVG). The allgather phase then
// passes the finished blocks around the ring: in step s rank r sends block
// (r + 1 - s) and receives block (r - s), written straight into recvbuf.
//
// Every rank sends and receives 2 (size-1)/size of the vector: the bandwidth
// optimum. Blocks larger than kSegmentBytes travel as several frames so the
// scratch buffer stays small; a zero-length block sends no frame at all. As
// many segments of a step are in flight as the transport's PipelineDepth
// asks (two on one host; more across hosts, to fill a link's delay). The
// allgather steps, which receive straight into recvbuf, cut their blocks at
// the transport's DirectMessageBytes instead (whole blocks on UCX on one
// host, where a large message moves in a single copy).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"
#include "scratch.hpp"

namespace plexus::algos {

Status RingAllreduce(PeerTransport& t, const OpSignature& sig, const void* sendbuf, void* recvbuf) {
  const size_t elem = DtypeSize(sig.dtype);
  auto* out = static_cast<uint8_t*>(recvbuf);
  const auto* in = static_cast<const uint8_t*>(sendbuf);
  const uint32_t n = t.size();
  if (n == 1 || sig.count == 0) {
    if (sendbuf != recvbuf && sig.count > 0) std::memcpy(out, sendbuf, sig.count * elem);
    return {};
  }
  // No up-front copy of sendbuf into recvbuf: step 0 sends straight from
  // sendbuf, and every received block is combined with sendbuf's copy of it
  // into recvbuf (ReduceTo). Block `rank` of recvbuf is only ever written by
  // the allgather phase.

  const uint32_t r = t.rank();
  const uint32_t left = (r + n - 1) % n;
  const uint32_t right = (r + 1) % n;
  const BlockLayout blocks(sig.count, n);
  const uint64_t reduce_seg = std::max<uint64_t>(1, ReduceSegmentBytes(t) / elem);
  const uint64_t direct = t.DirectMessageBytes();
  const uint64_t direct_seg = direct ? std::max<uint64_t>(1, direct / elem) : reduce_seg;
  // One scratch buffer cut into `window` slots (one allocation, which the
  // per-thread cache keeps): as many as the transport wants in flight, no
  // more than a step has segments.
  const uint64_t slot_bytes = std::min(blocks.max_length(), reduce_seg) * elem;
  const uint64_t window = std::clamp<uint64_t>(
      std::min<uint64_t>(t.PipelineDepth(), SegmentCount(blocks.max_length(), reduce_seg)), 1,
      kMaxPipelineDepth);
  Scratch scratch(window * slot_bytes);
  auto slot = [&](uint64_t k) { return scratch.data() + (k % window) * slot_bytes; };
  uint64_t tickets[kMaxPipelineDepth] = {};  // window <= kMaxPipelineDepth: no allocation

  // One ring step: send block send_b to the right, receive block recv_b from
  // the left, segment by segment, up to `window` segments in flight. When
  // reducing, segment k arrives in slot k % window, is reduced while the
  // next ones are in flight, and its slot then takes segment k + window.
  // With AVG, the last reduce-scatter step divides as it reduces (one pass
  // over the block instead of two).
  auto step = [&](uint32_t send_b, uint32_t recv_b, bool reduce, bool first,
                  bool average = false) -> Status {
    const uint64_t seg = reduce ? reduce_seg : direct_seg;
    const uint64_t send_len = blocks.length(send_b);
    const uint64_t recv_len = blocks.length(recv_b);
    const uint64_t segs = std::max(SegmentCount(send_len, seg), SegmentCount(recv_len, seg));
    auto start = [&](uint64_t k) -> Status {
      const uint64_t s_elems = SegmentLength(send_len, seg, k);
      const uint64_t r_elems = SegmentLength(recv_len, seg, k);
      uint8_t* dest = out + (blocks.offset(recv_b) + k * seg) * elem;
      const uint8_t* src = first ? in : out;
      SendSpec send{right, src + (blocks.offset(send_b) + k * seg) * elem, s_elems * elem};
      RecvSpec recv{left, reduce && in == out ? slot(k) : dest, r_elems * elem};
      return t.Start(sig, std::span(&send, s_elems ? 1 : 0), std::span(&recv, r_elems ? 1 : 0),
                     &tickets[k % window]);
    };
    for (uint64_t k = 0; k < std::min(segs, window); ++k) PLEXUS_ALGOS_RETURN_IF_ERROR(start(k));
    for (uint64_t k = 0; k < segs; ++k) {
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Finish(tickets[k % window]));
      const uint64_t r_elems = SegmentLength(recv_len, seg, k);
      if (reduce && r_elems) {
        const uint64_t at = (blocks.offset(recv_b) + k * seg) * elem;
        const uint8_t* theirs = in == out ? slot(k) : out + at;
        if (average) {
          ReduceToAverage(out + at, in + at, theirs, r_elems, sig.dtype, n);
        } else {
          ReduceTo(out + at, in + at, theirs, r_elems, sig.dtype, sig.op);
        }
      }
      if (k + window < segs) PLEXUS_ALGOS_RETURN_IF_ERROR(start(k + window));
    }
    return {};
  };

  for (uint32_t s = 0; s + 1 < n; ++s) {
    const bool last = s + 2 == n;
    PLEXUS_ALGOS_RETURN_IF_ERROR(step((r + n - s) % n, (r + 2 * n - s - 1) % n, true, s == 0,
                                      last && sig.op == PLEXUS_OP_AVG));
  }
  for (uint32_t s = 0; s + 1 < n; ++s) {
    PLEXUS_ALGOS_RETURN_IF_ERROR(step((r + 1 + n - s) % n, (r + n - s) % n, false, false));
  }
  return {};
}

Status Algorithm<PLEXUS_COLL_ALLREDUCE>::Run(PeerTransport& t, const OpSignature& sig,
                                             const abi::Call& call) {
  return RingAllreduce(t, sig, call.sendbuf, call.recvbuf);
}

}  // namespace plexus::algos
