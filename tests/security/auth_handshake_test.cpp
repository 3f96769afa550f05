// Tests of the job-secret handshake (auth/): key derivation, the message codec,
// the responder state machine, and both blocking handshakes over a socketpair
// with matching, mismatching and missing secrets. Every handshake runs with a
// deadline of a few seconds, so a broken one fails instead of hanging.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plexus/auth/handshake.hpp"

namespace {

using namespace plexus::auth;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

const char* const kToken = "3f0c8a1e5b7d9f2a4c6e8b0d2f4a6c8e1b3d5f7a9c0e2b4d6f8a1c3e5b7d9f2a";
const char* const kOtherToken = "0000000000000000000000000000000000000000000000000000000000000001";

Secret MakeSecret(const std::string& token, Purpose purpose = Purpose::kTcpMesh) {
  Secret s;
  std::string error;
  REQUIRE_MESSAGE(Secret::Derive(token, purpose, &s, &error), error);
  return s;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A connected pair of stream sockets, closed at the end of the scope.
struct SocketPair {
  int fd[2] = {-1, -1};
  SocketPair() { REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fd) == 0); }
  ~SocketPair() {
    for (int f : fd) {
      if (f >= 0) close(f);
    }
  }
};

struct Both {
  Result initiator;
  Result responder;
  double seconds = 0;
};

// Runs the initiator on one end and the responder on the other, concurrently.
Both RunBoth(const Secret& initiator_secret, const Binding& claimed, const Secret& responder_secret,
             const Binding& expected, std::chrono::milliseconds limit = 5000ms) {
  SocketPair sp;
  const auto start = Clock::now();
  const auto deadline = start + limit;
  auto responder = std::async(std::launch::async, [&] {
    return RunResponder(sp.fd[1], responder_secret, expected, deadline);
  });
  Both both;
  both.initiator = RunInitiator(sp.fd[0], initiator_secret, claimed, deadline);
  // Like the real callers: a failed side closes its socket, so the other is not left waiting.
  if (!both.initiator.ok()) {
    close(sp.fd[0]);
    sp.fd[0] = -1;
  }
  both.responder = responder.get();
  both.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return both;
}

Message Parse(const Wire& wire) {
  Message m;
  std::string error;
  REQUIRE_MESSAGE(ParseMessage(wire, &m, &error), error);
  return m;
}

}  // namespace

TEST_CASE("keys are derived per purpose and never equal the token") {
  const Secret store = MakeSecret(kToken, Purpose::kStore);
  const Secret mesh = MakeSecret(kToken, Purpose::kTcpMesh);
  const Secret again = MakeSecret(kToken, Purpose::kTcpMesh);
  const Secret other = MakeSecret(kOtherToken, Purpose::kTcpMesh);
  CHECK(store.present());
  CHECK(mesh.present());
  CHECK(store.key() != mesh.key());
  CHECK(mesh.key() == again.key());
  CHECK(mesh.key() != other.key());
  CHECK(std::memcmp(mesh.key().data(), kToken, mesh.key().size()) != 0);

  Secret none = MakeSecret("");
  CHECK_FALSE(none.present());
}

