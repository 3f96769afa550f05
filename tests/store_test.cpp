// Tests of the rendezvous store: the wire-format parser, the in-process store
// and the TCP server/client, including hostile and stalled raw-socket clients.
//
// Store semantics are checked on both implementations (SUBCASE "in-process" /
// "tcp"); TCP-only cases talk raw bytes to the server. Every server binds
// 127.0.0.1 port 0. Timing checks only bound how long something may take with
// generous margins; they never measure speed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include <doctest/doctest.h>

#include "plexus/rendezvous_store.hpp"
#include "plexus/status.hpp"
// Internal header (parser, test knobs), from core/src (libplexus_internal_dep).
#include "store/store_protocol.hpp"

namespace plexus {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using store::Command;

Bytes B(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// --- Harness: a store plus a way to get "another client" of the same store.
class Harness {
 public:
  explicit Harness(bool tcp) : tcp_(tcp) {
    if (tcp_) {
      Status s = TcpStoreServer::Start("127.0.0.1", 0, &server_);
      REQUIRE_MESSAGE(s.ok(), s.ToString());
      REQUIRE(server_->port() != 0);
    } else {
      shared_ = MakeInProcessStore();
    }
  }
  // TCP: a new connection. In-process: the one store (it is thread-safe).
  std::shared_ptr<RendezvousStore> NewClient() {
    if (!tcp_) return shared_;
    std::unique_ptr<RendezvousStore> c;
    Status s = ConnectTcpStore("127.0.0.1", server_->port(), 5s, &c);
    REQUIRE_MESSAGE(s.ok(), s.ToString());
    return std::shared_ptr<RendezvousStore>(std::move(c));
  }
  TcpStoreServer* server() { return server_.get(); }

 private:
  bool tcp_;
  std::unique_ptr<TcpStoreServer> server_;
  std::shared_ptr<RendezvousStore> shared_;
};

// Re-runs the enclosing test case once per implementation.
#define FOR_EACH_STORE(h)                 \
  std::unique_ptr<Harness> h;             \
  SUBCASE("in-process") {                 \
    h = std::make_unique<Harness>(false); \
  }                                       \
  SUBCASE("tcp") {                        \
    h = std::make_unique<Harness>(true);  \
  }                                       \
  REQUIRE(h != nullptr)

// --- Raw socket helpers for speaking (bad) protocol directly to the server.
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

void RawSend(int fd, const Bytes& b) {
  REQUIRE(send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size()));
}

// True when the server closes fd (EOF or reset) within timeout; discards data.
bool ClosedByPeerWithin(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
    if (poll(&p, 1, std::max(left, 1)) <= 0) continue;
    uint8_t buf[256];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return true;
  }
  return false;
}

Bytes Header(uint32_t magic, uint16_t version, uint8_t command, uint8_t flags, uint32_t key_len,
             uint64_t value_len) {
  Bytes b;
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(magic >> (8 * i)));
  for (int i = 0; i < 2; ++i) b.push_back(static_cast<uint8_t>(version >> (8 * i)));
  b.push_back(command);
  b.push_back(flags);
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(key_len >> (8 * i)));
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(value_len >> (8 * i)));
  return b;
}

// The server still answers a fresh client and an existing one.
void CheckServerHealthy(Harness& h, RendezvousStore& existing, const std::string& tag) {
  auto fresh = h.NewClient();
  REQUIRE(fresh->Set("healthy/" + tag, B("yes"), 2s).ok());
  Bytes v;
  Status s = existing.Get("healthy/" + tag, &v, 2s);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CHECK(v == B("yes"));
}

// ============================================================================
// Status
// ============================================================================

