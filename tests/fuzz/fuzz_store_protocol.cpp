// libFuzzer target: the rendezvous store's frame parser (core/src/store/
// store_protocol.cpp), which reads bytes from any client that can connect.
//
// Feeds the input to ParseHeader, ParseRequest and ParseReply and checks their
// contracts: no crash, leak or undefined behaviour (ASan/UBSan); a complete
// frame consumes exactly the size its header announces and never more than
// the input; every accepted length is within its limit; a parsed request
// re-encodes to a frame that parses back to the same request (CLAIM included).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "store_protocol.hpp"

using namespace plexus;
using namespace plexus::store;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckRequestRoundTrip(const Request& r) {
  Bytes again;
  Status s;
  switch (r.command) {
    case Command::kSet:
      s = EncodeSet(r.key, r.value, &again);
      break;
    case Command::kGet:
      s = EncodeGet(r.key, r.timeout_ms, &again);
      break;
    case Command::kAdd:
      s = EncodeAdd(r.key, r.delta, &again);
      break;
    case Command::kWait:
      s = EncodeWait(r.keys, r.timeout_ms, &again);
      break;
    case Command::kClaim: {
      Check(r.value.size() >= kIdentityKeyBytes);
      IdentityKey key{};
      std::copy_n(r.value.begin(), key.size(), key.begin());
      const std::string label(r.value.begin() + key.size(), r.value.end());
      s = EncodeClaim(r.key, key, label, &again);
      break;
    }
    case Command::kReply:
      std::abort();  // ParseRequest must never return a reply
  }
  Check(s.ok());
  Request back;
  size_t consumed = 0;
  Check(ParseRequest(again, &back, &consumed).ok());
  Check(consumed == again.size());
  Check(back.command == r.command && back.key == r.key && back.value == r.value &&
        back.delta == r.delta && back.timeout_ms == r.timeout_ms && back.keys == r.keys);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);

  FrameHeader header;
  if (size >= kHeaderBytes && ParseHeader(bytes, &header).ok()) {
    Check(header.key_len <= kStoreMaxKeyBytes);
    Check(header.value_len <= kMaxReplyBodyBytes || header.value_len <= kMaxWaitBodyBytes);
    Check(header.FrameBytes() >= kHeaderBytes);
  }

  Request request;
  size_t consumed = 0;
  Status s = ParseRequest(bytes, &request, &consumed);
  Check(consumed <= size);
  if (!s.ok()) Check(consumed == 0 && !s.message().empty());
  if (s.ok() && consumed > 0) {
    Check(ParseHeader(bytes, &header).ok() && consumed == header.FrameBytes());
    Check(request.key.size() <= kStoreMaxKeyBytes);
    Check(request.value.size() <= kStoreMaxValueBytes);
    Check(request.keys.size() <= kStoreMaxKeysPerWait);
    CheckRequestRoundTrip(request);
  }

  Reply reply;
  consumed = 0;
  s = ParseReply(bytes, &reply, &consumed);
  Check(consumed <= size);
  if (!s.ok()) Check(consumed == 0);
  if (s.ok() && consumed > 0) {
    Check(reply.status <= 0);
    Check(reply.message.size() <= kMaxReplyMessageBytes);
    Check(reply.payload.size() <= kStoreMaxValueBytes);
  }
  // The same bytes as a stream cut anywhere: a prefix is "need more" or an error, never a frame.
  if (size > 0) {
    s = ParseRequest(bytes.first(size - 1), &request, &consumed);
    Check(consumed < size);
  }
  return 0;
}
