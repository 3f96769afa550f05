// The job-secret handshake; the protocol is described in plexus/auth/handshake.hpp.
#include "plexus/auth/handshake.hpp"

#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace plexus::auth {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint8_t kMagic[4] = {'P', 'L', 'X', 'A'};
constexpr char kTokenDomain[] = "plexus job token v1";  // BLAKE2b key: >= 16 bytes
constexpr char kMacLabel[] = "plexus-auth-v1";

static_assert(kKeyBytes == crypto_auth_KEYBYTES, "HMAC-SHA-512-256 key size");
static_assert(kMacBytes == crypto_auth_BYTES, "HMAC-SHA-512-256 tag size");
static_assert(kKeyBytes == crypto_kdf_KEYBYTES, "KDF master key size");
static_assert(sizeof(kTokenDomain) - 1 >= crypto_generichash_KEYBYTES_MIN, "BLAKE2b key size");

bool InitSodium() {
  return sodium_init() >= 0;
}

void PutU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

template <size_t N>
bool AllZero(const std::array<uint8_t, N>& a) {
  return std::all_of(a.begin(), a.end(), [](uint8_t b) { return b == 0; });
}

const char* TypeName(MessageType t) {
  switch (t) {
    case MessageType::kHello:
      return "HELLO";
    case MessageType::kChallenge:
      return "CHALLENGE";
    case MessageType::kProof:
      return "PROOF";
    case MessageType::kResult:
      return "RESULT";
  }
  return "UNKNOWN";
}

std::string Hex(const uint8_t* p, size_t n) {
  static const char kHex[] = "0123456789abcdef";
  std::string h;
  for (size_t i = 0; i < n; ++i) {
    h.push_back(kHex[p[i] >> 4]);
    h.push_back(kHex[p[i] & 15]);
  }
  return h;
}

const char* PurposeName(Purpose p) {
  return p == Purpose::kStore ? "the rendezvous store" : "the TCP mesh";
}

// The bytes both MACs are computed over; role is "initiator" or "responder".
std::string MacInput(const char* role, const Binding& b, const Nonce& ni, const Nonce& nr) {
  std::string in(kMacLabel, sizeof(kMacLabel) - 1);
  in.append(role);
  uint8_t fixed[1 + 8 + 4];
  fixed[0] = static_cast<uint8_t>(b.purpose);
  PutU64(fixed + 1, b.context);
  PutU32(fixed + 9, b.rank);
  in.append(reinterpret_cast<const char*>(fixed), sizeof fixed);
  in.append(reinterpret_cast<const char*>(ni.data()), ni.size());
  in.append(reinterpret_cast<const char*>(nr.data()), nr.size());
  return in;
}

Mac ComputeMac(const Secret& s, const char* role, const Binding& b, const Nonce& ni,
               const Nonce& nr) {
  const std::string in = MacInput(role, b, ni, nr);
  Mac mac{};
  crypto_auth(mac.data(), reinterpret_cast<const unsigned char*>(in.data()), in.size(),
              s.key().data());
  return mac;
}

bool VerifyMac(const Secret& s, const char* role, const Binding& b, const Nonce& ni,
               const Nonce& nr, const Mac& mac) {
  const std::string in = MacInput(role, b, ni, nr);
  return crypto_auth_verify(mac.data(), reinterpret_cast<const unsigned char*>(in.data()),
                            in.size(), s.key().data()) == 0;
}

Wire Encode(MessageType type, Purpose purpose, MessageStatus status) {
  Message m;
  m.type = type;
  m.purpose = purpose;
  m.status = status;
  return EncodeMessage(m);
}

Result Failure(int32_t code, bool refused, std::string message) {
  Result r;
  r.code = code;
  r.refused = refused;
  r.message = std::move(message);
  return r;
}

// --- Socket I/O bounded by a deadline.

int MsUntil(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, 1000));
}

