// plexus::algos::Status — result of an algorithm or transport call.
//
// The ABI's minimal status (plexus/abi/status.hpp): an ABI status code and a
// message that says what failed and where; backends cannot use libplexus'.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "plexus/abi/status.hpp"
#include "plexus/backend.h"

namespace plexus::algos {

using Status = abi::Status;

// Returns early from the enclosing function when expr yields a failed Status.
#define PLEXUS_ALGOS_RETURN_IF_ERROR(expr)    \
  do {                                        \
    ::plexus::algos::Status status_ = (expr); \
    if (!status_.ok()) return status_;        \
  } while (0)

}  // namespace plexus::algos
