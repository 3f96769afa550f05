// Starting the ranks again after a crash, so that one bug in a backend
// still gives the vendor the whole report.
//
// When the suite starts its own ranks (no launcher in the environment, see
// self_launch.hpp), the first process does not become plexus-run: it runs
// `plexus-run -n N --no-prefix <this program> <args>` as a child and waits.
// Each rank keeps its record (rank_record.hpp: the check it is in, the
// calls into the backend in flight, how it ended) and rank 0 its journal of
// verdicts (journal.hpp) in a private temporary directory. When plexus-run
// ends before rank 0 has printed its RESULT line, this process reads the
// records. If a rank crashed, hung, or ended without a word during check K,
// it prints K's FAIL line (with the call in flight) and runs plexus-run
// again with PLEXUS_CONFORMANCE_RESUME_AFTER=K: the ranks build the same
// check list, make their shared communicator again, and go on with the
// check after K, rank 0 counting the earlier verdicts from the journal. It
// stops after --max-restarts restarts, or when the check that crashed is one
// the rest needs (the shared communicator, loading the plugin), and then
// prints the summary and RESULT line itself.
//
// Why here and not in the ranks: a crashed rank is gone, and plexus-run (or
// any launcher) then stops the others; only the process that started the
// launcher outlives them. Under a launcher the suite did not start (mpirun,
// srun, plexus-run typed by hand) nobody can start the ranks again, so a
// crash ends the run there, and the report says so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "options.hpp"
#include "plexus/settings/table.hpp"

namespace plexus::conformance {

// Set by the process that starts the ranks, for the ranks.
constexpr const char* kStateDirVariable = settings::Name(settings::Id::kConformanceState);
constexpr const char* kResumeVariable = settings::Name(settings::Id::kConformanceResumeAfter);

// Runs launcher_argv (plexus-run and its arguments) until the ranks finish
// or cannot go on, starting them again after a crash; SIGINT, SIGTERM and
// SIGHUP sent to this process go to plexus-run and end it for good. Returns
// the exit status: plexus-run's, or 1 when this process printed the result.
int RunWithRestarts(const Options& options, const std::vector<std::string>& launcher_argv);

// In a rank: the directory of records and journal, "" when the ranks were
// not started by RunWithRestarts (they cannot be started again).
std::string StateDir();
// In a rank: the last check index an earlier run covered, or kNoCheck.
int64_t ResumeAfter();

}  // namespace plexus::conformance
