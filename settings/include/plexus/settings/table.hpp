// The table of PLEXUS_* environment variables (table.def), and how a value
// is checked against its entry. Header-only and free of the environment:
// backends and the kit use it to check what the host's get_config gives
// them; environment.hpp (libplexus, tools) reads the environment.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

namespace plexus::settings {

enum class Type { kString, kPath, kChoice, kInt, kSeconds, kFlag, kSecret };
enum class Scope { kUser, kLauncher, kDebug, kInternal };

struct Setting {
  const char* name;
  Type type;
  const char* fallback;  // what unset means, in words ("" = nothing)
  double lo, hi;         // kInt, kSeconds, kFlag: the accepted range
  const char* range;     // in words; kChoice: the values, ", "-separated
  const char* layer;     // the folder that reads it
  Scope scope;
  const char* doc;
};

enum class Id : int {
#define PLEXUS_SETTING(id, ...) id,
#include "plexus/settings/table.def"
#undef PLEXUS_SETTING
  kCount
};

inline constexpr Setting kTable[] = {
#define PLEXUS_SETTING(id, name, type, fallback, lo, hi, range, layer, scope, doc) \
  {name, Type::type, fallback, double(lo), double(hi), range, layer, Scope::scope, doc},
#include "plexus/settings/table.def"
#undef PLEXUS_SETTING
};
static_assert(std::size(kTable) == size_t(Id::kCount));

constexpr const Setting& Get(Id id) {
  return kTable[size_t(id)];
}
constexpr const char* Name(Id id) {
  return kTable[size_t(id)].name;
}
inline std::span<const Setting> All() {
  return kTable;
}

// The entry named `name`, or nullptr.
inline const Setting* Find(std::string_view name) {
  for (const Setting& s : kTable) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

// The declared name closest to `name` (fewest single-character edits).
inline const char* Nearest(std::string_view name) {
  const char* best = kTable[0].name;
  size_t best_distance = SIZE_MAX;
  for (const Setting& s : kTable) {
    const std::string_view known = s.name;
    // Levenshtein distance, one row at a time.
    std::basic_string<size_t> row(known.size() + 1, 0);
    for (size_t j = 0; j <= known.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= name.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= known.size(); ++j) {
        const size_t above = row[j];
        row[j] =
            std::min({above + 1, row[j - 1] + 1, diagonal + (name[i - 1] == known[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    if (row[known.size()] < best_distance) {
      best_distance = row[known.size()];
      best = s.name;
    }
  }
  return best;
}

// `value` checked against `s`: true and *out the number when it is one in
// s's range (kInt, kFlag: whole; kSeconds: decimal); else false and
// *error "NAME='value' is not a whole number (range)" or "NAME='value' is
// out of range (range)". *out is set only on success.
inline bool ParseNumber(const Setting& s, std::string_view value, double* out, std::string* error) {
  const std::string text(value);
  const bool whole = s.type != Type::kSeconds;
  char* end = nullptr;
  double x = 0;
  if (whole) {
    // Whole numbers beyond 2^53 lose exactness in a double; none of the
    // table's ranges needs them except PLEXUS_ELASTIC_JOIN, read as text.
    const long long n = std::strtoll(text.c_str(), &end, 10);
    x = double(n);
  } else {
    x = std::strtod(text.c_str(), &end);
  }
  const bool number = !text.empty() && end != text.c_str() && *end == '\0' && x == x &&
                      !(whole && text.find_first_of(" \t") != std::string::npos);
  if (!number) {
    *error = std::string(s.name) + "='" + text + "' is not " +
             (whole ? "a whole number" : "a number of seconds") + " (" + s.range + ")";
    return false;
  }
  if (x < s.lo || x > s.hi) {
    *error = std::string(s.name) + "='" + text + "' is out of range (" + s.range + ")";
    return false;
  }
  *out = x;
  return true;
}

inline bool ParseInt(const Setting& s, std::string_view value, int64_t* out, std::string* error) {
  double x = 0;
  if (!ParseNumber(s, value, &x, error)) return false;
  *out = int64_t(x);
  return true;
}

// kChoice: true when `value` is one of s.range's values; else false and
// *error = "NAME='value' is not one of a, b, c".
inline bool CheckChoice(const Setting& s, std::string_view value, std::string* error) {
  std::string_view rest = s.range;
  while (!rest.empty()) {
    const size_t comma = rest.find(", ");
    if (rest.substr(0, comma) == value) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 2);
  }
  *error = std::string(s.name) + "='" + std::string(value) + "' is not one of " + s.range;
  return false;
}

}  // namespace plexus::settings
