#include "requests.hpp"

#include <algorithm>
#include <thread>

#include "plexus/status.hpp"
#include "plugin.hpp"
#include "rank_record.hpp"

namespace plexus::conformance {

std::string StatusText(int32_t status) {
  if (status == PLEXUS_IN_PROGRESS) return "IN_PROGRESS";
  return StatusName(status);
}

Completion WaitUntil(const Plugin& plugin, plexus_request* req, Clock::time_point deadline) {
  const TracedCalls& t = plugin.calls();
  Completion c;
  const auto start = Clock::now();
  bool poll = false;  // wait() misbehaved: fall back to test()
  for (;;) {
    SetPhase(poll ? "backend test() (polling a request)" : "backend wait() and test()");
    const int64_t left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    int32_t rc;
    if (!poll) {
      rc = t.wait(req, std::clamp<int64_t>(left, 0, 1000));
      if (rc > 0) {
        c.violation = "wait() returned " + StatusText(rc) +
                      " (a positive value; it must return OK, the request's error or TIMEOUT)";
        poll = true;
        continue;
      }
      if (rc != PLEXUS_ERR_TIMEOUT) {
        c.done = true;
        c.status = rc;
        break;
      }
      // TIMEOUT: still pending, or completed with TIMEOUT. test() tells.
      const int32_t tr = t.test(req);
      if (tr != PLEXUS_IN_PROGRESS) {
        c.done = true;
        c.status = tr;
        if (tr != PLEXUS_ERR_TIMEOUT && tr != PLEXUS_OK) {
          c.violation = "wait() returned TIMEOUT but test() then said " + StatusText(tr);
        }
        break;
      }
    } else {
      rc = t.test(req);
      if (rc != PLEXUS_IN_PROGRESS) {
        c.done = rc <= 0;
        c.status = rc;
        if (rc > 0) c.violation += "; test() returned " + StatusText(rc);
        if (c.done) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (Clock::now() >= deadline) break;
  }
  c.elapsed_ms = MillisSince(start);
  return c;
}

std::string CheckAndFree(const Plugin& plugin, plexus_request* req, int32_t status) {
  const TracedCalls& t = plugin.calls();
  std::string problems;
  auto add = [&](const std::string& p) { problems += (problems.empty() ? "" : "; ") + p; };
  const int32_t again = t.test(req);
  if (again != status) {
    add("test() after completion returned " + StatusText(again) + ", not the " +
        StatusText(status) + " the request completed with");
  }
  if (plugin.has_request_error()) {
    char buf[1024] = "";
    const size_t n = t.request_error(req, buf, sizeof buf);
    buf[sizeof buf - 1] = '\0';
    if (status == PLEXUS_OK && (n != 0 || buf[0] != '\0')) {
      add("request_error() of a successful request returned " + std::to_string(n) + " and '" + buf +
          "' (want 0 and \"\")");
    }
    if (status != PLEXUS_OK && buf[0] == '\0') {
      add("request_error() of a request that failed with " + StatusText(status) + " is empty");
    }
  }
  const int32_t fr = t.request_free(req);
  if (fr != PLEXUS_OK) add("request_free() of a completed request returned " + StatusText(fr));
  return problems;
}

bool AbortAndReap(Plugin& plugin, plexus_comm* comm, plexus_request* req) {
  SetPhase("backend comm_abort()");
  plugin.calls().comm_abort(comm);
  const Completion c = WaitFor(plugin, req, 5000);
  if (c.done) {
    plugin.calls().request_free(req);
    return true;
  }
  plugin.MarkLeaked();
  return false;
}

std::string FailureText(const Plugin& plugin, plexus_comm* comm, plexus_request* req,
                        int32_t status) {
  std::string text = req ? plugin.RequestError(req) : std::string();
  if (text.empty()) text = plugin.LastError(comm);
  if (text.empty()) text = "(no error message)";
  return StatusText(status) + ": " + text;
}

}  // namespace plexus::conformance
