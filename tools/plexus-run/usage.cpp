// plexus-run's --help, and the message of a bad command line.
#include "usage.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "launcher.hpp"
#include "options.hpp"
#include "rank_environment.hpp"

namespace plexus::run {
namespace {

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

// The usage lines, what plexus-run does, and its options.
std::string OptionsHelp() {
  return "Usage: plexus-run -n N [options] prog [args...]\n"
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
         "  -V, --version           print the version and exit\n";
}

// Options ending at prog, signals, stdin, several hosts, Slurm; then the
// heading of the ranks' variables, which PrintHelp lists below it.
constexpr const char kNotesHelp[] =
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

// The exit codes (launcher.hpp), after the variables.
constexpr const char kExitStatusHelp[] =
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

}  // namespace

void PrintHelp() {
  std::string text = OptionsHelp();
  text += kNotesHelp;
  for (const VariableDoc& v : RankVariables()) {
    std::string name = v.name;
    name.resize(std::max<size_t>(name.size() + 1, kHelpColumn - 2), ' ');
    text += "  " + name + Wrap(v.meaning, kHelpColumn) + "\n";
  }
  text += kExitStatusHelp;
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

}  // namespace plexus::run
