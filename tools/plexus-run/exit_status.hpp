// How a process ended, in the words plexus-run prints.
#pragma once

#include <string>

namespace plexus::run {

// "SIGKILL" for 9, "signal 77" for numbers without a well-known name. A fixed
// table rather than sigabbrev_np(): that needs glibc >= 2.32.
std::string SignalName(int sig);

// how and value are a waitid() siginfo's si_code (CLD_EXITED, CLD_KILLED,
// CLD_DUMPED) and si_status (exit code or signal):
//   "exited with code 3", "was killed by signal 9 (SIGKILL)",
//   "was killed by signal 11 (SIGSEGV, core dumped)".
std::string DescribeExit(int how, int value);

}  // namespace plexus::run
