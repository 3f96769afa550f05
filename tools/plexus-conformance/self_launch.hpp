// Starting the suite's ranks when nobody else did.
//
// A vendor types `plexus-conformance --backend ./libplexus-foo.so`; the suite
// needs several ranks, so without a launcher's variables in the environment
// it runs itself again under `plexus-run -n N`, as a child it outlives, so
// that it can start the ranks again after a crash (restarts.hpp), and exits
// with plexus-run's status (which is non-zero when a rank, rank 0 with a
// failed check included, exited non-zero), or 1 when it printed the result
// itself.
#pragma once

#include "options.hpp"

namespace plexus::conformance {

// True when no launcher variables are present: this process is not a rank.
// Malformed launcher variables are reported on stderr and exit with 2.
bool NeedsLauncher();

// Runs `plexus-run -n N --no-prefix <this program> <args>` (again after a
// crash) and returns the exit status to use.
int RelaunchUnderPlexusRun(const Options& options);

}  // namespace plexus::conformance
