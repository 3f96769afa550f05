// Elastic communicators (plexus-run --elastic): shrink() after a rank left,
// grow() when ranks started again join, and the newcomer's side of grow().
//
// The launcher, which sees ranks exit and start, says who is in the job:
// under node 0's own keys (no other process may write them) it publishes
// each generation of the job's ranks, "launch/members/<g>" = "<g> <job rank>
// ...", never changed once written, and the latest again as
// "launch/members". A communicator remembers the generation it was made in;
// each rank marks the generation it has reached under its own key
// ("elastic/generation"), which the launcher waits for before it lets a rank
// join (one change at a time).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "comm_group.hpp"
#include "comm_state.hpp"
#include "elastic_generation.hpp"
#include "plexus/communicator.hpp"
#include "plexus/log.hpp"
#include "plexus/settings/environment.hpp"
#include "stall_report.hpp"
#include "store/store_protocol.hpp"

namespace plexus {
namespace {

using Clock = std::chrono::steady_clock;
using detail::SplitEntry;

[[noreturn]] void Throw(const Status& st, const std::string& who = "plexus") {
  throw Error(st.code(), who, st.message());
}

using detail::Generation;
using detail::ReadGeneration;

Status RequireElastic(const detail::CommState& s, const char* what) {
  const char* elastic = plexus::settings::Raw(plexus::settings::Id::kElastic);
  if (s.job->has_rendezvous && elastic && std::string(elastic) == "1") return Status::Ok();
  return Status::InvalidUsage(std::string(what) + " of " + s.name +
                              " needs a launcher that says which ranks are in the job: "
                              "plexus-run --elastic (PLEXUS_ELASTIC=1)");
}

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string text;
  for (uint32_t r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

// This rank has reached generation g: what the launcher waits for before it
// lets a rank join (best effort: a launcher that reads no mark waits).
void MarkGeneration(RendezvousStore& store, uint32_t me, uint64_t g,
                    std::chrono::milliseconds timeout) {
  const std::string text = std::to_string(g);
  (void)store.Set(store::RankKey(me, "elastic/generation"), Bytes(text.begin(), text.end()),
                  timeout);
}

// The communicator of generation g over members (job ranks, in the order
// they are to be ranked), named base, with t's job, backend and settings;
// this process is job rank me, one of members. Every member says where it
// runs under its own key, then the backend makes the communicator. Gives up
// early when the launcher says a newer generation meanwhile (a member left).
// mark: this rank marks the generation reached once it is made (grow()
// marks only after every rank agreed).
Status MakeGeneration(const detail::CommState& t, uint32_t me, uint64_t g,
                      const std::vector<uint32_t>& members, const std::string& base,
                      std::shared_ptr<detail::CommState>* out, bool mark = true) {
  detail::CommState p;  // stands for the members, who have no communicator together yet
  p.job = t.job;
  p.backend = t.backend;
  p.rank = uint32_t(std::find(members.begin(), members.end(), me) - members.begin());
  p.size = uint32_t(members.size());
  p.device = t.device;
  p.timeout = t.timeout;
  p.name = base;
  p.config = t.config;
  p.debug_detail = t.debug_detail;
  p.job_ranks = members;
  RendezvousStore& store = *t.job->store;
  const SplitEntry mine{0, p.rank, HostIdentity(t.job->local_address), 0};
  const auto* bytes = reinterpret_cast<const uint8_t*>(&mine);
  Status st =
      store.Set(store::RankKey(me, base + "/entry"), Bytes(bytes, bytes + sizeof mine), t.timeout);
  std::vector<SplitEntry> all(members.size());
  const auto deadline = Clock::now() + t.timeout;
  for (size_t i = 0; st.ok() && i < members.size(); ++i) {
    Bytes value;
    for (;;) {
      st = store.Get(store::RankKey(members[i], base + "/entry"), &value,
                     std::chrono::milliseconds(100));
      if (st.code() != PLEXUS_ERR_TIMEOUT) break;
      // (A failed read is a "not yet": the wait's own timeout ends it.)
      if (Generation now; detail::ReadLatestGeneration(store, &now).ok() && now.number > g &&
                          !now.Has(members[i])) {
        st = Status::Remote("job rank " + std::to_string(members[i]) +
                            " left the job meanwhile (plexus-run's generation " +
                            std::to_string(now.number) + ")");
        break;
      }
      if (Clock::now() >= deadline) {
        st = Status::Timeout("job rank " + std::to_string(members[i]) + " did not come within " +
                             std::to_string(t.timeout.count()) + " ms");
        break;
      }
    }
    if (st.ok() && value.size() != sizeof(SplitEntry)) {
      st = Status::Remote("job rank " + std::to_string(members[i]) + " sent an entry of " +
                          std::to_string(value.size()) + " bytes");
    }
    if (st.ok()) std::memcpy(&all[i], value.data(), sizeof(SplitEntry));
  }
  std::shared_ptr<detail::CommState> made;
  if (st.ok()) st = detail::MakeGroup(p, all, base, nullptr, &made, /*survivors=*/true);
  p.backend.reset();  // p made no backend communicator of its own
  if (!st.ok()) return st;
  made->elastic_generation = g;
  made->name = base;
  if (mark) MarkGeneration(store, me, g, t.timeout);
  *out = std::move(made);
  return Status::Ok();
}

}  // namespace

Communicator Communicator::shrink() {
  auto& s = state();
  if (Status st = RequireElastic(s, "shrink()"); !st.ok()) Throw(st);
  RendezvousStore& store = *s.job->store;
  const uint32_t me = s.job_ranks[s.rank];
  // The collective that failed, marked as stalled here: the line names the
  // ranks that never reached it, which the launcher takes out (a frozen rank
  // is seen by no one else; a rank whose failure was relayed to this one
  // left no such line yet). Not waiting for the others' marks: the
  // launcher reads them.
  detail::PostedOp failed;
  {
    std::lock_guard<std::mutex> lock(s.last_failed_mutex);
    failed = s.last_failed;
  }
  // Not when the launcher has already said that a rank left (it saw one
  // exit): the report would only wait for the marks of ranks that are gone.
  Generation said;
  if (failed.seq != 0 &&
      (!detail::ReadLatestGeneration(store, &said).ok() || said.number <= s.elastic_generation)) {
    detail::MarkStalled(s, failed);
  }
  // Another rank may leave while the ranks left make their communicator
  // (it never comes): then again with the launcher's next word.
  uint64_t after = s.elastic_generation;
  for (bool aborted = false;;) {
    if (Status st = detail::WaitForLeaving(store, s.job_ranks, &after, s.timeout, &said);
        !st.ok()) {
      Throw(st.WithContext("shrink() of " + s.name + " on job rank " + std::to_string(me)));
    }
    std::vector<uint32_t> left_in;  // this communicator's ranks still in the job, in its order
    for (uint32_t r : s.job_ranks) {
      if (said.Has(r)) left_in.push_back(r);
    }
    if (!said.Has(me)) {
      Throw(Status::Remote("shrink() of " + s.name + ": plexus-run took job rank " +
                           std::to_string(me) + " out of the job"));
    }
    if (!std::exchange(aborted, true)) abort();  // the old one: what is posted fails now
    std::shared_ptr<detail::CommState> made;
    const Status st = MakeGeneration(s, me, said.number, left_in,
                                     s.name + "/e" + std::to_string(said.number), &made);
    if (st.ok()) return Communicator(std::move(made));
    Generation now;
    if (!detail::ReadLatestGeneration(store, &now).ok() || now.number <= said.number) {
      Throw(st.WithContext("shrink() of " + s.name + " to " + std::to_string(left_in.size()) +
                           " ranks (job ranks " + RankList(left_in) + ")"),
            s.backend->name());
    }
    after = said.number;  // a rank left meanwhile
  }
}

std::optional<Communicator> Communicator::grow() {
  auto& s = state();
  if (Status st = RequireElastic(s, "grow()"); !st.ok()) Throw(st);
  RendezvousStore& store = *s.job->store;
  const uint32_t me = s.job_ranks[s.rank];
  // Only the communicator of every rank in the job (from_env's, or what
  // shrink() and grow() made of it): a newcomer joins that one.
  {
    bool whole = s.size == s.job->launch.size;
    if (s.elastic_generation > 0) {
      Generation now;
      whole = ReadGeneration(store, s.elastic_generation, s.timeout, &now).ok() &&
              now.ranks.size() == s.job_ranks.size();
      for (uint32_t r : s.job_ranks) whole = whole && now.Has(r);
    }
    if (!whole) {
      Throw(Status::InvalidUsage("grow() of " + s.name +
                                 ": ranks join the communicator of every rank in the job "
                                 "(from_env()'s, or what shrink() and grow() made of it), not "
                                 "a group of it"));
    }
  }
  // What this rank saw: the latest generation, when it keeps every rank of
  // this communicator. The ranks agree on the newest any of them saw (one
  // may have looked before the launcher wrote it, another after).
  // (A failed read is "nothing new" here: a grow() is tried again later.)
  Generation seen;
  const Status read = detail::ReadLatestGeneration(store, &seen);
  if (!read.ok()) {
    LogLine(PLEXUS_LOG_WARN, "plexus", "grow() of " + s.name + ": " + read.message());
  }
  bool keeps_all = true;
  for (uint32_t r : s.job_ranks) keeps_all = keeps_all && seen.Has(r);
  uint64_t agreed =
      keeps_all && seen.number > std::max(s.elastic_generation, s.grow_tried) ? seen.number : 0;
  allreduce(&agreed, &agreed, 1, DType::UInt64, ReduceOp::Max).wait();
  if (agreed == 0) return std::nullopt;
  s.grow_tried = agreed;
  Generation g;
  Status st = ReadGeneration(store, agreed, s.timeout, &g);
  if (!st.ok()) Throw(st.WithContext("grow() of " + s.name));
  std::vector<uint32_t> newcomers;
  for (uint32_t r : g.ranks) {
    if (std::find(s.job_ranks.begin(), s.job_ranks.end(), r) == s.job_ranks.end()) {
      newcomers.push_back(r);
    }
  }
  bool all_in = true;
  for (uint32_t r : s.job_ranks) all_in = all_in && g.Has(r);
  if (!all_in) {
    // A rank of this one left since (and the launcher said so after the
    // ranks that look first): the collective that fails next, to shrink().
    return std::nullopt;
  }
  if (newcomers.empty()) {  // nothing to grow by: only the number moves on
    s.elastic_generation = agreed;
    MarkGeneration(store, me, agreed, s.timeout);
    return std::nullopt;
  }
  std::vector<uint32_t> members = g.ranks;
  std::sort(members.begin(), members.end());
  std::shared_ptr<detail::CommState> made;
  const std::string base = "plexus/elastic/" + std::to_string(agreed);
  st = MakeGeneration(s, me, agreed, members, base, &made, /*mark=*/false);
  // Every rank here made it, or none keeps it: this one still works. The
  // lowest tells the newcomers (they are not in this one) under its own key.
  uint64_t ok = st.ok() ? 1 : 0;
  allreduce(&ok, &ok, 1, DType::UInt64, ReduceOp::Min).wait();
  if (s.rank == 0) {
    (void)store.Set(store::RankKey(me, base + "/verdict"), Bytes{uint8_t(ok ? '1' : '0')},
                    s.timeout);
  }
  if (ok == 0) {
    LogLine(PLEXUS_LOG_WARN, "plexus",
            "grow() of " + s.name + ": job rank(s) " + RankList(newcomers) +
                " did not join (generation " + std::to_string(agreed) + "); going on with " +
                std::to_string(s.size) + " ranks" + (st.ok() ? "" : ": " + st.message()));
    return std::nullopt;
  }
  MarkGeneration(store, me, agreed, s.timeout);
  return Communicator(std::move(made));
}

bool Communicator::joined() const {
  return state().joined;
}

Communicator Communicator::JoinElastic(std::shared_ptr<Job> job, std::string name,
                                       uint64_t generation, const CommunicatorOptions& options,
                                       std::chrono::milliseconds timeout) {
  std::shared_ptr<detail::CommState> t = NewState(job, std::move(name), options, timeout);
  const uint32_t me = job->launch.rank;
  Generation g;
  Status st = ReadGeneration(*job->store, generation, timeout, &g);
  if (st.ok() && !g.Has(me)) {
    st = Status::InvalidUsage("plexus-run's generation " + std::to_string(generation) +
                              " (job ranks " + RankList(g.ranks) + ") does not hold job rank " +
                              std::to_string(me));
  }
  std::vector<uint32_t> members = g.ranks;
  std::sort(members.begin(), members.end());
  std::shared_ptr<detail::CommState> made;
  const std::string base = "plexus/elastic/" + std::to_string(generation);
  if (st.ok()) {
    LogLine(PLEXUS_LOG_INFO, "plexus",
            "job rank " + std::to_string(me) + " joins job ranks " + RankList(members) +
                " at their next grow() (generation " + std::to_string(generation) + ")");
    st = MakeGeneration(*t, me, generation, members, base, &made, /*mark=*/false);
  }
  // The others agree that every one of them made it (grow()); the lowest
  // says so (the launcher starts one rank at a time: the others are the
  // ranks that were there).
  if (st.ok()) {
    uint32_t lowest = UINT32_MAX;
    for (uint32_t r : members) {
      if (r != me) lowest = std::min(lowest, r);
    }
    Bytes verdict;
    if (lowest != UINT32_MAX) {
      st = job->store->Get(store::RankKey(lowest, base + "/verdict"), &verdict, timeout);
      if (st.code() == PLEXUS_ERR_TIMEOUT) {
        st = Status::Timeout("job rank " + std::to_string(lowest) + " did not say within " +
                             std::to_string(timeout.count()) +
                             " ms whether every rank made the communicator");
      } else if (st.ok() && verdict != Bytes{uint8_t('1')}) {
        st = Status::Remote("the others could not all make the communicator with it (job rank " +
                            std::to_string(lowest) + " says so); they go on without it");
      }
    }
  }
  if (st.ok()) MarkGeneration(*job->store, me, generation, timeout);
  if (!st.ok()) {
    Throw(st.WithContext("job rank " + std::to_string(me) + " joining the elastic job"),
          t->backend->name());
  }
  made->joined = true;
  return Communicator(std::move(made));
}

}  // namespace plexus