TEST_CASE("status: names, ToString, WithContext") {
  CHECK(StatusName(PLEXUS_OK) == "OK");
  CHECK(StatusName(PLEXUS_IN_PROGRESS) == "IN_PROGRESS");
  CHECK(StatusName(PLEXUS_ERR_INVALID_ARGUMENT) == "INVALID_ARGUMENT");
  CHECK(StatusName(PLEXUS_ERR_INVALID_USAGE) == "INVALID_USAGE");
  CHECK(StatusName(PLEXUS_ERR_UNSUPPORTED) == "UNSUPPORTED");
  CHECK(StatusName(PLEXUS_ERR_SYSTEM) == "SYSTEM");
  CHECK(StatusName(PLEXUS_ERR_INTERNAL) == "INTERNAL");
  CHECK(StatusName(PLEXUS_ERR_REMOTE) == "REMOTE");
  CHECK(StatusName(PLEXUS_ERR_TIMEOUT) == "TIMEOUT");
  CHECK(StatusName(PLEXUS_ERR_ABORTED) == "ABORTED");
  CHECK(StatusName(-99) == "UNKNOWN(-99)");
  CHECK(Status::Ok().ToString() == "OK");
  CHECK(Status::Timeout("key 'x'").ToString() == "TIMEOUT: key 'x'");
  Status c = Status::Remote("peer died").WithContext("rank 3");
  CHECK(c.code() == PLEXUS_ERR_REMOTE);
  CHECK(c.message() == "rank 3: peer died");
  CHECK(Status::Internal("").WithContext("ctx").message() == "ctx");
}

// ============================================================================
// Wire format
// ============================================================================

TEST_CASE("protocol: every request round-trips, and every prefix asks for more bytes") {
  std::vector<Bytes> frames(4);
  REQUIRE(store::EncodeSet("key", B("value bytes"), &frames[0]).ok());
  REQUIRE(store::EncodeGet("getkey", 1234, &frames[1]).ok());
  REQUIRE(store::EncodeAdd("ctr", -7, &frames[2]).ok());
  REQUIRE(store::EncodeWait({"a", "", "ccc"}, 99, &frames[3]).ok());
  for (const Bytes& f : frames) {
    for (size_t n = 0; n < f.size(); ++n) {
      store::Request r;
      size_t consumed = 1;
      Status s = store::ParseRequest(std::span(f.data(), n), &r, &consumed);
      REQUIRE_MESSAGE(s.ok(), s.ToString());
      REQUIRE(consumed == 0);
    }
  }
  store::Request r;
  size_t consumed = 0;
  REQUIRE(store::ParseRequest(frames[0], &r, &consumed).ok());
  CHECK(consumed == frames[0].size());
  CHECK(r.command == Command::kSet);
  CHECK(r.key == "key");
  CHECK(r.value == B("value bytes"));
  REQUIRE(store::ParseRequest(frames[1], &r, &consumed).ok());
  CHECK((r.command == Command::kGet && r.key == "getkey" && r.timeout_ms == 1234));
  REQUIRE(store::ParseRequest(frames[2], &r, &consumed).ok());
  CHECK((r.command == Command::kAdd && r.key == "ctr" && r.delta == -7));
  REQUIRE(store::ParseRequest(frames[3], &r, &consumed).ok());
  CHECK(r.command == Command::kWait);
  CHECK(r.timeout_ms == 99);
  CHECK(r.keys == std::vector<std::string>{"a", "", "ccc"});

  // Two frames back to back: the first is consumed alone.
  Bytes two = frames[1];
  two.insert(two.end(), frames[2].begin(), frames[2].end());
  REQUIRE(store::ParseRequest(two, &r, &consumed).ok());
  CHECK(consumed == frames[1].size());

  // Binary keys survive.
  Bytes f;
  std::string bin("a\0b\xff", 4);
  REQUIRE(store::EncodeSet(bin, {}, &f).ok());
  REQUIRE(store::ParseRequest(f, &r, &consumed).ok());
  CHECK(r.key == bin);
  CHECK(r.value.empty());
}

TEST_CASE("protocol: replies round-trip") {
  Bytes f;
  store::EncodeReply(PLEXUS_ERR_TIMEOUT, "why", B("payload"), &f);
  store::Reply r;
  size_t consumed = 0;
  REQUIRE(store::ParseReply(f, &r, &consumed).ok());
  CHECK(consumed == f.size());
  CHECK(r.status == PLEXUS_ERR_TIMEOUT);
  CHECK(r.message == "why");
  CHECK(r.payload == B("payload"));
  // A reply is not a request and vice versa.
  store::Request q;
  CHECK_FALSE(store::ParseRequest(f, &q, &consumed).ok());
  Bytes g;
  REQUIRE(store::EncodeGet("k", 1, &g).ok());
  CHECK_FALSE(store::ParseReply(g, &r, &consumed).ok());
  // Messages are truncated, never rejected.
  store::EncodeReply(PLEXUS_ERR_INTERNAL, std::string(100000, 'm'), {}, &f);
  REQUIRE(store::ParseReply(f, &r, &consumed).ok());
  CHECK(r.message.size() == store::kMaxReplyMessageBytes);
  // "In progress" is never a reply.
  store::EncodeReply(PLEXUS_IN_PROGRESS, "", {}, &f);
  CHECK_FALSE(store::ParseReply(f, &r, &consumed).ok());
}

