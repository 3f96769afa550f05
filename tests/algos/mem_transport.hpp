// An in-memory PeerTransport for tests (a double of our own seam): the ranks
// of one communicator are threads of this process, and every ordered pair
// of ranks has a queue of frames. Like a real transport, a frame carries
// the operation's signature and its payload size, and a receive checks both
// before a byte lands (REMOTE otherwise); a rank that gives up tells the
// others (Fail), whose waits then end with REMOTE; and nothing waits
// forever (TIMEOUT after the world's deadline). Sends never block (the
// queues have no bound), as a transport that runs sends and receives
// concurrently never deadlocks on them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plexus/algos/describe.hpp"
#include "plexus/algos/transport.hpp"

namespace plexus::test {

using algos::OpSignature;
using algos::RecvSpec;
using algos::SendSpec;
using algos::Status;

inline bool SameSignature(const OpSignature& a, const OpSignature& b) {
  return a.seq == b.seq && a.coll == b.coll && a.dtype == b.dtype && a.op == b.op &&
         a.count == b.count && a.root == b.root;
}

class MemWorld {
 public:
  explicit MemWorld(uint32_t size, int64_t timeout_ms = 20000)
      : size_(size), timeout_ms_(timeout_ms), queues_(size * size) {}
  uint32_t size() const { return size_; }

  void Send(uint32_t from, const SendSpec& s, const OpSignature& sig) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto* p = static_cast<const uint8_t*>(s.data);
    queues_[from * size_ + s.peer].push_back({sig, std::vector<uint8_t>(p, p + s.bytes)});
    sent_.push_back(sig);
    cv_.notify_all();
  }

  Status Receive(uint32_t to, const RecvSpec& r, const OpSignature& sig) {
    std::unique_lock<std::mutex> lock(mutex_);
    std::deque<Frame>& q = queues_[r.peer * size_ + to];
    const bool ready = cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms_),
                                    [&] { return !q.empty() || !failed_.ok(); });
    if (!failed_.ok()) return failed_;
    if (!ready) {
      return {PLEXUS_ERR_TIMEOUT, "rank " + std::to_string(to) + " waited for rank " +
                                      std::to_string(r.peer) + " in " + algos::DescribeOp(sig)};
    }
    Frame f = std::move(q.front());
    q.pop_front();
    if (!SameSignature(f.sig, sig)) {
      return {PLEXUS_ERR_REMOTE, "collective mismatch: rank " + std::to_string(to) + " is in " +
                                     algos::DescribeOp(sig) + " but rank " +
                                     std::to_string(r.peer) + " sent " + algos::DescribeOp(f.sig)};
    }
    if (f.bytes.size() != r.bytes) {
      return {PLEXUS_ERR_REMOTE, "frame size mismatch in " + algos::DescribeOp(sig) + ": rank " +
                                     std::to_string(to) + " expected " + std::to_string(r.bytes) +
                                     " bytes, rank " + std::to_string(r.peer) + " sent " +
                                     std::to_string(f.bytes.size())};
    }
    if (r.bytes) std::memcpy(r.data, f.bytes.data(), r.bytes);
    return {};
  }

  // Rank `rank` gave up with why: every wait ends with REMOTE from now on.
  void Fail(uint32_t rank, const Status& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_.ok()) {
      failed_ = {PLEXUS_ERR_REMOTE, "rank " + std::to_string(rank) + " failed: " + why.message};
    }
    cv_.notify_all();
  }

  // The signature of every frame sent so far.
  std::vector<OpSignature> Sent() {
    std::lock_guard<std::mutex> lock(mutex_);
    return sent_;
  }
  // Frames sent and never received (0 after a clean run).
  size_t Unread() {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t n = 0;
    for (const auto& q : queues_) n += q.size();
    return n;
  }

 private:
  struct Frame {
    OpSignature sig;
    std::vector<uint8_t> bytes;
  };
  const uint32_t size_;
  const int64_t timeout_ms_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::deque<Frame>> queues_;  // [from * size + to]
  std::vector<OpSignature> sent_;
  Status failed_;
};

// Rank `rank` of world. Base is algos::PeerTransport, or a transport
// interface derived from it (kit::QueueTransport) whose rest a test adds.
template <class Base = algos::PeerTransport>
class MemTransport : public Base {
 public:
  // direct_message_bytes: what DirectMessageBytes() says (0: the default).
  MemTransport(MemWorld& world, uint32_t rank, uint64_t direct_message_bytes = 0)
      : world_(world), rank_(rank), direct_message_bytes_(direct_message_bytes) {}
  uint32_t rank() const override { return rank_; }
  uint64_t DirectMessageBytes() const override { return direct_message_bytes_; }
  uint32_t size() const override { return world_.size(); }
  Status Exchange(const OpSignature& sig, std::span<const SendSpec> sends,
                  std::span<const RecvSpec> recvs) override {
    for (const SendSpec& s : sends) world_.Send(rank_, s, sig);
    for (const RecvSpec& r : recvs) {
      Status st = world_.Receive(rank_, r, sig);
      if (!st.ok()) return st;
    }
    return {};
  }
  MemWorld& world() { return world_; }

 protected:
  MemWorld& world_;
  const uint32_t rank_;
  const uint64_t direct_message_bytes_;
};

// Runs body(transport, rank) on `size` threads, one rank each; a rank whose
// body fails tells the others (as a backend's queue does through its
// transport's Fail). Every transport says direct_message_bytes for
// DirectMessageBytes(). Returns every rank's status.
inline std::vector<Status> RunRanks(
    uint32_t size, const std::function<Status(algos::PeerTransport&, uint32_t)>& body,
    int64_t timeout_ms = 20000, uint64_t direct_message_bytes = 0) {
  MemWorld world(size, timeout_ms);
  std::vector<Status> result(size);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      MemTransport<> t(world, r, direct_message_bytes);
      result[r] = body(t, r);
      if (!result[r].ok()) world.Fail(r, result[r]);
    });
  }
  for (std::thread& th : threads) th.join();
  return result;
}

}  // namespace plexus::test
