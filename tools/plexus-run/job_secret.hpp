// The job's secret (PLEXUS_TOKEN), which the store and every rank prove they
// hold: a fresh one, the caller's, one from a file every node shares, or
// under srun one node 0 hands out in a MUNGE credential.
#pragma once

#include <string>

#include "options.hpp"
#include "rank_environment.hpp"

namespace plexus::run {

// --make-token FILE: a fresh secret in a new file only its owner may read.
// Returns plexus-run's exit code (kExitOk, or kExitRankFailed after saying why).
int MakeTokenFile(const char* path);

// Sets job->token, and PLEXUS_TOKEN in this process's environment for the
// store server and clients of plexus-run (call before any thread starts).
// Under srun with MUNGE, node 0 also gets *public_credential, what its store
// hands out. Returns kExitOk, or the exit code after saying what is wrong.
int SetJobSecret(const Options& opts, JobInfo* job, std::string* public_credential);

}  // namespace plexus::run
