// A backend that crashes the process (a NULL buffer dereferenced, say)
// should still leave a readable verdict: a fatal-signal handler names the
// check that was running and the signal, then lets the signal kill the
// process as usual (so plexus-run or mpirun still sees the crash).
#pragma once

#include <cstdint>
#include <string>

namespace plexus::conformance {

void InstallCrashReporter(uint32_t rank);
// The check now running (copied into a fixed buffer the handler can read).
void SetCurrentCheck(const std::string& name);

// What the running check is doing right now, e.g. "backend wait()" or
// "rendezvous store: barrier" (a string literal): the crash report and the
// watchdog name it, which tells a hang in the backend from one elsewhere.
void SetPhase(const char* phase);
const char* CurrentPhase();

}  // namespace plexus::conformance
