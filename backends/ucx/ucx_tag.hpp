// The 64-bit UCP tag of every message this backend sends.
//
// UCX matches a receive against (sender's tag & mask) == (recv tag & mask), so
// everything that must keep two messages apart lives in the tag:
//
//   63..62  kind      collective step, send/recv, control (failure report), hello
//   61..56  comm      6 bits of a hash of the communicator's job-unique name
//   55..40  source    the sender's rank (so receives name their peer exactly)
//   39..20  sequence  the operation's number in its communicator (collectives)
//                     or the message's number on its (sender, receiver) pair
//                     (send/recv), modulo 2^20
//   19..0   signature collectives: collective (4 bits), dtype (4), op (3) and 9
//                     bits of a hash of count and root; send/recv: dtype (4)
//
// Each communicator has its own ucp_worker, so communicators cannot cross
// anyway; the comm bits are a second line of defence and show in UCX traces.
// Operations of different sequence numbers never match, so a rank that runs
// ahead (a broadcast root) cannot feed a later operation's data into an
// earlier one. Ranks that post different collectives, dtypes, ops, counts or
// roots at the same sequence number carry different signature bits and never
// exchange data: the operation times out and the probe/control exchange in
// ucx_transport.cpp names both sides. Counts of send/recv are not in the tag
// on purpose: a count mismatch there matches and is caught at once by the
// received length (or UCX's truncation status).
#pragma once

#include <cstdint>

#include "plexus/algos/transport.hpp"

namespace plexus::ucx {

enum class TagKind : uint64_t { kCollective = 0, kPointToPoint = 1, kControl = 2, kHello = 3 };

constexpr int kKindShift = 62;
constexpr int kCommShift = 56;
constexpr int kSourceShift = 40;
constexpr int kSeqShift = 20;
constexpr uint64_t kCommBits = 0x3f, kSourceBits = 0xffff, kSeqBits = 0xfffff, kSigBits = 0xfffff;
// Ranks must fit the source field.
constexpr uint32_t kMaxRanks = uint32_t(kSourceBits) + 1;

// Everything but the signature: a probe with this mask finds any message of
// one operation from one source, whatever operation the sender thinks it is.
constexpr uint64_t kMaskNoSignature = ~kSigBits;
// Kind and communicator: control messages from any source.
constexpr uint64_t kMaskKindComm = (uint64_t(3) << kKindShift) | (kCommBits << kCommShift);
constexpr uint64_t kMaskAll = ~uint64_t(0);

inline uint64_t MakeTag(TagKind kind, uint32_t comm_id, uint32_t source, uint64_t seq,
                        uint64_t signature) {
  return (uint64_t(kind) << kKindShift) | ((uint64_t(comm_id) & kCommBits) << kCommShift) |
         ((uint64_t(source) & kSourceBits) << kSourceShift) | ((seq & kSeqBits) << kSeqShift) |
         (signature & kSigBits);
}

inline uint32_t TagSource(uint64_t tag) {
  return uint32_t((tag >> kSourceShift) & kSourceBits);
}

// 64-bit mix (splitmix64's finaliser): every input bit affects every output bit.
inline uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The signature bits of a collective: coll, dtype and op exactly (so that a
// mismatch can be described from a probed tag), count and root hashed.
inline uint64_t CollectiveSignature(const algos::OpSignature& s) {
  const uint64_t hash = Mix(s.count ^ (uint64_t(s.root) << 40) ^ 0x5d1f) & 0x1ff;
  return (uint64_t(s.coll & 0xf) << 16) | (uint64_t(s.dtype & 0xf) << 12) |
         (uint64_t(s.op & 0x7) << 9) | hash;
}

// The parts of a signature that CollectiveSignature keeps exactly.
struct SignatureFields {
  uint32_t coll, dtype, op;
};
inline SignatureFields DecodeSignature(uint64_t tag) {
  return {uint32_t((tag >> 16) & 0xf), uint32_t((tag >> 12) & 0xf), uint32_t((tag >> 9) & 0x7)};
}

// A communicator id from its name: the same on every rank, no agreement needed.
inline uint32_t CommId(const char* name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char* p = name; p && *p; ++p) h = (h ^ uint8_t(*p)) * 1099511628211ull;
  return uint32_t(Mix(h) & kCommBits);
}

}  // namespace plexus::ucx
