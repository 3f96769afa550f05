// Broadcast. Small buffers: the data and the ranks' roots in the same
// messages (CarriedBroadcast). Larger ones: a binomial tree, once the ranks
// agree on the root (AgreeOnRoot).
//
// CarriedBroadcast is AgreeOnRoot's dissemination with the data riding
// along: in round k rank r sends to r + 2^k its root record and the data
// once it holds it (the ranks root + 0 .. root + 2^k - 1 do), and merges
// what r - 2^k sends. After ceil(log2 size) rounds, the depth of the tree,
// every rank has the verdict and the data: a root disagreement costs no
// round of its own. Every message is the record and a slot of the data's
// size, full or not (so a rank that named another root still reads whole
// messages), and the data reaches recvbuf only once the ranks are known to
// agree. It sends the data about log2(size) times per rank instead of once,
// hence small buffers only.
//
// The tree: // Ranks are renumbered relative to the root (v = rank - root mod size). A rank
// with virtual number v receives from v - m, where m is the lowest set bit of
// v, and then forwards to v + m' for every power of two m' < m (v + m' <
// size), largest first so the deepest subtrees start earliest. The root
// (v = 0) forwards to 1, 2, 4, ... The data reaches every rank in ceil(log2
// size) rounds. Large buffers travel as segments of kSegmentBytes; each
// segment goes to all children at once.
#include <cstring>
#include <vector>

#include "blocks.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"
#include "root_record.hpp"
#include "scratch.hpp"

namespace plexus::algos {
namespace {

// Up to this many bytes a broadcast carries the root agreement with the data.
constexpr uint64_t kCarriedMaxBytes = 4096;

struct CarriedHeader {
  RootRecord roots;
  uint32_t has_data;  // whether the slot after the header holds the data
  uint32_t reserved;
};

Status CarriedBroadcast(PeerTransport& t, const OpSignature& sig, void* buf) {
  const uint32_t n = t.size();
  const uint32_t r = t.rank();
  const size_t bytes = sig.count * DtypeSize(sig.dtype);
  const size_t message = sizeof(CarriedHeader) + bytes;
  Scratch scratch(2 * message);
  uint8_t* mine = scratch.data();
  uint8_t* theirs = mine + message;
  CarriedHeader held{RootRecord::Of(sig.root, r), r == sig.root, 0};
  if (held.has_data) std::memcpy(mine + sizeof held, buf, bytes);
  OpSignature agree = sig;
  agree.root = kAgreeingRoot;  // (frames that match whatever root a rank named)
  for (uint32_t dist = 1; dist < n; dist <<= 1) {
    std::memcpy(mine, &held, sizeof held);
    const SendSpec send{(r + dist) % n, mine, message};
    const RecvSpec recv{(r + n - dist) % n, theirs, message};
    PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(agree, std::span(&send, 1), std::span(&recv, 1)));
    CarriedHeader got;
    std::memcpy(&got, theirs, sizeof got);
    held.roots.Merge(got.roots);
    if (!held.has_data && got.has_data) {
      std::memcpy(mine + sizeof held, theirs + sizeof got, bytes);
      held.has_data = 1;
    }
  }
  PLEXUS_ALGOS_RETURN_IF_ERROR(held.roots.Verdict(sig, r));
  if (!held.has_data) {  // (cannot be when they agree: the data doubles its ranks each round)
    return {PLEXUS_ERR_INTERNAL, "broadcast: rank " + std::to_string(r) + " got no data"};
  }
  if (r != sig.root) std::memcpy(buf, mine + sizeof held, bytes);
  return {};
}

}  // namespace

Status BinomialBroadcast(PeerTransport& t, const OpSignature& sig, void* buf) {
  const uint32_t n = t.size();
  if (n == 1 || sig.count == 0) return {};
  if (sig.count * DtypeSize(sig.dtype) <= kCarriedMaxBytes) return CarriedBroadcast(t, sig, buf);
  PLEXUS_ALGOS_RETURN_IF_ERROR(AgreeOnRoot(t, sig));
  const size_t elem = DtypeSize(sig.dtype);
  const uint32_t v = (t.rank() + n - sig.root) % n;
  auto real = [&](uint32_t virt) { return (virt + sig.root) % n; };

  uint32_t mask = 1;
  while (mask < n && !(v & mask)) mask <<= 1;  // lowest set bit of v, or >= n for the root
  const uint64_t seg = std::max<uint64_t>(1, kSegmentBytes / elem);
  const uint64_t segs = SegmentCount(sig.count, seg);
  auto* data = static_cast<uint8_t*>(buf);

  if (v != 0) {
    const uint32_t parent = real(v - mask);
    for (uint64_t k = 0; k < segs; ++k) {
      const RecvSpec recv{parent, data + k * seg * elem, SegmentLength(sig.count, seg, k) * elem};
      PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, {}, std::span(&recv, 1)));
    }
  }
  std::vector<uint32_t> children;
  for (uint32_t m = mask >> 1; m > 0; m >>= 1) {
    if (v + m < n) children.push_back(real(v + m));
  }
  if (children.empty()) return {};
  std::vector<SendSpec> sends(children.size());
  for (uint64_t k = 0; k < segs; ++k) {
    for (size_t c = 0; c < children.size(); ++c) {
      sends[c] = {children[c], data + k * seg * elem, SegmentLength(sig.count, seg, k) * elem};
    }
    PLEXUS_ALGOS_RETURN_IF_ERROR(t.Exchange(sig, sends, {}));
  }
  return {};
}

Status Algorithm<PLEXUS_COLL_BROADCAST>::Run(PeerTransport& t, const OpSignature& sig,
                                             const abi::Call& call) {
  return BinomialBroadcast(t, sig, call.recvbuf);
}

}  // namespace plexus::algos
