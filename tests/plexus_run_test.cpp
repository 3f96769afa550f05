// Tests of the plexus-run launcher, run as a black box: each case starts the
// real binary (path in $PLEXUS_RUN_BIN) with small `sh -c` scripts as ranks and
// looks at its exit status, its stdout/stderr and the processes left behind.
//
// Every wait is bounded: a plexus-run that hangs is SIGKILLed by the helper and
// the case fails, the suite never hangs.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::string RunBin() {
  const char* bin = std::getenv("PLEXUS_RUN_BIN");
  REQUIRE_MESSAGE(bin != nullptr, "set PLEXUS_RUN_BIN to the plexus-run executable");
  return bin;
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// open + text + close, built with append(): g++ 12 at -O3 warns (-Wrestrict,
// a false positive) on the plain `"literal" + std::string`.
std::string Quote(const char* open, const std::string& text, const char* close) {
  std::string out(open);
  out.append(text).append(close);
  return out;
}

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/plexus-run-test.XXXXXX";
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    REQUIRE(::mkdtemp(buf.data()) != nullptr);
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

struct Result {
  int exit_code = -1;  // -1 unless it exited normally
  int term_signal = 0;
  bool timed_out = false;
  double seconds = 0;
  std::string out;
  std::string err;
};

// plexus-run started in the background with stdout/stderr going to files.
class Launch {
 public:
  // env_changes: "NAME=value" sets a variable, a bare "NAME" removes it.
  Launch(const std::vector<std::string>& args, const TempDir& dir,
         const std::vector<std::string>& env_changes = {})
      : out_path_(dir.path() / "launcher.out"), err_path_(dir.path() / "launcher.err") {
    std::vector<std::string> argv = {RunBin()};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      std::string name = entry.substr(0, entry.find('='));
      bool changed = std::any_of(env_changes.begin(), env_changes.end(),
                                 [&](const auto& c) { return c.substr(0, c.find('=')) == name; });
      if (!changed) env.push_back(entry);
    }
    for (const std::string& c : env_changes) {
      if (c.find('=') != std::string::npos) env.push_back(c);
    }
    std::vector<char*> argv_c, env_c;
    for (auto& a : argv) argv_c.push_back(a.data());
    argv_c.push_back(nullptr);
    for (auto& e : env) env_c.push_back(e.data());
    env_c.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_addopen(&actions, 2, err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    // Whatever the test runner ignores, plexus-run gets default dispositions:
    // it must see the SIGTERM/SIGINT the tests send.
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGCHLD}) sigaddset(&defaults, sig);
    sigset_t no_mask;
    sigemptyset(&no_mask);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &no_mask);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
    start_ = Clock::now();
    int rc = posix_spawn(&pid_, argv_c[0], &actions, &attr, argv_c.data(), env_c.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    REQUIRE_MESSAGE(rc == 0, "posix_spawn(" << argv[0] << "): " << std::strerror(rc));
  }

  ~Launch() {
    if (pid_ <= 0) return;
    // A failed REQUIRE left it running. SIGTERM first so that it stops its
    // ranks and their children; SIGKILL if it does not go within 5 s.
    ::kill(pid_, SIGTERM);
    for (auto deadline = Clock::now() + 5s; Clock::now() < deadline;) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(10ms);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }

  pid_t pid() const { return pid_; }

  // Waits at most limit for plexus-run to exit; past that it is SIGKILLed and
  // the result says timed_out.
  Result Wait(std::chrono::milliseconds limit) {
    Result r;
    const auto deadline = start_ + limit;
    int status = 0;
    while (true) {
      pid_t got = ::waitpid(pid_, &status, WNOHANG);
      if (got == pid_) break;
      if (got < 0 && errno != EINTR) FAIL("waitpid: " << std::strerror(errno));
      if (Clock::now() >= deadline) {
        r.timed_out = true;
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(5ms);
    }
    pid_ = -1;
    r.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
    r.out = ReadFile(out_path_);
    r.err = ReadFile(err_path_);
    return r;
  }

 private:
  std::filesystem::path out_path_;
  std::filesystem::path err_path_;
  pid_t pid_ = -1;
  Clock::time_point start_;
};

Result Run(const std::vector<std::string>& args, const std::vector<std::string>& env_changes = {},
           std::chrono::milliseconds limit = 30s) {
  TempDir dir;
  Launch launch(args, dir, env_changes);
  Result r = launch.Wait(limit);
  INFO("plexus-run stdout:\n" << r.out << "\nstderr:\n" << r.err);
  CHECK_FALSE(r.timed_out);
  return r;
}

