#include "fault_support.hpp"

#include <algorithm>
#include <cctype>

#include "exchange.hpp"
#include "operation.hpp"
#include "options.hpp"
#include "plugin.hpp"
#include "session.hpp"

namespace plexus::conformance {

ScenarioComm::ScenarioComm(Context& ctx, const std::string& purpose, int64_t timeout_ms)
    : ctx_(ctx), timeout_ms_(timeout_ms) {
  status_ = ctx.session.CreateComm(purpose, timeout_ms, &comm_, &error_, &name_);
  if (status_ != PLEXUS_OK) comm_ = nullptr;
}

ScenarioComm::~ScenarioComm() {
  if (comm_) ctx_.session.DestroyComm(comm_, leaked_);
}

std::string CheckErrorStrings(Context& ctx, plexus_comm* comm, plexus_request* req, int32_t status,
                              Findings* findings) {
  const std::string last = ctx.plugin().LastError(comm);
  if (last.empty()) {
    findings->Add("comm_last_error is empty after a request failed with " + StatusText(status));
  }
  std::string text = last;
  if (ctx.plugin().has_request_error()) {
    const std::string own = ctx.plugin().RequestError(req);
    if (own.empty()) {
      findings->Add("request_error is empty for a request that failed with " + StatusText(status));
    } else {
      text = own;
    }
  }
  return text;
}

bool NamesRank(std::string text, const std::string& comm_name, uint32_t rank) {
  for (size_t at; !comm_name.empty() && (at = text.find(comm_name)) != std::string::npos;) {
    text.erase(at, comm_name.size());
  }
  const std::string number = std::to_string(rank);
  for (size_t at = text.find(number); at != std::string::npos; at = text.find(number, at + 1)) {
    const bool digit_before = at > 0 && std::isdigit(static_cast<unsigned char>(text[at - 1]));
    const size_t end = at + number.size();
    const bool digit_after =
        end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]));
    if (!digit_before && !digit_after) return true;
  }
  return false;
}

std::vector<uint32_t> AllButLast(uint32_t size) {
  std::vector<uint32_t> ranks;
  for (uint32_t r = 0; r + 1 < size; ++r) ranks.push_back(r);
  return ranks;
}

std::string PostLate(Context& ctx, ScenarioComm& comm, const std::string& arrival,
                     const std::vector<uint32_t>& active, uint64_t count, plexus_dtype_t dtype) {
  const auto wait_for_others = std::chrono::milliseconds(8 * comm.timeout_ms() + 60000);
  Status st = ctx.exchange().AwaitArrivals(arrival, active, wait_for_others);
  if (!st.ok()) return "the other ranks did not finish the scenario: " + st.message();
  Operation op(ctx, comm.get(), dtype);
  plexus_request* req = op.PostAllreduce(PLEXUS_OP_SUM, count, ctx.seq);
  if (!req) return {};  // refusing a post on a communicator whose peers left is fine
  const int64_t bound = 4 * comm.timeout_ms() + 5000;
  const Completion c = WaitFor(ctx.plugin(), req, bound);
  if (c.done) {
    if (c.status != PLEXUS_OK) op.KeepAfterFailure("the late allreduce in '" + comm.name() + "'");
    ctx.calls().request_free(req);
    return {};
  }
  std::string problem =
      "this rank's late allreduce, whose peers had given up, did not complete "
      "(OK or an error) within " +
      std::to_string(bound) +
      " ms: an operation "
      "that makes no progress for timeout_ms (" +
      std::to_string(comm.timeout_ms()) + ") must complete with TIMEOUT or REMOTE";
  if (!AbortAndReap(ctx.plugin(), comm.get(), req)) {
    op.Abandon();
    comm.MarkLeaked();
    problem += "; still pending 5 s after comm_abort";
  } else {
    op.KeepAfterFailure("the late allreduce in '" + comm.name() + "'");
  }
  return problem;
}

Outcome JudgeMismatch(Context& ctx, ScenarioComm& comm, Operation& op, plexus_request* req,
                      const std::string& mine, const std::string& collective) {
  Findings f;
  Outcome o;
  const int64_t T = comm.timeout_ms();
  const int64_t bound = 4 * T + 5000;
  const Completion c = WaitFor(ctx.plugin(), req, bound);
  if (!c.done) {
    f.Add(mine + "did not complete within " + std::to_string(bound) + " ms (timeout_ms " +
          std::to_string(T) + ")");
    if (!AbortAndReap(ctx.plugin(), comm.get(), req)) {
      op.Abandon();
      comm.MarkLeaked();
    } else {
      op.KeepAfterFailure(collective + " in '" + comm.name() + "'");
    }
    return f.ToOutcome();
  }
  f.Add(c.violation);
  if (c.status == PLEXUS_OK) {
    // Compare what a matched call of this rank's shape would give.
    bool broken = false;
    Findings data;
    op.Finish(&data, &broken);
    if (!data.empty()) {
      f.Add(mine + "completed OK with wrong data: " + data.ToOutcome().detail);
      return f.ToOutcome();
    }
    o = f.ToOutcome(mine + "completed OK");
    o.tag = "ok";
    return o;
  }
  const std::string text = CheckErrorStrings(ctx, comm.get(), req, c.status, &f);
  op.KeepAfterFailure("the mismatched " + collective);
  f.Add(CheckAndFree(ctx.plugin(), req, c.status));
  o = f.ToOutcome(mine + StatusText(c.status) + ": " + text);
  o.tag = "error";
  return o;
}

Outcome CombineMismatch(const std::vector<Outcome>& by_rank) {
  if (!by_rank.empty() && std::all_of(by_rank.begin(), by_rank.end(), [](const Outcome& o) {
        return o.verdict == Verdict::kSkip;
      })) {
    return Outcome::Skip(by_rank[0].detail);
  }
  bool all_ok = true;
  std::string detail;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    if (by_rank[r].tag != "ok") all_ok = false;
    detail += (detail.empty() ? "" : " | ") + std::string("rank ") + std::to_string(r) + ": " +
              by_rank[r].detail;
  }
  if (all_ok) {
    return Outcome::Fail("every rank completed OK: the mismatch went undetected | " + detail);
  }
  return Outcome::Pass(detail);
}

}  // namespace plexus::conformance
