// Binomial-tree scatter from sig.root, once the ranks agree on the root
// (AgreeOnRoot): BinomialGather run backwards.
//
// Ranks are renumbered relative to the root (v = rank - root mod size). With
// m the lowest set bit of v, rank v heads the subtree of virtual ranks
// [v, v + m) (cut at size) and receives all of its blocks from its parent
// v - m as one frame; then it sends each child v + m' (m' = m/2, m/4, ...,
// 1, largest subtree first so the deepest starts earliest) that child's
// subtree, all at once, and keeps its own block. The root (v = 0) sends
// straight out of sendbuf; the other heads of subtrees receive into scratch
// memory in virtual order (at most size / 2 blocks) and copy their own block
// out; a leaf receives straight into recvbuf. ceil(log2 size) rounds.
//
// Virtual order is rank order rotated by the root, so a subtree's blocks are
// one or two runs of the root's sendbuf: they travel as those runs
// (RootedRuns), one frame each, straight out of place.
//
// Every frame carries sig, whose count is the block size: a rank that
// posted another count is a collective mismatch (REMOTE) on its first
// frame, before any byte of it lands.
#include <cstring>
#include <vector>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"
#include "scratch.hpp"

namespace plexus::algos {

Status BinomialScatter(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                       void* recvbuf) {
  const size_t elem = DtypeSize(sig.dtype);
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  const uint64_t block = sig.count * elem;
  if (sig.count == 0) return {};
  PLEXUS_ALGOS_RETURN_IF_ERROR(AgreeOnRoot(t, sig));  // (nothing to agree on for one rank)
  const RootedSubtree tree(r, n, sig.root);
  const uint32_t v = tree.v, low = tree.low, span = tree.span;  // v's subtree: [v, v + span)
  auto real = [&](uint32_t virt) { return tree.Real(virt); };

  // Where the block of virtual rank u (in v's subtree) lives on this rank.
  Scratch subtree;
  uint8_t* base = nullptr;
  auto at = [&](uint32_t u) { return base + tree.Slot(u) * block; };
  if (v == 0) {
    base = const_cast<uint8_t*>(static_cast<const uint8_t*>(sendbuf));  // only read
  } else {
    if (span > 1) {
      subtree = Scratch(uint64_t(span) * block);
      base = subtree.data();
    }
    // The subtree from the parent, run by run as the parent cuts it.
    RankRun runs[2];
    const int k = RootedRuns(v, v + span, n, sig.root, runs);
    for (int j = 0; j < k; ++j) {
      void* data = span == 1 ? recvbuf : at(runs[j].first);
      const RecvSpec recv{real(v - low), data, uint64_t(runs[j].count) * block};
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, {}, std::span(&recv, 1)));
    }
  }
  // Its own block, unless it is there already: in place on the root
  // (recvbuf == sendbuf + root * count), or received into place by a leaf.
  if ((v == 0 || span > 1) && recvbuf != at(v)) std::memcpy(recvbuf, at(v), block);

  // Every child's subtree at once: first runs in one batch, then the one
  // second run a range cut at the wrap can have (two frames to one peer are
  // never in one batch, so their order needs no promise of the transport's).
  std::vector<SendSpec> sends[2];
  for (uint32_t m = low >> 1; m > 0; m >>= 1) {
    if (v + m >= n) continue;
    RankRun runs[2];
    const int k = RootedRuns(v + m, std::min(v + 2 * m, n), n, sig.root, runs);
    for (int j = 0; j < k; ++j) {
      sends[j].push_back({real(v + m), at(runs[j].first), uint64_t(runs[j].count) * block});
    }
  }
  for (const std::vector<SendSpec>& batch : sends) {
    if (!batch.empty()) PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, batch, {}));
  }
  return {};
}

Status Algorithm<PLEXUS_COLL_SCATTER>::Run(PeerTransport& t, const OpSignature& sig,
                                           const abi::Call& call) {
  return BinomialScatter(t, sig, call.sendbuf, call.recvbuf);
}

}  // namespace plexus::algos
