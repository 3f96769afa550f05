#include "journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

namespace plexus::conformance {
namespace {

std::string JournalPath(const std::string& dir) {
  return dir + "/journal";
}

// Tabs and newlines would break the line format; check names have none, but
// a backend name comes from the plugin.
std::string Field(std::string text) {
  for (char& c : text) {
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

std::vector<std::string> SplitTabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    fields.push_back(
        line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) return fields;
    start = tab + 1;
  }
}

}  // namespace

Journal::Journal(const std::string& dir) {
  if (dir.empty()) return;
  fd_ = open(JournalPath(dir).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
}

Journal::~Journal() {
  if (fd_ >= 0) close(fd_);
}

void Journal::Write(const std::string& line) {
  if (fd_ < 0) return;
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += size_t(n);
  }
}

void Journal::Header(const std::string& backend, uint32_t size) {
  Write("H\t" + Field(backend) + "\t" + std::to_string(size));
}

void Journal::Add(const JournalEntry& e) {
  Write("C\t" + std::to_string(e.index) + "\t" + char(e.verdict) + "\t" + e.ended + "\t" +
        Field(e.group) + "\t" + Field(e.capability) + "\t" + Field(e.name));
}

void Journal::Done() {
  Write("D");
}

JournalContents ReadJournal(const std::string& dir) {
  JournalContents out;
  std::ifstream in(JournalPath(dir));
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // no newline: a line torn by a crash
    const std::vector<std::string> f = SplitTabs(line);
    if (f[0] == "H" && f.size() == 3) {
      out.backend = f[1];
      out.size = uint32_t(std::strtoul(f[2].c_str(), nullptr, 10));
    } else if (f[0] == "C" && f.size() == 7 && f[2].size() == 1 && f[3].size() == 1) {
      JournalEntry e;
      e.index = std::strtoll(f[1].c_str(), nullptr, 10);
      e.verdict = Verdict(f[2][0]);
      e.ended = f[3][0];
      e.group = f[4];
      e.capability = f[5];
      e.name = f[6];
      out.checks.push_back(std::move(e));
    } else if (f[0] == "D") {
      out.done = true;
    }
  }
  return out;
}

}  // namespace plexus::conformance
