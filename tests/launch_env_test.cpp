// Rank discovery from each launcher's variables.
#include <doctest/doctest.h>

#include <map>

#include "plexus/launch_env.hpp"
#include "slurm_env.hpp"

namespace {

plexus::EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace

TEST_CASE("no launcher at all means one process") {
  plexus::LaunchInfo info;
  REQUIRE(plexus::DiscoverLaunch(Env({}), &info).ok());
  CHECK(info.rank == 0);
  CHECK(info.size == 1);
}

TEST_CASE("each launcher's variables are understood, PLEXUS_* first") {
  plexus::LaunchInfo info;
  const std::map<std::string, std::string> master = {{"MASTER_ADDR", "10.0.0.1"},
                                                     {"MASTER_PORT", "29500"}};
  auto with = [&](std::map<std::string, std::string> v) {
    v.insert(master.begin(), master.end());
    return Env(v);
  };
  REQUIRE(
      plexus::DiscoverLaunch(
          with(
              {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}}),
          &info)
          .ok());
  CHECK(info.rank == 3);
  CHECK(info.size == 4);
  CHECK(info.local_rank == 1);
  CHECK(info.local_size == 2);
  CHECK(info.source == "torchrun");
  CHECK(info.master_addr == "10.0.0.1");
  CHECK(info.master_port == 29500);

  REQUIRE(plexus::DiscoverLaunch(with({{"OMPI_COMM_WORLD_RANK", "2"},
                                       {"OMPI_COMM_WORLD_SIZE", "5"},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}}),
                                 &info)
              .ok());
  CHECK(info.rank == 2);
  CHECK(info.size == 5);
  CHECK(info.local_rank == 0);
  CHECK(info.source == "Open MPI");

  REQUIRE(plexus::DiscoverLaunch(
              with({{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "3"}}), &info)
              .ok());
  CHECK(info.rank == 7);
  CHECK(info.local_rank == 3);
  CHECK(info.source == "Slurm");

  REQUIRE(plexus::DiscoverLaunch(with({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}), &info).ok());
  CHECK(info.rank == 1);
  CHECK(info.source == "PMI");

  REQUIRE(plexus::DiscoverLaunch(with({{"PLEXUS_RANK", "0"},
                                       {"PLEXUS_WORLD_SIZE", "2"},
                                       {"RANK", "1"},
                                       {"WORLD_SIZE", "2"}}),
                                 &info)
              .ok());
  CHECK(info.rank == 0);
  CHECK(info.source == "PLEXUS_* variables");
}

TEST_CASE("torchrun's own store holds MASTER_PORT, so Plexus uses the next port") {
  plexus::LaunchInfo info;
  REQUIRE(plexus::DiscoverLaunch(Env({{"RANK", "0"},
                                      {"WORLD_SIZE", "2"},
                                      {"MASTER_ADDR", "h"},
                                      {"MASTER_PORT", "29500"},
                                      {"TORCHELASTIC_RUN_ID", "x"}}),
                                 &info)
              .ok());
  CHECK(info.master_port == 29501);
}

