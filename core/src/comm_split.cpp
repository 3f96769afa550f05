// Communicator::split and Communicator::group: a communicator over a subset
// of another's ranks.
//
// Every rank of the parent takes part. First the ranks tell each other their
// (color, key), where they run and, for group(), which list they were given;
// from that every rank computes the same groups, ranked by (key, parent
// rank) as MPI_Comm_split ranks them. Then the group is made by the
// backend's own comm_split (ABI 1.2: MPI_Comm_split, ncclCommSplit) if it has
// one, else by comm_create over the group's ranks alone, with an
// out-of-band channel whose parts are still written under each writer's own
// job rank. A group is a communicator like any other: its own backend
// communicator, independent of the parent and of other groups.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <sstream>
#include <thread>

#include "comm_group.hpp"
#include "comm_state.hpp"
#include "plexus/communicator.hpp"
#include "plexus/log.hpp"
#include "plugins/host_services.hpp"
#include "stall_report.hpp"
#include "store/store_protocol.hpp"

namespace plexus {
namespace {

using detail::SplitEntry;

[[noreturn]] void Throw(const Status& st, const std::string& who = "plexus") {
  throw Error(st.code(), who, st.message());
}

// Every parent rank's entry, through the store where the job has one, else
// through the parent communicator's own allgather (plain mpirun).
Status ExchangeEntries(detail::CommState& s, Communicator& parent, const std::string& base,
                       const SplitEntry& mine, std::vector<SplitEntry>* all) {
  all->assign(s.size, SplitEntry{});
  if (!s.job->has_rendezvous) {
    try {
      parent.allgather(&mine, all->data(), sizeof(SplitEntry), DType::UInt8).wait();
      return Status::Ok();
    } catch (const Error& e) {
      return Status(e.status(), std::string("exchanging colors over the parent: ") + e.what());
    }
  }
  auto part = [&](uint32_t r) { return store::RankKey(s.job_ranks[r], base + "/entry"); };
  const auto* p = reinterpret_cast<const uint8_t*>(&mine);
  Status st = s.job->store->Set(part(s.rank), Bytes(p, p + sizeof mine), s.timeout);
  const auto deadline = std::chrono::steady_clock::now() + s.timeout;
  for (uint32_t r = 0; st.ok() && r < s.size; ++r) {
    Bytes value;
    const auto left = std::max(std::chrono::milliseconds(0),
                               std::chrono::duration_cast<std::chrono::milliseconds>(
                                   deadline - std::chrono::steady_clock::now()));
    st = s.job->store->Get(part(r), &value, left);
    if (st.code() == PLEXUS_ERR_TIMEOUT) {
      return Status(PLEXUS_ERR_TIMEOUT,
                    "rank " + std::to_string(r) + " (job rank " + std::to_string(s.job_ranks[r]) +
                        ") did not join the split within " + std::to_string(s.timeout.count()) +
                        " ms: every rank of " + s.name + " must call split() or group()");
    }
    if (st.ok() && value.size() != sizeof(SplitEntry)) {
      return Status::Remote("rank " + std::to_string(r) + " sent a split entry of " +
                            std::to_string(value.size()) + " bytes");
    }
    if (st.ok()) std::memcpy(&(*all)[r], value.data(), sizeof(SplitEntry));
  }
  return st;
}

// The group of this rank: the parent ranks of its color, by (key, parent rank).
std::vector<uint32_t> MembersOf(const std::vector<SplitEntry>& all, uint32_t color) {
  std::vector<uint32_t> members;
  for (uint32_t r = 0; r < all.size(); ++r) {
    if (all[r].color == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(),
                   [&](uint32_t a, uint32_t b) { return all[a].key < all[b].key; });
  return members;
}

}  // namespace

namespace detail {

Status MakeGroup(CommState& p, const std::vector<SplitEntry>& all, const std::string& base,
                 std::shared_ptr<Backend> backend, std::shared_ptr<CommState>* out,
                 bool survivors) {
  if (!backend) backend = p.backend;
  const uint32_t color = all[p.rank].color;
  const bool joins = color != PLEXUS_SPLIT_NO_COLOR;
  std::shared_ptr<detail::CommState> g;
  plexus_comm_config_v1 config{};
  plexus_oob oob{p.job->store.get(), "", 0, 0, 0, {}};
  if (joins) {
    const std::vector<uint32_t> members = MembersOf(all, color);
    g = std::make_shared<detail::CommState>();
    g->job = p.job;
    g->backend = backend;
    g->size = uint32_t(members.size());
    g->rank = uint32_t(std::find(members.begin(), members.end(), p.rank) - members.begin());
    // (CommState starts at local rank 0 of 1, a world of one.)
    g->local_rank = 0;
    g->local_size = 0;
    for (uint32_t m : members) {
      if (all[m].host != all[p.rank].host) continue;
      if (m == p.rank) g->local_rank = g->local_size;
      ++g->local_size;
    }
    g->device = p.device;
    g->timeout = p.timeout;
    g->name = base + "/color/" + std::to_string(color);
    g->config = p.config;
    g->debug_detail = p.debug_detail;
    for (uint32_t m : members) g->job_ranks.push_back(p.job_ranks[m]);
    oob.prefix = g->name + "/oob";
    oob.rank = g->rank;
    oob.size = g->size;
    oob.members = g->job_ranks;
    config.struct_size = sizeof config;
    config.rank = g->rank;
    config.size = g->size;
    config.local_rank = g->local_rank;
    config.local_size = g->local_size;
    config.device = g->device;
    config.timeout_ms = g->timeout.count();
    config.name = g->name.c_str();
    config.oob = &oob;
    config.get_config = &detail::CommState::ConfigGetter;
    config.config_ctx = g.get();
  }
  Status st;
  plexus_comm* comm = nullptr;
  if (!survivors && backend == p.backend && p.backend->HasCommSplit()) {
    // Every rank of the parent, in or out.
    st = p.backend->SplitComm(p.comm, color, all[p.rank].key, joins ? &config : nullptr, &comm);
  } else if (joins) {
    st = backend->CreateComm(config, &comm);
  }
  if (g) g->comm = comm;  // ~CommState destroys it if what follows fails

  // The rank hosting the store keeps it up until every rank of the parent
  // is past making its group (from_env does the same for the job).
  if (p.job->has_rendezvous && !survivors) {
    auto done = [&](uint32_t r) { return store::RankKey(p.job_ranks[r], base + "/made"); };
    Status marked = p.job->store->Set(done(p.rank), Bytes{uint8_t(st.ok())}, p.timeout);
    if (st.ok()) st = marked;
    if (st.ok() && p.job->server) {
      std::vector<std::string> keys;
      for (uint32_t r = 0; r < p.size; ++r) keys.push_back(done(r));
      st = p.job->store->Wait(keys, p.timeout);
    }
  }
  if (!st.ok()) {
    return st.WithContext(joins
                              ? "making " + (g ? g->name : base) + " (rank " +
                                    std::to_string(g->rank) + " of " + std::to_string(g->size) + ")"
                              : "splitting " + p.name);
  }
  *out = std::move(g);
  return Status::Ok();
}

}  // namespace detail

std::optional<Communicator> Communicator::Made(const Status& st,
                                               std::shared_ptr<detail::CommState> made,
                                               const detail::CommState& parent) {
  if (!st.ok()) Throw(st, parent.backend->name());
  if (!made) return std::nullopt;
  return Communicator(std::move(made));
}

const std::vector<uint32_t>& Communicator::job_ranks() const {
  return state().job_ranks;
}

std::optional<Communicator> Communicator::split(uint32_t color, uint32_t key) {
  return SplitOver(color, key, "");
}

std::optional<Communicator> Communicator::SplitOver(uint32_t color, uint32_t key,
                                                    const std::string& backend_spec) {
  auto& s = state();
  std::shared_ptr<Backend> backend;
  if (!backend_spec.empty()) {
    Status st = detail::OpenNamedBackend(backend_spec, *s.job, &backend);
    if (!st.ok()) Throw(st.WithContext("the backend inside hosts, '" + backend_spec + "'"));
  }
  const uint64_t n = s.groups_made++;
  const std::string base = s.name + "/split/" + std::to_string(n);
  const SplitEntry mine{color, key, HostIdentity(s.job->local_address), 0};
  std::vector<SplitEntry> all;
  std::shared_ptr<detail::CommState> made;
  Status st = ExchangeEntries(s, *this, base, mine, &all);
  if (!st.ok()) Throw(st.WithContext("split of " + s.name));
  st = detail::MakeGroup(s, all, base, std::move(backend), &made);
  return Made(st, std::move(made), s);
}

std::optional<Communicator> Communicator::group(std::span<const uint32_t> ranks) {
  auto& s = state();
  const uint64_t n = s.groups_made++;
  const std::string base = s.name + "/split/" + std::to_string(n);
  const auto at = std::find(ranks.begin(), ranks.end(), s.rank);
  SplitEntry mine{at == ranks.end() ? kNoColor : 0u, uint32_t(at - ranks.begin()),
                  HostIdentity(s.job->local_address),
                  Fnv1a(ranks.data(), ranks.size_bytes(), Fnv1a(&s.size, sizeof s.size))};
  std::vector<SplitEntry> all;
  std::shared_ptr<detail::CommState> made;
  Status st = ExchangeEntries(s, *this, base, mine, &all);
  if (!st.ok()) Throw(st.WithContext("group of " + s.name));
  // Every rank checks every rank's list, so all of them fail together.
  for (uint32_t r = 0; r < s.size; ++r) {
    if (all[r].list_hash != mine.list_hash) {
      Throw(Status::InvalidArgument("group: rank " + std::to_string(r) + " of " + s.name +
                                    " passed another list of ranks than this rank " +
                                    std::to_string(s.rank) +
                                    " (every rank must pass the same list, in the same order)"));
    }
  }
  // The same list everywhere: what is wrong with it is wrong on every rank.
  if (ranks.empty()) Throw(Status::InvalidArgument("group: the list of ranks is empty"));
  std::vector<bool> seen(s.size, false);
  for (uint32_t r : ranks) {
    if (r >= s.size) {
      Throw(Status::InvalidArgument("group: " + std::to_string(r) + " is not a rank of " + s.name +
                                    " (size " + std::to_string(s.size) + ")"));
    }
    if (seen[r]) {
      Throw(Status::InvalidArgument("group: rank " + std::to_string(r) +
                                    " appears twice in the list"));
    }
    seen[r] = true;
  }
  st = detail::MakeGroup(s, all, base, nullptr, &made);
  return Made(st, std::move(made), s);
}

}  // namespace plexus
