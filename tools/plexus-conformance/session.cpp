#include "session.hpp"

#include <chrono>

#include "check.hpp"
#include "rank_record.hpp"

namespace plexus::conformance {

Session::Session(const Options& options, std::shared_ptr<Job> job, std::unique_ptr<Plugin> plugin)
    : options_(options),
      job_(std::move(job)),
      plugin_(std::move(plugin)),
      // A check may legitimately keep the other ranks waiting for several
      // operation timeouts (the failure checks wait out one on purpose).
      exchange_(job_->store.get(), job_->launch.rank, job_->launch.size,
                // Longer than a check may take on one rank (the runner's
                // watchdog limit), so that a stuck rank's watchdog speaks first.
                std::chrono::milliseconds(4 * (options.timeout_ms + 5000) + 180000)),
      gone_(job_->launch.size, false) {}

Session::~Session() {
  if (main_comm_) DestroyComm(main_comm_, main_leaked_);
}

int32_t Session::CreateComm(const std::string& purpose, int64_t timeout_ms, plexus_comm** comm,
                            std::string* error, std::string* name_out) {
  const std::string name = "conformance/" + purpose + "/" + std::to_string(next_comm_++);
  if (name_out) *name_out = name;
  return plugin_->CreateComm(job_->launch, job_->store.get(), name, timeout_ms, comm, error);
}

void Session::DestroyComm(plexus_comm* comm, bool leaked_request) {
  if (!comm) return;
  if (leaked_request) {
    plugin_->MarkLeaked();
    return;
  }
  SetPhase("backend comm_destroy()");
  plugin_->calls().comm_destroy(comm);
}

int32_t Session::RenewMainComm(std::string* error) {
  if (main_comm_) DestroyComm(main_comm_, main_leaked_);
  main_comm_ = nullptr;
  main_leaked_ = false;
  return CreateComm("shared", options_.timeout_ms, &main_comm_, error);
}

bool Session::any_gone() const {
  for (bool g : gone_) {
    if (g) return true;
  }
  return false;
}

// Context's accessors live here, where Session is complete.
const plexus_backend_v1& Context::table() const {
  return session.plugin().table();
}
const TracedCalls& Context::calls() const {
  return session.plugin().calls();
}
const plexus_capabilities& Context::caps() const {
  return session.plan_caps();
}
Plugin& Context::plugin() const {
  return session.plugin();
}
Exchange& Context::exchange() const {
  return session.exchange();
}
plexus_comm* Context::comm() const {
  return session.main_comm();
}
int64_t Context::op_bound_ms() const {
  return options.timeout_ms + 5000;
}

Outcome Findings::ToOutcome(const std::string& pass_detail) const {
  if (problems_.empty()) return Outcome::Pass(pass_detail);
  std::string detail;
  for (const std::string& p : problems_) detail += (detail.empty() ? "" : "; ") + p;
  return Outcome::Fail(detail);
}

}  // namespace plexus::conformance
