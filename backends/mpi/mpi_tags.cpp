#include "mpi_tags.hpp"

#include <algorithm>

namespace plexus::mpi {

TagLayout TagLayout::For(int tag_ub) {
  // (slot, count, ring) triples the tags above kP2pTag hold, kTagKinds kinds each.
  const int64_t pairs = std::max<int64_t>((int64_t(tag_ub) - kP2pTag - 1) / kTagKinds, 1);
  int bits = 0;  // floor(log2(pairs))
  while (bits < 62 && (int64_t(1) << (bits + 1)) <= pairs) ++bits;
  TagLayout t;
  // 128 slots and the ring bit first; count bits only if 16 elements fit.
  t.count_bits = bits - 8 >= 5 ? std::min(14, bits - 8) : 0;
  t.slots = uint64_t(1) << std::min(16, std::max(bits - t.count_bits - 1, 0));
  return t;
}

std::optional<TagParts> TagLayout::Parts(int tag) const {
  if (tag <= kP2pTag) return std::nullopt;
  const uint64_t fields = uint64_t(tag - kP2pTag - 1) / kTagKinds;
  TagParts p;
  p.kind = (tag - kP2pTag - 1) % kTagKinds;
  p.ring = fields & 1;
  p.count = (fields >> 1) & ExactMax();
  p.slot = fields >> (count_bits + 1);
  return p;
}

}  // namespace plexus::mpi
