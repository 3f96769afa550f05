#include "runner.hpp"

#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>

#include "check.hpp"
#include "crash_report.hpp"
#include "job.hpp"
#include "journal.hpp"
#include "local_rendezvous.hpp"
#include "plugin.hpp"
#include "rank_record.hpp"
#include "report.hpp"
#include "requests.hpp"
#include "restarts.hpp"
#include "session.hpp"
#include "watchdog.hpp"

#ifndef PLEXUS_VERSION_STRING
#define PLEXUS_VERSION_STRING "unknown"
#endif

namespace plexus::conformance {
namespace {

// Rank 0's capabilities, so that every rank builds the same check list
// (a rank whose capabilities differ fails "the same on every rank").
Status AgreeOnCapabilities(Session& session) {
  plexus_capabilities caps = session.plugin().caps();
  if (session.size() == 1) {
    session.set_plan_caps(caps);
    return Status::Ok();
  }
  Exchange& ex = session.exchange();
  if (session.rank() == 0) {
    Status st =
        ex.Set("capabilities", std::string(reinterpret_cast<const char*>(&caps), sizeof caps));
    if (!st.ok()) return st;
  } else {
    std::string bytes;
    Status st = ex.Get("capabilities", &bytes, ex.timeout());
    if (!st.ok()) return st;
    if (bytes.empty())
      return Status::Unsupported("rank 0 could not load or initialise the backend");
    if (bytes.size() != sizeof caps) return Status::Internal("malformed capabilities from rank 0");
    std::memcpy(&caps, bytes.data(), sizeof caps);
  }
  session.set_plan_caps(caps);
  return Status::Ok();
}

std::vector<Check> BuildList(const Session& session) {
  const plexus_capabilities& caps = session.plan_caps();
  const uint32_t size = session.size();
  const Options& o = session.options();
  std::vector<Check> all;
  for (auto* part : {&TableChecks}) {
    auto v = (*part)(caps, size);
    all.insert(all.end(), v.begin(), v.end());
  }
  auto append = [&](std::vector<Check> v) { all.insert(all.end(), v.begin(), v.end()); };
  append(CollectiveChecks(caps, size, o));
  append(RequestChecks(caps, size));
  append(ArgumentChecks(caps, size));
  append(GroupChecks(caps, size));
  append(SharedBufferChecks(caps, size));
  append(FailureChecks(caps, size));  // with MismatchChecks
  append(DeadPeerChecks(size, o));    // last: a rank exits
  std::vector<Check> selected;
  for (Check& c : all) {
    if (Selects(o, c.name)) selected.push_back(std::move(c));
  }
  return selected;
}

// After a restart: whether the check list is the one the earlier runs
// numbered (the same plugin, capabilities and options give the same list).
bool SameListAsBefore(const std::vector<Check>& checks, int64_t resume_after,
                      const JournalContents& past, std::string* why) {
  if (resume_after >= int64_t(checks.size())) {
    *why = "an earlier run reached check " + std::to_string(resume_after) + ", but the list has " +
           std::to_string(checks.size());
    return false;
  }
  for (const JournalEntry& e : past.checks) {
    if (e.index != resume_after) continue;
    if (e.name == checks[size_t(resume_after)].name) return true;
    *why = "check " + std::to_string(resume_after) + " was '" + e.name + "' and is now '" +
           checks[size_t(resume_after)].name + "'";
    return false;
  }
  *why = "the journal has no check " + std::to_string(resume_after);
  return false;
}

int RunRankSteps(const Options& options) {
  if (std::string error; !PrepareLocalRendezvous(options.timeout_ms + 30000, &error)) {
    std::fprintf(stderr,
                 "plexus-conformance: %s. The suite gathers its results through the rendezvous "
                 "store, never through the backend under test: set PLEXUS_MASTER_ADDR and "
                 "PLEXUS_MASTER_PORT (a free port on rank 0's host)\n",
                 error.c_str());
    return 2;
  }
  std::shared_ptr<Job> job;
  Status st = GetJob(std::chrono::milliseconds(options.timeout_ms + 30000), &job);
  if (!st.ok()) {
    std::fprintf(stderr, "plexus-conformance: %s\n", st.message().c_str());
    return 2;
  }
  const uint32_t rank = job->launch.rank, size = job->launch.size;
  const bool lead = rank == 0;
  if (!job->has_rendezvous) {
    std::fprintf(stderr,
                 "plexus-conformance[%u]: %s. The suite gathers its results through the "
                 "rendezvous store, never through the backend under test: under mpirun set "
                 "PLEXUS_MASTER_ADDR and PLEXUS_MASTER_PORT (a free port on rank 0's host)\n",
                 rank, NoRendezvousMessage(job->launch).c_str());
    return 2;
  }
  if (lead && options.nproc_given && options.nproc != size) {
    std::fprintf(stderr,
                 "plexus-conformance: -n %u ignored: the launcher (%s) started %u rank(s)\n",
                 options.nproc, job->launch.source.c_str(), size);
  }
  // Restartable when the suite started the ranks itself (restarts.hpp).
  const bool restartable = InitRankRecord(rank);
  const int64_t resume_after = restartable ? ResumeAfter() : kNoCheck;
  Report report(stdout);
  Journal journal(lead && restartable ? StateDir() : std::string());
  Watchdog watchdog(rank, job->launch.source);
  InstallCrashReporter(rank, job->launch.source);
  SetCurrentCheck(kNoCheck, "load and init");

  std::unique_ptr<Plugin> plugin;
  watchdog.Arm("load and init", options.timeout_ms + 60000);
  st = Plugin::Open(options.backend, job->local_address, options.verbose, &plugin);
  watchdog.Disarm();
  ReclaimFatalSignals();
  if (!st.ok()) {
    if (lead) {
      // The other ranks wait for rank 0's capabilities: an empty value tells
      // them there will be none.
      Exchange(job->store.get(), rank, size, std::chrono::milliseconds(options.timeout_ms))
          .Set("capabilities", "");
      report.Line("FAIL  load and init  " + st.message());
      report.Line("RESULT: backend '" + options.backend +
                  "' could not be loaded: DOES NOT CONFORM");
      journal.Done();
    }
    return 1;
  }
  auto session = std::make_unique<Session>(options, job, std::move(plugin));
  Exchange& ex = session->exchange();
  const plexus_backend_v1& table = session->plugin().table();
  if (lead && resume_after == kNoCheck) {
    journal.Header(table.name, size);
    report.Line(std::string("plexus-conformance ") + PLEXUS_VERSION_STRING + ": backend '" +
                table.name + "' version '" + table.version + "', ABI " +
                std::to_string(table.abi_major) + "." + std::to_string(table.abi_minor));
    report.Line("  plugin " + session->plugin().path());
    report.Line("  " + std::to_string(size) + " rank(s) from " + job->launch.source + "; timeout " +
                std::to_string(options.timeout_ms) + " ms, fault timeout " +
                std::to_string(options.fault_timeout_ms) + " ms, max count " +
                std::to_string(options.max_count) +
                (options.only.empty() ? "" : ", only '" + options.only + "'"));
    report.Line(restartable
                    ? "  after a crash or hang the ranks are started again past that "
                      "check, at most " +
                          std::to_string(options.max_restarts) +
                          (options.max_restarts == 1 ? " time" : " times") + " (--max-restarts)"
                    : "  a crash or hang ends the run: the ranks came from a launcher (" +
                          job->launch.source +
                          "), not from the suite, which cannot start them again");
  }
  st = AgreeOnCapabilities(*session);
  if (!st.ok()) {
    std::fprintf(stderr, "plexus-conformance[%u]: exchanging capabilities: %s\n", rank,
                 st.message().c_str());
    return 1;
  }

  // The shared communicator comes first; without it nothing else can run.
  Check create;
  create.name = "comm_create of the shared communicator";
  create.group = "table";
  create.run = [](Context& ctx) {
    std::string error;
    const int32_t rc = ctx.session.RenewMainComm(&error);
    if (rc == PLEXUS_OK && ctx.comm()) return Outcome::Pass();
    return Outcome::Fail("comm_create returned " + StatusText(rc) +
                         (rc == PLEXUS_OK ? " with a NULL communicator" : ": " + error));
  };
  std::vector<Check> checks = BuildList(*session);
  checks.insert(checks.begin(), std::move(create));
  if (lead && resume_after != kNoCheck) {
    // The ranks were started again after a crash: count what the earlier
    // runs printed, and make sure "check N" means the same check.
    const JournalContents past = ReadJournal(StateDir());
    std::string why;
    if (!SameListAsBefore(checks, resume_after, past, &why)) {
      std::fprintf(stderr, "plexus-conformance: cannot go on after the restart: %s\n", why.c_str());
      return 2;
    }
    for (const JournalEntry& e : past.checks) {
      report.Restore(e.group, e.capability, e.verdict, e.ended);
    }
  }

  const int64_t default_limit = 4 * (options.timeout_ms + 5000) + 120000;
  uint64_t seq = 0;
  bool broke_down = false;
  for (size_t i = 0; i < checks.size(); ++i) {
    // After a restart the shared communicator (check 0) is made again, its
    // line printed only if that fails, and the checks the earlier runs
    // covered, the one that crashed included, are skipped.
    const bool remake_shared = i == 0 && resume_after != kNoCheck;
    if (i > 0 && int64_t(i) <= resume_after) continue;
    const Check& check = checks[i];
    Context ctx{options, *session, ++seq, rank, size};
    watchdog.Arm(check.name, check.limit_ms ? check.limit_ms : default_limit);
    SetCurrentCheck(int64_t(i), check.name, check.group, check.capability);
    Outcome mine;
    try {
      mine = check.run(ctx);
    } catch (const std::exception& e) {
      mine = Outcome::Fail(std::string("the suite itself failed: ") + e.what());
      mine.comm_broken = true;
    }
    watchdog.Disarm();
    if (i == 0) ReclaimFatalSignals();  // a backend may set up its transports in comm_create
    std::vector<Outcome> all;
    bool renew = false, stop = false;
    auto print = [&](const std::vector<Outcome>& by_rank, bool stopping) {
      if (remake_shared && !stopping) return;
      const Outcome merged = report.Add(check, by_rank);
      journal.Add({int64_t(i), merged.verdict, '-', check.group, check.capability, check.name});
    };
    st = ex.Report(ctx.seq, mine, &all, &renew, &stop, /*stop_on_failure=*/i == 0, print);
    if (!st.ok()) {
      std::fprintf(stderr, "plexus-conformance[%u]: reporting '%s': %s\n", rank, check.name.c_str(),
                   st.message().c_str());
      broke_down = true;
      break;
    }
    if (lead && i == 0) RemoveLocalRendezvousFile();  // every rank has reported through the store
    if (stop) {
      if (lead) report.Line("(stopping: the checks that follow need what just failed)");
      break;
    }
    // A rank has exited on purpose (the dead-peer checks, which run last on
    // communicators made before it left): a new shared communicator could
    // not include it, and the checks after it do not use one.
    if (!renew || session->any_gone()) continue;
    Check replace;
    replace.name = "comm_create of a new shared communicator (the last one is broken)";
    replace.group = "table";
    watchdog.Arm(replace.name, options.timeout_ms + 60000);
    SetCurrentCheck(int64_t(i), replace.name, replace.group);
    std::string error;
    const int32_t rc = session->RenewMainComm(&error);
    watchdog.Disarm();
    Outcome r = rc == PLEXUS_OK
                    ? Outcome::Pass()
                    : Outcome::Fail("comm_create returned " + StatusText(rc) + ": " + error);
    // Printed only when it failed: replacing is the suite's business.
    auto print_failure = [&](const std::vector<Outcome>& by_rank, bool stopping) {
      if (!stopping) return;
      const Outcome merged = report.Add(replace, by_rank);
      journal.Add({int64_t(i), merged.verdict, '-', replace.group, "", replace.name});
    };
    st = ex.Report(++seq, r, &all, &renew, &stop, /*stop_on_failure=*/true, print_failure);
    if (!st.ok()) {
      broke_down = true;
      break;
    }
    if (stop) break;
  }
  const int status = (lead && report.failed()) || broke_down ? 1 : 0;
  if (lead) {
    report.Summary(table.name, size);
    journal.Done();
  }

  // The store may live in rank 0 (mpirun): rank 0 leaves last.
  if (!broke_down) {
    (void)ex.Arrive("finished");
    if (lead) {
      std::vector<uint32_t> alive;
      for (uint32_t r = 0; r < size; ++r) {
        if (!session->gone(r)) alive.push_back(r);
      }
      (void)ex.AwaitArrivals("finished", alive, std::chrono::milliseconds(60000));
    }
  }
  SetCurrentCheck(kAfterTheChecks, "teardown (comm_destroy, finalize)");
  watchdog.ArmTeardown(30000, status);
  session.reset();
  watchdog.Disarm();
  return status;
}

}  // namespace

int RunRank(const Options& options) {
  const int status = RunRankSteps(options);
  // The exit hook and the process that starts the ranks read this: the run
  // ended on the suite's own terms, whatever its status.
  RecordEnding(RankEnding::kReturned, "");
  return status;
}

}  // namespace plexus::conformance
