// plexus-conformance: the suite an interconnect vendor points at a backend
// plugin to learn whether it keeps the promises of plexus/backend.h.
//
//   plexus-conformance --backend ./libplexus-foo.so -n 4
//
// Why this tool calls plugin function pointers directly, unlike the host:
// the host routes every call through one wrapper (core/src/plugins/backend_calls.*)
// that refuses calls outside the capabilities before the plugin sees them,
// normalises statuses the ABI forbids (a positive wait() result becomes
// "still pending", a missing error message becomes "the backend gave no
// message"), and supplies defaults for optional slots. That is right for
// applications and exactly wrong here: it would mask the bugs this suite
// exists to find. So the suite loads the plugin with the host's loader and
// gives it the host's services -- the plugin runs in the environment it will
// meet in production -- but then observes the raw table: every status,
// *req_out, error string and timing is the plugin's own (traced_calls only
// records each call while it is in flight, for the crash and hang reports).
//
// The suite's own traffic (results, capabilities, handshakes) goes through
// the job's rendezvous store, never through the backend under test, and
// every wait is bounded, so a broken backend fails checks instead of
// hanging or corrupting the report.
//
// Files: options (command line), self_launch (plexus-run when no launcher),
// restarts (starting the ranks again after a crash), runner (the run),
// session (plugin, store, shared communicator), plugin (loading and
// communicators), traced_calls (every call into the plugin, recorded while
// in flight), rank_record (what a rank is doing, readable after it died),
// crash_report and watchdog (a crash or hang named), exchange (the store),
// report and journal (rank 0's output, and its verdicts across restarts),
// operation/requests/buffer/data (posting, bounded waits, guard zones,
// exact inputs and results), refusals (calls that must be refused), groups
// (communicators over a subset of the ranks), elf_symbols, and the checks_*
// files, one per family of checks (the checks_uneven_* ones: the uneven
// collectives of ABI 1.2, gather, scatter, allgatherv, alltoallv and
// allreduce_coalesced).
#include "options.hpp"
#include "runner.hpp"
#include "self_launch.hpp"

int main(int argc, char** argv) {
  using namespace plexus::conformance;
  Options options;
  if (const int status = ParseOptions(argc, argv, &options); status >= 0) return status;
  if (NeedsLauncher()) return RelaunchUnderPlexusRun(options);
  return RunRank(options);
}
