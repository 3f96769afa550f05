// Mutual challenge-response authentication of a connection with the job secret.
//
// Internal to Plexus: compiled into libplexus (the rendezvous store) and into
// libplexus-tcp.so (the TCP mesh) as the static library plexus-auth. It depends
// only on the ABI header (for status codes) and libsodium.
//
// How it works. The job secret is PLEXUS_TOKEN (plexus-run makes a fresh random
// one per job). Each use derives its own 32-byte key from it:
//   master = BLAKE2b-256(token, key "plexus job token v1")      crypto_generichash
//   key    = crypto_kdf_derive_from_key(master, id 1, context)  "PLXSTORE" or "PLXTCPMS"
// so a proof made for the store is worthless on a mesh connection and vice versa.
// The token itself never leaves the process. Then, over one connection:
//
//   initiator (connecting side)             responder (accepting side)
//   HELLO     {purpose, context, rank, Ni}  ->
//                                           <-  CHALLENGE {Nr, MACr}
//   PROOF     {MACi}                        ->
//                                           <-  RESULT    {accepted | refused}
//
//   MACr = HMAC-SHA-512-256(key, "plexus-auth-v1" "responder" purpose context rank Ni Nr)
//   MACi = HMAC-SHA-512-256(key, "plexus-auth-v1" "initiator" purpose context rank Ni Nr)
//
// Ni and Nr are 32 random bytes each (randombytes_buf); HMAC is crypto_auth and
// checked with crypto_auth_verify, which compares in constant time. Both sides
// prove knowledge of the key over both fresh nonces, with different role labels
// (so a responder's MAC cannot be reflected back as an initiator's), and the
// MAC covers what the initiator claims: for the TCP mesh the communicator nonce
// (context) and the rank it says it is. The initiator checks the responder's
// proof before giving its own; if that fails it sends PROOF with status REJECTED
// (no MAC) so the responder can log why. The RESULT message tells the initiator
// whether it was accepted, so a wrong token is a clear error on both sides,
// never a silently closed socket.
//
// Without a secret (PLEXUS_TOKEN unset or empty) a side sends HELLO / CHALLENGE
// with status NO_SECRET. Two sides without a secret agree to go on
// unauthenticated; one side with a secret and one without is refused on both
// sides ("every connection must authenticate when a token is set").
//
// This protects against strangers joining a job (a process that does not know
// the token, a stale rank of an earlier job, a port scanner). It does not
// encrypt or protect the connection's later bytes against an active attacker
// on the path; that is not its purpose.
//
// Every message is exactly kMessageBytes long (fixed layout below), so there is
// no length field to trust. All integers are little-endian, encoded byte by byte.
//
//   offset size field
//   0      4    magic    'P' 'L' 'X' 'A'
//   4      1    version  kVersion
//   5      1    type     MessageType
//   6      1    purpose  Purpose
//   7      1    status   MessageStatus
//   8      8    context  u64 (HELLO: communicator nonce for the TCP mesh, 0 for the store)
//   16     4    rank     u32 (HELLO: the rank the initiator claims to be; 0 for the store)
//   20     4    reserved must be 0
//   24     32   nonce    HELLO: Ni, CHALLENGE: Nr; otherwise zero
//   56     32   mac      CHALLENGE: MACr, PROOF: MACi; otherwise zero
//
// Thread safety: the free functions may be called from any thread. A Secret is
// immutable after construction. A Responder is used by one thread at a time.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "plexus/backend.h"

namespace plexus::auth {

inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kMessageBytes = 88;
inline constexpr size_t kKeyBytes = 32;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;

enum class Purpose : uint8_t {
  kStore = 1,    // a rank's connection to the rendezvous store
  kTcpMesh = 2,  // a connection between two ranks of the TCP backend
};

enum class MessageType : uint8_t { kHello = 1, kChallenge = 2, kProof = 3, kResult = 4 };

enum class MessageStatus : uint8_t {
  kOk = 0,
  kNoSecret = 1,  // HELLO, CHALLENGE: this side has no job secret
  kRejected = 2,  // CHALLENGE, PROOF, RESULT: this side refuses the other
};

using Nonce = std::array<uint8_t, kNonceBytes>;
using Mac = std::array<uint8_t, kMacBytes>;
using Wire = std::array<uint8_t, kMessageBytes>;

struct Message {
  MessageType type = MessageType::kHello;
  Purpose purpose = Purpose::kStore;
  MessageStatus status = MessageStatus::kOk;
  uint64_t context = 0;
  uint32_t rank = 0;
  Nonce nonce{};
  Mac mac{};
};

// What the MACs are bound to. The responder's expectation must equal what the
// initiator claims, or the initiator is refused.
struct Binding {
  Purpose purpose = Purpose::kStore;
  uint64_t context = 0;
  uint32_t rank = 0;
};

// The key derived from the job secret for one purpose; absent without a secret.
// Copyable; the key bytes are wiped (sodium_memzero) on destruction.
class Secret {
 public:
  Secret() = default;  // absent: no authentication
  Secret(const Secret&) = default;
  Secret& operator=(const Secret&) = default;
  ~Secret();

