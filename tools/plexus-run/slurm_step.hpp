// plexus-run started by srun: one launcher per node, its place from Slurm.
//
// Without this, `srun -n 2 plexus-run -n 2 prog` would start two separate
// 2-rank jobs. Inside an srun step of more than one task, plexus-run either
// takes --nnodes, --node-rank, --master-addr and --master-port from Slurm (one
// task per node: the step's nodes, SLURM_NODEID, the first host of
// SLURM_STEP_NODELIST, the port launch discovery derives from the job and step
// ids), or refuses, saying what to run instead (several tasks on a node).
// Options the user gave win; a step of one task is one host's job.
#pragma once

#include <string>

#include "plexus/launch_env.hpp"

namespace plexus::run {

struct SlurmPlacement {
  bool in_step = false;  // a task of an srun step of more than one task
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string step;  // "JOB.STEP", for messages
};

// Reads Slurm's variables through env. OK with in_step false outside an srun
// step (or in a step of one task). INVALID_USAGE, with what to run instead,
// when the step has more than one task on some node; INVALID_ARGUMENT naming
// the variable when one is malformed. *out is set only on success.
Status ReadSlurmPlacement(const EnvLookup& env, SlurmPlacement* out);

}  // namespace plexus::run
