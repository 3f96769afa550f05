#include "mark_reader.hpp"

#include <chrono>

namespace plexus::run {
namespace {

// Forwards every call, noting whether one failed other than by a timeout
// (which only says a key is not there yet).
class FailureWatch : public RendezvousStore {
 public:
  explicit FailureWatch(RendezvousStore& store) : store_(store) {}
  bool broken() const { return broken_; }

  Status Set(const std::string& key, const Bytes& value,
             std::chrono::milliseconds timeout) override {
    return Note(store_.Set(key, value, timeout));
  }
  Status Get(const std::string& key, Bytes* value, std::chrono::milliseconds timeout) override {
    return Note(store_.Get(key, value, timeout));
  }
  Status Add(const std::string& key, int64_t delta, int64_t* new_value,
             std::chrono::milliseconds timeout) override {
    return Note(store_.Add(key, delta, new_value, timeout));
  }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return Note(store_.Wait(keys, timeout));
  }

 private:
  Status Note(Status st) {
    broken_ = broken_ || (!st.ok() && st.code() != PLEXUS_ERR_TIMEOUT);
    return st;
  }
  RendezvousStore& store_;
  bool broken_ = false;
};

}  // namespace

bool MarkReader::Read(const std::function<void(RendezvousStore&)>& read) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!client_) {
    if (!ConnectTcpStore(addr_, port_, std::chrono::seconds(2), &client_).ok()) {
      client_.reset();
      return false;
    }
  }
  FailureWatch watched(*client_);
  read(watched);
  if (watched.broken()) client_.reset();
  return true;
}

}  // namespace plexus::run
