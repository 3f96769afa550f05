// The MPI tags of the backend's messages: one place that knows their bits.
//
// The ABI's send/recv use kP2pTag. The backend's own allreduce schedules use
// the tags above it:
//   kP2pTag + 1 + ((((slot << count_bits) | count) << 1) | ring) * kTagKinds + kind
// where slot is the allreduce's sequence number modulo the slots MPI_TAG_UB
// leaves, kind encodes its dtype and op, so that allreduces that differ in
// dtype or op never exchange messages (they time out, and the timeout names
// the difference), ring says which schedule sent it (ranks whose counts
// differ may pick different ones, and a ring block of 2N elements is as long
// as a recursive doubling's N: they must not pair), and count is the
// message's exact element count when it is below 2^count_bits, else 0. A
// message whose tag carries its count is received with a plain MPI_Irecv of
// that count: no message of another length can match it, so the matched
// probe (and the copy Open MPI makes of an eager message that arrives before
// it) is not needed there.
#pragma once

#include <cstdint>
#include <optional>

#include "plexus/backend.h"

namespace plexus::mpi {

constexpr int kP2pTag = 0x504c;
constexpr int kTagKinds = 256;
// The kind of a tag: dtype and op, and back (dtype modulo 32).
inline int TagKind(plexus_dtype_t dtype, plexus_reduce_op_t op) {
  return int((uint32_t(dtype) % 32) * 8 + uint32_t(op) % 8);
}
inline plexus_dtype_t DtypeOfKind(int kind) {
  return plexus_dtype_t(kind / 8);
}
inline plexus_reduce_op_t OpOfKind(int kind) {
  return plexus_reduce_op_t(kind % 8);
}

struct TagParts {
  uint64_t slot = 0;
  uint64_t count = 0;  // the count field: 0 when the count is not in the tag
  bool ring = false;
  int kind = 0;
};

// How the bits of the own schedules' tags are shared out, from MPI_TAG_UB:
// the ring bit, up to 14 bits of exact count (16383 elements: a 64 KiB
// float32 block, TCP's eager limit) as long as 128 slots are left, and at
// most 2^16 slots. With Open MPI's ob1 (tag_ub 2^31 - 1): 14 count bits,
// 128 slots; with a 2^23 tag space (Open MPI's ucx PML), 6 count bits and
// 128 slots.
struct TagLayout {
  int count_bits = 0;
  uint64_t slots = 1;
  static TagLayout For(int tag_ub);

  // The largest count a tag carries (0: none), and the count field of a
  // message of count elements.
  uint64_t ExactMax() const { return count_bits ? (uint64_t(1) << count_bits) - 1 : 0; }
  uint64_t CountField(uint64_t count) const { return count <= ExactMax() ? count : 0; }
  // parts.slot < slots, parts.count <= ExactMax(), 0 <= parts.kind < kTagKinds.
  // Inline: every message a schedule posts computes its tag.
  int Tag(const TagParts& parts) const {
    const uint64_t fields =
        (((parts.slot << count_bits) | parts.count) << 1) | (parts.ring ? 1 : 0);
    return kP2pTag + 1 + int(fields * kTagKinds) + parts.kind;
  }
  // The parts of an own tag; nothing for kP2pTag or any other tag.
  std::optional<TagParts> Parts(int tag) const;
};

}  // namespace plexus::mpi