TEST_CASE("messages round-trip and malformed ones are refused with a reason") {
  Message m;
  m.type = MessageType::kHello;
  m.purpose = Purpose::kTcpMesh;
  m.context = 0x0123456789abcdefULL;
  m.rank = 7;
  for (size_t i = 0; i < m.nonce.size(); ++i) m.nonce[i] = uint8_t(i + 1);
  const Wire wire = EncodeMessage(m);
  CHECK(wire.size() == kMessageBytes);
  CHECK(StartsWithMagic(wire));
  const Message back = Parse(wire);
  CHECK(back.type == m.type);
  CHECK(back.purpose == m.purpose);
  CHECK(back.context == m.context);
  CHECK(back.rank == m.rank);
  CHECK(back.nonce == m.nonce);

  auto refused = [](std::span<const uint8_t> bytes, const char* reason) {
    Message out;
    std::string error;
    const bool ok = ParseMessage(bytes, &out, &error);
    CHECK_FALSE(ok);
    CHECK_MESSAGE(Contains(error, reason), error);
  };
  refused(std::span(wire).first(kMessageBytes - 1), "87 bytes");
  Wire bad = wire;
  bad[0] = 'X';
  refused(bad, "bad magic");
  bad = wire;
  bad[4] = 9;
  refused(bad, "unsupported version 9");
  bad = wire;
  bad[5] = 0;
  refused(bad, "unknown type 0");
  bad = wire;
  bad[6] = 3;
  refused(bad, "unknown purpose 3");
  bad = wire;
  bad[7] = 3;
  refused(bad, "unknown status 3");
  bad = wire;
  bad[22] = 1;
  refused(bad, "reserved");
  bad = wire;
  bad[60] = 1;  // a HELLO with a MAC
  refused(bad, "HELLO carries a MAC");
  Message result;
  result.type = MessageType::kResult;
  result.rank = 1;  // only HELLO names a rank
  refused(EncodeMessage(result), "non-zero context or rank");
}

TEST_CASE("matching secrets: both sides authenticate, and the secret never goes on the wire") {
  // Relay the handshake through a tap that records every byte in both directions.
  SocketPair a, b;  // initiator <-> tap(a.fd[1], b.fd[0]) <-> responder
  std::vector<uint8_t> seen;
  std::mutex seen_mu;
  std::atomic<bool> stop{false};
  std::thread tap([&] {
    uint8_t buf[256];
    while (!stop) {
      for (auto [from, to] : {std::pair{a.fd[1], b.fd[0]}, std::pair{b.fd[0], a.fd[1]}}) {
        const ssize_t n = recv(from, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
          std::lock_guard<std::mutex> lock(seen_mu);
          seen.insert(seen.end(), buf, buf + n);
          (void)send(to, buf, size_t(n), MSG_NOSIGNAL);  // tiny: fits the socket buffer
        }
      }
      std::this_thread::sleep_for(1ms);
    }
  });
  const Secret secret = MakeSecret(kToken);
  const Binding binding{Purpose::kTcpMesh, 42, 3};
  const auto deadline = Clock::now() + 5s;
  auto responder = std::async(std::launch::async,
                              [&] { return RunResponder(b.fd[1], secret, binding, deadline); });
  const Result init = RunInitiator(a.fd[0], secret, binding, deadline);
  const Result resp = responder.get();
  stop = true;
  tap.join();
  CHECK_MESSAGE(init.ok(), init.message);
  CHECK_MESSAGE(resp.ok(), resp.message);
  CHECK(init.authenticated);
  CHECK(resp.authenticated);
  CHECK(seen.size() == 4 * kMessageBytes);  // HELLO, CHALLENGE, PROOF, RESULT
  const std::string wire(seen.begin(), seen.end());
  CHECK_FALSE(Contains(wire, kToken));
  CHECK_FALSE(Contains(wire, std::string(kToken).substr(0, 16)));
  const std::string key(secret.key().begin(), secret.key().end());
  CHECK_FALSE(Contains(wire, key));
}

TEST_CASE("a different secret is refused on both sides, with reasons that say so") {
  const Binding binding{Purpose::kTcpMesh, 42, 1};
  const Both r = RunBoth(MakeSecret(kOtherToken), binding, MakeSecret(kToken), binding);
  CHECK_FALSE(r.initiator.ok());
  CHECK_FALSE(r.responder.ok());
  CHECK(r.initiator.refused);
  CHECK(r.responder.refused);
  CHECK(r.initiator.code == PLEXUS_ERR_REMOTE);
  CHECK_MESSAGE(Contains(r.initiator.message, "PLEXUS_TOKEN differs"), r.initiator.message);
  CHECK_MESSAGE(Contains(r.responder.message, "PLEXUS_TOKEN differs"), r.responder.message);
  CHECK(r.seconds < 4.0);  // refused at once, not by the deadline
}

