// What one check is, what it returns, and what it sees while it runs.
//
// Every rank runs the same list of checks in the same order (the list is
// built from rank 0's capabilities), each rank returns an Outcome, and the
// runner gathers them at rank 0 through the rendezvous store. A check that
// leaves the shared communicator in an unknown state (an operation failed,
// hung, or was posted by mistake) says so with comm_broken; the runner then
// makes a fresh one on every rank before the next check.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "plexus/backend.h"

namespace plexus::conformance {

class Plugin;
class TracedCalls;
class Exchange;
class Session;
struct Options;

enum class Verdict : char { kPass = 'P', kFail = 'F', kSkip = 'S' };

struct Outcome {
  Verdict verdict = Verdict::kPass;
  std::string detail;
  bool comm_broken = false;
  std::string tag;  // what a Check's combine() needs beyond the verdict

  static Outcome Make(Verdict v, std::string detail) {
    Outcome o;
    o.verdict = v;
    o.detail = std::move(detail);
    return o;
  }
  static Outcome Pass(std::string detail = {}) { return Make(Verdict::kPass, std::move(detail)); }
  static Outcome Fail(std::string detail) { return Make(Verdict::kFail, std::move(detail)); }
  static Outcome Skip(std::string detail) { return Make(Verdict::kSkip, std::move(detail)); }
};

// Problems found by one check on one rank; the outcome fails if there is any.
class Findings {
 public:
  void Add(const std::string& problem) {
    if (!problem.empty()) problems_.push_back(problem);
  }
  bool empty() const { return problems_.empty(); }
  // FAIL with the problems joined by "; ", else PASS with pass_detail.
  Outcome ToOutcome(const std::string& pass_detail = {}) const;

 private:
  std::vector<std::string> problems_;
};

// What a running check may use. seq is the check's position in the list
// (the same on every rank): checks use it for store keys and input data.
struct Context {
  const Options& options;
  Session& session;
  uint64_t seq;
  uint32_t rank;
  uint32_t size;

  const plexus_backend_v1& table() const;  // its fields; call through calls()
  const TracedCalls& calls() const;
  const plexus_capabilities& caps() const;  // rank 0's: what the list was built from
  Plugin& plugin() const;
  Exchange& exchange() const;
  plexus_comm* comm() const;    // the shared communicator
  int64_t op_bound_ms() const;  // how long one operation may take before it "hangs"
};

struct Check {
  std::string name;
  // Summary rows: group is "table", "requests", ... or the collective's name;
  // capability is "allreduce int32 sum" for the matrix, "" otherwise.
  std::string group;
  std::string capability;
  int64_t limit_ms = 0;  // watchdog limit on one rank; 0 = the default
  std::function<Outcome(Context&)> run;
  // How rank 0 merges the ranks' outcomes; unset = FAIL if any rank failed,
  // SKIP if every rank skipped, else PASS.
  std::function<Outcome(const std::vector<Outcome>&)> combine;
};

// The lists, in the order they run. Each is built from the capabilities and
// the world size alone, so that every rank builds the same one.
std::vector<Check> TableChecks(const plexus_capabilities& caps, uint32_t size);
std::vector<Check> CollectiveChecks(const plexus_capabilities& caps, uint32_t size,
                                    const Options& options);
std::vector<Check> RequestChecks(const plexus_capabilities& caps, uint32_t size);
// Every collective of the list (collectives.def).
std::vector<Check> ArgumentChecks(const plexus_capabilities& caps, uint32_t size);
// Includes MismatchChecks (per-rank counts and roots that disagree across
// ranks), before the check of the buffers failures leave.
std::vector<Check> FailureChecks(const plexus_capabilities& caps, uint32_t size);
std::vector<Check> MismatchChecks(const plexus_capabilities& caps, uint32_t size);
// Groups: comm_split (1.2, when the backend has it) and comm_create over a
// subset of the ranks in a permuted order.
std::vector<Check> GroupChecks(const plexus_capabilities& caps, uint32_t size);
// ABI 1.3 shared buffers: mem_alloc, an in-place allreduce on the memory,
// mem_free, and their refusals (SKIP without the slots).
std::vector<Check> SharedBufferChecks(const plexus_capabilities& caps, uint32_t size);
// Must run last: one rank exits during the first of them, and the others
// then run on communicators made before it left (the whole job, and a
// group). options.only selects among them as it does for the whole list.
std::vector<Check> DeadPeerChecks(uint32_t size, const Options& options);

}  // namespace plexus::conformance
