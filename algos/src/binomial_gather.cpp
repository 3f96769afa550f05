// Binomial-tree gather to sig.root, once the ranks agree on the root
// (AgreeOnRoot): the tree of BinomialReduce, but blocks are concatenated
// instead of reduced.
//
// Ranks are renumbered relative to the root (v = rank - root mod size). With
// m the lowest set bit of v, rank v heads the subtree of virtual ranks
// [v, v + m) (cut at size); its children are v + 1, v + 2, v + 4, ... below
// v + m. A rank receives every child's subtree at once, each into its place,
// then sends its whole subtree to its parent v - m as one frame. The root
// (v = 0, whose subtree is every rank) receives into recvbuf; the other
// heads of subtrees gather into scratch memory in virtual order (at most
// size / 2 blocks); a leaf sends straight from sendbuf. ceil(log2 size)
// rounds instead of the size - 1 of a linear gather; the root still
// receives size - 1 blocks (it must), and no other rank forwards more than
// half of them.
//
// Virtual order is rank order rotated by the root, so a subtree's blocks are
// one or two runs in the root's recvbuf: they travel as those runs
// (RootedRuns), one frame each, and land in place. Blocks travel whole:
// scratch holds a subtree anyway, and segments would only add frames.
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

Status BinomialGather(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
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
    base = static_cast<uint8_t*>(recvbuf);
    // In place (sendbuf == recvbuf + root * count) the root's block is there.
    if (sendbuf != at(0)) std::memcpy(at(0), sendbuf, block);
  } else if (span > 1) {
    subtree = Scratch(uint64_t(span) * block);
    base = subtree.data();
    std::memcpy(at(v), sendbuf, block);
  }

  // Every child's subtree at once: first runs in one batch, then the one
  // second run a range cut at the wrap can have (two frames from one peer
  // are never in one batch, so their order needs no promise of the
  // transport's).
  std::vector<RecvSpec> recvs[2];
  for (uint32_t m = 1; m < low && v + m < n; m <<= 1) {
    RankRun runs[2];
    const int k = RootedRuns(v + m, std::min(v + 2 * m, n), n, sig.root, runs);
    for (int j = 0; j < k; ++j) {
      recvs[j].push_back({real(v + m), at(runs[j].first), uint64_t(runs[j].count) * block});
    }
  }
  for (const std::vector<RecvSpec>& batch : recvs) {
    if (!batch.empty()) PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, {}, batch));
  }
  if (v == 0) return {};

  // The whole subtree to the parent, run by run as it cuts them too.
  RankRun runs[2];
  const int k = RootedRuns(v, v + span, n, sig.root, runs);
  for (int j = 0; j < k; ++j) {
    const void* data = span == 1 ? sendbuf : at(runs[j].first);
    const SendSpec send{real(v - low), data, uint64_t(runs[j].count) * block};
    PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, std::span(&send, 1), {}));
  }
  return {};
}

Status Algorithm<PLEXUS_COLL_GATHER>::Run(PeerTransport& t, const OpSignature& sig,
                                          const abi::Call& call) {
  return BinomialGather(t, sig, call.sendbuf, call.recvbuf);
}

}  // namespace plexus::algos
