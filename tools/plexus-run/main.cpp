// plexus-run: the local launcher. `plexus-run -n N prog args...` starts N
// copies of prog on this host with the rank variables set (rank_environment),
// hosts the rendezvous store they meet at, prefixes their output with the rank
// and stops the job when one rank fails (launcher).
//
// Across hosts (--nnodes N --node-rank K), one plexus-run runs on each host;
// node 0's hosts the store, and the launchers learn of each other's failures
// through it (node_group).
//
// This file holds the command line, --help, and the order of things: token,
// store, node group, environments, job.
#include <arpa/inet.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launcher.hpp"
#include "node_group.hpp"
#include "plexus/launch_env.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/settings/environment.hpp"
#include "rank_environment.hpp"
#include "slurm_step.hpp"
#include "stall_report.hpp"
#include "store/job_token.hpp"
#include "store/munge_secret.hpp"
#include "store/store_protocol.hpp"

#ifndef PLEXUS_VERSION
#define PLEXUS_VERSION "unknown"  // meson passes the project version
#endif

extern char** environ;

namespace plexus::run {
namespace {

// Two pipes per rank must fit under the usual 1024-descriptor limit with room
// to spare; a bigger job on one host is almost certainly a typo.
constexpr int kMaxRanks = 4096;
constexpr int kMaxNodes = 65536;
// A token file is one line; anything this big is the wrong file.
constexpr size_t kMaxTokenFileBytes = 64 * 1024;

struct Options {
  int nproc = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string token_file;
  std::string master_addr = "127.0.0.1";
  bool master_addr_given = false;
  bool nnodes_given = false;
  bool node_rank_given = false;
  bool master_port_given = false;
  bool from_slurm = false;                     // --nnodes and the rest taken from an srun step
  int master_port = 0;                         // 0: whatever the OS picks
  bool local_nodes = false;                    // --local-nodes: every node on this host
  std::chrono::milliseconds node_timeout{-1};  // -1: PLEXUS_TIMEOUT + 5 s
  bool host_store = true;
  bool prefix_output = true;
  bool bind_to_core = false;  // --bind-to core
  std::chrono::milliseconds grace{3000};
  std::chrono::milliseconds timeout{0};
  int max_restarts = 0;                        // --max-restarts
  bool elastic = false;                        // --elastic
  int min_nodes = 0;                           // --nnodes MIN:MAX; 0: --nnodes (every node)
  std::chrono::milliseconds last_call{30000};  // --last-call
  std::vector<std::string> argv;
};

constexpr size_t kHelpColumn = 27;  // where descriptions start in --help
constexpr size_t kHelpWidth = 79;

// Word-wraps text to kHelpWidth, continuation lines indented to indent.
std::string Wrap(const std::string& text, size_t indent) {
  std::string out;
  size_t column = indent;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const size_t word = end - pos;
    if (column > indent && column + 1 + word > kHelpWidth) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    out.append(text, pos, word);
    column += word;
    pos = end + 1;
  }
  return out;
}

void PrintHelp() {
  std::string text =
      "Usage: plexus-run -n N [options] prog [args...]\n"
      "       plexus-run --nnodes M --node-rank K --master-addr HOST --master-port PORT\n"
      "                  --token-file FILE -n N [options] prog [args...]\n"
      "       plexus-run --make-token FILE\n"
      "\n"
      "Starts N copies of prog on this host (like torchrun --no-python). plexus-run\n"
      "hosts the rendezvous store the ranks meet at, prefixes every line they print\n"
      "with \"[rank] \", and when one rank exits non-zero or is killed it stops the\n"
      "others and exits non-zero, saying which rank failed and how, and, when ranks\n"
      "timed out in a collective, which rank they waited for (it stopped making\n"
      "progress: frozen, stuck outside Plexus, or never posted it).\n"
      "\n"
      "Options:\n"
      "  -n, --nproc N           number of ranks on this host, 1.." +
      std::to_string(kMaxRanks) +
      " (required)\n"
      "      --nproc-per-node N  same as --nproc (torchrun's name; --nproc_per_node too)\n"
      "      --nnodes M          number of hosts (nodes) in the job, each running one\n"
      "                          plexus-run with the same -n (default 1)\n"
      "      --elastic           a rank that fails (or that the others' timeouts name\n"
      "                          as stopped, which is then killed) leaves the job and\n"
      "                          the others go on: they learn who is left through\n"
      "                          Communicator::shrink() (PLEXUS_ELASTIC=1). With\n"
      "                          --max-restarts N, a rank that left is started again\n"
      "                          (N times in all) and joins the others at their next\n"
      "                          Communicator::grow(). One host so far\n"
      "      --nnodes MIN:MAX    elastic: start once MAX nodes joined, or MIN and then\n"
      "                          --last-call passed; with --max-restarts, a lost node\n"
      "                          restarts the job on those left (at least MIN), and a\n"
      "                          node that comes later joins at the next restart\n"
      "      --last-call SEC     with MIN:MAX, how long node 0 waits for more nodes\n"
      "                          once MIN have joined (default 30)\n"
      "      --node-rank K       this host's place, 0..M-1 (default 0; --node_rank too);\n"
      "                          node 0 hosts the store\n"
      "      --master-addr ADDR  address the store listens on and ranks connect to:\n"
      "                          with --nnodes, node 0's address as the other nodes\n"
      "                          reach it, never a loopback one (required there;\n"
      "                          default 127.0.0.1 on one host; --master_addr too)\n"
      "      --master-port PORT  port of the store (default 0: a free port chosen by\n"
      "                          the OS; required with --nnodes; --master_port too)\n"
      "      --token-file FILE   the job secret, shared by every node (default: a fresh\n"
      "                          one, or PLEXUS_TOKEN, or with --nnodes the file\n"
      "                          PLEXUS_TOKEN_FILE names)\n"
      "      --make-token FILE   write a fresh job secret to FILE (mode 600) and exit\n"
      "      --node-timeout SEC  with --nnodes, how long a node's plexus-run may go\n"
      "                          unheard before its node counts as lost (default\n"
      "                          PLEXUS_TIMEOUT + 5, i.e. 305 where it is unset;\n"
      "                          once the job is failing, at most 5)\n"
      "      --local-nodes       with --nnodes, every node runs on this host (to try\n"
      "                          it out): allows a loopback --master-addr\n"
      "      --no-store          do not host the store; only pick a free port for it\n"
      "                          (PLEXUS_STORE_HOSTED=0: rank 0 hosts it)\n"
      "      --no-prefix         no \"[rank] \" prefix: ranks write straight to\n"
      "                          plexus-run's stdout and stderr\n"
      "      --bind-to core|none each rank (all its threads) on one CPU of those\n"
      "                          plexus-run may use, rank i on the i-th, as mpirun's\n"
      "                          --bind-to core; with more ranks than CPUs it binds\n"
      "                          none and says so (default none)\n"
      "      --grace SECONDS     when stopping ranks, time between SIGTERM and SIGKILL\n"
      "                          (default 3)\n"
      "      --timeout SECONDS   stop the whole job after this long and exit 124\n"
      "                          (default 0: no limit)\n"
      "      --max-restarts N    when a rank fails (exits non-zero, is killed, or stops\n"
      "                          making progress), stop the others and start every\n"
      "                          rank again, up to N times (default 0), with a fresh\n"
      "                          store; PLEXUS_RESTART_COUNT says which start it is.\n"
      "                          With --nnodes, give it to every node: all restart\n"
      "                          together (a lost node ends the job; --max_restarts\n"
      "                          too). With --elastic: ranks are started again one\n"
      "                          by one, the job is not\n"
      "  -h, --help              print this help and exit\n"
      "  -V, --version           print the version and exit\n"
      "\n"
      "Options end at prog: \"plexus-run -n 2 ls -l\" runs \"ls -l\" twice.\n"
      "SIGINT, SIGTERM and SIGHUP sent to plexus-run are forwarded to every rank\n"
      "(a second one sends SIGKILL). Rank 0 reads plexus-run's stdin unless it is a\n"
      "terminal; the other ranks read /dev/null.\n"
      "\n"
      "More than one host: run one plexus-run on each, with the same --nnodes,\n"
      "--master-addr, --master-port, -n and token, and --node-rank 0, 1, ... Ranks\n"
      "are numbered node by node (RANK = K * N + LOCAL_RANK) and prefixed with RANK.\n"
      "The job secret never goes on a command line: make it once, copy it to every\n"
      "host (or keep it on a shared file system) and name it with --token-file.\n"
      "Example, 3 hosts of 2 ranks each, node 0 at 10.0.0.1:\n"
      "  plexus-run --make-token ~/.plexus-token   # then copy it to the other hosts\n"
      "  plexus-run --nnodes 3 --node-rank 0 --master-addr 10.0.0.1 \\\n"
      "      --master-port 29400 --token-file ~/.plexus-token -n 2 ./train  # host 0\n"
      "  ... the same with --node-rank 1 on host 1 and --node-rank 2 on host 2\n"
      "Every plexus-run waits (up to PLEXUS_TIMEOUT, default 300 s) for all nodes to\n"
      "join before starting its ranks. When a rank fails, or a node's plexus-run\n"
      "is killed or its host or network goes down (nothing heard from it for\n"
      "--node-timeout, or for 5 s once something else failed), every plexus-run\n"
      "stops its ranks and exits 1, each naming the rank that failed first with its\n"
      "node and host, \"rank 3 (node 1, host b)\", or the node that was lost. If\n"
      "node 0 goes, the store goes with it and the others stop too. A node whose\n"
      "ranks finished waits until every node's have. A launcher with the job's\n"
      "token that is not one of its nodes (a second --node-rank K, or another\n"
      "--nnodes) is refused, saying why, and the job goes on.\n"
      "A loopback --master-addr (127.x, ::1, localhost, or a name that resolves to\n"
      "one), PLEXUS_SOCKET_IFNAME naming a loopback interface or a loopback\n"
      "PLEXUS_TCP_ADDR is refused: the other nodes could not connect there.\n"
      "The store listens on --master-addr; the ranks, unless those two say\n"
      "otherwise, on the address that routes to it.\n"
      "\n"
      "Under Slurm, srun starts the ranks itself with nothing to set (`srun -n 6\n"
      "prog`). To use plexus-run there, run one per node: `srun --ntasks-per-node=1\n"
      "plexus-run -n 2 prog` takes --nnodes, --node-rank, --master-addr (the step's\n"
      "first node) and --master-port (from the job and step ids) from Slurm; the\n"
      "secret from PLEXUS_TOKEN_FILE, else node 0 hands one out in a MUNGE\n"
      "credential only you can open. With several tasks on a node it refuses, since\n"
      "each would start a job of its own. Options given on the command line win.\n"
      "\n"
      "Variables set for every rank (the rest of the environment, NCCL_*, UCX_*\n"
      "and OMPI_* included, is passed through unchanged):\n";
  for (const VariableDoc& v : RankVariables()) {
    std::string name = v.name;
    name.resize(std::max<size_t>(name.size() + 1, kHelpColumn - 2), ' ');
    text += "  " + name + Wrap(v.meaning, kHelpColumn) + "\n";
  }
  text +=
      "\n"
      "Exit status:\n"
      "  0      every rank exited with 0\n"
      "  1      a rank exited non-zero or was killed by a signal (others were stopped)\n"
      "         or, with --nnodes, a rank or a node failed elsewhere, or nodes could\n"
      "         not join\n"
      "  2      bad command line\n"
      "  124    --timeout expired\n"
      "  127    prog could not be executed\n"
      "  128+S  plexus-run was interrupted by signal S\n";
  std::fputs(text.c_str(), stdout);
}

[[noreturn]] void UsageError(const std::string& message) {
  std::fprintf(stderr,
               "plexus-run: %s\n"
               "Usage: plexus-run -n N [options] prog [args...]\n"
               "Try 'plexus-run --help' for more information.\n",
               message.c_str());
  std::exit(kExitUsage);
}

long ParseInt(const char* option, const char* text, long min, long max) {
  errno = 0;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < min || value > max) {
    UsageError(std::string("invalid value '") + text + "' for " + option + " (expected " +
               std::to_string(min) + ".." + std::to_string(max) + ")");
  }
  return value;
}

