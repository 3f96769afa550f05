// The last checks: a peer dies. Before it does, every rank makes the
// communicators of both checks with the fault timeout: one over the whole
// job, and a group (comm_create over [last rank, 0], in that order, with
// the other ranks in none). Then the last rank reports its result through
// the store and leaves with _exit(0), destroying nothing (as a crash would,
// but with status 0 so that plexus-run, which stops a job only when a rank
// exits non-zero or by a signal, lets the survivors report). The survivors
// then post an allreduce on each communicator that includes the dead rank:
// it must fail within 4x timeout_ms with an error that names the dead rank
// (in a group: its group rank or its job rank). The dead rank's results of
// the checks after the one it left in count as SKIP (Exchange::MarkGone).
//
// Under Open MPI's mpirun a process that called MPI_Init and exits without
// MPI_Finalize makes mpirun kill the whole job, whatever the exit status,
// unless orte_allowed_exit_without_sync is set; without it the check is
// skipped, saying how to enable it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "check.hpp"
#include "exchange.hpp"
#include "fault_support.hpp"
#include "groups.hpp"
#include "operation.hpp"
#include "options.hpp"
#include "plugin.hpp"
#include "session.hpp"

namespace plexus::conformance {
namespace {

bool UnderOpenMpiWithoutExitPermission() {
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return false;
  const char* v = std::getenv("OMPI_MCA_orte_allowed_exit_without_sync");
  const std::string s = v ? v : "";
  return !(s == "1" || s == "true" || s == "yes");
}

std::string Hostname() {
  char name[256] = "";
  gethostname(name, sizeof name - 1);
  return name;
}

// True once pid has exited (gone, or a zombie: plexus-run reaps ranks only
// at the end of the job).
bool Exited(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] == 'Z' ||
         line[paren + 2] == 'X';
}

constexpr const char* kWorldName = "failures: a peer dies (the last checks)";
constexpr const char* kGroupName = "groups: a peer inside a group dies (the last checks)";

// A communicator the last checks made before the rank left. Destroyed by
// the check that uses it (never from a destructor: the list of checks
// outlives the session).
struct Kept {
  plexus_comm* comm = nullptr;
  std::string name;
  std::string error;  // why it could not be made
};

// What the last checks share.
struct Aftermath {
  bool want_world = false, want_group = false;  // selected (--only)
  bool prepared = false;
  std::string skip;  // why none of them can run
  uint32_t dead = 0;
  Kept world;
  Kept group;
  std::vector<uint32_t> group_members;  // job ranks, group order
  bool in_group = false;
};

// Run by whichever of the last checks comes first: makes the communicators,
// then the last rank leaves and the others wait until it is gone.
void Prepare(Context& ctx, Aftermath& a) {
  a.prepared = true;
  if (ctx.size < 2) {
    a.skip = "needs at least 2 ranks";
    return;
  }
  if (!(ctx.caps().collectives & (1u << PLEXUS_COLL_ALLREDUCE)) ||
      !(ctx.caps().reduce_dtypes[PLEXUS_OP_SUM] & (1u << PLEXUS_DTYPE_INT32))) {
    a.skip = "needs an int32 sum allreduce";
    return;
  }
  if (UnderOpenMpiWithoutExitPermission()) {
    a.skip =
        "under Open MPI's mpirun a rank exiting without MPI_Finalize ends the "
        "job; run with --mca orte_allowed_exit_without_sync 1 to check this";
    return;
  }
  const int64_t T = ctx.options.fault_timeout_ms;
  a.dead = ctx.size - 1;
  if (a.want_world) {
    const int32_t rc =
        ctx.session.CreateComm("dead-peer", T, &a.world.comm, &a.world.error, &a.world.name);
    if (rc != PLEXUS_OK) {
      a.world.comm = nullptr;
      a.world.error = "comm_create failed: " + StatusText(rc) + ": " + a.world.error;
    }
  }
  if (a.want_group) {
    // Made as the host would: comm_split when there is one, else comm_create.
    a.group_members = {a.dead, 0};
    a.in_group = ctx.rank == a.dead || ctx.rank == 0;
    a.group.name = "conformance/group/" + std::to_string(ctx.seq) + "/dead-peer";
    std::vector<std::string> hosts;
    if (const std::string e = JobHosts(ctx, &hosts); !e.empty()) {
      a.group.error = e;
    } else {
      GroupComm made(ctx);
      std::string how;
      const int32_t rc = MakeGroup(ctx, made, a.group_members, hosts, a.group.name, T, &how);
      if (rc != PLEXUS_OK || (a.in_group && !made.get())) {
        a.group.error = how + " for the group " + RankList(a.group_members) +
                        " failed: " + StatusText(rc) + ": " + made.error();
      }
      a.group.comm = made.release();
    }
  }
  const std::string where = "dead/" + std::to_string(ctx.seq);
  if (ctx.rank == a.dead) {
    (void)ctx.exchange().Set(where, Hostname() + " " + std::to_string(long(getpid())));
    (void)ctx.exchange().Publish(ctx.seq,
                                 Outcome::Pass("exited with _exit(0), destroying nothing"));
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);
  }
  ctx.session.MarkRankGone(a.dead, ctx.seq);
  // Make sure it is really gone before posting: the checks are about a dead
  // peer, not a late one.
  std::string whereabouts;
  Status st = ctx.exchange().Get(where, &whereabouts, ctx.exchange().timeout());
  if (!st.ok()) {
    a.skip = "rank " + std::to_string(a.dead) + " never got ready to exit: " + st.message();
    return;
  }
  const size_t space = whereabouts.find(' ');
  if (space != std::string::npos && whereabouts.substr(0, space) == Hostname()) {
    const long pid = std::atol(whereabouts.c_str() + space + 1);
    const auto start = Clock::now();
    while (!Exited(pid) && MillisSince(start) < 10000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

// An allreduce on comm, which includes the dead peer (dead_names: the
// numbers its error may name it by), must fail within 4x timeout_ms naming
// it. Destroys comm unless a request was leaked.
Outcome PostWithDeadPeer(Context& ctx, Kept& kept, const std::vector<uint32_t>& dead_names,
                         const std::string& dead_text) {
  const int64_t T = ctx.options.fault_timeout_ms;
  plexus_comm* comm = kept.comm;
  bool leaked = false;
  auto names_dead = [&](const std::string& text) {
    for (uint32_t r : dead_names) {
      if (NamesRank(text, kept.name, r)) return true;
    }
    return false;
  };
  Findings f;
  std::string detail;
  {
    Operation op(ctx, comm, PLEXUS_DTYPE_INT32);
    plexus_request* req = op.PostAllreduce(PLEXUS_OP_SUM, 1024, ctx.seq);
    if (!req) {
      // Refusing the post is fine if the error says who is gone.
      const std::string err = ctx.plugin().LastError(comm);
      bool ignored = false;
      Findings post;
      op.Finish(&post, &ignored);
      if (!names_dead(err)) {
        f.Add("the post was refused with an error that does not name " + dead_text + ": '" + err +
              "'");
      }
      detail = "post refused: " + err;
    } else {
      const int64_t bound = 4 * T;
      const Completion c = WaitFor(ctx.plugin(), req, bound + 5000);
      if (!c.done) {
        f.Add("the allreduce with a dead peer did not complete within " +
              std::to_string(bound + 5000) + " ms (timeout_ms " + std::to_string(T) + ")");
        if (!AbortAndReap(ctx.plugin(), comm, req)) {
          op.Abandon();
          leaked = true;
        } else {
          op.KeepAfterFailure("allreduce in '" + kept.name + "'");
        }
      } else {
        f.Add(c.violation);
        if (c.status == PLEXUS_OK) {
          f.Add("the allreduce completed OK although " + dead_text + " is dead");
        } else {
          if (c.elapsed_ms > bound) {
            f.Add("failed only after " + std::to_string(c.elapsed_ms) +
                  " ms (want within 4x timeout_ms = " + std::to_string(bound) + " ms)");
          }
          const std::string text = CheckErrorStrings(ctx, comm, req, c.status, &f);
          if (!names_dead(text)) {
            f.Add("the error does not name " + dead_text + ": '" + text + "'");
          }
          detail = StatusText(c.status) + " after " + std::to_string(c.elapsed_ms) + " ms: " + text;
        }
        if (c.status != PLEXUS_OK) op.KeepAfterFailure("the allreduce with a dead peer");
        f.Add(CheckAndFree(ctx.plugin(), req, c.status));
      }
    }
  }
  ctx.session.DestroyComm(comm, leaked);
  kept.comm = nullptr;
  return f.ToOutcome(detail);
}

Outcome WorldCheck(Context& ctx, Aftermath& a) {
  if (!a.prepared) Prepare(ctx, a);
  if (!a.skip.empty()) return Outcome::Skip(a.skip);
  if (!a.world.comm) return Outcome::Fail(a.world.error);
  return PostWithDeadPeer(ctx, a.world, {a.dead}, "the dead rank " + std::to_string(a.dead));
}

Outcome GroupCheck(Context& ctx, Aftermath& a) {
  if (!a.prepared) Prepare(ctx, a);
  if (!a.skip.empty()) return Outcome::Skip(a.skip);
  if (!a.group.error.empty() && !a.group.comm) return Outcome::Fail(a.group.error);
  if (!a.in_group) return Outcome::Pass("not in the group " + RankList(a.group_members));
  // The dead rank is group rank 0 (job rank a.dead).
  Outcome o = PostWithDeadPeer(ctx, a.group, {0, a.dead},
                               "the dead group rank 0 (job rank " + std::to_string(a.dead) + ")");
  if (o.verdict == Verdict::kPass) {
    o.detail = "group " + RankList(a.group_members) + " (" +
               (ctx.plugin().has_comm_split() ? "comm_split" : "comm_create") + "): " + o.detail;
  }
  return o;
}

}  // namespace

std::vector<Check> DeadPeerChecks(uint32_t, const Options& options) {
  auto state = std::make_shared<Aftermath>();
  // The runner drops the ones --only does not select: the first of the
  // others must make only the communicators they use.
  state->want_world = Selects(options, kWorldName);
  state->want_group = Selects(options, kGroupName);
  Check world;
  world.name = kWorldName;
  world.group = "failures";
  world.run = [state](Context& ctx) { return WorldCheck(ctx, *state); };
  Check group;
  group.name = kGroupName;
  group.group = "groups";
  group.run = [state](Context& ctx) { return GroupCheck(ctx, *state); };
  return {world, group};
}

}  // namespace plexus::conformance
