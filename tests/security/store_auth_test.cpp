// Tests of the rendezvous store's authentication with the job secret: a server
// with a token, proper clients, and clients that do not know it (a wrong token,
// none, raw garbage, silence, a half-sent handshake). Each refusal must be
// logged naming the client's address, and the proper client must be served
// throughout. The server's log (stderr) is captured into a file per case.
//
// Timing checks only bound how long something may take, generously.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "plexus/auth/handshake.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/status.hpp"
#include "plugins/host_services.hpp"  // the host's get_config, as backends see it
// Internal headers (test knobs), from core/src (libplexus_internal_dep).
#include "store/job_token.hpp"
#include "store/log_limiter.hpp"
#include "store/store_protocol.hpp"

namespace plexus {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const char* const kToken = "5e1f00d5e1f00d5e1f00d5e1f00d5e1f00d5e1f00d5e1f00d5e1f00d5e1f00d5";

Bytes B(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Redirects this process's stderr (fd 2) into a temporary file while alive.
class StderrCapture {
 public:
  StderrCapture() {
    char path[] = "/tmp/plexus-store-auth.XXXXXX";
    fd_ = mkstemp(path);
    REQUIRE(fd_ >= 0);
    path_ = path;
    std::fflush(stderr);
    saved_ = dup(2);
    REQUIRE(dup2(fd_, 2) == 2);
  }
  ~StderrCapture() {
    Restore();
    close(fd_);
    unlink(path_.c_str());
  }
  // Everything written so far.
  std::string Text() const {
    std::ifstream in(path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Waits (bounded) until the log contains needle; returns the log.
  std::string WaitFor(const std::string& needle, std::chrono::milliseconds limit = 5000ms) const {
    const auto deadline = Clock::now() + limit;
    std::string text = Text();
    while (!Contains(text, needle) && Clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
      text = Text();
    }
    return text;
  }
  void Restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
    // Show the captured log in the test output, for whoever reads a failure.
    const std::string text = Text();
    std::fprintf(stderr, "--- captured log:\n%s---\n", text.c_str());
  }

 private:
  int fd_ = -1;
  int saved_ = -1;
  std::string path_;
};

std::unique_ptr<TcpStoreServer> StartServer(const std::string& token,
                                            std::chrono::milliseconds handshake_timeout = 5000ms) {
  store::TcpStoreServerOptions options;
  options.token = token;
  options.handshake_timeout = handshake_timeout;
  std::unique_ptr<TcpStoreServer> server;
  Status s = store::StartTcpStoreServer("127.0.0.1", 0, options, &server);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  return server;
}

Status Connect(uint16_t port, const std::string& token, std::unique_ptr<RendezvousStore>* out,
               std::chrono::milliseconds timeout = 5000ms) {
  store::TcpStoreClientOptions options;
  options.token = token;
  return store::ConnectTcpStoreWithOptions("127.0.0.1", port, timeout, options, out);
}

int RawConnect(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

// This socket's local "127.0.0.1:port", as the server's log names it.
std::string LocalName(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  return "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
}

// True when the server closes fd (EOF or reset) within timeout; discards data.
bool ClosedByPeerWithin(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const int left =
        int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (poll(&p, 1, std::max(left, 1)) <= 0) continue;
    uint8_t buf[256];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return true;
  }
  return false;
}

// The proper client can still set and get.
void CheckServed(RendezvousStore& client, const std::string& tag) {
  Status s = client.Set("served/" + tag, B(tag), 2s);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  Bytes v;
  s = client.Get("served/" + tag, &v, 2s);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CHECK(v == B(tag));
}

}  // namespace

TEST_CASE(
    "store: clients with the secret are served; a wrong secret is refused at once and logged") {
  StderrCapture log;
  auto server = StartServer(kToken);
  std::unique_ptr<RendezvousStore> good;
  REQUIRE(Connect(server->port(), kToken, &good).ok());
  CheckServed(*good, "before");

  std::unique_ptr<RendezvousStore> bad;
  const auto start = Clock::now();
  Status s = Connect(server->port(), "not-the-job-token", &bad, 20s);
  CHECK_FALSE(s.ok());
  CHECK(s.code() == PLEXUS_ERR_REMOTE);
  CHECK_MESSAGE(Contains(s.message(), "store server 127.0.0.1:"), s.message());
  CHECK_MESSAGE(Contains(s.message(), "PLEXUS_TOKEN differs"), s.message());
  CHECK(Clock::now() - start < 5s);  // refused at once, not retried until the 20 s timeout
  CHECK(bad == nullptr);

  const std::string text = log.WaitFor("refused");
  CHECK_MESSAGE(Contains(text, "plexus store: disconnecting client 127.0.0.1:"), text);
  CHECK_MESSAGE(Contains(text, "refused: it rejected this side's proof"), text);
  CheckServed(*good, "after");

  // Another proper client still gets in.
  std::unique_ptr<RendezvousStore> second;
  REQUIRE(Connect(server->port(), kToken, &second).ok());
  Bytes v;
  CHECK(second->Get("served/after", &v, 2s).ok());
}

TEST_CASE("store: a client that answers the challenge with a forged proof is refused and logged") {
  // Not an honest client with another token (which rejects the server's proof
  // itself): this one ignores the challenge and sends a made-up MAC, as an
  // attacker would. The server must check it, refuse, say so, and log it.
  StderrCapture log;
  auto server = StartServer(kToken);
  std::unique_ptr<RendezvousStore> good;
  REQUIRE(Connect(server->port(), kToken, &good).ok());

  int fd = RawConnect(server->port());
  const std::string name = LocalName(fd);
  auth::Message hello;
  hello.type = auth::MessageType::kHello;
  hello.purpose = auth::Purpose::kStore;
  hello.nonce.fill(7);
  auth::Wire wire = auth::EncodeMessage(hello);
  REQUIRE(send(fd, wire.data(), wire.size(), MSG_NOSIGNAL) == ssize_t(wire.size()));
  auto receive = [&](auth::Message* m) {
    auth::Wire in{};
    size_t have = 0;
    while (have < in.size()) {
      pollfd p{fd, POLLIN, 0};
      REQUIRE(poll(&p, 1, 3000) == 1);
      const ssize_t n = recv(fd, in.data() + have, in.size() - have, 0);
      REQUIRE(n > 0);
      have += size_t(n);
    }
    std::string error;
    REQUIRE_MESSAGE(auth::ParseMessage(in, m, &error), error);
  };
  auth::Message challenge;
  receive(&challenge);
  CHECK(challenge.type == auth::MessageType::kChallenge);
  CHECK(challenge.status == auth::MessageStatus::kOk);
  auth::Message proof;
  proof.type = auth::MessageType::kProof;
  proof.purpose = auth::Purpose::kStore;
  proof.mac.fill(0x5a);
  wire = auth::EncodeMessage(proof);
  REQUIRE(send(fd, wire.data(), wire.size(), MSG_NOSIGNAL) == ssize_t(wire.size()));
  auth::Message result;
  receive(&result);
  CHECK(result.type == auth::MessageType::kResult);
  CHECK(result.status == auth::MessageStatus::kRejected);
  CHECK(ClosedByPeerWithin(fd, 3s));
  close(fd);
  const std::string text = log.WaitFor(name);
  CHECK_MESSAGE(Contains(text, "disconnecting client " + name +
                                   ": refused: it failed authentication: it does not know the "
                                   "job secret"),
                text);
  CheckServed(*good, "after-forgery");
}

TEST_CASE("store: a client without the secret is told PLEXUS_TOKEN is required, and logged") {
  StderrCapture log;
  auto server = StartServer(kToken);
  std::unique_ptr<RendezvousStore> good;
  REQUIRE(Connect(server->port(), kToken, &good).ok());

  std::unique_ptr<RendezvousStore> none;
  // Connecting succeeds (no handshake is tried without a secret); the first request fails.
  REQUIRE(Connect(server->port(), "", &none).ok());
  Status s = none->Set("k", B("v"), 2s);
  CHECK(s.code() == PLEXUS_ERR_INVALID_USAGE);
  CHECK_MESSAGE(Contains(s.message(), "requires authentication with the job secret"), s.message());
  CHECK_MESSAGE(Contains(s.message(), "PLEXUS_TOKEN"), s.message());
  const std::string text = log.WaitFor("without authenticating");
  CHECK_MESSAGE(Contains(text, "sent a store SET request without authenticating"), text);
  CheckServed(*good, "after-none");
  Bytes v;
  CHECK(good->Get("k", &v, 100ms).code() == PLEXUS_ERR_TIMEOUT);  // the SET was not applied
}

TEST_CASE(
    "store: garbage, silence, a half handshake and an oversized request are dropped and "
    "logged while others are served") {
  StderrCapture log;
  auto server = StartServer(kToken, 500ms);
  std::unique_ptr<RendezvousStore> good;
  REQUIRE(Connect(server->port(), kToken, &good).ok());

  // Raw garbage: dropped at once.
  int garbage = RawConnect(server->port());
  const std::string garbage_name = LocalName(garbage);
  const std::string http = "GET / HTTP/1.1\r\nHost: example\r\n\r\n";
  REQUIRE(send(garbage, http.data(), http.size(), MSG_NOSIGNAL) == ssize_t(http.size()));
  CHECK(ClosedByPeerWithin(garbage, 3s));
  close(garbage);

  // Silence and half a HELLO: dropped after the handshake timeout (0.5 s);
  // meanwhile the proper client is served.
  int silent = RawConnect(server->port());
  const std::string silent_name = LocalName(silent);
  int half = RawConnect(server->port());
  const std::string half_name = LocalName(half);
  plexus::auth::Message hello;
  hello.type = plexus::auth::MessageType::kHello;
  const plexus::auth::Wire wire = plexus::auth::EncodeMessage(hello);
  REQUIRE(send(half, wire.data(), 40, MSG_NOSIGNAL) == 40);
  for (int i = 0; i < 10; ++i) CheckServed(*good, "meanwhile-" + std::to_string(i));
  CHECK(ClosedByPeerWithin(silent, 5s));
  CHECK(ClosedByPeerWithin(half, 5s));
  close(silent);
  close(half);

  // A 1 MiB SET without authenticating: dropped from its header, never read.
  int big = RawConnect(server->port());
  const std::string big_name = LocalName(big);
  Bytes header;
  auto put = [&](uint64_t v, int n) {
    for (int i = 0; i < n; ++i) header.push_back(uint8_t(v >> (8 * i)));
  };
  put(store::kMagic, 4);
  put(store::kProtocolVersion, 2);
  put(uint8_t(store::Command::kSet), 1);
  put(0, 1);
  put(1, 4);
  put(uint64_t{1} << 20, 8);
  REQUIRE(send(big, header.data(), header.size(), MSG_NOSIGNAL) == ssize_t(header.size()));
  CHECK(ClosedByPeerWithin(big, 3s));
  close(big);

  CheckServed(*good, "after");
  const std::string text = log.WaitFor(big_name);
  CHECK_MESSAGE(
      Contains(text, "disconnecting client " + garbage_name + ": refused: it did not authenticate"),
      text);
  CHECK_MESSAGE(Contains(text, "disconnecting client " + silent_name +
                                   ": refused: it did not complete authentication"),
                text);
  CHECK_MESSAGE(Contains(text, "disconnecting client " + half_name +
                                   ": refused: it did not complete authentication"),
                text);
  CHECK_MESSAGE(Contains(text, "disconnecting client " + big_name +
                                   ": refused: it sent a store SET request without"),
                text);
}

TEST_CASE("store: a client with a secret refuses a store without one, and the store logs it") {
  StderrCapture log;
  auto server = StartServer("");
  std::unique_ptr<RendezvousStore> plain;
  REQUIRE(Connect(server->port(), "", &plain).ok());
  CheckServed(*plain, "plain");

  std::unique_ptr<RendezvousStore> with_secret;
  Status s = Connect(server->port(), kToken, &with_secret, 20s);
  CHECK(s.code() == PLEXUS_ERR_REMOTE);
  CHECK_MESSAGE(Contains(s.message(), "PLEXUS_TOKEN is not set where it runs"), s.message());
  const std::string text = log.WaitFor("PLEXUS_TOKEN is not set here");
  CHECK_MESSAGE(Contains(text, "refused: it authenticates with a job secret"), text);
  CheckServed(*plain, "plain-after");
}

TEST_CASE("store: TcpStoreServer::Start and ConnectTcpStore take the secret from PLEXUS_TOKEN") {
  StderrCapture log;
  setenv("PLEXUS_TOKEN", kToken, 1);
  std::unique_ptr<TcpStoreServer> server;
  Status s = TcpStoreServer::Start("127.0.0.1", 0, &server);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  std::unique_ptr<RendezvousStore> client;
  s = ConnectTcpStore("127.0.0.1", server->port(), 5s, &client);
  unsetenv("PLEXUS_TOKEN");
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CheckServed(*client, "env");
  // A client without the token is refused by that server.
  std::unique_ptr<RendezvousStore> none;
  REQUIRE(ConnectTcpStore("127.0.0.1", server->port(), 5s, &none).ok());
  CHECK(none->Set("x", B("y"), 2s).code() == PLEXUS_ERR_INVALID_USAGE);
  // And the proper client keeps working.
  CheckServed(*client, "env-after");
}

}  // namespace plexus

namespace plexus {

TEST_CASE("store: 300 refused clients cost ten log lines, not 300 (the rest are counted)") {
  StderrCapture log;
  auto server = StartServer(kToken, 500ms);
  const std::string http = "GET / HTTP/1.1\r\nHost: example\r\n\r\n";
  for (int i = 0; i < 300; ++i) {
    int fd = RawConnect(server->port());
    REQUIRE(send(fd, http.data(), http.size(), MSG_NOSIGNAL) == ssize_t(http.size()));
    CHECK(ClosedByPeerWithin(fd, 3s));
    close(fd);
  }
  std::unique_ptr<RendezvousStore> good;  // still served
  REQUIRE(Connect(server->port(), kToken, &good).ok());
  CheckServed(*good, "after-the-flood");
  const std::string text = log.Text();
  size_t lines = 0;
  for (size_t at = text.find("disconnecting client"); at != std::string::npos;
       at = text.find("disconnecting client", at + 1)) {
    ++lines;
  }
  CHECK(lines == 10);
}

// --- Idle strangers (issue 13): without a secret a client must send a valid
// request within handshake_timeout, at most 256 clients are unproven at once
// (the oldest gives way), and the server keeps a reserve of descriptors.

namespace {

// Lowers this process's RLIMIT_NOFILE (soft) while alive.
class FdLimit {
 public:
  explicit FdLimit(rlim_t soft) {
    REQUIRE(getrlimit(RLIMIT_NOFILE, &saved_) == 0);
    rlimit lowered = saved_;
    lowered.rlim_cur = std::min(soft, saved_.rlim_max);
    REQUIRE(setrlimit(RLIMIT_NOFILE, &lowered) == 0);
  }
  ~FdLimit() { setrlimit(RLIMIT_NOFILE, &saved_); }

