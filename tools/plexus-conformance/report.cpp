#include "report.hpp"

#include <algorithm>

namespace plexus::conformance {
namespace {

const char* VerdictWord(Verdict v) {
  return v == Verdict::kPass ? "PASS" : v == Verdict::kFail ? "FAIL" : "SKIP";
}

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

// The default merge: FAIL if any rank failed, naming the ranks with each
// distinct reason; SKIP if every rank skipped; else PASS.
Outcome Merge(const std::vector<Outcome>& by_rank) {
  std::vector<std::pair<std::string, std::vector<uint32_t>>> reasons;  // in rank order
  bool all_skipped = !by_rank.empty();
  for (uint32_t r = 0; r < by_rank.size(); ++r) {
    const Outcome& o = by_rank[r];
    if (o.verdict != Verdict::kSkip) all_skipped = false;
    if (o.verdict != Verdict::kFail) continue;
    auto it = std::find_if(reasons.begin(), reasons.end(),
                           [&](const auto& p) { return p.first == o.detail; });
    if (it == reasons.end()) {
      reasons.push_back({o.detail, {r}});
    } else {
      it->second.push_back(r);
    }
  }
  if (!reasons.empty()) {
    std::string detail;
    for (const auto& [why, ranks] : reasons) {
      detail += (detail.empty() ? "" : " | ") + RankList(ranks) + ": " + why;
    }
    return Outcome::Fail(detail);
  }
  // PASS or SKIP: the first rank's detail that says something.
  std::string detail;
  for (const Outcome& o : by_rank) {
    if (!o.detail.empty()) {
      detail = o.detail;
      break;
    }
  }
  return all_skipped ? Outcome::Skip(detail) : Outcome::Pass(detail);
}

}  // namespace

void Report::Line(const std::string& text) {
  std::fprintf(out_, "%s\n", text.c_str());
  std::fflush(out_);
}

Outcome Report::Add(const Check& check, const std::vector<Outcome>& by_rank) {
  Outcome merged = check.combine ? check.combine(by_rank) : Merge(by_rank);
  // A combine() that passes must still not hide a rank's plain failure.
  if (check.combine && merged.verdict != Verdict::kFail) {
    const Outcome plain = Merge(by_rank);
    if (plain.verdict == Verdict::kFail) merged = plain;
  }
  std::string line = std::string(VerdictWord(merged.verdict)) + "  " + check.name;
  if (!merged.detail.empty()) line += "  " + merged.detail;
  Line(line);
  Count(check.group, check.capability, merged.verdict);
  return merged;
}

void Report::AddEnded(const std::string& name, const std::string& group,
                      const std::string& capability, char ended, const std::string& detail) {
  Line("FAIL  " + name + "  " + detail);
  Restore(group, capability, Verdict::kFail, ended);
}

void Report::Restore(const std::string& group, const std::string& capability, Verdict verdict,
                     char ended) {
  Count(group, capability, verdict);
  if (ended == 'c') ++crashed_;
  if (ended == 'h') ++hung_;
}

void Report::Count(const std::string& group, const std::string& capability, Verdict verdict) {
  if (!groups_.count(group)) group_order_.push_back(group);
  groups_[group].Add(verdict);
  if (!capability.empty()) capabilities_[group][capability].Add(verdict);
  (verdict == Verdict::kPass ? passed_ : verdict == Verdict::kFail ? failed_ : skipped_)++;
}

void Report::Summary(const std::string& backend, uint32_t size) {
  Line("");
  Line("Summary by group (checks; a collective's capabilities are its dtype x op pairs):");
  char row[256];
  std::snprintf(row, sizeof row, "  %-20s %12s %8s %8s %8s", "group", "capabilities", "passed",
                "failed", "skipped");
  Line(row);
  for (const std::string& g : group_order_) {
    const Counts& c = groups_[g];
    const auto caps = capabilities_.find(g);
    const std::string ncaps =
        caps == capabilities_.end() ? "-" : std::to_string(caps->second.size());
    std::snprintf(row, sizeof row, "  %-20s %12s %8d %8d %8d", g.c_str(), ncaps.c_str(), c.pass,
                  c.fail, c.skip);
    Line(row);
  }
  bool header = false;
  for (const std::string& g : group_order_) {
    const auto caps = capabilities_.find(g);
    if (caps == capabilities_.end()) continue;
    for (const auto& [cap, c] : caps->second) {
      if (c.fail == 0) continue;
      if (!header) {
        Line("");
        Line("Capabilities with failures (failed of run):");
        header = true;
      }
      std::snprintf(row, sizeof row, "  %-36s %d of %d", cap.c_str(), c.fail,
                    c.pass + c.fail + c.skip);
      Line(row);
    }
  }
  // "2 failed (2 crashed a rank, 1 hung)": the checks the ranks were
  // started again after.
  std::string ended;
  if (crashed_) ended = std::to_string(crashed_) + " crashed a rank";
  if (hung_) ended += (ended.empty() ? "" : ", ") + std::to_string(hung_) + " hung";
  Line("");
  Line("RESULT: backend '" + backend + "' on " + std::to_string(size) + " rank" +
       (size == 1 ? "" : "s") + ": " + std::to_string(passed_ + failed_ + skipped_) + " checks, " +
       std::to_string(passed_) + " passed, " + std::to_string(failed_) + " failed" +
       (ended.empty() ? "" : " (" + ended + ")") + ", " + std::to_string(skipped_) +
       " skipped: " + (failed_ ? "DOES NOT CONFORM" : "conforms"));
}

}  // namespace plexus::conformance