std::chrono::milliseconds ParseSeconds(const char* option, const char* text) {
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text, &end);
  // Capped at a year: the millisecond count must not overflow, and poll()
  // deadlines that far out are a mistake anyway.
  if (errno != 0 || end == text || *end != '\0' || !std::isfinite(value) || value < 0 ||
      value > 365.0 * 24 * 3600) {
    UsageError(std::string("invalid value '") + text + "' for " + option +
               " (expected a number of seconds >= 0)");
  }
  return std::chrono::milliseconds(static_cast<long long>(std::llround(value * 1000)));
}

// --bind-to core: rank i's CPU, the i-th of those this process may use; none
// (an empty list) with more ranks than CPUs, as mpirun refuses to bind then.
std::vector<int> RankCpus(int ranks) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  if (cpus.empty() || size_t(ranks) > cpus.size()) {
    std::fprintf(stderr,
                 "plexus-run: --bind-to core: %d ranks on %zu CPUs here; not binding them\n", ranks,
                 cpus.size());
    return {};
  }
  cpus.resize(size_t(ranks));
  return cpus;
}

// --make-token FILE: a fresh secret in a new file only its owner may read.
int MakeTokenFile(const char* path) {
  std::string token, error;
  if (!store::MakeJobToken(&token, &error)) {
    std::fprintf(stderr, "plexus-run: cannot make a job token: %s\n", error.c_str());
    return kExitRankFailed;
  }
  int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::fprintf(stderr, "plexus-run: cannot create '%s': %s%s\n", path, std::strerror(errno),
                 errno == EEXIST ? " (a token file is never overwritten)" : "");
    return kExitRankFailed;
  }
  token += "\n";
  bool ok = ::write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    std::fprintf(stderr, "plexus-run: cannot write '%s': %s\n", path, std::strerror(errno));
    ::unlink(path);
    return kExitRankFailed;
  }
  std::printf(
      "plexus-run: wrote a new job secret to %s (mode 600); copy it to every node and give it "
      "with --token-file %s\n",
      path, path);
  return kExitOk;
}

