#include "slurm_step.hpp"

#include <charconv>
#include <vector>

#include "slurm_env.hpp"

namespace plexus::run {
namespace {

bool ParseId(const std::optional<std::string>& text, uint64_t* out) {
  if (!text || text->empty()) return false;
  auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), *out);
  return ec == std::errc() && ptr == text->data() + text->size();
}

}  // namespace

Status ReadSlurmPlacement(const EnvLookup& env, SlurmPlacement* out) {
  SlurmPlacement p;
  auto step_id = env("SLURM_STEP_ID");
  if (!step_id) step_id = env("SLURM_STEPID");
  const auto job_id = env("SLURM_JOB_ID");
  uint64_t ntasks = 0, job = 0, step = 0;
  if (!step_id || !job_id) {
    *out = p;
    return Status::Ok();
  }
  if (!ParseId(env("SLURM_NTASKS"), &ntasks)) {
    return Status::InvalidArgument("SLURM_NTASKS='" + env("SLURM_NTASKS").value_or("") +
                                   "' is not a task count (Slurm step " + *job_id + "." + *step_id +
                                   ")");
  }
  if (ntasks <= 1) {
    *out = p;
    return Status::Ok();
  }
  if (!ParseId(job_id, &job) || !ParseId(step_id, &step)) {
    return Status::InvalidArgument("SLURM_JOB_ID='" + *job_id + "', SLURM_STEP_ID='" + *step_id +
                                   "' are not a Slurm job and step id");
  }
  p.step = *job_id + "." + *step_id;
  const auto per_node = env("SLURM_STEP_TASKS_PER_NODE");
  const auto nodes = env("SLURM_STEP_NODELIST");
  if (!per_node || !nodes) {
    return Status::InvalidArgument("Slurm step " + p.step +
                                   " gives no SLURM_STEP_TASKS_PER_NODE or SLURM_STEP_NODELIST");
  }
  std::vector<uint32_t> counts;
  Status st = slurm::ParseTasksPerNode(*per_node, &counts);
  if (!st.ok()) return Status::InvalidArgument("SLURM_STEP_TASKS_PER_NODE: " + st.message());
  std::vector<std::string> hosts;
  st = slurm::ExpandNodeList(*nodes, &hosts);
  if (!st.ok()) return Status::InvalidArgument("SLURM_STEP_NODELIST: " + st.message());
  if (hosts.size() != counts.size()) {
    return Status::InvalidArgument("SLURM_STEP_NODELIST='" + *nodes + "' names " +
                                   std::to_string(hosts.size()) +
                                   " nodes but SLURM_STEP_TASKS_PER_NODE='" + *per_node +
                                   "' counts " + std::to_string(counts.size()));
  }
  uint32_t most = 0;
  for (uint32_t c : counts) most = std::max(most, c);
  if (most > 1) {
    return Status::InvalidUsage(
        "srun started plexus-run as " + std::to_string(ntasks) + " tasks of step " + p.step +
        " (tasks per node: " + *per_node +
        "), and each would start a job of its own. Either let srun start the ranks itself, "
        "with nothing to set: `srun -n " +
        std::to_string(ntasks) +
        " PROG`; or run one plexus-run per node: `srun --ntasks-per-node=1 plexus-run -n "
        "RANKS_PER_NODE PROG` (it then takes its node, the node count and the master from "
        "Slurm)");
  }
  uint64_t node = 0;
  if (!ParseId(env("SLURM_NODEID"), &node) || node >= counts.size()) {
    return Status::InvalidArgument("SLURM_NODEID='" + env("SLURM_NODEID").value_or("") +
                                   "' is not a node of step " + p.step + " (" +
                                   std::to_string(counts.size()) + " nodes)");
  }
  p.in_step = true;
  p.nnodes = int(counts.size());
  p.node_rank = int(node);
  p.master_addr = hosts.front();
  p.master_port = slurm::StepPort(job, step);
  *out = p;
  return Status::Ok();
}

}  // namespace plexus::run
