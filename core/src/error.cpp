#include "plexus/error.hpp"

#include "plexus/status.hpp"

namespace plexus {

namespace {

// "plexus[tcp] TIMEOUT: ..." when a backend said it; "plexus INVALID_ARGUMENT:
// ..." when the host did (not "plexus[plexus]", which reads as a backend).
std::string Prefix(const std::string& backend) {
  return backend.empty() || backend == "plexus" ? "plexus " : "plexus[" + backend + "] ";
}

}  // namespace

Error::Error(int32_t status, std::string backend, std::string message)
    : std::runtime_error(Prefix(backend) + StatusName(status) + ": " + message),
      status_(status),
      backend_(std::move(backend)),
      message_(std::move(message)) {}

}  // namespace plexus
