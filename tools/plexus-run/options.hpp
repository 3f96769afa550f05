// plexus-run's command line: the options, as parsed and checked (the text of
// --help is in usage.hpp).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace plexus::run {

// Two pipes per rank must fit under the usual 1024-descriptor limit with room
// to spare; a bigger job on one host is almost certainly a typo.
inline constexpr int kMaxRanks = 4096;
inline constexpr int kMaxNodes = 65536;

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

// The options of argv, checked against each other, and under srun the node's
// place taken from Slurm. --help, --version and --make-token exit here (0, or
// MakeTokenFile's code), and so does a bad command line (UsageError, exit 2).
Options ParseArgs(int argc, char** argv);

}  // namespace plexus::run
