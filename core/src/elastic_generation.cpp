#include "elastic_generation.hpp"

#include <algorithm>
#include <sstream>
#include <thread>

#include "store/store_protocol.hpp"

namespace plexus::detail {
namespace {

Generation Parse(const Bytes& value) {
  Generation g;
  std::istringstream in(std::string(value.begin(), value.end()));
  if (!(in >> g.number)) return {};
  for (uint32_t r; in >> r;) g.ranks.push_back(r);
  return g;
}

}  // namespace

bool Generation::Has(uint32_t r) const {
  return std::find(ranks.begin(), ranks.end(), r) != ranks.end();
}

std::string LatestGenerationKey() {
  return store::NodeKey(0, "launch/members");
}

std::string GenerationKey(uint64_t g) {
  return store::NodeKey(0, "launch/members/" + std::to_string(g));
}

Status ReadLatestGeneration(RendezvousStore& store, Generation* out) {
  Bytes value;
  Status st = store.Get(LatestGenerationKey(), &value, std::chrono::milliseconds(0));
  if (st.code() == PLEXUS_ERR_TIMEOUT) {  // (not there yet)
    *out = {};
    return Status::Ok();
  }
  if (!st.ok()) return st.WithContext("reading plexus-run's latest generation from the store");
  *out = Parse(value);
  return Status::Ok();
}

Status ReadGeneration(RendezvousStore& store, uint64_t g, std::chrono::milliseconds timeout,
                      Generation* out) {
  Bytes value;
  Status st = store.Get(GenerationKey(g), &value, timeout);
  if (!st.ok()) return st.WithContext("reading plexus-run's generation " + std::to_string(g));
  Generation parsed = Parse(value);
  if (parsed.number != g) {
    return Status::Remote("plexus-run's generation " + std::to_string(g) + " reads '" +
                          std::string(value.begin(), value.end()) + "'");
  }
  *out = std::move(parsed);
  return Status::Ok();
}

Status WaitForLeaving(RendezvousStore& store, const std::vector<uint32_t>& ranks, uint64_t* after,
                      std::chrono::milliseconds timeout, Generation* out) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Status last_failure;
  for (;;) {
    Generation said;
    if (Status st = ReadLatestGeneration(store, &said); !st.ok()) {
      last_failure = st;  // (the store client connects again at the next read)
    } else {
      bool lost = false;
      for (uint32_t r : ranks) lost = lost || !said.Has(r);
      if (said.number > *after && lost) {
        *out = std::move(said);
        return Status::Ok();
      }
      *after = std::max(*after, said.number);  // (a generation that only lets ranks in)
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Timeout(
          "plexus-run said within " + std::to_string(timeout.count()) +
          " ms of no rank that left (did one? a failure of every rank is not one of them "
          "leaving)" +
          (last_failure.ok() ? "" : "; the store's last answer: " + last_failure.message()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace plexus::detail
