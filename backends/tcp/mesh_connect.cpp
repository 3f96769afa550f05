#include "mesh_connect.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "tcp_log.hpp"

namespace plexus::tcp {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kHelloMagic = 0x48584c50;  // "PLXH"

// Published by every rank through the out-of-band allgather.
struct Endpoint {
  char address[48];  // numeric IPv4, NUL-terminated
  uint16_t port;
  uint16_t pad;
  uint32_t rank;
};

struct Hello {
  uint32_t magic;
  uint32_t rank;
  uint64_t nonce;
};

class FdGuard {
 public:
  explicit FdGuard(int fd = -1) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  FdGuard& operator=(FdGuard&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) close(fd_);
      fd_ = other.release();
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

int64_t MsLeft(Clock::time_point deadline) {
  return std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
}

// Sends or receives exactly len bytes on a blocking-with-poll basis before deadline.
bool TransferAll(int fd, void* buf, size_t len, bool sending, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t done = 0;
  while (done < len) {
    pollfd pfd{fd, short(sending ? POLLOUT : POLLIN), 0};
    const int64_t left = MsLeft(deadline);
    if (left == 0) return false;
    const int rc = poll(&pfd, 1, int(std::min<int64_t>(left, 1000)));
    if (rc < 0 && errno != EINTR) return false;
    if (rc <= 0) continue;
    const ssize_t n = sending ? send(fd, p + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                              : recv(fd, p + done, len - done, MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return false;
    }
    done += size_t(n);
  }
  return true;
}

void Tune(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int buf = 4 << 20;  // large buffers let a ring step stream without stalls
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

algos::Status Listen(const std::string& address, uint32_t backlog, FdGuard* out, uint16_t* port) {
  FdGuard fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return {PLEXUS_ERR_SYSTEM, Errno("socket")};
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  if (inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1) {
    return {PLEXUS_ERR_INVALID_ARGUMENT, "not a numeric IPv4 address to bind: '" + address + "'"};
  }
  Tune(fd.get());
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    return {PLEXUS_ERR_SYSTEM, Errno("bind " + address)};
  }
  if (listen(fd.get(), int(backlog)) != 0) return {PLEXUS_ERR_SYSTEM, Errno("listen")};
  socklen_t len = sizeof sa;
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len);
  *port = ntohs(sa.sin_port);
  *out = FdGuard(fd.release());
  return {};
}

std::string ConfigString(const plexus_host_v1& host, const char* key) {
  if (!host.get_config) return {};
  char buf[256];
  const int64_t n = host.get_config(host.ctx, key, buf, sizeof buf);
  return n < 0 ? std::string() : std::string(buf);
}

}  // namespace

algos::Status ConnectMesh(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                          std::vector<int>* fds) {
  const uint32_t rank = config.rank, size = config.size;
  const auto deadline = Clock::now() + std::chrono::milliseconds(config.timeout_ms);
  std::string address = ConfigString(host, "PLEXUS_TCP_ADDR");
  if (address.empty()) address = host.local_address ? host.local_address : "";
  if (address.empty()) address = "127.0.0.1";

  FdGuard listener;
  uint16_t port = 0;
  algos::Status st = Listen(address, size + 16, &listener, &port);
  if (!st.ok()) return st;

  Endpoint mine{};
  std::snprintf(mine.address, sizeof mine.address, "%s", address.c_str());
  mine.port = port;
  mine.rank = rank;
  std::vector<Endpoint> all(size);
  int32_t rc = host.oob_allgather(host.ctx, config.oob, &mine, all.data(), sizeof mine,
                                  MsLeft(deadline));
  if (rc != PLEXUS_OK) return {rc, "out-of-band exchange of TCP endpoints failed"};
  uint64_t nonce = 0;
  if (rank == 0 && getrandom(&nonce, sizeof nonce, 0) != sizeof nonce) {
    return {PLEXUS_ERR_SYSTEM, Errno("getrandom")};
  }
  rc = host.oob_broadcast(host.ctx, config.oob, &nonce, sizeof nonce, 0, MsLeft(deadline));
  if (rc != PLEXUS_OK) return {rc, "out-of-band broadcast of the communicator nonce failed"};

  std::vector<FdGuard> peers(size);
  // Connect to every lower rank: their listeners are up (they published them).
  for (uint32_t p = 0; p < rank; ++p) {
    FdGuard fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return {PLEXUS_ERR_SYSTEM, Errno("socket")};
    Tune(fd.get());
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(all[p].port);
    all[p].address[sizeof all[p].address - 1] = '\0';
    if (inet_pton(AF_INET, all[p].address, &sa.sin_addr) != 1) {
      return {PLEXUS_ERR_REMOTE, "rank " + std::to_string(p) + " published a bad address"};
    }
    if (connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
      return {PLEXUS_ERR_REMOTE, Errno("connect to rank " + std::to_string(p) + " at " +
                                       all[p].address + ":" + std::to_string(all[p].port))};
    }
    Hello hello{kHelloMagic, rank, nonce};
    if (!TransferAll(fd.get(), &hello, sizeof hello, true, deadline)) {
      return {PLEXUS_ERR_REMOTE, "could not greet rank " + std::to_string(p)};
    }
    peers[p] = FdGuard(fd.release());
  }
  // Accept one connection from every higher rank, refusing strangers.
  uint32_t missing = size - 1 - rank;
  while (missing > 0) {
    pollfd pfd{listener.get(), POLLIN, 0};
    const int64_t left = MsLeft(deadline);
    if (left == 0) {
      return {PLEXUS_ERR_TIMEOUT, "rank " + std::to_string(rank) + " timed out waiting for " +
                                      std::to_string(missing) + " higher rank(s) to connect"};
    }
    if (poll(&pfd, 1, int(std::min<int64_t>(left, 1000))) <= 0) continue;
    sockaddr_in from{};
    socklen_t from_len = sizeof from;
    FdGuard fd(accept4(listener.get(), reinterpret_cast<sockaddr*>(&from), &from_len,
                       SOCK_CLOEXEC));
    if (fd.get() < 0) continue;
    char from_text[64];
    inet_ntop(AF_INET, &from.sin_addr, from_text, sizeof from_text);
    Hello hello{};
    const auto hello_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
    if (!TransferAll(fd.get(), &hello, sizeof hello, false, hello_deadline) ||
        hello.magic != kHelloMagic || hello.nonce != nonce || hello.rank <= rank ||
        hello.rank >= size || peers[hello.rank].get() >= 0) {
      Log(host, PLEXUS_LOG_WARN,
          "refused a connection from " + std::string(from_text) + ":" +
              std::to_string(ntohs(from.sin_port)) + " (not a peer of communicator " +
              config.name + ")");
      continue;
    }
    Tune(fd.get());
    peers[hello.rank] = FdGuard(fd.release());
    --missing;
  }
  fds->assign(size, -1);
  for (uint32_t p = 0; p < size; ++p) {
    if (p == rank) continue;
    const int fd = peers[p].release();
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    (*fds)[p] = fd;
  }
  return {};
}

}  // namespace plexus::tcp
