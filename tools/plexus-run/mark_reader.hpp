// MarkReader: the launcher's reads of what the ranks marked in the job's
// store (stall lines, generations reached), over one connection kept between
// reads. --elastic reads four times a second for the whole job; a connection
// per read cost a handshake each time and left a socket in TIME_WAIT.
//
// The connection is made at the first read and made again after a call on it
// failed other than by waiting for a key that is not there (the store went
// away, or the connection broke). Reads may come from any thread; they are
// serialised.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "plexus/rendezvous_store.hpp"

namespace plexus::run {

class MarkReader {
 public:
  MarkReader(std::string addr, uint16_t port) : addr_(std::move(addr)), port_(port) {}

  // Calls read with the store; false, without calling it, when no
  // connection could be made within 2 s.
  bool Read(const std::function<void(RendezvousStore&)>& read);

 private:
  std::string addr_;
  uint16_t port_;
  std::mutex mutex_;
  std::unique_ptr<RendezvousStore> client_;
};

}  // namespace plexus::run
