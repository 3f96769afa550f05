// Wire format of the TCP backend: every message between two ranks is one
// frame, a fixed 48-byte header followed by payload_bytes of payload.
//
// The header repeats the signature of the operation the frame belongs to
// (sequence number, collective, dtype, op, count, root), so a receiver can
// tell when two ranks disagree about what they are doing, and say so naming
// both sides. A FAIL frame carries a failing rank's reason (text, at most
// kMaxFailText bytes) so its peers report why, not just that, it went away.
//
// Byte order is the host's; the magic doubles as an endianness check.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "plexus/algos/describe.hpp"
#include "plexus/algos/status.hpp"
#include "plexus/algos/transport.hpp"

namespace plexus::tcp {

inline constexpr uint32_t kFrameMagic = 0x46584c50;  // "PLXF"
inline constexpr uint16_t kFrameVersion = 1;
inline constexpr uint16_t kFrameData = 1;
inline constexpr uint16_t kFrameFail = 2;
inline constexpr uint64_t kMaxFailText = 4096;

struct FrameHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
  uint64_t seq;
  uint32_t coll;
  uint32_t dtype;
  uint32_t op;
  uint32_t root;
  uint64_t count;
  uint64_t payload_bytes;
};
static_assert(sizeof(FrameHeader) == 48, "frame header layout is part of the wire format");

inline FrameHeader MakeDataHeader(const algos::OpSignature& sig, uint64_t payload_bytes) {
  return FrameHeader{kFrameMagic, kFrameVersion, kFrameData, sig.seq,   sig.coll,
                     sig.dtype,   sig.op,        sig.root,   sig.count, payload_bytes};
}

inline FrameHeader MakeFailHeader(uint64_t text_bytes) {
  return FrameHeader{kFrameMagic, kFrameVersion, kFrameFail, 0, 0, 0, 0, 0, 0, text_bytes};
}

// "allreduce(seq 3, count 10, float32, sum)" — used on both sides of a mismatch message.
using algos::DescribeOp;  // "allreduce(seq 3, count 10, float32, sum)"
std::string DescribeFrame(const FrameHeader& h);

// Checks a received header before anything is allocated or read for it.
// `expected` is what this rank is doing, `expected_bytes` the payload it
// posted for; `me` and `peer` name the two sides in the message. For a FAIL
// frame returns OK when its length is sane (the caller reads the text).
algos::Status ValidateHeader(const FrameHeader& h, const algos::OpSignature& expected,
                             uint64_t expected_bytes, uint32_t me, uint32_t peer);

}  // namespace plexus::tcp
