#include "job.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "plexus/log.hpp"
#include "plexus/settings/environment.hpp"
#include "roll_call.hpp"
#include "store/private_dir.hpp"
#include "store/store_protocol.hpp"

namespace plexus {
namespace {

// The local address the kernel would use to reach host:port. A UDP connect
// sends nothing; it only asks the routing table.
std::string LocalAddressTowards(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || !res) {
    return "127.0.0.1";
  }
  std::string result = "127.0.0.1";
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    char text[INET_ADDRSTRLEN];
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof text)) {
      result = text;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return result;
}

// The store of a job without a rendezvous point: every call explains.
class NoRendezvousStore final : public RendezvousStore {
 public:
  explicit NoRendezvousStore(std::string why) : why_(std::move(why)) {}
  Status Set(const std::string&, const Bytes&, std::chrono::milliseconds) override { return No(); }
  Status Get(const std::string&, Bytes*, std::chrono::milliseconds) override { return No(); }
  Status Add(const std::string&, int64_t, int64_t*, std::chrono::milliseconds) override {
    return No();
  }
  Status Wait(const std::vector<std::string>&, std::chrono::milliseconds) override { return No(); }

 private:
  Status No() const { return Status::InvalidUsage(why_); }
  std::string why_;
};

// A PLEXUS_* variable that is no setting is most likely a typo that would
// otherwise be ignored in silence: rank 0 says so, once per process.
void WarnUnknownSettings(uint32_t rank) {
  static std::once_flag once;
  if (rank != 0) return;
  std::call_once(once, [] {
    for (const std::string& line : settings::UnknownWarnings()) {
      LogLine(PLEXUS_LOG_WARN, "plexus", line);
    }
  });
}

// PLEXUS_RANK_KEY: the store identity key plexus-run --elastic gives each
// rank (64 hex digits), the same for the rank started again. Unset: none.
Status RankKeyFromEnv(std::optional<store::IdentityKey>* key) {
  const char* text = plexus::settings::Raw(plexus::settings::Id::kRankKey);
  if (!text || !*text) return Status::Ok();
  store::IdentityKey k{};
  auto digit = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  bool ok = std::strlen(text) == 2 * k.size();
  for (size_t i = 0; ok && i < k.size(); ++i) {
    const int hi = digit(text[2 * i]), lo = digit(text[2 * i + 1]);
    ok = hi >= 0 && lo >= 0;
    k[i] = uint8_t(hi * 16 + lo);
  }
  if (!ok) {
    return Status::InvalidArgument("PLEXUS_RANK_KEY must be " + std::to_string(2 * k.size()) +
                                   " lowercase hex digits (plexus-run sets it)");
  }
  *key = k;
  return Status::Ok();
}

}  // namespace

Status GetJob(std::chrono::milliseconds timeout, std::shared_ptr<Job>* out) {
  static std::mutex mutex;
  static std::shared_ptr<Job> job;
  std::lock_guard<std::mutex> lock(mutex);
  if (job) {
    *out = job;
    return Status::Ok();
  }
  auto j = std::make_shared<Job>();
  Status st = DiscoverLaunch(ProcessEnv(), &j->launch);
  if (!st.ok()) return st.WithContext("launch environment");
  const LaunchInfo& l = j->launch;
  SetLogRank(l.rank);
  WarnUnknownSettings(l.rank);
  // PLEXUS_SOCKET_IFNAME names the interface backends listen on; checked
  // first, so that a wrong name is reported before anything waits.
  std::string ifname_address;
  const char* ifname = plexus::settings::Raw(plexus::settings::Id::kSocketIfname);
  if (ifname != nullptr && *ifname != '\0') {
    st = InterfaceAddress(ifname, &ifname_address);
    if (!st.ok()) return st.WithContext("rank " + std::to_string(l.rank));
  }
  if (l.size == 1 && l.master_addr.empty()) {
    j->store = MakeInProcessStore();
  } else if (!HasRendezvous(l)) {
    j->store = std::make_unique<NoRendezvousStore>(NoRendezvousMessage(l));
    j->has_rendezvous = false;
  } else {
    st = ChooseJobSecret(l, timeout, &j->secret);
    if (!st.ok()) return st;
    if (!l.store_hosted && l.rank == 0) {
      store::TcpStoreServerOptions options;
      options.token = j->secret.token;
      options.public_credential = j->secret.public_credential;
      st = store::StartTcpStoreServer(l.master_addr, l.master_port, options, &j->server);
      if (!st.ok()) {
        const bool slurm_port = l.source == "Slurm" && !std::getenv("MASTER_PORT") &&
                                !plexus::settings::Raw(plexus::settings::Id::kMasterPort);
        return st.WithContext(
            "rank 0 could not host the rendezvous store at " + l.master_addr + ":" +
            std::to_string(l.master_port) +
            (slurm_port ? " (the port Plexus derives from the Slurm job and step ids; set "
                          "MASTER_PORT to choose another)"
                        : ""));
      }
    }
    // The store knows this process as rank l.rank from now on: what the roll
    // call, the stall marks and the out-of-band exchange write under
    // "plexus/rank/<rank>/" is accepted from this connection only.
    store::TcpStoreClientOptions options;
    options.token = j->secret.token;
    options.identity = "rank/" + std::to_string(l.rank);
    options.label = RollCallLabel();
    st = RankKeyFromEnv(&options.identity_key);
    if (!st.ok()) return st.WithContext("rank " + std::to_string(l.rank));
    st = store::ConnectTcpStoreWithOptions(l.master_addr, l.master_port, timeout, options,
                                           &j->store);
    if (st.code() == PLEXUS_ERR_INVALID_USAGE) {
      return Status::InvalidUsage("two processes claim rank " + std::to_string(l.rank) +
                                  " of the job: this one (" + options.label +
                                  ") was refused by the rendezvous store (" + st.message() +
                                  "); give every process its own rank (PLEXUS_RANK, or the "
                                  "launcher's)");
    }
    if (!st.ok() && j->secret.automatic && st.code() == PLEXUS_ERR_REMOTE) {
      // Refused with the automatic secret: the ranks do not share one.
      st = Status(st.code(), st.message() + " (no secret was given, so this job made one in " +
                                 store::PrivateDirPath() +
                                 ": ranks that do not share that directory, such as containers "
                                 "with a /tmp of their own, need PLEXUS_TOKEN_FILE, or "
                                 "PLEXUS_RUNTIME_DIR on a directory they share)");
    }
    if (!st.ok()) {
      return st.WithContext("rank " + std::to_string(l.rank) + " could not reach the " +
                            "rendezvous store at " + l.master_addr + ":" +
                            std::to_string(l.master_port));
    }
    j->local_address =
        ifname_address.empty() ? LocalAddressTowards(l.master_addr, l.master_port) : ifname_address;
    st = RollCall(l, *j->store, timeout, j->secret.automatic);
    // Every rank has read the automatic secret by now (it took it to join),
    // and a failed roll call ends the job: either way the file has served.
    if (l.rank == 0 && j->secret.automatic) store::RemovePrivate(j->secret.automatic_file);
    if (!st.ok()) return st;
  }
  LogLine(
      PLEXUS_LOG_DEBUG, "plexus",
      "rank " + std::to_string(l.rank) + " of " + std::to_string(l.size) + " from " + l.source +
          ", local address '" + j->local_address + "'" +
          (ifname_address.empty() ? "" : std::string(" (PLEXUS_SOCKET_IFNAME=") + ifname + ")"));
  job = j;
  *out = job;
  return Status::Ok();
}

