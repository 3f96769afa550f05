// Under srun, a rank that knows the job has failed asks Slurm to end the step.
//
// srun waits for every task of a step. When a rank freezes (SIGSTOP, a hung
// driver), the others time out and exit, and the step would still hold its
// nodes until someone runs scancel; srun's --kill-on-bad-exit (-K) ends it,
// but only when the user remembered it. So a rank whose communicator failed
// because of a peer (PLEXUS_ERR_REMOTE, PLEXUS_ERR_TIMEOUT), or that could
// not join the job, arms a watcher: a small process that waits until this
// one has exited, gives the step PLEXUS_SLURM_END_GRACE seconds (default 2)
// to end by itself, then runs `scancel --quiet JOB.STEP`. A rank that goes on
// after such an error (and does not exit) ends nothing. Nothing happens
// outside an srun step of more than one task, or with PLEXUS_SLURM_END_STEP=0.
#pragma once

#include <string>

namespace plexus {

// Arms the watcher once per process (later calls do nothing); why is logged
// at DEBUG. Never throws; failing to start the watcher is logged and ignored.
void EndSlurmStepAfterExit(const std::string& why);

}  // namespace plexus
