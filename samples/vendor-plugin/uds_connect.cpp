// Bootstrap of one communicator: from nothing to one stream per pair of ranks.
//
// A backend never does its own rendezvous: the host lends it an out-of-band
// allgather for the duration of comm_create. So every rank opens a listening
// socket, publishes its address through that allgather, then connects to every
// lower rank and accepts every higher one. A Unix-socket connect completes as
// soon as the listener's backlog has room (sized for every rank), without
// waiting for accept(), so this order cannot deadlock.
//
// Where the sockets live: by default in Linux's abstract namespace under a
// name the kernel picks (no file to clean up, nothing to collide with); with
// PLEXUS_UDS_DIR, as files in that directory, removed once the mesh stands.
// Either way other processes on this host could connect, so a listener keeps
// only connections from its own user (SO_PEERCRED) that present the random
// cookie it published: only the ranks of this communicator learned it.
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstring>

#include "uds_transport.hpp"

namespace uds {
namespace {

constexpr uint32_t kHelloMagic = 0x48445850;  // "PXDH"

struct Endpoint {  // what each rank publishes
  uint64_t cookie;
  uint32_t name_len;                         // bytes of name that make up the address
  char name[sizeof(sockaddr_un::sun_path)];  // an abstract name starts with '\0'
};

struct Hello {  // the first bytes on a new connection, from the connecting rank
  uint32_t magic, rank;
  uint64_t cookie;  // the listener's, as published
};

Status SysError(const std::string& what) {
  return {PLEXUS_ERR_SYSTEM, what + ": " + std::strerror(errno)};
}

// Closes the listener and removes its file, however ConnectMesh returns.
struct Listener {
  int fd = -1;
  std::string path;
  ~Listener() {
    if (fd >= 0) close(fd);
    if (!path.empty()) unlink(path.c_str());
  }
};

Status Listen(const std::string& dir, uint32_t backlog, Listener* l, Endpoint* ep) {
  l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (l->fd < 0) return SysError("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  socklen_t len = sizeof(sa_family_t);  // no name: the kernel picks an abstract one
  if (!dir.empty()) {
    const std::string path = dir + "/plexus-uds-" + std::to_string(getpid()) + "-" +
                             std::to_string(ep->cookie % 1000000007) + ".sock";
    if (path.size() >= sizeof addr.sun_path) {
      return {PLEXUS_ERR_INVALID_ARGUMENT, "PLEXUS_UDS_DIR is too long for a socket: " + path};
    }
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    len = socklen_t(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  }
  if (bind(l->fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return SysError(dir.empty() ? std::string("bind") : "bind " + std::string(addr.sun_path));
  }
  if (!dir.empty()) l->path = addr.sun_path;
  if (listen(l->fd, int(backlog)) != 0) return SysError("listen");
  len = sizeof addr;
  if (getsockname(l->fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return SysError("getsockname");
  }
  ep->name_len = uint32_t(len - offsetof(sockaddr_un, sun_path));
  std::memcpy(ep->name, addr.sun_path, ep->name_len);
  return {};
}

}  // namespace

Status ConnectMesh(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                   const std::string& dir, std::vector<int>* fds) {
  using Clock = std::chrono::steady_clock;
  const uint32_t me = config.rank, n = config.size;
  const auto deadline = Clock::now() + std::chrono::milliseconds(config.timeout_ms);
  Endpoint mine{};
  if (getrandom(&mine.cookie, sizeof mine.cookie, 0) != sizeof mine.cookie) {
    return SysError("getrandom");
  }
  Listener listener;
  Status st = Listen(dir, n, &listener, &mine);
  if (!st.ok()) return st;
  std::vector<Endpoint> all(n);
  const int32_t rc =
      host.oob_allgather(host.ctx, config.oob, &mine, all.data(), sizeof mine, config.timeout_ms);
  if (rc != PLEXUS_OK) return {rc, "the out-of-band exchange of socket names failed"};

  for (uint32_t peer = 0; peer < me; ++peer) {
    const int fd = (*fds)[peer] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, all[peer].name, all[peer].name_len);
    const Hello hello{kHelloMagic, me, all[peer].cookie};
    if (fd < 0 ||
        connect(fd, reinterpret_cast<sockaddr*>(&addr),
                socklen_t(offsetof(sockaddr_un, sun_path) + all[peer].name_len)) != 0 ||
        send(fd, &hello, sizeof hello, MSG_NOSIGNAL) != sizeof hello) {  // fits: buffer is empty
      return {PLEXUS_ERR_REMOTE, "cannot connect to rank " + std::to_string(peer) + " (" +
                                     std::strerror(errno) + "); are all ranks on this host?"};
    }
  }

  for (uint32_t accepted = 0; accepted < n - 1 - me;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return {PLEXUS_ERR_TIMEOUT, "rank " + std::to_string(me) + " waited " +
                                      std::to_string(config.timeout_ms) +
                                      " ms for higher ranks to connect"};
    }
    pollfd pfd{listener.fd, POLLIN, 0};
    if (poll(&pfd, 1, int(std::min<int64_t>(left.count(), 1000))) <= 0) continue;
    const int fd = accept4(listener.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) continue;
    // A rank sends its 16-byte hello right after connecting, and one send
    // that small arrives whole: a connection without it is not one of ours.
    ucred cred{};
    socklen_t cred_len = sizeof cred;
    Hello hello{};
    pfd = {fd, POLLIN, 0};
    const bool ok = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len) == 0 &&
                    cred.uid == getuid() &&
                    poll(&pfd, 1, int(std::min<int64_t>(left.count(), 10000))) == 1 &&
                    recv(fd, &hello, sizeof hello, MSG_DONTWAIT) == sizeof hello &&
                    hello.magic == kHelloMagic && hello.cookie == mine.cookie && hello.rank > me &&
                    hello.rank < n && (*fds)[hello.rank] < 0;
    if (!ok) {
      Log(host, PLEXUS_LOG_WARN,
          "refused a connection from pid " + std::to_string(cred.pid) + ": not a rank of " +
              config.name);
      close(fd);
      continue;
    }
    (*fds)[hello.rank] = fd;
    ++accepted;
  }
  return {};
}

}  // namespace uds
