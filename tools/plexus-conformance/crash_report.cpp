#include "crash_report.hpp"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

namespace plexus::conformance {
namespace {

// Everything the handler touches is preformatted: it may only call
// async-signal-safe functions (write, signal, raise).
char g_check[512] = "startup";
char g_rank_text[16] = "0";
bool g_lead = false;
std::atomic<bool> g_installed{false};
std::atomic<const char*> g_phase{"starting"};

void Put(int fd, const char* text) {
  (void)!write(fd, text, strlen(text));
}

void OnFatalSignal(int sig) {
  const char* name = sig == SIGSEGV  ? "SIGSEGV"
                     : sig == SIGBUS ? "SIGBUS"
                     : sig == SIGFPE ? "SIGFPE"
                     : sig == SIGILL ? "SIGILL"
                                     : "SIGABRT";
  const int fd = g_lead ? STDOUT_FILENO : STDERR_FILENO;
  Put(fd, "FAIL  ");
  Put(fd, g_check);
  Put(fd, "  rank ");
  Put(fd, g_rank_text);
  Put(fd, ": the process died of ");
  Put(fd, name);
  Put(fd, " during this check (last activity: ");
  Put(fd, g_phase.load());
  Put(fd, "; inside the backend, or the backend corrupted memory)\n");
  if (g_lead) Put(fd, "RESULT: the suite could not finish: DOES NOT CONFORM\n");
  signal(sig, SIG_DFL);
  raise(sig);
}

}  // namespace

void InstallCrashReporter(uint32_t rank) {
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
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) signal(sig, OnFatalSignal);
}

void SetPhase(const char* phase) {
  g_phase.store(phase);
}
const char* CurrentPhase() {
  return g_phase.load();
}

void SetCurrentCheck(const std::string& name) {
  g_phase.store("the suite's own code");
  const size_t n = name.size() < sizeof g_check - 1 ? name.size() : sizeof g_check - 1;
  memcpy(g_check, name.data(), n);
  g_check[n] = '\0';
}

}  // namespace plexus::conformance