 private:
  rlimit saved_{};
};

// The lowest free descriptor: about how many this process has open.
int LowestFreeFd() {
  const int fd = dup(0);
  REQUIRE(fd >= 0);
  close(fd);
  return fd;
}

// Up to n connections that never send anything; stops at the first that
// cannot be made (out of descriptors).
std::vector<int> IdleConnections(uint16_t port, int n) {
  std::vector<int> fds;
  for (int i = 0; i < n; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      close(fd);
      break;
    }
    fds.push_back(fd);
  }
  return fds;
}

void CloseAll(std::vector<int>& fds) {
  for (int fd : fds) close(fd);
  fds.clear();
}

// Sends one store frame on a raw socket and reads its reply.
store::Reply RawRequest(int fd, const Bytes& frame, std::chrono::milliseconds limit = 3000ms) {
  REQUIRE(send(fd, frame.data(), frame.size(), MSG_NOSIGNAL) == ssize_t(frame.size()));
  Bytes in;
  const auto deadline = Clock::now() + limit;
  for (;;) {
    store::Reply reply;
    size_t consumed = 0;
    if (in.size() >= store::kHeaderBytes) {
      Status s = store::ParseReply(in, &reply, &consumed);
      REQUIRE_MESSAGE(s.ok(), s.ToString());
      if (consumed > 0) return reply;
    }
    pollfd p{fd, POLLIN, 0};
    const int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::max(deadline - Clock::now(), Clock::duration(1ms)))
                             .count());
    REQUIRE_MESSAGE(poll(&p, 1, left) == 1, "no reply in time");
    uint8_t buf[4096];
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    REQUIRE_MESSAGE(n > 0, "the server closed the connection");
    in.insert(in.end(), buf, buf + n);
  }
}

