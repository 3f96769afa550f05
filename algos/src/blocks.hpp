// How count elements are cut into `parts` contiguous blocks (the first
// count % parts blocks get one element more), and how a block is cut into
// segments so that no single frame or scratch buffer grows without bound.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "plexus/algos/transport.hpp"

namespace plexus::algos {

// Largest payload of one frame; also the size of a ring step's scratch buffer.
inline constexpr size_t kSegmentBytes = size_t{1} << 18;

// The segment of a step whose receiver reduces what it gets: the
// transport's ReduceMessageBytes, else kSegmentBytes.
inline size_t ReduceSegmentBytes(const PeerTransport& t) {
  const uint64_t asked = t.ReduceMessageBytes();
  return asked ? size_t(asked) : kSegmentBytes;
}

// The most segments of one ring step in flight at once, whatever the
// transport's PipelineDepth (scratch: up to this many kSegmentBytes).
inline constexpr uint64_t kMaxPipelineDepth = 16;

class BlockLayout {
 public:
  BlockLayout(uint64_t count, uint32_t parts) : base_(count / parts), extra_(count % parts) {}
  uint64_t offset(uint32_t block) const {
    return block * base_ + std::min<uint64_t>(block, extra_);
  }
  uint64_t length(uint32_t block) const { return base_ + (block < extra_ ? 1 : 0); }
  uint64_t max_length() const { return base_ + (extra_ ? 1 : 0); }

 private:
  uint64_t base_;
  uint64_t extra_;
};

// A rank's place in the binomial tree rooted at root (gather, scatter):
// ranks renumbered relative to the root (virtual rank v = rank - root mod
// size); low, the lowest set bit of v (size or more for the root); v heads
// the subtree of virtual ranks [v, v + span), its parent is v - low and its
// children v + 1, v + 2, v + 4, ... below v + low.
struct RootedSubtree {
  RootedSubtree(uint32_t rank, uint32_t size, uint32_t tree_root)
      : n(size), root(tree_root), v((rank + size - tree_root) % size) {
    while (low < n && !(v & low)) low <<= 1;
    span = std::min<uint32_t>(low, n - v);
  }
  uint32_t Real(uint32_t virt) const { return (virt + root) % n; }
  // Where virtual rank u's block sits, in blocks: in rank order in the
  // root's own buffer; from v on in another rank's scratch.
  uint64_t Slot(uint32_t u) const { return v == 0 ? Real(u) : u - v; }

  uint32_t n, root, v;
  uint32_t low = 1;
  uint32_t span = 1;
};

// A run of ranks of a rooted tree, in the tree's virtual numbering (virtual
// rank v is rank (v + root) % size): `count` ranks from `first` on.
struct RankRun {
  uint32_t first;
  uint32_t count;
};

// The blocks of virtual ranks [from, to) as at most two runs, each contiguous
// in rank order too: the range is cut where the virtual numbering wraps past
// rank size - 1 (at virtual rank size - root). Gather and scatter move a
// subtree's blocks as these runs, so the root can send or receive each run
// in place in its rank-ordered buffer; every rank cuts a range the same way,
// so sender and receiver agree on the frames. Returns the number of runs.
inline int RootedRuns(uint32_t from, uint32_t to, uint32_t size, uint32_t root, RankRun runs[2]) {
  const uint32_t wrap = size - root;  // virtual rank of rank 0 (size when root is 0)
  if (from < wrap && wrap < to) {
    runs[0] = {from, wrap - from};
    runs[1] = {wrap, to - wrap};
    return 2;
  }
  runs[0] = {from, to - from};
  return 1;
}

// Number of segments of at most seg_elems elements that cover len elements.
inline uint64_t SegmentCount(uint64_t len, uint64_t seg_elems) {
  return len == 0 ? 0 : (len - 1) / seg_elems + 1;  // no overflow for any seg_elems
}

// Elements of segment k of a run of len elements.
inline uint64_t SegmentLength(uint64_t len, uint64_t seg_elems, uint64_t k) {
  const uint64_t start = k * seg_elems;
  return start >= len ? 0 : std::min(seg_elems, len - start);
}

}  // namespace plexus::algos
