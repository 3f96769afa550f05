// Logging through the host's callback; silent when the host gave none.
#pragma once

#include <string>

#include "plexus/backend.h"

namespace plexus::tcp {

inline void Log(const plexus_host_v1& host, int32_t level, const std::string& message) {
  if (host.log) host.log(host.ctx, level, ("tcp: " + message).c_str());
}

}  // namespace plexus::tcp
