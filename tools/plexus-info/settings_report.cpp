#include "settings_report.hpp"

#include <cstdio>
#include <string>

#include "plexus/settings/environment.hpp"

namespace plexus::info {
namespace {

using settings::Scope;
using settings::Setting;
using settings::Type;

const char* ScopeName(Scope s) {
  switch (s) {
    case Scope::kUser:
      return "you";
    case Scope::kLauncher:
      return "launcher";
    case Scope::kDebug:
      return "debug";
    case Scope::kInternal:
      return "internal";
  }
  return "?";
}

// A cell of a Markdown table: '|' would end it.
std::string Cell(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

int PrintSettings() {
  std::printf("%-34s %-28s %-11s %s\n", "setting", "value", "from", "read by");
  for (const Setting& s : settings::All()) {
    const char* raw = settings::RawByName(s.name);
    std::string value;
    const char* from = "environment";
    if (raw == nullptr) {
      value = *s.fallback ? std::string("(") + s.fallback + ")" : "(unset)";
      from = "default";
    } else if (s.type == Type::kSecret) {
      value = *raw ? "(set, not shown)" : "(empty)";
    } else {
      value = *raw ? raw : "(empty)";
    }
    std::printf("%-34s %-28s %-11s %s\n", s.name, value.c_str(), from, s.layer);
  }
  const auto unknown = settings::UnknownInEnvironment();
  for (const auto& [name, nearest] : unknown) {
    std::printf("%s is not a Plexus setting (did you mean %s?); it is ignored\n", name.c_str(),
                nearest.c_str());
  }
  return 0;
}

int PrintSettingsMarkdown() {
  std::printf("| variable | default | values | set by | read by | meaning |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const Setting& s : settings::All()) {
    const std::string fallback = *s.fallback ? s.fallback : "unset";
    std::printf("| `%s` | %s | %s | %s | `%s/` | %s |\n", s.name, Cell(fallback).c_str(),
                Cell(s.range).c_str(), ScopeName(s.scope), s.layer, Cell(s.doc).c_str());
  }
  return 0;
}

}  // namespace plexus::info
