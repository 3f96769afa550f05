#include "plexus/error.hpp"

#include "plexus/status.hpp"

namespace plexus {

Error::Error(int32_t status, std::string backend, std::string message)
    : std::runtime_error("plexus[" + backend + "] " + StatusName(status) + ": " + message),
      status_(status),
      backend_(std::move(backend)),
      message_(std::move(message)) {}

}  // namespace plexus