Result Transfer(int fd, uint8_t* data, size_t len, bool sending, Clock::time_point deadline,
                const char* what) {
  size_t done = 0;
  while (done < len) {
    const ssize_t n = sending ? send(fd, data + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                              : recv(fd, data + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return Failure(PLEXUS_ERR_REMOTE, false,
                     std::string("the peer closed the connection before its ") + what);
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (err != EAGAIN && err != EWOULDBLOCK) {
      return Failure(PLEXUS_ERR_REMOTE, false,
                     std::string(sending ? "sending " : "receiving ") + what +
                         " failed: " + std::strerror(err));
    }
    if (Clock::now() >= deadline) {
      return Failure(PLEXUS_ERR_TIMEOUT, false,
                     std::string("timed out ") + (sending ? "sending " : "waiting for ") + what);
    }
    pollfd p{fd, static_cast<short>(sending ? POLLOUT : POLLIN), 0};
    const int rc = poll(&p, 1, MsUntil(deadline));
    if (rc < 0 && errno != EINTR) {
      return Failure(PLEXUS_ERR_SYSTEM, false, std::string("poll: ") + std::strerror(errno));
    }
  }
  return Result{};
}

Result SendWire(int fd, Wire wire, Clock::time_point deadline, const char* what) {
  return Transfer(fd, wire.data(), wire.size(), true, deadline, what);
}

Result ReceiveMessage(int fd, Clock::time_point deadline, const char* what, Wire* wire,
                      Message* out) {
  Result r = Transfer(fd, wire->data(), wire->size(), false, deadline, what);
  if (!r.ok()) return r;
  std::string error;
  if (!ParseMessage(*wire, out, &error)) {
    return Failure(PLEXUS_ERR_REMOTE, false,
                   std::string("expected a handshake ") + what + ", got " + error);
  }
  return r;
}

std::atomic<bool> g_warned{false};

}  // namespace

// --- Secret

Secret::~Secret() {
  sodium_memzero(key_.data(), key_.size());
}

bool Secret::Derive(std::string_view token, Purpose purpose, Secret* out, std::string* error) {
  *out = Secret();
  if (token.empty()) return true;
  if (!InitSodium()) {
    *error = "libsodium could not be initialised (sodium_init failed)";
    return false;
  }
  uint8_t master[crypto_kdf_KEYBYTES];
  crypto_generichash(master, sizeof master, reinterpret_cast<const unsigned char*>(token.data()),
                     token.size(), reinterpret_cast<const unsigned char*>(kTokenDomain),
                     sizeof(kTokenDomain) - 1);
  const char* context = purpose == Purpose::kStore ? "PLXSTORE" : "PLXTCPMS";
  static_assert(crypto_kdf_CONTEXTBYTES == 8, "KDF contexts are 8 characters");
  crypto_kdf_derive_from_key(out->key_.data(), out->key_.size(), 1, context, master);
  sodium_memzero(master, sizeof master);
  out->present_ = true;
  out->purpose_ = purpose;
  return true;
}

// --- Messages

bool StartsWithMagic(std::span<const uint8_t> bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), kMagic, 4) == 0;
}

Wire EncodeMessage(const Message& m) {
  Wire w{};
  std::memcpy(w.data(), kMagic, 4);
  w[4] = kVersion;
  w[5] = static_cast<uint8_t>(m.type);
  w[6] = static_cast<uint8_t>(m.purpose);
  w[7] = static_cast<uint8_t>(m.status);
  PutU64(w.data() + 8, m.context);
  PutU32(w.data() + 16, m.rank);
  // 20..23 reserved, zero
  std::memcpy(w.data() + 24, m.nonce.data(), kNonceBytes);
  std::memcpy(w.data() + 56, m.mac.data(), kMacBytes);
  return w;
}

