// The ranks' starts: one start is a store, across hosts the node group, the
// ranks' environments and the job run to its end (launcher.hpp); after a
// failure, up to --max-restarts more.
#pragma once

#include <string>

#include "options.hpp"
#include "rank_environment.hpp"

namespace plexus::run {

// Starts the ranks, and after a failure starts them again, up to
// --max-restarts times, each start with a fresh store; a node that came too
// late for a start (--nnodes MIN:MAX) joins the next. job holds the job's
// secret (job_secret.hpp); public_credential is what node 0's store hands out
// ("" for none). Returns plexus-run's exit code.
int RunStarts(const Options& opts, JobInfo job, const std::string& public_credential);

}  // namespace plexus::run
