// The command line of plexus-conformance.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace plexus::conformance {

struct Options {
  std::string backend;              // --backend NAME|PATH (required)
  uint32_t nproc = 2;               // -n: ranks to start when no launcher started us
  bool nproc_given = false;         // -n was on the command line
  int64_t timeout_ms = 30000;       // --timeout: communicator timeout_ms; bounds every wait
  int64_t fault_timeout_ms = 1500;  // --fault-timeout: timeout_ms of the failure checks
  uint64_t max_count = 1u << 20;    // --max-count: the "large" element count
  std::string only;                 // --only: run checks whose name contains it (A|B: either)
  int max_restarts = 10;            // --max-restarts: starts of the ranks after a crash or hang
  bool verbose = false;             // --verbose: forward the backend's log lines
  std::vector<std::string> argv;    // the original command line, for re-launching
};

// Parses argv into *out. Returns -1 to go on, or the exit status to exit
// with at once: 0 after --help, 2 after printing a usage error to stderr.
int ParseOptions(int argc, char** argv, Options* out);

// Whether --only selects the check named name: no --only, or the name
// contains one of its '|'-separated patterns.
bool Selects(const Options& options, const std::string& name);

}  // namespace plexus::conformance
