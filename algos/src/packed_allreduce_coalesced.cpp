// Coalesced allreduce by packing: the buffers are copied one after the other
// into one scratch vector, the vector is all-reduced in place by the
// allreduce algorithm the caller chose for that many bytes, and the result
// is copied back out into each buffer.
//
// Why pack: a bucket of DDP gradients is typically hundreds of small
// tensors. One allreduce each costs hundreds of times the latency of a
// step (the ring's 2 (size-1) steps, recursive doubling's log2 size), where
// one allreduce of the packed vector pays it once, for two memory copies of
// the data. The results are exact wherever each reduction is (integers,
// min, max): every element is reduced over the same ranks' values as alone.
// Floating-point sums may round differently from separate allreduces,
// because the algorithm cuts the packed vector into blocks elsewhere, which
// changes the order the ranks' values are added in; every rank still gets
// the same bytes.
//
// One buffer is all-reduced where it is, without the copies. Empty buffers
// take no room. Ranks that post different counts with the same sum are not
// detected (the frames carry only the sum): the ABI makes every rank post
// the same counts.
#include <cstring>
#include <string>

#include "plexus/algos/collectives.hpp"
#include "plexus/algos/describe.hpp"
#include "plexus/algos/dtype.hpp"
#include "scratch.hpp"

namespace plexus::algos {

Status PackedAllreduceCoalesced(PeerTransport& t, const OpSignature& sig,
                                std::span<const void* const> sendbufs,
                                std::span<void* const> recvbufs, std::span<const uint64_t> counts,
                                const AllreduceFn& allreduce) {
  const size_t elem = DtypeSize(sig.dtype);
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  // The frames carry sig.count; it must be the vector that is reduced.
  if (total != sig.count) {
    return {PLEXUS_ERR_INTERNAL, DescribeOp(sig) + ": the counts add up to " +
                                     std::to_string(total) + ", not the operation's count"};
  }
  if (counts.size() == 1) return allreduce(t, sig, sendbufs[0], recvbufs[0]);

  Scratch packed(total * elem);
  uint64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    std::memcpy(packed.data() + at, sendbufs[i], counts[i] * elem);
    at += counts[i] * elem;
  }
  PLEXUS_ALGOS_RETURN_IF_ERROR(allreduce(t, sig, packed.data(), packed.data()));
  at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    std::memcpy(recvbufs[i], packed.data() + at, counts[i] * elem);
    at += counts[i] * elem;
  }
  return {};
}

Status Algorithm<PLEXUS_COLL_ALLREDUCE_COALESCED>::Run(PeerTransport& t, const OpSignature& sig,
                                                       const abi::Call& call) {
  return PackedAllreduceCoalesced(t, sig, {call.sendbufs, call.nbuffers},
                                  {call.recvbufs, call.nbuffers}, {call.counts, call.nbuffers},
                                  RingAllreduce);
}

}  // namespace plexus::algos
