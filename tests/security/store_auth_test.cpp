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
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "plexus/auth/handshake.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/status.hpp"
// Internal header (test knobs); relative so no extra include path is needed.
#include "../../core/src/store/log_limiter.hpp"
#include "../../core/src/store/store_protocol.hpp"

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