TEST_CASE("protocol: malformed headers and bodies are errors, decided on the header alone") {
  const uint8_t set = static_cast<uint8_t>(Command::kSet);
  const uint8_t wait = static_cast<uint8_t>(Command::kWait);
  struct Bad {
    const char* what;
    Bytes header;
  };
  const std::vector<Bad> bad = {
      {"bad magic", Header(0xdeadbeef, 1, set, 0, 1, 1)},
      {"bad version", Header(store::kMagic, 2, set, 0, 1, 1)},
      {"unknown command", Header(store::kMagic, 1, 99, 0, 1, 1)},
      {"flags", Header(store::kMagic, 1, set, 1, 1, 1)},
      {"4 GiB value", Header(store::kMagic, 1, set, 0, 1, uint64_t{4} << 30)},
      {"huge u64 value", Header(store::kMagic, 1, set, 0, 1, ~uint64_t{0})},
      {"value over limit", Header(store::kMagic, 1, set, 0, 1, kStoreMaxValueBytes + 1)},
      {"key over limit", Header(store::kMagic, 1, set, 0, kStoreMaxKeyBytes + 1, 0)},
      {"GET value not 8", Header(store::kMagic, 1, 2, 0, 1, 9)},
      {"ADD value not 8", Header(store::kMagic, 1, 3, 0, 1, 0)},
      {"WAIT with key", Header(store::kMagic, 1, wait, 0, 1, 12)},
      {"WAIT too short", Header(store::kMagic, 1, wait, 0, 0, 11)},
      {"WAIT too long", Header(store::kMagic, 1, wait, 0, 0, store::kMaxWaitBodyBytes + 1)},
  };
  for (const Bad& b : bad) {
    CAPTURE(b.what);
    store::FrameHeader h;
    CHECK_FALSE(store::ParseHeader(b.header, &h).ok());
    // ParseRequest rejects on the header alone: no body bytes are present.
    store::Request r;
    size_t consumed = 0;
    Status s = store::ParseRequest(b.header, &r, &consumed);
    CHECK_FALSE(s.ok());
    CHECK(s.code() == PLEXUS_ERR_INVALID_ARGUMENT);
    CHECK(consumed == 0);
  }

  // WAIT bodies: count over the limit, count the body cannot hold, a key running
  // past the end, trailing bytes.
  auto wait_frame = [](const Bytes& body) {
    Bytes f = Header(store::kMagic, 1, static_cast<uint8_t>(Command::kWait), 0, 0, body.size());
    f.insert(f.end(), body.begin(), body.end());
    return f;
  };
  auto u32 = [](Bytes* b, uint32_t v) {
    for (int i = 0; i < 4; ++i) b->push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  std::vector<Bytes> bodies;
  Bytes b(8, 0);
  u32(&b, kStoreMaxKeysPerWait + 1);
  bodies.push_back(b);
  b.assign(8, 0);
  u32(&b, 1000);  // 1000 keys in a 12-byte body
  bodies.push_back(b);
  b.assign(8, 0);
  u32(&b, 1);
  u32(&b, 50);  // key of 50 bytes, none present
  bodies.push_back(b);
  b.assign(8, 0);
  u32(&b, 0);
  b.push_back(7);  // trailing byte
  bodies.push_back(b);
  for (const Bytes& body : bodies) {
    store::Request r;
    size_t consumed = 0;
    CHECK_FALSE(store::ParseRequest(wait_frame(body), &r, &consumed).ok());
  }

  // Encoders refuse what the parser would refuse.
  Bytes f;
  CHECK(store::EncodeSet(std::string(kStoreMaxKeyBytes + 1, 'k'), {}, &f).code() ==
        PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(store::EncodeWait(std::vector<std::string>(kStoreMaxKeysPerWait + 1, "k"), 0, &f).code() ==
        PLEXUS_ERR_INVALID_ARGUMENT);
}

TEST_CASE("protocol: random mutations of valid frames never crash the parser") {
  // A smoke test in lieu of a fuzzer; the parsers are pure for that purpose.
  std::vector<Bytes> seeds(5);
  REQUIRE(store::EncodeSet("key", B("value"), &seeds[0]).ok());
  REQUIRE(store::EncodeGet("key", 5, &seeds[1]).ok());
  REQUIRE(store::EncodeAdd("key", 5, &seeds[2]).ok());
  REQUIRE(store::EncodeWait({"a", "bb", "ccc"}, 5, &seeds[3]).ok());
  store::EncodeReply(0, "msg", B("payload"), &seeds[4]);
  std::mt19937 rng(12345);
  for (int iter = 0; iter < 20000; ++iter) {
    Bytes f = seeds[rng() % seeds.size()];
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) f[rng() % f.size()] = static_cast<uint8_t>(rng());
    if (rng() % 4 == 0) f.resize(rng() % (f.size() + 1));
    store::Request q;
    store::Reply r;
    size_t consumed = 0;
    (void)store::ParseRequest(f, &q, &consumed);
    CHECK(consumed <= f.size());
    (void)store::ParseReply(f, &r, &consumed);
    CHECK(consumed <= f.size());
  }
}

// ============================================================================
// Store semantics, on both implementations
// ============================================================================

TEST_CASE("store: set/get round trip, empty and 1 MiB values, overwrite") {
  FOR_EACH_STORE(h);
  auto c = h->NewClient();
  Bytes v;
  REQUIRE(c->Set("a", B("hello"), 2s).ok());
  REQUIRE(c->Get("a", &v, 2s).ok());
  CHECK(v == B("hello"));

  REQUIRE(c->Set("empty", {}, 2s).ok());
  v = B("junk");
  REQUIRE(c->Get("empty", &v, 2s).ok());
  CHECK(v.empty());

  Bytes big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + 7);
  REQUIRE(c->Set("big", big, 5s).ok());
  auto other = h->NewClient();
  REQUIRE(other->Get("big", &v, 5s).ok());
  CHECK(v == big);

  REQUIRE(c->Set("a", B("again"), 2s).ok());
  REQUIRE(other->Get("a", &v, 2s).ok());
  CHECK(v == B("again"));

  const std::string bin("\0\x01key\xff", 6);
  REQUIRE(c->Set(bin, B("bin"), 2s).ok());
  REQUIRE(other->Get(bin, &v, 2s).ok());
  CHECK(v == B("bin"));

  // Present key with zero timeout: immediate.
  REQUIRE(c->Get("a", &v, 0ms).ok());
}