TEST_CASE("malformed or inconsistent variables are errors naming the variable") {
  plexus::LaunchInfo info;
  plexus::Status st = plexus::DiscoverLaunch(Env({{"RANK", "abc"}, {"WORLD_SIZE", "2"}}), &info);
  CHECK(st.code() == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(st.message().find("RANK='abc'") != std::string::npos);

  st = plexus::DiscoverLaunch(Env({{"PLEXUS_RANK", "4"}, {"PLEXUS_WORLD_SIZE", "4"}}), &info);
  CHECK(st.message().find("not below PLEXUS_WORLD_SIZE=4") != std::string::npos);

  st = plexus::DiscoverLaunch(Env({{"PMI_RANK", "1"}}), &info);
  CHECK(st.message().find("PMI_RANK is set but PMI_SIZE is not") != std::string::npos);

  // No rendezvous point is allowed (MPI brings its own bootstrap) but reported.
  st = plexus::DiscoverLaunch(Env({{"RANK", "1"}, {"WORLD_SIZE", "2"}}), &info);
  CHECK(st.ok());
  CHECK_FALSE(plexus::HasRendezvous(info));
  CHECK(plexus::NoRendezvousMessage(info).find("rank 1 of 2 (from torchrun) has no rendezvous "
                                               "point: set MASTER_ADDR") != std::string::npos);
}

TEST_CASE("Slurm node lists expand as Slurm writes them") {
  std::vector<std::string> h;
  REQUIRE(plexus::slurm::ExpandNodeList("node[01-03,07]", &h).ok());
  CHECK(h == std::vector<std::string>{"node01", "node02", "node03", "node07"});
  REQUIRE(plexus::slurm::ExpandNodeList("a1,b[2-3]", &h).ok());
  CHECK(h == std::vector<std::string>{"a1", "b2", "b3"});
  REQUIRE(plexus::slurm::ExpandNodeList("r[1-2]n[8-9]", &h).ok());
  CHECK(h == std::vector<std::string>{"r1n8", "r1n9", "r2n8", "r2n9"});
  REQUIRE(plexus::slurm::ExpandNodeList("gpu-[9-11],login", &h).ok());
  CHECK(h == std::vector<std::string>{"gpu-9", "gpu-10", "gpu-11", "login"});
  REQUIRE(plexus::slurm::ExpandNodeList("vm", &h).ok());
  CHECK(h == std::vector<std::string>{"vm"});
  // Bad input: an error naming the list, *hosts untouched.
  for (const char* bad :
       {"node[01-03", "node01]", "node[3-1]", "node[a-b]", "a,,b", "", "n[]", "n[1-99999999]"}) {
    CAPTURE(bad);
    std::vector<std::string> untouched{"x"};
    const plexus::Status st = plexus::slurm::ExpandNodeList(bad, &untouched);
    CHECK(st.code() == PLEXUS_ERR_INVALID_ARGUMENT);
    CHECK(st.message().find("Slurm node list") != std::string::npos);
    CHECK(untouched == std::vector<std::string>{"x"});
  }
}

TEST_CASE("Slurm tasks per node parse, with repeats") {
  std::vector<uint32_t> c;
  REQUIRE(plexus::slurm::ParseTasksPerNode("2(x3),1", &c).ok());
  CHECK(c == std::vector<uint32_t>{2, 2, 2, 1});
  REQUIRE(plexus::slurm::ParseTasksPerNode("4", &c).ok());
  CHECK(c == std::vector<uint32_t>{4});
  for (const char* bad : {"", "0", "2(x0)", "2(x", "x3", "2,", "2(3)", "-1", "2(x99999999)"}) {
    CAPTURE(bad);
    std::vector<uint32_t> untouched{9};
    CHECK(plexus::slurm::ParseTasksPerNode(bad, &untouched).code() == PLEXUS_ERR_INVALID_ARGUMENT);
    CHECK(untouched == std::vector<uint32_t>{9});
  }
}

TEST_CASE("under srun nothing needs setting: per-node counts, master and port from Slurm") {
  plexus::LaunchInfo info;
  // srun -N3 -n5: tasks 2,2,1; task 3 runs on the second node.
  std::map<std::string, std::string> v = {{"SLURM_PROCID", "3"},
                                          {"SLURM_NTASKS", "5"},
                                          {"SLURM_LOCALID", "1"},
                                          {"SLURM_NODEID", "1"},
                                          {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
                                          {"SLURM_STEP_NODELIST", "n[07-09]"},
                                          {"SLURM_JOB_ID", "4242"},
                                          {"SLURM_STEP_ID", "0"}};
  REQUIRE(plexus::DiscoverLaunch(Env(v), &info).ok());
  CHECK(info.source == "Slurm");
  CHECK(info.rank == 3);
  CHECK(info.local_rank == 1);
  CHECK(info.local_size == 2);
  CHECK(info.node_rank == 1);
  CHECK(info.node_count == 3);
  CHECK(info.master_addr == "n07");
  CHECK(info.master_port == plexus::slurm::StepPort(4242, 0));
  CHECK(info.master_port >= plexus::slurm::kPortBase);
  // Another step of the job, and the next job, get other ports.
  CHECK(plexus::slurm::StepPort(4242, 1) != info.master_port);
  CHECK(plexus::slurm::StepPort(4243, 0) != info.master_port);
  // What the user sets wins.
  v["MASTER_ADDR"] = "10.1.1.1";
  v["MASTER_PORT"] = "29400";
  REQUIRE(plexus::DiscoverLaunch(Env(v), &info).ok());
  CHECK(info.master_addr == "10.1.1.1");
  CHECK(info.master_port == 29400);
  // A malformed Slurm value is an error naming the variable.
  v["SLURM_STEP_TASKS_PER_NODE"] = "2(x";
  const plexus::Status st = plexus::DiscoverLaunch(Env(v), &info);
  CHECK(st.code() == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(st.message().find("SLURM_STEP_TASKS_PER_NODE") != std::string::npos);
  v["SLURM_STEP_TASKS_PER_NODE"] = "2";
  CHECK(plexus::DiscoverLaunch(Env(v), &info).message().find("SLURM_NODEID=1") !=
        std::string::npos);
}

TEST_CASE("Slurm's batch step (no srun) is refused at once, saying to use srun") {
  plexus::LaunchInfo info;
  // What the job script of `sbatch -n 2` sees (Slurm 22.05): the job's task
  // count, SLURM_PROCID=0, and no step id.
  std::map<std::string, std::string> v = {
      {"SLURM_JOB_ID", "17"},      {"SLURM_PROCID", "0"},         {"SLURM_NTASKS", "2"},
      {"SLURM_NODEID", "0"},       {"SLURM_TASKS_PER_NODE", "2"}, {"SLURM_JOB_NODELIST", "n0"},
      {"SLURM_JOB_NUM_NODES", "1"}};
  const plexus::Status st = plexus::DiscoverLaunch(Env(v), &info);
  CHECK(st.code() == PLEXUS_ERR_INVALID_USAGE);
  CHECK(st.message().find("srun PROG") != std::string::npos);
  CHECK(st.message().find("SLURM_NTASKS=2") != std::string::npos);
  CHECK(st.message().find("job 17") != std::string::npos);
  // One task: a program run alone in the job script is rank 0 of 1.
  v["SLURM_NTASKS"] = "1";
  REQUIRE(plexus::DiscoverLaunch(Env(v), &info).ok());
  CHECK(info.size == 1);
  // Plexus's own variables win over Slurm's.
  v["SLURM_NTASKS"] = "2";
  v["PLEXUS_RANK"] = "0";
  v["PLEXUS_WORLD_SIZE"] = "1";
  REQUIRE(plexus::DiscoverLaunch(Env(v), &info).ok());
  CHECK(info.source == "PLEXUS_* variables");
  // An salloc shell: SLURM_NTASKS without SLURM_PROCID, no step.
  auto salloc = v;
  salloc.erase("SLURM_PROCID");
  salloc.erase("PLEXUS_RANK");
  salloc.erase("PLEXUS_WORLD_SIZE");
  const plexus::Status shell = plexus::DiscoverLaunch(Env(salloc), &info);
  CHECK(shell.code() == PLEXUS_ERR_INVALID_USAGE);
  CHECK(shell.message().find("salloc") != std::string::npos);
  // A task of an srun step (SLURM_STEP_ID, or the older SLURM_STEPID) is not refused.
  v.erase("PLEXUS_RANK");
  v.erase("PLEXUS_WORLD_SIZE");
  v["SLURM_STEPID"] = "0";
  CHECK(plexus::DiscoverLaunch(Env(v), &info).ok());
}
