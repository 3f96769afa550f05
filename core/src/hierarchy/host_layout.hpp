// Where a communicator's ranks run, and whether its collectives go in two
// levels (inside each host, then across hosts): PLEXUS_HIERARCHY.
//
// When a communicator is made, every rank tells the others one LayoutEntry
// (the host it runs on, from its address; what its launcher said about its
// host; its PLEXUS_HIERARCHY and PLEXUS_LOCAL_BACKEND). DecideLayout turns
// the entries into the same HostLayout on every rank, or into an error that
// names the ranks that disagree. It is pure, so tested without a network.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plexus/status.hpp"

namespace plexus::detail {

enum class HierarchySetting : uint32_t { kAuto = 0, kOn = 1, kOff = 2 };

// PLEXUS_HIERARCHY's value (nullptr or "" is auto); INVALID_ARGUMENT naming
// the value and the choices otherwise.
Status ParseHierarchySetting(const char* value, HierarchySetting* out);
const char* HierarchySettingName(HierarchySetting s);

struct LayoutEntry {
  uint64_t host = 0;               // HostIdentity: equal for ranks on one host
  uint64_t local_backend = 0;      // Fnv1a of PLEXUS_LOCAL_BACKEND ("" = the job's)
  uint32_t launch_local_rank = 0;  // what the launcher said (LOCAL_RANK, ...)
  uint32_t launch_local_size = 0;
  uint32_t setting = 0;  // HierarchySetting
  uint32_t reserved = 0;
};
static_assert(sizeof(LayoutEntry) == 32);

struct HostLayout {
  // The ranks of each host, ascending; hosts in the order of their lowest rank.
  std::vector<std::vector<uint32_t>> hosts;
  uint32_t my_host = 0;   // index into hosts of the deciding rank
  uint32_t my_index = 0;  // its place among its host's ranks
  // Chunks an allreduce is cut into: the least common multiple of the
  // hosts' rank counts, so that each host's ranks own equally many.
  uint32_t chunks = 1;
  HierarchySetting setting = HierarchySetting::kAuto;
  bool two_level = false;
  // Why (for the INFO line): "3 hosts with 2, 2, 2 ranks" or why not.
  std::string reason;
};

// The most chunks a two-level allreduce is cut into (each is a cross-host
// communicator of its own): layouts whose lcm is larger stay flat.
constexpr uint32_t kMaxChunks = 64;

// Fills *out from every rank's entry (all[r] is rank r's). Errors, the same
// on every rank: ranks whose PLEXUS_HIERARCHY or PLEXUS_LOCAL_BACKEND
// differ (INVALID_USAGE, naming them); with PLEXUS_HIERARCHY=on, a launcher
// whose ranks-per-host disagrees with the addresses the ranks have. Under
// auto that disagreement keeps the communicator flat, with the reason.
Status DecideLayout(const std::vector<LayoutEntry>& all, uint32_t my_rank, HostLayout* out);

}  // namespace plexus::detail