// Alive and not a zombie (an orphan's zombie may linger when PID 1 is slow to
// reap it; it holds no resources and counts as gone).
bool IsAlive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;  // just vanished
  char state = stat[paren + 2];
  return state != 'Z' && state != 'X';
}

// The pids still alive after waiting at most limit for all of them to go.
std::vector<pid_t> Survivors(const std::vector<pid_t>& pids, std::chrono::milliseconds limit = 5s) {
  const auto deadline = Clock::now() + limit;
  std::vector<pid_t> alive;
  do {
    alive.clear();
    for (pid_t p : pids) {
      if (IsAlive(p)) alive.push_back(p);
    }
    if (alive.empty()) break;
    std::this_thread::sleep_for(20ms);
  } while (Clock::now() < deadline);
  return alive;
}

// Pids that the ranks wrote, one file per rank ("pids.<rank>": "$$ $!\n").
std::vector<pid_t> RecordedPids(const TempDir& dir) {
  std::vector<pid_t> pids;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().filename().string().rfind("pids.", 0) != 0) continue;
    std::istringstream in(ReadFile(entry.path()));
    for (long p; in >> p;) {
      if (p > 1) pids.push_back(static_cast<pid_t>(p));
    }
  }
  return pids;
}

// Waits (bounded) until count ranks have each written a complete pids file.
bool WaitForPidFiles(const TempDir& dir, int count, std::chrono::milliseconds limit = 10s) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    int complete = 0;
    for (int r = 0; r < count; ++r) {
      std::string text = ReadFile(dir.path() / ("pids." + std::to_string(r)));
      if (!text.empty() && text.back() == '\n') ++complete;
    }
    if (complete == count) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// "[2] A=1 B=x" → {"A": "1", "B": "x"}
std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> fields;
  std::istringstream in(line.substr(line.find(']') + 1));
  for (std::string word; in >> word;) {
    size_t eq = word.find('=');
    if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return fields;
}

const char kPrintVariables[] =
    "echo \"R=$RANK W=$WORLD_SIZE LR=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE MA=$MASTER_ADDR "
    "MP=$MASTER_PORT PR=$PLEXUS_RANK PW=$PLEXUS_WORLD_SIZE PLR=$PLEXUS_LOCAL_RANK "
    "PLW=$PLEXUS_LOCAL_WORLD_SIZE PMA=$PLEXUS_MASTER_ADDR PMP=$PLEXUS_MASTER_PORT "
    "H=$PLEXUS_STORE_HOSTED T=$PLEXUS_TOKEN N=$NCCL_DEBUG U=$UCX_TLS O=$OMPI_MCA_foo\"";

// Runs kPrintVariables on 3 ranks and returns each rank's fields, by rank.
std::vector<std::map<std::string, std::string>> VariablesOf3Ranks(
    const std::vector<std::string>& extra_args, const std::vector<std::string>& env) {
  std::vector<std::string> args = extra_args;
  args.insert(args.end(), {"-n", "3", "sh", "-c", kPrintVariables});
  Result r = Run(args, env);
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  std::vector<std::map<std::string, std::string>> by_rank(3);
  auto lines = Lines(r.out);
  REQUIRE(lines.size() == 3);
  for (const std::string& line : lines) {
    REQUIRE(line.size() > 4);
    REQUIRE(line[0] == '[');
    int rank = std::atoi(line.c_str() + 1);
    REQUIRE(rank >= 0);
    REQUIRE(rank < 3);
    CHECK(line.rfind(Quote("[", std::to_string(rank), "] R="), 0) == 0);
    by_rank[rank] = Fields(line);
  }
  return by_rank;
}

bool IsHex64(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(),
                                       [](char c) { return std::isxdigit(c) && !std::isupper(c); });
}

// A port that was free a moment ago (bound to 127.0.0.1:0 and closed): for
// --nnodes, where node 0's port must be known to every launcher in advance.
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// One job across "nodes" that are all this host: one plexus-run per node,
// each in a TempDir of its own, all on 127.0.0.1:port with one token file.
class MultiNode {
 public:
  MultiNode(int nnodes, const std::vector<std::string>& per_node_args,
            const std::vector<std::string>& env = {"PLEXUS_TOKEN", "PLEXUS_TOKEN_FILE",
                                                   "PLEXUS_TIMEOUT=30"})
      : port_(FreePort()), dirs_(nnodes) {
    token_ = (token_dir_.path() / "token").string();
    {
      std::ofstream out(token_);
      out << "0123456789abcdef0123456789abcdef-multi-node-test\n";
    }
    ::chmod(token_.c_str(), 0600);
    for (int k = 0; k < nnodes; ++k) {
      std::vector<std::string> args = {
          "--nnodes",      std::to_string(nnodes), "--node-rank",  std::to_string(k),
          "--master-port", std::to_string(port_),  "--token-file", token_,
          "--local-nodes"};
      args.insert(args.end(), per_node_args.begin(), per_node_args.end());
      launches_.push_back(std::make_unique<Launch>(args, dirs_[k], env));
    }
  }
  Launch& node(int k) { return *launches_[k]; }
  std::vector<Result> WaitAll(std::chrono::milliseconds limit) {
    std::vector<Result> results;
    for (auto& l : launches_) results.push_back(l->Wait(limit));
    return results;
  }

