#include "c10d_store.hpp"

#include <exception>
#include <utility>

namespace plexus_torch::detail {

C10dStore::C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

template <class F>
plexus::Status C10dStore::Do(const std::string& what, F&& f) {
  try {
    f();
    return plexus::Status::Ok();
  } catch (const std::exception& e) {
    return plexus::Status::Remote("c10d store " + what + ": " + e.what());
  }
}

plexus::Status C10dStore::Set(const std::string& key, const plexus::Bytes& value,
                              std::chrono::milliseconds) {
  return Do("set " + key, [&] { store_->set(key, value); });
}

plexus::Status C10dStore::Get(const std::string& key, plexus::Bytes* value,
                              std::chrono::milliseconds timeout) {
  plexus::Status st = Wait({key}, timeout);
  if (!st.ok()) return st;
  plexus::Bytes got;
  st = Do("get " + key, [&] { got = store_->get(key); });
  if (st.ok()) *value = std::move(got);
  return st;
}

plexus::Status C10dStore::Add(const std::string& key, int64_t delta, int64_t* new_value,
                              std::chrono::milliseconds) {
  return Do("add " + key, [&] { *new_value = store_->add(key, delta); });
}

plexus::Status C10dStore::Wait(const std::vector<std::string>& keys,
                               std::chrono::milliseconds timeout) {
  try {
    store_->wait(keys, timeout);
    return plexus::Status::Ok();
  } catch (const std::exception& e) {
    return plexus::Status::Timeout("the c10d store did not have " + keys.front() +
                                   (keys.size() > 1 ? " (and others)" : "") + " within " +
                                   std::to_string(timeout.count()) + " ms: " + e.what());
  }
}

}  // namespace plexus_torch::detail
