// A communicator's setting, as ABI 1.1 delivers it: the communicator's own
// configuration (plexus_comm_config_v1.get_config: what the application gave
// that communicator, else the environment) when the host provides it, else
// the host's process-wide getter (a 1.0 host). "" when unset. Header-only:
// for any backend, also one that does not use plexus-algos' collectives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "plexus/backend.h"

namespace plexus::algos {

inline std::string CommSetting(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                               const char* key) {
  int64_t (*get)(void*, const char*, char*, size_t) = host.get_config;
  void* ctx = host.ctx;
  if (config.struct_size >= offsetof(plexus_comm_config_v1, config_ctx) + sizeof(void*) &&
      config.get_config) {
    get = config.get_config;
    ctx = config.config_ctx;
  }
  if (!get) return {};
  char buf[256];
  const int64_t n = get(ctx, key, buf, sizeof buf);
  if (n < 0) return {};
  if (uint64_t(n) < sizeof buf) return std::string(buf);
  if (n > (int64_t{1} << 20)) return std::string(buf);  // absurd; keep the prefix
  std::string value(size_t(n) + 1, '\0');
  if (get(ctx, key, value.data(), value.size()) != n) return std::string(buf);
  value.resize(size_t(n));
  return value;
}

}  // namespace plexus::algos
