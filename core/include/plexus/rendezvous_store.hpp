// The rendezvous store: a small key-value service every rank of a job reaches
// over TCP, used for bootstrap (out-of-band allgather/broadcast for plugins).
//
// One process hosts a TcpStoreServer (plexus-run, or rank 0 when no launcher
// hosts it); every rank holds a TcpStoreClient. Values are opaque bytes.
// Every call has a timeout; nothing here blocks forever.
//
// Thread safety: every RendezvousStore method may be called from any thread;
// a client serialises its requests on one connection.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plexus/status.hpp"

namespace plexus {

using Bytes = std::vector<uint8_t>;

// Limits enforced by both sides before allocating anything.
inline constexpr size_t kStoreMaxKeyBytes = 4096;
inline constexpr size_t kStoreMaxValueBytes = 64u << 20;  // 64 MiB
inline constexpr size_t kStoreMaxKeysPerWait = 4096;

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;

  // Stores value under key, replacing any previous value, and wakes waiters.
  virtual Status Set(const std::string& key, const Bytes& value,
                     std::chrono::milliseconds timeout) = 0;

  // Waits until key exists (up to timeout), then copies its value into *value.
  // On TIMEOUT *value is left unchanged and the message names the key.
  virtual Status Get(const std::string& key, Bytes* value, std::chrono::milliseconds timeout) = 0;

  // Atomically adds delta to the signed 64-bit integer stored under key (a
  // missing key counts as 0) and returns the new value in *new_value.
  // A key that holds a value that is not an 8-byte counter is INVALID_USAGE.
  virtual Status Add(const std::string& key, int64_t delta, int64_t* new_value,
                     std::chrono::milliseconds timeout) = 0;

  // Waits until every key in keys exists, or returns TIMEOUT naming the first missing key.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
};

// A store living in this process only: for world size 1 and for tests.
std::unique_ptr<RendezvousStore> MakeInProcessStore();

// Client of a TcpStoreServer. Connects to host:port, retrying until timeout
// (the server may not be listening yet). host is a numeric address or a name.
Status ConnectTcpStore(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                       std::unique_ptr<RendezvousStore>* out);

// The server side. Runs one background thread that serves every client with
// poll(); a client that sends a malformed or oversized frame is disconnected
// (and logged) while every other client is served on.
class TcpStoreServer {
 public:
  // Binds bind_addr:port (port 0 lets the OS choose) and starts serving.
  // bind_addr "" or "0.0.0.0" means every IPv4 address.
  static Status Start(const std::string& bind_addr, uint16_t port,
                      std::unique_ptr<TcpStoreServer>* out);

  virtual ~TcpStoreServer() = default;  // stops the thread and closes every socket
  virtual uint16_t port() const = 0;    // the port actually bound
  virtual void Stop() = 0;              // idempotent
};

}  // namespace plexus
