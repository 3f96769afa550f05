// DecideLayout (core/src/hierarchy/host_layout.hpp): which ranks share a
// host, whether collectives go in two levels, and the errors for ranks that
// disagree.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "hierarchy/host_layout.hpp"

namespace {

using plexus::detail::DecideLayout;
using plexus::detail::HierarchySetting;
using plexus::detail::HostLayout;
using plexus::detail::LayoutEntry;

// Ranks placed on hosts by count, host h's ranks contiguous; the launcher
// tells each its local rank and count correctly.
std::vector<LayoutEntry> Placed(std::vector<uint32_t> per_host,
                                HierarchySetting s = HierarchySetting::kAuto) {
  std::vector<LayoutEntry> all;
  for (uint32_t h = 0; h < per_host.size(); ++h) {
    for (uint32_t i = 0; i < per_host[h]; ++i) {
      LayoutEntry e;
      e.host = 1000 + h;
      e.launch_local_rank = i;
      e.launch_local_size = per_host[h];
      e.setting = uint32_t(s);
      all.push_back(e);
    }
  }
  return all;
}

}  // namespace

TEST_CASE("3 hosts x 2 ranks: two levels, 2 chunks, every rank placed") {
  auto all = Placed({2, 2, 2});
  HostLayout l;
  REQUIRE(DecideLayout(all, 3, &l).ok());
  CHECK(l.two_level);
  CHECK(l.chunks == 2);
  REQUIRE(l.hosts.size() == 3);
  CHECK(l.hosts[1] == std::vector<uint32_t>{2, 3});
  CHECK(l.my_host == 1);
  CHECK(l.my_index == 1);
  CHECK(l.reason == "3 hosts with 2, 2, 2 ranks");
}

TEST_CASE("3 + 2 + 1 ranks: two levels, 6 chunks (each host's ranks own equally many)") {
  auto all = Placed({3, 2, 1});
  HostLayout l;
  REQUIRE(DecideLayout(all, 5, &l).ok());
  CHECK(l.two_level);
  CHECK(l.chunks == 6);
  CHECK(l.my_host == 2);
  CHECK(l.my_index == 0);
}

TEST_CASE("hosts in the order of their lowest rank, ranks interleaved") {
  std::vector<LayoutEntry> all(4);
  const uint64_t hosts[] = {7, 9, 7, 9};
  for (uint32_t r = 0; r < 4; ++r) {
    all[r].host = hosts[r];
    all[r].launch_local_rank = r / 2;
    all[r].launch_local_size = 2;
  }
  HostLayout l;
  REQUIRE(DecideLayout(all, 1, &l).ok());
  CHECK(l.two_level);
  CHECK(l.hosts[0] == std::vector<uint32_t>{0, 2});
  CHECK(l.hosts[1] == std::vector<uint32_t>{1, 3});
  CHECK(l.my_host == 1);
  CHECK(l.my_index == 0);
}

TEST_CASE("flat where two levels cannot pay, each with its reason") {
  HostLayout l;
  REQUIRE(DecideLayout(Placed({4}), 0, &l).ok());
  CHECK_FALSE(l.two_level);
  CHECK(l.reason == "every rank is on one host");
  REQUIRE(DecideLayout(Placed({1, 1, 1}), 0, &l).ok());
  CHECK_FALSE(l.two_level);
  CHECK(l.reason == "one rank per host (3 hosts)");
  REQUIRE(DecideLayout(Placed({2, 2}, HierarchySetting::kOff), 0, &l).ok());
  CHECK_FALSE(l.two_level);
  CHECK(l.reason == "PLEXUS_HIERARCHY=off");
  // lcm(7, 8, 9) = 504 chunks: too many cross-host groups.
  REQUIRE(DecideLayout(Placed({7, 8, 9}), 0, &l).ok());
  CHECK_FALSE(l.two_level);
  CHECK(l.reason.find("no common multiple up to 64") != std::string::npos);
}

TEST_CASE("ranks with another PLEXUS_HIERARCHY or PLEXUS_LOCAL_BACKEND: an error naming them") {
  auto all = Placed({2, 2});
  all[3].setting = uint32_t(HierarchySetting::kOn);
  HostLayout l;
  auto st = DecideLayout(all, 0, &l);
  CHECK(st.code() == PLEXUS_ERR_INVALID_USAGE);
  CHECK(st.message().find("rank 3 'on'") != std::string::npos);
  all = Placed({2, 2});
  all[2].local_backend = 42;
  st = DecideLayout(all, 0, &l);
  CHECK(st.code() == PLEXUS_ERR_INVALID_USAGE);
  CHECK(st.message().find("PLEXUS_LOCAL_BACKEND differs between ranks (ranks 2 differ") !=
        std::string::npos);
}

TEST_CASE("a launcher that disagrees with the addresses: an error under on, flat under auto") {
  auto all = Placed({2, 2}, HierarchySetting::kOn);
  all[2].launch_local_size = 4;  // says 4 ranks on its host; 2 have its address
  HostLayout l;
  auto st = DecideLayout(all, 0, &l);
  CHECK(st.code() == PLEXUS_ERR_INVALID_USAGE);
  CHECK(st.message().find("rank 2's launcher says it is local rank 0 of 4 on its host, but ranks "
                          "2, 3 (2) have its host's address") != std::string::npos);
  for (auto& e : all) e.setting = uint32_t(HierarchySetting::kAuto);
  REQUIRE(DecideLayout(all, 0, &l).ok());
  CHECK_FALSE(l.two_level);
  CHECK(l.reason.find("the launcher and the addresses disagree") == 0);
  // Two ranks of one host that both say local rank 0.
  all = Placed({2, 2}, HierarchySetting::kOn);
  all[1].launch_local_rank = 0;
  CHECK(DecideLayout(all, 0, &l).code() == PLEXUS_ERR_INVALID_USAGE);
}

TEST_CASE("PLEXUS_HIERARCHY values") {
  HierarchySetting s;
  CHECK(plexus::detail::ParseHierarchySetting(nullptr, &s).ok());
  CHECK(s == HierarchySetting::kAuto);
  CHECK(plexus::detail::ParseHierarchySetting("on", &s).ok());
  CHECK(s == HierarchySetting::kOn);
  CHECK(plexus::detail::ParseHierarchySetting("off", &s).ok());
  CHECK(s == HierarchySetting::kOff);
  auto st = plexus::detail::ParseHierarchySetting("yes", &s);
  CHECK(st.code() == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(st.message().find("'yes' is not one of auto, on, off") != std::string::npos);
}
