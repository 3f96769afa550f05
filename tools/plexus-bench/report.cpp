#include "report.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace plexus::bench {
namespace {

// Widths of the columns; the header is laid out with the same ones.
constexpr const char* kLeadFmt = "%12s  %12s  %8s  %6s  %6s";
constexpr const char* kCellFmt = "  %8s  %7s  %7s  %6s";

std::string Format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

std::string TimeText(double us) {
  if (us >= 10000.0) return Format("%.0f", us);
  if (us >= 100.0) return Format("%.1f", us);
  return Format("%.2f", us);
}

std::string CellText(const Cell& c) {
  char buf[128];
  if (!c.present) {
    std::snprintf(buf, sizeof buf, kCellFmt, "N/A", "N/A", "N/A", "N/A");
  } else {
    const std::string wrong = c.wrong < 0 ? "N/A" : std::to_string(c.wrong);
    std::snprintf(buf, sizeof buf, kCellFmt, TimeText(c.time_us).c_str(),
                  Format("%.2f", c.algbw_gbs).c_str(), Format("%.2f", c.busbw_gbs).c_str(),
                  wrong.c_str());
  }
  return buf;
}

size_t CellWidth() {
  char cell[128];
  std::snprintf(cell, sizeof cell, kCellFmt, "", "", "", "");
  return std::strlen(cell);
}

std::string Centered(const std::string& text, size_t width) {
  if (text.size() >= width) return text;
  const size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}

// A JSON string literal (the names written here are plain, but be safe).
std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", u);
      out += esc;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string Number(double v) {
  return Format("%.9g", v);
}

std::string WrongByRank(const Cell& c) {
  if (c.wrong_by_rank.empty()) return "";
  std::string j = ", \"wrong_by_rank\": [";
  for (size_t r = 0; r < c.wrong_by_rank.size(); ++r) {
    j += (r ? ", " : "") + std::to_string(c.wrong_by_rank[r]);
  }
  return j + "]";
}

std::string CellJson(const Cell& c) {
  if (!c.present) return "null";
  return "{\"time_us\": " + Number(c.time_us) + ", \"algbw_gbs\": " + Number(c.algbw_gbs) +
         ", \"busbw_gbs\": " + Number(c.busbw_gbs) +
         ", \"wrong\": " + (c.wrong < 0 ? std::string("null") : std::to_string(c.wrong)) +
         WrongByRank(c) + "}";
}

}  // namespace

Report::Report(const BenchArgs& args, RunInfo info) : args_(args), info_(std::move(info)) {}

std::string Report::CheckJsonWritable() const {
  if (args_.json_path.empty()) return "";
  std::FILE* f = std::fopen(args_.json_path.c_str(), "w");
  if (!f) return "cannot write " + args_.json_path + ": " + std::strerror(errno);
  std::fclose(f);
  return "";
}

void Report::PrintHeader() const {
  std::printf("# plexus-bench %s: %s, backend %s %s, %u rank(s)\n", PLEXUS_VERSION_STRING,
              CollectiveName(args_.collective), info_.backend.c_str(),
              info_.backend_version.c_str(), info_.ranks);
  std::printf("# backend library: %s\n", info_.backend_path.c_str());
  std::printf(
      "# minBytes %llu maxBytes %llu step: %llu(factor) warmup iters: %d iters: %d "
      "validation: %d timing: %s%s\n",
      static_cast<unsigned long long>(args_.min_bytes),
      static_cast<unsigned long long>(args_.max_bytes),
      static_cast<unsigned long long>(args_.step_factor), args_.warmup_iters, args_.iters,
      args_.check ? 1 : 0,
      args_.blocking ? "each op waited for (--blocking)"
                     : "batch of back-to-back ops, max over ranks",
      args_.mem_alloc ? "; buffers from mem_alloc" : "");
  std::printf("#\n");
  // Column titles, laid out with the row formats.
  auto line = [](const char* a, const char* b, const char* c, const char* d, const char* e,
                 const char* t, const char* u, const char* v, const char* w) {
    char lead[128], cell[128];
    std::snprintf(lead, sizeof lead, kLeadFmt, a, b, c, d, e);
    std::snprintf(cell, sizeof cell, kCellFmt, t, u, v, w);
    return std::string("#") + (lead + 1) + cell + cell;
  };
  auto print = [](std::string text) {
    text.erase(text.find_last_not_of(' ') + 1);
    std::printf("%s\n", text.c_str());
  };
  const size_t lead_width = line("", "", "", "", "", "", "", "", "").size() - 2 * CellWidth();
  print("#" + std::string(lead_width - 1, ' ') + Centered("out-of-place", CellWidth()) +
        Centered("in-place", CellWidth()));
  print(line("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong"));
  print(line("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", ""));
  std::fflush(stdout);
}

void Report::PrintNote(const std::string& text) const {
  std::printf("# %s\n", text.c_str());
  std::fflush(stdout);
}

