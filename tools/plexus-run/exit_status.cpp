#include "exit_status.hpp"

#include <signal.h>

namespace plexus::run {

std::string SignalName(int sig) {
  struct Entry {
    int number;
    const char* name;
  };
  static constexpr Entry kNames[] = {
      {SIGHUP, "SIGHUP"},       {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},   {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"},     {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},     {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"},     {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"},   {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"},     {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},   {SIGCHLD, "SIGCHLD"},
      {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},   {SIGTTIN, "SIGTTIN"},
      {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},   {SIGXFSZ, "SIGXFSZ"},
      {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGIO, "SIGIO"},
      {SIGSYS, "SIGSYS"},
  };
  for (const Entry& e : kNames) {
    if (e.number == sig) return e.name;
  }
  return "signal " + std::to_string(sig);
}

std::string DescribeExit(int how, int value) {
  if (how == CLD_EXITED) return "exited with code " + std::to_string(value);
  std::string text = "was killed by signal " + std::to_string(value) + " (" + SignalName(value);
  if (how == CLD_DUMPED) text += ", core dumped";
  return text + ")";
}

}  // namespace plexus::run
