// How the ranks talk to each other: the job's rendezvous store only.
//
// The backend under test never carries the suite's own traffic: a backend
// that loses or corrupts data would otherwise corrupt the report about it,
// and a broken communicator would stop the suite. Results, the capabilities
// the check list is built from, and the small handshakes of the timing and
// failure checks (barriers, "I have posted" flags) all go through the store,
// under keys that start with "plexus-conformance/".
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "check.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/status.hpp"

namespace plexus::conformance {

class Exchange {
 public:
  // timeout bounds every store call that waits for another rank.
  Exchange(RendezvousStore* store, uint32_t rank, uint32_t size, std::chrono::milliseconds timeout);

  // After check seq: every rank publishes its outcome; rank 0 collects all of
  // them into *all (a rank that does not report in time gets a FAIL saying
  // so) and publishes whether the shared communicator must be replaced and
  // whether to stop; every rank returns those two in *renew and *stop. Also
  // keeps the ranks in step from check to check. With stop_on_failure, a
  // failure on any rank stops every rank (a check the rest depends on).
  // Rank 0 calls gathered(all, stop) before it lets the other ranks go on,
  // so that what it prints and journals there is out before any rank can
  // reach the next check (and crash in it).
  using Gathered = std::function<void(const std::vector<Outcome>& all, bool stop)>;
  Status Report(uint64_t seq, const Outcome& mine, std::vector<Outcome>* all, bool* renew,
                bool* stop, bool stop_on_failure = false, const Gathered& gathered = {});
  // Only publishes (for a rank that is about to exit; rank 0 still collects it).
  Status Publish(uint64_t seq, const Outcome& mine);

  // Waits until rank has published its outcome of check seq.
  Status AwaitPublished(uint64_t seq, uint32_t rank, std::chrono::milliseconds timeout);

  // Every rank calls it with the same name; returns when all have.
  Status Barrier(const std::string& name);
  // Waits until each rank in ranks has called Arrive(name).
  Status Arrive(const std::string& name);
  Status AwaitArrivals(const std::string& name, const std::vector<uint32_t>& ranks,
                       std::chrono::milliseconds timeout);
  // Whether anybody has called Raise(name) yet (never waits).
  Status Raise(const std::string& name);
  Status IsRaised(const std::string& name, bool* raised);

  Status Set(const std::string& key, const std::string& value);
  Status Get(const std::string& key, std::string* value, std::chrono::milliseconds timeout);

  std::chrono::milliseconds timeout() const { return timeout_; }

  // rank exited on purpose during check seq (it published its result of
  // that check first): Report does not wait for its results of later
  // checks, and counts each as a SKIP.
  void MarkGone(uint32_t rank, uint64_t seq);

 private:
  std::string Key(const std::string& suffix) const { return "plexus-conformance/" + suffix; }

  RendezvousStore* store_;
  uint32_t rank_;
  uint32_t size_;
  std::chrono::milliseconds timeout_;
  std::map<uint32_t, uint64_t> gone_after_;  // rank -> the check it exited in
};

}  // namespace plexus::conformance