TEST_CASE("a proof for another purpose, communicator or rank does not pass") {
  const Secret mesh = MakeSecret(kToken, Purpose::kTcpMesh);
  const Secret store = MakeSecret(kToken, Purpose::kStore);
  SUBCASE("store key used on the mesh") {
    const Binding b{Purpose::kTcpMesh, 1, 1};
    const Both r = RunBoth(store, b, mesh, b);
    CHECK_FALSE(r.initiator.ok());
    CHECK_FALSE(r.responder.ok());
  }
  SUBCASE("claims another rank than the hello named") {
    const Both r =
        RunBoth(mesh, Binding{Purpose::kTcpMesh, 1, 2}, mesh, Binding{Purpose::kTcpMesh, 1, 1});
    CHECK_FALSE(r.initiator.ok());
    CHECK_FALSE(r.responder.ok());
    CHECK_MESSAGE(Contains(r.responder.message, "rank 2"), r.responder.message);
  }
  SUBCASE("another communicator") {
    const Both r =
        RunBoth(mesh, Binding{Purpose::kTcpMesh, 5, 1}, mesh, Binding{Purpose::kTcpMesh, 6, 1});
    CHECK_FALSE(r.initiator.ok());
    CHECK_FALSE(r.responder.ok());
  }
}

TEST_CASE("without a secret on both sides they agree to go on unauthenticated") {
  const Binding b{Purpose::kTcpMesh, 9, 1};
  const Both r = RunBoth(Secret(), b, Secret(), b);
  CHECK_MESSAGE(r.initiator.ok(), r.initiator.message);
  CHECK_MESSAGE(r.responder.ok(), r.responder.message);
  CHECK_FALSE(r.initiator.authenticated);
  CHECK_FALSE(r.responder.authenticated);
}

TEST_CASE("a secret on one side only is refused on both sides") {
  const Binding b{Purpose::kTcpMesh, 9, 1};
  SUBCASE("the initiator has none") {
    const Both r = RunBoth(Secret(), b, MakeSecret(kToken), b);
    CHECK_FALSE(r.initiator.ok());
    CHECK_FALSE(r.responder.ok());
    CHECK(r.initiator.refused);
    CHECK_MESSAGE(Contains(r.initiator.message, "PLEXUS_TOKEN is not set here"),
                  r.initiator.message);
    CHECK_MESSAGE(Contains(r.responder.message, "PLEXUS_TOKEN is not set where it runs"),
                  r.responder.message);
  }
  SUBCASE("the responder has none") {
    const Both r = RunBoth(MakeSecret(kToken), b, Secret(), b);
    CHECK_FALSE(r.initiator.ok());
    CHECK_FALSE(r.responder.ok());
    CHECK(r.initiator.refused);
    CHECK_MESSAGE(Contains(r.initiator.message, "PLEXUS_TOKEN is not set where it runs"),
                  r.initiator.message);
    CHECK_MESSAGE(Contains(r.responder.message, "PLEXUS_TOKEN is not set here"),
                  r.responder.message);
  }
}

TEST_CASE("garbage, silence and a half-sent message end the handshake within its deadline") {
  const Secret secret = MakeSecret(kToken);
  const Binding b{Purpose::kTcpMesh, 1, 1};
  SUBCASE("garbage instead of HELLO") {
    SocketPair sp;
    std::vector<uint8_t> junk(kMessageBytes, 0xAB);
    REQUIRE(send(sp.fd[0], junk.data(), junk.size(), 0) == ssize_t(junk.size()));
    const Result r = RunResponder(sp.fd[1], secret, b, Clock::now() + 3s);
    CHECK_FALSE(r.ok());
    CHECK_FALSE(r.refused);  // a protocol error, not a failed proof
    CHECK_MESSAGE(Contains(r.message, "bad magic"), r.message);
  }
  SUBCASE("a silent initiator") {
    SocketPair sp;
    const auto start = Clock::now();
    const Result r = RunResponder(sp.fd[1], secret, b, start + 300ms);
    CHECK(r.code == PLEXUS_ERR_TIMEOUT);
    CHECK(Clock::now() - start < 3s);
  }
  SUBCASE("a silent responder") {
    SocketPair sp;
    const auto start = Clock::now();
    const Result r = RunInitiator(sp.fd[0], secret, b, start + 300ms);
    CHECK(r.code == PLEXUS_ERR_TIMEOUT);
    CHECK_MESSAGE(Contains(r.message, "CHALLENGE"), r.message);
    CHECK(Clock::now() - start < 3s);
  }
  SUBCASE("half a HELLO, then the peer goes away") {
    SocketPair sp;
    Message hello;
    hello.type = MessageType::kHello;
    hello.purpose = Purpose::kTcpMesh;
    const Wire wire = EncodeMessage(hello);
    REQUIRE(send(sp.fd[0], wire.data(), 30, 0) == 30);
    close(sp.fd[0]);
    sp.fd[0] = -1;
    const Result r = RunResponder(sp.fd[1], secret, b, Clock::now() + 3s);
    CHECK(r.code == PLEXUS_ERR_REMOTE);
    CHECK_MESSAGE(Contains(r.message, "closed the connection"), r.message);
  }
}

