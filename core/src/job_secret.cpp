#include "job_secret.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "plexus/log.hpp"
#include "plexus/settings/environment.hpp"
#include "store/job_token.hpp"
#include "store/munge_secret.hpp"
#include "store/private_dir.hpp"
#include "store/store_protocol.hpp"

namespace plexus {
namespace {

bool IsLoopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

bool SameAddress(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

// Whether address names this host: a loopback address, or one of the
// addresses of this host's interfaces.
bool IsThisHost(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (getaddrinfo(address.c_str(), nullptr, &hints, &list) != 0 || list == nullptr) return false;
  ifaddrs* ifs = nullptr;
  const bool have_ifs = getifaddrs(&ifs) == 0;
  bool here = false;
  for (addrinfo* ai = list; ai != nullptr && !here; ai = ai->ai_next) {
    if (IsLoopback(ai->ai_addr)) here = true;
    for (ifaddrs* i = have_ifs ? ifs : nullptr; i != nullptr && !here; i = i->ifa_next) {
      if (i->ifa_addr != nullptr && SameAddress(ai->ai_addr, i->ifa_addr)) here = true;
    }
  }
  if (have_ifs) freeifaddrs(ifs);
  freeaddrinfo(list);
  return here;
}

std::string Endpoint(const std::string& address, uint16_t port) {
  if (address.find(':') != std::string::npos) return "[" + address + "]:" + std::to_string(port);
  return address + ":" + std::to_string(port);
}

std::once_flag g_insecure_warning;

}  // namespace

bool InsecureRequested() {
  const char* v = plexus::settings::Raw(plexus::settings::Id::kInsecure);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

std::string OpenStoreConsequences(const std::string& address, uint16_t port) {
  return "anyone who can reach " + Endpoint(address, port) +
         " (every user of this host, and of the network when the address is not a loopback "
         "one) could join the job as one of its ranks, read what the ranks exchange, and end "
         "or mislead the job";
}

namespace {

// Case 4 of job_secret.hpp: the secret in a MUNGE credential, under srun.
Status SecretFromMunge(const LaunchInfo& l, std::chrono::milliseconds timeout,
                       const std::string& who, JobSecret* secret) {
  std::string token, error;
  const std::string binding = store::SlurmStepBinding(
      "store " + l.master_addr + ":" + std::to_string(l.master_port));
  if (l.rank == 0) {
    if (!store::MakeJobToken(&token, &error)) {
      return Status::System(who + ": cannot make a job secret: " + error);
    }
    Status st = store::MungeEncodeSecret(binding, token, &secret->public_credential);
    if (!st.ok()) return st.WithContext(who + ": the job secret in a MUNGE credential");
  } else {
    std::string credential;
    Status st = store::FetchPublicCredential(l.master_addr, l.master_port, timeout, &credential);
    if (st.ok()) st = store::MungeDecodeSecret(credential, binding, &token);
    if (!st.ok()) {
      return st.WithContext(who + ": the job secret from rank 0's MUNGE credential (no "
                                  "PLEXUS_TOKEN_FILE is set)");
    }
  }
  secret->token = std::move(token);
  secret->from_munge = true;
  store::SetAutomaticToken(secret->token);
  LogLine(PLEXUS_LOG_DEBUG, "plexus",
          who + ": the job's secret comes from rank 0 in a MUNGE credential");
  return Status::Ok();
}

}  // namespace

Status ChooseJobSecret(const LaunchInfo& l, std::chrono::milliseconds timeout, JobSecret* out) {
  const std::string who = "rank " + std::to_string(l.rank) + " of " + std::to_string(l.size) +
                          " (from " + l.source + ")";
  JobSecret secret;
  Status st = store::TokenFromEnvironment(&secret.token);
  if (!st.ok()) return st.WithContext(who + ": the job secret");
  if (!secret.token.empty()) {
    *out = std::move(secret);
    return Status::Ok();
  }
  if (InsecureRequested()) {
    std::call_once(g_insecure_warning, [&] {
      LogLine(PLEXUS_LOG_WARN, "plexus",
              "PLEXUS_INSECURE=1: this job runs without a secret, so " +
                  OpenStoreConsequences(l.master_addr, l.master_port) +
                  "; unset PLEXUS_INSECURE to give it one (automatic on one host; across hosts "
                  "PLEXUS_TOKEN_FILE)");
    });
    *out = std::move(secret);
    return Status::Ok();
  }
  std::string why_not_one_host;
  if (l.local_size < l.size) {
    why_not_one_host = "the launcher (" + l.source + ") puts " + std::to_string(l.local_size) +
                       " of the " + std::to_string(l.size) + " ranks on this host";
  } else if (!IsThisHost(l.master_addr)) {
    why_not_one_host = "the master address " + l.master_addr + " is not one of this host's";
  }
  std::string why_no_munge;
  if (!why_not_one_host.empty() && l.source == "Slurm" && store::MungeWanted(&why_no_munge)) {
    st = SecretFromMunge(l, timeout, who, &secret);
    if (!st.ok()) return st;
    *out = std::move(secret);
    return Status::Ok();
  }
  if (!why_not_one_host.empty()) {
    const bool srun = l.source == "Slurm";
    const std::string how =
        srun ? "Make a secret once, on a file system every node sees: `plexus-run --make-token "
               "~/.plexus-token`; then run `PLEXUS_TOKEN_FILE=~/.plexus-token srun ...` (srun "
               "passes the variable to every task; in a batch script, export it before srun). "
               "(MUNGE, which would carry one from rank 0, is not usable: " +
                   why_no_munge + ".)"
             : "Make a secret once and give it to every rank: `plexus-run --make-token "
               "~/.plexus-token`, copy the file to every host (or keep it on a shared file "
               "system) and set PLEXUS_TOKEN_FILE=~/.plexus-token for every rank.";
    return Status::InvalidUsage(
        who + ": no job secret is set and this " + (srun ? "srun step" : "job") + " spans hosts (" +
        why_not_one_host + "); without one, " +
        OpenStoreConsequences(l.master_addr, l.master_port) + ". " + how + " Only on a " +
        (srun ? "cluster where every user is trusted" : "network where every user and host is "
                                                        "trusted") +
        ": PLEXUS_INSECURE=1 runs it without one");
  }
  // One host: the first rank here makes the secret, the others read it.
  secret.automatic = true;
  secret.automatic_file = "job-" + store::PrivateFileName(l.master_addr) + "-" +
                          std::to_string(l.master_port) + ".secret";
  std::string fresh, error;
  if (!store::MakeJobToken(&fresh, &error)) {
    return Status::System(who + ": cannot make a job secret: " + error);
  }
  std::string text = fresh + "\n";
  st = store::CreateOnce(secret.automatic_file, &text);
  if (!st.ok()) {
    return st.WithContext(who + ": the automatic job secret of a job on one host (" +
                          store::PrivateDirPath() + "; or set PLEXUS_TOKEN_FILE)");
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty() || text.find('\n') != std::string::npos) {
    return Status::InvalidUsage(who + ": " + store::PrivateDirPath() + "/" + secret.automatic_file +
                                " does not hold a job secret; remove it");
  }
  secret.token = std::move(text);
  store::SetAutomaticToken(secret.token);
  LogLine(PLEXUS_LOG_DEBUG, "plexus",
          who + ": the job's secret is automatic (" + store::PrivateDirPath() + "/" +
              secret.automatic_file + ")");
  *out = std::move(secret);
  return Status::Ok();
}

Status ChooseStoreSecret(RendezvousStore& store, uint32_t rank, uint32_t size,
                         uint32_t local_size, const std::string& name,
                         std::chrono::milliseconds timeout, std::string* token,
                         std::string* secret_file) {
  const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(size) + " (" +
                          name + ")";
  std::string from_env;
  Status st = store::TokenFromEnvironment(&from_env);
  if (!st.ok()) return st.WithContext(who + ": the job secret");
  if (!from_env.empty() || size == 1) {
    token->clear();
    secret_file->clear();
    return Status::Ok();
  }
  if (InsecureRequested()) {
    std::call_once(g_insecure_warning, [&] {
      LogLine(PLEXUS_LOG_WARN, "plexus",
              "PLEXUS_INSECURE=1: this job runs without a secret, so anyone who can reach its "
              "ranks' ports could join it as a rank, read what the ranks exchange, and end or "
              "mislead it; unset PLEXUS_INSECURE to give it one (automatic on one host; across "
              "hosts PLEXUS_TOKEN_FILE)");
    });
    token->clear();
    secret_file->clear();
    return Status::Ok();
  }
  const bool in_srun_step = std::getenv("SLURM_STEP_ID") || std::getenv("SLURM_STEPID");
  if (local_size < size && in_srun_step && store::MungeWanted(nullptr)) {
    // As ChooseJobSecret's case 4: the secret in a MUNGE credential, here
    // through the caller's store (which anyone may read: the credential only
    // opens for this user).
    const std::string key = store::RankKey(0, name + "/munge-credential");
    const std::string binding = store::SlurmStepBinding("communicator " + name);
    std::string secret, error;
    if (rank == 0) {
      std::string credential;
      if (!store::MakeJobToken(&secret, &error)) {
        return Status::System(who + ": cannot make a job secret: " + error);
      }
      st = store::MungeEncodeSecret(binding, secret, &credential);
      if (st.ok()) st = store.Set(key, Bytes(credential.begin(), credential.end()), timeout);
      if (!st.ok()) return st.WithContext(who + ": the job secret in a MUNGE credential");
    } else {
      Bytes value;
      st = store.Get(key, &value, timeout);
      if (st.ok()) {
        st = store::MungeDecodeSecret(std::string(value.begin(), value.end()), binding, &secret);
      }
      if (!st.ok()) return st.WithContext(who + ": the job secret from rank 0's MUNGE credential");
    }
    *token = std::move(secret);
    secret_file->clear();
    return Status::Ok();
  }
  if (local_size < size) {
    return Status::InvalidUsage(
        who + ": no job secret is set and this job spans hosts (" + std::to_string(local_size) +
        " of its " + std::to_string(size) +
        " ranks run on this host); without one, anyone who can reach the ranks' ports could join "
        "the job as a rank, read what the ranks exchange, and end or mislead it. Make a secret "
        "once and give it to every rank: `plexus-run --make-token ~/.plexus-token`, copy the "
        "file to every host (or keep it on a shared file system) and set "
        "PLEXUS_TOKEN_FILE=~/.plexus-token for every rank. Only on a network where every user "
        "and host is trusted: PLEXUS_INSECURE=1 runs it without one");
  }
  const std::string key = store::RankKey(0, name + "/secret-file");
  std::string secret, file, error;
  if (rank == 0) {
    std::string nonce;
    if (!store::MakeJobToken(&secret, &error) || !store::MakeJobToken(&nonce, &error)) {
      return Status::System(who + ": cannot make a job secret: " + error);
    }
    file = "store-" + nonce.substr(0, 24) + ".secret";
    std::string text = secret + "\n";
    bool created = false;
    st = store::CreateOnce(file, &text, &created);
    if (st.ok() && !created) st = Status::Internal(file + " exists already");
    if (!st.ok()) {
      return st.WithContext(who + ": the automatic secret of a job on one host (" +
                            store::PrivateDirPath() + "; or set PLEXUS_TOKEN_FILE)");
    }
    st = store.Set(key, Bytes(file.begin(), file.end()), timeout);
    if (!st.ok()) {
      store::RemovePrivate(file);
      return st.WithContext(who + ": publishing the name of the job's secret file");
    }
  } else {
    Bytes value;
    st = store.Get(key, &value, timeout);
    if (!st.ok()) return st.WithContext(who + ": waiting for rank 0's job secret");
    const std::string named(value.begin(), value.end());
    // Only a name of the kind rank 0 makes; the private directory is this
    // user's, so whatever it names was written by this user.
    const bool plausible = named.size() < 100 && named.rfind("store-", 0) == 0 &&
                           named.size() > 13 && named.ends_with(".secret") &&
                           named == store::PrivateFileName(named);
    if (!plausible) {
      return Status::InvalidUsage(who + ": the store holds no usable name of rank 0's secret "
                                        "file (someone else wrote that key?)");
    }
    std::string text;
    st = store::ReadPrivate(named, &text);
    if (!st.ok()) {
      return st.WithContext(who + ": reading rank 0's job secret (every rank must run on "
                                  "this host as this user; otherwise set PLEXUS_TOKEN_FILE)");
    }
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    if (text.empty() || text.find('\n') != std::string::npos) {
      return Status::InvalidUsage(who + ": " + store::PrivateDirPath() + "/" + named +
                                  " does not hold a job secret");
    }
    secret = std::move(text);
  }
  *token = std::move(secret);
  *secret_file = std::move(file);
  return Status::Ok();
}

}  // namespace plexus
