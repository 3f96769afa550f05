#include "stall_report.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <vector>

#include "comm_state.hpp"

namespace plexus::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long a rank that timed out waits for the others' marks. Healthy ranks
// post a collective within moments of each other, so their timeouts expire
// close together; a fifth of the timeout, between 0.2 and 2 s, leaves room
// for ranks that posted a little later without delaying the error much.
milliseconds Grace(milliseconds timeout) {
  return std::clamp(timeout / 5, milliseconds(200), milliseconds(2000));
}

// Store calls made after a failure must not add a timeout of their own.
constexpr milliseconds kStoreCallLimit{1000};

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) text += i + 1 == ranks.size() ? " and " : ", ";
    text += std::to_string(ranks[i]);
  }
  return text;
}

}  // namespace

std::string StallKey(uint32_t rank) {
  return "plexus/stalled/" + std::to_string(rank);
}

namespace {

bool CanTell(const CommState& comm, uint64_t seq) {
  return comm.size > 1 && seq != 0 && comm.job && comm.job->has_rendezvous && comm.job->store;
}

std::string MarkPrefix(const CommState& comm, uint64_t seq) {
  return comm.name + "/stalled/" + std::to_string(seq) + "/";
}

bool Mark(CommState& comm, uint64_t seq) {
  return comm.job->store
      ->Set(MarkPrefix(comm, seq) + std::to_string(comm.rank), Bytes{1}, kStoreCallLimit)
      .ok();
}

}  // namespace

void MarkReached(CommState& comm, uint64_t seq) try {
  if (CanTell(comm, seq)) (void)Mark(comm, seq);
} catch (const std::exception&) {
}

std::string ReportStall(CommState& comm, uint64_t seq, const char* what) try {
  if (!CanTell(comm, seq) || !Mark(comm, seq)) return "";
  RendezvousStore& store = *comm.job->store;
  const std::string prefix = MarkPrefix(comm, seq);

  const auto deadline = Clock::now() + Grace(comm.timeout);
  std::vector<uint32_t> waiting, missing;
  for (uint32_t r = 0; r < comm.size; ++r) {
    if (r == comm.rank) continue;
    const auto left = std::max(milliseconds(0),
                               std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
    Bytes mark;
    const Status st = store.Get(prefix + std::to_string(r), &mark, left);
    if (st.ok()) {
      waiting.push_back(r);
    } else if (st.code() == PLEXUS_ERR_TIMEOUT) {
      missing.push_back(r);
    } else {
      return "";  // the store itself failed: it cannot tell
    }
  }

  std::string line = comm.name + " " + std::to_string(seq) + " " + what;
  for (uint32_t r : missing) line += " " + std::to_string(r);
  (void)store.Set(StallKey(comm.rank), Bytes(line.begin(), line.end()), kStoreCallLimit);

  std::string text;
  if (!missing.empty()) {
    text = RankList(missing) + (missing.size() == 1 ? " has" : " have") + " not reached this " +
           what + " (collective " + std::to_string(seq) + " on " + comm.name +
           ") or stopped making progress (frozen, dead, or busy outside Plexus)";
  } else {
    text = "every rank reached this " + std::string(what) + " (collective " + std::to_string(seq) +
           " on " + comm.name + ") and timed out in it (a slow or broken network, or the backend)";
  }
  if (!missing.empty() && !waiting.empty()) {
    text += "; " + RankList(waiting) + " reached it too";
  }
  return text;
} catch (const std::exception&) {
  return "";  // a diagnosis must never replace the error it explains
}

}  // namespace plexus::detail
