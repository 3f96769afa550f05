// /proc look-ups behind local_process.hpp.
#include "plexus/kit/local_process.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace plexus::kit {
namespace {

bool ReadSmallFile(const std::string& path, std::string* out) {
  FILE* f = std::fopen(path.c_str(), "re");
  if (!f) return false;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  out->assign(buf, n);
  return n > 0;
}

uint64_t Fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The state letter and start time of /proc/<pid>/stat. The command name in
// field 2 may contain spaces and parentheses, so parsing starts after the
// last ')'. False when the file cannot be read (no such process).
bool ReadStat(uint32_t pid, char* state, uint64_t* start_time) {
  std::string stat;
  if (!ReadSmallFile("/proc/" + std::to_string(pid) + "/stat", &stat)) return false;
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) {
    errno = EINVAL;  // unreadable, not absent
    return false;
  }
  *state = stat[paren + 2];
  // Field 3 is the state; the start time is field 22, 19 fields further.
  const char* p = stat.c_str() + paren + 2;
  for (int field = 3; field < 22 && *p; ++p) {
    if (*p == ' ') ++field;
  }
  *start_time = std::strtoull(p, nullptr, 10);
  return true;
}

}  // namespace

ProcessId ThisProcess() {
  ProcessId id;
  id.pid = uint32_t(getpid());
  char state = 0;
  (void)ReadStat(id.pid, &state, &id.start_time);
  std::string boot;
  char ns[256] = {};
  char net_ns[256] = {};
  char host[256] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
  // The network namespace too: ranks in different ones (containers, or the
  // namespace hosts of tests/net) reach each other over a network that can
  // fail like one between hosts, so they keep UCX's peer-failure reports.
  const ssize_t net_n = readlink("/proc/self/ns/net", net_ns, sizeof net_ns - 1);
  if (ReadSmallFile("/proc/sys/kernel/random/boot_id", &boot) && n > 0 && net_n > 0 &&
      gethostname(host, sizeof host - 1) == 0 && id.start_time != 0) {
    uint64_t h = 1469598103934665603ull;
    h = Fnv1a(h, boot);
    h = Fnv1a(h, std::string(ns, size_t(n)));
    h = Fnv1a(h, std::string(net_ns, size_t(net_n)));
    h = Fnv1a(h, host);
    id.host_key = h ? h : 1;
  }
  return id;
}

bool ProcessEnded(const ProcessId& p) {
  char state = 0;
  uint64_t start = 0;
  if (!ReadStat(p.pid, &state, &start)) return errno == ENOENT || errno == ESRCH;
  return state == 'Z' || state == 'X' || start != p.start_time;
}

}  // namespace plexus::kit
