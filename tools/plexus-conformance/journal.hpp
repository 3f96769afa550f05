// Rank 0's record of the verdicts so far, so that a suite whose ranks were
// started again after a crash (restarts.hpp) still ends with the whole
// summary and one RESULT line.
//
// A text file, journal, in the state directory. Each record is one line
// written with one write(), so a crash loses at most the line being written:
//   H <TAB> backend name <TAB> ranks              once, at the start
//   C <TAB> index <TAB> verdict <TAB> ended <TAB> group <TAB> capability <TAB> name
//                                                 a check's merged verdict
//   D                                             the RESULT line is printed
// where verdict is P, F or S and ended is '-', or 'c' (a rank crashed or
// ended during the check) or 'h' (a rank hung in it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "check.hpp"

namespace plexus::conformance {

struct JournalEntry {
  int64_t index = 0;  // position in the check list
  Verdict verdict = Verdict::kPass;
  char ended = '-';
  std::string group, capability, name;
};

struct JournalContents {
  std::string backend;
  uint32_t size = 0;
  std::vector<JournalEntry> checks;
  bool done = false;
};

class Journal {
 public:
  // Appends to dir/journal, creating it; does nothing when dir is "".
  explicit Journal(const std::string& dir);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  void Header(const std::string& backend, uint32_t size);
  void Add(const JournalEntry& entry);
  void Done();

 private:
  void Write(const std::string& line);
  int fd_ = -1;
};

// Reads dir/journal; a missing file reads as empty. A torn last line is ignored.
JournalContents ReadJournal(const std::string& dir);

}  // namespace plexus::conformance