bool ParseMessage(std::span<const uint8_t> bytes, Message* out, std::string* error) {
  auto fail = [&](std::string what) {
    *error = "malformed handshake message: " + std::move(what);
    return false;
  };
  if (bytes.size() != kMessageBytes) {
    return fail(std::to_string(bytes.size()) + " bytes, expected " + std::to_string(kMessageBytes));
  }
  const uint8_t* p = bytes.data();
  if (!StartsWithMagic(bytes)) {
    return fail("bad magic 0x" + Hex(p, 4) + " (not a Plexus peer, or one without PLEXUS_TOKEN?)");
  }
  if (p[4] != kVersion) {
    return fail("unsupported version " + std::to_string(p[4]) + " (expected " +
                std::to_string(kVersion) + ")");
  }
  if (p[5] < 1 || p[5] > 4) return fail("unknown type " + std::to_string(p[5]));
  if (p[6] < 1 || p[6] > 2) return fail("unknown purpose " + std::to_string(p[6]));
  if (p[7] > 2) return fail("unknown status " + std::to_string(p[7]));
  if (GetU32(p + 20) != 0) return fail("reserved bytes are not zero");
  Message m;
  m.type = static_cast<MessageType>(p[5]);
  m.purpose = static_cast<Purpose>(p[6]);
  m.status = static_cast<MessageStatus>(p[7]);
  m.context = GetU64(p + 8);
  m.rank = GetU32(p + 16);
  std::memcpy(m.nonce.data(), p + 24, kNonceBytes);
  std::memcpy(m.mac.data(), p + 56, kMacBytes);

  const std::string name = TypeName(m.type);
  const bool ok_status = m.status == MessageStatus::kOk;
  switch (m.type) {
    case MessageType::kHello:
      if (m.status == MessageStatus::kRejected) return fail("HELLO with status REJECTED");
      if (!AllZero(m.mac)) return fail("HELLO carries a MAC");
      break;
    case MessageType::kChallenge:
    case MessageType::kProof:
      if (m.type == MessageType::kProof && m.status == MessageStatus::kNoSecret) {
        return fail("PROOF with status NO_SECRET");
      }
      if (m.type == MessageType::kProof && !AllZero(m.nonce)) return fail("PROOF carries a nonce");
      if (!ok_status && (!AllZero(m.nonce) || !AllZero(m.mac))) {
        return fail(name + " that refuses but carries a nonce or MAC");
      }
      break;
    case MessageType::kResult:
      if (m.status == MessageStatus::kNoSecret) return fail("RESULT with status NO_SECRET");
      if (!AllZero(m.nonce) || !AllZero(m.mac)) return fail("RESULT carries a nonce or MAC");
      break;
  }
  if (m.type != MessageType::kHello && (m.context != 0 || m.rank != 0)) {
    return fail(name + " with a non-zero context or rank");
  }
  *out = m;
  return true;
}

// --- Responder

Responder::Responder(const Secret& secret, const Binding& expected)
    : secret_(secret), expected_(expected) {}