// The job secret in path: the file's contents without trailing whitespace.
bool ReadTokenFile(const std::string& path, const char* what, std::string* token,
                   std::string* error) {
  const std::string name = std::string(what) + " '" + path + "'";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    *error = "cannot read " + name + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  if (!S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) > kMaxTokenFileBytes) {
    ::close(fd);
    *error = name + (S_ISREG(st.st_mode) ? " is too large for a job secret" : " is not a file");
    return false;
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  if (text.empty() || text.find('\0') != std::string::npos ||
      text.find('\n') != std::string::npos) {
    *error = name + " does not hold a job secret (one line, e.g. made by plexus-run --make-token)";
    return false;
  }
  if ((st.st_mode & 077) != 0) {
    std::fprintf(stderr, "plexus-run: warning: %s may be read by other users (chmod 600 it)\n",
                 name.c_str());
  }
  *token = text;
  return true;
}

// Whether address (numeric, IPv4 or IPv6) is this host only: 127.0.0.0/8,
// ::1, or 127.x mapped into IPv6.
bool IsLoopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

// The loopback address that addr is or resolves to ("localhost", and a host
// name that /etc/hosts maps to 127.0.1.1, as Debian and Ubuntu do), or "".
std::string LoopbackAddressOf(const std::string& addr) {
  std::string lower = addr;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  std::string found;
  if (::getaddrinfo(addr.c_str(), nullptr, &hints, &list) == 0) {
    for (addrinfo* ai = list; ai != nullptr && found.empty(); ai = ai->ai_next) {
      if (!IsLoopback(ai->ai_addr)) continue;
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw =
          ai->ai_family == AF_INET
              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr)
              : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_addr);
      found = ::inet_ntop(ai->ai_family, raw, text, sizeof(text)) != nullptr ? text : addr;
    }
    ::freeaddrinfo(list);
  }
  if (found.empty() && (lower == "localhost" || lower.ends_with(".localhost"))) found = addr;
  return found;
}

// With --nnodes > 1 the other nodes' launchers and ranks connect to
// --master-addr, and every rank to the address its host's ranks listen on
// (the local address that routes to the master; PLEXUS_SOCKET_IFNAME or
// PLEXUS_TCP_ADDR override it). A loopback address in either place is this
// host only: the job would wait PLEXUS_TIMEOUT for nodes that cannot connect
// and then fail far from the cause, so it is refused here. Returns "" or the
// error.
std::string CheckReachableByOtherNodes(const Options& opts) {
  const std::string nodes = "--nnodes " + std::to_string(opts.nnodes);
  const std::string instead =
      "give node 0's address on the network the nodes share (e.g. one that `hostname -I` "
      "prints there), the same on every node; to try several nodes on this one host, add "
      "--local-nodes";
  if (!opts.master_addr_given) {
    return nodes + " needs --master-addr ADDR: the default, 127.0.0.1, is a loopback address " +
           "that the other nodes cannot reach; " + instead;
  }
  const std::string loopback = LoopbackAddressOf(opts.master_addr);
  if (!loopback.empty()) {
    const std::string what =
        loopback == opts.master_addr
            ? "--master-addr " + opts.master_addr + " is"
            : "--master-addr " + opts.master_addr + " resolves to " + loopback + ", which is";
    return what + " a loopback address: the other nodes (" + nodes +
           ") cannot reach node 0's rendezvous store there; " + instead;
  }
  const char* ifname = plexus::settings::Raw(plexus::settings::Id::kSocketIfname);
  if (std::string address; ifname != nullptr && *ifname != '\0' &&
                           InterfaceAddress(ifname, &address).ok() &&
                           !LoopbackAddressOf(address).empty()) {
    return std::string("PLEXUS_SOCKET_IFNAME=") + ifname + " is a loopback interface (" + address +
           "): with " + nodes +
           " ranks on the other nodes could not connect to the ranks here; name the interface "
           "of the network the nodes share, or unset it (then the interface that routes to "
           "--master-addr is used)";
  }
  const char* tcp_addr = plexus::settings::Raw(plexus::settings::Id::kTcpAddr);
  if (tcp_addr != nullptr && *tcp_addr != '\0' && !LoopbackAddressOf(tcp_addr).empty()) {
    return std::string("PLEXUS_TCP_ADDR=") + tcp_addr + " is a loopback address: with " + nodes +
           " ranks on the other nodes could not connect to the ranks here; give this host's "
           "address on the network the nodes share, or unset it (then the address that routes "
           "to --master-addr is used)";
  }
  return "";
}