int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("store: the public credential is the one thing given without the secret") {
  StderrCapture log;
  store::TcpStoreServerOptions options;
  options.token = kToken;
  options.public_credential = "MUNGE:not-a-real-one:";
  std::unique_ptr<TcpStoreServer> server;
  REQUIRE(store::StartTcpStoreServer("127.0.0.1", 0, options, &server).ok());
  std::string credential;
  REQUIRE(store::FetchPublicCredential("127.0.0.1", server->port(), 2s, &credential).ok());
  CHECK(credential == options.public_credential);
  // Any other key, even one of the same length, is refused as before, logged.
  std::string other(store::kPublicCredentialKey);
  other.back() = 'X';
  Bytes frame;
  REQUIRE(store::EncodeGet(other, 0, &frame).ok());
  const int fd = RawConnect(server->port());
  const store::Reply reply = RawRequest(fd, frame);
  close(fd);
  CHECK(reply.status == PLEXUS_ERR_INVALID_USAGE);
  CHECK(Contains(reply.message, "requires authentication with the job secret"));
  CHECK(Contains(log.WaitFor("without authenticating"), "without authenticating"));
  // Nothing was learnt about the store itself: a secret-holder is served as usual.
  std::unique_ptr<RendezvousStore> good;
  REQUIRE(Connect(server->port(), kToken, &good).ok());
  CheckServed(*good, "after-credential");
  // A server without one gives nothing, and says so.
  auto plain = StartServer(kToken);
  const Status st = store::FetchPublicCredential("127.0.0.1", plain->port(), 2s, &credential);
  CHECK(st.code() == PLEXUS_ERR_REMOTE);
  CHECK(Contains(st.message(), "gives no credential"));
}

