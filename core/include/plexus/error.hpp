// plexus::Error — the one exception type of the C++ API. It carries the ABI
// status code, the backend that produced it (or "plexus" for the host) and
// the message, which names the operation and, for peer failures, the rank.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace plexus {

class Error : public std::runtime_error {
 public:
  Error(int32_t status, std::string backend, std::string message);

  int32_t status() const noexcept { return status_; }               // a PLEXUS_ERR_* code
  const std::string& backend() const noexcept { return backend_; }  // "tcp", "mpi", "plexus", ...
  const std::string& message() const noexcept { return message_; }  // without the prefix

 private:
  int32_t status_;
  std::string backend_;
  std::string message_;
};

}  // namespace plexus
