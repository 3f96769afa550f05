#include "munge_secret.hpp"

#include "plexus/settings/environment.hpp"
#include "store_protocol.hpp"

#include <dlfcn.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace plexus::store {
namespace {

// The parts of libmunge's ABI used here (munge.h, MUNGE 0.5): the option and
// error numbers are fixed by that header and have not changed since 0.5.
constexpr int kOptCipherType = 0;      // MUNGE_OPT_CIPHER_TYPE, an int
constexpr int kCipherAes128 = 4;       // MUNGE_CIPHER_AES128: never a credential in clear
constexpr int kOptUidRestriction = 9;  // MUNGE_OPT_UID_RESTRICTION, a uid_t
constexpr int kSuccess = 0;            // EMUNGE_SUCCESS
constexpr int kCredExpired = 15;       // EMUNGE_CRED_EXPIRED
constexpr int kCredRewound = 16;       // EMUNGE_CRED_REWOUND
constexpr int kCredReplayed = 17;      // EMUNGE_CRED_REPLAYED

struct Munge {
  using CtxCreate = void* (*)();
  using CtxDestroy = void (*)(void*);
  using CtxSet = int (*)(void*, int, ...);
  using Encode = int (*)(char**, void*, const void*, int);
  using Decode = int (*)(const char*, void*, void**, int*, uid_t*, gid_t*);
  using StrError = const char* (*)(int);
  CtxCreate ctx_create = nullptr;
  CtxDestroy ctx_destroy = nullptr;
  CtxSet ctx_set = nullptr;
  Encode encode = nullptr;
  Decode decode = nullptr;
  StrError strerror = nullptr;
  std::string load_error;  // empty when loaded
};

const Munge& Lib() {
  static Munge m;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libmunge.so.2", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      m.load_error = "libmunge.so.2 is not installed here (MUNGE, which Slurm authenticates with)";
      return;
    }
    m.ctx_create = reinterpret_cast<Munge::CtxCreate>(dlsym(h, "munge_ctx_create"));
    m.ctx_destroy = reinterpret_cast<Munge::CtxDestroy>(dlsym(h, "munge_ctx_destroy"));
    m.ctx_set = reinterpret_cast<Munge::CtxSet>(dlsym(h, "munge_ctx_set"));
    m.encode = reinterpret_cast<Munge::Encode>(dlsym(h, "munge_encode"));
    m.decode = reinterpret_cast<Munge::Decode>(dlsym(h, "munge_decode"));
    m.strerror = reinterpret_cast<Munge::StrError>(dlsym(h, "munge_strerror"));
    if (!m.ctx_create || !m.ctx_destroy || !m.ctx_set || !m.encode || !m.decode || !m.strerror) {
      m.load_error = "libmunge.so.2 lacks munge_encode/munge_decode";
    }
  });
  return m;
}

std::string ErrorText(const Munge& m, int rc) {
  const char* text = m.strerror(rc);
  return std::string(text ? text : "unknown error") + " (MUNGE error " + std::to_string(rc) + ")";
}

// The payload: a fixed tag, the binding, the secret, newline-separated.
constexpr const char* kPayloadTag = "plexus-job-secret/1";

std::string Payload(const std::string& binding, const std::string& secret) {
  return std::string(kPayloadTag) + "\n" + binding + "\n" + secret;
}

}  // namespace

std::string SlurmStepBinding(const std::string& what) {
  const char* job = std::getenv("SLURM_JOB_ID");
  const char* step = std::getenv("SLURM_STEP_ID");
  if (step == nullptr) step = std::getenv("SLURM_STEPID");
  return std::string("srun step ") + (job ? job : "?") + "." + (step ? step : "?") + ", " + what;
}

