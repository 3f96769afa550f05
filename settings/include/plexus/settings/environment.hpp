// The process environment's PLEXUS_* variables: the one place that reads
// them (tests/settings/ fails on a getenv("PLEXUS_...") anywhere else).
// Part of libplexus; tools and samples reach it through libplexus_dep.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plexus/settings/table.hpp"

namespace plexus::settings {

// The variable's value, as getenv gives it (nullptr when unset). The
// pointer is the environment's: valid until the variable is set again.
const char* Raw(Id id);

// The value when set and not empty.
std::optional<std::string> Value(Id id);

// A whole-number or seconds setting from the environment. Unset or empty:
// true and *out unchanged. Set: as ParseInt / ParseNumber.
bool ReadInt(Id id, int64_t* out, std::string* error);
bool ReadNumber(Id id, double* out, std::string* error);

// Any variable by name, for the host's get_config (a plugin may ask for a
// variable of its own). A PLEXUS_* name must be declared in table.def.
const char* RawByName(const char* name);

// Each PLEXUS_* variable in the environment that table.def does not declare,
// with the declared name nearest to it.
std::vector<std::pair<std::string, std::string>> UnknownInEnvironment();

// The warning for UnknownInEnvironment(), one line per variable:
// "PLEXUS_BAKCEND is not a Plexus setting (did you mean PLEXUS_BACKEND?); it
// is ignored". Empty when there is none.
std::vector<std::string> UnknownWarnings();

}  // namespace plexus::settings