Responder::Outcome Responder::OnMessage(std::span<const uint8_t> bytes, Wire* reply,
                                        bool* has_reply, std::string* why) {
  *has_reply = false;
  auto refuse = [&](std::string text, bool send_rejection, MessageType reply_type) {
    state_ = State::kDone;
    *why = std::move(text);
    if (send_rejection) {
      *reply = Encode(reply_type, expected_.purpose, MessageStatus::kRejected);
      *has_reply = true;
    }
    return Outcome::kRefused;
  };
  if (state_ == State::kDone) {
    return refuse("sent a handshake message after the handshake ended", false,
                  MessageType::kResult);
  }
  Message m;
  std::string error;
  if (!ParseMessage(bytes, &m, &error)) {
    protocol_error_ = true;
    return refuse("sent a " + error, false, MessageType::kResult);
  }

  if (state_ == State::kAwaitHello) {
    if (m.type != MessageType::kHello) {
      protocol_error_ = true;
      return refuse(std::string("sent ") + TypeName(m.type) + " instead of HELLO", false,
                    MessageType::kChallenge);
    }
    if (m.purpose != expected_.purpose) {
      return refuse(std::string("wants to authenticate for ") + PurposeName(m.purpose) +
                        ", but this is " + PurposeName(expected_.purpose),
                    true, MessageType::kChallenge);
    }
    if (m.context != expected_.context || m.rank != expected_.rank) {
      return refuse("claims context " + std::to_string(m.context) + " and rank " +
                        std::to_string(m.rank) + " in its handshake, expected " +
                        std::to_string(expected_.context) + " and rank " +
                        std::to_string(expected_.rank),
                    true, MessageType::kChallenge);
    }
    if (!secret_.present()) {
      // No secret here: answer NO_SECRET either way, so the peer learns why.
      *reply = Encode(MessageType::kChallenge, expected_.purpose, MessageStatus::kNoSecret);
      *has_reply = true;
      state_ = State::kDone;
      if (m.status == MessageStatus::kNoSecret) return Outcome::kAccepted;  // both unauthenticated
      *why =
          "authenticates with a job secret, but PLEXUS_TOKEN is not set here (a job's processes "
          "must all have the same PLEXUS_TOKEN, or none)";
      return Outcome::kRefused;
    }
    if (m.status == MessageStatus::kNoSecret) {
      return refuse(
          "has no job secret (PLEXUS_TOKEN is not set where it runs), and one is required here",
          true, MessageType::kChallenge);
    }
    initiator_nonce_ = m.nonce;
    if (!InitSodium()) {
      return refuse("libsodium could not be initialised here", true, MessageType::kChallenge);
    }
    randombytes_buf(responder_nonce_.data(), responder_nonce_.size());
    Message challenge;
    challenge.type = MessageType::kChallenge;
    challenge.purpose = expected_.purpose;
    challenge.nonce = responder_nonce_;
    challenge.mac = ComputeMac(secret_, "responder", expected_, initiator_nonce_, responder_nonce_);
    *reply = EncodeMessage(challenge);
    *has_reply = true;
    state_ = State::kAwaitProof;
    return Outcome::kContinue;
  }

  // kAwaitProof
  if (m.type != MessageType::kProof) {
    protocol_error_ = true;
    return refuse(std::string("sent ") + TypeName(m.type) + " instead of PROOF", true,
                  MessageType::kResult);
  }
  if (m.purpose != expected_.purpose) {
    return refuse("changed purpose mid-handshake", true, MessageType::kResult);
  }
  if (m.status == MessageStatus::kRejected) {
    return refuse(
        "rejected this side's proof of the job secret: its PLEXUS_TOKEN differs from the one "
        "here",
        false, MessageType::kResult);
  }
  if (!VerifyMac(secret_, "initiator", expected_, initiator_nonce_, responder_nonce_, m.mac)) {
    return refuse(
        "failed authentication: it does not know the job secret (a different PLEXUS_TOKEN, or "
        "not a process of this job)",
        true, MessageType::kResult);
  }
  *reply = Encode(MessageType::kResult, expected_.purpose, MessageStatus::kOk);
  *has_reply = true;
  state_ = State::kDone;
  authenticated_ = true;
  return Outcome::kAccepted;
}

// --- Blocking handshakes