  // An empty token gives an absent Secret (returns true). False only when
  // libsodium cannot be initialised; *error then says so.
  static bool Derive(std::string_view token, Purpose purpose, Secret* out, std::string* error);

  bool present() const { return present_; }
  Purpose purpose() const { return purpose_; }
  const std::array<uint8_t, kKeyBytes>& key() const { return key_; }

 private:
  bool present_ = false;
  Purpose purpose_ = Purpose::kStore;
  std::array<uint8_t, kKeyBytes> key_{};
};

// The outcome of a handshake, or of one step of it.
struct Result {
  // PLEXUS_OK; PLEXUS_ERR_REMOTE (the peer failed or refused authentication, or
  // sent something that is not a handshake message); PLEXUS_ERR_TIMEOUT;
  // PLEXUS_ERR_SYSTEM (local failure).
  int32_t code = PLEXUS_OK;
  // On success: whether both sides proved the secret (false: both sides had
  // none and agreed to go on without authentication).
  bool authenticated = false;
  // On failure: authentication itself failed (a different or missing secret),
  // so retrying with the same settings cannot help. False for I/O errors.
  bool refused = false;
  std::string message;  // on failure: what went wrong, from this side's point of view

  bool ok() const { return code == PLEXUS_OK; }
};

// --- Messages. Pure functions: no I/O, no globals, no exceptions; safe to fuzz.

// True when bytes begins with the handshake magic (needs >= 4 bytes).
bool StartsWithMagic(std::span<const uint8_t> bytes);

Wire EncodeMessage(const Message& message);

// Decodes exactly kMessageBytes. Checks magic, version, type, purpose, status,
// the reserved field, and that fields unused by the type are zero. On failure
// returns false and *error says what was wrong.
bool ParseMessage(std::span<const uint8_t> bytes, Message* out, std::string* error);

// --- The responder as a state machine over messages, for event loops (the
// store server feeds it whole messages as they arrive on a non-blocking socket).
class Responder {
 public:
  enum class Outcome {
    kContinue,  // send *reply, then feed the next message
    kAccepted,  // send *reply; the peer is in (authenticated() says whether it proved the secret)
    kRefused,   // send *reply if *has_reply, then close; *why says what the peer did wrong
  };

  // Does not keep references: copies secret and expected.
  Responder(const Secret& secret, const Binding& expected);

  // bytes: one received message (any length is accepted here; anything but
  // kMessageBytes is refused). Never throws.
  Outcome OnMessage(std::span<const uint8_t> bytes, Wire* reply, bool* has_reply, std::string* why);

  bool authenticated() const { return authenticated_; }
  // After kRefused: the peer sent something that is not a well-formed handshake
  // message (garbage, another protocol), rather than failing authentication.
  bool protocol_error() const { return protocol_error_; }

 private:
  enum class State { kAwaitHello, kAwaitProof, kDone };
  Secret secret_;
  Binding expected_;
  State state_ = State::kAwaitHello;
  Nonce initiator_nonce_{};
  Nonce responder_nonce_{};
  bool authenticated_ = false;
  bool protocol_error_ = false;
};

// --- Blocking handshakes over a connected stream socket (blocking or not: every
// send/recv is MSG_DONTWAIT and waits in poll()), bounded by deadline. On
// failure the socket's stream position is unknown: the caller closes it.

Result RunInitiator(int fd, const Secret& secret, const Binding& binding,
                    std::chrono::steady_clock::time_point deadline);

// expected: what the initiator must claim (e.g. the rank its TCP hello named).
Result RunResponder(int fd, const Secret& secret, const Binding& expected,
                    std::chrono::steady_clock::time_point deadline);

// True exactly once per copy of this library in a process (libplexus has one,
// each backend its own): callers use it to warn once that connections are
// not authenticated because PLEXUS_TOKEN is unset.
bool FirstUnauthenticatedUse();

}  // namespace plexus::auth
