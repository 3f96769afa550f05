#include "plexus/algos/describe.hpp"

#include <cstdio>

#include "plexus/abi/collectives.hpp"
#include "plexus/algos/dtype.hpp"

namespace plexus::algos {

std::string DescribeOp(const OpSignature& sig) {
  std::string s = std::string(CollectiveName(sig.coll)) + "(seq " + std::to_string(sig.seq);
  // alltoallv has no count that is the same on every rank (it carries 0);
  // the other v-collectives and allreduce_coalesced carry the sum of their
  // counts.
  const abi::Traits r = abi::TraitsOf(sig.coll);
  if (r.layout == abi::Layout::kCount) {
    s += ", count " + std::to_string(sig.count);
  } else if (r.layout == abi::Layout::kBufferList) {
    s += ", total count " + std::to_string(sig.count);
  } else if (r.counts_alike) {  // root holds the hash of the counts (kit::PostAlgos)
    char hash[16];
    std::snprintf(hash, sizeof hash, "%08x", sig.root);
    s += ", total count " + std::to_string(sig.count) + ", counts #" + hash;
  }
  if (sig.dtype) s += std::string(", ") + DtypeName(sig.dtype);
  if (sig.op) s += std::string(", ") + ReduceOpName(sig.op);
  if (r.root == abi::Root::kRoot) {
    s += sig.root == kAgreeingRoot ? std::string(", agreeing on the root")
                                   : ", root " + std::to_string(sig.root);
  }
  if (sig.coll == PLEXUS_COLL_SEND) s += ", from rank " + std::to_string(sig.root);
  return s + ")";
}

bool SameOp(const OpSignature& a, const OpSignature& b) {
  return a.seq == b.seq && a.coll == b.coll && a.dtype == b.dtype && a.op == b.op &&
         a.count == b.count && a.root == b.root;
}

Status CollectiveMismatch(uint32_t me, const OpSignature& mine, uint32_t peer,
                          const OpSignature& theirs, std::string_view my_where,
                          std::string_view their_where) {
  std::string s =
      "collective mismatch: rank " + std::to_string(peer) + " posted " + DescribeOp(theirs);
  s.append(their_where);
  s += " where rank " + std::to_string(me) + " (this rank) posted " + DescribeOp(mine);
  s.append(my_where);
  return {PLEXUS_ERR_REMOTE, std::move(s)};
}

Status NoProgress(uint32_t me, int64_t idle_ms, const std::vector<bool>& waiting) {
  std::string s = "rank " + std::to_string(me) + " made no progress for " +
                  std::to_string(idle_ms) + " ms waiting for rank(s)";
  for (size_t p = 0; p < waiting.size(); ++p) {
    if (waiting[p]) s += " " + std::to_string(p);
  }
  return {PLEXUS_ERR_TIMEOUT, std::move(s)};
}

}  // namespace plexus::algos
