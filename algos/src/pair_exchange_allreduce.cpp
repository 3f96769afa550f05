// Pair-exchange allreduce, for two ranks: each rank sends its whole vector
// to the other and reduces the two copies itself.
//
// Every rank sends and receives the whole vector once, as the ring does with
// two ranks (half in its reduce-scatter step, half in its allgather step),
// but in a single step: nothing waits for the peer's reduction, and every
// received byte lands in a small scratch buffer that is still in the cache
// when it is reduced, instead of half of them being written straight into
// recvbuf. It reduces the whole vector instead of half of it; for small
// enough vectors that costs less than the ring's second step saves (the TCP
// backend's limit is kPairMaxBytes in backends/tcp/tcp_plugin.cpp; the
// measurements behind it are in docs/benchmarks.md).
//
// The vector travels as segments of kSegmentBytes, two in flight: segment k
// is reduced while k+1 is on the wire, and k+2 is started once k is done.
//
// Results are bit-identical to RingAllreduce on two ranks, on both ranks:
// the ring reduces block b (of its two blocks) on rank 1-b as
// x[1-b] op x[b], where x[i] is rank i's vector, and both ranks here combine
// every element of block b in that same operand order, through the same
// kernel call. (Operand order shows in the bytes of min/max of +0 and -0,
// and of NaN payloads, which also depend on the compiled code.) On any other
// number of ranks this runs RingAllreduce. sendbuf may equal recvbuf.
#include <cstring>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"
#include "scratch.hpp"

namespace plexus::algos {

Status PairExchangeAllreduce(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                             void* recvbuf) {
  if (t.size() != 2 || sig.count == 0) return RingAllreduce(t, sig, sendbuf, recvbuf);
  const size_t elem = DtypeSize(sig.dtype);
  auto* out = static_cast<uint8_t*>(recvbuf);
  const auto* in = static_cast<const uint8_t*>(sendbuf);
  const uint32_t r = t.rank();
  const uint32_t peer = 1 - r;
  const uint64_t split = BlockLayout(sig.count, 2).offset(1);  // first element of block 1
  const uint64_t seg = std::max<uint64_t>(1, ReduceSegmentBytes(t) / elem);
  const uint64_t segs = SegmentCount(sig.count, seg);
  // Out of place the peer's segment lands in recvbuf, where the reduction
  // then runs in place (two streams of memory instead of three); in place
  // it lands in a scratch buffer.
  const bool direct = in != out;
  Scratch scratch[2];
  for (uint64_t k = 0; k < std::min<uint64_t>(segs, 2) && !direct; ++k) {
    scratch[k] = Scratch(std::min(sig.count, seg) * elem);
  }
  uint64_t tickets[2] = {0, 0};

  // Segment k out of sendbuf, the peer's segment k into scratch[k % 2]. In
  // place, segment k of sendbuf is only overwritten after it has been sent
  // (its batch has finished).
  auto start = [&](uint64_t k) -> Status {
    const uint64_t len = SegmentLength(sig.count, seg, k);
    const SendSpec send{peer, in + k * seg * elem, len * elem};
    const RecvSpec recv{peer, direct ? out + k * seg * elem : scratch[k % 2].data(), len * elem};
    return t.Start(sig, std::span(&send, 1), std::span(&recv, 1), &tickets[k % 2]);
  };
  // Elements [from, from + len), all in one block; theirs (scratch) holds
  // the peer's. The reduction runs with the arguments the ring's has on the
  // rank that reduces this block there (rank 1 - block, whose own vector is
  // x[1 - block]): out of place ReduceTo(out, x[1 - block], x[block]), in
  // place ReduceTo(x[1 - block], x[1 - block], x[block]). Which NaN payload
  // an addition keeps can depend on the code path (the compiler may swap
  // the operands of a commutative op), so in place, for the block the ring
  // reduces on the other rank, the reduction runs in the scratch buffer,
  // which holds x[1 - block] here, and is copied into place. Out of place
  // theirs is already in place.
  auto combine = [&](uint64_t from, uint64_t len, uint8_t* theirs) {
    const uint32_t block = from < split ? 0 : 1;
    const uint8_t* mine = in + from * elem;
    uint8_t* dest = out + from * elem;
    const uint8_t* first = mine;     // x[1 - block]
    const uint8_t* second = theirs;  // x[block]
    if (block == r) {
      first = theirs;
      second = mine;
      if (in == out) dest = theirs;
    }
    if (sig.op == PLEXUS_OP_AVG) {
      ReduceToAverage(dest, first, second, len, sig.dtype, 2);
    } else {
      ReduceTo(dest, first, second, len, sig.dtype, sig.op);
    }
    if (!direct && dest == theirs) std::memcpy(out + from * elem, theirs, len * elem);
  };

  PLEXUS_ALGOS_RETURN_IF_ERROR(start(0));
  if (segs > 1) PLEXUS_ALGOS_RETURN_IF_ERROR(start(1));
  for (uint64_t k = 0; k < segs; ++k) {
    PLEXUS_ALGOS_RETURN_IF_ERROR(t.Finish(tickets[k % 2]));
    const uint64_t from = k * seg;
    const uint64_t len = SegmentLength(sig.count, seg, k);
    uint8_t* theirs = direct ? out + from * elem : scratch[k % 2].data();
    if (from < split && split < from + len) {
      combine(from, split - from, theirs);
      combine(split, from + len - split, theirs + (split - from) * elem);
    } else {
      combine(from, len, theirs);
    }
    if (k + 2 < segs) PLEXUS_ALGOS_RETURN_IF_ERROR(start(k + 2));
  }
  return {};
}

}  // namespace plexus::algos