uint64_t HostIdentity(const std::string& local_address) {
  char name[256] = "";
  gethostname(name, sizeof name - 1);
  return Fnv1a(local_address.data(), local_address.size(), Fnv1a(name, std::strlen(name)));
}

Status MakeStoreJob(std::unique_ptr<RendezvousStore> store, uint32_t rank, uint32_t size,
                    const std::string& name, std::chrono::milliseconds timeout,
                    std::shared_ptr<Job>* out, std::string* token_config,
                    std::string* secret_file) {
  if (!store) return Status::InvalidArgument("from_store: the store is null");
  if (size == 0 || rank >= size) {
    return Status::InvalidArgument("from_store: rank " + std::to_string(rank) +
                                   " is not a rank of size " + std::to_string(size));
  }
  auto j = std::make_shared<Job>();
  LaunchInfo& l = j->launch;
  l.rank = rank;
  l.size = size;
  l.source = "a store given to Communicator::from_store";
  WarnUnknownSettings(rank);
  const char* master = std::getenv("MASTER_ADDR");
  if (master && *master) l.master_addr = master;
  std::string address;
  const char* ifname = plexus::settings::Raw(plexus::settings::Id::kSocketIfname);
  if (ifname != nullptr && *ifname != '\0') {
    Status st = InterfaceAddress(ifname, &address);
    if (!st.ok()) return st.WithContext("rank " + std::to_string(rank));
  } else if (!l.master_addr.empty()) {
    const char* port = std::getenv("MASTER_PORT");
    address = LocalAddressTowards(l.master_addr, uint16_t(port ? std::atoi(port) : 0));
  } else {
    address = "127.0.0.1";
  }
  j->local_address = size == 1 ? "" : address;
  // Where every rank runs: its own key, read back by all.
  const uint64_t here = HostIdentity(address);
  const auto* p = reinterpret_cast<const uint8_t*>(&here);
  auto key = [&](uint32_t r) { return store::RankKey(r, name + "/host"); };
  Status st = store->Set(key(rank), Bytes(p, p + sizeof here), timeout);
  l.local_size = 0;
  for (uint32_t r = 0; st.ok() && r < size; ++r) {
    Bytes value;
    st = store->Get(key(r), &value, timeout);
    if (!st.ok()) break;
    uint64_t there = 0;
    if (value.size() != sizeof there) {
      st = Status::InvalidUsage("rank " + std::to_string(r) + "'s host entry in the store is " +
                                std::to_string(value.size()) + " bytes, not 8");
      break;
    }
    std::memcpy(&there, value.data(), sizeof there);
    if (there != here) continue;
    if (r < rank) ++l.local_rank;
    ++l.local_size;
  }
  if (!st.ok()) return st.WithContext("rank " + std::to_string(rank) + " of " + name);
  if (l.local_size < size && ifname == nullptr && l.master_addr.empty()) {
    return Status::InvalidUsage(
        "rank " + std::to_string(rank) + " of " + name + ": the ranks run on several hosts, and " +
        "neither MASTER_ADDR nor PLEXUS_SOCKET_IFNAME says which address this one's peers reach " +
        "it at; set PLEXUS_SOCKET_IFNAME to the interface to use");
  }
  st =
      ChooseStoreSecret(*store, rank, size, l.local_size, name, timeout, token_config, secret_file);
  if (!st.ok()) return st;
  j->store = std::move(store);
  *out = std::move(j);
  return Status::Ok();
}

}  // namespace plexus
