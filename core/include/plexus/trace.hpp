// Spans of a rank's own work (a step's forward, backward, optimizer) in the
// flight recorder's dump, beside its collectives: plexus-trace's timeline
// (--chrome) draws them on the rank's track. Off with the recorder
// (PLEXUS_TRACE_OPS=0); docs/trace.md.
#pragma once

#include <chrono>

namespace plexus::trace {

// Marks [begin, end) as name on this rank. name must outlive the process's
// last dump: a string literal. The last 4096 spans are kept. Thread-safe,
// never blocks, never throws; about as cheap as a collective's record.
void Mark(const char* name, std::chrono::steady_clock::time_point begin,
          std::chrono::steady_clock::time_point end);

}  // namespace plexus::trace
