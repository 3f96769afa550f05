// PLEXUS_DEBUG=detail: before each collective, the ranks compare what they
// are about to post (collective, count, dtype, op, root and its place in the
// communicator's sequence), so that mismatched collectives fail on every
// rank with an error naming both sides, on every backend, instead of
// completing with wrong data or hanging. The fingerprints travel as a small
// uint8 allgather through the communicator's own backend (a well-formed
// operation whatever the ranks disagree about); the real collective is
// posted only when they agree. It also catches two threads posting on one
// communicator at once, which the ordering rule forbids.
//
// Costs one extra small allgather, waited for, per collective: a debugging
// aid, cheap enough for tests, not for production (see README).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "comm_state.hpp"
#include "plexus/status.hpp"

namespace plexus::detail {

// What one rank is about to post; compared byte for byte (bar the rank).
struct Fingerprint {
  uint64_t seq = 0;  // collectives posted on the communicator before this one
  uint64_t count = 0;
  uint32_t coll = 0;
  uint32_t dtype = 0;
  uint32_t op = 0;
  uint32_t root = 0;
  uint32_t rank = 0;  // who sent it (not compared)
  uint32_t reserved = 0;
};
static_assert(sizeof(Fingerprint) == 40);

// "reduce(#3, count 8, float32, sum, root 0)".
std::string DescribeFingerprint(const Fingerprint& f);
// Whether two ranks post the same collective (everything but the rank).
bool SameFingerprint(const Fingerprint& a, const Fingerprint& b);
// "rank 1", "ranks 1, 2".
std::string RankList(const std::vector<uint32_t>& ranks);

// True when PLEXUS_DEBUG is "detail" (read once per process).
bool DetailDebugEnabled();

// Holds the communicator's "a post is in progress" mark for a scope, so a
// second thread posting at the same time is refused (detail mode only).
class PostingGuard {
 public:
  explicit PostingGuard(CommState& s);
  ~PostingGuard();
  const Status& status() const { return status_; }

 private:
  CommState* s_ = nullptr;
  Status status_;
};

// Allgathers mine (its seq and rank filled in here) and compares: OK when
// every rank posts the same; INVALID_USAGE naming the ranks and both
// fingerprints otherwise; the allgather's own error if it fails.
Status CheckFingerprints(CommState& s, Fingerprint mine);

}  // namespace plexus::detail
