// What ranks tell each other to agree on a root: the smallest root any of
// them named and a rank that named it, and the largest likewise. Merged with
// min and max, which are idempotent, so a dissemination in ceil(log2 size)
// rounds leaves every rank with the extremes over all ranks and the same
// verdict (root_agreement.cpp, binomial_broadcast.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "plexus/algos/status.hpp"
#include "plexus/algos/transport.hpp"

namespace plexus::algos {

struct RootRecord {
  uint32_t min_root, min_rank, max_root, max_rank;

  static RootRecord Of(uint32_t root, uint32_t rank) { return {root, rank, root, rank}; }
  // (Ties go to the lower rank, so that every rank names the same two.)
  void Merge(const RootRecord& other) {
    if (other.min_root < min_root || (other.min_root == min_root && other.min_rank < min_rank)) {
      min_root = other.min_root;
      min_rank = other.min_rank;
    }
    if (other.max_root > max_root || (other.max_root == max_root && other.max_rank < max_rank)) {
      max_root = other.max_root;
      max_rank = other.max_rank;
    }
  }
  // OK when every rank named one root; else REMOTE naming two of them, seen
  // by rank `me` (the same words on every rank).
  Status Verdict(const OpSignature& sig, uint32_t me) const;
};

}  // namespace plexus::algos
