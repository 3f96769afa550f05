#include "plexus/log.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "plexus/backend.h"
#include "plexus/settings/environment.hpp"

namespace plexus {
namespace {

std::atomic<int64_t> g_rank{-1};

int32_t Threshold() {
  static const int32_t level = [] {
    const char* v = plexus::settings::Raw(plexus::settings::Id::kLogLevel);
    if (!v) return PLEXUS_LOG_WARN;
    const std::string s(v);
    if (s == "error") return PLEXUS_LOG_ERROR;
    if (s == "info") return PLEXUS_LOG_INFO;
    if (s == "debug") return PLEXUS_LOG_DEBUG;
    if (s == "trace") return PLEXUS_LOG_TRACE;
    return PLEXUS_LOG_WARN;
  }();
  return level;
}

const char* LevelName(int32_t level) {
  switch (level) {
    case PLEXUS_LOG_ERROR:
      return "ERROR";
    case PLEXUS_LOG_WARN:
      return "WARN";
    case PLEXUS_LOG_INFO:
      return "INFO";
    case PLEXUS_LOG_DEBUG:
      return "DEBUG";
    default:
      return "TRACE";
  }
}

}  // namespace

bool LogEnabled(int32_t level) {
  return level <= Threshold();
}

void SetLogRank(int64_t rank) {
  g_rank.store(rank);
}

void LogLine(int32_t level, const std::string& source, const std::string& message) {
  if (!LogEnabled(level)) return;
  std::string line = "plexus";
  if (const int64_t rank = g_rank.load(); rank >= 0) line += "[" + std::to_string(rank) + "]";
  line += std::string(" ") + LevelName(level) + " " + source + ": " + message + "\n";
  (void)!write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace plexus