TEST_CASE("store: limits are INVALID_ARGUMENT on the caller's side") {
  FOR_EACH_STORE(h);
  auto c = h->NewClient();
  const std::string long_key(kStoreMaxKeyBytes + 1, 'k');
  Bytes v;
  CHECK(c->Set(long_key, B("x"), 1s).code() == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(c->Get(long_key, &v, 1s).code() == PLEXUS_ERR_INVALID_ARGUMENT);
  int64_t n = 0;
  CHECK(c->Add(long_key, 1, &n, 1s).code() == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(c->Wait({"a", long_key}, 1s).code() == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(c->Wait(std::vector<std::string>(kStoreMaxKeysPerWait + 1, "k"), 1s).code() ==
        PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(c->Set("k", Bytes(kStoreMaxValueBytes + 1), 1s).code() == PLEXUS_ERR_INVALID_ARGUMENT);
  // The maximal key is fine, and the connection is still usable after refusals.
  const std::string max_key(kStoreMaxKeyBytes, 'm');
  REQUIRE(c->Set(max_key, B("ok"), 2s).ok());
  REQUIRE(c->Get(max_key, &v, 2s).ok());
  CHECK(v == B("ok"));
}

TEST_CASE("store: add from 64 concurrent clients gives the exact total") {
  FOR_EACH_STORE(h);
  constexpr int kThreads = 64;
  constexpr int kAddsEach = 100;
  std::vector<std::shared_ptr<RendezvousStore>> clients;
  for (int t = 0; t < kThreads; ++t) clients.push_back(h->NewClient());  // 64 live connections
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAddsEach; ++i) {
        int64_t v = 0;
        if (!clients[t]->Add("counter", 1, &v, 10s).ok()) {
          ++failures;
          return;
        }
        seen[t].push_back(v);
      }
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(failures == 0);
  int64_t total = 0;
  REQUIRE(clients[0]->Add("counter", 0, &total, 2s).ok());
  CHECK(total == kThreads * kAddsEach);
  // Atomicity: every intermediate value was handed out exactly once.
  std::set<int64_t> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  CHECK(all.size() == static_cast<size_t>(kThreads * kAddsEach));
  CHECK(*all.begin() == 1);
  CHECK(*all.rbegin() == kThreads * kAddsEach);

  // A counter reads back as 8 little-endian bytes.
  Bytes raw;
  REQUIRE(clients[1]->Get("counter", &raw, 1s).ok());
  REQUIRE(raw.size() == 8);
  CHECK(raw[0] == static_cast<uint8_t>(6400 & 0xff));
  CHECK(raw[1] == static_cast<uint8_t>(6400 >> 8));
}

TEST_CASE("store: add semantics: missing is 0, negative deltas, wrap, non-counter") {
  FOR_EACH_STORE(h);
  auto c = h->NewClient();
  int64_t v = 0;
  REQUIRE(c->Add("n", 5, &v, 1s).ok());
  CHECK(v == 5);
  REQUIRE(c->Add("n", -8, &v, 1s).ok());
  CHECK(v == -3);
  REQUIRE(c->Add("max", INT64_MAX, &v, 1s).ok());
  REQUIRE(c->Add("max", 1, &v, 1s).ok());
  CHECK(v == INT64_MIN);
  REQUIRE(c->Set("text", B("abc"), 1s).ok());
  v = 42;
  Status s = c->Add("text", 1, &v, 1s);
  CHECK(s.code() == PLEXUS_ERR_INVALID_USAGE);
  CHECK(s.message().find("'text'") != std::string::npos);
  CHECK(v == 42);
  // Add creates the key, which releases a waiter.
  auto other = h->NewClient();
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    int64_t x = 0;
    CHECK(other->Add("created-by-add", 1, &x, 1s).ok());
  });
  auto waiter = h->NewClient();
  CHECK(waiter->Wait({"created-by-add"}, 5s).ok());
  t.join();
}

TEST_CASE("store: get on a missing key times out after about the timeout") {
  FOR_EACH_STORE(h);
  auto c = h->NewClient();
  Bytes v = B("untouched");
  const auto timeout = 300ms;
  const auto start = Clock::now();
  Status s = c->Get("missing/key", &v, timeout);
  const int64_t elapsed = MsSince(start);
  CHECK(s.code() == PLEXUS_ERR_TIMEOUT);
  CHECK(s.message().find("'missing/key'") != std::string::npos);
  CHECK(elapsed >= timeout.count());
  CHECK(elapsed < timeout.count() + 2000);
  CHECK(v == B("untouched"));

  // Zero timeout on a missing key: immediate TIMEOUT.
  const auto start0 = Clock::now();
  CHECK(c->Get("missing/key", &v, 0ms).code() == PLEXUS_ERR_TIMEOUT);
  CHECK(MsSince(start0) < 1000);

  // The same client is fine afterwards.
  REQUIRE(c->Set("missing/key", B("now here"), 1s).ok());
  REQUIRE(c->Get("missing/key", &v, 1s).ok());
  CHECK(v == B("now here"));
}

TEST_CASE("store: a parked get is released by a set from another client") {
  FOR_EACH_STORE(h);
  auto getter = h->NewClient();
  auto setter = h->NewClient();
  std::thread t([&] {
    std::this_thread::sleep_for(150ms);
    CHECK(setter->Set("late", B("arrived"), 2s).ok());
  });
  Bytes v;
  const auto start = Clock::now();
  Status s = getter->Get("late", &v, 10s);
  t.join();
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CHECK(v == B("arrived"));
  CHECK(MsSince(start) < 5000);
}

TEST_CASE("store: wait on several keys is released by sets from another thread") {
  FOR_EACH_STORE(h);
  auto waiter = h->NewClient();
  auto setter = h->NewClient();
  REQUIRE(setter->Set("w/0", B("x"), 1s).ok());
  std::thread t([&] {
    for (int i = 1; i < 4; ++i) {
      std::this_thread::sleep_for(50ms);
      CHECK(setter->Set("w/" + std::to_string(i), B("x"), 2s).ok());
    }
  });
  const auto start = Clock::now();
  Status s = waiter->Wait({"w/0", "w/1", "w/2", "w/3"}, 10s);
  t.join();
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CHECK(MsSince(start) < 5000);
  CHECK(waiter->Wait({}, 0ms).ok());
  CHECK(waiter->Wait({"w/3", "w/0"}, 0ms).ok());
}

TEST_CASE("store: wait timeout names the first missing key") {
  FOR_EACH_STORE(h);
  auto c = h->NewClient();
  REQUIRE(c->Set("k1", B("x"), 1s).ok());
  const auto start = Clock::now();
  Status s = c->Wait({"k1", "k2", "k3"}, 200ms);
  const int64_t elapsed = MsSince(start);
  CHECK(s.code() == PLEXUS_ERR_TIMEOUT);
  CHECK(s.message().find("'k2'") != std::string::npos);
  CHECK(s.message().find("2 of 3") != std::string::npos);
  CHECK(elapsed >= 200);
  CHECK(elapsed < 2200);
}

TEST_CASE("store: 64 parked clients are all released by one set") {
  FOR_EACH_STORE(h);
  constexpr int kWaiters = 64;
  std::vector<std::shared_ptr<RendezvousStore>> clients;
  for (int i = 0; i < kWaiters; ++i) clients.push_back(h->NewClient());
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      Bytes v;
      if (i % 2 == 0) {
        if (clients[i]->Get("go", &v, 10s).ok() && v == B("now")) ++ok;
      } else {
        if (clients[i]->Wait({"go"}, 10s).ok()) ++ok;
      }
    });
  }
  std::this_thread::sleep_for(200ms);
  auto setter = h->NewClient();
  REQUIRE(setter->Set("go", B("now"), 2s).ok());
  for (auto& t : threads) t.join();
  CHECK(ok == kWaiters);
}

