// Which peers run on this host, and whether such a peer's process still
// exists: what a backend needs to find a dead peer that shares memory with
// it and reports nothing itself. The UCX backend makes endpoints to peers on
// this host without UCX's error handling (which would leave out cma) and
// looks their processes up here (ucx_transport.cpp); the one-host shared
// memory path (one_host_shm.hpp) does the same while it waits for a peer.
#pragma once

#include <cstdint>

namespace plexus::kit {

// Plain data: exchanged between ranks as bytes (the UCX worker address
// exchange, the shared-memory segment's set-up).
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

}  // namespace plexus::kit