TEST_CASE("store without a secret: 300 idle connections are dropped after handshake_timeout") {
  // Before: "authenticated" from the start, an idle connection was kept for
  // ever; 1100 of them used up rank 0's descriptors.
  StderrCapture log;
  auto server = StartServer("", 1000ms);
  std::unique_ptr<RendezvousStore> good;
  REQUIRE(Connect(server->port(), "", &good).ok());
  CheckServed(*good, "before");

  // One idle connection: dropped at handshake_timeout, not before, and logged.
  int one = RawConnect(server->port());
  const std::string one_name = LocalName(one);
  auto start = Clock::now();
  CHECK(ClosedByPeerWithin(one, 4000ms));
  CHECK(MsSince(start) >= 900);
  close(one);
  const std::string text = log.WaitFor(one_name);
  CHECK_MESSAGE(Contains(text, "disconnecting client " + one_name +
                                   ": refused: it did not send a complete request within 1000 "
                                   "ms of connecting (it sent nothing)"),
                text);

  // 300 of them (more than the 256 kept at once): all dropped.
  start = Clock::now();
  std::vector<int> idle = IdleConnections(server->port(), 300);
  REQUIRE(idle.size() == 300);
  // Served during the flood: the client from before, and one connecting now.
  CheckServed(*good, "during");
  std::unique_ptr<RendezvousStore> during;
  REQUIRE(Connect(server->port(), "", &during).ok());
  CheckServed(*during, "during-new");

  const auto deadline = start + 1000ms + 3s;  // handshake_timeout + slack
  size_t dropped = 0;
  for (int fd : idle) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    dropped += ClosedByPeerWithin(fd, std::max(left, std::chrono::milliseconds(1)));
  }
  CHECK(dropped == 300);
  MESSAGE("300 idle connections dropped after " << MsSince(start) << " ms");
  CloseAll(idle);

  // Both clients have been idle longer than handshake_timeout by now: still served.
  CheckServed(*good, "after");
  CheckServed(*during, "after-new");
}

