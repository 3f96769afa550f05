// The host's log: one line per message on stderr, "plexus[rank] LEVEL source: text".
// The threshold comes from PLEXUS_LOG_LEVEL (error, warn, info, debug, trace;
// default warn). Thread-safe: each line is written with one write().
#pragma once

#include <cstdint>
#include <string>

namespace plexus {

// level is a PLEXUS_LOG_* value.
void LogLine(int32_t level, const std::string& source, const std::string& message);
bool LogEnabled(int32_t level);

// The rank shown in log lines; set once the launch environment is known.
void SetLogRank(int64_t rank);

}  // namespace plexus
