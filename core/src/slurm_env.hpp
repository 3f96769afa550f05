// What Slurm tells a task of an srun step, in the forms Slurm writes it.
//
// Slurm gives no rendezvous point and counts tasks per node in a compressed
// form; these turn its variables into what launch discovery needs
// (launch_env.cpp). Pure functions of strings: no scontrol, no network.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/status.hpp"

namespace plexus::slurm {

// Host names of a Slurm node list, in order: "node[01-03,07]" ->
// node01 node02 node03 node07; "a1,b[2-3]" -> a1 b2 b3; several bracket
// groups in one name expand as a product ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1
// r2n2). A range keeps the width of its lower bound ("01-03"). At most
// max_hosts names. Malformed input (unbalanced brackets, a range whose end
// is below its start, a bound that is not a number, an empty name) is
// INVALID_ARGUMENT saying what and where; *hosts is left unchanged then.
Status ExpandNodeList(const std::string& list, std::vector<std::string>* hosts,
                      size_t max_hosts = 65536);

// Tasks per node: "2(x3),1" -> 2 2 2 1 (SLURM_STEP_TASKS_PER_NODE,
// SLURM_TASKS_PER_NODE). At most max_nodes entries; zero counts and
// malformed input are INVALID_ARGUMENT; *counts is left unchanged then.
Status ParseTasksPerNode(const std::string& text, std::vector<uint32_t>* counts,
                         size_t max_nodes = 65536);

// The store port of a step when the user gave none: derived from the job
// and step ids, so that every task of the step computes the same one, and
// two steps (of one job, or of jobs whose ids are close) running at once on
// one node do not share it. In [kPortBase, kPortBase + kPortSpan).
inline constexpr uint16_t kPortBase = 20000;
inline constexpr uint16_t kPortSpan = 20000;
uint16_t StepPort(uint64_t job_id, uint64_t step_id);

}  // namespace plexus::slurm