TEST_CASE("store: a client connecting after 400 idle connections is served at once") {
  // The process's descriptors are limited so that the 400 connections (both
  // ends are in this process) would exhaust them if the server kept every one:
  // before the cap on unproven clients the new client could not even open its
  // socket. With the cap (256) and the reserve, it is served at once.
  for (const std::string& token : {std::string(), std::string(kToken)}) {
    CAPTURE(token.empty());
    StderrCapture log;
    auto server = StartServer(token);  // handshake_timeout 5 s: no help from the deadline
    std::unique_ptr<RendezvousStore> good;
    REQUIRE(Connect(server->port(), token, &good).ok());
    CheckServed(*good, "before");
    std::vector<int> idle;
    {
      FdLimit limit(rlim_t(LowestFreeFd() + 760));
      idle = IdleConnections(server->port(), 400);
      CHECK(idle.size() == 400);

      const auto start = Clock::now();
      std::unique_ptr<RendezvousStore> late;
      Status s = Connect(server->port(), token, &late, 1000ms);
      REQUIRE_MESSAGE(s.ok(), s.ToString());
      s = late->Set("late", B("in"), 1000ms);
      REQUIRE_MESSAGE(s.ok(), s.ToString());
      const int64_t ms = MsSince(start);
      MESSAGE("a client after 400 idle connections was served in " << ms << " ms");
      CHECK(ms < 1000);
      Bytes v;
      REQUIRE(good->Get("late", &v, 1000ms).ok());
      CHECK(v == B("in"));
      // Once proven it is not evicted, however long the idle ones keep coming.
      std::vector<int> more = IdleConnections(server->port(), 100);
      std::this_thread::sleep_for(400ms);  // > the eviction grace (250 ms)
      CheckServed(*late, "late-after");
      CheckServed(*good, "good-after");
      CloseAll(more);
    }
    CloseAll(idle);
    const std::string text = log.Text();
    CHECK_MESSAGE(Contains(text, "(the most kept at once)"), text);
  }
}