// Started by srun as one of several tasks: the node, the node count and the
// master from Slurm (slurm_step.hpp), or a usage error saying what to run.
void ApplySlurmStep(Options* opts) {
  SlurmPlacement slurm;
  const Status st = ReadSlurmPlacement(ProcessEnv(), &slurm);
  if (!st.ok()) UsageError(st.message());
  if (!slurm.in_step) {
    // In the job script of a multi-node allocation: runs here alone, as asked,
    // but say how to use the other nodes.
    const char* nodes = std::getenv("SLURM_JOB_NUM_NODES");
    if (std::getenv("SLURM_JOB_ID") && !std::getenv("SLURM_STEP_ID") &&
        !std::getenv("SLURM_STEPID") && nodes && std::atoi(nodes) > 1) {
      std::fprintf(stderr,
                   "plexus-run: note: this runs on this node only, one of the %s of Slurm job "
                   "%s; to use them all: srun --ntasks-per-node=1 plexus-run -n %d ...\n",
                   nodes, std::getenv("SLURM_JOB_ID"), opts->nproc);
    }
    return;
  }
  opts->nnodes = slurm.nnodes;
  opts->from_slurm = true;
  if (!opts->node_rank_given) opts->node_rank = slurm.node_rank;
  if (!opts->master_addr_given) {
    opts->master_addr = slurm.master_addr;
    opts->master_addr_given = true;
  }
  if (!opts->master_port_given) opts->master_port = slurm.master_port;
  std::fprintf(stderr, "plexus-run: Slurm step %s: node %d of %d, master %s:%d\n",
               slurm.step.c_str(), opts->node_rank, opts->nnodes, opts->master_addr.c_str(),
               opts->master_port);
}

