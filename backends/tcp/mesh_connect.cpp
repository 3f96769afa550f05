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
// Accepted connections identify themselves concurrently, each on its own
// clock (see Acceptor below), so idle or slow strangers never delay a real
// peer. Two connections that both pass for the same rank fail the set-up: a
// duplicate rank is named, not silently refused.
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
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
  FdGuard(FdGuard&& other) noexcept : fd_(other.release()) {}
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

// connect() bounded by the deadline: a blocking one retries an unanswered SYN
// for about two minutes whatever the communicator's timeout. Returns 0, the
// connect error, or ETIMEDOUT. The socket is blocking again afterwards.
int ConnectBefore(int fd, const sockaddr_in& sa, Clock::time_point deadline) {
  const int flags = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int error = 0;
  if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) error = errno;
  while (error == EINPROGRESS || error == EINTR) {
    pollfd pfd{fd, POLLOUT, 0};
    const int64_t left = MsLeft(deadline);
    if (left == 0) {
      error = ETIMEDOUT;
      break;
    }
    const int rc = poll(&pfd, 1, int(std::min<int64_t>(left, 1000)));
    if (rc < 0 && errno != EINTR) {
      error = errno;
    } else if (rc > 0) {
      socklen_t len = sizeof error;
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
    }
  }
  fcntl(fd, F_SETFL, flags);
  return error;
}

