// Under srun, a rank that knows the job has failed asks Slurm to end the step.
//
// srun waits for every task of a step. When a rank freezes (SIGSTOP, a hung
// driver), the others time out and exit, and the step would still hold its
// nodes until someone runs scancel; srun's --kill-on-bad-exit (-K) ends it,
// but only when the user remembered it. So a rank whose communicator failed
// because of a peer (PLEXUS_ERR_REMOTE, PLEXUS_ERR_TIMEOUT), or that could
// not join the job, arranges (glibc's on_exit, which is told the exit status)
// that when it exits non-zero a small detached process gives the step
// PLEXUS_SLURM_END_GRACE seconds (default 2) to end by itself, then runs
// `scancel --quiet JOB.STEP`. A rank that recovers and exits 0 ends nothing,
// and nothing runs beside the rank meanwhile. Nothing happens outside an srun
// step of more than one task, or with PLEXUS_SLURM_END_STEP=0.
#pragma once

#include <string>

namespace plexus {

// Arms the exit handler once per process (later calls do nothing); why is
// logged at DEBUG. Never throws; failing to arm it is logged and ignored.
void EndSlurmStepAfterExit(const std::string& why);

}  // namespace plexus
