// What every ABI entry point needs to report failure: a communicator's
// last-error string, copying a message into a caller's buffer, and a guard
// that keeps C++ exceptions from crossing the C ABI.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <new>
#include <string>

#include "plexus/backend.h"

namespace plexus::kit {

// Copies message into buf (len bytes, owned by the caller), NUL-terminated
// and truncated to fit; nothing when buf is NULL or len is 0.
void CopyOut(const std::string& message, char* buf, size_t len);

// A communicator's most recent error (comm_last_error). Thread-safe.
class ErrorSlot {
 public:
  void Set(std::string message);
  // comm_last_error's contract: copies into buf, returns the full length.
  size_t Copy(char* buf, size_t len) const;

 private:
  mutable std::mutex mutex_;
  std::string message_;
};

// Runs fn (returning an ABI status) so that nothing thrown escapes: an
// allocation failure becomes PLEXUS_ERR_SYSTEM, anything else
// PLEXUS_ERR_INTERNAL, each recorded in errors (which may be NULL) as
// "<prefix>: ...". (prefix: static storage; no string is built unless
// something was thrown, since test and wait pass here on every call.)
template <typename Fn>
int32_t Guarded(ErrorSlot* errors, const char* prefix, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    if (errors) errors->Set(std::string(prefix) + ": out of memory");
    return PLEXUS_ERR_SYSTEM;
  } catch (const std::exception& e) {
    if (errors) errors->Set(std::string(prefix) + ": internal error: " + e.what());
    return PLEXUS_ERR_INTERNAL;
  } catch (...) {
    return PLEXUS_ERR_INTERNAL;
  }
}

}  // namespace plexus::kit
