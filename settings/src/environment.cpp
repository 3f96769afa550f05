#include "plexus/settings/environment.hpp"

#include <cstdlib>
#include <cstring>

extern char** environ;

namespace plexus::settings {

const char* Raw(Id id) {
  return std::getenv(Name(id));
}

std::optional<std::string> Value(Id id) {
  const char* v = Raw(id);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

bool ReadInt(Id id, int64_t* out, std::string* error) {
  const char* v = Raw(id);
  if (v == nullptr || *v == '\0') return true;
  return ParseInt(Get(id), v, out, error);
}

bool ReadNumber(Id id, double* out, std::string* error) {
  const char* v = Raw(id);
  if (v == nullptr || *v == '\0') return true;
  return ParseNumber(Get(id), v, out, error);
}

const char* RawByName(const char* name) {
  if (name == nullptr) return nullptr;
  return std::getenv(name);
}

std::vector<std::pair<std::string, std::string>> UnknownInEnvironment() {
  std::vector<std::pair<std::string, std::string>> unknown;
  constexpr std::string_view kPrefix = "PLEXUS_";
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry = *e;
    if (entry.substr(0, kPrefix.size()) != kPrefix) continue;
    const std::string_view name = entry.substr(0, entry.find('='));
    if (Find(name) != nullptr) continue;
    unknown.emplace_back(std::string(name), Nearest(name));
  }
  return unknown;
}

std::vector<std::string> UnknownWarnings() {
  std::vector<std::string> lines;
  for (const auto& [name, nearest] : UnknownInEnvironment()) {
    lines.push_back(name + " is not a Plexus setting (did you mean " + nearest +
                    "?); it is ignored. `plexus-info --settings` lists them all");
  }
  return lines;
}

}  // namespace plexus::settings
