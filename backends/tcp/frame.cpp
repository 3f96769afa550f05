#include "frame.hpp"

#include "plexus/algos/dtype.hpp"

namespace plexus::tcp {

std::string DescribeFrame(const FrameHeader& h) {
  algos::OpSignature sig{h.seq, h.coll, h.dtype, h.op, h.count, h.root};
  return DescribeOp(sig);
}

algos::Status ValidateHeader(const FrameHeader& h, const algos::OpSignature& expected,
                             uint64_t expected_bytes, uint32_t me, uint32_t peer) {
  const std::string from = "rank " + std::to_string(peer);
  if (h.magic != kFrameMagic || h.version != kFrameVersion) {
    return {PLEXUS_ERR_REMOTE, "malformed frame from " + from + " (bad magic or version " +
                                   std::to_string(h.version) + "); is it a Plexus " +
                                   "TCP peer of the same version?"};
  }
  if (h.kind == kFrameFail) {
    if (h.payload_bytes > kMaxFailText) {
      return {PLEXUS_ERR_REMOTE, "malformed FAIL frame from " + from + " (" +
                                     std::to_string(h.payload_bytes) + " bytes of text)"};
    }
    return {};
  }
  if (h.kind != kFrameData) {
    return {PLEXUS_ERR_REMOTE,
            "malformed frame from " + from + " (unknown kind " + std::to_string(h.kind) + ")"};
  }
  const algos::OpSignature theirs{h.seq, h.coll, h.dtype, h.op, h.count, h.root};
  if (!algos::SameOp(theirs, expected)) {
    return algos::CollectiveMismatch(me, expected, peer, theirs);
  }
  if (h.payload_bytes != expected_bytes) {
    return {PLEXUS_ERR_REMOTE, "frame size mismatch in " + DescribeOp(expected) + ": rank " +
                                   std::to_string(me) + " expected " +
                                   std::to_string(expected_bytes) + " bytes, " + from + " sent " +
                                   std::to_string(h.payload_bytes)};
  }
  return {};
}

}  // namespace plexus::tcp
