// Recursive-doubling allreduce, for small vectors where latency, not
// bandwidth, decides.
//
// With p2 the largest power of two <= size and rem = size - p2, the first
// 2*rem ranks pair up: each even one hands its vector to the odd one above it
// and waits. The remaining p2 ranks (renumbered 0..p2-1) then, for mask = 1,
// 2, 4, ..., exchange their whole vector with the partner whose number differs
// in that bit and reduce. After log2(p2) rounds all hold the result, and each
// odd rank of a pair gives it back to its even partner. Every rank computes
// the same pairwise combinations (only operands swap sides, and every op is
// commutative), so all ranks end with bit-identical results.
#include <cstring>
#include <vector>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"
#include "scratch.hpp"

namespace plexus::algos {

Status RecursiveDoublingAllreduce(PeerTransport& t, const OpSignature& sig, const void* sendbuf,
                                  void* recvbuf) {
  const size_t elem = DtypeSize(sig.dtype);
  const size_t bytes = sig.count * elem;
  auto* out = static_cast<uint8_t*>(recvbuf);
  if (sendbuf != recvbuf && bytes > 0) std::memcpy(out, sendbuf, bytes);
  const uint32_t n = t.size();
  if (n == 1 || sig.count == 0) return {};
  const uint32_t r = t.rank();
  uint32_t p2 = 1;
  while (p2 * 2 <= n) p2 *= 2;
  const uint32_t rem = n - p2;
  Scratch scratch(bytes);

  // Fold the extra ranks in.
  int64_t vrank;  // number among the p2 participants, -1 when sitting out
  if (r < 2 * rem) {
    if (r % 2 == 0) {
      const SendSpec s{r + 1, out, bytes};
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, std::span(&s, 1), {}));
      vrank = -1;
    } else {
      const RecvSpec rv{r - 1, scratch.data(), bytes};
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, {}, std::span(&rv, 1)));
      ReduceInto(out, scratch.data(), sig.count, sig.dtype, sig.op);
      vrank = r / 2;
    }
  } else {
    vrank = r - rem;
  }
  auto real = [&](uint32_t v) { return v < rem ? 2 * v + 1 : v + rem; };

  if (vrank >= 0) {
    for (uint32_t mask = 1; mask < p2; mask <<= 1) {
      const uint32_t partner = real(uint32_t(vrank) ^ mask);
      const SendSpec s{partner, out, bytes};
      const RecvSpec rv{partner, scratch.data(), bytes};
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, std::span(&s, 1), std::span(&rv, 1)));
      ReduceInto(out, scratch.data(), sig.count, sig.dtype, sig.op);
    }
    if (sig.op == PLEXUS_OP_AVG) FinishAverage(out, sig.count, sig.dtype, n);
  }
  // Unfold: odd ranks of the first pairs return the result.
  if (r < 2 * rem) {
    if (r % 2 == 1) {
      const SendSpec s{r - 1, out, bytes};
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, std::span(&s, 1), {}));
    } else {
      const RecvSpec rv{r + 1, out, bytes};
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, {}, std::span(&rv, 1)));
    }
  }
  return {};
}

}  // namespace plexus::algos
