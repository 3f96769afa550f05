// Wire format of the rendezvous store (TcpStoreServer <-> TcpStoreClient).
//
// Internal to libplexus: included by core, its tests, and the in-tree tools
// plexus-run and plexus-bench (tools/README.md), never by a public header.
//
// Every message, in both directions, is one frame:
//
//   offset size  field
//   0      4     magic        u32 = kMagic; on the wire the bytes 'P' 'L' 'X' 'S'
//   4      2     version      u16 = kProtocolVersion
//   6      1     command      u8  (Command below)
//   7      1     flags        u8  reserved, must be 0 (so a future flag is detected, not ignored)
//   8      4     key_len      u32
//   12     8     value_len    u64
//   20     key_len   key bytes
//   ..     value_len value bytes
//
// All integers, in the header and in the bodies below, are LITTLE-ENDIAN, encoded
// byte by byte (never by memcpy of a struct), so the format is the same on every host.
//
// Bodies per command ("value" is the value field; the key field is the key):
//   SET   key = key; value = the bytes to store (<= kStoreMaxValueBytes)
//   GET   key = key; value = u64 timeout_ms (exactly 8 bytes)
//   ADD   key = key; value = i64 delta (exactly 8 bytes)
//   WAIT  key empty; value = u64 timeout_ms, u32 count (<= kStoreMaxKeysPerWait),
//         then count times { u32 len (<= kStoreMaxKeyBytes), len key bytes }; nothing after
//   CLAIM key = an identity, "rank/N" or "node/N" (ValidIdentity); value = the
//         32-byte identity key, then a label (<= kMaxIdentityLabelBytes,
//         e.g. "host a, pid 123", shown to whoever is refused it)
//   REPLY key empty; value = i32 status (an ABI status code, <= 0),
//         u32 message_len (<= kMaxReplyMessageBytes), message bytes, then the payload:
//         GET -> the stored value, ADD -> i64 new value, SET/WAIT/errors -> empty
//
// Every length is checked against its command's limit as soon as the 20-byte header
// is in, before a single byte of key or value is buffered, so a peer announcing a
// 4 GiB value costs the receiver nothing. The server answers each request with exactly
// one REPLY, in order; a client sends its next request only after the reply.
//
// Identities. Keys that begin "plexus/rank/N/" belong to rank N of the job,
// keys that begin "plexus/node/N/" to node N's launcher (KeyOwner): the server
// accepts a SET or ADD of such a key only on a connection that holds that
// identity, and answers any other with INVALID_USAGE (reads, ADD of 0
// included, are open to every client that passed the handshake). A connection takes an identity
// with CLAIM: the first claim of an identity binds it to the key it carries, for the life of the
// server; a later claim with the same key (the same process reconnecting) is accepted, one with
// another key is refused, naming the holder. So once a job's ranks and launchers have joined, a
// process that has the job secret but is not one of them cannot write what a rank or node says
// about itself: its roll-call card, stall marks, heartbeats, failure reports,
// or the job's verdict (node 0's). A connection holds at most one identity.
//
// Counters written by ADD are stored as 8 little-endian bytes, so GET of a counter
// returns those 8 bytes (the in-process store uses the same encoding).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "job_token.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/status.hpp"

namespace plexus::store {

inline constexpr uint32_t kMagic = 0x53584C50u;  // "PLXS" as little-endian bytes
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kHeaderBytes = 20;
// Error messages in replies are truncated to this; they name a key (<= 4 KiB) plus prose.
inline constexpr size_t kMaxReplyMessageBytes = 8192;
// Largest legal WAIT body: timeout + count + kStoreMaxKeysPerWait maximal keys (~16 MiB).
inline constexpr uint64_t kMaxWaitBodyBytes =
    12 + uint64_t{kStoreMaxKeysPerWait} * (4 + uint64_t{kStoreMaxKeyBytes});
// Largest legal REPLY body.
inline constexpr uint64_t kMaxReplyBodyBytes = 8 + kMaxReplyMessageBytes + kStoreMaxValueBytes;

enum class Command : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kWait = 4,
  kClaim = 5,
  kReply = 16,
};

// Limits of CLAIM (see the identities above).
inline constexpr size_t kMaxIdentityBytes = 64;
inline constexpr size_t kIdentityKeyBytes = 32;
inline constexpr size_t kMaxIdentityLabelBytes = 256;
using IdentityKey = std::array<uint8_t, kIdentityKeyBytes>;

// "SET", "GET", ...; "UNKNOWN" for any other value.
const char* CommandName(Command command);

struct FrameHeader {
  uint32_t magic = kMagic;
  uint16_t version = kProtocolVersion;
  Command command = Command::kReply;
  uint8_t flags = 0;
  uint32_t key_len = 0;
  uint64_t value_len = 0;

  // Header + key + value. Only meaningful once ParseHeader accepted the header
  // (the lengths are then bounded, so this cannot overflow).
  size_t FrameBytes() const { return kHeaderBytes + size_t{key_len} + size_t(value_len); }
};

