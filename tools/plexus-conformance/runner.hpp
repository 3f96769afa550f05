// One rank's run of the suite: load the plugin, agree on the check list,
// run each check, exchange the outcomes through the store, and (rank 0)
// print the report.
#pragma once

#include "options.hpp"

namespace plexus::conformance {

// Returns the process's exit status: on rank 0, 0 when no check failed and
// 1 otherwise; 0 on the other ranks unless the run itself broke down; 2
// when the suite cannot start (no rendezvous store).
int RunRank(const Options& options);

}  // namespace plexus::conformance
