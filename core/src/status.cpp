// plexus::Status helpers: names of the ABI status codes and message formatting.
#include "plexus/status.hpp"

namespace plexus {

std::string StatusName(int32_t code) {
  // A switch over the ABI macros (not a table indexed by code) so that a code
  // added to backend.h later, or a bogus code from a plugin, can never index
  // out of bounds; unknown codes are printed with their value for debugging.
  switch (code) {
    case PLEXUS_OK:
      return "OK";
    case PLEXUS_IN_PROGRESS:
      return "IN_PROGRESS";
    case PLEXUS_ERR_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case PLEXUS_ERR_INVALID_USAGE:
      return "INVALID_USAGE";
    case PLEXUS_ERR_UNSUPPORTED:
      return "UNSUPPORTED";
    case PLEXUS_ERR_SYSTEM:
      return "SYSTEM";
    case PLEXUS_ERR_INTERNAL:
      return "INTERNAL";
    case PLEXUS_ERR_REMOTE:
      return "REMOTE";
    case PLEXUS_ERR_TIMEOUT:
      return "TIMEOUT";
    case PLEXUS_ERR_ABORTED:
      return "ABORTED";
    default:
      return "UNKNOWN(" + std::to_string(code) + ")";
  }
}

std::string Status::ToString() const {
  std::string name = StatusName(code_);
  // "OK" alone reads better than "OK: " in logs; same for an error without text.
  if (message_.empty()) return name;
  return name + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (message_.empty()) return Status(code_, context);
  if (context.empty()) return *this;
  return Status(code_, context + ": " + message_);
}

}  // namespace plexus