// A decoded request. Only the fields of `command` are set.
struct Request {
  Command command = Command::kSet;
  std::string key;                // SET, GET, ADD
  Bytes value;                    // SET
  int64_t delta = 0;              // ADD
  uint64_t timeout_ms = 0;        // GET, WAIT
  std::vector<std::string> keys;  // WAIT
};

// A decoded reply.
struct Reply {
  int32_t status = PLEXUS_OK;
  std::string message;
  Bytes payload;
};

// --- Parsing. Pure functions: no I/O, no globals, no exceptions escape; safe to fuzz.
// Errors are INVALID_ARGUMENT with a message saying what was wrong ("bad magic 0x...").

// Decodes and validates the first kHeaderBytes of `bytes` (magic, version, known
// command, zero flags, every length within its command's limit). `bytes` shorter
// than kHeaderBytes is INVALID_ARGUMENT; callers with a stream check the size first.
Status ParseHeader(std::span<const uint8_t> bytes, FrameHeader* out);

// Parses one request frame from the start of `bytes`.
//   complete frame -> OK, *consumed = its size, *out filled
//   too few bytes  -> OK, *consumed = 0 (read more and call again); *out untouched
//   malformed      -> error, *consumed = 0. Also an error: a valid REPLY frame.
// Allocates only after every length was validated.
Status ParseRequest(std::span<const uint8_t> bytes, Request* out, size_t* consumed);

// Same contract for a REPLY frame (any other command is an error, as is a
// status code > 0: a server never answers "in progress").
Status ParseReply(std::span<const uint8_t> bytes, Reply* out, size_t* consumed);

// --- Encoding. Each replaces *out with one complete frame. The request encoders
// reject keys/values/key counts over the limits with INVALID_ARGUMENT (so a client
// finds out locally instead of being disconnected).
Status EncodeSet(std::string_view key, std::span<const uint8_t> value, Bytes* out);
Status EncodeGet(std::string_view key, uint64_t timeout_ms, Bytes* out);
Status EncodeAdd(std::string_view key, int64_t delta, Bytes* out);
Status EncodeWait(const std::vector<std::string>& keys, uint64_t timeout_ms, Bytes* out);
// label is cut to kMaxIdentityLabelBytes.
Status EncodeClaim(std::string_view identity, const IdentityKey& key, std::string_view label,
                   Bytes* out);
// message is truncated to kMaxReplyMessageBytes; payload must be <= kStoreMaxValueBytes.
void EncodeReply(int32_t status, std::string_view message, std::span<const uint8_t> payload,
                 Bytes* out);

// Counters (ADD) are 8 little-endian bytes.
Bytes EncodeCounter(int64_t value);
// False when `bytes` is not exactly 8 bytes long.
bool DecodeCounter(std::span<const uint8_t> bytes, int64_t* value);

// A timeout as sent on the wire: negative becomes 0, and anything beyond
// kMaxTimeoutMs becomes kMaxTimeoutMs (so deadline arithmetic can never overflow).
inline constexpr uint64_t kMaxTimeoutMs = uint64_t{365} * 24 * 3600 * 1000;  // a year
uint64_t TimeoutToWire(std::chrono::milliseconds timeout);
// The same clamp applied to a value read from the wire.
uint64_t ClampTimeoutMs(uint64_t timeout_ms);

// --- Identities and the keys they own.

// "rank/N" or "node/N", N a decimal number below 2^32 without leading zeros.
bool ValidIdentity(std::string_view identity);
// The identity that owns key: "rank/3" for "plexus/rank/3/...", "node/1" for
// "plexus/node/1/..."; "rank/?" or "node/?" for a malformed number there (owned
// by nobody, so written by nobody); "" for a key anyone may write.
std::string KeyOwner(std::string_view key);
// "plexus/<identity>/<rest>", and the same for rank N and node N.
std::string OwnedKey(std::string_view identity, std::string_view rest);
std::string RankKey(uint32_t rank, std::string_view rest);
std::string NodeKey(uint32_t node, std::string_view rest);
// "rank 3" for "rank/3".
std::string DescribeIdentity(std::string_view identity);

// --- Messages shared by the TCP server and the in-process store, so that both
// report the same thing in the same words.

// The key in single quotes, with non-printable bytes as \xNN and long keys cut
// (keys are opaque bytes and may come from an untrusted peer; logs stay one line).
std::string QuoteKey(std::string_view key);
std::string GetTimeoutMessage(std::string_view key, uint64_t timeout_ms);
std::string WaitTimeoutMessage(std::string_view first_missing_key, size_t missing, size_t total,
                               uint64_t timeout_ms);
std::string NotACounterMessage(std::string_view key, size_t value_size);