// n idle connections to port made by a child process (so that they use none
// of this process's descriptors); it keeps them until Stop().
class IdleChild {
 public:
  IdleChild(uint16_t port, int n) {
    int ready[2], quit[2];
    REQUIRE(pipe(ready) == 0);
    REQUIRE(pipe(quit) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {  // only async-signal-safe calls from here on
      close(ready[0]);
      close(quit[1]);
      rlimit r{};  // not the parent's lowered limit
      getrlimit(RLIMIT_NOFILE, &r);
      r.rlim_cur = r.rlim_max;
      setrlimit(RLIMIT_NOFILE, &r);
      int made = 0;
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      for (int i = 0; i < n; ++i) {
        const int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) break;
        ++made;
      }
      (void)!write(ready[1], &made, sizeof made);
      char c;
      (void)!read(quit[0], &c, 1);  // returns at EOF: the parent closed it
      _exit(0);
    }
    close(ready[1]);
    close(quit[0]);
    quit_ = quit[1];
    REQUIRE(read(ready[0], &made_, sizeof made_) == ssize_t(sizeof made_));
    close(ready[0]);
  }
  ~IdleChild() { Stop(); }
  void Stop() {
    if (pid_ <= 0) return;
    close(quit_);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int made() const { return made_; }

 private:
  pid_t pid_ = -1;
  int quit_ = -1;
  int made_ = 0;
};

TEST_CASE(
    "store: a flood leaves the process a reserve of descriptors, and a client still gets in") {
  // 400 idle connections (from another process) against a server whose
  // process may open only ~200 descriptors: the server stops short of the
  // last 64 (the oldest idle connection gives way to each new one), so the
  // rest of the process can still open files and sockets, and a new client is
  // served at once. Before, the server took every descriptor there was.
  StderrCapture log;
  auto server = StartServer("");
  std::unique_ptr<RendezvousStore> good;
  REQUIRE(Connect(server->port(), "", &good).ok());
  CheckServed(*good, "before");
  {
    FdLimit limit(rlim_t(LowestFreeFd() + 200));
    IdleChild flood(server->port(), 400);
    CHECK(flood.made() == 400);
    std::this_thread::sleep_for(300ms);  // the server accepts what it will
    std::vector<int> spare;
    for (int i = 0; i < 32; ++i) {
      const int fd = dup(0);
      if (fd < 0) break;
      spare.push_back(fd);
    }
    CHECK(spare.size() == 32);
    CloseAll(spare);

    const auto start = Clock::now();
    std::unique_ptr<RendezvousStore> late;
    Status s = Connect(server->port(), "", &late, 1000ms);
    REQUIRE_MESSAGE(s.ok(), s.ToString());
    s = late->Set("late", B("in"), 1000ms);
    REQUIRE_MESSAGE(s.ok(), s.ToString());
    const int64_t ms = MsSince(start);
    MESSAGE("a client at the descriptor reserve was served in " << ms << " ms");
    CHECK(ms < 1000);
    CheckServed(*good, "after");
  }
  const std::string text = log.Text();
  CHECK_MESSAGE(Contains(text, "the process is running out of descriptors"), text);
}

TEST_CASE("store without a secret: a client idle after its first request is never dropped") {
  StderrCapture log;
  auto server = StartServer("", 300ms);
  // Raw, so that no client library reconnects behind the test's back.
  int fd = RawConnect(server->port());
  Bytes frame;
  REQUIRE(store::EncodeSet("idle/k", B("v"), &frame).ok());
  CHECK(RawRequest(fd, frame).status == PLEXUS_OK);
  std::this_thread::sleep_for(1000ms);  // over three handshake_timeouts
  CHECK_FALSE(ClosedByPeerWithin(fd, 10ms));
  REQUIRE(store::EncodeGet("idle/k", 1000, &frame).ok());
  store::Reply reply = RawRequest(fd, frame);
  CHECK(reply.status == PLEXUS_OK);
  CHECK(reply.payload == B("v"));
  close(fd);

  // A first request that parks (GET of a missing key) for longer than
  // handshake_timeout proves the client as well: its TIMEOUT reply comes.
  fd = RawConnect(server->port());
  REQUIRE(store::EncodeGet("idle/missing", 800, &frame).ok());
  const auto start = Clock::now();
  reply = RawRequest(fd, frame);
  CHECK(reply.status == PLEXUS_ERR_TIMEOUT);
  CHECK(MsSince(start) >= 750);
  close(fd);

  // And through the client library.
  std::unique_ptr<RendezvousStore> client;
  REQUIRE(Connect(server->port(), "", &client).ok());
  CheckServed(*client, "first");
  std::this_thread::sleep_for(1000ms);
  CheckServed(*client, "after-idle");
  CHECK_FALSE(Contains(log.Text(), "disconnecting client"));
}

TEST_CASE("store without a secret: a client whose first request comes late is still served") {
  // ConnectTcpStore connects at once; an application may make its first
  // request much later. The server has dropped that unused connection by then;
  // the client replaces it before sending (nothing was sent on it).
  StderrCapture log;
  auto server = StartServer("", 300ms);
  std::unique_ptr<RendezvousStore> client;
  REQUIRE(Connect(server->port(), "", &client).ok());
  std::this_thread::sleep_for(700ms);
  CheckServed(*client, "late-first");
  std::unique_ptr<RendezvousStore> older;  // past the client's own 1 s limit too
  REQUIRE(Connect(server->port(), "", &older).ok());
  std::this_thread::sleep_for(1200ms);
  CheckServed(*older, "later-first");
}

namespace {

// Sets PLEXUS_TOKEN / PLEXUS_TOKEN_FILE for a test and restores them after.
class TokenEnv {
 public:
  TokenEnv() {
    for (const char* name : {"PLEXUS_TOKEN", "PLEXUS_TOKEN_FILE"}) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
    }
  }
  ~TokenEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }
  void Set(const char* token, const std::string& file) {
    if (token) {
      setenv("PLEXUS_TOKEN", token, 1);
    } else {
      unsetenv("PLEXUS_TOKEN");
    }
    if (file.empty()) {
      unsetenv("PLEXUS_TOKEN_FILE");
    } else {
      setenv("PLEXUS_TOKEN_FILE", file.c_str(), 1);
    }
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

class TempDir {
 public:
  TempDir() {
    char path[] = "/tmp/plexus-token-file.XXXXXX";
    REQUIRE(mkdtemp(path) != nullptr);
    path_ = path;
  }
  ~TempDir() {
    for (const std::string& f : files_) unlink(f.c_str());
    rmdir(path_.c_str());
  }
  std::string Write(const std::string& name, const std::string& text, mode_t mode) {
    const std::string file = path_ + "/" + name;
    std::ofstream(file) << text;
    REQUIRE(chmod(file.c_str(), mode) == 0);
    files_.push_back(file);
    return file;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<std::string> files_;
};

// PLEXUS_TOKEN as a backend sees it through the host's get_config.
std::string BackendsToken() {
  HostServices host("test", "", {});
  const plexus_host_v1* t = host.table();
  char buf[256];
  const int64_t n = t->get_config(t->ctx, "PLEXUS_TOKEN", buf, sizeof buf);
  return n < 0 ? std::string("<unset>") : std::string(buf);
}

}  // namespace

TEST_CASE("PLEXUS_TOKEN_FILE: the store, its clients and the backends read the secret from it") {
  StderrCapture log;
  TokenEnv env;
  TempDir dir;
  // Group-readable: used, with a warning. The trailing newline is not part of it.
  const std::string file = dir.Write("token", std::string(kToken) + "\n", 0640);
  env.Set(nullptr, file);

  std::string token;
  REQUIRE(store::TokenFromEnvironment(&token).ok());
  CHECK(token == kToken);
  CHECK(BackendsToken() == kToken);  // so the TCP mesh authenticates with it too

  std::unique_ptr<TcpStoreServer> server;
  Status s = TcpStoreServer::Start("127.0.0.1", 0, &server);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  std::unique_ptr<RendezvousStore> client;
  s = ConnectTcpStore("127.0.0.1", server->port(), 5s, &client);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CheckServed(*client, "from-file");
  // The server's secret is exactly the file's first line: a client given it
  // directly authenticates, one without a secret is refused.
  std::unique_ptr<RendezvousStore> direct;
  REQUIRE(Connect(server->port(), kToken, &direct).ok());
  CheckServed(*direct, "direct");
  std::unique_ptr<RendezvousStore> none;
  REQUIRE(Connect(server->port(), "", &none).ok());
  CHECK(none->Set("x", B("y"), 2s).code() == PLEXUS_ERR_INVALID_USAGE);
  CHECK_MESSAGE(Contains(log.Text(), "PLEXUS_TOKEN_FILE '" + file +
                                         "' is accessible by group or others (mode 0640)"),
                log.Text());

  // A client whose file holds another secret is refused, at once.
  const std::string other = dir.Write("other", "not-the-job-secret\n", 0600);
  env.Set(nullptr, other);
  std::unique_ptr<RendezvousStore> stranger;
  const auto start = Clock::now();
  s = ConnectTcpStore("127.0.0.1", server->port(), 20s, &stranger);
  CHECK(s.code() == PLEXUS_ERR_REMOTE);
  CHECK_MESSAGE(Contains(s.message(), "PLEXUS_TOKEN differs"), s.message());
  CHECK(MsSince(start) < 5000);

  // PLEXUS_TOKEN wins over PLEXUS_TOKEN_FILE (plexus-run sets it for every
  // job; the file is then not even read).
  env.Set(kToken, dir.path() + "/missing");
  std::unique_ptr<RendezvousStore> both;
  s = ConnectTcpStore("127.0.0.1", server->port(), 5s, &both);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CheckServed(*both, "both-set");
  CHECK(BackendsToken() == kToken);
  CheckServed(*client, "from-file-after");
}

TEST_CASE("PLEXUS_TOKEN_FILE that is missing, empty or not a file is an error naming it") {
  StderrCapture log;
  TokenEnv env;
  TempDir dir;
  struct Case {
    std::string path;
    std::string says;
  };
  std::vector<Case> cases = {
      {dir.path() + "/missing", "' cannot be read: No such file or directory"},
      {dir.Write("empty", "\n \n", 0600), "' is empty: it must hold the job secret"},
      {dir.path(), "' is not a regular file"},
  };
  if (geteuid() != 0) {  // root reads it anyway
    cases.push_back({dir.Write("unreadable", "secret\n", 0000), "' cannot be read: Permission"});
  }
  for (const Case& c : cases) {
    CAPTURE(c.path);
    env.Set(nullptr, c.path);
    const std::string expected = "PLEXUS_TOKEN_FILE '" + c.path + c.says;
    std::string token;
    Status s = store::TokenFromEnvironment(&token);
    CHECK(s.code() == PLEXUS_ERR_INVALID_ARGUMENT);
    CHECK_MESSAGE(Contains(s.message(), expected), s.message());

    std::unique_ptr<TcpStoreServer> server;
    s = TcpStoreServer::Start("127.0.0.1", 0, &server);
    CHECK_MESSAGE(Contains(s.message(), "store server: " + expected), s.ToString());
    CHECK(server == nullptr);

    std::unique_ptr<RendezvousStore> client;
    const auto start = Clock::now();
    s = ConnectTcpStore("127.0.0.1", 9, 20s, &client);  // fails before connecting
    CHECK_MESSAGE(Contains(s.message(), "ConnectTcpStore: " + expected), s.ToString());
    CHECK(MsSince(start) < 1000);

    // A backend sees no secret and the log says why; the store failed already.
    CHECK(BackendsToken() == "<unset>");
    CHECK_MESSAGE(Contains(log.Text(), expected), log.Text());
  }
}

TEST_CASE("LogLimiter: a burst per window, then one line saying how many were held back") {
  using plexus::store::LogLimiter;
  LogLimiter limiter(3, 10s);
  const auto t0 = LogLimiter::Clock::now();
  size_t printed = 0;
  for (int i = 0; i < 100; ++i) printed += limiter.Add("refused " + std::to_string(i), t0).size();
  CHECK(printed == 3);
  CHECK(!limiter.Flush(t0 + 9s));
  REQUIRE(limiter.FlushAt());
  const auto summary = limiter.Flush(t0 + 10s);
  REQUIRE(summary);
  CHECK(Contains(*summary, "97 more like this in 10 s"));
  CHECK(Contains(*summary, "(the last: refused 99)"));
  CHECK(!limiter.Flush(t0 + 11s));  // said once
  CHECK(!limiter.FlushAt());
  // A new window: a new burst.
  CHECK(limiter.Add("refused again", t0 + 12s) == std::vector<std::string>{"refused again"});
}

}  // namespace plexus
