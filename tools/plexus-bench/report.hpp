// What rank 0 of plexus-bench prints and writes: an nccl-tests-style header,
// one row per measured size (printed and flushed at once), a footer, and the
// same rows as JSON for scripts. Not thread-safe.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "measurement.hpp"

namespace plexus::bench {

struct RunInfo {
  std::string backend;
  std::string backend_version;
  std::string backend_path;
  uint32_t ranks = 0;
};

class Report {
 public:
  // Does not take ownership of args, which must outlive the report.
  Report(const BenchArgs& args, RunInfo info);

  // Whether the JSON file (if any) can be written; an empty string if so,
  // otherwise the reason.
  std::string CheckJsonWritable() const;

  void PrintHeader() const;
  void PrintNote(const std::string& text) const;  // one "# text" line
  // Prints the row, keeps it, and rewrites the JSON file with every row so far.
  void AddRow(const Row& row);
  // Prints the footer and writes the final JSON file.
  void Finish();

  // Sum of #wrong over every checked cell.
  uint64_t total_wrong() const;
  // Mean busbw over every measured cell (0 when none).
  double average_busbw() const;

 private:
  void WriteJson(bool complete) const;

  const BenchArgs& args_;
  RunInfo info_;
  std::vector<Row> rows_;
  std::set<uint32_t> wrong_ranks_;  // ranks with any wrong element so far
};

}  // namespace plexus::bench
