// A backend that crashes the process (a NULL buffer dereferenced, say)
// should still leave a readable verdict: a fatal-signal handler names the
// check that was running, the call into the backend in flight with its
// arguments (rank_record.hpp), and the signal, records it for the process
// that may start the ranks again (restarts.hpp), then lets the signal kill
// the process as usual (so plexus-run or mpirun still sees the crash).
#pragma once

#include <cstdint>
#include <string>

#include "rank_record.hpp"

namespace plexus::conformance {

// After InitRankRecord. launcher names the launch scheme the ranks were
// found by ("PLEXUS_* variables", "Open MPI", ...), for the note that a crash ends the run when the
// suite did not start them itself. Also records a call of exit() during a check (a backend's; the
// suite never calls it there).
void InstallCrashReporter(uint32_t rank, const std::string& launcher);

// Backends install fatal-signal handlers of their own (Open MPI and UCX print
// backtraces), replacing ours: after init and comm_create the runner calls
// this to put ours back in front; theirs then runs after our report.
void ReclaimFatalSignals();

// The note printed with a crash or hang when the ranks cannot be started
// again, e.g. "(the ranks came from a launcher (Open MPI), not from the suite ...)".
std::string CannotRestartNote(const std::string& launcher);

}  // namespace plexus::conformance