// ============================================================================
// TCP only: hostile clients, dead servers
// ============================================================================

TEST_CASE("tcp: garbage (bad magic) is disconnected and others are still served") {
  Harness h(true);
  auto normal = h.NewClient();
  REQUIRE(normal->Set("before", B("1"), 1s).ok());
  int fd = RawConnect(h.server()->port());
  Bytes garbage = B("GET / HTTP/1.1\r\nHost: example\r\n\r\n");
  RawSend(fd, garbage);
  CHECK(ClosedByPeerWithin(fd, 3s));
  close(fd);
  CheckServerHealthy(h, *normal, "after-garbage");
}

TEST_CASE("tcp: bad version, unknown command, flags, a reply frame, bad WAIT body") {
  Harness h(true);
  auto normal = h.NewClient();
  Bytes bad_wait = Header(store::kMagic, 1, static_cast<uint8_t>(Command::kWait), 0, 0, 12);
  for (int i = 0; i < 8; ++i) bad_wait.push_back(0);
  for (uint8_t b : {0xff, 0xff, 0xff, 0xff}) bad_wait.push_back(b);  // 4 billion keys
  Bytes reply;
  store::EncodeReply(0, "", {}, &reply);
  const std::vector<Bytes> frames = {
      Header(store::kMagic, 7, 1, 0, 1, 1),
      Header(store::kMagic, 1, 200, 0, 1, 1),
      Header(store::kMagic, 1, 1, 0x80, 1, 1),
      reply,
      bad_wait,
  };
  for (size_t i = 0; i < frames.size(); ++i) {
    CAPTURE(i);
    int fd = RawConnect(h.server()->port());
    RawSend(fd, frames[i]);
    CHECK(ClosedByPeerWithin(fd, 3s));
    close(fd);
  }
  CheckServerHealthy(h, *normal, "after-bad-frames");
}

