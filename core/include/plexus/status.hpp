// plexus::Status — the result of an operation inside the host, LevelDB-style.
//
// Layers below the C++ user surface return a Status instead of throwing; only
// plexus::Communicator and plexus::Work turn a failed Status into plexus::Error.
// The codes are exactly the ABI status codes of plexus/backend.h, so a status
// that came from a plugin passes through unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "plexus/backend.h"

namespace plexus {

class Status {
 public:
  Status() = default;  // OK
  Status(int32_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return {PLEXUS_ERR_INVALID_ARGUMENT, std::move(m)};
  }
  static Status InvalidUsage(std::string m) { return {PLEXUS_ERR_INVALID_USAGE, std::move(m)}; }
  static Status Unsupported(std::string m) { return {PLEXUS_ERR_UNSUPPORTED, std::move(m)}; }
  static Status System(std::string m) { return {PLEXUS_ERR_SYSTEM, std::move(m)}; }
  static Status Internal(std::string m) { return {PLEXUS_ERR_INTERNAL, std::move(m)}; }
  static Status Remote(std::string m) { return {PLEXUS_ERR_REMOTE, std::move(m)}; }
  static Status Timeout(std::string m) { return {PLEXUS_ERR_TIMEOUT, std::move(m)}; }
  static Status Aborted(std::string m) { return {PLEXUS_ERR_ABORTED, std::move(m)}; }

  bool ok() const { return code_ == PLEXUS_OK; }
  int32_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // "TIMEOUT: <message>" — the code's name from plexus_status_name() and the text.
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; the code is kept.
  Status WithContext(const std::string& context) const;

 private:
  int32_t code_ = PLEXUS_OK;
  std::string message_;
};

// Short upper-case name of an ABI status code ("OK", "TIMEOUT", ...); "UNKNOWN(<n>)" otherwise.
std::string StatusName(int32_t code);

}  // namespace plexus
