// VerifyReplicas: every rank must hold the same parameters before training,
// or the buckets of different ranks would not line up. One allgather of a
// fingerprint per rank; only when they differ are the descriptions of rank 0
// and the first rank that differs broadcast, to name the first difference.
#include <sstream>
#include <string>
#include <vector>

#include "plexus/error.hpp"
#include "plexus/reducer/reducer.hpp"

namespace plexus::reducer {

namespace {

std::string Describe(const Parameter& p) {
  std::string s = "'" + p.name + "' " + ToString(p.dtype) + " [";
  for (size_t k = 0; k < p.shape.size(); ++k) s += (k ? ", " : "") + std::to_string(p.shape[k]);
  return s + "]";
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string BroadcastString(Communicator& comm, BucketMemory& memory, uint32_t root,
                            const std::string& mine) {
  uint64_t length = mine.size();
  HostBroadcast(comm, memory, &length, 1, DType::UInt64, root);
  std::string s = comm.rank() == root ? mine : std::string(length, '\0');
  if (length > 0) HostBroadcast(comm, memory, s.data(), length, DType::UInt8, root);
  return s;
}

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

void VerifyReplicas(Communicator& comm, std::span<const Parameter> parameters) {
  HostBucketMemory host;
  VerifyReplicas(comm, parameters, host);
}

void VerifyReplicas(Communicator& comm, std::span<const Parameter> parameters,
                    BucketMemory& memory) {
  std::string mine;
  for (const Parameter& p : parameters) mine += Describe(p) + "\n";
  const uint64_t fingerprint[2] = {parameters.size(), Fnv1a(mine)};
  std::vector<uint64_t> all(2 * comm.size());
  HostAllgather(comm, memory, fingerprint, all.data(), 2, DType::UInt64);
  std::vector<uint32_t> differing;
  for (uint32_t r = 1; r < comm.size(); ++r) {
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1]) differing.push_back(r);
  }
  if (differing.empty()) return;
  const uint32_t other = differing.front();
  const std::vector<std::string> a = Lines(BroadcastString(comm, memory, 0, mine));
  const std::vector<std::string> b = Lines(BroadcastString(comm, memory, other, mine));
  const std::string r0 = "rank 0", ro = "rank " + std::to_string(other);
  std::string what;
  for (size_t k = 0; k < a.size() || k < b.size(); ++k) {
    if (k < a.size() && k < b.size() && a[k] == b[k]) continue;
    what = "parameter #" + std::to_string(k) + ": " + r0 + " has " +
           (k < a.size() ? a[k] : "none (it has " + std::to_string(a.size()) + " parameters)") +
           ", " + ro + " has " +
           (k < b.size() ? b[k] : "none (it has " + std::to_string(b.size()) + " parameters)");
    break;
  }
  std::string ranks;
  for (uint32_t r : differing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  throw Error(PLEXUS_ERR_INVALID_ARGUMENT, "plexus",
              "the model differs across ranks (seen on rank " + std::to_string(comm.rank()) +
                  "): rank(s) " + ranks + " differ from rank 0; first difference, " + what +
                  ". Every rank must build the same model (same parameter names, shapes and "
                  "dtypes, in the same order)");
}

}  // namespace plexus::reducer
