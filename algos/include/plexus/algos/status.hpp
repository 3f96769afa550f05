// plexus::algos::Status — result of an algorithm or transport call.
//
// The algorithm library is linked into backends, which must not depend on
// libplexus, so it carries its own minimal status: an ABI status code from
// plexus/backend.h and a message that says what failed and where.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "plexus/backend.h"

namespace plexus::algos {

struct Status {
  int32_t code = PLEXUS_OK;
  std::string message;

  Status() = default;
  Status(int32_t c, std::string m) : code(c), message(std::move(m)) {}
  bool ok() const { return code == PLEXUS_OK; }
};

// Returns early from the enclosing function when expr yields a failed Status.
#define PLEXUS_ALGOS_RETURN_IF_ERROR(expr)    \
  do {                                        \
    ::plexus::algos::Status status_ = (expr); \
    if (!status_.ok()) return status_;        \
  } while (0)

}  // namespace plexus::algos
