// InProcessStore: the RendezvousStore for world size 1 and for tests.
//
// Same semantics as the TCP store (same limits, same 8-byte little-endian
// counters, same TIMEOUT messages naming the key), implemented with one mutex
// and one condition variable: every Set/Add notifies all waiters, and each
// waiter re-checks its own keys. Waiters are few, so that is cheaper than
// per-key wait lists.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <unordered_map>

#include "store_protocol.hpp"

namespace plexus {
namespace {

using Clock = std::chrono::steady_clock;

Status CheckKey(const std::string& key) {
  if (key.size() > kStoreMaxKeyBytes) {
    return Status::InvalidArgument("store key of " + std::to_string(key.size()) +
                                   " bytes exceeds the limit of " +
                                   std::to_string(kStoreMaxKeyBytes));
  }
  return Status::Ok();
}

class InProcessStore final : public RendezvousStore {
 public:
  Status Set(const std::string& key, const Bytes& value, std::chrono::milliseconds) override {
    Status s = CheckKey(key);
    if (!s.ok()) return s;
    if (value.size() > kStoreMaxValueBytes) {
      return Status::InvalidArgument("store value of " + std::to_string(value.size()) +
                                     " bytes exceeds the limit of " +
                                     std::to_string(kStoreMaxValueBytes));
    }
    try {
      Bytes copy = value;  // copy outside the lock: a 64 MiB copy should not block readers
      std::lock_guard<std::mutex> lock(mu_);
      data_[key] = std::move(copy);
    } catch (const std::exception& e) {
      return Status::System(std::string("store Set: ") + e.what());
    }
    cv_.notify_all();
    return Status::Ok();
  }

  Status Get(const std::string& key, Bytes* value, std::chrono::milliseconds timeout) override {
    if (value == nullptr) return Status::InvalidArgument("store Get: value is null");
    Status s = CheckKey(key);
    if (!s.ok()) return s;
    const uint64_t timeout_ms = store::TimeoutToWire(timeout);
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    std::unique_lock<std::mutex> lock(mu_);
    const auto found = [&] { return data_.find(key) != data_.end(); };
    if (!cv_.wait_until(lock, deadline, found)) {
      return Status::Timeout(store::GetTimeoutMessage(key, timeout_ms));
    }
    try {
      *value = data_.find(key)->second;
    } catch (const std::exception& e) {
      return Status::System(std::string("store Get: ") + e.what());
    }
    return Status::Ok();
  }

  Status Add(const std::string& key, int64_t delta, int64_t* new_value,
             std::chrono::milliseconds) override {
    if (new_value == nullptr) return Status::InvalidArgument("store Add: new_value is null");
    Status s = CheckKey(key);
    if (!s.ok()) return s;
    try {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = data_.find(key);
      int64_t value = 0;
      if (it != data_.end() && !store::DecodeCounter(it->second, &value)) {
        return Status::InvalidUsage(store::NotACounterMessage(key, it->second.size()));
      }
      // Unsigned arithmetic: wraps like the TCP server instead of signed-overflow UB.
      value = static_cast<int64_t>(static_cast<uint64_t>(value) + static_cast<uint64_t>(delta));
      data_[key] = store::EncodeCounter(value);
      *new_value = value;
    } catch (const std::exception& e) {
      return Status::System(std::string("store Add: ") + e.what());
    }
    cv_.notify_all();
    return Status::Ok();
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    if (keys.size() > kStoreMaxKeysPerWait) {
      return Status::InvalidArgument("WAIT for " + std::to_string(keys.size()) +
                                     " keys exceeds the limit of " +
                                     std::to_string(kStoreMaxKeysPerWait));
    }
    for (const std::string& k : keys) {
      Status s = CheckKey(k);
      if (!s.ok()) return s;
    }
    const uint64_t timeout_ms = store::TimeoutToWire(timeout);
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    std::unique_lock<std::mutex> lock(mu_);
    size_t next = 0;  // keys never disappear, so keys before `next` need no second look
    const auto all_present = [&] {
      while (next < keys.size() && data_.count(keys[next]) != 0) ++next;
      return next == keys.size();
    };
    if (!cv_.wait_until(lock, deadline, all_present)) {
      size_t missing = 0;
      for (size_t i = next; i < keys.size(); ++i) missing += data_.count(keys[i]) == 0;
      return Status::Timeout(
          store::WaitTimeoutMessage(keys[next], missing, keys.size(), timeout_ms));
    }
    return Status::Ok();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, Bytes> data_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<RendezvousStore> MakeInProcessStore() {
  return std::make_unique<InProcessStore>();
}

}  // namespace plexus
