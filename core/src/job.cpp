#include "job.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

#include "plexus/log.hpp"
#include "roll_call.hpp"

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
  // PLEXUS_SOCKET_IFNAME names the interface backends listen on; checked
  // first, so that a wrong name is reported before anything waits.
  std::string ifname_address;
  const char* ifname = std::getenv("PLEXUS_SOCKET_IFNAME");
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
    if (!l.store_hosted && l.rank == 0) {
      st = TcpStoreServer::Start(l.master_addr, l.master_port, &j->server);
      if (!st.ok()) {
        return st.WithContext("rank 0 could not host the rendezvous store at " + l.master_addr +
                              ":" + std::to_string(l.master_port));
      }
    }
    st = ConnectTcpStore(l.master_addr, l.master_port, timeout, &j->store);
    if (!st.ok()) {
      return st.WithContext("rank " + std::to_string(l.rank) + " could not reach the " +
                            "rendezvous store at " + l.master_addr + ":" +
                            std::to_string(l.master_port));
    }
    j->local_address =
        ifname_address.empty() ? LocalAddressTowards(l.master_addr, l.master_port) : ifname_address;
    st = RollCall(l, *j->store, timeout);
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

}  // namespace plexus
