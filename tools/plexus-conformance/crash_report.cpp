#include "crash_report.hpp"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace plexus::conformance {
namespace {

// Everything the handler touches is preformatted or in the rank record: it
// may only call async-signal-safe functions (write, signal, raise, and the
// record's own appenders).
char g_rank_text[16] = "0";
bool g_lead = false;
char g_cannot_restart[512] = "";  // the note for a run that cannot restart, else ""
std::atomic<bool> g_installed{false};
// A stack overflow in the backend still reaches the handler on this stack
// (for the main thread, which runs the checks).
alignas(16) char g_alternate_stack[64 * 1024];
// The report being composed; static, as the alternate stack is small.
char g_text[sizeof(RankRecord::ending_text)];

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
// What each signal did before ours (SIG_DFL, or a backend's own handler,
// e.g. Open MPI's or UCX's backtrace printer): it runs after our report.
struct sigaction g_previous[NSIG];

void Put(int fd, const char* text) {
  (void)!write(fd, text, strlen(text));
}

// Records how the rank ended and prints it: when the ranks can be started
// again, a line on stderr (the process that starts them prints the FAIL
// line); otherwise the FAIL line itself (rank 0 on stdout, the others on
// stderr), the note that the run ends here, and rank 0 the RESULT line.
void ReportEnding(RankEnding ending, const char* text) {
  RecordEnding(ending, text);
  if (RankRecordShared()) {
    Put(STDERR_FILENO, "plexus-conformance[");
    Put(STDERR_FILENO, g_rank_text);
    Put(STDERR_FILENO, "]: FAIL ");
    Put(STDERR_FILENO, CurrentCheckName());
    Put(STDERR_FILENO, ": ");
    Put(STDERR_FILENO, text);
    Put(STDERR_FILENO, "\n");
    return;
  }
  const int fd = g_lead ? STDOUT_FILENO : STDERR_FILENO;
  Put(fd, "FAIL  ");
  Put(fd, CurrentCheckName());
  Put(fd, "  rank ");
  Put(fd, g_rank_text);
  Put(fd, ": ");
  Put(fd, text);
  Put(fd, "\n");
  Put(fd, g_cannot_restart);
  Put(fd, "\n");
  if (g_lead) Put(fd, "RESULT: the suite could not finish: DOES NOT CONFORM\n");
}

void OnFatalSignal(int sig, siginfo_t* info, void*) {
  // A backend's handler that ran after ours may hand the signal back to us
  // (UCX's restores the handler it found, ours, and raises again): the
  // report is out, so end the process the default way instead of looping.
  static volatile sig_atomic_t reported = 0;
  if (reported) {
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  reported = 1;
  const char* name = sig == SIGSEGV  ? "SIGSEGV"
                     : sig == SIGBUS ? "SIGBUS"
                     : sig == SIGFPE ? "SIGFPE"
                     : sig == SIGILL ? "SIGILL"
                                     : "SIGABRT";
  g_text[0] = '\0';
  AppendText(g_text, sizeof g_text, "the process died of ");
  AppendText(g_text, sizeof g_text, name);
  AppendText(g_text, sizeof g_text, " during this check");
  AppendCallsInFlightForSignal(g_text, sizeof g_text);
  AppendText(g_text, sizeof g_text, " (last activity: ");
  AppendText(g_text, sizeof g_text, CurrentPhase());
  AppendText(g_text, sizeof g_text, "; inside the backend, or the backend corrupted memory)");
  ReportEnding(RankEnding::kCrashed, g_text);
  // Then what would have happened without us. A fault from an instruction
  // (si_code > 0, from the kernel) simply recurs on return, reaching the
  // previous action with its own siginfo; a sent signal (abort()) is raised
  // again, delivered once this handler returns.
  sigaction(sig, &g_previous[sig], nullptr);
  if (!(info && info->si_code > 0 && sig != SIGABRT)) raise(sig);
}

// Installs OnFatalSignal wherever something else (or nothing) is installed.
void ClaimFatalSignals() {
  struct sigaction ours {};
  ours.sa_sigaction = OnFatalSignal;
  ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&ours.sa_mask);
  for (int sig : kFatalSignals) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) != 0) continue;
    const bool is_ours = (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &OnFatalSignal;
    if (is_ours) continue;
    g_previous[sig] = current;
    sigaction(sig, &ours, nullptr);
  }
}

// exit() while the rank is running: the suite returns from main instead,
// so this is a backend ending the process.
void OnExit() {
  if (CurrentEnding() != RankEnding::kRunning) return;
  g_text[0] = '\0';
  AppendText(g_text, sizeof g_text, "the process called exit() during this check");
  AppendCallsInFlightForSignal(g_text, sizeof g_text);
  AppendText(g_text, sizeof g_text, " (the suite never does: the backend ended the process)");
  ReportEnding(RankEnding::kExited, g_text);
}

}  // namespace

std::string CannotRestartNote(const std::string& launcher) {
  return "(the ranks came from a launcher (" + launcher +
         "), not from the suite itself, so it cannot start them again to run the checks after "
         "this one; run plexus-conformance without a launcher, which starts the ranks with "
         "plexus-run and again after a crash, for the whole report)";
}

void InstallCrashReporter(uint32_t rank, const std::string& launcher) {
  if (g_installed.exchange(true)) return;
  g_lead = rank == 0;
  char digits[16];
  int n = 0;
  do {
    digits[n++] = char('0' + rank % 10);
    rank /= 10;
  } while (rank && n < 15);
  for (int i = 0; i < n; ++i) g_rank_text[i] = digits[n - 1 - i];
  g_rank_text[n] = '\0';
  const std::string note = CannotRestartNote(launcher);
  strncpy(g_cannot_restart, note.c_str(), sizeof g_cannot_restart - 1);

  stack_t alternate{};
  alternate.ss_sp = g_alternate_stack;
  alternate.ss_size = sizeof g_alternate_stack;
  (void)sigaltstack(&alternate, nullptr);
  ClaimFatalSignals();
  std::atexit(OnExit);
}

void ReclaimFatalSignals() {
  if (g_installed.load()) ClaimFatalSignals();
}

}  // namespace plexus::conformance
