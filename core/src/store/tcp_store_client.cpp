// TcpStoreClient: a RendezvousStore that talks to a TcpStoreServer.
//
// One connection per client, guarded by a mutex: a request is sent and its
// reply read before the next request may start (the server relies on that).
// Concurrent callers on one client therefore queue; the time a caller spends
// queued counts against its own timeout, and the server is sent only the time
// that is left. The socket is non-blocking and every send/recv waits in poll()
// against one deadline per call: the caller's timeout plus kSlack, because the
// server itself answers GET/WAIT with TIMEOUT when the caller's timeout runs
// out and that reply needs a moment to arrive. Hence a dead or wedged server
// costs a caller at most timeout + kSlack, never a hang.
//
// After any failure mid-request (timeout, reset, garbage) the byte stream's
// position is unknown, so the connection is dropped; the next request makes
// one fresh connection attempt. A request is never re-sent (an ADD must not
// be applied twice).
//
// With a job secret (PLEXUS_TOKEN) every connection, the first and any
// reconnection, runs the plexus-auth handshake as initiator before its first
// request (see store_protocol.hpp): this client proves it knows the secret and
// checks that the server does too. A refusal is final (the same token would be
// refused again) and reported at once, naming the server.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "plexus/auth/handshake.hpp"
#include "plexus/log.hpp"
#include "store_protocol.hpp"

namespace plexus {
namespace store {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kSlack = std::chrono::milliseconds(1000);
// One connect() attempt may take at most this long, so a host name with an
// unreachable first address still leaves time to try the others.
constexpr auto kConnectAttemptLimit = std::chrono::milliseconds(2000);
constexpr auto kBackoffStart = std::chrono::milliseconds(10);
constexpr auto kBackoffMax = std::chrono::milliseconds(250);
// One handshake may take at most this long (the server answers at once; a
// peer that does not is not a Plexus store, or is wedged: try again).
constexpr auto kHandshakeAttemptLimit = std::chrono::milliseconds(10000);
// Without a secret the server drops a connection that has not sent a request
// within its handshake_timeout (5 s by default: strangers' idle connections
// must not pile up). A connection that has never carried a request and is
// older than this, or that the server has closed, is therefore replaced before
// the first request goes out on it (costing one connect), instead of failing
// that request.
constexpr auto kUnusedConnectionAge = std::chrono::milliseconds(1000);

std::string ErrnoText(int err) {
  return std::string(std::strerror(err));
}

Clock::time_point DeadlineAfter(std::chrono::milliseconds timeout) {
  return Clock::now() + std::chrono::milliseconds(TimeoutToWire(timeout));
}

// Milliseconds left until deadline for poll(): 0 when past, rounded up otherwise.
int MsUntil(Clock::time_point deadline) {
  const auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<int64_t>(ms, 1 << 30));
}

// Waits for `events` on fd until deadline. Returns 1 ready, 0 deadline passed, -1 error (errno).
int PollOne(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, MsUntil(deadline));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return -1;
    if (rc == 0) {
      if (Clock::now() >= deadline) return 0;
      continue;  // poll rounds to whole ms; the deadline is not quite reached yet
    }
    return 1;  // includes POLLERR/POLLHUP: the following send/recv reports the error
  }
}

std::string Endpoint(const std::string& host, uint16_t port) {
  // A bare IPv6 literal needs brackets to be readable next to a port.
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

// One pass over host's addresses, each attempt bounded by deadline (and
// kConnectAttemptLimit). On success *fd is a connected non-blocking socket
// with TCP_NODELAY; otherwise *error says why.
bool ConnectOnce(const std::string& host, uint16_t port, Clock::time_point deadline, int* fd,
                 std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    *error = std::string("cannot resolve host: ") + gai_strerror(gai);
    return false;
  }
  *error = "no address to connect to";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int s = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (s < 0) {
      *error = "socket: " + ErrnoText(errno);
      continue;
    }
    int rc = connect(s, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      const auto attempt_deadline = std::min(deadline, Clock::now() + kConnectAttemptLimit);
      int ready = PollOne(s, POLLOUT, attempt_deadline);
      if (ready == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        rc = getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 ? 0 : -1;
        if (rc != 0) errno = err != 0 ? err : errno;
      } else {
        errno = ready == 0 ? ETIMEDOUT : errno;
        rc = -1;
      }
    }
    if (rc != 0) {
      *error = "connect: " + ErrnoText(errno);
      close(s);
      continue;
    }
    // Requests are small and latency-bound: do not let Nagle hold them back.
    int one = 1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    *fd = s;
    freeaddrinfo(res);
    return true;
  }
  freeaddrinfo(res);
  return false;
}

