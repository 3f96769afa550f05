// The last check: a peer dies. The last rank reports its result through the
// store and leaves with _exit(0), destroying nothing (as a crash would, but
// with status 0 so that plexus-run, which stops a job only when a rank exits
// non-zero or by a signal, lets the survivors report). The survivors then
// post an allreduce on a communicator that includes the dead rank: it must
// fail within 4x timeout_ms with an error that names the dead rank.
//
// Under Open MPI's mpirun a process that called MPI_Init and exits without
// MPI_Finalize makes mpirun kill the whole job, whatever the exit status,
// unless orte_allowed_exit_without_sync is set; without it the check is
// skipped, saying how to enable it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "check.hpp"
#include "exchange.hpp"
#include "fault_support.hpp"
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

Outcome DeadPeer(Context& ctx) {
  if (ctx.size < 2) return Outcome::Skip("needs at least 2 ranks");
  if (!(ctx.caps().collectives & (1u << PLEXUS_COLL_ALLREDUCE)) ||
      !(ctx.caps().reduce_dtypes[PLEXUS_OP_SUM] & (1u << PLEXUS_DTYPE_INT32))) {
    return Outcome::Skip("needs an int32 sum allreduce");
  }
  if (UnderOpenMpiWithoutExitPermission()) {
    return Outcome::Skip(
        "under Open MPI's mpirun a rank exiting without MPI_Finalize ends the "
        "job; run with --mca orte_allowed_exit_without_sync 1 to check this");
  }
  const int64_t T = ctx.options.fault_timeout_ms;
  ScenarioComm comm(ctx, "dead-peer", T);
  if (!comm.get()) {
    return Outcome::Fail("comm_create failed: " + StatusText(comm.status()) + ": " + comm.error());
  }
  const uint32_t dead = ctx.size - 1;
  const std::string where = "dead/" + std::to_string(ctx.seq);
  if (ctx.rank == dead) {
    (void)ctx.exchange().Set(where, Hostname() + " " + std::to_string(long(getpid())));
    (void)ctx.exchange().Publish(ctx.seq,
                                 Outcome::Pass("exited with _exit(0), destroying nothing"));
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(0);
  }
  ctx.session.MarkRankGone(dead);
  // Make sure it is really gone before posting: the check is about a dead
  // peer, not a late one.
  std::string whereabouts;
  Status st = ctx.exchange().Get(where, &whereabouts, ctx.exchange().timeout());
  if (!st.ok())
    return Outcome::Fail("rank " + std::to_string(dead) +
                         " never got ready to exit: " + st.message());
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

  Findings f;
  std::string detail;
  Operation op(ctx, comm.get(), PLEXUS_DTYPE_INT32);
  plexus_request* req = op.PostAllreduce(PLEXUS_OP_SUM, 1024, ctx.seq);
  if (!req) {
    // Refusing the post is fine if the error says who is gone.
    const std::string err = ctx.plugin().LastError(comm.get());
    bool ignored = false;
    Findings post;
    op.Finish(&post, &ignored);
    if (!NamesRank(err, comm.name(), dead)) {
      f.Add("the post was refused with an error that does not name rank " + std::to_string(dead) +
            ": '" + err + "'");
    }
    return f.ToOutcome("post refused: " + err);
  }
  const int64_t bound = 4 * T;
  const Completion c = WaitFor(ctx.plugin(), req, bound + 5000);
  if (!c.done) {
    f.Add("the allreduce with a dead peer did not complete within " + std::to_string(bound + 5000) +
          " ms (timeout_ms " + std::to_string(T) + ")");
    if (!AbortAndReap(ctx.plugin(), comm.get(), req)) {
      op.Abandon();
      comm.MarkLeaked();
    } else {
      op.KeepAfterFailure("allreduce in '" + comm.name() + "'");
    }
    return f.ToOutcome();
  }
  f.Add(c.violation);
  if (c.status == PLEXUS_OK) {
    f.Add("the allreduce completed OK although rank " + std::to_string(dead) + " is dead");
  } else {
    if (c.elapsed_ms > bound) {
      f.Add("failed only after " + std::to_string(c.elapsed_ms) +
            " ms (want within 4x timeout_ms = " + std::to_string(bound) + " ms)");
    }
    const std::string text = CheckErrorStrings(ctx, comm.get(), req, c.status, &f);
    if (!NamesRank(text, comm.name(), dead)) {
      f.Add("the error does not name the dead rank " + std::to_string(dead) + ": '" + text + "'");
    }
    detail = StatusText(c.status) + " after " + std::to_string(c.elapsed_ms) + " ms: " + text;
  }
  if (c.status != PLEXUS_OK) op.KeepAfterFailure("the allreduce with a dead peer");
  f.Add(CheckAndFree(ctx.plugin(), req, c.status));
  return f.ToOutcome(detail);
}

}  // namespace

Check DeadPeerCheck(uint32_t) {
  Check c;
  c.name = "failures: a peer dies (the last check)";
  c.group = "failures";
  c.run = DeadPeer;
  return c;
}

}  // namespace plexus::conformance
