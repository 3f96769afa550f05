// The store adapter: the c10d store torch hands a backend's creator
// (torch's TCPStore under torchrun, a PrefixStore per group) as Plexus's
// rendezvous store, for Communicator::from_store.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "plexus/rendezvous_store.hpp"

namespace plexus_torch::detail {

// PyTorch's c10d::Store (TCPStore, FileStore, PrefixStore, ...) as Plexus's
// rendezvous store. c10d stores throw; this returns a Status.
class C10dStore final : public plexus::RendezvousStore {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store);

  plexus::Status Set(const std::string& key, const plexus::Bytes& value,
                     std::chrono::milliseconds) override;
  plexus::Status Get(const std::string& key, plexus::Bytes* value,
                     std::chrono::milliseconds timeout) override;
  plexus::Status Add(const std::string& key, int64_t delta, int64_t* new_value,
                     std::chrono::milliseconds) override;
  plexus::Status Wait(const std::vector<std::string>& keys,
                      std::chrono::milliseconds timeout) override;

 private:
  // Runs f (a call on the c10d store); what it throws becomes a Status.
  template <class F>
  plexus::Status Do(const std::string& what, F&& f);
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace plexus_torch::detail
