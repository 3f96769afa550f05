// What the failure checks share: a fresh communicator per scenario (a failed
// collective breaks its communicator, so the shared one is never used), the
// error-string rules, and the late rank that keeps the job consistent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "check.hpp"
#include "plexus/backend.h"

namespace plexus::conformance {

class Operation;

// A communicator made only for one failure scenario (collective: every rank
// calls it). Destroys it at scope end unless a request of it was leaked.
class ScenarioComm {
 public:
  ScenarioComm(Context& ctx, const std::string& purpose, int64_t timeout_ms);
  ~ScenarioComm();
  plexus_comm* get() const { return comm_; }
  const std::string& error() const { return error_; }  // why comm_create failed
  int32_t status() const { return status_; }
  int64_t timeout_ms() const { return timeout_ms_; }
  const std::string& name() const { return name_; }
  void MarkLeaked() { leaked_ = true; }

 private:
  Context& ctx_;
  plexus_comm* comm_ = nullptr;
  int32_t status_;
  std::string error_;
  std::string name_;
  int64_t timeout_ms_;
  bool leaked_ = false;
};

// The error strings a failed request must leave: request_error (1.1, when
// the backend has it) and comm_last_error, both non-empty. Adds what is
// missing to findings and returns the text (request_error's if any).
std::string CheckErrorStrings(Context& ctx, plexus_comm* comm, plexus_request* req, int32_t status,
                              Findings* findings);

// Whether text names rank as a number of its own (not inside "12" or the
// communicator's name).
bool NamesRank(std::string text, const std::string& comm_name, uint32_t rank);

// A rank that stayed silent in a scenario posts the same allreduce only
// after the ranks in `active` have finished it (they Arrive(arrival)), so a
// backend that still runs their operations in the background (as MPI must)
// can finish them and the job stays consistent; then waits for it (bounded)
// and frees it. Returns "" or a problem (its request never completed).
std::string PostLate(Context& ctx, ScenarioComm& comm, const std::string& arrival,
                     const std::vector<uint32_t>& active, uint64_t count, plexus_dtype_t dtype);

// After a mismatched collective was posted (req, by op, on comm): waits for
// it (bounded by 4x the scenario's timeout_ms + 5 s) and says what this rank
// saw, tagged for CombineMismatch: "error" (REMOTE, TIMEOUT, ... with the
// error strings checked), "ok" (completed OK with the data this rank's own
// view of the call expects; op's regions), or a FAIL (OK with wrong data,
// or no completion). mine starts the detail ("int32 x 1000: ").
Outcome JudgeMismatch(Context& ctx, ScenarioComm& comm, Operation& op, plexus_request* req,
                      const std::string& mine, const std::string& collective);

// How rank 0 merges a mismatch check: SKIP if every rank skipped, FAIL if a
// rank failed or every rank completed OK (the mismatch went undetected),
// else PASS.
Outcome CombineMismatch(const std::vector<Outcome>& by_rank);

// The ranks other than the last: 0 .. size-2.
std::vector<uint32_t> AllButLast(uint32_t size);

}  // namespace plexus::conformance