Status SendAll(int fd, const Bytes& data, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status::Remote("connection to the server failed while sending: " + ErrnoText(errno));
    }
    int ready = PollOne(fd, POLLOUT, deadline);
    if (ready == 0) return Status::Timeout("timed out sending the request");
    if (ready < 0) return Status::System("poll: " + ErrnoText(errno));
  }
  return Status::Ok();
}

// Reads exactly buf.size() - *have more bytes into buf.
Status RecvInto(int fd, Bytes& buf, size_t* have, Clock::time_point deadline) {
  while (*have < buf.size()) {
    ssize_t n = recv(fd, buf.data() + *have, buf.size() - *have, 0);
    if (n > 0) {
      *have += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return Status::Remote("the server closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status::Remote("connection to the server failed: " + ErrnoText(errno));
    }
    int ready = PollOne(fd, POLLIN, deadline);
    if (ready == 0) return Status::Timeout("timed out waiting for the reply");
    if (ready < 0) return Status::System("poll: " + ErrnoText(errno));
  }
  return Status::Ok();
}

Status ReceiveReply(int fd, Clock::time_point deadline, Reply* reply,
                    size_t max_frame_bytes = SIZE_MAX) {
  Bytes buf(kHeaderBytes);
  size_t have = 0;
  Status s = RecvInto(fd, buf, &have, deadline);
  if (!s.ok()) return s;
  FrameHeader header;
  s = ParseHeader(buf, &header);
  if (s.ok() && header.command != Command::kReply) {
    s = Status::InvalidArgument(std::string("a ") + CommandName(header.command) +
                                " frame instead of a reply");
  }
  if (s.ok() && header.FrameBytes() > max_frame_bytes) {
    s = Status::InvalidArgument("a reply of " + std::to_string(header.FrameBytes()) +
                                " bytes, more than the " + std::to_string(max_frame_bytes) +
                                " expected");
  }
  if (!s.ok()) return Status::Remote("the server sent a bad reply: " + s.message());
  buf.resize(header.FrameBytes());  // bounded: ParseHeader checked the lengths
  s = RecvInto(fd, buf, &have, deadline);
  if (!s.ok()) return s;
  size_t consumed = 0;
  s = ParseReply(buf, reply, &consumed);
  if (!s.ok() || consumed != buf.size()) {
    return Status::Remote("the server sent a bad reply: " +
                          (s.ok() ? std::string("length mismatch") : s.message()));
  }
  return Status::Ok();
}

// Who this client is to the server (store_protocol.hpp, identities): empty
// identity for none.
struct Identity {
  std::string name;   // "rank/3"
  std::string label;  // "host a, pid 123"
  IdentityKey key{};  // random, made once per client
};

// Sends CLAIM on a fresh connection and reads the answer.
bool Claim(int fd, const Identity& id, Clock::time_point deadline, std::string* error,
           bool* refused) {
  Bytes frame;
  Status st = EncodeClaim(id.name, id.key, id.label, &frame);
  if (st.ok()) st = SendAll(fd, frame, deadline);
  Reply reply;
  if (st.ok()) st = ReceiveReply(fd, deadline, &reply);
  if (!st.ok()) {
    *error = "claiming " + DescribeIdentity(id.name) + ": " + st.message();
    return false;
  }
  if (reply.status != PLEXUS_OK) {
    *refused = true;  // final: the same key would be refused again
    *error = reply.message;
    return false;
  }
  return true;
}

// ConnectOnce, then (with a secret) the handshake, then (with an identity)
// the claim. On failure *refused tells whether the server refused this client
// (its secret or its identity: final) rather than the connection failing.
// *refused_identity: the refusal was of the identity (another process holds it).
bool ConnectAndAuthenticate(const std::string& host, uint16_t port, const auth::Secret& secret,
                            const Identity& identity, Clock::time_point deadline, int* fd,
                            std::string* error, bool* refused, bool* refused_identity = nullptr) {
  *refused = false;
  if (refused_identity != nullptr) *refused_identity = false;
  int s = -1;
  if (!ConnectOnce(host, port, deadline, &s, error)) return false;
  if (secret.present()) {
    const auto handshake_deadline = std::min(deadline, Clock::now() + kHandshakeAttemptLimit);
    const auth::Result r =
        auth::RunInitiator(s, secret, auth::Binding{auth::Purpose::kStore}, handshake_deadline);
    if (!r.ok()) {
      close(s);
      *refused = r.refused;
      *error = "authentication with the job secret failed: " + r.message;
      return false;
    }
  }
  if (!identity.name.empty() &&
      !Claim(s, identity, std::min(deadline, Clock::now() + kHandshakeAttemptLimit), error,
             refused)) {
    if (refused_identity != nullptr) *refused_identity = *refused;
    close(s);
    return false;
  }
  *fd = s;
  return true;
}

class TcpStoreClient final : public RendezvousStore {
 public:
  TcpStoreClient(std::string host, uint16_t port, int fd, auth::Secret secret, Identity identity)
      : host_(std::move(host)),
        port_(port),
        endpoint_(Endpoint(host_, port)),
        secret_(std::move(secret)),
        identity_(std::move(identity)),
        fd_(fd),
        connected_at_(Clock::now()) {}
  ~TcpStoreClient() override { DropConnection(); }

  Status Set(const std::string& key, const Bytes& value,
             std::chrono::milliseconds timeout) override {
    Reply reply;
    Status s = Call(
        Command::kSet, key, timeout,
        [&](uint64_t, Bytes* out) { return EncodeSet(key, value, out); }, &reply);
    if (!s.ok()) return s;
    return FromReply(reply);
  }

  Status Get(const std::string& key, Bytes* value, std::chrono::milliseconds timeout) override {
    if (value == nullptr) return Status::InvalidArgument("store Get: value is null");
    Reply reply;
    Status s = Call(
        Command::kGet, key, timeout,
        [&](uint64_t ms, Bytes* out) { return EncodeGet(key, ms, out); }, &reply);
    if (!s.ok()) return s;
    s = FromReply(reply);
    if (s.ok()) *value = std::move(reply.payload);
    return s;
  }

  Status Add(const std::string& key, int64_t delta, int64_t* new_value,
             std::chrono::milliseconds timeout) override {
    if (new_value == nullptr) return Status::InvalidArgument("store Add: new_value is null");
    Reply reply;
    Status s = Call(
        Command::kAdd, key, timeout,
        [&](uint64_t, Bytes* out) { return EncodeAdd(key, delta, out); }, &reply);
    if (!s.ok()) return s;
    s = FromReply(reply);
    if (!s.ok()) return s;
    if (!DecodeCounter(reply.payload, new_value)) {
      return Status::Remote("store server " + endpoint_ + " answered ADD with a " +
                            std::to_string(reply.payload.size()) + "-byte payload, not 8");
    }
    return Status::Ok();
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    Reply reply;
    Status s = Call(
        Command::kWait, keys.empty() ? std::string() : keys.front(), timeout,
        [&](uint64_t ms, Bytes* out) { return EncodeWait(keys, ms, out); }, &reply);
    if (!s.ok()) return s;
    return FromReply(reply);
  }

 private:
  // The connection is owned by one call at a time. A flag under a mutex with a
  // condition variable rather than std::timed_mutex: the latter's
  // try_lock_until(steady_clock) uses pthread_mutex_clocklock, which
  // ThreadSanitizer (GCC 12) does not intercept, drowning real reports.
  bool AcquireConnection(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!idle_cv_.wait_until(lock, deadline, [this] { return !busy_; })) return false;
    busy_ = true;
    return true;
  }
  void ReleaseConnection() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
    idle_cv_.notify_one();
  }
  struct ConnectionGuard {
    explicit ConnectionGuard(TcpStoreClient* c) : client(c) {}
    ~ConnectionGuard() { client->ReleaseConnection(); }
    ConnectionGuard(const ConnectionGuard&) = delete;
    ConnectionGuard& operator=(const ConnectionGuard&) = delete;
    TcpStoreClient* client;
  };

  Status FromReply(const Reply& reply) const {
    if (reply.status == PLEXUS_OK) return Status::Ok();
    return Status(reply.status, reply.message).WithContext("store " + endpoint_);
  }

  void DropConnection() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  // A connection without a secret that has not carried a request yet and that
  // the server may have dropped meanwhile (see kUnusedConnectionAge). Nothing
  // was sent on it, so replacing it cannot apply a request twice.
  bool UnusedConnectionStale() const {
    if (fd_ < 0 || used_ || secret_.present()) return false;
    if (Clock::now() - connected_at_ >= kUnusedConnectionAge) return true;
    // The server never sends first: readable (EOF, reset) means it closed.
    pollfd p{fd_, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }

  std::string Describe(Command command, const std::string& key) const {
    return std::string("store ") + CommandName(command) +
           (command == Command::kWait ? " starting at key " : " of key ") + QuoteKey(key) + " to " +
           endpoint_;
  }

  // Encodes the request, sends it and reads its reply, within timeout (+ kSlack
  // for the reply to travel). Time spent waiting for another thread's request
  // on this connection counts against timeout, so the server is sent the time
  // that is actually left (GET/WAIT park for that long).
  // encode(timeout_ms, Bytes* out) -> Status builds the request frame.
  template <typename Encoder>
  Status Call(Command command, const std::string& key, std::chrono::milliseconds timeout,
              const Encoder& encode, Reply* reply) {
    const uint64_t timeout_ms = TimeoutToWire(timeout);
    const auto user_deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    Bytes request;
    Status s;
    try {
      // Encoding up front validates every length before waiting for anything.
      s = encode(timeout_ms, &request);
    } catch (const std::exception& e) {
      s = Status::System(std::string("cannot encode the request: ") + e.what());
    }
    if (!s.ok()) return s.WithContext(Describe(command, key));

    // Waiting for the connection is bounded like everything else (the holder
    // may be a GET parked for minutes).
    if (!AcquireConnection(user_deadline)) {
      return Status::Timeout("timed out after " + std::to_string(timeout_ms) +
                             " ms waiting for another request on this connection")
          .WithContext(Describe(command, key));
    }
    ConnectionGuard release(this);
    const auto now = Clock::now();
    // Rounded up, so that an uncontended GET parks for exactly its timeout.
    const uint64_t left_ms =
        user_deadline <= now
            ? 0
            : static_cast<uint64_t>(
                  std::chrono::ceil<std::chrono::milliseconds>(user_deadline - now).count());
    // Whatever the command, the whole call ends by user_deadline + kSlack.
    const auto io_deadline = now + std::chrono::milliseconds(left_ms) + kSlack;
    const bool has_timeout = command == Command::kGet || command == Command::kWait;
    try {
      if (has_timeout && left_ms != timeout_ms) s = encode(left_ms, &request);
      if (s.ok() && UnusedConnectionStale()) DropConnection();
      if (s.ok() && fd_ < 0) {
        std::string error;
        bool refused = false;
        if (!ConnectAndAuthenticate(host_, port_, secret_, identity_, io_deadline, &fd_, &error,
                                    &refused)) {
          fd_ = -1;
          s = Status::Remote("lost the connection to the server and could not reconnect: " + error);
        } else {
          connected_at_ = Clock::now();
          used_ = false;
        }
      }
      if (s.ok()) s = SendAll(fd_, request, io_deadline);
      if (s.ok()) used_ = true;
      if (s.ok()) s = ReceiveReply(fd_, io_deadline, reply);
    } catch (const std::exception& e) {
      s = Status::System(std::string("out of memory: ") + e.what());
    }
    if (!s.ok()) {
      DropConnection();
      return s.WithContext(Describe(command, key));
    }
    return s;
  }

  const std::string host_;
  const uint16_t port_;
  const std::string endpoint_;       // "host:port" for messages
  const auth::Secret secret_;        // absent: no authentication
  const Identity identity_;          // claimed again on every reconnection
  std::mutex mu_;                    // guards busy_
  std::condition_variable idle_cv_;  // signalled when busy_ becomes false
  bool busy_ = false;                // a call owns fd_
  int fd_;  // used only by the call that set busy_; -1 after a failure until the next call
            // reconnects
  // Also owned by the call that set busy_: when fd_ was connected, and whether
  // a request has been sent on it.
  Clock::time_point connected_at_;
  bool used_ = false;
};

}  // namespace
}  // namespace store