// --- Authentication with the job secret (plexus/auth/handshake.hpp).
//
// When the job secret (PLEXUS_TOKEN) is set, a connection starts with the
// plexus-auth handshake (fixed 88-byte messages whose first 4 bytes are
// 'P' 'L' 'X' 'A', told apart from a store frame by that magic) before any store
// frame, both directions: the client proves it knows the secret and checks that
// the server does too. The server refuses, logs (one line naming the client's
// address) and disconnects a client that fails the handshake, sends store
// frames without it, or has not finished it within handshake_timeout; a client
// that sent a small store request without authenticating gets one error REPLY
// saying why first. Other clients are served meanwhile: the server runs the
// handshake as per-client state in its poll loop.
//
// Without a secret on either side nothing changes on the wire (no handshake);
// a client with a secret refuses a server without one and vice versa.
//
// With or without a secret, a client is "unproven" until it has authenticated
// (with a secret) or sent its first complete, valid store request (without):
// one still unproven handshake_timeout after it connected is disconnected, and
// when too many are unproven at once the oldest is disconnected to make room,
// so idle connections of strangers (a port scanner, a health check) cannot use
// up the server's descriptors. A proven client may stay idle for the whole job.

// A store request larger than this from a client that has not authenticated is
// not read at all (it is dropped without a reply).
inline constexpr uint64_t kMaxUnauthenticatedFrameBytes = 64 * 1024;

// The text of the REPLY sent to a client that sends requests without authenticating.
inline constexpr const char* kAuthenticationRequiredMessage =
    "this rendezvous store requires authentication with the job secret: set "
    "PLEXUS_TOKEN_FILE (or PLEXUS_TOKEN) to the job's secret for every rank (plexus-run "
    "passes it to its ranks; for srun, set it before srun)";

// The one request a server answers without authentication, when it was
// given a public credential (TcpStoreServerOptions): a GET of this key, whose
// value is that credential (under Slurm, the job secret in a MUNGE credential
// that only this user can decode: munge_secret.hpp). Any other request, or
// this one on a server without a credential, is refused as before.
inline constexpr std::string_view kPublicCredentialKey = "plexus/public/credential";

// --- Server knobs that the public TcpStoreServer::Start does not expose (tests use them).
struct TcpStoreServerOptions {
  // A client that has sent part of a frame, or has a reply it does not read, and
  // makes no progress for this long is disconnected, so it cannot hold memory forever.
  // (An idle client between frames is never timed out once it has made a
  // request: ranks keep their connection. See handshake_timeout for one that never did.)
  std::chrono::milliseconds stall_timeout{10000};
  // The job secret. Unset: from the environment at Start (PLEXUS_TOKEN, or
  // PLEXUS_TOKEN_FILE: TokenFromEnvironment). Empty: no authentication.
  std::optional<std::string> token;
  // A client must prove itself this long after it connected, or it is
  // disconnected (and logged): with a secret by completing the handshake,
  // without one by sending a complete, valid store request (so that idle
  // connections of strangers do not pile up; a client's connection stays up
  // for the whole job once it has made its first request).
  std::chrono::milliseconds handshake_timeout{5000};
  // Given to anyone who asks for kPublicCredentialKey before authenticating
  // ("" : nobody). Must be safe to publish: it is, on the network.
  std::string public_credential;
};

// TcpStoreServer::Start with options.
Status StartTcpStoreServer(const std::string& bind_addr, uint16_t port,
                           const TcpStoreServerOptions& options,
                           std::unique_ptr<TcpStoreServer>* out);

// --- Client knobs that the public ConnectTcpStore does not expose (tests use them).
struct TcpStoreClientOptions {
  // The job secret. Unset: from the environment (PLEXUS_TOKEN, or PLEXUS_TOKEN_FILE:
  // TokenFromEnvironment). Empty: no authentication.
  std::optional<std::string> token;
  // The identity this client claims ("rank/3", "node/1"; "" for none), on its
  // first connection and again after every reconnection, with a key made
  // at random when the client is created. A refused claim is final, like a
  // refused secret: ConnectTcpStoreWithOptions fails with the server's reason.
  std::string identity;
  // Shown to a process that is refused this identity ("host a, pid 123").
  std::string label;
  // The key claimed with identity, instead of a random one: a launcher that
  // starts a rank again hands the new process the key its first process had
  // (plexus-run --elastic, PLEXUS_RANK_KEY), so that it gets the identity
  // back once the first is gone. Unset: random.
  std::optional<IdentityKey> identity_key;
};

// The server's public credential (kPublicCredentialKey): one unauthenticated
// GET on a connection of its own, retried while the server does not yet
// listen, until timeout. REMOTE when the server has none; nothing said about
// who sent it: the caller proves that (munge_secret.hpp checks the encoder).
Status FetchPublicCredential(const std::string& host, uint16_t port,
                             std::chrono::milliseconds timeout, std::string* credential);

// ConnectTcpStore with options. A server that refuses this client's proof of the
// secret (or a server without a secret, when this client has one) is an error at
// once, not retried until timeout: REMOTE. So is a refused identity (another
// process holds it), which is INVALID_USAGE with the server's words.
Status ConnectTcpStoreWithOptions(const std::string& host, uint16_t port,
                                  std::chrono::milliseconds timeout,
                                  const TcpStoreClientOptions& options,
                                  std::unique_ptr<RendezvousStore>* out);

// The job secret from the environment (PLEXUS_TOKEN, or PLEXUS_TOKEN_FILE):
// TokenFromEnvironment in job_token.hpp.

}  // namespace plexus::store
