// Binomial-tree broadcast, once the ranks agree on the root (AgreeOnRoot).
//
// Ranks are renumbered relative to the root (v = rank - root mod size). A rank
// with virtual number v receives from v - m, where m is the lowest set bit of
// v, and then forwards to v + m' for every power of two m' < m (v + m' <
// size), largest first so the deepest subtrees start earliest. The root
// (v = 0) forwards to 1, 2, 4, ... The data reaches every rank in ceil(log2
// size) rounds. Large buffers travel as segments of kSegmentBytes; each
// segment goes to all children at once.
#include <vector>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"

namespace plexus::algos {

Status BinomialBroadcast(PeerTransport& t, const OpSignature& sig, void* buf) {
  const uint32_t n = t.size();
  if (n == 1 || sig.count == 0) return {};
  PLEXUS_ALGOS_RETURN_IF_ERROR(AgreeOnRoot(t, sig));
  const size_t elem = DtypeSize(sig.dtype);
  const uint32_t v = (t.rank() + n - sig.root) % n;
  auto real = [&](uint32_t virt) { return (virt + sig.root) % n; };

  uint32_t mask = 1;
  while (mask < n && !(v & mask)) mask <<= 1;  // lowest set bit of v, or >= n for the root
  const uint64_t seg = std::max<uint64_t>(1, kSegmentBytes / elem);
  const uint64_t segs = SegmentCount(sig.count, seg);
  auto* data = static_cast<uint8_t*>(buf);

  if (v != 0) {
    const uint32_t parent = real(v - mask);
    for (uint64_t k = 0; k < segs; ++k) {
      const RecvSpec recv{parent, data + k * seg * elem, SegmentLength(sig.count, seg, k) * elem};
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, {}, std::span(&recv, 1)));
    }
  }
  std::vector<uint32_t> children;
  for (uint32_t m = mask >> 1; m > 0; m >>= 1) {
    if (v + m < n) children.push_back(real(v + m));
  }
  if (children.empty()) return {};
  std::vector<SendSpec> sends(children.size());
  for (uint64_t k = 0; k < segs; ++k) {
    for (size_t c = 0; c < children.size(); ++c) {
      sends[c] = {children[c], data + k * seg * elem, SegmentLength(sig.count, seg, k) * elem};
    }
    PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, sends, {}));
  }
  return {};
}

Status Algorithm<PLEXUS_COLL_BROADCAST>::Run(PeerTransport& t, const OpSignature& sig,
                                             const abi::Call& call) {
  return BinomialBroadcast(t, sig, call.recvbuf);
}

}  // namespace plexus::algos
