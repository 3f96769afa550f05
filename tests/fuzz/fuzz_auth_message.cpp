// libFuzzer target: the job-secret handshake (auth/src/handshake.cpp) as the
// store server and the TCP mesh run it on bytes from whoever connects.
//
// The input is cut into 88-byte messages (the last one may be short) and fed
// to ParseMessage and to a Responder with a fixed secret, as a server would.
// Checks: no crash or undefined behaviour; a message that parses re-encodes
// to the same bytes; the responder never accepts a peer as authenticated
// (the fuzzer cannot know the key, so any acceptance would be a forgery);
// after it refuses, every further message is refused too.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "plexus/auth/handshake.hpp"

using namespace plexus::auth;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

const Secret& TheSecret() {
  static const Secret secret = [] {
    Secret s;
    std::string error;
    Check(Secret::Derive("fuzzing-token", Purpose::kStore, &s, &error));
    return s;
  }();
  return secret;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  // An odd length means this side has no secret (whole messages are 88 bytes,
  // so both settings see every message sequence, plus a torn tail).
  const bool with_secret = size % 2 == 0;
  Responder responder(with_secret ? TheSecret() : Secret(), Binding{Purpose::kStore, 0, 0});
  bool refused = false;
  for (size_t off = 0; off < size; off += kMessageBytes) {
    const auto chunk = bytes.subspan(off, std::min(kMessageBytes, size - off));
    Message m;
    std::string error;
    if (ParseMessage(chunk, &m, &error)) {
      const Wire again = EncodeMessage(m);
      Check(chunk.size() == kMessageBytes &&
            std::memcmp(again.data(), chunk.data(), kMessageBytes) == 0);
    } else {
      Check(!error.empty());
    }
    Wire reply{};
    bool has_reply = false;
    std::string why;
    const Responder::Outcome outcome = responder.OnMessage(chunk, &reply, &has_reply, &why);
    if (refused) Check(outcome == Responder::Outcome::kRefused);
    if (outcome == Responder::Outcome::kRefused) {
      refused = true;
      Check(!why.empty());
    }
    if (has_reply) {
      Message r;
      Check(ParseMessage(reply, &r, &error));  // our own replies are always well-formed
    }
    Check(!responder.authenticated());
    if (outcome == Responder::Outcome::kAccepted) Check(!with_secret);
  }
  return 0;
}