Options ParseArgs(int argc, char** argv) {
  enum : int {
    kMasterAddr = 1000,
    kMasterPort,
    kNoStore,
    kNoPrefix,
    kGrace,
    kTimeout,
    kNnodes,
    kNodeRank,
    kTokenFile,
    kMakeToken,
    kLocalNodes,
    kNodeTimeout,
    kMaxRestarts,
    kLastCall,
    kElastic,
    kBindTo,
  };
  static const option kLongOptions[] = {
      {"nproc", required_argument, nullptr, 'n'},
      {"nproc-per-node", required_argument, nullptr, 'n'},
      {"nproc_per_node", required_argument, nullptr, 'n'},
      {"master-addr", required_argument, nullptr, kMasterAddr},
      {"master_addr", required_argument, nullptr, kMasterAddr},
      {"master-port", required_argument, nullptr, kMasterPort},
      {"master_port", required_argument, nullptr, kMasterPort},
      {"no-store", no_argument, nullptr, kNoStore},
      {"no-prefix", no_argument, nullptr, kNoPrefix},
      {"grace", required_argument, nullptr, kGrace},
      {"timeout", required_argument, nullptr, kTimeout},
      {"nnodes", required_argument, nullptr, kNnodes},
      {"node-rank", required_argument, nullptr, kNodeRank},
      {"node_rank", required_argument, nullptr, kNodeRank},
      {"token-file", required_argument, nullptr, kTokenFile},
      {"make-token", required_argument, nullptr, kMakeToken},
      {"local-nodes", no_argument, nullptr, kLocalNodes},
      {"node-timeout", required_argument, nullptr, kNodeTimeout},
      {"max-restarts", required_argument, nullptr, kMaxRestarts},
      {"max_restarts", required_argument, nullptr, kMaxRestarts},
      {"last-call", required_argument, nullptr, kLastCall},
      {"elastic", no_argument, nullptr, kElastic},
      {"bind-to", required_argument, nullptr, kBindTo},
      {"help", no_argument, nullptr, 'h'},
      {"version", no_argument, nullptr, 'V'},
      {nullptr, 0, nullptr, 0},
  };
  Options opts;
  opterr = 0;  // our own messages, which name the option as the user wrote it
  int long_index = -1;
  int c;
  // "+": stop at the first non-option, so prog's own options stay prog's.
  // ":": report a missing argument as ':' rather than '?'.
  while ((long_index = -1, c = getopt_long(argc, argv, "+:n:hV", kLongOptions, &long_index)) !=
         -1) {
    const std::string name =
        long_index >= 0 ? std::string("--") + kLongOptions[long_index].name : "-n";
    switch (c) {
      case 'n':
        opts.nproc = static_cast<int>(ParseInt(name.c_str(), optarg, 1, kMaxRanks));
        break;
      case kMasterAddr:
        if (*optarg == '\0') UsageError("--master-addr needs a non-empty address");
        opts.master_addr = optarg;
        opts.master_addr_given = true;
        break;
      case kMasterPort:
        opts.master_port = static_cast<int>(ParseInt(name.c_str(), optarg, 0, 65535));
        opts.master_port_given = true;
        break;
      case kNoStore:
        opts.host_store = false;
        break;
      case kNoPrefix:
        opts.prefix_output = false;
        break;
      case kBindTo:
        if (std::strcmp(optarg, "core") == 0) {
          opts.bind_to_core = true;
        } else if (std::strcmp(optarg, "none") == 0) {
          opts.bind_to_core = false;
        } else {
          UsageError(std::string("invalid value '") + optarg +
                     "' for --bind-to (expected core or none)");
        }
        break;
      case kGrace:
        opts.grace = ParseSeconds("--grace", optarg);
        break;
      case kTimeout:
        opts.timeout = ParseSeconds("--timeout", optarg);
        break;
      case kNnodes:
        if (const char* colon = std::strchr(optarg, ':')) {
          const std::string min(optarg, size_t(colon - optarg));
          opts.min_nodes = static_cast<int>(ParseInt(name.c_str(), min.c_str(), 1, kMaxNodes));
          opts.nnodes = static_cast<int>(ParseInt(name.c_str(), colon + 1, 1, kMaxNodes));
          if (opts.min_nodes > opts.nnodes) {
            UsageError("--nnodes " + std::string(optarg) + ": MIN is more than MAX");
          }
        } else {
          opts.nnodes = static_cast<int>(ParseInt(name.c_str(), optarg, 1, kMaxNodes));
        }
        opts.nnodes_given = true;
        break;
      case kElastic:
        opts.elastic = true;
        break;
      case kLastCall:
        opts.last_call = ParseSeconds("--last-call", optarg);
        break;
      case kNodeRank:
        opts.node_rank = static_cast<int>(ParseInt(name.c_str(), optarg, 0, kMaxNodes - 1));
        opts.node_rank_given = true;
        break;
      case kTokenFile:
        if (*optarg == '\0') UsageError("--token-file needs a file name");
        opts.token_file = optarg;
        break;
      case kMakeToken:
        std::exit(MakeTokenFile(optarg));
      case kLocalNodes:
        opts.local_nodes = true;
        break;
      case kNodeTimeout:
        opts.node_timeout = ParseSeconds("--node-timeout", optarg);
        if (opts.node_timeout.count() == 0) {
          UsageError("--node-timeout must be more than 0 seconds");
        }
        break;
      case kMaxRestarts:
        opts.max_restarts = static_cast<int>(ParseInt(name.c_str(), optarg, 0, 1000));
        break;
      case 'h':
        PrintHelp();
        std::exit(kExitOk);
      case 'V':
        std::printf("plexus-run %s\n", PLEXUS_VERSION);
        std::exit(kExitOk);
      case ':':
        UsageError(std::string("option '") + argv[optind - 1] + "' needs an argument");
      default:  // '?'
        if (optopt != 0 && optopt < 256) {
          UsageError(std::string("unknown option '-") + static_cast<char>(optopt) + "'");
        }
        UsageError(std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (opts.nproc == 0) UsageError("missing -n N (the number of ranks)");
  if (!opts.nnodes_given) ApplySlurmStep(&opts);
  if (opts.min_nodes == 0) opts.min_nodes = opts.nnodes;
  if (opts.elastic && opts.nnodes > 1) {
    UsageError(
        "--elastic works on one host so far (across hosts: --nnodes MIN:MAX with "
        "--max-restarts restarts the job on the nodes left)");
  }
  if (opts.elastic && !opts.host_store) {
    UsageError(
        "--elastic needs plexus-run to host the store (not --no-store): the ranks "
        "learn from it who is left, and a store in rank 0 would leave with rank 0");
  }
  if (opts.node_rank >= opts.nnodes) {
    UsageError("--node-rank " + std::to_string(opts.node_rank) + " is not below --nnodes " +
               std::to_string(opts.nnodes));
  }
  if (opts.nnodes > 1 && opts.master_port == 0) {
    UsageError("--nnodes " + std::to_string(opts.nnodes) +
               " needs --master-port PORT: the port node 0 serves the store on, the same on "
               "every node");
  }
  if (opts.nnodes > 1 && !opts.host_store) {
    UsageError("--no-store works on one host only (with --nnodes, node 0 hosts the store)");
  }
  if (static_cast<long long>(opts.nnodes) * opts.nproc > INT32_MAX) {
    UsageError("--nnodes x -n is too many ranks");
  }
  if (optind >= argc) UsageError("missing the program to run");
  opts.argv.assign(argv + optind, argv + argc);
  return opts;
}

// Makes sure descriptors 0, 1 and 2 are open (on /dev/null if need be), so a
// pipe the launcher creates can never become a rank's stdout by accident.
void EnsureStandardFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (opened >= 0 && opened != fd) {
        ::dup2(opened, fd);
        ::close(opened);
      }
    }
  }
}

// --no-store: binds addr:0, reads the port the OS chose and closes the socket.
// Racy by nature (someone else may take the port before rank 0 binds it);
// that is the price of not hosting the store.
bool PickFreePort(const std::string& addr, uint16_t* port, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* list = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &list);
  if (rc != 0) {
    *error = "cannot resolve '" + addr + "': " + ::gai_strerror(rc);
    return false;
  }
  *error = "no usable address for '" + addr + "'";
  bool found = false;
  for (addrinfo* ai = list; ai != nullptr && !found; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      *error = "cannot bind '" + addr + "': " + std::strerror(errno);
    } else if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
      *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      found = true;
    }
    ::close(fd);
  }
  ::freeaddrinfo(list);
  return found;
}

// How long launchers wait for each other to join: PLEXUS_TIMEOUT seconds
// (default 300), like every other wait of the job.
std::chrono::milliseconds JoinTimeout() {
  double seconds = 300;
  std::string why;  // a bad value is the ranks' error to report; wait the default
  if (!plexus::settings::ReadNumber(plexus::settings::Id::kTimeout, &seconds, &why)) seconds = 300;
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000));
}

// How a start of the ranks failed: what kind of failure, job-wide (unset
// where unknown: node 0 gone, or a join that failed), and the line.
struct StartFailure {
  std::optional<FailureKind> kind;
  std::string line;
  int start = 0;         // the start it was (a late node joins node 0's)
  bool sat_out = false;  // this node was not in it (it came late): join the next
};

