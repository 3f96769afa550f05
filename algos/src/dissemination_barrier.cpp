// Dissemination barrier (Hensgen, Finkel and Manber): in round k every rank
// sends an empty frame to rank + 2^k and waits for one from rank - 2^k. After
// ceil(log2 size) rounds every rank has heard, directly or indirectly, from
// every other, so none can leave before all have arrived.
#include "plexus/algos/collectives.hpp"

namespace plexus::algos {

Status DisseminationBarrier(PeerTransport& t, const OpSignature& sig) {
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  for (uint32_t dist = 1; dist < n; dist <<= 1) {
    const SendSpec send{(r + dist) % n, nullptr, 0};
    const RecvSpec recv{(r + n - dist) % n, nullptr, 0};
    PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, std::span(&send, 1), std::span(&recv, 1)));
  }
  return {};
}

Status Algorithm<PLEXUS_COLL_BARRIER>::Run(PeerTransport& t, const OpSignature& sig,
                                           const abi::Call&) {
  return DisseminationBarrier(t, sig);
}

}  // namespace plexus::algos
