#include "restarts.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "journal.hpp"
#include "plexus/settings/environment.hpp"
#include "rank_record.hpp"
#include "report.hpp"

namespace plexus::conformance {
namespace {

std::atomic<pid_t> g_child{0};
volatile sig_atomic_t g_interrupted = 0;

void OnStopSignal(int sig, siginfo_t* info, void*) {
  g_interrupted = sig;
  // A terminal's Ctrl-C (sent by the kernel) reaches plexus-run directly, in
  // the same process group; passing it on would make it a second one, which
  // plexus-run takes as "kill the ranks now".
  if (info && info->si_code == SI_KERNEL) return;
  const pid_t child = g_child.load();
  if (child > 0) kill(child, sig);
}

void InstallStopHandlers() {
  struct sigaction sa {};
  sa.sa_sigaction = OnStopSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
}

// Runs argv to its end; returns its exit status (128 + signal if killed).
int RunChild(const std::vector<std::string>& argv) {
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (std::string& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    std::fprintf(stderr, "plexus-conformance: cannot start %s: %s\n", argv[0].c_str(),
                 std::strerror(errno));
    return 2;
  }
  if (pid == 0) {
    execv(args[0], args.data());
    std::fprintf(stderr, "plexus-conformance: cannot execute %s: %s\n", argv[0].c_str(),
                 std::strerror(errno));
    _exit(127);
  }
  g_child = pid;
  if (g_interrupted) kill(pid, g_interrupted);  // came before g_child was set
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// What ended a run of the ranks before rank 0 printed its RESULT line.
struct Death {
  bool found = false;  // false: no rank's record explains it (the ranks or plexus-run said why)
  int64_t index = kNoCheck;
  std::string name, group, capability;
  char ended = 'c';    // 'c' crashed or ended, 'h' hung
  std::string detail;  // "rank 2: the process died of SIGSEGV ..."
};

Death Diagnose(const std::string& dir, uint32_t nproc) {
  std::vector<std::pair<uint32_t, RankRecord>> records;
  for (uint32_t r = 0; r < nproc; ++r) {
    RankRecord record;
    if (ReadRankRecord(RankRecordPath(dir, r), &record)) records.push_back({r, record});
  }
  auto ending = [](const RankRecord& rec) { return RankEnding(rec.ending); };
  Death d;
  // The ranks whose crash handler, watchdog or exit hook spoke.
  std::vector<const std::pair<uint32_t, RankRecord>*> spoke;
  for (const auto& rr : records) {
    const RankEnding e = ending(rr.second);
    if (e == RankEnding::kCrashed || e == RankEnding::kHung || e == RankEnding::kExited) {
      spoke.push_back(&rr);
    }
  }
  if (!spoke.empty()) {
    const auto* last = *std::max_element(spoke.begin(), spoke.end(), [](auto* a, auto* b) {
      return a->second.check_index < b->second.check_index;
    });
    d.found = true;
    d.index = last->second.check_index;
    d.name = last->second.check;
    d.group = last->second.group;
    d.capability = last->second.capability;
    d.ended = 'h';
    for (const auto* rr : spoke) {
      if (rr->second.check_index != d.index) continue;
      if (ending(rr->second) != RankEnding::kHung) d.ended = 'c';
      d.detail += (d.detail.empty() ? "" : " | ") + std::string("rank ") +
                  std::to_string(rr->first) + ": " + rr->second.ending_text;
    }
    return d;
  }
  // Nobody spoke. A rank that returned means the run ended on the suite's
  // own decision (it printed why); otherwise a rank died in a way no handler
  // saw (SIGKILL, a backend's own signal handler, _exit), and plexus-run
  // stopped the rest.
  const RankRecord* last = nullptr;
  for (const auto& rr : records) {
    if (ending(rr.second) == RankEnding::kReturned) return d;
    if (!last || rr.second.check_index > last->check_index) last = &rr.second;
  }
  if (!last) return d;
  d.found = true;
  d.index = last->check_index;
  d.name = last->check;
  d.group = last->group;
  d.capability = last->capability;
  d.detail =
      "a rank ended during this check without a report from the suite (killed by a signal it "
      "cannot catch such as SIGKILL, by a signal handler of the backend's own, or by _exit; "
      "plexus-run's message on stderr says which rank and how)";
  for (const auto& rr : records) {
    std::string calls;
    for (const InFlightCall& call : rr.second.calls) {
      if (call.state == 2) calls += (calls.empty() ? "" : "; ") + std::string(call.text);
    }
    if (!calls.empty()) {
      d.detail += "; rank " + std::to_string(rr.first) + " was in " + calls;
    }
  }
  return d;
}

void RemoveRecords(const std::string& dir, uint32_t nproc) {
  for (uint32_t r = 0; r < nproc; ++r) unlink(RankRecordPath(dir, r).c_str());
}

std::string MakeStateDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/plexus-conformance.XXXXXX";
  if (!mkdtemp(pattern.data())) return {};
  return pattern;
}

}  // namespace

int RunWithRestarts(const Options& options, const std::vector<std::string>& launcher_argv) {
  const std::string dir = MakeStateDir();
  if (dir.empty()) {
    // Without a place for the records the ranks cannot be started again;
    // the run itself still works, as under any launcher.
    std::fprintf(stderr,
                 "plexus-conformance: cannot make a temporary directory (%s); a crash will end "
                 "the run\n",
                 std::strerror(errno));
    return RunChild(launcher_argv);
  }
  setenv(kStateDirVariable, dir.c_str(), 1);
  unsetenv(kResumeVariable);
  InstallStopHandlers();
  int status = 0;
  int restarts = 0;
  int64_t resume_after = kNoCheck;
  for (;;) {
    RemoveRecords(dir, options.nproc);
    status = RunChild(launcher_argv);
    if (g_interrupted) break;
    const JournalContents journal = ReadJournal(dir);
    const Death death = Diagnose(dir, options.nproc);
    if (journal.done) {
      // Every check ran and the RESULT line is out; a crash in teardown
      // (comm_destroy, finalize) still deserves its line.
      if (death.found) std::printf("FAIL  %s  %s\n", death.name.c_str(), death.detail.c_str());
      break;
    }
    if (!death.found) break;  // the ranks or plexus-run have said what went wrong

    Report report(stdout);
    for (const JournalEntry& e : journal.checks) {
      report.Restore(e.group, e.capability, e.verdict, e.ended);
    }
    report.AddEnded(death.name, death.group, death.capability, death.ended, death.detail);
    if (death.index == kNoCheck) {
      report.Line("RESULT: backend '" + options.backend +
                  "' ended the process before the first check: DOES NOT CONFORM");
      status = 1;
      break;
    }
    JournalEntry entry;
    entry.index = death.index;
    entry.verdict = Verdict::kFail;
    entry.ended = death.ended;
    entry.group = death.group;
    entry.capability = death.capability;
    entry.name = death.name;
    Journal(dir).Add(entry);

    std::string stop;
    if (death.index == kAfterTheChecks) {
      stop = "(the ranks ended after the last check)";
    } else if (death.index == 0 || death.index <= resume_after) {
      stop = "(stopping: the checks that follow need what just failed)";
    } else if (restarts >= options.max_restarts) {
      stop = "(stopping after " + std::to_string(restarts) +
             " restart(s), the most --max-restarts allows; the checks after this one did not run)";
    }
    if (!stop.empty()) {
      report.Line(stop);
      report.Summary(journal.backend.empty() ? options.backend : journal.backend,
                     journal.size ? journal.size : options.nproc);
      status = 1;
      break;
    }
    ++restarts;
    resume_after = death.index;
    report.Line("(starting the ranks again, restart " + std::to_string(restarts) + " of at most " +
                std::to_string(options.max_restarts) +
                "; the checks up to this one are not run again)");
    setenv(kResumeVariable, std::to_string(resume_after).c_str(), 1);
  }
  std::fflush(stdout);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return status;
}

std::string StateDir() {
  const char* dir = plexus::settings::Raw(plexus::settings::Id::kConformanceState);
  return dir ? dir : "";
}

int64_t ResumeAfter() {
  const char* text = plexus::settings::Raw(plexus::settings::Id::kConformanceResumeAfter);
  if (!text || !*text) return kNoCheck;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  return (*end == '\0' && v >= 0) ? int64_t(v) : kNoCheck;
}

}  // namespace plexus::conformance