// One start of the ranks (plexus-run starts them again under
// --max-restarts): hosts a store of its own (node 0), joins the other nodes,
// runs the ranks to their end. Returns plexus-run's exit code; *failure
// says what failed here.
int RunStart(const Options& opts, const JobInfo& given_job, const std::string& public_credential,
             StartFailure* failure) {
  JobInfo job = given_job;
  const bool multi = opts.nnodes > 1;
  // The store is up before any rank starts, so ranks only ever connect; its
  // port is free by construction, no bind-close-rebind race.
  std::unique_ptr<TcpStoreServer> server;
  if (opts.host_store && opts.node_rank == 0) {
    store::TcpStoreServerOptions server_options;
    server_options.public_credential = public_credential;
    Status status = store::StartTcpStoreServer(
        opts.master_addr, static_cast<uint16_t>(opts.master_port), server_options, &server);
    if (!status.ok() || server == nullptr) {
      std::fprintf(stderr, "plexus-run: cannot host the rendezvous store on %s:%d: %s\n",
                   opts.master_addr.c_str(), opts.master_port,
                   status.ok() ? "no server returned" : status.ToString().c_str());
      return kExitRankFailed;
    }
    job.master_port = server->port();
  } else if (opts.master_port != 0) {
    job.master_port = static_cast<uint16_t>(opts.master_port);  // also: node K > 0
  } else if (std::string error; !PickFreePort(opts.master_addr, &job.master_port, &error)) {
    std::fprintf(stderr, "plexus-run: cannot pick a free port: %s\n", error.c_str());
    return kExitRankFailed;
  }

  // Across hosts: every launcher joins the others before any rank starts.
  std::unique_ptr<NodeGroup> group;
  if (multi) {
    NodeGroupConfig gc;
    gc.nnodes = opts.nnodes;
    gc.node_rank = opts.node_rank;
    gc.nproc = opts.nproc;
    gc.master_addr = opts.master_addr;
    gc.master_port = job.master_port;
    gc.join_timeout = JoinTimeout();
    gc.start = job.restart_count;
    gc.min_nodes = opts.min_nodes;
    gc.last_call = opts.last_call;
    // A node is lost after as much silence as the ranks' collectives
    // tolerate (PLEXUS_TIMEOUT) and 5 s more, unless --node-timeout says
    // otherwise. Not less: the beats cross the same network as the ranks'
    // traffic, and a launcher that gave up on a node sooner than the ranks
    // give up on each other would end a job that TCP carries through a short
    // outage (tests/net 'blip'). A little more: ranks that time out in a
    // collective say which rank and which collective they waited for, a
    // sharper report than "node 1 stopped responding", and need a moment
    // to write it before their launcher stops them. Once the job is failing,
    // NodeGroup takes at most 5 s (kLostOnceFailing), so that a launcher that
    // was killed does not hold up the others' exit.
    gc.lost_after = opts.node_timeout.count() > 0 ? opts.node_timeout
                                                  : gc.join_timeout + std::chrono::seconds(5);
    std::string error;
    if (!NodeGroup::Join(gc, &group, &error)) {
      std::fprintf(stderr, "plexus-run: node %d: %s\n", opts.node_rank, error.c_str());
      if (server) server->Stop();
      return kExitRankFailed;
    }
    failure->start = group->start();
    const std::vector<int> members = group->members();
    std::string list;
    for (int m : members) list += (list.empty() ? "" : ", ") + std::to_string(m);
    if (!group->is_member()) {
      // Too late for this start (--nnodes MIN:MAX): wait for the next.
      std::fprintf(stderr,
                   "plexus-run: node %d: the job runs on nodes %s (start %d) without this node; "
                   "it joins at the next restart\n",
                   opts.node_rank, list.c_str(), group->start());
      if (group->WaitOutStart()) {
        std::fprintf(stderr, "plexus-run: node %d: the job finished without this node\n",
                     opts.node_rank);
        return kExitOk;
      }
      failure->sat_out = true;
      return kExitRankFailed;
    }
    // The ranks of this start: the members' nodes in order, nproc each.
    job.restart_count = group->start();
    job.world_size = int(members.size()) * opts.nproc;
    job.node_rank =
        int(std::find(members.begin(), members.end(), opts.node_rank) - members.begin());
    if (int(members.size()) < opts.nnodes) {
      std::fprintf(stderr, "plexus-run: node %d: start %d on %zu of %d nodes (%s): %d ranks\n",
                   opts.node_rank, group->start(), members.size(), opts.nnodes, list.c_str(),
                   job.world_size);
    }
  }

  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) base_env.emplace_back(*e);
  LaunchConfig config;
  config.argv = opts.argv;
  config.grace = opts.grace;
  config.timeout = opts.timeout;
  config.prefix_output = opts.prefix_output;
  if (opts.bind_to_core) config.rank_cpu = RankCpus(opts.nproc);
  if (const char* dir = plexus::settings::Raw(plexus::settings::Id::kTraceDir); dir && *dir) config.trace_dir = dir;
  // The job's name in the ranks' flight-recorder dumps, which plexus-trace
  // checks are of one job: fresh for each start (across hosts node 0's).
  if (!plexus::settings::Raw(plexus::settings::Id::kJobId)) {
    std::string id;
    if (group && !group->job_id().empty()) {
      id = group->job_id();
    } else if (!group) {
      std::string error;  // (without randomness the dumps go without a job id)
      (void)store::RandomHex(8, &id, &error);
    }
    if (!id.empty()) base_env.push_back("PLEXUS_JOB_ID=" + id);
  }
  config.rank_env.reserve(opts.nproc);
  for (int rank = 0; rank < opts.nproc; ++rank) {
    config.rank_env.push_back(BuildRankEnvironment(base_env, job, rank));
    if (opts.elastic) {
      config.rank_env.back().push_back("PLEXUS_ELASTIC=1");
      // The key the rank claims its store identity with: a rank started
      // again gets it back (no other process may claim it meanwhile).
      std::string key, error;
      if (!store::RandomHex(32, &key, &error)) {
        std::fprintf(stderr, "plexus-run: --elastic: %s\n", error.c_str());
        if (server) server->Stop();
        return kExitRankFailed;
      }
      config.rank_env.back().push_back("PLEXUS_RANK_KEY=" + key);
    }
  }
  // --elastic: who is left, said under node 0's own keys (no other process
  // may write them), where Communicator::shrink() reads it.
  if (opts.elastic && server) {
    store::TcpStoreClientOptions options;
    options.identity = "node/0";
    options.label = "plexus-run --elastic, pid " + std::to_string(long(getpid()));
    std::unique_ptr<RendezvousStore> client;
    Status st = store::ConnectTcpStoreWithOptions(opts.master_addr, job.master_port,
                                                  std::chrono::seconds(5), options, &client);
    if (!st.ok()) {
      std::fprintf(stderr, "plexus-run: --elastic: cannot connect to its own store: %s\n",
                   st.ToString().c_str());
      server->Stop();
      return kExitRankFailed;
    }
    std::shared_ptr<RendezvousStore> members_client = std::move(client);
    config.elastic = true;
    config.rejoins = opts.max_restarts;
    config.publish_members = [members_client](uint64_t generation, const std::vector<int>& left) {
      std::string value = std::to_string(generation);
      for (int r : left) value += " " + std::to_string(r);
      // Each generation under a key of its own, never changed (grow() reads
      // the one the ranks agreed on), and the latest again.
      Status st =
          members_client->Set(store::NodeKey(0, "launch/members/" + std::to_string(generation)),
                              Bytes(value.begin(), value.end()), std::chrono::seconds(5));
      if (st.ok()) {
        st = members_client->Set(store::NodeKey(0, "launch/members"),
                                 Bytes(value.begin(), value.end()), std::chrono::seconds(5));
      }
      if (!st.ok()) {
        std::fprintf(stderr, "plexus-run: --elastic: cannot tell the ranks who is left: %s\n",
                     st.ToString().c_str());
      }
    };
  }

  if (server || group) {
    // Ranks whose collective timed out leave a line and a mark in the store
    // (core/src/stall_report.hpp); from them the report blames the rank that
    // stopped making progress, not the first one to exit, or says that the
    // ranks posted different collectives.
    const std::string addr = opts.master_addr;
    const uint16_t port = job.master_port;
    const int nproc = job.world_size;  // every rank of the job, on every node
    auto connect = [addr, port] {
      std::unique_ptr<RendezvousStore> client;
      if (!ConnectTcpStore(addr, port, std::chrono::seconds(2), &client).ok()) client.reset();
      return client;
    };
    config.read_stall_lines = [connect, nproc] {
      auto client = connect();
      return client ? detail::StallLines(*client, uint32_t(nproc)) : std::vector<std::string>();
    };
    // Across nodes the ranks named come with their node and host.
    detail::RankLister list_ranks;
    if (group) {
      list_ranks = [per_node = opts.nproc, hosts = group->hosts()](const std::vector<uint32_t>& r) {
        return NodeRankList(std::vector<int>(r.begin(), r.end()), per_node, hosts);
      };
    }
    // --elastic: the generation each rank has reached (Communicator::shrink
    // and grow mark it); 0 where it marked none.
    config.read_generations = [connect, nproc] {
      std::vector<uint64_t> reached(size_t(nproc), 0);
      auto client = connect();
      for (int r = 0; client && r < nproc; ++r) {
        Bytes value;
        if (client
                ->Get(store::RankKey(uint32_t(r), "elastic/generation"), &value,
                      std::chrono::milliseconds(0))
                .ok()) {
          reached[size_t(r)] =
              std::strtoull(std::string(value.begin(), value.end()).c_str(), nullptr, 10);
        }
      }
      return reached;
    };
    config.read_stall_mismatch = [connect, nproc, list_ranks] {
      auto client = connect();
      return client ? detail::StallMismatch(*client, uint32_t(nproc), list_ranks) : std::string();
    };
  }

  if (group) {
    NodeGroup* g = group.get();
    // (Nodes are numbered as in this start: with MIN:MAX and a node missing,
    // "node 1" in the ranks' messages is the second node of the start.)
    config.first_rank = job.node_rank * opts.nproc;
    config.node_rank = job.node_rank;
    for (int m : g->members()) config.node_hosts.push_back(g->hosts()[m]);
    config.remote_failure_fd = g->wake_fd();
    config.remote_failure = [g] { return g->Failure(); };
    config.publish_failure = [g](FailureKind kind, const std::string& line) {
      g->ReportLocalFailure(kind, line);
    };
    config.settle_failure = [g] { return g->SettleFailure(); };
    g->Start();
  }

  if (!group) {
    // (across nodes NodeGroup takes the failure to the other nodes)
    config.publish_failure = [failure](FailureKind kind, const std::string& line) {
      failure->kind = kind;
      failure->line = line;
    };
  }
  std::fflush(stdout);  // nothing of ours may be buffered across the ranks' output
  int code = RunJob(config);
  if (group) {
    if (code == kExitOk) {
      // The ranks here are done; the job is not until every node's are.
      std::string failure = group->FinishOk();
      if (!failure.empty()) {
        std::fprintf(stderr, "plexus-run: %s; the %d rank%s on node %d had finished\n",
                     failure.c_str(), opts.nproc, opts.nproc == 1 ? "" : "s", opts.node_rank);
        code = kExitRankFailed;
      }
    }
    if (code != kExitOk) {
      failure->kind = group->VerdictKind();
      failure->line = group->Failure();
    }
    // The ranks' flight-recorder dumps, from every node into node 0's
    // PLEXUS_TRACE_DIR, when the job failed.
    if (code != kExitOk && !config.trace_dir.empty()) {
      const std::string collected = group->ShareTraces(config.trace_dir);
      if (!collected.empty()) std::fprintf(stderr, "plexus-run: node 0: %s\n", collected.c_str());
    }
    group->Leave(code == kExitOk);
  }
  if (server) server->Stop();
  return code;
}