TEST_CASE("tcp: a header announcing a 4 GiB value is refused without allocating") {
  Harness h(true);
  auto normal = h.NewClient();
  int fd = RawConnect(h.server()->port());
  // SET with a 4 GiB value: only the 20-byte header is sent. The server must
  // refuse it from the header (ParseHeader) and close; were it to wait for the
  // body or allocate 4 GiB the close would not come.
  RawSend(fd,
          Header(store::kMagic, 1, static_cast<uint8_t>(Command::kSet), 0, 3, uint64_t{4} << 30));
  CHECK(ClosedByPeerWithin(fd, 3s));
  close(fd);
  // And a 4 GiB key length (u32 max).
  fd = RawConnect(h.server()->port());
  RawSend(fd, Header(store::kMagic, 1, static_cast<uint8_t>(Command::kGet), 0, 0xffffffffu, 8));
  CHECK(ClosedByPeerWithin(fd, 3s));
  close(fd);
  CheckServerHealthy(h, *normal, "after-4gib");
}

TEST_CASE("tcp: a client stalled mid-header does not block others") {
  Harness h(true);  // default stall timeout (10 s): the staller stays connected throughout
  auto normal = h.NewClient();
  int fd = RawConnect(h.server()->port());
  Bytes half = Header(store::kMagic, 1, static_cast<uint8_t>(Command::kSet), 0, 1, 1);
  half.resize(store::kHeaderBytes / 2);
  RawSend(fd, half);
  std::this_thread::sleep_for(50ms);
  const auto start = Clock::now();
  for (int i = 0; i < 20; ++i) CheckServerHealthy(h, *normal, "stall-" + std::to_string(i));
  CHECK(MsSince(start) < 3000);
  // A parked GET is answered too while the staller holds its half header.
  Bytes v;
  CHECK(normal->Get("never", &v, 100ms).code() == PLEXUS_ERR_TIMEOUT);
  close(fd);
}

