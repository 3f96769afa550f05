// Who may say what in a job (issue 23), below the level of whole jobs:
//   - the store's identities: a connection that claims "rank/N" or "node/N"
//     holds it for the life of the server; keys under "plexus/rank/N/" and
//     "plexus/node/N/" are written only by their holder (store_protocol.hpp);
//   - the private directory where jobs on one host keep their automatic
//     secret (store/private_dir.hpp), against what another user could have
//     put there;
//   - the job secret's choice (job_secret.hpp): automatic on one host, an
//     error that says how to share one across hosts, none only when asked;
//   - a backend chosen through the store is a name, never a path.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "job_secret.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plugins/plugin_loader.hpp"
#include "store/job_token.hpp"
#include "store/private_dir.hpp"
#include "store/store_protocol.hpp"

namespace plexus {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

Bytes B(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

std::unique_ptr<TcpStoreServer> Serve(const std::string& token, uint16_t port = 0) {
  store::TcpStoreServerOptions options;
  options.token = token;
  std::unique_ptr<TcpStoreServer> server;
  Status s = store::StartTcpStoreServer("127.0.0.1", port, options, &server);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  return server;
}

Status Connect(uint16_t port, const std::string& token, const std::string& identity,
               std::unique_ptr<RendezvousStore>* out, const std::string& label = "") {
  store::TcpStoreClientOptions options;
  options.token = token;
  options.identity = identity;
  options.label = label.empty() ? "test client " + identity : label;
  return store::ConnectTcpStoreWithOptions("127.0.0.1", port, 5s, options, out);
}

// A raw connection to a server without a secret, for frames the client
// library would never send.
class Raw {
 public:
  explicit Raw(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~Raw() { close(fd_); }
  // Sends one frame and returns the server's reply.
  store::Reply Call(const Bytes& frame) {
    REQUIRE(send(fd_, frame.data(), frame.size(), MSG_NOSIGNAL) == ssize_t(frame.size()));
    Bytes in;
    store::Reply reply;
    for (;;) {
      uint8_t buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof buf, 0);
      REQUIRE_MESSAGE(n > 0, "the server closed the connection");
      in.insert(in.end(), buf, buf + n);
      size_t consumed = 0;
      REQUIRE(store::ParseReply(in, &reply, &consumed).ok());
      if (consumed > 0) return reply;
    }
  }
  store::Reply Claim(const std::string& identity, uint8_t key_byte, const std::string& label) {
    store::IdentityKey key{};
    key.fill(key_byte);
    Bytes frame;
    REQUIRE(store::EncodeClaim(identity, key, label, &frame).ok());
    return Call(frame);
  }
  store::Reply Set(const std::string& key, const std::string& value) {
    Bytes frame;
    REQUIRE(store::EncodeSet(key, B(value), &frame).ok());
    return Call(frame);
  }

 private:
  int fd_ = -1;
};

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// A fresh PLEXUS_RUNTIME_DIR (not yet created) under a temporary directory.
class RuntimeDir {
 public:
  RuntimeDir() {
    char pattern[] = "/tmp/plexus-identity-test.XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    base_ = pattern;
    dir_ = base_ / "runtime";
    env_.emplace("PLEXUS_RUNTIME_DIR", dir_.c_str());
  }
  ~RuntimeDir() {
    env_.reset();
    std::error_code ec;
    fs::remove_all(base_, ec);
  }
  const fs::path& path() const { return dir_; }

 private:
  fs::path base_, dir_;
  std::optional<ScopedEnv> env_;
};

unsigned Mode(const fs::path& p) {
  struct stat st {};
  REQUIRE(lstat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

}  // namespace

TEST_CASE("identities: which keys belong to whom") {
  CHECK(store::ValidIdentity("rank/0"));
  CHECK(store::ValidIdentity("rank/4294967295"));
  CHECK(store::ValidIdentity("node/12"));
  for (const char* bad : {"rank/", "rank/01", "rank/-1", "rank/x", "rank/4294967296", "Rank/1",
                          "rank/1/", "node", "job/1", ""}) {
    CAPTURE(bad);
    CHECK_FALSE(store::ValidIdentity(bad));
  }
  CHECK(store::KeyOwner("plexus/rank/3/join/card") == "rank/3");
  CHECK(store::KeyOwner("plexus/rank/3") == "rank/3");
  CHECK(store::KeyOwner("plexus/node/1/launch/beat") == "node/1");
  CHECK(store::KeyOwner("plexus/rank/03/x") == "rank/?");
  CHECK(store::KeyOwner("plexus/node/x/launch/failed") == "node/?");
  CHECK(store::KeyOwner("plexus/0/oob") == "");
  CHECK(store::KeyOwner("plexus/launch/reports") == "");
  CHECK(store::KeyOwner("other/rank/1/x") == "");
  CHECK(store::RankKey(2, "plexus/0/created") == "plexus/rank/2/plexus/0/created");
  CHECK(store::NodeKey(1, "launch/beat") == "plexus/node/1/launch/beat");
}

TEST_CASE("identities: only the holder writes its keys; the second claimant is told who holds it") {
  const std::string token = "identity-test-secret";
  auto server = Serve(token);
  std::unique_ptr<RendezvousStore> rank1, anyone, rank2, impostor;
  REQUIRE(Connect(server->port(), token, "rank/1", &rank1, "host a, pid 11").ok());
  REQUIRE(Connect(server->port(), token, "", &anyone).ok());
  REQUIRE(Connect(server->port(), token, "rank/2", &rank2).ok());

  Status s = rank1->Set("plexus/rank/1/join/card", B("mine"), 2s);
  CHECK_MESSAGE(s.ok(), s.ToString());
  int64_t value = 0;
  CHECK(rank1->Add("plexus/rank/1/count", 5, &value, 2s).ok());

  // An ADD of 0 reads; of an owned key that is not there it creates nothing
  // (8 zero bytes where a card or a verdict belongs would be believed).
  for (RendezvousStore* other : {anyone.get(), rank2.get()}) {
    value = -1;
    CHECK(other->Add("plexus/rank/1/verdict", 0, &value, 2s).ok());
    CHECK(value == 0);
    Bytes nothing;
    CHECK(other->Get("plexus/rank/1/verdict", &nothing, 0ms).code() == PLEXUS_ERR_TIMEOUT);
  }
  CHECK(anyone->Add("plexus/free/counter", 0, &value, 2s).ok());  // not owned: as always
  Bytes zero;
  CHECK(anyone->Get("plexus/free/counter", &zero, 0ms).ok());
  CHECK(rank1->Add("plexus/rank/1/verdict", 0, &value, 2s).ok());  // the owner's read may
  CHECK(rank1->Get("plexus/rank/1/verdict", &zero, 0ms).ok());

  for (RendezvousStore* other : {anyone.get(), rank2.get()}) {
    s = other->Set("plexus/rank/1/join/card", B("forged"), 2s);
    CHECK(s.code() == PLEXUS_ERR_INVALID_USAGE);
    CHECK_MESSAGE(Contains(s.message(), "belongs to rank 1"), s.message());
    s = other->Add("plexus/rank/1/count", 1, &value, 2s);
    CHECK(s.code() == PLEXUS_ERR_INVALID_USAGE);
    // Reading is open to every member, ADD of 0 included.
    CHECK(other->Add("plexus/rank/1/count", 0, &value, 2s).ok());
    CHECK(value == 5);
    Bytes card;
    CHECK(other->Get("plexus/rank/1/join/card", &card, 2s).ok());
    CHECK(card == B("mine"));
  }
  s = rank2->Set("plexus/rank/1/x", B("y"), 2s);
  CHECK_MESSAGE(Contains(s.message(), "this connection is rank 2"), s.message());
  s = anyone->Set("plexus/rank/1/x", B("y"), 2s);
  CHECK_MESSAGE(Contains(s.message(), "holds no identity"), s.message());
  // A malformed number under an owned prefix is nobody's to write.
  CHECK(rank1->Set("plexus/rank/01/x", B("y"), 2s).code() == PLEXUS_ERR_INVALID_USAGE);
  // Keys outside the owned prefixes are anyone's.
  CHECK(anyone->Set("plexus/0/shared", B("z"), 2s).ok());

  s = Connect(server->port(), token, "rank/1", &impostor, "host b, pid 22");
  CHECK(s.code() == PLEXUS_ERR_INVALID_USAGE);
  CHECK_MESSAGE(Contains(s.message(), "rank 1 is held by another process (host a, pid 11"),
                s.message());
  // ... and the holder goes on as before.
  CHECK(rank1->Set("plexus/rank/1/join/card", B("still mine"), 2s).ok());
}

TEST_CASE("identities over raw frames: the holder's key gets it back, another key never") {
  auto server = Serve("");
  {
    Raw first(server->port());
    CHECK(first.Claim("node/1", 7, "first").status == PLEXUS_OK);
    CHECK(first.Claim("node/1", 7, "first").status == PLEXUS_OK);  // again: fine
    const store::Reply other = first.Claim("node/2", 7, "first");
    CHECK(other.status == PLEXUS_ERR_INVALID_USAGE);
    CHECK_MESSAGE(Contains(other.message, "node 1 already"), other.message);
    CHECK(first.Set("plexus/node/1/launch/beat", "1").status == PLEXUS_OK);
  }
  Raw back(server->port());
  CHECK(back.Claim("node/1", 7, "first, reconnected").status == PLEXUS_OK);
  CHECK(back.Set("plexus/node/1/launch/beat", "2").status == PLEXUS_OK);
  Raw thief(server->port());
  const store::Reply refused = thief.Claim("node/1", 8, "\x01thief\n");
  CHECK(refused.status == PLEXUS_ERR_INVALID_USAGE);
  CHECK_MESSAGE(Contains(refused.message, "node 1 is held by another process (first"),
                refused.message);
  CHECK(thief.Set("plexus/node/1/launch/beat", "3").status == PLEXUS_ERR_INVALID_USAGE);
  // A claim of something that is no identity is a malformed frame.
  store::IdentityKey key{};
  Bytes frame;
  CHECK_FALSE(store::EncodeClaim("admin", key, "", &frame).ok());
}

TEST_CASE("identities: a client that reconnects claims its identity again") {
  auto server = Serve("");
  const uint16_t port = server->port();
  std::unique_ptr<RendezvousStore> rank3;
  REQUIRE(Connect(port, "", "rank/3", &rank3).ok());
  REQUIRE(rank3->Set("plexus/rank/3/a", B("1"), 2s).ok());
  // The store restarts on the same port: the client's next request finds its
  // connection gone, the one after reconnects, and must hold rank 3 again.
  server.reset();
  server = Serve("", port);
  (void)rank3->Set("plexus/rank/3/a", B("2"), 2s);
  Status s = rank3->Set("plexus/rank/3/a", B("3"), 2s);
  CHECK_MESSAGE(s.ok(), s.ToString());
  std::unique_ptr<RendezvousStore> other;
  CHECK(Connect(port, "", "rank/3", &other).code() == PLEXUS_ERR_INVALID_USAGE);
}

TEST_CASE("private dir: made 0700, files 0600, the first writer wins, every reader agrees") {
  RuntimeDir rt;
  std::string text = "first\n";
  bool created = false;
  Status s = store::CreateOnce("job-a.secret", &text, &created);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CHECK(created);
  CHECK(text == "first\n");
  CHECK(Mode(rt.path()) == 0700);
  CHECK(Mode(rt.path() / "job-a.secret") == 0600);
  std::string second = "second\n";
  REQUIRE(store::CreateOnce("job-a.secret", &second, &created).ok());
  CHECK_FALSE(created);
  CHECK(second == "first\n");

  // Eight racing creators of one file all end up with the same contents.
  std::vector<std::string> seen(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      std::string mine = "writer " + std::to_string(i);
      if (store::CreateOnce("job-b.secret", &mine).ok()) seen[i] = mine;
    });
  }
  for (auto& t : threads) t.join();
  CHECK(std::set<std::string>(seen.begin(), seen.end()).size() == 1);
  CHECK_FALSE(seen[0].empty());
  for (const auto& entry : fs::directory_iterator(rt.path())) {
    CHECK_MESSAGE(entry.path().filename().string().find(".part") == std::string::npos,
                  "a temporary file was left: " << entry.path());
  }

  std::string read;
  REQUIRE(store::ReadPrivate("job-a.secret", &read).ok());
  CHECK(read == "first\n");
  store::RemovePrivate("job-a.secret");
  bool missing = false;
  CHECK_FALSE(store::ReadPrivate("job-a.secret", &read, &missing).ok());
  CHECK(missing);
  CHECK_FALSE(store::CreateOnce("../escape", &read).ok());
  CHECK_FALSE(store::CreateOnce("a/b", &read).ok());
}

TEST_CASE("private dir: what another user could have put there is refused, naming it") {
  RuntimeDir rt;
  std::string text = "x";
  SUBCASE("a directory others may enter") {
    REQUIRE(mkdir(rt.path().c_str(), 0700) == 0);
    REQUIRE(chmod(rt.path().c_str(), 0755) == 0);
    Status s = store::CreateOnce("f", &text);
    CHECK(s.code() == PLEXUS_ERR_INVALID_USAGE);
    CHECK_MESSAGE(Contains(s.message(), rt.path().string() + " has mode 0755"), s.message());
  }
  SUBCASE("a symbolic link in place of the directory") {
    const fs::path elsewhere = rt.path().parent_path() / "elsewhere";
    REQUIRE(mkdir(elsewhere.c_str(), 0700) == 0);
    REQUIRE(symlink(elsewhere.c_str(), rt.path().c_str()) == 0);
    Status s = store::CreateOnce("f", &text);
    CHECK_FALSE(s.ok());
    CHECK_MESSAGE(Contains(s.message(), "not a directory"), s.message());
    CHECK_FALSE(fs::exists(elsewhere / "f"));
  }
  SUBCASE("a file others may read, and a symbolic link in place of a file") {
    REQUIRE(mkdir(rt.path().c_str(), 0700) == 0);
    std::ofstream(rt.path() / "open") << "secret\n";
    REQUIRE(chmod((rt.path() / "open").c_str(), 0644) == 0);
    Status s = store::CreateOnce("open", &text);
    CHECK(s.code() == PLEXUS_ERR_INVALID_USAGE);
    CHECK_MESSAGE(Contains(s.message(), "may be read by other users"), s.message());
    REQUIRE(symlink("/etc/passwd", (rt.path() / "link").c_str()) == 0);
    std::string got;
    CHECK_FALSE(store::ReadPrivate("link", &got).ok());
    CHECK(got.empty());
  }
  SUBCASE("a directory that belongs to another user") {
    if (geteuid() != 0) {
      MESSAGE("skipped: only root can give a directory to another user");
      return;
    }
    REQUIRE(mkdir(rt.path().c_str(), 0700) == 0);
    REQUIRE(chown(rt.path().c_str(), 65534, 65534) == 0);
    Status s = store::CreateOnce("f", &text);
    CHECK(s.code() == PLEXUS_ERR_INVALID_USAGE);
    CHECK_MESSAGE(Contains(s.message(), "belongs to uid 65534"), s.message());
    CHECK_MESSAGE(Contains(s.message(), "PLEXUS_TOKEN_FILE"), s.message());
  }
}

TEST_CASE("job secret: automatic on one host, refused across hosts, none only when asked") {
  RuntimeDir rt;
  ScopedEnv no_token("PLEXUS_TOKEN", nullptr), no_file("PLEXUS_TOKEN_FILE", nullptr),
      no_insecure("PLEXUS_INSECURE", nullptr);
  LaunchInfo l;
  l.rank = 1;
  l.size = 3;
  l.local_rank = 1;
  l.local_size = 3;
  l.master_addr = "127.0.0.1";
  l.master_port = 29555;
  l.source = "torchrun";

  JobSecret a, b;
  Status s = ChooseJobSecret(l, std::chrono::seconds(5), &a);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  CHECK(a.automatic);
  CHECK(a.token.size() == 64);
  CHECK(fs::exists(rt.path() / a.automatic_file));
  CHECK(Mode(rt.path() / a.automatic_file) == 0600);
  l.rank = 2;
  REQUIRE(ChooseJobSecret(l, std::chrono::seconds(5), &b).ok());
  CHECK(b.token == a.token);  // the other ranks of the job read the same
  std::string seen;
  REQUIRE(store::TokenFromEnvironment(&seen).ok());
  CHECK(seen == a.token);  // what the store, its clients and the backends get
  CHECK(store::ConfigFromEnvironment("PLEXUS_TOKEN", &seen));
  CHECK(seen == a.token);
  store::SetAutomaticToken("");

  SUBCASE("a token given is used as it is") {
    ScopedEnv given("PLEXUS_TOKEN", "given");
    JobSecret c;
    REQUIRE(ChooseJobSecret(l, std::chrono::seconds(5), &c).ok());
    CHECK(c.token == "given");
    CHECK_FALSE(c.automatic);
  }
  SUBCASE("ranks on several hosts without a secret are refused, told how to share one") {
    for (const auto& [local, addr] :
         std::vector<std::pair<uint32_t, std::string>>{{2, "127.0.0.1"}, {3, "192.0.2.1"}}) {
      l.local_size = local;
      l.master_addr = addr;
      JobSecret c;
      s = ChooseJobSecret(l, std::chrono::seconds(5), &c);
      CHECK(s.code() == PLEXUS_ERR_INVALID_USAGE);
      CHECK_MESSAGE(Contains(s.message(), "rank 2 of 3 (from torchrun)"), s.message());
      CHECK_MESSAGE(Contains(s.message(), "spans hosts"), s.message());
      CHECK_MESSAGE(Contains(s.message(), "plexus-run --make-token"), s.message());
      CHECK_MESSAGE(Contains(s.message(), "PLEXUS_TOKEN_FILE"), s.message());
      CHECK_MESSAGE(Contains(s.message(), "PLEXUS_INSECURE=1"), s.message());
      CHECK_MESSAGE(Contains(s.message(), "could join the job as one of its ranks"), s.message());
    }
  }
  SUBCASE("PLEXUS_INSECURE=1: no secret") {
    ScopedEnv insecure("PLEXUS_INSECURE", "1");
    l.local_size = 2;
    JobSecret c;
    REQUIRE(ChooseJobSecret(l, std::chrono::seconds(5), &c).ok());
    CHECK(c.token.empty());
  }
}

TEST_CASE("a backend chosen through the store is a plain name, never a path") {
  std::string name;
  CHECK(AutoBackendChoice(B("tcp"), &name).ok());
  CHECK(name == "tcp");
  for (const std::string& bad :
       std::vector<std::string>{"/tmp/evil.so", "./libplexus-tcp.so", "tcp\n", "evil", "TCP",
                                std::string("tcp\0x", 5)}) {
    CAPTURE(bad);
    name = "unchanged";
    Status s = AutoBackendChoice(B(bad), &name);
    CHECK(s.code() == PLEXUS_ERR_INVALID_USAGE);
    CHECK(name == "unchanged");
    CHECK_MESSAGE(Contains(s.message(), "refusing to load it"), s.message());
  }
  Status s = AutoBackendChoice(B("/tmp/evil.so"), &name);
  CHECK_MESSAGE(Contains(s.message(), "'/tmp/evil.so'"), s.message());
}

}  // namespace plexus