// The ranks' starts, and after a failure, up to --max-restarts more: the
// history of what failed each time.
int RunStarts(const Options& opts, JobInfo job, const std::string& public_credential) {
  std::vector<std::string> history;
  for (int restart = 0;; ++restart) {
    job.restart_count = restart;
    StartFailure failure;
    failure.start = restart;
    const int code = RunStart(opts, job, public_credential, &failure);
    restart = failure.start;  // a late node counts from the start it found
    if (failure.sat_out) {
      if (restart >= opts.max_restarts) {
        std::fprintf(stderr,
                     "plexus-run: node %d: no restart is left for this node to join "
                     "(--max-restarts %d)\n",
                     opts.node_rank, opts.max_restarts);
        return code;
      }
      continue;
    }
    if (code == kExitOk) {
      if (restart > 0) {
        std::fprintf(stderr, "plexus-run: the job finished after %d restart%s\n", restart,
                     restart == 1 ? "" : "s");
      }
      return code;
    }
    // A signal to plexus-run, --timeout or prog not executable: not the
    // ranks' failure, and starting them again would not help. Nor a node lost
    // where the job needs every node (--nnodes M; MIN:MAX goes on without
    // it), or a failure of unknown kind.
    if (opts.max_restarts == 0 || opts.elastic || !failure.kind ||
        *failure.kind == FailureKind::kLauncher ||
        (*failure.kind == FailureKind::kNodeLost && opts.min_nodes == opts.nnodes)) {
      return code;
    }
    history.push_back("start " + std::to_string(restart) + ": " + failure.line);
    if (restart == opts.max_restarts) {
      std::string all;
      for (const std::string& h : history) all += "\n  " + h;
      std::fprintf(stderr,
                   "plexus-run: the ranks failed %d time%s, the last after %d restart%s "
                   "(--max-restarts %d); what failed:%s\n",
                   restart + 1, restart == 0 ? "" : "s", restart, restart == 1 ? "" : "s",
                   opts.max_restarts, all.c_str());
      return code;
    }
    if (opts.nnodes > 1) {
      std::fprintf(
          stderr, "plexus-run: node %d: starting its %d ranks again (restart %d of %d) after: %s\n",
          opts.node_rank, opts.nproc, restart + 1, opts.max_restarts, failure.line.c_str());
    } else {
      std::fprintf(stderr, "plexus-run: starting all %d ranks again (restart %d of %d) after: %s\n",
                   opts.nproc, restart + 1, opts.max_restarts, failure.line.c_str());
    }
  }
}

