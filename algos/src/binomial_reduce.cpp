// Binomial-tree reduce to sig.root, once the ranks agree on the root
// (AgreeOnRoot): the mirror image of BinomialBroadcast.
//
// Ranks are renumbered relative to the root (v = rank - root mod size). For
// mask = 1, 2, 4, ...: a rank whose bit `mask` is set sends its partial result
// to v - mask and is done; otherwise it receives v + mask's partial result (if
// that rank exists) and reduces it into its own. The root ends with the full
// reduction after ceil(log2 size) rounds. Large vectors go through the tree
// segment by segment so scratch memory stays at kSegmentBytes.
#include <cstring>
#include <vector>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"
#include "scratch.hpp"

namespace plexus::algos {

Status BinomialReduce(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                      void* recvbuf) {
  const size_t elem = DtypeSize(sig.dtype);
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  const bool is_root = r == sig.root;
  if (sig.count == 0) return {};
  PLEXUS_ALGOS_RETURN_IF_ERROR(AgreeOnRoot(t, sig));  // (nothing to agree on for one rank)
  // The root accumulates in recvbuf; others in a private copy of sendbuf.
  Scratch own;
  uint8_t* acc;
  if (is_root) {
    acc = static_cast<uint8_t*>(recvbuf);
    if (sendbuf != recvbuf) std::memcpy(acc, sendbuf, sig.count * elem);
  } else {
    own = Scratch(sig.count * elem);
    std::memcpy(own.data(), sendbuf, sig.count * elem);
    acc = own.data();
  }
  if (n > 1) {
    const uint32_t v = (r + n - sig.root) % n;
    auto real = [&](uint32_t virt) { return (virt + sig.root) % n; };
    const uint64_t seg = std::max<uint64_t>(1, kSegmentBytes / elem);
    const uint64_t segs = SegmentCount(sig.count, seg);
    Scratch scratch(std::min<uint64_t>(seg, sig.count) * elem);
    for (uint64_t k = 0; k < segs; ++k) {
      const uint64_t len = SegmentLength(sig.count, seg, k);
      uint8_t* part = acc + k * seg * elem;
      for (uint32_t mask = 1; mask < n; mask <<= 1) {
        if (v & mask) {
          const SendSpec s{real(v - mask), part, len * elem};
          PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, std::span(&s, 1), {}));
          break;
        }
        if (v + mask < n) {
          const RecvSpec rv{real(v + mask), scratch.data(), len * elem};
          PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, {}, std::span(&rv, 1)));
          ReduceInto(part, scratch.data(), len, sig.dtype, sig.op);
        }
      }
    }
  }
  if (is_root && sig.op == PLEXUS_OP_AVG) FinishAverage(acc, sig.count, sig.dtype, n);
  return {};
}

Status Algorithm<PLEXUS_COLL_REDUCE>::Run(PeerTransport& t, const OpSignature& sig,
                                          const abi::Call& call) {
  return BinomialReduce(t, sig, call.sendbuf, call.recvbuf);
}

}  // namespace plexus::algos
