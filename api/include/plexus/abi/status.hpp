// plexus::abi::Status — an ABI status code (plexus/backend.h) and a message
// that says what failed and where. Plugins cannot depend on libplexus, so
// the ABI's rules, the algorithms and the kit carry this minimal one.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "plexus/backend.h"

namespace plexus::abi {

struct Status {
  int32_t code = PLEXUS_OK;
  std::string message;

  Status() = default;
  Status(int32_t c, std::string m) : code(c), message(std::move(m)) {}
  bool ok() const { return code == PLEXUS_OK; }
};

}  // namespace plexus::abi