TEST_CASE("a recorded proof cannot be replayed: the responder's nonce is fresh each time") {
  const Secret secret = MakeSecret(kToken, Purpose::kStore);
  const Binding b{Purpose::kStore, 0, 0};
  // Record an honest initiator's HELLO and PROOF against one responder.
  SocketPair sp;
  const auto deadline = Clock::now() + 5s;
  std::vector<uint8_t> recorded;  // what the initiator sent
  auto initiator =
      std::async(std::launch::async, [&] { return RunInitiator(sp.fd[0], secret, b, deadline); });
  Responder first(secret, b);
  for (int i = 0; i < 2; ++i) {
    Wire in{};
    size_t have = 0;
    while (have < in.size()) {
      const ssize_t n = recv(sp.fd[1], in.data() + have, in.size() - have, 0);
      REQUIRE(n > 0);
      have += size_t(n);
    }
    recorded.insert(recorded.end(), in.begin(), in.end());
    Wire reply{};
    bool has_reply = false;
    std::string why;
    const auto outcome = first.OnMessage(in, &reply, &has_reply, &why);
    CHECK(outcome == (i == 0 ? Responder::Outcome::kContinue : Responder::Outcome::kAccepted));
    REQUIRE(has_reply);
    REQUIRE(send(sp.fd[1], reply.data(), reply.size(), 0) == ssize_t(reply.size()));
  }
  REQUIRE(initiator.get().ok());
  CHECK(first.authenticated());

  // Replay both messages to a second responder: its challenge differs, so the old proof fails.
  Responder second(secret, b);
  Wire reply{};
  bool has_reply = false;
  std::string why;
  CHECK(second.OnMessage(std::span(recorded).first(kMessageBytes), &reply, &has_reply, &why) ==
        Responder::Outcome::kContinue);
  CHECK(second.OnMessage(std::span(recorded).subspan(kMessageBytes), &reply, &has_reply, &why) ==
        Responder::Outcome::kRefused);
  CHECK_FALSE(second.authenticated());
  CHECK(Parse(reply).status == MessageStatus::kRejected);
  CHECK_MESSAGE(Contains(why, "failed authentication"), why);
}

TEST_CASE("the responder refuses messages out of order and after the end") {
  const Secret secret = MakeSecret(kToken, Purpose::kStore);
  Responder r(secret, Binding{});
  Message proof;
  proof.type = MessageType::kProof;
  Wire reply{};
  bool has_reply = false;
  std::string why;
  CHECK(r.OnMessage(EncodeMessage(proof), &reply, &has_reply, &why) ==
        Responder::Outcome::kRefused);
  CHECK(r.protocol_error());
  CHECK_MESSAGE(Contains(why, "PROOF instead of HELLO"), why);
  Message hello;
  hello.type = MessageType::kHello;
  CHECK(r.OnMessage(EncodeMessage(hello), &reply, &has_reply, &why) ==
        Responder::Outcome::kRefused);
  CHECK_MESSAGE(Contains(why, "after the handshake ended"), why);
}
