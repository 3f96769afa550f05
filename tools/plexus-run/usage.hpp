// What plexus-run says about its command line: the --help text, and the
// message of a bad command line.
#pragma once

#include <string>

namespace plexus::run {

// Writes --help to stdout: usage, options, the variables every rank gets
// (RankVariables) and the exit codes.
void PrintHelp();

// "plexus-run: <message>", the usage line and a pointer to --help on stderr;
// exits kExitUsage (2).
[[noreturn]] void UsageError(const std::string& message);

}  // namespace plexus::run