TEST_CASE("tcp: stalled clients are disconnected after the stall timeout") {
  store::TcpStoreServerOptions options;
  options.stall_timeout = 300ms;
  std::unique_ptr<TcpStoreServer> server;
  REQUIRE(store::StartTcpStoreServer("127.0.0.1", 0, options, &server).ok());
  std::unique_ptr<RendezvousStore> normal;
  REQUIRE(ConnectTcpStore("127.0.0.1", server->port(), 2s, &normal).ok());

  int half_header = RawConnect(server->port());
  RawSend(half_header, Bytes{0x50, 0x4c, 0x58});
  int half_body = RawConnect(server->port());
  Bytes frame;
  REQUIRE(store::EncodeSet("key", Bytes(1000, 1), &frame).ok());
  frame.resize(frame.size() / 2);
  RawSend(half_body, frame);
  int idle = RawConnect(server->port());  // idle between frames: never timed out

  const auto start = Clock::now();
  CHECK(ClosedByPeerWithin(half_header, 5s));
  CHECK(ClosedByPeerWithin(half_body, 5s));
  CHECK(MsSince(start) >= 250);
  CHECK_FALSE(ClosedByPeerWithin(idle, 500ms));
  // A parked client is not "stalled" either: it waits on the server, not vice versa.
  Bytes v;
  CHECK(normal->Get("slow", &v, 800ms).code() == PLEXUS_ERR_TIMEOUT);
  REQUIRE(normal->Set("still", B("served"), 1s).ok());
  REQUIRE(normal->Get("still", &v, 1s).ok());
  close(half_header);
  close(half_body);
  close(idle);
}

TEST_CASE("tcp: a client whose server stopped gets REMOTE or TIMEOUT, not a hang") {
  auto h = std::make_unique<Harness>(true);
  auto c = h->NewClient();
  REQUIRE(c->Set("k", B("v"), 1s).ok());

  // A GET parked on the server when it stops is answered by the closed socket.
  auto parked = h->NewClient();
  Status parked_status;
  int64_t parked_ms = 0;
  std::thread t([&] {
    Bytes v;
    const auto start = Clock::now();
    parked_status = parked->Get("never-set", &v, 20s);
    parked_ms = MsSince(start);
  });
  std::this_thread::sleep_for(200ms);
  h->server()->Stop();
  h->server()->Stop();  // idempotent
  t.join();
  CHECK((parked_status.code() == PLEXUS_ERR_REMOTE || parked_status.code() == PLEXUS_ERR_TIMEOUT));
  CHECK(parked_ms < 5000);
  CHECK(parked_status.message().find("127.0.0.1:") != std::string::npos);

  for (int i = 0; i < 2; ++i) {  // the first call sees the close, the second fails to reconnect
    Bytes v;
    const auto start = Clock::now();
    Status s = c->Get("k", &v, 500ms);
    CAPTURE(s.ToString());
    CHECK((s.code() == PLEXUS_ERR_REMOTE || s.code() == PLEXUS_ERR_TIMEOUT));
    CHECK(s.message().find("127.0.0.1:") != std::string::npos);
    CHECK(MsSince(start) < 500 + 2500);
  }
  h.reset();  // destroying a stopped server is fine
}

