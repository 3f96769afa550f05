// Which peers run on this host, and whether such a peer's process still
// exists. UCX 1.13's shared-memory transports report no peer failure unless
// their error handling is switched on, which in turn leaves out cma (the
// single-copy path for large messages). So endpoints to peers on this host
// are made without UCX error handling, and the transport finds a dead local
// peer itself by looking its process up in /proc (ucx_transport.cpp).
#pragma once

#include <cstdint>

namespace plexus::ucx {

// Published with the worker address (ucx_connect.cpp); plain data.
struct ProcessId {
  uint64_t host_key = 0;    // hash of boot id, pid namespace and host name; 0: unknown
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22: tells a reused pid apart
  uint32_t pid = 0;
  uint32_t reserved = 0;
};

ProcessId ThisProcess();

// Same kernel and pid namespace: a's pid means the same process here.
inline bool SameHost(const ProcessId& a, const ProcessId& b) {
  return a.host_key != 0 && a.host_key == b.host_key;
}

// True when p has exited: no such pid, a zombie, or the pid now belongs to a
// process started at another time. A stopped (SIGSTOP) process has not.
bool ProcessEnded(const ProcessId& p);

}  // namespace plexus::ucx