namespace store {

Status ConnectTcpStoreWithOptions(const std::string& host, uint16_t port,
                                  std::chrono::milliseconds timeout,
                                  const TcpStoreClientOptions& options,
                                  std::unique_ptr<RendezvousStore>* out) {
  if (out == nullptr) return Status::InvalidArgument("ConnectTcpStore: out is null");
  if (host.empty()) return Status::InvalidArgument("ConnectTcpStore: empty host");
  if (port == 0) return Status::InvalidArgument("ConnectTcpStore: port 0");
  const std::string endpoint = Endpoint(host, port);
  std::string token;
  if (options.token) {
    token = *options.token;
  } else if (Status s = TokenFromEnvironment(&token); !s.ok()) {
    return Status(s.code(), "ConnectTcpStore: " + s.message());
  }
  auth::Secret secret;
  if (std::string error; !auth::Secret::Derive(token, auth::Purpose::kStore, &secret, &error)) {
    return Status::System("ConnectTcpStore: " + error);
  }
  if (!secret.present() && auth::FirstUnauthenticatedUse()) {
    LogLine(PLEXUS_LOG_WARN, "store",
            "no job secret: the connection to the rendezvous store at " + endpoint +
                " is not authenticated, so anyone who reaches it can join the job as a rank, "
                "read what the ranks exchange, and end or mislead the job; give the job a "
                "secret (PLEXUS_TOKEN or PLEXUS_TOKEN_FILE on every rank; plexus-run makes one)");
  }
  Identity identity;
  identity.name = options.identity;
  identity.label = options.label;
  if (!identity.name.empty()) {
    if (!ValidIdentity(identity.name)) {
      return Status::InvalidArgument("ConnectTcpStore: '" + identity.name +
                                     "' is not an identity (rank/N or node/N)");
    }
    size_t got = options.identity_key ? identity.key.size() : 0;
    if (options.identity_key) identity.key = *options.identity_key;
    while (got < identity.key.size()) {
      const ssize_t n = getrandom(identity.key.data() + got, identity.key.size() - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::System("ConnectTcpStore: getrandom: " + ErrnoText(errno));
      got += size_t(n);
    }
  }
  const auto deadline = DeadlineAfter(timeout);
  auto backoff = kBackoffStart;
  std::string error;
  int attempts = 0;
  for (;;) {
    int fd = -1;
    ++attempts;
    // Connection refused is expected while the server is still starting up;
    // resolution failures are retried too (DNS for a fresh pod may lag). A
    // refused authentication is not: the same secret would be refused again.
    bool refused = false, refused_identity = false;
    if (ConnectAndAuthenticate(host, port, secret, identity, deadline, &fd, &error, &refused,
                               &refused_identity)) {
      try {
        *out = std::make_unique<TcpStoreClient>(host, port, fd, secret, identity);
      } catch (const std::exception& e) {
        close(fd);
        return Status::System(std::string("ConnectTcpStore: ") + e.what());
      }
      return Status::Ok();
    }
    if (refused_identity) {
      // Not the server's fault: another process holds this identity.
      return Status::InvalidUsage("store server " + endpoint + ": " + error);
    }
    if (refused) {
      return Status::Remote("store server " + endpoint + ": " + error);
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, kBackoffMax);
  }
  return Status::Timeout("could not connect to store server " + endpoint + " within " +
                         std::to_string(TimeoutToWire(timeout)) + " ms (" +
                         std::to_string(attempts) + " attempts; last error: " + error + ")");
}

Status FetchPublicCredential(const std::string& host, uint16_t port,
                             std::chrono::milliseconds timeout, std::string* credential) {
  const std::string endpoint = Endpoint(host, port);
  const auto deadline = DeadlineAfter(timeout);
  Bytes request;
  Status st = EncodeGet(kPublicCredentialKey, 0, &request);
  if (!st.ok()) return st;
  auto backoff = kBackoffStart;
  std::string error;
  for (;;) {
    int fd = -1;
    // Refused connections are expected while rank 0 is still starting, and a
    // connection dropped before the answer (a busy server) is tried again.
    if (ConnectOnce(host, port, deadline, &fd, &error)) {
      Reply reply;
      st = SendAll(fd, request, deadline);
      // A credential is a few hundred bytes: a larger reply is not read.
      if (st.ok()) st = ReceiveReply(fd, deadline, &reply, kHeaderBytes + 8 + (64 << 10));
      close(fd);
      if (st.ok() && reply.status != PLEXUS_OK) {
        // The server's words, quoted: it has proven nothing yet.
        return Status::Remote("store server " + endpoint +
                              " gives no credential: " + QuoteKey(reply.message));
      }
      if (st.ok()) {
        *credential = std::string(reply.payload.begin(), reply.payload.end());
        return Status::Ok();
      }
      if (st.code() == PLEXUS_ERR_REMOTE && st.message().find("bad reply") != std::string::npos) {
        return st.WithContext("store server " + endpoint + ": the job's credential");
      }
      error = st.message();
    }
    const auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, kBackoffMax);
  }
  return Status::Timeout("could not reach store server " + endpoint + " for the job's credential within " +
                         std::to_string(TimeoutToWire(timeout)) + " ms (last error: " + error + ")");
}

}  // namespace store

Status ConnectTcpStore(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                       std::unique_ptr<RendezvousStore>* out) {
  return store::ConnectTcpStoreWithOptions(host, port, timeout, store::TcpStoreClientOptions{},
                                           out);
}

}  // namespace plexus
