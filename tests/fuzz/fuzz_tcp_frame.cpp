// libFuzzer target: the TCP backend's frame header check (backends/tcp/
// frame.cpp, ValidateHeader), which decides, before anything is allocated or
// read, whether a 48-byte header from a peer may be accepted.
//
// Input: 48 bytes of header as received, then an expected operation signature
// and payload size (what this rank posted), then the two rank numbers. Checks:
// no crash or undefined behaviour; an accepted DATA frame matches the expected
// signature and size exactly; an accepted FAIL frame announces at most
// kMaxFailText bytes; every error message is non-empty.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "frame.hpp"

using namespace plexus;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

template <typename T>
T Take(const uint8_t*& p, size_t& left) {
  T v{};
  const size_t n = left < sizeof(T) ? left : sizeof(T);
  std::memcpy(&v, p, n);
  p += n;
  left -= n;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < sizeof(tcp::FrameHeader)) return 0;
  tcp::FrameHeader h;
  std::memcpy(&h, data, sizeof h);  // exactly how the transport receives it
  const uint8_t* p = data + sizeof h;
  size_t left = size - sizeof h;
  algos::OpSignature expected;
  expected.seq = Take<uint64_t>(p, left);
  expected.coll = Take<uint32_t>(p, left);
  expected.dtype = Take<uint32_t>(p, left);
  expected.op = Take<uint32_t>(p, left);
  expected.count = Take<uint64_t>(p, left);
  expected.root = Take<uint32_t>(p, left);
  const uint64_t expected_bytes = Take<uint64_t>(p, left);
  const uint32_t me = Take<uint32_t>(p, left);
  const uint32_t peer = Take<uint32_t>(p, left);
  // Half the time, make the header match so the accepting paths are explored too.
  if (left > 0 && (*p & 1)) {
    h = tcp::MakeDataHeader(expected, expected_bytes);
    if (*p & 2) h.count ^= 1;
    if (*p & 4) h.payload_bytes += 1;
    if (*p & 8) h.kind = tcp::kFrameFail;
  }

  const algos::Status s = tcp::ValidateHeader(h, expected, expected_bytes, me, peer);
  if (!s.ok()) {
    Check(!s.message.empty());
    Check(s.code < 0);
    return 0;
  }
  Check(h.magic == tcp::kFrameMagic && h.version == tcp::kFrameVersion);
  if (h.kind == tcp::kFrameFail) {
    Check(h.payload_bytes <= tcp::kMaxFailText);
  } else {
    Check(h.kind == tcp::kFrameData);
    Check(h.seq == expected.seq && h.coll == expected.coll && h.dtype == expected.dtype &&
          h.op == expected.op && h.count == expected.count && h.root == expected.root);
    Check(h.payload_bytes == expected_bytes);
  }
  // Describing any header (used in mismatch messages) is safe too.
  Check(!tcp::DescribeFrame(h).empty());
  return 0;
}
