// Waiting for a request without ever hanging, and telling what went wrong.
//
// The suite must finish even when the backend does not: every wait here is
// bounded, and a request that is still pending at the bound is reported as
// "did not complete within X ms", then the communicator is aborted and the
// request given a few more seconds; one that survives even that is leaked
// with its buffers (the backend may still write them).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "plexus/backend.h"

namespace plexus::conformance {

class Plugin;

using Clock = std::chrono::steady_clock;

inline int64_t MillisSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// "OK", "TIMEOUT", ..., "IN_PROGRESS", "UNKNOWN(7)".
std::string StatusText(int32_t status);

struct Completion {
  bool done = false;                    // completed before the deadline
  int32_t status = PLEXUS_ERR_TIMEOUT;  // its final status when done
  int64_t elapsed_ms = 0;               // from the call to completion (or giving up)
  std::string violation;                // an ABI rule wait/test broke on the way ("" if none)
};

// Waits for req until deadline, in wait() slices of at most one second, so a
// wait that ignores its timeout costs at most a slice more. A positive
// return from wait() is a violation (wait must return OK, the request's
// error or TIMEOUT); the request is then polled with test().
Completion WaitUntil(const Plugin& plugin, plexus_request* req, Clock::time_point deadline);
inline Completion WaitFor(const Plugin& plugin, plexus_request* req, int64_t bound_ms) {
  return WaitUntil(plugin, req, Clock::now() + std::chrono::milliseconds(bound_ms));
}

// After a completed request: test() must repeat its status, request_error
// must be "" after success and non-empty after failure, and request_free
// must succeed. Returns "" or the problems found. Frees req.
std::string CheckAndFree(const Plugin& plugin, plexus_request* req, int32_t status);

// For a request that did not complete in time: aborts comm and waits up to
// 5 s more. Returns true if it then completed (and was freed); false if it
// was leaked, in which case the caller must abandon its buffers and must not
// destroy comm.
bool AbortAndReap(Plugin& plugin, plexus_comm* comm, plexus_request* req);

// The error text of a failed request: request_error (1.1) if the backend has
// it, else comm_last_error, e.g. "REMOTE: tcp allreduce: rank 1 ...".
std::string FailureText(const Plugin& plugin, plexus_comm* comm, plexus_request* req,
                        int32_t status);

}  // namespace plexus::conformance