Result RunInitiator(int fd, const Secret& secret, const Binding& binding,
                    Clock::time_point deadline) {
  Message hello;
  hello.type = MessageType::kHello;
  hello.purpose = binding.purpose;
  hello.context = binding.context;
  hello.rank = binding.rank;
  if (secret.present()) {
    if (!InitSodium()) {
      return Failure(PLEXUS_ERR_SYSTEM, false, "libsodium could not be initialised");
    }
    randombytes_buf(hello.nonce.data(), hello.nonce.size());
  } else {
    hello.status = MessageStatus::kNoSecret;
  }
  Result r = SendWire(fd, EncodeMessage(hello), deadline, "HELLO");
  if (!r.ok()) return r;

  Wire wire{};
  Message challenge;
  r = ReceiveMessage(fd, deadline, "CHALLENGE", &wire, &challenge);
  if (!r.ok()) return r;
  if (challenge.type != MessageType::kChallenge) {
    return Failure(PLEXUS_ERR_REMOTE, false,
                   std::string("the peer answered HELLO with ") + TypeName(challenge.type));
  }
  if (challenge.status == MessageStatus::kRejected) {
    return Failure(PLEXUS_ERR_REMOTE, true,
                   secret.present()
                       ? "the peer refused the handshake (it expected a different rank or "
                         "communicator, or another kind of connection)"
                       : "the peer requires the job secret, but PLEXUS_TOKEN is not set here "
                         "(set it to the job's token)");
  }
  if (challenge.status == MessageStatus::kNoSecret) {
    if (!secret.present()) {
      Result ok;
      ok.authenticated = false;
      return ok;
    }
    return Failure(PLEXUS_ERR_REMOTE, true,
                   "the peer has no job secret (PLEXUS_TOKEN is not set where it runs) but "
                   "PLEXUS_TOKEN is set here; refusing an unauthenticated peer");
  }
  if (!secret.present()) {
    return Failure(PLEXUS_ERR_REMOTE, false,
                   "the peer sent a challenge although this side said it has no secret");
  }
  if (!VerifyMac(secret, "responder", binding, hello.nonce, challenge.nonce, challenge.mac)) {
    Message reject;
    reject.type = MessageType::kProof;
    reject.purpose = binding.purpose;
    reject.status = MessageStatus::kRejected;
    (void)SendWire(fd, EncodeMessage(reject), deadline, "PROOF");  // best effort: tell it why
    return Failure(PLEXUS_ERR_REMOTE, true,
                   "the peer proved a different job secret: PLEXUS_TOKEN differs between this "
                   "process and the peer (every process of a job needs the same token)");
  }
  Message proof;
  proof.type = MessageType::kProof;
  proof.purpose = binding.purpose;
  proof.mac = ComputeMac(secret, "initiator", binding, hello.nonce, challenge.nonce);
  r = SendWire(fd, EncodeMessage(proof), deadline, "PROOF");
  if (!r.ok()) return r;

  Message result;
  r = ReceiveMessage(fd, deadline, "RESULT", &wire, &result);
  if (!r.ok()) return r;
  if (result.type != MessageType::kResult) {
    return Failure(PLEXUS_ERR_REMOTE, false,
                   std::string("the peer answered PROOF with ") + TypeName(result.type));
  }
  if (result.status != MessageStatus::kOk) {
    return Failure(PLEXUS_ERR_REMOTE, true,
                   "the peer refused this side's proof of the job secret: PLEXUS_TOKEN differs "
                   "from the peer's");
  }
  Result ok;
  ok.authenticated = true;
  return ok;
}

Result RunResponder(int fd, const Secret& secret, const Binding& expected,
                    Clock::time_point deadline) {
  Responder responder(secret, expected);
  Wire wire{};
  const char* awaiting = "HELLO";
  for (;;) {
    Result r = Transfer(fd, wire.data(), wire.size(), false, deadline, awaiting);
    if (!r.ok()) return r;
    Wire reply{};
    bool has_reply = false;
    std::string why;
    const Responder::Outcome outcome = responder.OnMessage(wire, &reply, &has_reply, &why);
    if (has_reply) {
      r = SendWire(fd, reply, deadline,
                   outcome == Responder::Outcome::kContinue ? "CHALLENGE" : "reply");
      if (!r.ok() && outcome != Responder::Outcome::kRefused) return r;
    }
    switch (outcome) {
      case Responder::Outcome::kContinue:
        awaiting = "PROOF";
        continue;
      case Responder::Outcome::kAccepted: {
        Result ok;
        ok.authenticated = responder.authenticated();
        return ok;
      }
      case Responder::Outcome::kRefused:
        // Refused because of what the peer sent: a garbled message is a protocol
        // error, anything else a failed authentication.
        return Failure(PLEXUS_ERR_REMOTE, !responder.protocol_error(), "the peer " + why);
    }
  }
}

bool FirstUnauthenticatedUse() {
  return !g_warned.exchange(true);
}

}  // namespace plexus::auth