 private:
  int port_;
  TempDir token_dir_;
  std::string token_;
  std::vector<TempDir> dirs_;
  std::vector<std::unique_ptr<Launch>> launches_;
};

}  // namespace

TEST_SUITE("plexus-run") {
  TEST_CASE("sets every rank variable for -n 3 and passes the rest through") {
    auto ranks = VariablesOf3Ranks({}, {"RANK=99", "PLEXUS_WORLD_SIZE=7", "PLEXUS_TOKEN",
                                        "NCCL_DEBUG=INFO", "UCX_TLS=tcp,self", "OMPI_MCA_foo=bar"});
    const std::string port = ranks[0]["PMP"];
    const std::string torch_port = ranks[0]["MP"];
    const std::string token = ranks[0]["T"];
    CHECK(std::atoi(port.c_str()) > 0);
    CHECK(std::atoi(port.c_str()) < 65536);
    // MASTER_PORT is torch's env:// rendezvous (its rank 0 binds it), not the store.
    CHECK(std::atoi(torch_port.c_str()) > 0);
    CHECK(torch_port != port);
    CHECK(IsHex64(token));
    for (int r = 0; r < 3; ++r) {
      auto& f = ranks[r];
      const std::string rs = std::to_string(r);
      CAPTURE(r);
      CHECK(f["R"] == rs);
      CHECK(f["PR"] == rs);
      CHECK(f["LR"] == rs);
      CHECK(f["PLR"] == rs);
      CHECK(f["W"] == "3");
      CHECK(f["PW"] == "3");
      CHECK(f["LW"] == "3");
      CHECK(f["PLW"] == "3");
      CHECK(f["MA"] == "127.0.0.1");
      CHECK(f["PMA"] == "127.0.0.1");
      CHECK(f["MP"] == torch_port);
      CHECK(f["PMP"] == port);
      CHECK(f["H"] == "1");
      CHECK(f["T"] == token);
      CHECK(f["N"] == "INFO");
      CHECK(f["U"] == "tcp,self");
      CHECK(f["O"] == "bar");
    }
  }

  TEST_CASE("a fresh token per job, a caller's PLEXUS_TOKEN passed through") {
    auto first = VariablesOf3Ranks({}, {"PLEXUS_TOKEN"});
    auto second = VariablesOf3Ranks({}, {"PLEXUS_TOKEN"});
    CHECK(IsHex64(first[0]["T"]));
    CHECK(IsHex64(second[0]["T"]));
    CHECK(first[0]["T"] != second[0]["T"]);
    auto given = VariablesOf3Ranks({}, {"PLEXUS_TOKEN=c0ffee"});
    for (auto& f : given) CHECK(f["T"] == "c0ffee");
  }

  TEST_CASE("--no-store picks a port but hosts nothing; --master-addr is used") {
    auto ranks = VariablesOf3Ranks({"--no-store", "--master-addr", "127.0.0.2"}, {});
    for (auto& f : ranks) {
      CHECK(f["H"] == "0");
      CHECK(f["MA"] == "127.0.0.2");
      CHECK(f["PMA"] == "127.0.0.2");
      CHECK(std::atoi(f["PMP"].c_str()) > 0);
      CHECK(f["PMP"] == ranks[0]["PMP"]);
      CHECK(f["MP"] == ranks[0]["MP"]);
      CHECK(f["MP"] != f["PMP"]);
    }
  }

  TEST_CASE("the store is listening at PLEXUS_MASTER_ADDR:PLEXUS_MASTER_PORT while ranks run") {
    TempDir dir;
    const std::string d = dir.str();
    // Rank 0 publishes the port, then waits (bounded) for the test's go-ahead.
    const std::string script = "if [ \"$RANK\" = 0 ]; then echo $PLEXUS_MASTER_PORT > '" + d +
                               "/port.tmp'; mv '" + d + "/port.tmp' '" + d +
                               "/port'; i=0; while [ ! -e '" + d +
                               "/go' ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; fi";
    Launch launch({"-n", "2", "sh", "-c", script}, dir);
    std::string port_text;
    for (auto deadline = Clock::now() + 10s; Clock::now() < deadline;) {
      port_text = ReadFile(dir.path() / "port");
      if (!port_text.empty()) break;
      std::this_thread::sleep_for(10ms);
    }
    REQUIRE_FALSE(port_text.empty());
    int port = std::atoi(port_text.c_str());
    REQUIRE(port > 0);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    int connect_errno = errno;
    ::close(fd);
    CHECK_MESSAGE(rc == 0, "connect to 127.0.0.1:" << port << ": " << std::strerror(connect_errno));
    std::ofstream(dir.path() / "go") << "go\n";
    Result r = launch.Wait(30s);
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code == 0);
  }

  TEST_CASE("output is prefixed per rank; stdout and stderr stay apart") {
    Result r = Run({"-n", "2", "sh", "-c", "echo out$RANK; echo err$RANK >&2; printf tail$RANK"});
    INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
    CHECK(r.exit_code == 0);
    auto out = Lines(r.out);
    auto err = Lines(r.err);
    CHECK(std::multiset<std::string>(out.begin(), out.end()) ==
          std::multiset<std::string>{"[0] out0", "[0] tail0", "[1] out1", "[1] tail1"});
    CHECK(std::multiset<std::string>(err.begin(), err.end()) ==
          std::multiset<std::string>{"[0] err0", "[1] err1"});
    // A rank's own order is kept: its partial last line comes after its full one.
    for (const char* rank : {"0", "1"}) {
      auto full = std::find(out.begin(), out.end(), std::string("[") + rank + "] out" + rank);
      auto tail = std::find(out.begin(), out.end(), std::string("[") + rank + "] tail" + rank);
      CHECK(full < tail);
    }
  }

  TEST_CASE("lines of different ranks are never spliced together") {
    // `yes` writes 8 KiB blocks that end mid-line, so the launcher sees lines
    // split across reads while 4 ranks write at once.
    const std::string payload(300, 'x');
    Result r = Run({"-n", "4", "sh", "-c", "yes \"$RANK-" + payload + "\" | head -n 3000"});
    CHECK(r.exit_code == 0);
    auto lines = Lines(r.out);
    CHECK(lines.size() == 4 * 3000);
    int bad = 0;
    std::map<char, int> per_rank;
    for (const std::string& line : lines) {
      if (line.size() != 4 + 2 + payload.size() || line[0] != '[' || line[2] != ']' ||
          line[4] != line[1] || line.compare(6, std::string::npos, payload) != 0) {
        if (++bad <= 3) MESSAGE("bad line: " << line.substr(0, 80));
        continue;
      }
      ++per_rank[line[1]];
    }
    CHECK(bad == 0);
    CHECK(per_rank == std::map<char, int>{{'0', 3000}, {'1', 3000}, {'2', 3000}, {'3', 3000}});
  }

  TEST_CASE("--no-prefix leaves output as the ranks wrote it") {
    Result r = Run({"--no-prefix", "-n", "2", "sh", "-c", "echo out$RANK; echo err$RANK >&2"});
    CHECK(r.exit_code == 0);
    auto out = Lines(r.out);
    auto err = Lines(r.err);
    CHECK(std::multiset<std::string>(out.begin(), out.end()) ==
          std::multiset<std::string>{"out0", "out1"});
    CHECK(std::multiset<std::string>(err.begin(), err.end()) ==
          std::multiset<std::string>{"err0", "err1"});
  }

  TEST_CASE("options stop at the program; torchrun spellings are accepted") {
    Result r = Run({"--nproc-per-node", "2", "sh", "-c", "printf '%s|' \"$@\"; echo", "sh", "-n",
                    "5", "--help"});
    CHECK(r.exit_code == 0);
    auto out = Lines(r.out);
    CHECK(std::multiset<std::string>(out.begin(), out.end()) ==
          std::multiset<std::string>{"[0] -n|5|--help|", "[1] -n|5|--help|"});
    Result r2 = Run({"--nproc=3", "true"});
    CHECK(r2.exit_code == 0);
    Result r3 = Run({"--nproc_per_node", "1", "--master_addr", "127.0.0.1", "true"});
    CHECK(r3.exit_code == 0);
  }

  TEST_CASE("a rank exiting with code 3 stops the others and is named") {
    TempDir dir;
    const std::string d = Quote("'", dir.str(), "'");
    // Rank 1 fails once the others have recorded their pids (waiting at most 10 s).
    const std::string script = "if [ \"$RANK\" = 1 ]; then i=0; while [ $i -lt 200 ] && { [ ! -s " +
                               d + "/pids.0 ] || [ ! -s " + d +
                               "/pids.2 ]; }; do sleep 0.05; i=$((i+1)); done; exit 3; fi; " +
                               "sleep 60 & echo $$ $! > " + d + "/pids.$RANK; wait";
    Launch launch({"-n", "3", "sh", "-c", script}, dir);
    Result r = launch.Wait(30s);
    INFO("stderr:\n" << r.err);
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code == 1);
    CHECK(r.seconds < 15);
    CHECK(Contains(r.err, "plexus-run: rank 1 (pid "));
    CHECK(Contains(r.err, "exited with code 3"));
    CHECK(Contains(r.err, "stopped the other 2 ranks"));
    auto pids = RecordedPids(dir);
    CHECK(pids.size() == 4);
    CHECK(Survivors(pids).empty());
  }

  TEST_CASE("a rank killed by a signal is reported with the signal's name") {
    Result r = Run({"-n", "2", "sh", "-c",
                    "if [ \"$RANK\" = 0 ]; then sleep 0.1; kill -9 $$; fi; exec sleep 60"});
    INFO("stderr:\n" << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.seconds < 15);
    CHECK(Contains(r.err, "rank 0 (pid "));
    CHECK(Contains(r.err, "was killed by signal 9 (SIGKILL)"));
    CHECK(Contains(r.err, "stopped the other rank"));
  }

  TEST_CASE("ranks that ignore SIGTERM get SIGKILL after --grace") {
    TempDir dir;
    const std::string d = Quote("'", dir.str(), "'");
    // Rank 2 fails once ranks 0 and 1 ignore SIGTERM (waiting at most 10 s).
    const std::string script =
        "trap '' TERM; touch " + d + "/ready.$RANK; if [ \"$RANK\" = 2 ]; then i=0; " +
        "while [ $i -lt 200 ] && { [ ! -e " + d + "/ready.0 ] || [ ! -e " + d +
        "/ready.1 ]; }; do sleep 0.05; i=$((i+1)); done; exit 4; fi; sleep 60";
    Result r = Run({"--grace", "0.5", "-n", "3", "sh", "-c", script});
    INFO("stderr:\n" << r.err);
    CHECK(r.exit_code == 1);
    CHECK(r.seconds >= 0.5);
    CHECK(r.seconds < 15);
    CHECK(Contains(r.err, "rank 2 (pid "));
    CHECK(Contains(r.err, "exited with code 4"));
    CHECK(Contains(r.err, "2 got SIGKILL"));
  }

  TEST_CASE("a program that cannot be executed: exit 127 and a clear message") {
    SUBCASE("no such path") {
      Result r = Run({"-n", "2", "/nonexistent/plexus-run-test-prog"});
      CHECK(r.exit_code == 127);
      CHECK(Contains(r.err,
                     "plexus-run: cannot execute '/nonexistent/plexus-run-test-prog': "
                     "No such file or directory"));
      CHECK(r.out.empty());
    }
    SUBCASE("not on PATH") {
      Result r = Run({"-n", "2", "plexus-run-test-no-such-program"});
      CHECK(r.exit_code == 127);
      CHECK(Contains(r.err,
                     "plexus-run: cannot execute 'plexus-run-test-no-such-program': "
                     "No such file or directory"));
    }
    SUBCASE("not executable") {
      TempDir dir;
      const std::string file = dir.str() + "/not-executable";
      std::ofstream(file) << "#!/bin/sh\necho hi\n";
      ::chmod(file.c_str(), 0644);
      Result r = Run({"-n", "1", file});
      CHECK(r.exit_code == 127);
      CHECK(Contains(r.err, "plexus-run: cannot execute '" + file + "': Permission denied"));
    }
  }

  TEST_CASE("--nnodes: ranks are numbered node by node, LOCAL_* per node") {
    MultiNode job(2, {"-n", "2", "sh", "-c", kPrintVariables});
    auto results = job.WaitAll(30s);
    std::set<std::string> tokens;
    for (int k = 0; k < 2; ++k) {
      const Result& r = results[k];
      INFO("node " << k << " stdout:\n" << r.out << "\nstderr:\n" << r.err);
      CHECK_FALSE(r.timed_out);
      REQUIRE(r.exit_code == 0);
      auto lines = Lines(r.out);
      REQUIRE(lines.size() == 2);
      for (const std::string& line : lines) {
        const int rank = std::atoi(line.c_str() + 1);
        auto f = Fields(line);
        CAPTURE(line);
        CHECK(rank / 2 == k);
        CHECK(f["R"] == std::to_string(rank));
        CHECK(f["PR"] == std::to_string(rank));
        CHECK(f["LR"] == std::to_string(rank % 2));
        CHECK(f["PLR"] == std::to_string(rank % 2));
        CHECK(f["W"] == "4");
        CHECK(f["LW"] == "2");
        CHECK(f["PLW"] == "2");
        CHECK(f["H"] == "1");
        tokens.insert(f["T"]);
      }
    }
    CHECK(tokens == std::set<std::string>{"0123456789abcdef0123456789abcdef-multi-node-test"});
  }

  TEST_CASE("--nnodes: a rank failing on one node stops every node, each naming it") {
    MultiNode job(3, {"--grace", "1", "-n", "2", "sh", "-c",
                      "if [ $RANK = 3 ]; then sleep 0.5; exit 3; fi; sleep 60"});
    auto results = job.WaitAll(30s);
    for (int k = 0; k < 3; ++k) {
      const Result& r = results[k];
      INFO("node " << k << " stderr:\n" << r.err);
      CHECK_FALSE(r.timed_out);
      CHECK(r.exit_code == 1);
      CHECK(r.seconds < 15);
      CHECK(Contains(r.err, "plexus-run: rank 3 (node 1, host "));
      CHECK(Contains(r.err, "exited with code 3"));
      if (k != 1) CHECK(Contains(r.err, "stopped 2 ranks here on node " + std::to_string(k)));
    }
  }

  TEST_CASE("--nnodes: a node's plexus-run killed: the others stop, naming it") {
    // Nothing else fails (the ranks sleep): the node is lost after
    // PLEXUS_TIMEOUT + 5 s of silence, the default --node-timeout.
    MultiNode job(3, {"--grace", "1", "-n", "2", "sleep", "60"},
                  {"PLEXUS_TOKEN", "PLEXUS_TOKEN_FILE", "PLEXUS_TIMEOUT=4"});
    std::this_thread::sleep_for(1500ms);  // joined and running
    REQUIRE(::kill(job.node(2).pid(), SIGKILL) == 0);
    auto results = job.WaitAll(30s);
    for (int k = 0; k < 2; ++k) {
      const Result& r = results[k];
      INFO("node " << k << " stderr:\n" << r.err);
      CHECK_FALSE(r.timed_out);
      CHECK(r.exit_code == 1);
      CHECK(r.seconds < 15);
      CHECK(Contains(r.err, "plexus-run: node 2 (host "));
      CHECK(Contains(r.err, "ranks 4 and 5) stopped responding"));
      CHECK(Contains(r.err, "has not been heard from for 9 s"));
    }
  }

  TEST_CASE("--nnodes: node 0 killed takes the store: the others stop, naming node 0") {
    MultiNode job(2, {"--grace", "1", "--node-timeout", "2", "-n", "1", "sleep", "60"});
    std::this_thread::sleep_for(1500ms);
    REQUIRE(::kill(job.node(0).pid(), SIGKILL) == 0);
    Result r = job.node(1).Wait(30s);
    INFO("stderr:\n" << r.err);
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code == 1);
    CHECK(r.seconds < 15);
    CHECK(Contains(r.err, "plexus-run: node 0 "));
    CHECK(Contains(r.err, "is gone"));
    CHECK(Contains(r.err, "has not answered for 2 s"));  // --node-timeout
  }

  TEST_CASE("--nnodes: every node must start the same number of ranks") {
    MultiNode job(2, {"-n", "2", "true"});
    auto results = job.WaitAll(30s);
    CHECK(results[0].exit_code == 0);  // same -n: fine
    CHECK(results[1].exit_code == 0);
    const int port = FreePort();
    TempDir token_dir, d0, d1;
    const std::string token = (token_dir.path() / "token").string();
    REQUIRE(Run({"--make-token", token}).exit_code == 0);
    std::vector<std::string> env = {"PLEXUS_TOKEN", "PLEXUS_TOKEN_FILE=" + token,
                                    "PLEXUS_TIMEOUT=30"};
    Launch n0({"--nnodes", "2", "--local-nodes", "--master-port", std::to_string(port), "-n", "2",
               "true"},
              d0, env);
    Launch n1({"--nnodes", "2", "--local-nodes", "--node_rank", "1", "--master_port",
               std::to_string(port), "-n", "3", "true"},
              d1, env);
    for (Launch* l : {&n0, &n1}) {
      Result r = l->Wait(30s);
      INFO("stderr:\n" << r.err);
      CHECK(r.exit_code == 1);
      CHECK(Contains(r.err, "every node must start the same number of ranks"));
    }
  }

  TEST_CASE("--nnodes without a token, a port or a valid node rank is refused") {
    Result no_token = Run({"--nnodes", "2", "--master-port", "29999", "-n", "1", "true"},
                          {"PLEXUS_TOKEN", "PLEXUS_TOKEN_FILE"});
    CHECK(no_token.exit_code == 2);
    CHECK(Contains(no_token.err, "needs a job secret that every node shares"));
    CHECK(Contains(no_token.err, "plexus-run --make-token"));
    CHECK(Contains(no_token.err, "--token-file"));
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"--nnodes", "2", "-n", "1", "true"},
             {"--nnodes", "2", "--node-rank", "2", "--master-port", "29999", "-n", "1", "true"},
             {"--node-rank", "1", "-n", "1", "true"},
             {"--nnodes", "2", "--no-store", "--master-port", "29999", "-n", "1", "true"},
             {"--nnodes", "0", "-n", "1", "true"}}) {
      Result r = Run(args, {"PLEXUS_TOKEN=x"});
      CHECK(r.exit_code == 2);
      CHECK(Contains(r.err, "--help"));
    }
    TempDir dir;
    const std::string missing = (dir.path() / "missing").string();
    Result bad_file = Run({"--token-file", missing, "-n", "1", "true"});
    CHECK(bad_file.exit_code == 2);
    CHECK(Contains(bad_file.err, "cannot read --token-file '" + missing + "'"));
  }

  TEST_CASE("--make-token writes a fresh secret only its owner reads, never over a file") {
    TempDir dir;
    const std::string path = (dir.path() / "token").string();
    Result r = Run({"--make-token", path});
    CHECK(r.exit_code == 0);
    std::string token = ReadFile(path);
    REQUIRE(!token.empty());
    CHECK(token.back() == '\n');
    token.pop_back();
    CHECK(IsHex64(token));
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    Result again = Run({"--make-token", path});
    CHECK(again.exit_code != 0);
    CHECK(ReadFile(path) == token + "\n");
    // A one-host job takes it too.
    auto ranks = VariablesOf3Ranks({"--token-file", path}, {"PLEXUS_TOKEN"});
    for (auto& f : ranks) CHECK(f["T"] == token);
  }

  TEST_CASE("--help lists every option and every variable; --version") {
    Result r = Run({"--help"});
    CHECK(r.exit_code == 0);
    for (const char* word : {"-n",
                             "--nproc",
                             "--nproc-per-node",
                             "--master-addr",
                             "--master-port",
                             "--no-store",
                             "--no-prefix",
                             "--grace",
                             "--timeout",
                             "--nnodes",
                             "--node-rank",
                             "--token-file",
                             "--make-token",
                             "--node-timeout",
                             "--local-nodes",
                             "--bind-to",
                             "--help",
                             "--version",
                             "RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "LOCAL_WORLD_SIZE",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "PLEXUS_RANK",
                             "PLEXUS_WORLD_SIZE",
                             "PLEXUS_LOCAL_RANK",
                             "PLEXUS_LOCAL_WORLD_SIZE",
                             "PLEXUS_MASTER_ADDR",
                             "PLEXUS_MASTER_PORT",
                             "PLEXUS_STORE_HOSTED",
                             "PLEXUS_TOKEN"}) {
      CHECK_MESSAGE(Contains(r.out, word), "--help does not mention " << word);
    }
    Result v = Run({"--version"});
    CHECK(v.exit_code == 0);
    CHECK(v.out.rfind("plexus-run ", 0) == 0);
  }

  TEST_CASE("bad command lines are usage errors (exit 2)") {
    const std::vector<std::vector<std::string>> cases = {
        {},
        {"true"},
        {"-n", "2"},
        {"-n"},
        {"-n", "0", "true"},
        {"-n", "two", "true"},
        {"-n", "99999999", "true"},
        {"--bogus", "-n", "1", "true"},
        {"-x", "-n", "1", "true"},
        {"--grace", "-1", "-n", "1", "true"},
        {"--timeout", "soon", "-n", "1", "true"},
        {"--master-port", "70000", "-n", "1", "true"},
        {"--bind-to", "socket", "-n", "1", "true"},
    };
    for (const auto& args : cases) {
      std::string joined;
      for (const auto& a : args) joined += " " + a;
      CAPTURE(joined);
      Result r = Run(args);
      CHECK(r.exit_code == 2);
      CHECK(Contains(r.err, "plexus-run: "));
      CHECK(Contains(r.err, "--help"));
    }
  }

  TEST_CASE("--bind-to core: each rank on a CPU of its own; more ranks than CPUs: none") {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    REQUIRE(::sched_getaffinity(0, sizeof allowed, &allowed) == 0);
    std::vector<int> cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
    const int n = int(std::min<size_t>(cpus.size(), 4));
    // (Cpus_allowed_list of a rank bound to CPU 3 reads "3".)
    Result r = Run({"--bind-to", "core", "-n", std::to_string(n), "sh", "-c",
                    "grep Cpus_allowed_list: /proc/self/status"});
    CHECK(r.exit_code == 0);
    for (int i = 0; i < n; ++i) {
      CAPTURE(i);
      CHECK(Contains(r.out, "[" + std::to_string(i) + "] Cpus_allowed_list:\t" +
                                std::to_string(cpus[size_t(i)]) + "\n"));
    }
    const int over = int(cpus.size()) + 1;
    Result o = Run({"--bind-to", "core", "-n", std::to_string(over), "true"});
    CHECK(o.exit_code == 0);
    CHECK(Contains(o.err, "--bind-to core: " + std::to_string(over) + " ranks on " +
                              std::to_string(cpus.size()) + " CPUs here; not binding them"));
  }

  TEST_CASE("--timeout stops the whole job") {
    Result r = Run({"--timeout", "0.5", "-n", "2", "sleep", "60"});
    INFO("stderr:\n" << r.err);
    CHECK(r.exit_code == 124);
    CHECK(r.seconds < 15);
    CHECK(Contains(r.err, "timed out"));
  }

  TEST_CASE("a signal sent to plexus-run stops every rank, children included") {
    int sig = 0;
    SUBCASE("SIGTERM") {
      sig = SIGTERM;
    }
    SUBCASE("SIGINT") {
      sig = SIGINT;
    }  // background `sleep &` ignores SIGINT: needs the cleanup
    CAPTURE(sig);
    TempDir dir;
    const std::string script = "sleep 60 & echo $$ $! > '" + dir.str() + "'/pids.$RANK; wait";
    Launch launch({"-n", "3", "sh", "-c", script}, dir);
    REQUIRE(WaitForPidFiles(dir, 3));
    auto pids = RecordedPids(dir);
    CHECK(pids.size() == 6);
    REQUIRE(::kill(launch.pid(), sig) == 0);
    Result r = launch.Wait(15s);
    INFO("stderr:\n" << r.err);
    CHECK_FALSE(r.timed_out);
    CHECK(r.exit_code == 128 + sig);
    CHECK(Contains(r.err, sig == SIGTERM ? "received SIGTERM" : "received SIGINT"));
    CHECK(Survivors(pids).empty());
  }

  // Slurm's variables as srun sets them for a task (simulated here; the real
  // Slurm runs in tests/slurm).
  TEST_CASE("under srun: several tasks on a node are refused, saying what to run") {
    const std::vector<std::string> step = {"SLURM_JOB_ID=12",        "SLURM_STEP_ID=0",
                                           "SLURM_NTASKS=2",         "SLURM_NODEID=0",
                                           "SLURM_PROCID=0",         "SLURM_STEP_TASKS_PER_NODE=2",
                                           "SLURM_STEP_NODELIST=n0", "PLEXUS_TOKEN",
                                           "PLEXUS_TOKEN_FILE",      "PLEXUS_SLURM_MUNGE=0"};
    // step with NAME=value replaced (the first of a name is the one seen).
    auto with = [&](std::vector<std::string> env, const std::vector<std::string>& changes) {
      for (const std::string& c : changes) {
        const std::string name = c.substr(0, c.find('=') + 1);
        std::erase_if(env, [&](const std::string& e) { return e.rfind(name, 0) == 0; });
        env.push_back(c);
      }
      return env;
    };
    Result r = Run({"-n", "2", "true"}, step);
    CHECK(r.exit_code == 2);
    CHECK(Contains(r.err, "each would start a job of its own"));
    CHECK(Contains(r.err, "srun --ntasks-per-node=1 plexus-run"));
    // Malformed Slurm values: refused, naming the variable, never a crash.
    for (const std::string bad :
         {"SLURM_STEP_TASKS_PER_NODE=2(x", "SLURM_STEP_NODELIST=n[1-", "SLURM_STEP_ID=x"}) {
      auto env = with(step, {bad});
      CAPTURE(bad);
      Result b = Run({"-n", "2", "true"}, env);
      CHECK(b.exit_code == 2);
      CHECK(Contains(b.err, bad.substr(0, bad.find('='))));
    }
    // One task per node: plexus-run takes its place from Slurm, and across
    // nodes asks for the secret (options given would win: --nnodes 1 runs here).
    auto one_per_node = with(
        step, {"SLURM_STEP_TASKS_PER_NODE=1(x2)", "SLURM_STEP_NODELIST=n[0-1]", "SLURM_NODEID=1"});
    Result p = Run({"-n", "2", "true"}, one_per_node);
    CHECK(p.exit_code == 2);
    CHECK(Contains(p.err, "Slurm step 12.0: node 1 of 2, master n0:"));
    CHECK(Contains(p.err, "needs a job secret that every node shares"));
    Result own = Run({"--nnodes", "1", "-n", "1", "true"}, one_per_node);
    CHECK(own.exit_code == 0);
  }
}
