// Rank 0's report: a line per check as it completes, then the summaries.
//
//   PASS  allreduce int32 sum count=1009
//   FAIL  allreduce float16 avg count=1 in-place  rank 1: 1 of 1 elements wrong; ...
//   SKIP  waits from several threads  thread_level is serialized
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "check.hpp"

namespace plexus::conformance {

class Report {
 public:
  explicit Report(std::FILE* out) : out_(out) {}

  void Line(const std::string& text);  // a free-form line, flushed

  // Merges the ranks' outcomes of check (check.combine, else any FAIL
  // fails), prints its line and counts it. Returns the merged outcome.
  Outcome Add(const Check& check, const std::vector<Outcome>& by_rank);

  // A check during which a rank crashed (ended 'c') or hung ('h'): prints
  // its FAIL line and counts it (restarts.cpp).
  void AddEnded(const std::string& name, const std::string& group, const std::string& capability,
                char ended, const std::string& detail);
  // Counts a verdict printed by an earlier run of the ranks, without
  // printing it (journal.hpp).
  void Restore(const std::string& group, const std::string& capability, Verdict verdict,
               char ended);

  // The per-collective table, the failing capabilities and the result line.
  void Summary(const std::string& backend, uint32_t size);

  bool failed() const { return failed_ > 0; }

 private:
  void Count(const std::string& group, const std::string& capability, Verdict verdict);

  struct Counts {
    int pass = 0, fail = 0, skip = 0;
    void Add(Verdict v) { (v == Verdict::kPass ? pass : v == Verdict::kFail ? fail : skip)++; }
  };

  std::FILE* out_;
  std::vector<std::string> group_order_;
  std::map<std::string, Counts> groups_;
  std::map<std::string, std::map<std::string, Counts>> capabilities_;  // group -> capability
  int passed_ = 0, failed_ = 0, skipped_ = 0;
  int crashed_ = 0, hung_ = 0;  // of failed_: checks during which a rank crashed or hung
};

}  // namespace plexus::conformance
