// Root agreement: before a rooted collective moves data, every rank learns
// whether all ranks named the same root, so that a disagreement fails the
// collective itself on every rank rather than completing it with data
// nobody sent (ranks 1-2 saying root 1 while rank 0 says root 0: rank 1
// "broadcasts" its own buffer, rank 0's goes nowhere, and every rank would
// report success).
//
// A dissemination all-reduce of (smallest root, a rank that named it,
// largest root, a rank that named it): in round k rank r sends what it knows
// to r + 2^k and merges what r - 2^k sends. Min and max are idempotent, so
// after ceil(log2 size) rounds every rank holds the extremes over all ranks,
// even when size is not a power of two, and every rank reaches the same
// verdict, naming the same two ranks. 16 bytes a round; the frames carry the
// signature with root kAgreeingRoot, so that they match whatever root a rank
// named (the data frames that follow carry the real one).
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/describe.hpp"
#include "root_record.hpp"

namespace plexus::algos {

Status RootRecord::Verdict(const OpSignature& sig, uint32_t me) const {
  if (min_root == max_root) return {};
  return {PLEXUS_ERR_REMOTE, "the ranks disagree on the root of " + DescribeOp(sig) + ": rank " +
                                 std::to_string(min_rank) + " posted root " +
                                 std::to_string(min_root) + ", rank " + std::to_string(max_rank) +
                                 " root " + std::to_string(max_root) + " (seen by rank " +
                                 std::to_string(me) + "; nothing was delivered)"};
}

Status AgreeOnRoot(PeerTransport& t, const OpSignature& sig) {
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  if (n == 1) return {};
  RootRecord mine = RootRecord::Of(sig.root, r);
  RootRecord theirs{};
  OpSignature agree = sig;
  agree.root = kAgreeingRoot;
  for (uint32_t dist = 1; dist < n; dist <<= 1) {
    const SendSpec send{(r + dist) % n, &mine, sizeof mine};
    const RecvSpec recv{(r + n - dist) % n, &theirs, sizeof theirs};
    PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(agree, std::span(&send, 1), std::span(&recv, 1)));
    mine.Merge(theirs);
  }
  return mine.Verdict(sig, r);
}

}  // namespace plexus::algos
