// Rank discovery from each launcher's variables.
#include <doctest/doctest.h>

#include <map>

#include "plexus/launch_env.hpp"

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
