// The full mesh of one communicator (see mesh_connect.hpp).
//
// Authentication. After the hello both sides run the plexus-auth handshake
// (auth/include/plexus/auth/handshake.hpp), the connecting rank as initiator:
// each proves it holds the job secret (PLEXUS_TOKEN, read through the host's
// get_config, never from the environment directly), bound to the communicator
// nonce and the rank the hello claimed. The secret never goes on the wire. A
// peer that fails is refused with one log line naming its address, and the
// listener goes on accepting (so a stranger cannot keep a real rank out); the
// connecting side of a failed handshake gets an error naming the rank it tried.
// Without PLEXUS_TOKEN on both sides the handshake agrees to go on
// unauthenticated (one warning per process); with it on one side only, both
// refuse.
#include "mesh_connect.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <utility>

#include "plexus/algos/comm_setting.hpp"
#include "plexus/auth/handshake.hpp"
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

std::string Errno(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

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

// One peer's failure to join, kept to explain a later timeout.
std::string Refusal(const std::string& from, const std::string& why) {
  return "refused a connection from " + from + " (" + why + ")";
}

}  // namespace

algos::Status ConnectMesh(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                          std::vector<int>* fds) {
  const uint32_t rank = config.rank, size = config.size;
  const auto deadline = Clock::now() + std::chrono::milliseconds(config.timeout_ms);
  std::string address = algos::CommSetting(host, config, "PLEXUS_TCP_ADDR");
  if (address.empty()) address = host.local_address ? host.local_address : "";
  if (address.empty()) address = "127.0.0.1";

  // The job secret: every mesh connection authenticates with it, both ways.
  auth::Secret secret;
  if (std::string error; !auth::Secret::Derive(algos::CommSetting(host, config, "PLEXUS_TOKEN"),
                                               auth::Purpose::kTcpMesh, &secret, &error)) {
    return {PLEXUS_ERR_SYSTEM, error};
  }
  if (!secret.present() && size > 1 && auth::FirstUnauthenticatedUse()) {
    Log(host, PLEXUS_LOG_WARN,
        "PLEXUS_TOKEN is not set: connections between ranks are not authenticated "
        "(plexus-run sets a job secret for every job)");
  }

  FdGuard listener;
  uint16_t port = 0;
  algos::Status st = Listen(address, size + 16, &listener, &port);
  if (!st.ok()) return st;

  Endpoint mine{};
  std::snprintf(mine.address, sizeof mine.address, "%s", address.c_str());
  mine.port = port;
  mine.rank = rank;
  std::vector<Endpoint> all(size);
  int32_t rc =
      host.oob_allgather(host.ctx, config.oob, &mine, all.data(), sizeof mine, MsLeft(deadline));
  if (rc != PLEXUS_OK) {
    return {rc,
            "out-of-band exchange of TCP endpoints failed (did every rank start, and "
            "reach the rendezvous store with the job's PLEXUS_TOKEN? see their errors)"};
  }
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
    // Prove to rank p that we hold the job secret, and check that it does,
    // bound to this communicator (nonce) and the rank we claimed.
    const auth::Result r = auth::RunInitiator(
        fd.get(), secret, auth::Binding{auth::Purpose::kTcpMesh, nonce, rank}, deadline);
    if (!r.ok()) {
      return {r.code == PLEXUS_ERR_TIMEOUT ? PLEXUS_ERR_TIMEOUT : PLEXUS_ERR_REMOTE,
              "rank " + std::to_string(rank) + " could not authenticate with rank " +
                  std::to_string(p) + " at " + all[p].address + ":" + std::to_string(all[p].port) +
                  ": " + r.message};
    }
    peers[p] = FdGuard(fd.release());
  }
  // Accept one connection from every higher rank, refusing strangers.
  uint32_t missing = size - 1 - rank;
  uint32_t refused = 0;
  std::string last_refusal;
  while (missing > 0) {
    pollfd pfd{listener.get(), POLLIN, 0};
    const int64_t left = MsLeft(deadline);
    if (left == 0) {
      std::string text = "rank " + std::to_string(rank) + " timed out waiting for " +
                         std::to_string(missing) + " higher rank(s) to connect";
      if (refused > 0) {
        text += "; " + std::to_string(refused) +
                " connection(s) were refused, the last: " + last_refusal;
      }
      return {PLEXUS_ERR_TIMEOUT, text};
    }
    if (poll(&pfd, 1, int(std::min<int64_t>(left, 1000))) <= 0) continue;
    sockaddr_in from{};
    socklen_t from_len = sizeof from;
    FdGuard fd(
        accept4(listener.get(), reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_CLOEXEC));
    if (fd.get() < 0) continue;
    char from_text[64];
    inet_ntop(AF_INET, &from.sin_addr, from_text, sizeof from_text);
    const std::string from_addr =
        std::string(from_text) + ":" + std::to_string(ntohs(from.sin_port));
    Hello hello{};
    const auto hello_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
    if (!TransferAll(fd.get(), &hello, sizeof hello, false, hello_deadline) ||
        hello.magic != kHelloMagic || hello.nonce != nonce || hello.rank <= rank ||
        hello.rank >= size || peers[hello.rank].get() >= 0) {
      last_refusal = Refusal(from_addr, "not a peer of communicator " + std::string(config.name));
      ++refused;
      Log(host, PLEXUS_LOG_WARN, last_refusal);
      continue;
    }
    // The hello only names a rank; the handshake proves the peer holds the job
    // secret (and checks that we do), bound to this communicator and that rank.
    const auth::Result r = auth::RunResponder(
        fd.get(), secret, auth::Binding{auth::Purpose::kTcpMesh, nonce, hello.rank},
        hello_deadline);
    if (!r.ok()) {
      last_refusal =
          Refusal(from_addr, "claiming rank " + std::to_string(hello.rank) + ": " + r.message);
      ++refused;
      Log(host, PLEXUS_LOG_WARN, last_refusal);
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