Status MungeEncodeSecret(const std::string& binding, const std::string& secret,
                         std::string* credential) {
  const Munge& m = Lib();
  if (!m.load_error.empty()) return Status::Unsupported(m.load_error);
  void* ctx = m.ctx_create();
  if (ctx == nullptr) return Status::System("munge_ctx_create failed");
  Status st = Status::Ok();
  // Encrypted whatever munged's default, and opened only for this uid.
  int set = m.ctx_set(ctx, kOptCipherType, kCipherAes128);
  if (set == kSuccess) set = m.ctx_set(ctx, kOptUidRestriction, static_cast<uid_t>(getuid()));
  char* cred = nullptr;
  const std::string payload = Payload(binding, secret);
  const int rc = set == kSuccess ? m.encode(&cred, ctx, payload.data(), int(payload.size())) : set;
  if (rc != kSuccess || cred == nullptr) {
    st = Status::Unsupported("MUNGE cannot encode a credential here: " + ErrorText(m, rc));
  } else {
    *credential = cred;
  }
  std::free(cred);
  m.ctx_destroy(ctx);
  return st;
}

Status MungeDecodeSecret(const std::string& credential, const std::string& binding,
                         std::string* secret) {
  const Munge& m = Lib();
  if (!m.load_error.empty()) return Status::Unsupported(m.load_error);
  if (credential.empty() || credential.size() > 64 * 1024 ||
      credential.find('\0') != std::string::npos) {
    return Status::InvalidArgument("not a MUNGE credential (" + std::to_string(credential.size()) +
                                   " bytes)");
  }
  void* payload = nullptr;
  int len = 0;
  uid_t uid = uid_t(-1);
  gid_t gid = gid_t(-1);
  const int rc = m.decode(credential.c_str(), nullptr, &payload, &len, &uid, &gid);
  std::string text;
  if (payload != nullptr && len > 0) text.assign(static_cast<const char*>(payload), size_t(len));
  std::free(payload);
  if (rc != kSuccess && rc != kCredExpired && rc != kCredRewound && rc != kCredReplayed) {
    return Status::Remote("MUNGE refused the job's credential: " + ErrorText(m, rc));
  }
  if (uid != getuid()) {
    return Status::Remote("the job's credential was made by uid " + std::to_string(uid) +
                          ", not by this user (uid " + std::to_string(getuid()) +
                          "): someone else answers at the job's address");
  }
  const std::string expected = Payload(binding, "");
  if (text.size() > 4096 || text.rfind(std::string(kPayloadTag) + "\n", 0) != 0) {
    return Status::Remote(
        "the credential at the job's address is not a Plexus job secret (its "
        "user made it for something else)");
  }
  if (text.rfind(expected, 0) != 0) {
    const size_t end = text.find('\n', std::strlen(kPayloadTag) + 1);
    return Status::Remote(
        "the credential at the job's address was made for " +
        QuoteKey(text.substr(
            std::strlen(kPayloadTag) + 1,
            end == std::string::npos ? std::string::npos : end - std::strlen(kPayloadTag) - 1)) +
        ", not for " + binding + " (another job of this user?)");
  }
  std::string found = text.substr(expected.size());
  if (found.empty() || found.find('\n') != std::string::npos) {
    return Status::Remote("the job's credential holds no secret");
  }
  *secret = std::move(found);
  return Status::Ok();
}

bool MungeAvailable(std::string* why) {
  static std::once_flag once;
  static bool available = false;
  static std::string reason;
  std::call_once(once, [] {
    std::string ignored;
    const Status st = MungeEncodeSecret("probe", "probe", &ignored);
    available = st.ok();
    reason = st.message();
  });
  if (!available && why) *why = reason;
  return available;
}

bool MungeWanted(std::string* why) {
  const char* off = plexus::settings::Raw(plexus::settings::Id::kSlurmMunge);
  if (off != nullptr && std::strcmp(off, "0") == 0) {
    if (why) *why = "PLEXUS_SLURM_MUNGE=0";
    return false;
  }
  return MungeAvailable(why);
}

}  // namespace plexus::store