void Tune(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int buf = 4 << 20;  // large buffers let a ring step stream without stalls
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

// A non-blocking listener: the accept loop takes every waiting connection at once.
algos::Status Listen(const std::string& address, FdGuard* out, uint16_t* port) {
  FdGuard fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
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
  // A large backlog (the kernel caps it at net.core.somaxconn): connections made
  // while this rank still connects to lower ranks wait there, and a few dozen
  // strangers must not fill it and leave a real peer's connect() retrying its SYN.
  if (listen(fd.get(), SOMAXCONN) != 0) return {PLEXUS_ERR_SYSTEM, Errno("listen")};
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

// Accepting the higher ranks. A listener's port is published to the whole job,
// so anything that can reach it may connect: a port scanner, a stale rank of an
// earlier job, or someone holding connections open on purpose. Every accepted
// connection must therefore identify itself (hello, then handshake) on its own
// clock, concurrently with all others: a stranger costs one descriptor for a
// while, but never delays a real peer, which sends its hello at once.

// How long an accepted connection may take to identify itself (hello and
// handshake). A real peer sends its hello right after connect() and answers
// each handshake step at once, so it needs a few round trips; 5 s leaves room
// for a badly overloaded machine.
// Because connections are served concurrently, this allowance delays no one;
// it only bounds how long a silent stranger keeps its descriptor.
constexpr auto kIdentifyWithin = std::chrono::seconds(5);

// At most this many accepted connections identify themselves at once. A flood
// beyond it evicts the oldest connection still owing its hello, so a flood
// cannot keep out a real peer, which leaves that stage within one round trip.
constexpr size_t kMaxPending = 256;

// Refusals logged one by one; later ones are counted (and the last one is kept
// for the timeout message), so a flood of strangers cannot flood the log.
constexpr uint32_t kMaxLoggedRefusals = 16;

// Result of reading part of a fixed-size message from a non-blocking socket.
enum class Read { kComplete, kWaiting, kClosed, kFailed };

// Reads what has arrived towards buf[0, len), without waiting.
Read ReadSome(int fd, void* buf, size_t len, size_t* have) {
  auto* p = static_cast<uint8_t*>(buf);
  while (*have < len) {
    const ssize_t n = recv(fd, p + *have, len - *have, MSG_DONTWAIT);
    if (n == 0) return Read::kClosed;
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? Read::kWaiting : Read::kFailed;
    }
    *have += size_t(n);
  }
  return Read::kComplete;
}

// An accepted connection that has not yet identified itself as a higher rank.
struct Pending {
  FdGuard fd;
  std::string from;            // "address:port", for log lines
  Clock::time_point deadline;  // identified by then, or refused
  Hello hello{};
  size_t hello_have = 0;
  // Set once a hello with this communicator's nonce names a higher rank: the
  // authentication handshake for that rank, fed message by message.
  std::unique_ptr<auth::Responder> responder;
  auth::Wire message{};
  size_t message_have = 0;
  bool done = false;  // accepted as a peer or refused: to be dropped
};

// Accepts one authenticated connection from every rank above `rank`.
class Acceptor {
 public:
  Acceptor(const plexus_host_v1& host, const plexus_comm_config_v1& config,
           const auth::Secret& secret, uint64_t nonce, int listener, std::vector<FdGuard>* peers)
      : host_(host),
        config_(config),
        secret_(secret),
        nonce_(nonce),
        listener_(listener),
        peers_(*peers),
        from_(config.size),
        missing_(config.size - 1 - config.rank) {}

  // Until every higher rank is connected, and no connection that showed the
  // nonce is still authenticating (that can only be a second claim to a rank:
  // waiting for its outcome is how a duplicate rank is caught).
  algos::Status Run(Clock::time_point deadline) {
    mesh_deadline_ = deadline;
    for (;;) {
      const auto now = Clock::now();
      for (Pending& p : pending_) {
        if (p.deadline <= now) Expire(p);
      }
      Drop();
      const bool authenticating = std::any_of(pending_.begin(), pending_.end(),
                                              [](const Pending& p) { return bool(p.responder); });
      if (missing_ == 0 && !authenticating) break;
      if (now >= deadline) return TimedOut();  // missing_ > 0: the pending expired with it

      // Wait for the listener (while ranks are missing) and every pending connection.
      std::vector<pollfd> pfds;
      const bool listening = missing_ > 0 && now >= listen_paused_until_;
      if (listening) pfds.push_back({listener_, POLLIN, 0});
      auto wake = deadline;
      if (!listening && missing_ > 0) wake = std::min(wake, listen_paused_until_);
      for (const Pending& p : pending_) {
        pfds.push_back({p.fd.get(), POLLIN, 0});
        wake = std::min(wake, p.deadline);
      }
      const int rc = poll(pfds.data(), pfds.size(), int(std::min<int64_t>(MsLeft(wake) + 1, 1000)));
      if (rc < 0 && errno != EINTR) return {PLEXUS_ERR_SYSTEM, Errno("poll")};
      if (rc <= 0) continue;
      // Read before accepting: accepting may evict entries, shifting indices.
      const size_t first = listening ? 1 : 0;
      for (size_t i = 0; i + first < pfds.size(); ++i) {
        if (pfds[i + first].revents == 0) continue;
        algos::Status st = Serve(pending_[i]);
        if (!st.ok()) return st;
      }
      Drop();
      if (listening && pfds[0].revents != 0) AcceptNew();
    }
    if (refused_ > kMaxLoggedRefusals) {
      Log(host_, PLEXUS_LOG_WARN,
          std::to_string(refused_) +
              " connections were refused in all, the last: " + last_refusal_);
    }
    return {};
  }

 private:
  std::string NotAPeer(const std::string& why) const {
    return "not a peer of communicator " + std::string(config_.name) + ": " + why;
  }

  void Refuse(Pending& p, const std::string& why) {
    last_refusal_ = Refusal(p.from, why);
    ++refused_;
    if (refused_ <= kMaxLoggedRefusals) Log(host_, PLEXUS_LOG_WARN, last_refusal_);
    if (refused_ == kMaxLoggedRefusals) {
      Log(host_, PLEXUS_LOG_WARN, "further refused connections are counted, not logged");
    }
    p.fd = FdGuard();
    p.done = true;
  }

  void Expire(Pending& p) {
    if (p.responder) {
      Refuse(p, "claiming rank " + std::to_string(p.hello.rank) +
                    ": did not finish the authentication handshake in time");
    } else {
      Refuse(p, NotAPeer("sent " + std::to_string(p.hello_have) + " of the " +
                         std::to_string(sizeof p.hello) + " bytes of a hello in time"));
    }
  }

  void Drop() {
    pending_.erase(
        std::remove_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.done; }),
        pending_.end());
  }

  // Takes every connection waiting on the listener into the pending set.
  void AcceptNew() {
    for (;;) {
      sockaddr_in from{};
      socklen_t from_len = sizeof from;
      FdGuard fd(accept4(listener_, reinterpret_cast<sockaddr*>(&from), &from_len,
                         SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (fd.get() < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        // Out of descriptors (or another failure): make room by dropping the
        // oldest stranger, or else stop polling the listener for a moment
        // rather than spin on it.
        if ((errno == EMFILE || errno == ENFILE) && EvictOldestStranger("out of descriptors")) {
          continue;
        }
        listen_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
        return;
      }
      char from_text[64];
      inet_ntop(AF_INET, &from.sin_addr, from_text, sizeof from_text);
      Pending p;
      p.fd = std::move(fd);
      p.from = std::string(from_text) + ":" + std::to_string(ntohs(from.sin_port));
      p.deadline = std::min(mesh_deadline_, Clock::now() + kIdentifyWithin);
      if (pending_.size() >= kMaxPending &&
          !EvictOldestStranger(std::to_string(kMaxPending) +
                               " connections were already waiting to identify themselves")) {
        // Every pending connection showed the nonce: keep them, refuse the newcomer.
        Refuse(p, "too many connections claiming ranks at once");
        continue;
      }
      pending_.push_back(std::move(p));
    }
  }

  // Refuses the oldest pending connection that has not shown the nonce yet.
  bool EvictOldestStranger(const std::string& why) {
    for (Pending& p : pending_) {
      if (!p.responder && !p.done) {
        Refuse(p, NotAPeer("dropped before its hello was complete: " + why));
        Drop();
        return true;
      }
    }
    return false;
  }

  // Reads what connection p sent and moves it on: hello, then handshake
  // messages. Fails only when a second connection authenticates for a rank.
  algos::Status Serve(Pending& p) {
    if (!p.responder) {
      switch (ReadSome(p.fd.get(), &p.hello, sizeof p.hello, &p.hello_have)) {
        case Read::kWaiting:
          return {};
        case Read::kClosed:
          Refuse(p, NotAPeer("closed the connection before its hello was complete"));
          return {};
        case Read::kFailed:
          Refuse(p, NotAPeer(Errno("receiving its hello")));
          return {};
        case Read::kComplete:
          break;
      }
      const uint32_t claimed = p.hello.rank;
      if (p.hello.magic != kHelloMagic || p.hello.nonce != nonce_ || claimed <= config_.rank ||
          claimed >= config_.size) {
        Refuse(p, NotAPeer("its hello has the wrong magic, nonce or rank"));
        return {};
      }
      // A rank that is already connected is not refused here: a second claim
      // that also passes the handshake is an error (a duplicate rank), not a
      // stranger to ignore.
      p.responder = std::make_unique<auth::Responder>(
          secret_, auth::Binding{auth::Purpose::kTcpMesh, nonce_, claimed});
    }
    const std::string claiming = "claiming rank " + std::to_string(p.hello.rank) + ": ";
    for (;;) {
      switch (ReadSome(p.fd.get(), p.message.data(), p.message.size(), &p.message_have)) {
        case Read::kWaiting:
          return {};
        case Read::kClosed:
          Refuse(p, claiming + "the peer closed the connection during the handshake");
          return {};
        case Read::kFailed:
          Refuse(p, claiming + Errno("receiving a handshake message"));
          return {};
        case Read::kComplete:
          break;
      }
      p.message_have = 0;
      auth::Wire reply{};
      bool has_reply = false;
      std::string why;
      const auto outcome = p.responder->OnMessage(p.message, &reply, &has_reply, &why);
      if (outcome == auth::Responder::Outcome::kAccepted && peers_[p.hello.rank].get() >= 0) {
        return Duplicate(p);  // before the reply: the second claimant is not told it is in
      }
      // A reply is 88 bytes on a connection that has carried at most a few
      // hundred: the send buffer of a fresh socket always has room, so a short
      // send means the connection is broken.
      const bool sent = !has_reply || send(p.fd.get(), reply.data(), reply.size(),
                                           MSG_DONTWAIT | MSG_NOSIGNAL) == ssize_t(reply.size());
      switch (outcome) {
        case auth::Responder::Outcome::kContinue:
          if (!sent) {
            Refuse(p, claiming + Errno("sending the handshake challenge"));
            return {};
          }
          continue;
        case auth::Responder::Outcome::kRefused:
          Refuse(p, claiming + "the peer " + why);
          return {};
        case auth::Responder::Outcome::kAccepted:
          if (!sent) {
            Refuse(p, claiming + Errno("sending the handshake result"));
            return {};
          }
          Tune(p.fd.get());
          peers_[p.hello.rank] = FdGuard(p.fd.release());
          from_[p.hello.rank] = p.from;
          --missing_;
          p.done = true;
          return {};
      }
    }
  }

  // Two connections proved themselves as the same rank. Not a stranger to
  // refuse quietly: one of them is in the mesh already, and which one is the
  // real rank cannot be told apart, so the communicator must not start.
  // PLEXUS_ERR_REMOTE: the fault lies with other processes, not with this one.
  algos::Status Duplicate(const Pending& p) const {
    const uint32_t r = p.hello.rank;
    std::string text =
        "rank " + std::to_string(config_.rank) + " got two connections claiming rank " +
        std::to_string(r) + " of communicator " + config_.name +
        ", both with its nonce and a passing handshake: first from " + from_[r] + ", then from " +
        p.from + ". Refusing a duplicate rank " + std::to_string(r) + ": ";
    text += secret_.present()
                ? "two processes holding the job's PLEXUS_TOKEN were started as rank " +
                      std::to_string(r)
                : "a stranger may have joined (PLEXUS_TOKEN is not set, so connections between "
                  "ranks are not authenticated), or two processes were started as rank " +
                      std::to_string(r);
    return {PLEXUS_ERR_REMOTE, text};
  }

  algos::Status TimedOut() const {
    std::string text = "rank " + std::to_string(config_.rank) + " timed out waiting for " +
                       std::to_string(missing_) + " higher rank(s) to connect (missing: rank" +
                       (missing_ > 1 ? "s" : "");
    uint32_t listed = 0;
    for (uint32_t r = config_.rank + 1; r < config_.size; ++r) {
      if (peers_[r].get() >= 0) continue;
      if (listed == 16) {
        text += ", ...";
        break;
      }
      text += (listed++ == 0 ? " " : ", ") + std::to_string(r);
    }
    text += ")";
    if (refused_ > 0) {
      text += "; " + std::to_string(refused_) +
              " connection(s) were refused, the last: " + last_refusal_;
    }
    return {PLEXUS_ERR_TIMEOUT, text};
  }

  const plexus_host_v1& host_;
  const plexus_comm_config_v1& config_;
  const auth::Secret& secret_;
  const uint64_t nonce_;
  const int listener_;
  std::vector<FdGuard>& peers_;
  std::vector<std::string> from_;  // per connected rank: its address, for a duplicate's message
  uint32_t missing_;
  Clock::time_point mesh_deadline_;
  Clock::time_point listen_paused_until_{};
  std::vector<Pending> pending_;  // oldest first
  uint32_t refused_ = 0;
  std::string last_refusal_;
};

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
        "no job secret (PLEXUS_TOKEN): connections between ranks are not authenticated, so "
        "anyone who reaches a rank's port can connect as a rank and read or corrupt what it "
        "sends; give the job a secret (PLEXUS_TOKEN or PLEXUS_TOKEN_FILE on every rank)");
  }

  FdGuard listener;
  uint16_t port = 0;
  algos::Status st = Listen(address, &listener, &port);
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
    const std::string where =
        "rank " + std::to_string(p) + " at " + all[p].address + ":" + std::to_string(all[p].port);
    const int connect_errno = ConnectBefore(fd.get(), sa, deadline);
    if (connect_errno == ETIMEDOUT) {
      return {PLEXUS_ERR_TIMEOUT,
              "rank " + std::to_string(rank) + " could not connect to " + where + " within " +
                  std::to_string(config.timeout_ms) +
                  " ms: no answer (a firewall dropping packets, a host that went away, or an "
                  "address other hosts cannot reach: set PLEXUS_SOCKET_IFNAME or PLEXUS_TCP_ADDR "
                  "on that rank)"};
    }
    if (connect_errno != 0) {
      errno = connect_errno;
      return {PLEXUS_ERR_REMOTE, Errno("connect to " + where)};
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
  st = Acceptor(host, config, secret, nonce, listener.get(), &peers).Run(deadline);
  if (!st.ok()) return st;
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
