// Groups (ABI 1.2): communicators over a subset of the job's ranks, in any
// order. A backend with comm_split is split natively (two groups with keys
// that reverse the order, a rank of no color, groups of one); every backend
// also gets groups through comm_create over the group's ranks with an
// out-of-band channel over those ranks only (plexus_oob.members), as the
// host makes them for a backend without comm_split: two groups, a subset
// in a permuted order that leaves a rank out, a group of one rank, and two
// groups sharing ranks used from two threads at once (made with comm_split
// when the backend has it, as the host would). On each group, an
// allreduce over it and a broadcast from every group rank: exact results,
// and the broadcast data say which process each group rank is. (A dead peer
// inside a group is among the last checks, checks_dead_peer.cpp.)
//
// The suite computes each rank's group as the host does (rank order by
// (key, rank), local ranks by host name) and passes it in the config. A
// backend with comm_split may refuse comm_create over a subset cleanly
// (SKIP): the host makes its groups with comm_split then.
#include <algorithm>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "check.hpp"
#include "groups.hpp"
#include "options.hpp"
#include "plugin.hpp"
#include "requests.hpp"

namespace plexus::conformance {
namespace {

std::string CommName(const Context& ctx, const std::string& label) {
  return "conformance/group/" + std::to_string(ctx.seq) + "/" + label;
}

// A partition of the job: color and key per rank.
struct Partition {
  std::vector<uint32_t> colors, keys;
};

// Even and odd ranks, each group in reverse rank order.
Partition TwoGroups(uint32_t size) {
  Partition p;
  for (uint32_t r = 0; r < size; ++r) {
    p.colors.push_back(r % 2);
    p.keys.push_back(size - 1 - r);
  }
  return p;
}

// Rank 1 joins none; the others form one group in reverse rank order.
Partition OneLeftOut(uint32_t size) {
  Partition p;
  for (uint32_t r = 0; r < size; ++r) {
    p.colors.push_back(r == 1 ? PLEXUS_SPLIT_NO_COLOR : 5);
    p.keys.push_back(size - 1 - r);
  }
  return p;
}

// Every rank alone.
Partition Singletons(uint32_t size) {
  Partition p;
  for (uint32_t r = 0; r < size; ++r) {
    p.colors.push_back(r);
    p.keys.push_back(0);
  }
  return p;
}

// "[1, 0] and [2]", and who joins none.
std::string Describe(const Partition& p) {
  std::vector<uint32_t> seen;
  std::string s, none;
  for (uint32_t r = 0; r < p.colors.size(); ++r) {
    const uint32_t c = p.colors[r];
    if (c == PLEXUS_SPLIT_NO_COLOR) {
      none += (none.empty() ? "" : ", ") + std::to_string(r);
      continue;
    }
    if (std::find(seen.begin(), seen.end(), c) != seen.end()) continue;
    seen.push_back(c);
    s += (s.empty() ? "" : " and ") + RankList(SplitMembers(p.colors, p.keys, c));
  }
  if (!none.empty()) s += "; rank(s) " + none + " in none";
  return s;
}

// Skips unless the group checks can run; fills the dtypes.
std::string CannotRun(const Context& ctx, plexus_dtype_t* rdt, plexus_dtype_t* mdt) {
  return GroupOpsMissing(ctx.caps(), rdt, mdt);
}

// One group of this rank, made and exercised. use_split: comm_split on the
// shared communicator; else comm_create over the members.
Outcome OnPartition(Context& ctx, const Partition& p, bool use_split) {
  plexus_dtype_t rdt = 0, mdt = 0;
  if (use_split && !ctx.plugin().has_comm_split()) {
    return Outcome::Skip(ctx.plugin().NoCommSplitReason());
  }
  if (const std::string why = CannotRun(ctx, &rdt, &mdt); !why.empty()) return Outcome::Skip(why);
  std::vector<std::string> hosts;
  if (const std::string e = JobHosts(ctx, &hosts); !e.empty()) return Outcome::Fail(e);
  const std::string summary = "groups " + Describe(p);
  const uint32_t color = p.colors[ctx.rank], key = p.keys[ctx.rank];
  const int64_t T = ctx.options.timeout_ms;
  GroupComm group(ctx);
  Findings f;
  if (color == PLEXUS_SPLIT_NO_COLOR) {
    // Nothing to make: not in a group. (A SKIP, so that the check's verdict
    // is the members': the same detail, but PASS only if one of them passed.)
    if (!use_split) return Outcome::Skip(summary);
    const int32_t rc = group.Split(ctx.comm(), color, key, nullptr, CommName(ctx, "none"), T);
    if (rc != PLEXUS_OK) {
      Outcome o = Outcome::Fail("comm_split(color NO_COLOR) returned " + StatusText(rc) + ": " +
                                group.error());
      o.comm_broken = true;
      return o;
    }
    if (group.get()) {
      f.Add("comm_split(color NO_COLOR) returned OK with a communicator (want *comm_out NULL)");
    }
    return f.ToOutcome(summary);
  }
  const std::vector<uint32_t> members = SplitMembers(p.colors, p.keys, color);
  const GroupShape shape = ShapeIn(ctx, members, hosts);
  const std::string label = "color-" + std::to_string(color);
  const std::string what =
      use_split ? "comm_split(color " + std::to_string(color) + ", key " + std::to_string(key) + ")"
                : "comm_create over " + RankList(members);
  const int32_t rc = use_split
                         ? group.Split(ctx.comm(), color, key, &shape, CommName(ctx, label), T)
                         : group.Create(shape, CommName(ctx, label), T);
  if (rc != PLEXUS_OK || !group.get()) {
    const std::string problem =
        what + " as rank " + std::to_string(shape.rank) + " of " + std::to_string(shape.size) +
        " returned " + StatusText(rc) +
        (rc == PLEXUS_OK ? " with a NULL communicator" : ": " + group.error()) +
        (group.stray() ? " (and left *comm_out non-NULL)" : "");
    if (!use_split && rc < 0 && !group.stray() && ctx.plugin().has_comm_split()) {
      // The host makes groups with comm_split when there is one: a clean
      // refusal of comm_create over a subset costs it nothing.
      return Outcome::Skip(problem +
                           " (the backend has comm_split, which the host uses for groups)");
    }
    Outcome o = Outcome::Fail(problem);
    o.comm_broken = use_split;  // a failed split leaves the shared communicator unknown
    return o;
  }
  bool leaked = false;
  ExerciseGroup(ctx, group.get(), shape, rdt, mdt, ctx.seq, "group " + RankList(members), &f,
                &leaked);
  if (leaked) group.MarkLeaked();
  return f.ToOutcome(summary + "; an allreduce and a broadcast from every group rank on each");
}

// comm_create over an explicit list (every rank passes the same one).
Outcome OnGroup(Context& ctx, const std::vector<uint32_t>& members) {
  Partition p;
  for (uint32_t r = 0; r < ctx.size; ++r) {
    p.colors.push_back(PLEXUS_SPLIT_NO_COLOR);
    p.keys.push_back(0);
  }
  for (uint32_t g = 0; g < members.size(); ++g) {
    p.colors[members[g]] = 0;
    p.keys[members[g]] = g;
  }
  return OnPartition(ctx, p, false);
}

// A subset in a permuted order: every rank but rank 1 (with 3 ranks or
// more), in reverse rank order; with 2 ranks both, reversed.
std::vector<uint32_t> PermutedSubset(uint32_t size) {
  std::vector<uint32_t> members;
  for (uint32_t r = size; r-- > 0;) {
    if (size >= 3 && r == 1) continue;
    members.push_back(r);
  }
  return members;
}

// Two groups over the same ranks: every rank, reversed; and every rank
// rotated by one (with 2 ranks: in rank order).
std::vector<uint32_t> AllReversed(uint32_t size) {
  std::vector<uint32_t> m;
  for (uint32_t r = size; r-- > 0;) m.push_back(r);
  return m;
}
std::vector<uint32_t> AllRotated(uint32_t size) {
  std::vector<uint32_t> m;
  const uint32_t shift = size > 2 ? 1 : 0;
  for (uint32_t i = 0; i < size; ++i) m.push_back((i + shift) % size);
  return m;
}

constexpr int kThreadRounds = 3;

Outcome SharedRanksFromThreads(Context& ctx) {
  if (ctx.caps().thread_level != PLEXUS_THREAD_MULTIPLE) {
    return Outcome::Skip("thread_level is serialized");
  }
  plexus_dtype_t rdt = 0, mdt = 0;
  if (const std::string why = CannotRun(ctx, &rdt, &mdt); !why.empty()) return Outcome::Skip(why);
  std::vector<std::string> hosts;
  if (const std::string e = JobHosts(ctx, &hosts); !e.empty()) return Outcome::Fail(e);
  const std::vector<uint32_t> xm = AllReversed(ctx.size), ym = AllRotated(ctx.size);
  // (Every rank is in both groups.)
  const GroupShape xs = ShapeIn(ctx, xm, hosts), ys = ShapeIn(ctx, ym, hosts);
  const int64_t T = ctx.options.timeout_ms;
  GroupComm x(ctx), y(ctx);
  // Made one after the other (one at a time per backend), as the host
  // would: comm_split when there is one, else comm_create.
  std::string how;
  int32_t rc = MakeGroup(ctx, x, xm, hosts, CommName(ctx, "x"), T, &how);
  if (rc != PLEXUS_OK || !x.get()) {
    Outcome o = Outcome::Fail(how + " for group X " + RankList(xm) + " returned " + StatusText(rc) +
                              ": " + x.error());
    o.comm_broken = ctx.plugin().has_comm_split();
    return o;
  }
  rc = MakeGroup(ctx, y, ym, hosts, CommName(ctx, "y"), T, &how);
  if (rc != PLEXUS_OK || !y.get()) {
    Outcome o = Outcome::Fail(how + " for group Y " + RankList(ym) + " returned " + StatusText(rc) +
                              ": " + y.error());
    o.comm_broken = ctx.plugin().has_comm_split();
    return o;
  }
  Findings fx, fy;
  bool lx = false, ly = false;
  auto rounds = [&](plexus_comm* comm, const GroupShape& shape, uint64_t salt_base,
                    const std::string& where, Findings* f, bool* leaked) {
    for (int k = 0; k < kThreadRounds && f->empty(); ++k) {
      ExerciseGroup(ctx, comm, shape, rdt, mdt, salt_base + uint64_t(k), where, f, leaked);
    }
  };
  std::thread other(
      [&] { rounds(y.get(), ys, ctx.seq * 16 + 8, "group Y " + RankList(ym), &fy, &ly); });
  rounds(x.get(), xs, ctx.seq * 16, "group X " + RankList(xm), &fx, &lx);
  other.join();
  if (lx) x.MarkLeaked();
  if (ly) y.MarkLeaked();
  Findings f;
  if (!fx.empty()) f.Add(fx.ToOutcome().detail);
  if (!fy.empty()) f.Add(fy.ToOutcome().detail);
  const char* made = ctx.plugin().has_comm_split() ? "comm_split" : "comm_create";
  return f.ToOutcome("groups X " + RankList(xm) + " and Y " + RankList(ym) + " (" + made + "), " +
                     std::to_string(kThreadRounds) + " rounds each, one thread per group");
}

Check Make(const std::string& name, std::function<Outcome(Context&)> fn) {
  Check c;
  c.name = name;
  c.group = "groups";
  c.run = std::move(fn);
  return c;
}

}  // namespace

std::vector<Check> GroupChecks(const plexus_capabilities&, uint32_t size) {
  std::vector<Check> out;
  const Partition two = TwoGroups(size);
  out.push_back(Make("groups: comm_split into two groups, keys reversing the order",
                     [two](Context& ctx) { return OnPartition(ctx, two, true); }));
  if (size >= 3) {
    const Partition left = OneLeftOut(size);
    out.push_back(Make("groups: comm_split with a rank of no color",
                       [left](Context& ctx) { return OnPartition(ctx, left, true); }));
  } else {
    out.push_back(Make("groups: comm_split with a rank of no color",
                       [](Context&) { return Outcome::Skip("needs at least 3 ranks"); }));
  }
  const Partition one = Singletons(size);
  out.push_back(Make("groups: comm_split into groups of one rank",
                     [one](Context& ctx) { return OnPartition(ctx, one, true); }));
  out.push_back(Make("groups: comm_create of two groups, keys reversing the order",
                     [two](Context& ctx) { return OnPartition(ctx, two, false); }));
  const std::vector<uint32_t> subset = PermutedSubset(size);
  out.push_back(Make("groups: comm_create over ranks " + RankList(subset) + " in that order",
                     [subset](Context& ctx) { return OnGroup(ctx, subset); }));
  out.push_back(Make("groups: comm_create of a group of one rank",
                     [one](Context& ctx) { return OnPartition(ctx, one, false); }));
  out.push_back(Make("groups: two groups sharing ranks, used from two threads at once",
                     SharedRanksFromThreads));
  return out;
}

}  // namespace plexus::conformance