void Report::AddRow(const Row& row) {
  char lead[128];
  std::snprintf(lead, sizeof lead, kLeadFmt, std::to_string(row.size).c_str(),
                std::to_string(row.count).c_str(), row.type.c_str(), row.redop.c_str(),
                std::to_string(row.root).c_str());
  std::printf("%s%s%s\n", lead, CellText(row.out_of_place).c_str(), CellText(row.in_place).c_str());
  // Which ranks were wrong: a backend may be right on rank 0 alone.
  for (const auto& [cell, name] :
       {std::pair{&row.out_of_place, "out-of-place"}, std::pair{&row.in_place, "in-place"}}) {
    if (!cell->present || cell->wrong <= 0) continue;
    std::string ranks;
    for (size_t r = 0; r < cell->wrong_by_rank.size(); ++r) {
      if (cell->wrong_by_rank[r] == 0) continue;
      ranks += (ranks.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + ": " +
               std::to_string(cell->wrong_by_rank[r]);
    }
    if (!ranks.empty()) std::printf("#   wrong %s elements by rank: %s\n", name, ranks.c_str());
    for (size_t r = 0; r < cell->wrong_by_rank.size(); ++r) {
      if (cell->wrong_by_rank[r]) wrong_ranks_.insert(uint32_t(r));
    }
  }
  std::fflush(stdout);
  rows_.push_back(row);
  WriteJson(false);
}

uint64_t Report::total_wrong() const {
  uint64_t total = 0;
  for (const Row& r : rows_) {
    for (const Cell* c : {&r.out_of_place, &r.in_place}) {
      if (c->present && c->wrong > 0) total += uint64_t(c->wrong);
    }
  }
  return total;
}

double Report::average_busbw() const {
  double sum = 0;
  int cells = 0;
  for (const Row& r : rows_) {
    for (const Cell* c : {&r.out_of_place, &r.in_place}) {
      if (c->present) {
        sum += c->busbw_gbs;
        ++cells;
      }
    }
  }
  return cells ? sum / cells : 0.0;
}

void Report::Finish() {
  const uint64_t wrong = total_wrong();
  std::string where;
  for (uint32_t r : wrong_ranks_)
    where += (where.empty() ? " (on rank " : ", ") + std::to_string(r);
  if (!where.empty()) where += ")";
  std::printf("# Out of bounds values : %llu %s%s\n", static_cast<unsigned long long>(wrong),
              wrong == 0 ? "OK" : "FAILED", where.c_str());
  std::printf("# Avg bus bandwidth    : %g\n", average_busbw());
  std::printf("#\n");
  std::fflush(stdout);
  WriteJson(true);
}

void Report::WriteJson(bool complete) const {
  if (args_.json_path.empty()) return;
  std::string j = "{\n";
  j += "  \"tool\": \"plexus-bench\",\n";
  j += "  \"version\": " + Quote(PLEXUS_VERSION_STRING) + ",\n";
  j += "  \"backend\": " + Quote(info_.backend) + ",\n";
  j += "  \"backend_version\": " + Quote(info_.backend_version) + ",\n";
  j += "  \"backend_path\": " + Quote(info_.backend_path) + ",\n";
  j += "  \"ranks\": " + std::to_string(info_.ranks) + ",\n";
  j += "  \"collective\": " + Quote(CollectiveName(args_.collective)) + ",\n";
  j += "  \"timing\": " + Quote(args_.blocking ? "blocking" : "batch") + ",\n";
  j += "  \"mem_alloc\": " + std::string(args_.mem_alloc ? "true" : "false") + ",\n";
  j += "  \"iters\": " + std::to_string(args_.iters) + ",\n";
  j += "  \"warmup_iters\": " + std::to_string(args_.warmup_iters) + ",\n";
  j += "  \"check\": " + std::string(args_.check ? "true" : "false") + ",\n";
  j += "  \"complete\": " + std::string(complete ? "true" : "false") + ",\n";
  j += "  \"wrong_total\": " + std::to_string(total_wrong()) + ",\n";
  j += "  \"avg_busbw_gbs\": " + Number(average_busbw()) + ",\n";
  j += "  \"rows\": [";
  for (size_t i = 0; i < rows_.size(); ++i) {
    const Row& r = rows_[i];
    j += i ? ",\n    " : "\n    ";
    j += "{\"size\": " + std::to_string(r.size) + ", \"count\": " + std::to_string(r.count) +
         ", \"type\": " + Quote(r.type) + ", \"redop\": " + Quote(r.redop) +
         ", \"root\": " + std::to_string(r.root) +
         ", \"out_of_place\": " + CellJson(r.out_of_place) +
         ", \"in_place\": " + CellJson(r.in_place) + "}";
  }
  j += rows_.empty() ? "]\n}\n" : "\n  ]\n}\n";
  // Write a temporary file and rename it, so a reader never sees half a file.
  const std::string tmp = args_.json_path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f != nullptr;
  if (f) {
    ok = std::fwrite(j.data(), 1, j.size(), f) == j.size();
    ok = std::fclose(f) == 0 && ok;
  }
  if (!ok || std::rename(tmp.c_str(), args_.json_path.c_str()) != 0) {
    std::fprintf(stderr, "plexus-bench: cannot write %s: %s\n", args_.json_path.c_str(),
                 std::strerror(errno));
  }
}

}  // namespace plexus::bench