TEST_CASE("tcp: threads sharing one client queue, and queueing counts against the timeout") {
  Harness h(true);
  auto shared = h.NewClient();
  auto other = h.NewClient();
  Status parked_status;
  std::thread parked([&] {
    Bytes v;
    parked_status = shared->Get("shared/late", &v, 10s);
  });
  std::this_thread::sleep_for(100ms);
  // The connection is busy with the parked GET: this caller gives up on time,
  // without disturbing the GET.
  const auto start = Clock::now();
  Status s = shared->Set("x", B("y"), 300ms);
  CHECK(s.code() == PLEXUS_ERR_TIMEOUT);
  CHECK(MsSince(start) >= 300);
  CHECK(MsSince(start) < 2300);
  REQUIRE(other->Set("shared/late", B("here"), 1s).ok());
  parked.join();
  CHECK_MESSAGE(parked_status.ok(), parked_status.ToString());

  // Many threads on one client: all requests complete, in some order.
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        int64_t v = 0;
        if (!shared->Add("shared/n", 1, &v, 10s).ok()) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(failures == 0);
  int64_t total = 0;
  REQUIRE(other->Add("shared/n", 0, &total, 1s).ok());
  CHECK(total == 400);
}

TEST_CASE("tcp: a server that accepts but never answers costs timeout + slack") {
  // A listening socket nobody accepts from: connect succeeds via the backlog.
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(lfd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  REQUIRE(listen(lfd, 16) == 0);
  socklen_t len = sizeof(a);
  REQUIRE(getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  std::unique_ptr<RendezvousStore> c;
  REQUIRE(ConnectTcpStore("127.0.0.1", ntohs(a.sin_port), 2s, &c).ok());
  Bytes v;
  const auto start = Clock::now();
  Status s = c->Get("k", &v, 200ms);
  CHECK(s.code() == PLEXUS_ERR_TIMEOUT);
  CHECK(s.message().find("'k'") != std::string::npos);
  CHECK(MsSince(start) >= 200);
  CHECK(MsSince(start) < 200 + 3000);
  close(lfd);
}

TEST_CASE("tcp: connect retries until the server is up, and times out when it never is") {
  // Find a free port, then release it.
  uint16_t port = 0;
  {
    std::unique_ptr<TcpStoreServer> probe;
    REQUIRE(TcpStoreServer::Start("127.0.0.1", 0, &probe).ok());
    port = probe->port();
  }
  const auto start = Clock::now();
  std::unique_ptr<RendezvousStore> c;
  Status s = ConnectTcpStore("127.0.0.1", port, 300ms, &c);
  CHECK(s.code() == PLEXUS_ERR_TIMEOUT);
  CHECK(s.message().find("127.0.0.1:" + std::to_string(port)) != std::string::npos);
  CHECK(MsSince(start) >= 300);
  CHECK(MsSince(start) < 2300);

  Status connect_status;
  std::thread t([&] { connect_status = ConnectTcpStore("localhost", port, 10s, &c); });
  std::this_thread::sleep_for(300ms);
  std::unique_ptr<TcpStoreServer> server;
  Status started = TcpStoreServer::Start("127.0.0.1", port, &server);
  if (!started.ok()) {
    t.join();
    const std::string why = "port was taken in between; skipped: " + started.ToString();
    WARN_MESSAGE(false, why.c_str());
    return;
  }
  t.join();
  REQUIRE_MESSAGE(connect_status.ok(), connect_status.ToString());
  REQUIRE(c->Set("x", B("y"), 1s).ok());
}

TEST_CASE("tcp: start rejects a bad bind address, binds every address for empty") {
  std::unique_ptr<TcpStoreServer> s;
  CHECK_FALSE(TcpStoreServer::Start("192.0.2.1", 0, &s).ok());  // TEST-NET, not ours
  REQUIRE(TcpStoreServer::Start("", 0, &s).ok());
  std::unique_ptr<RendezvousStore> c;
  REQUIRE(ConnectTcpStore("127.0.0.1", s->port(), 2s, &c).ok());
  REQUIRE(c->Set("any", B("addr"), 1s).ok());
}

}  // namespace
}  // namespace plexus
