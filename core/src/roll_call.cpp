#include "roll_call.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plexus/settings/environment.hpp"
#include "store/store_protocol.hpp"

namespace plexus {
namespace {

std::string CardKey(uint32_t rank) {
  return store::RankKey(rank, "join/card");
}

std::string HostName() {
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  return host;
}

// "size=3\nbackend=tcp\nhost=node1\npid=123\n" (backend "-" when unset),
// and "node=1\n" in a job across hosts whose launcher sets GROUP_RANK
// (plexus-run, torchrun): then errors can say which node a silent rank is on.
std::string Card(const LaunchInfo& l) {
  const std::string host = HostName();
  const char* backend = plexus::settings::Raw(plexus::settings::Id::kBackend);
  std::string card = "size=" + std::to_string(l.size) +
                     "\nbackend=" + (backend && *backend ? std::string(backend) : "-") +
                     "\nhost=" + host + "\npid=" + std::to_string(long(getpid())) + "\n";
  const char* node = plexus::settings::Raw(plexus::settings::Id::kGroupRank);
  if (!node || !*node) node = std::getenv("GROUP_RANK");
  if (l.size != l.local_size && node && *node &&
      std::strspn(node, "0123456789") == std::strlen(node)) {
    card += "node=" + std::string(node) + "\n";
  } else if (l.size != l.local_size && l.node_count > 0) {
    // Under srun: the node by the name Slurm gives it (SLURMD_NODENAME, what
    // squeue and srun's own messages say), else by its place in the step.
    const char* name = std::getenv("SLURMD_NODENAME");
    const bool usable = name && *name && std::strlen(name) <= 64 &&
                        std::strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789-_.") == std::strlen(name);
    card += "node=" + (usable ? std::string(name) : std::to_string(l.node_rank)) + "\n";
  }
  return card;
}

std::map<std::string, std::string> Parse(const Bytes& b) {
  std::map<std::string, std::string> m;
  const std::string s(b.begin(), b.end());
  size_t at = 0;
  while (at < s.size()) {
    const size_t end = s.find('\n', at);
    const std::string line = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return m;
}

std::string BackendText(const std::string& b) {
  return b == "-" ? "unset" : "'" + b + "'";
}

}  // namespace

std::string RollCallLabel() {
  return "host " + HostName() + ", pid " + std::to_string(long(getpid()));
}

Status RollCall(const LaunchInfo& l, RendezvousStore& store, std::chrono::milliseconds timeout,
                bool automatic_secret) {
  using namespace std::chrono_literals;
  const std::string me = std::to_string(l.rank);
  const std::string mine = Card(l);
  const auto my_card = Parse(Bytes(mine.begin(), mine.end()));
  Status st = store.Set(CardKey(l.rank), Bytes(mine.begin(), mine.end()), timeout);
  if (!st.ok()) return st.WithContext("rank " + me + " joining the job");

  std::vector<std::string> keys;
  for (uint32_t r = 0; r < l.size; ++r) keys.push_back(CardKey(r));
  st = store.Wait(keys, timeout);
  if (st.code() == PLEXUS_ERR_TIMEOUT) {
    std::string missing, joined;
    size_t n_missing = 0;
    for (uint32_t r = 0; r < l.size; ++r) {
      Bytes ignored;
      const bool here = store.Get(keys[r], &ignored, 1ms).ok();
      std::string& list = here ? joined : missing;
      list += (list.empty() ? "" : ", ") + std::to_string(r);
      n_missing += here ? 0 : 1;
    }
    return Status::Timeout(
        std::string(n_missing == 1 ? "rank " : "ranks ") + missing + " never " +
        "joined the job within " + std::to_string(timeout.count()) + " ms (joined: " + joined +
        " of " + std::to_string(l.size) + "); are they running, and pointed at this job's store?" +
        (automatic_secret ? " (No secret was given, so this job made one for the ranks "
                            "of this host only: ranks on another host need the same "
                            "PLEXUS_TOKEN_FILE on every rank.)"
                          : ""));
  }
  if (!st.ok()) return st.WithContext("rank " + me + " waiting for the other ranks to join");

  for (uint32_t r = 0; r < l.size; ++r) {
    Bytes b;
    st = store.Get(keys[r], &b, timeout);
    if (!st.ok()) return st.WithContext("rank " + me + " reading rank " + std::to_string(r));
    const auto card = Parse(b);
    const std::string rank = "rank " + std::to_string(r);
    const auto size = card.find("size");
    if (size == card.end() || size->second != my_card.at("size")) {
      return Status::InvalidUsage(
          rank + " was started as one of " + (size == card.end() ? "?" : size->second) +
          " ranks, this rank (" + me + ") as one of " + my_card.at("size") +
          ": every process of a job needs the same world size (PLEXUS_WORLD_SIZE, or the "
          "launcher's)");
    }
    const auto backend = card.find("backend");
    const std::string theirs = backend == card.end() ? "?" : backend->second;
    if (theirs != my_card.at("backend")) {
      // Lower rank first, so that every rank that notices says the same.
      std::string a = BackendText(theirs) + " on " + rank;
      std::string b = BackendText(my_card.at("backend")) + " on rank " + me;
      if (r > l.rank) std::swap(a, b);
      return Status::InvalidUsage("PLEXUS_BACKEND differs between ranks: " + a + ", " + b +
                                  "; set it the same on every rank (or on none)");
    }
  }
  return Status::Ok();
}

std::string RankNodes(RendezvousStore& store, const std::vector<uint32_t>& ranks,
                      std::chrono::milliseconds wait) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + wait;
  // node -> its ranks, in the order given
  std::vector<std::pair<std::string, std::vector<uint32_t>>> nodes;
  for (uint32_t r : ranks) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    Bytes b;
    if (left.count() <= 0 || !store.Get(CardKey(r), &b, left).ok()) {
      return "";
    }
    const auto card = Parse(b);
    const auto node = card.find("node");
    if (node == card.end()) return "";
    auto at = std::find_if(nodes.begin(), nodes.end(),
                           [&](const auto& n) { return n.first == node->second; });
    if (at == nodes.end()) at = nodes.insert(nodes.end(), {node->second, {}});
    at->second.push_back(r);
  }
  if (nodes.empty()) return "";
  if (nodes.size() == 1) return " (node " + nodes[0].first + ")";
  std::string text;
  for (const auto& [node, on] : nodes) {
    std::string list;
    for (size_t i = 0; i < on.size(); ++i) {
      list += (i == 0 ? "" : i + 1 == on.size() ? " and " : ", ") + std::to_string(on[i]);
    }
    text += (text.empty() ? "" : ", ") + list + " on node " + node;
  }
  return " (" + text + ")";
}

}  // namespace plexus
