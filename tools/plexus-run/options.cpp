// plexus-run's command line: getopt_long over the table of options, each
// option into Options, then the checks of options against each other.
#include "options.hpp"

#include <getopt.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "job_secret.hpp"
#include "launcher.hpp"
#include "plexus/launch_env.hpp"
#include "slurm_step.hpp"
#include "usage.hpp"

#ifndef PLEXUS_VERSION
#define PLEXUS_VERSION "unknown"  // meson passes the project version
#endif

namespace plexus::run {
namespace {

// text as a whole number in min..max, or a usage error naming option.
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

// text as seconds (fractions allowed), or a usage error naming option.
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

// getopt_long's codes for the options that have no one-letter form.
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

// Every option under each of its names (torchrun's, with '_', too).
const option kLongOptions[] = {
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

// --bind-to core|none.
void ParseBindTo(const char* arg, Options* opts) {
  if (std::strcmp(arg, "core") == 0) {
    opts->bind_to_core = true;
  } else if (std::strcmp(arg, "none") == 0) {
    opts->bind_to_core = false;
  } else {
    UsageError(std::string("invalid value '") + arg + "' for --bind-to (expected core or none)");
  }
}

// --nnodes M, or --nnodes MIN:MAX (start on MIN of MAX nodes).
void ParseNnodes(const std::string& name, const char* arg, Options* opts) {
  if (const char* colon = std::strchr(arg, ':')) {
    const std::string min(arg, size_t(colon - arg));
    opts->min_nodes = static_cast<int>(ParseInt(name.c_str(), min.c_str(), 1, kMaxNodes));
    opts->nnodes = static_cast<int>(ParseInt(name.c_str(), colon + 1, 1, kMaxNodes));
    if (opts->min_nodes > opts->nnodes) {
      UsageError("--nnodes " + std::string(arg) + ": MIN is more than MAX");
    }
  } else {
    opts->nnodes = static_cast<int>(ParseInt(name.c_str(), arg, 1, kMaxNodes));
  }
  opts->nnodes_given = true;
}

// The options that end plexus-run at once: --help, --version, and what
// getopt_long refused (an unknown option, or one without its argument).
[[noreturn]] void ExitOption(int c, char** argv) {
  switch (c) {
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

// Takes option c, as getopt_long returned it, with its argument arg, into
// *opts; name is the option as the user wrote it ("-n", "--nproc_per_node").
void ApplyOption(int c, const std::string& name, const char* arg, char** argv, Options* opts) {
  switch (c) {
    case 'n':
      opts->nproc = static_cast<int>(ParseInt(name.c_str(), arg, 1, kMaxRanks));
      break;
    case kMasterAddr:
      if (*arg == '\0') UsageError("--master-addr needs a non-empty address");
      opts->master_addr = arg;
      opts->master_addr_given = true;
      break;
    case kMasterPort:
      opts->master_port = static_cast<int>(ParseInt(name.c_str(), arg, 0, 65535));
      opts->master_port_given = true;
      break;
    case kNoStore:
      opts->host_store = false;
      break;
    case kNoPrefix:
      opts->prefix_output = false;
      break;
    case kBindTo:
      ParseBindTo(arg, opts);
      break;
    case kGrace:
      opts->grace = ParseSeconds("--grace", arg);
      break;
    case kTimeout:
      opts->timeout = ParseSeconds("--timeout", arg);
      break;
    case kNnodes:
      ParseNnodes(name, arg, opts);
      break;
    case kElastic:
      opts->elastic = true;
      break;
    case kLastCall:
      opts->last_call = ParseSeconds("--last-call", arg);
      break;
    case kNodeRank:
      opts->node_rank = static_cast<int>(ParseInt(name.c_str(), arg, 0, kMaxNodes - 1));
      opts->node_rank_given = true;
      break;
    case kTokenFile:
      if (*arg == '\0') UsageError("--token-file needs a file name");
      opts->token_file = arg;
      break;
    case kMakeToken:
      std::exit(MakeTokenFile(arg));
    case kLocalNodes:
      opts->local_nodes = true;
      break;
    case kNodeTimeout:
      opts->node_timeout = ParseSeconds("--node-timeout", arg);
      if (opts->node_timeout.count() == 0) {
        UsageError("--node-timeout must be more than 0 seconds");
      }
      break;
    case kMaxRestarts:
      opts->max_restarts = static_cast<int>(ParseInt(name.c_str(), arg, 0, 1000));
      break;
    default:  // 'h', 'V', ':', '?'
      ExitOption(c, argv);
  }
}

// --elastic where it cannot work (yet).
void CheckElastic(const Options& opts) {
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
}

// The node options against each other: a node rank below --nnodes, a port
// to meet at and a store that node 0 hosts across nodes, and a job whose
// ranks an int can count.
void CheckNodes(const Options& opts) {
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
}

}  // namespace

Options ParseArgs(int argc, char** argv) {
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
    ApplyOption(c, name, optarg, argv, &opts);
  }
  if (opts.nproc == 0) UsageError("missing -n N (the number of ranks)");
  if (!opts.nnodes_given) ApplySlurmStep(&opts);
  if (opts.min_nodes == 0) opts.min_nodes = opts.nnodes;
  CheckElastic(opts);
  CheckNodes(opts);
  if (optind >= argc) UsageError("missing the program to run");
  opts.argv.assign(argv + optind, argv + argc);
  return opts;
}

}  // namespace plexus::run