int Main(int argc, char** argv) {
  EnsureStandardFds();
  Options opts = ParseArgs(argc, argv);

  JobInfo job;
  job.world_size = opts.nnodes * opts.nproc;
  job.local_world_size = opts.nproc;
  job.node_rank = opts.node_rank;
  job.master_addr = opts.master_addr;
  job.store_hosted = opts.host_store;
  // A token given by the caller (an outer launcher, a multi-host script) is
  // the job's secret; otherwise every job gets a fresh one.
  const char* given_token = plexus::settings::Raw(plexus::settings::Id::kToken);
  const char* token_file_var = plexus::settings::Raw(plexus::settings::Id::kTokenFile);
  const bool multi = opts.nnodes > 1;
  std::string public_credential;  // node 0 under srun with MUNGE: what its store hands out
  if (!opts.token_file.empty() || (multi && (given_token == nullptr || *given_token == '\0') &&
                                   token_file_var != nullptr && *token_file_var != '\0')) {
    // Across hosts every node needs the same secret, which is why a file
    // (or PLEXUS_TOKEN) is required there; on one host a fresh one would do,
    // but --token-file is honoured all the same.
    const bool option = !opts.token_file.empty();
    std::string error;
    if (!ReadTokenFile(option ? opts.token_file : token_file_var,
                       option ? "--token-file" : "PLEXUS_TOKEN_FILE", &job.token, &error)) {
      std::fprintf(stderr, "plexus-run: %s\n", error.c_str());
      return kExitUsage;
    }
    ::setenv("PLEXUS_TOKEN", job.token.c_str(), 1);  // for our store server and client
  } else if (given_token != nullptr && *given_token != '\0') {
    job.token = given_token;
  } else if (multi && opts.from_slurm && store::MungeWanted(nullptr)) {
    // Under srun, as for ranks srun starts (core/src/job_secret.hpp, case 4):
    // node 0 makes the secret and its store hands it out in a MUNGE
    // credential only this user can open; the other nodes fetch it.
    Status st = Status::Ok();
    const std::string binding = store::SlurmStepBinding("plexus-run store " + opts.master_addr +
                                                        ":" + std::to_string(opts.master_port));
    if (opts.node_rank == 0) {
      std::string error;
      if (!store::MakeJobToken(&job.token, &error)) st = Status::System(error);
      if (st.ok()) st = store::MungeEncodeSecret(binding, job.token, &public_credential);
    } else {
      std::string credential;
      st = store::FetchPublicCredential(opts.master_addr, uint16_t(opts.master_port), JoinTimeout(),
                                        &credential);
      if (st.ok()) st = store::MungeDecodeSecret(credential, binding, &job.token);
    }
    if (!st.ok()) {
      std::fprintf(stderr, "plexus-run: node %d: the job secret in a MUNGE credential: %s\n",
                   opts.node_rank, st.message().c_str());
      return kExitRankFailed;
    }
    ::setenv("PLEXUS_TOKEN", job.token.c_str(), 1);
  } else if (multi) {
    std::fprintf(stderr,
                 "plexus-run: --nnodes %d needs a job secret that every node shares, and it "
                 "never goes on a command line. Make one and copy it to every node, e.g.\n"
                 "  plexus-run --make-token ~/.plexus-token\n"
                 "  scp -p ~/.plexus-token otherhost:   # (or keep it on a shared file system)\n"
                 "then give --token-file ~/.plexus-token to plexus-run on every node (or set "
                 "PLEXUS_TOKEN_FILE).\n",
                 opts.nnodes);
    return kExitUsage;
  } else if (std::string error; !store::MakeJobToken(&job.token, &error)) {
    std::fprintf(stderr, "plexus-run: cannot make a job token: %s\n", error.c_str());
    return kExitRankFailed;
  } else {
    // Also ours: the store server below takes its secret from this process's
    // environment, like every other Plexus component. No thread exists yet,
    // so setenv() is safe here.
    ::setenv("PLEXUS_TOKEN", job.token.c_str(), 1);
  }

  // After the token, whose absence is the first thing to fix on every node.
  if (multi && !opts.local_nodes) {
    std::string error = CheckReachableByOtherNodes(opts);
    if (!error.empty()) UsageError(error);
  }

  return RunStarts(opts, std::move(job), public_credential);
}

}  // namespace
}  // namespace plexus::run

int main(int argc, char** argv) {
  return plexus::run::Main(argc, argv);
}
