// End-to-end: ranks started by hand (PLEXUS_RANK, PLEXUS_WORLD_SIZE,
// PLEXUS_MASTER_ADDR/PORT, PLEXUS_STORE_HOSTED=1, PLEXUS_TOKEN) against a store
// this test hosts with the job's secret, running tests/security/fault_rank over
// the TCP backend. With the job's token the job works; a rank started with a
// different token fails at once with an error that names PLEXUS_TOKEN, and the
// rank that waits for it fails within PLEXUS_TIMEOUT instead of hanging.
//
// Every child is killed if it outlives a generous bound, so nothing hangs.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "plexus/rendezvous_store.hpp"
#include "store/store_protocol.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

const char* const kJobToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/plexus-job-token.XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

struct Child {
  pid_t pid = -1;
  int status = -1;  // waitpid status once reaped
  double seconds = 0;
};

// Starts fault_rank as one rank; its stdout+stderr go to dir/rankR.log.
Child Spawn(const fs::path& dir, uint32_t rank, uint16_t port, const std::string& token) {
  const char* bin = std::getenv("FAULT_RANK_BIN");
  REQUIRE_MESSAGE(bin != nullptr, "set FAULT_RANK_BIN");
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v = *e;
    // Start from a clean launch environment: no launcher variables of our own caller.
    if (v.rfind("PLEXUS_", 0) == 0 || v.rfind("RANK=", 0) == 0 || v.rfind("WORLD_SIZE=", 0) == 0 ||
        v.rfind("MASTER_", 0) == 0 || v.rfind("OMPI_", 0) == 0 || v.rfind("SLURM_", 0) == 0 ||
        v.rfind("PMI_", 0) == 0) {
      continue;
    }
    env.push_back(v);
  }
  env.push_back("PLEXUS_RANK=" + std::to_string(rank));
  env.push_back("PLEXUS_WORLD_SIZE=2");
  env.push_back("PLEXUS_MASTER_ADDR=127.0.0.1");
  env.push_back("PLEXUS_MASTER_PORT=" + std::to_string(port));
  env.push_back("PLEXUS_STORE_HOSTED=1");
  env.push_back("PLEXUS_BACKEND=tcp");
  env.push_back("PLEXUS_TIMEOUT=10");
  env.push_back("PLEXUS_TOKEN=" + token);
  if (const char* p = std::getenv("PLEXUS_PLUGIN_PATH"))
    env.push_back(std::string("PLEXUS_PLUGIN_PATH=") + p);
  std::vector<char*> envp;
  for (auto& v : env) envp.push_back(v.data());
  envp.push_back(nullptr);
  std::string arg0 = bin, arg1 = dir.string(), arg2 = "allreduce";
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string log = (dir / ("rank" + std::to_string(rank) + ".log")).string();
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  Child c;
  const int rc = posix_spawn(&c.pid, bin, &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE_MESSAGE(rc == 0, "posix_spawn " << bin << ": " << std::strerror(rc));
  return c;
}

// Reaps every child, SIGKILLing any still alive at the limit (the check then fails).
void WaitAll(std::vector<Child>* children, std::chrono::seconds limit) {
  const auto start = Clock::now();
  size_t left = children->size();
  while (left > 0) {
    for (Child& c : *children) {
      if (c.pid < 0 || c.status != -1) continue;
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) == c.pid) {
        c.status = status;
        c.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        --left;
      }
    }
    if (left == 0) break;
    if (Clock::now() - start > limit) {
      for (Child& c : *children) {
        if (c.status == -1) {
          kill(c.pid, SIGKILL);
          waitpid(c.pid, &c.status, 0);
          c.seconds = 1e9;
          FAIL_CHECK("rank with pid " << c.pid << " hung; killed");
        }
      }
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
}

int ExitCode(const Child& c) {
  return WIFEXITED(c.status) ? WEXITSTATUS(c.status) : 128 + WTERMSIG(c.status);
}

std::unique_ptr<plexus::TcpStoreServer> HostStore() {
  plexus::store::TcpStoreServerOptions options;
  options.token = kJobToken;
  std::unique_ptr<plexus::TcpStoreServer> server;
  plexus::Status s = plexus::store::StartTcpStoreServer("127.0.0.1", 0, options, &server);
  REQUIRE_MESSAGE(s.ok(), s.ToString());
  return server;
}

std::string Describe(const fs::path& dir) {
  std::string text;
  for (const char* f : {"rank0.log", "rank1.log", "rank0.err", "rank1.err"}) {
    if (fs::exists(dir / f)) text += std::string("--- ") + f + ":\n" + ReadFile(dir / f);
  }
  return text;
}

}  // namespace

TEST_CASE("two ranks started by hand with the job's PLEXUS_TOKEN run an allreduce") {
  TempDir dir;
  auto server = HostStore();
  std::vector<Child> ranks = {Spawn(dir.path(), 0, server->port(), kJobToken),
                              Spawn(dir.path(), 1, server->port(), kJobToken)};
  WaitAll(&ranks, 60s);
  const std::string details = Describe(dir.path());
  CHECK_MESSAGE(ExitCode(ranks[0]) == 0, details);
  CHECK_MESSAGE(ExitCode(ranks[1]) == 0, details);
  CHECK(fs::exists(dir.path() / "rank0.ok"));
  CHECK(fs::exists(dir.path() / "rank1.ok"));
}

TEST_CASE("a rank started with a different PLEXUS_TOKEN fails clearly; the job ends, no hang") {
  TempDir dir;
  auto server = HostStore();
  const auto start = Clock::now();
  std::vector<Child> ranks = {Spawn(dir.path(), 0, server->port(), kJobToken),
                              Spawn(dir.path(), 1, server->port(), "a-different-token")};
  WaitAll(&ranks, 60s);
  const double total = std::chrono::duration<double>(Clock::now() - start).count();
  const std::string details = Describe(dir.path());
  MESSAGE("rank 0 ended after " << ranks[0].seconds << " s, rank 1 after " << ranks[1].seconds
                                << " s\n"
                                << details);
  // The impostor is refused by the store at connect time, with a reason.
  CHECK(ExitCode(ranks[1]) == 3);
  const std::string err1 = ReadFile(dir.path() / "rank1.err");
  CHECK_MESSAGE(Contains(err1, "rendezvous store"), err1);
  CHECK_MESSAGE(Contains(err1, "PLEXUS_TOKEN differs"), err1);
  CHECK(ranks[1].seconds < 8);  // at once, not after PLEXUS_TIMEOUT
  // The honest rank waits for its peer only until PLEXUS_TIMEOUT (10 s), then fails.
  CHECK(ExitCode(ranks[0]) == 3);
  const std::string err0 = ReadFile(dir.path() / "rank0.err");
  CHECK_MESSAGE((Contains(err0, "TIMEOUT") || Contains(err0, "timed out")), err0);
  CHECK(total < 45);
}
