// Encoding and parsing of store frames; the format is described in store_protocol.hpp.
#include "store_protocol.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace plexus::store {
namespace {

// Little-endian helpers, byte by byte: correct on any host byte order and free
// of alignment assumptions about the input buffer.
void PutU16(Bytes* b, uint16_t v) {
  for (int i = 0; i < 2; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU32(Bytes* b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutU64(Bytes* b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void PutBytes(Bytes* b, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  b->insert(b->end(), p, p + n);
}

uint16_t GetU16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
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

bool KnownCommand(uint8_t c) {
  switch (static_cast<Command>(c)) {
    case Command::kSet:
    case Command::kGet:
    case Command::kAdd:
    case Command::kWait:
    case Command::kClaim:
    case Command::kReply:
      return true;
  }
  return false;
}

Status Malformed(const std::string& what) {
  return Status::InvalidArgument("malformed store frame: " + what);
}

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

void PutHeader(Bytes* out, Command command, uint32_t key_len, uint64_t value_len) {
  out->clear();
  out->reserve(kHeaderBytes + key_len + value_len);
  PutU32(out, kMagic);
  PutU16(out, kProtocolVersion);
  out->push_back(static_cast<uint8_t>(command));
  out->push_back(0);  // flags
  PutU32(out, key_len);
  PutU64(out, value_len);
}

Status CheckKey(std::string_view key) {
  if (key.size() > kStoreMaxKeyBytes) {
    return Status::InvalidArgument("store key of " + std::to_string(key.size()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(kStoreMaxKeyBytes));
  }
  return Status::Ok();
}

// Common front half of ParseRequest/ParseReply: header + completeness.
// Returns OK with *complete=false when more bytes are needed.
Status ParseFrameStart(std::span<const uint8_t> bytes, FrameHeader* header, bool* complete) {
  *complete = false;
  if (bytes.size() < kHeaderBytes) return Status::Ok();
  Status s = ParseHeader(bytes, header);
  if (!s.ok()) return s;
  *complete = bytes.size() >= header->FrameBytes();
  return Status::Ok();
}

}  // namespace

const char* CommandName(Command command) {
  switch (command) {
    case Command::kSet:
      return "SET";
    case Command::kGet:
      return "GET";
    case Command::kAdd:
      return "ADD";
    case Command::kWait:
      return "WAIT";
    case Command::kClaim:
      return "CLAIM";
    case Command::kReply:
      return "REPLY";
  }
  return "UNKNOWN";
}

Status ParseHeader(std::span<const uint8_t> bytes, FrameHeader* out) {
  if (bytes.size() < kHeaderBytes) {
    return Malformed("header needs " + std::to_string(kHeaderBytes) + " bytes, got " +
                     std::to_string(bytes.size()));
  }
  const uint8_t* p = bytes.data();
  FrameHeader h;
  h.magic = GetU32(p);
  h.version = GetU16(p + 4);
  uint8_t command = p[6];
  h.flags = p[7];
  h.key_len = GetU32(p + 8);
  h.value_len = GetU64(p + 12);

  if (h.magic != kMagic) return Malformed("bad magic " + Hex(h.magic) + " (not a store client?)");
  if (h.version != kProtocolVersion) {
    return Malformed("unsupported protocol version " + std::to_string(h.version) + " (expected " +
                     std::to_string(kProtocolVersion) + ")");
  }
  if (!KnownCommand(command)) return Malformed("unknown command " + std::to_string(command));
  h.command = static_cast<Command>(command);
  if (h.flags != 0) return Malformed("reserved flags set: " + Hex(h.flags));

  // Per-command bounds. These run before the caller buffers any key or value
  // byte, which is what keeps an announced 4 GiB value from being allocated.
  const std::string name = CommandName(h.command);
  auto bad_len = [&](const char* field, uint64_t got, const std::string& expected) {
    return Malformed(name + " " + field + " length " + std::to_string(got) + ", expected " +
                     expected);
  };
  switch (h.command) {
    case Command::kSet:
    case Command::kGet:
    case Command::kAdd:
      if (h.key_len > kStoreMaxKeyBytes) {
        return bad_len("key", h.key_len, "<= " + std::to_string(kStoreMaxKeyBytes));
      }
      if (h.command == Command::kSet) {
        if (h.value_len > kStoreMaxValueBytes) {
          return bad_len("value", h.value_len, "<= " + std::to_string(kStoreMaxValueBytes));
        }
      } else if (h.value_len != 8) {
        return bad_len("value", h.value_len, "8");
      }
      break;
    case Command::kWait:
      if (h.key_len != 0) return bad_len("key", h.key_len, "0");
      if (h.value_len < 12 || h.value_len > kMaxWaitBodyBytes) {
        return bad_len("value", h.value_len, "12.." + std::to_string(kMaxWaitBodyBytes));
      }
      break;
    case Command::kClaim:
      if (h.key_len == 0 || h.key_len > kMaxIdentityBytes) {
        return bad_len("key", h.key_len, "1.." + std::to_string(kMaxIdentityBytes));
      }
      if (h.value_len < kIdentityKeyBytes ||
          h.value_len > kIdentityKeyBytes + kMaxIdentityLabelBytes) {
        return bad_len("value", h.value_len,
                       std::to_string(kIdentityKeyBytes) + ".." +
                           std::to_string(kIdentityKeyBytes + kMaxIdentityLabelBytes));
      }
      break;
    case Command::kReply:
      if (h.key_len != 0) return bad_len("key", h.key_len, "0");
      if (h.value_len < 8 || h.value_len > kMaxReplyBodyBytes) {
        return bad_len("value", h.value_len, "8.." + std::to_string(kMaxReplyBodyBytes));
      }
      break;
  }
  *out = h;
  return Status::Ok();
}

Status ParseRequest(std::span<const uint8_t> bytes, Request* out, size_t* consumed) {
  *consumed = 0;
  FrameHeader h;
  bool complete = false;
  Status s = ParseFrameStart(bytes, &h, &complete);
  if (!s.ok() || !complete) return s;

  const uint8_t* key = bytes.data() + kHeaderBytes;
  const uint8_t* value = key + h.key_len;
  const size_t value_len = static_cast<size_t>(h.value_len);
  Request r;
  r.command = h.command;
  switch (h.command) {
    case Command::kSet:
      r.key.assign(reinterpret_cast<const char*>(key), h.key_len);
      r.value.assign(value, value + value_len);
      break;
    case Command::kGet:
      r.key.assign(reinterpret_cast<const char*>(key), h.key_len);
      r.timeout_ms = GetU64(value);
      break;
    case Command::kAdd:
      r.key.assign(reinterpret_cast<const char*>(key), h.key_len);
      r.delta = static_cast<int64_t>(GetU64(value));
      break;
    case Command::kWait: {
      r.timeout_ms = GetU64(value);
      const uint32_t count = GetU32(value + 8);
      if (count > kStoreMaxKeysPerWait) {
        return Malformed("WAIT for " + std::to_string(count) + " keys exceeds the limit of " +
                         std::to_string(kStoreMaxKeysPerWait));
      }
      size_t pos = 12;
      // Each key takes at least its 4-byte length, so a count the body cannot
      // hold is rejected before reserving room for it.
      if (uint64_t{count} * 4 > value_len - pos) {
        return Malformed("WAIT count " + std::to_string(count) + " does not fit its body");
      }
      r.keys.reserve(count);
      for (uint32_t i = 0; i < count; ++i) {
        if (value_len - pos < 4)
          return Malformed("WAIT body truncated at key " + std::to_string(i));
        const uint32_t len = GetU32(value + pos);
        pos += 4;
        if (len > kStoreMaxKeyBytes) {
          return Malformed("WAIT key " + std::to_string(i) + " of " + std::to_string(len) +
                           " bytes exceeds the limit of " + std::to_string(kStoreMaxKeyBytes));
        }
        if (value_len - pos < len) {
          return Malformed("WAIT key " + std::to_string(i) + " runs past the body");
        }
        r.keys.emplace_back(reinterpret_cast<const char*>(value + pos), len);
        pos += len;
      }
      if (pos != value_len) {
        return Malformed("WAIT body has " + std::to_string(value_len - pos) + " trailing bytes");
      }
      break;
    }
    case Command::kClaim:
      r.key.assign(reinterpret_cast<const char*>(key), h.key_len);
      if (!ValidIdentity(r.key)) {
        return Malformed("CLAIM of " + QuoteKey(r.key) +
                         ", which is not an identity (rank/N or node/N)");
      }
      r.value.assign(value, value + value_len);  // key bytes, then the label
      break;
    case Command::kReply:
      return Malformed("a REPLY frame where a request was expected");
  }
  *out = std::move(r);
  *consumed = h.FrameBytes();
  return Status::Ok();
}

Status ParseReply(std::span<const uint8_t> bytes, Reply* out, size_t* consumed) {
  *consumed = 0;
  FrameHeader h;
  bool complete = false;
  Status s = ParseFrameStart(bytes, &h, &complete);
  if (!s.ok() || !complete) return s;
  if (h.command != Command::kReply) {
    return Malformed(std::string("a ") + CommandName(h.command) +
                     " frame where a REPLY was expected");
  }
  const uint8_t* body = bytes.data() + kHeaderBytes;  // key_len is 0 for replies
  const size_t body_len = static_cast<size_t>(h.value_len);
  const auto status = static_cast<int32_t>(GetU32(body));
  const uint32_t message_len = GetU32(body + 4);
  if (status > 0) return Malformed("reply status " + std::to_string(status) + " is not final");
  if (message_len > kMaxReplyMessageBytes || message_len > body_len - 8) {
    return Malformed("reply message length " + std::to_string(message_len) + " is invalid");
  }
  const size_t payload_len = body_len - 8 - message_len;
  if (payload_len > kStoreMaxValueBytes) {
    return Malformed("reply payload of " + std::to_string(payload_len) + " bytes is too large");
  }
  Reply r;
  r.status = status;
  r.message.assign(reinterpret_cast<const char*>(body + 8), message_len);
  r.payload.assign(body + 8 + message_len, body + body_len);
  *out = std::move(r);
  *consumed = h.FrameBytes();
  return Status::Ok();
}

Status EncodeSet(std::string_view key, std::span<const uint8_t> value, Bytes* out) {
  Status s = CheckKey(key);
  if (!s.ok()) return s;
  if (value.size() > kStoreMaxValueBytes) {
    return Status::InvalidArgument("store value of " + std::to_string(value.size()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(kStoreMaxValueBytes));
  }
  PutHeader(out, Command::kSet, static_cast<uint32_t>(key.size()), value.size());
  PutBytes(out, key.data(), key.size());
  PutBytes(out, value.data(), value.size());
  return Status::Ok();
}

Status EncodeGet(std::string_view key, uint64_t timeout_ms, Bytes* out) {
  Status s = CheckKey(key);
  if (!s.ok()) return s;
  PutHeader(out, Command::kGet, static_cast<uint32_t>(key.size()), 8);
  PutBytes(out, key.data(), key.size());
  PutU64(out, timeout_ms);
  return Status::Ok();
}

Status EncodeAdd(std::string_view key, int64_t delta, Bytes* out) {
  Status s = CheckKey(key);
  if (!s.ok()) return s;
  PutHeader(out, Command::kAdd, static_cast<uint32_t>(key.size()), 8);
  PutBytes(out, key.data(), key.size());
  PutU64(out, static_cast<uint64_t>(delta));
  return Status::Ok();
}

Status EncodeWait(const std::vector<std::string>& keys, uint64_t timeout_ms, Bytes* out) {
  if (keys.size() > kStoreMaxKeysPerWait) {
    return Status::InvalidArgument("WAIT for " + std::to_string(keys.size()) +
                                   " keys exceeds the limit of " +
                                   std::to_string(kStoreMaxKeysPerWait));
  }
  uint64_t body = 12;
  for (const std::string& k : keys) {
    Status s = CheckKey(k);
    if (!s.ok()) return s;
    body += 4 + k.size();
  }
  PutHeader(out, Command::kWait, 0, body);
  PutU64(out, timeout_ms);
  PutU32(out, static_cast<uint32_t>(keys.size()));
  for (const std::string& k : keys) {
    PutU32(out, static_cast<uint32_t>(k.size()));
    PutBytes(out, k.data(), k.size());
  }
  return Status::Ok();
}

Status EncodeClaim(std::string_view identity, const IdentityKey& key, std::string_view label,
                   Bytes* out) {
  if (!ValidIdentity(identity)) {
    return Status::InvalidArgument("CLAIM of " + QuoteKey(identity) +
                                   ", which is not an identity (rank/N or node/N)");
  }
  label = label.substr(0, std::min(label.size(), kMaxIdentityLabelBytes));
  PutHeader(out, Command::kClaim, static_cast<uint32_t>(identity.size()),
            key.size() + label.size());
  PutBytes(out, identity.data(), identity.size());
  PutBytes(out, key.data(), key.size());
  PutBytes(out, label.data(), label.size());
  return Status::Ok();
}

namespace {

// "rank/12" -> true; digits only after the slash, no leading zeros, < 2^32.
bool ParseIdentityNumber(std::string_view digits) {
  if (digits.empty() || digits.size() > 10) return false;
  if (digits.size() > 1 && digits[0] == '0') return false;
  uint64_t v = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + uint64_t(c - '0');
  }
  return v <= std::numeric_limits<uint32_t>::max();
}

}  // namespace

bool ValidIdentity(std::string_view identity) {
  for (std::string_view kind : {std::string_view("rank/"), std::string_view("node/")}) {
    if (identity.substr(0, kind.size()) == kind) {
      return ParseIdentityNumber(identity.substr(kind.size()));
    }
  }
  return false;
}

std::string KeyOwner(std::string_view key) {
  constexpr std::string_view kOwned = "plexus/";
  if (key.substr(0, kOwned.size()) != kOwned) return "";
  const std::string_view rest = key.substr(kOwned.size());
  // "rank/3/..." or "node/1/...": the identity is the first two components.
  const size_t first = rest.find('/');
  if (first == std::string_view::npos) return "";
  const size_t second = rest.find('/', first + 1);
  const std::string_view identity =
      rest.substr(0, second == std::string_view::npos ? rest.size() : second);
  const std::string_view kind = rest.substr(0, first);
  if (kind != "rank" && kind != "node") return "";
  // A malformed number under an owned prefix is owned by nobody who can
  // claim it ("rank/x"): nobody may write it.
  return ValidIdentity(identity) ? std::string(identity) : std::string(kind) + "/?";
}

std::string OwnedKey(std::string_view identity, std::string_view rest) {
  return "plexus/" + std::string(identity) + "/" + std::string(rest);
}

std::string RankKey(uint32_t rank, std::string_view rest) {
  return OwnedKey("rank/" + std::to_string(rank), rest);
}

std::string NodeKey(uint32_t node, std::string_view rest) {
  return OwnedKey("node/" + std::to_string(node), rest);
}

std::string DescribeIdentity(std::string_view identity) {
  const size_t slash = identity.find('/');
  if (slash == std::string_view::npos) return std::string(identity);
  return std::string(identity.substr(0, slash)) + " " + std::string(identity.substr(slash + 1));
}

void EncodeReply(int32_t status, std::string_view message, std::span<const uint8_t> payload,
                 Bytes* out) {
  message = message.substr(0, std::min(message.size(), kMaxReplyMessageBytes));
  PutHeader(out, Command::kReply, 0, 8 + message.size() + payload.size());
  PutU32(out, static_cast<uint32_t>(status));
  PutU32(out, static_cast<uint32_t>(message.size()));
  PutBytes(out, message.data(), message.size());
  PutBytes(out, payload.data(), payload.size());
}

Bytes EncodeCounter(int64_t value) {
  Bytes b;
  b.reserve(8);
  PutU64(&b, static_cast<uint64_t>(value));
  return b;
}

bool DecodeCounter(std::span<const uint8_t> bytes, int64_t* value) {
  if (bytes.size() != 8) return false;
  *value = static_cast<int64_t>(GetU64(bytes.data()));
  return true;
}

uint64_t TimeoutToWire(std::chrono::milliseconds timeout) {
  return timeout.count() <= 0 ? 0 : ClampTimeoutMs(static_cast<uint64_t>(timeout.count()));
}

uint64_t ClampTimeoutMs(uint64_t timeout_ms) {
  return std::min(timeout_ms, kMaxTimeoutMs);
}

std::string QuoteKey(std::string_view key) {
  constexpr size_t kMaxShown = 200;
  std::string out = "'";
  for (size_t i = 0; i < key.size() && i < kMaxShown; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  out += "'";
  if (key.size() > kMaxShown) out += "... (" + std::to_string(key.size()) + " bytes)";
  return out;
}

std::string GetTimeoutMessage(std::string_view key, uint64_t timeout_ms) {
  return "timed out after " + std::to_string(timeout_ms) + " ms waiting for key " + QuoteKey(key);
}

std::string WaitTimeoutMessage(std::string_view first_missing_key, size_t missing, size_t total,
                               uint64_t timeout_ms) {
  return "timed out after " + std::to_string(timeout_ms) + " ms waiting for key " +
         QuoteKey(first_missing_key) + " (" + std::to_string(missing) + " of " +
         std::to_string(total) + " keys missing)";
}

std::string NotACounterMessage(std::string_view key, size_t value_size) {
  return "key " + QuoteKey(key) + " holds a " + std::to_string(value_size) +
         "-byte value, not an 8-byte counter";
}

}  // namespace plexus::store
