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

}  // namespace plexus::algos
