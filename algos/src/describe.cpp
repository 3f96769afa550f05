#include "plexus/algos/describe.hpp"

#include "plexus/algos/dtype.hpp"

namespace plexus::algos {

std::string DescribeOp(const OpSignature& sig) {
  std::string s = std::string(CollectiveName(sig.coll)) + "(seq " + std::to_string(sig.seq);
  // alltoallv has no count that is the same on every rank (it carries 0);
  // allgatherv and allreduce_coalesced carry the sum of their counts.
  if (sig.coll == PLEXUS_COLL_ALLGATHERV || sig.coll == PLEXUS_COLL_ALLREDUCE_COALESCED) {
    s += ", total count " + std::to_string(sig.count);
  } else if (sig.coll != PLEXUS_COLL_ALLTOALLV) {
    s += ", count " + std::to_string(sig.count);
  }
  if (sig.dtype) s += std::string(", ") + DtypeName(sig.dtype);
  if (sig.op) s += std::string(", ") + ReduceOpName(sig.op);
  if (sig.coll == PLEXUS_COLL_BROADCAST || sig.coll == PLEXUS_COLL_REDUCE ||
      sig.coll == PLEXUS_COLL_GATHER || sig.coll == PLEXUS_COLL_SCATTER) {
    s += sig.root == kAgreeingRoot ? std::string(", agreeing on the root")
                                   : ", root " + std::to_string(sig.root);
  }
  if (sig.coll == PLEXUS_COLL_SEND) s += ", from rank " + std::to_string(sig.root);
  return s + ")";
}

}  // namespace plexus::algos
