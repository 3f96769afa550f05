#include "hierarchy/host_layout.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

namespace plexus::detail {
namespace {

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8 && ranks.size() > 9) return s + ", ... (" + std::to_string(ranks.size()) + " ranks)";
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return s;
}

// The ranks whose field differs from rank 0's, or an empty list.
template <class F>
std::vector<uint32_t> DifferFromRankZero(const std::vector<LayoutEntry>& all, F field) {
  std::vector<uint32_t> differ;
  for (uint32_t r = 1; r < all.size(); ++r) {
    if (field(all[r]) != field(all[0])) differ.push_back(r);
  }
  return differ;
}

}  // namespace

Status ParseHierarchySetting(const char* value, HierarchySetting* out) {
  const std::string v = value ? value : "";
  if (v.empty() || v == "auto") {
    *out = HierarchySetting::kAuto;
  } else if (v == "on" || v == "1") {
    *out = HierarchySetting::kOn;
  } else if (v == "off" || v == "0") {
    *out = HierarchySetting::kOff;
  } else {
    return Status::InvalidArgument("PLEXUS_HIERARCHY='" + v +
                                   "' is not one of auto, on, off (two-level collectives across "
                                   "hosts: auto uses them where they pay)");
  }
  return Status::Ok();
}

const char* HierarchySettingName(HierarchySetting s) {
  switch (s) {
    case HierarchySetting::kOn:
      return "on";
    case HierarchySetting::kOff:
      return "off";
    default:
      return "auto";
  }
}

Status DecideLayout(const std::vector<LayoutEntry>& all, uint32_t my_rank, HostLayout* out) {
  if (all.empty() || my_rank >= all.size()) return Status::Internal("DecideLayout: no entries");
  // Settings first: ranks that disagree would make different communicators.
  auto setting = [](const LayoutEntry& e) { return e.setting; };
  if (auto differ = DifferFromRankZero(all, setting); !differ.empty()) {
    return Status::InvalidUsage(
        "PLEXUS_HIERARCHY differs between ranks: rank 0 has '" +
        std::string(HierarchySettingName(HierarchySetting(all[0].setting))) + "', rank " +
        std::to_string(differ[0]) + " '" +
        HierarchySettingName(HierarchySetting(all[differ[0]].setting)) + "' (ranks " +
        RankList(differ) + " differ from rank 0); set it alike on every rank");
  }
  auto local_backend = [](const LayoutEntry& e) { return e.local_backend; };
  if (auto differ = DifferFromRankZero(all, local_backend); !differ.empty()) {
    return Status::InvalidUsage("PLEXUS_LOCAL_BACKEND differs between ranks (ranks " +
                                RankList(differ) +
                                " differ from rank 0); set it alike on every rank");
  }
  HostLayout l;
  l.setting = HierarchySetting(all[0].setting);
  std::map<uint64_t, uint32_t> host_index;
  for (uint32_t r = 0; r < all.size(); ++r) {
    auto [it, added] = host_index.emplace(all[r].host, uint32_t(l.hosts.size()));
    if (added) l.hosts.emplace_back();
    l.hosts[it->second].push_back(r);
  }
  l.my_host = host_index[all[my_rank].host];
  const auto& mine = l.hosts[l.my_host];
  l.my_index = uint32_t(std::find(mine.begin(), mine.end(), my_rank) - mine.begin());
  std::string counts;
  size_t most = 0;
  uint64_t lcm = 1;
  for (const auto& h : l.hosts) {
    counts += (counts.empty() ? "" : ", ") + std::to_string(h.size());
    most = std::max(most, h.size());
    lcm = std::min<uint64_t>(std::lcm(lcm, uint64_t(h.size())), uint64_t(kMaxChunks) + 1);
  }
  l.chunks = uint32_t(lcm);
  const std::string shape = std::to_string(l.hosts.size()) + " host" +
                            (l.hosts.size() == 1 ? "" : "s") + " with " + counts + " rank" +
                            (all.size() == 1 ? "" : "s");

  // What the launcher says about each host must match the addresses.
  std::string disagreement;
  for (const auto& h : l.hosts) {
    std::vector<bool> seen(h.size(), false);
    for (uint32_t r : h) {
      const LayoutEntry& e = all[r];
      const bool fits = e.launch_local_size == h.size() && e.launch_local_rank < h.size() &&
                        !seen[e.launch_local_rank];
      if (fits) {
        seen[e.launch_local_rank] = true;
        continue;
      }
      disagreement = "rank " + std::to_string(r) + "'s launcher says it is local rank " +
                     std::to_string(e.launch_local_rank) + " of " +
                     std::to_string(e.launch_local_size) + " on its host, but ranks " +
                     RankList(h) + " (" + std::to_string(h.size()) + ") have its host's address";
      break;
    }
    if (!disagreement.empty()) break;
  }

  if (l.setting == HierarchySetting::kOff) {
    l.reason = "PLEXUS_HIERARCHY=off";
  } else if (!disagreement.empty()) {
    if (l.setting == HierarchySetting::kOn) {
      return Status::InvalidUsage(
          "PLEXUS_HIERARCHY=on, but the ranks disagree on which host each "
          "runs on: " +
          disagreement);
    }
    l.reason = "the launcher and the addresses disagree (" + disagreement + ")";
  } else if (l.hosts.size() == 1) {
    l.reason = "every rank is on one host";
  } else if (most == 1) {
    l.reason = "one rank per host (" + std::to_string(l.hosts.size()) + " hosts)";
  } else if (lcm > kMaxChunks) {
    l.reason = shape + ": their ranks per host have no common multiple up to " +
               std::to_string(kMaxChunks);
  } else {
    l.two_level = true;
    l.reason = shape;
  }
  *out = std::move(l);
  return Status::Ok();
}

}  // namespace plexus::detail
