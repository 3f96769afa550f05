#include "slurm_env.hpp"

#include <charconv>

namespace plexus::slurm {
namespace {

Status Bad(const std::string& list, size_t at, const std::string& why) {
  return Status::InvalidArgument("'" + list + "' is not a Slurm node list: " + why +
                                 " (at character " + std::to_string(at + 1) + ")");
}

bool ParseNumber(const std::string& s, uint64_t* v) {
  if (s.empty() || s.size() > 18) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size();
}

std::string Padded(uint64_t v, size_t width) {
  std::string s = std::to_string(v);
  if (s.size() < width) s.insert(0, width - s.size(), '0');
  return s;
}

// Expands one name (no top-level comma), appending to out.
Status ExpandName(const std::string& list, size_t begin, size_t end, size_t max_hosts,
                  std::vector<std::string>* out) {
  std::vector<std::string> names{""};
  size_t i = begin;
  while (i < end) {
    if (list[i] == ']') return Bad(list, i, "a ']' without its '['");
    if (list[i] != '[') {
      const size_t j = list.find_first_of("[]", i);
      const size_t stop = j == std::string::npos || j > end ? end : j;
      for (auto& n : names) n += list.substr(i, stop - i);
      i = stop;
      continue;
    }
    const size_t close = list.find(']', i);
    if (close == std::string::npos || close > end) return Bad(list, i, "a '[' without its ']'");
    std::vector<std::string> pieces;
    size_t k = i + 1;
    while (k <= close) {
      size_t comma = list.find(',', k);
      if (comma == std::string::npos || comma > close) comma = close;
      const std::string item = list.substr(k, comma - k);
      const size_t dash = item.find('-');
      const std::string lo_text = item.substr(0, dash);
      const std::string hi_text = dash == std::string::npos ? lo_text : item.substr(dash + 1);
      uint64_t lo = 0, hi = 0;
      if (!ParseNumber(lo_text, &lo) || !ParseNumber(hi_text, &hi)) {
        return Bad(list, k, "'" + item + "' is not a number or a range of numbers");
      }
      if (hi < lo) return Bad(list, k, "the range '" + item + "' ends below its start");
      if (hi - lo >= max_hosts) return Bad(list, k, "the range '" + item + "' is too long");
      for (uint64_t v = lo; v <= hi; ++v) pieces.push_back(Padded(v, lo_text.size()));
      k = comma + 1;
    }
    if (names.size() * pieces.size() > max_hosts) {
      return Bad(list, i, "more than " + std::to_string(max_hosts) + " hosts");
    }
    std::vector<std::string> product;
    product.reserve(names.size() * pieces.size());
    for (const auto& n : names) {
      for (const auto& p : pieces) product.push_back(n + p);
    }
    names = std::move(product);
    i = close + 1;
  }
  if (names.size() == 1 && names[0].empty()) return Bad(list, begin, "an empty host name");
  if (out->size() + names.size() > max_hosts) {
    return Bad(list, begin, "more than " + std::to_string(max_hosts) + " hosts");
  }
  out->insert(out->end(), names.begin(), names.end());
  return Status::Ok();
}

}  // namespace

Status ExpandNodeList(const std::string& list, std::vector<std::string>* hosts,
                      size_t max_hosts) {
  std::vector<std::string> out;
  size_t begin = 0, depth = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') {
      if (depth == 0) return Bad(list, i, "a ']' without its '['");
      --depth;
    }
    if (c == ',' && depth == 0) {
      Status st = ExpandName(list, begin, i, max_hosts, &out);
      if (!st.ok()) return st;
      begin = i + 1;
    }
  }
  if (depth != 0) return Bad(list, list.size() - 1, "a '[' without its ']'");
  *hosts = std::move(out);
  return Status::Ok();
}

Status ParseTasksPerNode(const std::string& text, std::vector<uint32_t>* counts,
                         size_t max_nodes) {
  std::vector<uint32_t> out;
  size_t i = 0;
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("'" + text + "' is not a Slurm tasks-per-node list (e.g. "
                                   "'2(x3),1'): " + why);
  };
  if (text.empty()) return bad("it is empty");
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    const size_t paren = item.find("(x");
    uint64_t tasks = 0, repeat = 1;
    const std::string tasks_text = item.substr(0, paren);
    if (!ParseNumber(tasks_text, &tasks) || tasks == 0 || tasks > UINT32_MAX) {
      return bad("'" + item + "' does not start with a task count of at least 1");
    }
    if (paren != std::string::npos) {
      if (item.back() != ')' ||
          !ParseNumber(item.substr(paren + 2, item.size() - paren - 3), &repeat) ||
          repeat == 0) {
        return bad("'" + item + "' is not COUNT or COUNT(xNODES)");
      }
    }
    if (repeat > max_nodes || out.size() + repeat > max_nodes) {
      return bad("more than " + std::to_string(max_nodes) + " nodes");
    }
    out.insert(out.end(), size_t(repeat), uint32_t(tasks));
    i = j + 1;
    if (j + 1 == text.size()) return bad("it ends with a comma");
  }
  *counts = std::move(out);
  return Status::Ok();
}

uint16_t StepPort(uint64_t job_id, uint64_t step_id) {
  // Steps of one job differ in step_id (small numbers), jobs in job_id;
  // 64 steps of a job before ports of the next job id could be reached.
  return uint16_t(kPortBase + (job_id * 64 + step_id % 64) % kPortSpan);
}

}  // namespace plexus::slurm
