#include "node_group.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "network_address.hpp"
#include "store/job_token.hpp"
#include "store/store_protocol.hpp"

namespace plexus::run {
namespace {

using namespace std::chrono_literals;

constexpr auto kBeatPeriod = 200ms;
constexpr auto kCallTimeout = 1000ms;  // for SET and ADD; a GET that polls gets 0
constexpr auto kJoinPoll = 200ms;
// Once the job is failing (a failure reported here, read by the arbiter, or
// the verdict known), silence this long makes a node lost even when
// lost_after is longer: nothing is left to protect by waiting (the job ends
// anyway), and a launcher that was killed must not hold the others' exit for
// PLEXUS_TIMEOUT. 25 beats: a live launcher is never that quiet.
constexpr std::chrono::milliseconds kLostOnceFailing = 5000ms;

// Node K's own keys ("plexus/node/K/launch/NAME"): the store takes them from
// node K's launcher only (its connection holds the identity node/K).
// 16 hex digits, fresh for each start of a job (the dumps' job name, not a
// secret: without randomness, the clock and pid).
std::string RandomJobId() {
  std::string id, error;
  if (store::RandomHex(8, &id, &error)) return id;
  char text[17];
  std::snprintf(text, sizeof text, "%016llx",
                static_cast<unsigned long long>(
                    uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                    uint64_t(::getpid())));
  return text;
}

std::string NodeKey(int node, const std::string& name) {
  return store::NodeKey(uint32_t(node), "launch/" + name);
}

Bytes ToBytes(const std::string& s) {
  return Bytes(s.begin(), s.end());
}
std::string ToString(const Bytes& b) {
  return std::string(b.begin(), b.end());
}

// "nproc=2 nnodes=3 host=a" → {nproc: 2, nnodes: 3, host: a}
std::map<std::string, std::string> ParseFields(const std::string& text) {
  std::map<std::string, std::string> fields;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    size_t eq = word.find('=');
    if (eq != std::string::npos) fields[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return fields;
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "?";
  std::string host = name;
  // One word, so that it survives the "key=value ..." format.
  std::replace_if(
      host.begin(), host.end(), [](char c) { return c == ' ' || c == '='; }, '_');
  return host;
}

std::string ListNodes(const std::vector<int>& nodes) {
  std::string text = nodes.size() == 1 ? "node " : "nodes ";
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (i > 0) text += i + 1 == nodes.size() ? " and " : ", ";
    text += std::to_string(nodes[i]);
  }
  return text;
}

// The line of a verdict as stored, "<node> <line>".
std::string VerdictLine(const std::string& text) {
  const size_t space = text.find(' ');
  return space == std::string::npos ? text : text.substr(space + 1);
}

std::string Seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

// How long a node has been silent, for the verdict: the limit it was held to
// ("5 s"), or, when the silence ran a second or more past it (the limit
// shrank to 5 s only once the job began failing), what it was ("8.1 s").
std::string Silent(std::chrono::steady_clock::duration silent, std::chrono::milliseconds limit) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(silent);
  if (ms < limit + std::chrono::seconds(1)) return Seconds(limit);
  return Seconds(ms / 100 * 100);
}

}  // namespace

// A node's info, "nproc=2 nnodes=3 host=a", checked against this node's own
// config; "" when they agree, else the sentence that says how they differ.
std::string Disagreement(const NodeGroupConfig& config, int j,
                         std::map<std::string, std::string>& fields) {
  if (fields["nnodes"] != std::to_string(config.nnodes)) {
    return "node " + std::to_string(j) + " was started with --nnodes " + fields["nnodes"] +
           " but node " + std::to_string(config.node_rank) + " with --nnodes " +
           std::to_string(config.nnodes) + ": every node must be given the same";
  }
  if (fields["nproc"] != std::to_string(config.nproc)) {
    const int a = std::min(j, config.node_rank), b = std::max(j, config.node_rank);
    const int na = a == j ? std::atoi(fields["nproc"].c_str()) : config.nproc;
    const int nb = b == j ? std::atoi(fields["nproc"].c_str()) : config.nproc;
    return "node " + std::to_string(a) + " was started with -n " + std::to_string(na) +
           " but node " + std::to_string(b) + " with -n " + std::to_string(nb) +
           ": every node must start the same number of ranks";
  }
  return "";
}

bool NodeGroup::Join(const NodeGroupConfig& config, std::unique_ptr<NodeGroup>* out,
                     std::string* error) {
  const std::string where = config.master_addr + ":" + std::to_string(config.master_port);
  const std::string me = "node " + std::to_string(config.node_rank);
  // This launcher is node K to the store: only it may write node K's keys
  // (its info, beats, report, done), and only node 0 the verdict. A second
  // launcher with the same --node-rank is refused here and told who holds it.
  store::TcpStoreClientOptions options;
  options.identity = "node/" + std::to_string(config.node_rank);
  options.label = "plexus-run on host " + HostName() + ", pid " + std::to_string(long(getpid()));
  // The start joined: config.start, or a later one node 0 is at (a node that
  // comes late to an elastic job, --nnodes MIN:MAX, joins where it is).
  int start = config.start;
  const bool elastic = config.min_nodes < config.nnodes;
  const auto deadline = Clock::now() + config.join_timeout;
  // Connects and registers; on a restart (start > 0), again while the store
  // is the last start's (node 0 says an earlier start there, or the store
  // goes away, or still holds this node's last connection) until deadline.
  std::unique_ptr<RendezvousStore> store;
  Status st;
  for (;;) {
    const auto left =
        std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
                 std::chrono::milliseconds(1));
    store.reset();
    const bool retry = (start > 0 || elastic) && Clock::now() < deadline;
    if ((start > 0 || elastic) && config.node_rank != 0) {
      // First without an identity (the last start's store may still hold
      // this node's, and would refuse it noisily): is it this start's store?
      store::TcpStoreClientOptions probe_options = options;
      probe_options.identity.clear();
      std::unique_ptr<RendezvousStore> probe;
      Bytes node0;
      st = store::ConnectTcpStoreWithOptions(config.master_addr, config.master_port, left,
                                             probe_options, &probe);
      const Status got = st.ok() ? probe->Get(NodeKey(0, "info"), &node0, 0ms) : st;
      const int start0 = got.ok() ? std::atoi(ParseFields(ToString(node0))["start"].c_str()) : 0;
      if (got.ok() && elastic && start0 > start) start = start0;
      const bool old_store =
          (got.ok() && start0 != start) || (!got.ok() && got.code() != PLEXUS_ERR_TIMEOUT);
      if (old_store && retry) {
        std::this_thread::sleep_for(kJoinPoll);
        continue;
      }
    }
    st = store::ConnectTcpStoreWithOptions(config.master_addr, config.master_port, left, options,
                                           &store);
    if (st.code() == PLEXUS_ERR_INVALID_USAGE && retry) {
      std::this_thread::sleep_for(kJoinPoll);
      continue;
    }
    if (st.code() == PLEXUS_ERR_INVALID_USAGE) {
      *error = "another plexus-run has joined this job as " + me + " already (" + st.message() +
               "): two launchers were started with --node-rank " +
               std::to_string(config.node_rank) + "? This one stops; the job goes on without it";
      return false;
    }
    if (!st.ok()) {
      *error = me + " cannot reach the rendezvous store of node 0 at " + where + ": " +
               st.ToString() +
               " (is plexus-run --node-rank 0 running there, with the same --master-addr, "
               "--master-port and token?)";
      return false;
    }
    std::string info = "nproc=" + std::to_string(config.nproc) +
                       " nnodes=" + std::to_string(config.nnodes) + " host=" + HostName() +
                       " start=" + std::to_string(start);
    // Node 0 names this start of the job for the ranks' flight-recorder dumps
    // (PLEXUS_JOB_ID), the same on every node.
    if (config.node_rank == 0) info += " job=" + RandomJobId();
    // And a port of its host for torch.distributed's env:// rendezvous, whose
    // rank 0 (on this host) hosts a store there (MASTER_PORT).
    uint16_t port = 0;
    if (std::string why; config.node_rank == 0 && PickFreePort(config.master_addr, &port, &why)) {
      info += " torch_port=" + std::to_string(port);
    }
    st = store->Set(NodeKey(config.node_rank, "info"), ToBytes(info), kCallTimeout);
    if (st.ok() || !retry) break;
    std::this_thread::sleep_for(kJoinPoll);
  }
  if (!st.ok()) {
    *error = me + " cannot register with the rendezvous store at " + where + ": " + st.ToString();
    return false;
  }

  auto group = std::unique_ptr<NodeGroup>(new NodeGroup(config, std::move(store)));
  group->start_ = start;
  RendezvousStore& s = *group->store_;
  // Every launcher checks what each node says as it arrives. Node 0 fails the
  // job on a disagreement (its verdict is the one every launcher reads); any
  // other node only stops itself: a launcher that disagrees with node 0 (a
  // stray --nnodes 4 --node-rank 3 next to a job of 3) must not end a job it
  // is not part of, and node 0 sees every disagreement among the job's nodes.
  auto refuse = [&](const std::string& line) {
    *error = line;
    if (config.node_rank == 0) {
      (void)s.Set(NodeKey(0, "failed"), ToBytes("- " + line), kCallTimeout);
      std::this_thread::sleep_for(5 * kJoinPoll);  // the store goes when node 0 returns
    }
    return false;
  };
  std::vector<bool> seen(config.nnodes, false);
  std::optional<Clock::time_point> min_joined_at;  // node 0: when MIN nodes had joined
  std::vector<int> members;                        // as node 0 said
  bool failing = false;                            // the store has not answered since failing_since
  Clock::time_point failing_since{};
  while (true) {
    std::vector<int> missing;
    bool store_ok = true;
    for (int j = 0; j < config.nnodes; ++j) {
      if (seen[j]) continue;
      Bytes value;
      Status got = s.Get(NodeKey(j, "info"), &value, 0ms);
      auto fields = ParseFields(ToString(value));
      const int their_start = std::atoi(fields["start"].c_str());
      if (got.ok() && !value.empty() && their_start > start) {
        return refuse("node " + std::to_string(j) + " is at start " + std::to_string(their_start) +
                      " of the ranks but node " + std::to_string(config.node_rank) + " at start " +
                      std::to_string(start) +
                      ": it restarted without this node (--max-restarts must be the same on "
                      "every node)");
      }
      if (got.ok() && !value.empty() && their_start == start) {
        seen[j] = true;
        group->hosts_[j] = fields["host"];
        if (j == 0) {
          group->job_id_ = fields["job"];
          group->torch_port_ = uint16_t(std::atoi(fields["torch_port"].c_str()));
        }
        const std::string differs = Disagreement(config, j, fields);
        if (!differs.empty()) return refuse(differs);
      } else {
        missing.push_back(j);
        // TIMEOUT: not there yet. Anything else: the store did not answer.
        if (got.code() != PLEXUS_ERR_TIMEOUT) {
          store_ok = false;
          st = got;
        }
      }
    }
    // Who is in this start: node 0 decides (every node, or with MIN:MAX at
    // least MIN once --last-call passed since MIN joined) and says so; the
    // others wait for its word and for the info of every node in it.
    if (config.node_rank == 0) {
      const int joined = config.nnodes - int(missing.size());
      if (joined >= config.min_nodes && !min_joined_at) min_joined_at = Clock::now();
      if (missing.empty() || (min_joined_at && Clock::now() - *min_joined_at >= config.last_call)) {
        std::string list;
        for (int j = 0; j < config.nnodes; ++j) {
          if (seen[j]) list += (list.empty() ? "" : " ") + std::to_string(j);
        }
        st = s.Set(NodeKey(0, "members"), ToBytes(list), kCallTimeout);
        if (st.ok()) {
          for (int j = 0; j < config.nnodes; ++j) group->member_[j] = seen[j];
          break;
        }
      }
    } else if (members.empty()) {
      Bytes value;
      if (s.Get(NodeKey(0, "members"), &value, 0ms).ok()) {
        std::istringstream in(ToString(value));
        for (int j; in >> j;) {
          if (j >= 0 && j < config.nnodes) members.push_back(j);
        }
      }
    }
    if (!members.empty()) {
      bool all_seen = true;
      for (int j : members) all_seen = all_seen && seen[j];
      if (all_seen ||
          std::find(members.begin(), members.end(), config.node_rank) == members.end()) {
        for (int j : members) group->member_[j] = true;
        break;
      }
    }
    if (store_ok) {
      failing = false;
    } else if (!failing) {
      failing = true;
      failing_since = Clock::now();
    } else if (Clock::now() - failing_since >= config.lost_after) {
      *error = me + " lost the rendezvous store at " + where +
               " while waiting for the other nodes (node 0 stopped?): " + st.ToString();
      return false;
    }
    Bytes failed;
    if (s.Get(NodeKey(0, "failed"), &failed, 0ms).ok()) {
      *error = VerdictLine(ToString(failed));
      return false;
    }
    if (Clock::now() >= deadline && missing.empty()) {
      *error = "node 0 has not said within " + Seconds(config.join_timeout) +
               " (PLEXUS_TIMEOUT) which nodes are in this start, though every node joined";
      return false;
    }
    if (Clock::now() >= deadline) {
      *error = ListNodes(missing) + (missing.size() == 1 ? " has" : " have") +
               " not joined within " + Seconds(config.join_timeout) +
               " (PLEXUS_TIMEOUT): start plexus-run --nnodes " + std::to_string(config.nnodes) +
               " --node-rank K there, with the same --master-addr " + config.master_addr +
               ", --master-port " + std::to_string(config.master_port) + ", -n and token";
      return false;
    }
    std::this_thread::sleep_for(kJoinPoll);
  }
  *out = std::move(group);
  return true;
}

NodeGroup::NodeGroup(const NodeGroupConfig& config, std::unique_ptr<RendezvousStore> store)
    : config_(config), store_(std::move(store)), hosts_(config.nnodes), member_(config.nnodes) {
  int fds[2] = {-1, -1};
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
    wake_read_ = fds[0];
    wake_write_ = fds[1];
  }
  const auto now = Clock::now();
  beat_.assign(config.nnodes, -1);
  beat_changed_.assign(config.nnodes, now);
  beats_since_report_.assign(config.nnodes, 0);
  reported_.assign(config.nnodes, false);
  done_.assign(config.nnodes, "");
  lost_.assign(config.nnodes, false);
}

NodeGroup::~NodeGroup() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (wake_read_ >= 0) ::close(wake_read_);
  if (wake_write_ >= 0) ::close(wake_write_);
}

// "node 1 (host b, ranks 2 and 3)": the node with its host and its ranks.
std::string NodeGroup::NodeName(int node) const {
  std::string name = "node " + std::to_string(node) + " (";
  if (node >= 0 && node < static_cast<int>(hosts_.size()) && !hosts_[node].empty()) {
    name += "host " + hosts_[node] + ", ";
  }
  const int first = node * config_.nproc, last = first + config_.nproc - 1;
  if (first == last) return name + "rank " + std::to_string(first) + ")";
  return name + "ranks " + std::to_string(first) + (last == first + 1 ? " and " : " to ") +
         std::to_string(last) + ")";
}

std::vector<int> NodeGroup::members() const {
  std::vector<int> m;
  for (int j = 0; j < config_.nnodes; ++j) {
    if (member_[j]) m.push_back(j);
  }
  return m;
}

bool NodeGroup::WaitOutStart() {
  for (;;) {
    Bytes value;
    if (store_->Get(NodeKey(0, "all_done"), &value, 0ms).ok()) return true;
    const Status st = store_->Get(NodeKey(0, "info"), &value, 0ms);
    if (!st.ok() && st.code() != PLEXUS_ERR_TIMEOUT) return false;  // the store is gone
    std::this_thread::sleep_for(kBeatPeriod);
  }
}

void NodeGroup::Start() {
  const auto now = Clock::now();
  store_ok_at_ = now;
  std::fill(beat_changed_.begin(), beat_changed_.end(), now);
  thread_ = std::thread([this] { Loop(); });
}

std::string NodeGroup::Failure() {
  std::lock_guard<std::mutex> lock(mutex_);
  return verdict_;
}

std::optional<FailureKind> NodeGroup::VerdictKind() {
  std::lock_guard<std::mutex> lock(mutex_);
  return verdict_kind_;
}

void NodeGroup::SetVerdict(const std::string& line, std::optional<FailureKind> kind) {
  if (!verdict_.empty()) return;
  verdict_ = line;
  verdict_kind_ = kind;
  const char byte = 1;
  (void)!::write(wake_write_, &byte, 1);
  cv_.notify_all();
}

void NodeGroup::AcceptVerdict(const std::string& text) {
  if (!verdict_.empty()) return;
  const size_t space = text.find(' ');
  // "<node>/<kind>": the kind is absent in a verdict of the join.
  std::string origin = text.substr(0, space);
  std::optional<FailureKind> kind;
  if (const size_t slash = origin.find('/'); slash != std::string::npos) {
    const int k = std::atoi(origin.c_str() + slash + 1);
    if (k >= int(FailureKind::kLauncher) && k <= int(FailureKind::kExit)) kind = FailureKind(k);
    origin.resize(slash);
  }
  const std::string line = VerdictLine(text);
  if (origin == std::to_string(config_.node_rank) && line != pending_line_) {
    if (!verdict_refused_) {
      verdict_refused_ = true;
      std::fprintf(stderr,
                   "plexus-run: node %d: ignoring a verdict that says this node reported \"%s\": "
                   "it did not%s\n",
                   config_.node_rank, line.c_str(),
                   pending_line_.empty() ? ", and its ranks are running" : "");
    }
    return;
  }
  SetVerdict(line, kind);
}

void NodeGroup::ReportLocalFailure(FailureKind kind, const std::string& line) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!pending_line_.empty()) return;
    pending_kind_ = static_cast<int>(kind);
    pending_line_ = line;
    pending_sent_ = false;
  }
  cv_.notify_all();
}

std::chrono::milliseconds NodeGroup::Silence(bool failing) const {
  return failing ? std::min(config_.lost_after, kLostOnceFailing) : config_.lost_after;
}

std::string NodeGroup::SettleFailure() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait_for(lock, Silence(true) + 2 * kCallTimeout + kBeatPeriod,
               [&] { return !verdict_.empty(); });
  if (verdict_.empty() || verdict_ == pending_line_) return "";
  return verdict_;
}

std::string NodeGroup::FinishOk() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_value_ = "ok";
  cv_.notify_all();
  // No time limit: other nodes may well run on for hours. Their launchers
  // beat meanwhile, and a lost one or a lost store ends this wait.
  cv_.wait(lock, [&] { return all_done_ || !verdict_.empty(); });
  return all_done_ ? "" : verdict_;
}

std::string NodeGroup::ShareTraces(const std::string& dir) {
  const std::vector<int> nodes = members();
  const int nproc = config_.nproc;
  auto path = [&](int rank) { return dir + "/rank-" + std::to_string(rank) + ".json"; };
  auto first_rank = [&](int node) {
    return int(std::find(nodes.begin(), nodes.end(), node) - nodes.begin()) * nproc;
  };
  if (config_.node_rank != 0) {
    int sent = 0;
    for (int r = first_rank(config_.node_rank); r < first_rank(config_.node_rank) + nproc; ++r) {
      std::FILE* f = std::fopen(path(r).c_str(), "rb");
      if (!f) continue;
      Bytes content;
      char buf[65536];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) {
        content.insert(content.end(), buf, buf + n);
        if (content.size() > kStoreMaxValueBytes) break;
      }
      std::fclose(f);
      if (content.size() > kStoreMaxValueBytes) continue;
      if (store_
              ->Set(NodeKey(config_.node_rank, "trace/rank-" + std::to_string(r)), content,
                    kCallTimeout)
              .ok()) {
        ++sent;
      }
    }
    (void)store_->Set(NodeKey(config_.node_rank, "trace/sent"), ToBytes(std::to_string(sent)),
                      kCallTimeout);
    return "";
  }
  std::string got, none;
  int files = 0;
  // One deadline for all: the nodes stop their ranks (grace included) and
  // send at about the same time.
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (int node : nodes) {
    if (node == 0) continue;
    Bytes value;
    bool sent = false;
    while (!(sent = store_->Get(NodeKey(node, "trace/sent"), &value, 0ms).ok()) &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(100ms);
    }
    int here = 0;
    for (int r = first_rank(node); sent && r < first_rank(node) + nproc; ++r) {
      Bytes content;
      if (!store_->Get(NodeKey(node, "trace/rank-" + std::to_string(r)), &content, 0ms).ok()) {
        continue;
      }
      // (A new file, never one a link points to: the directory may be shared;
      // only its owner may read it, as the ranks' own dumps.)
      const std::string tmp = path(r) + ".tmp." + std::to_string(long(::getpid()));
      const int fd =
          ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      std::FILE* f = fd >= 0 ? ::fdopen(fd, "wb") : nullptr;
      if (fd >= 0 && !f) ::close(fd);
      bool ok = f && std::fwrite(content.data(), 1, content.size(), f) == content.size();
      if (f) ok = std::fclose(f) == 0 && ok;
      if (ok && std::rename(tmp.c_str(), path(r).c_str()) == 0) {
        ++here;
      } else {
        std::remove(tmp.c_str());
      }
    }
    files += here;
    (here ? got : none) += ((here ? got : none).empty() ? "" : ", ") + std::to_string(node);
  }
  if (got.empty() && none.empty()) return "";
  return "collected " + std::to_string(files) + " flight-recorder dump(s) of node(s) " +
         (got.empty() ? "none" : got) + " into " + dir +
         (none.empty() ? "" : " (none came from node(s) " + none + ")");
}

void NodeGroup::Leave(bool ok) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (done_value_.empty()) done_value_ = ok ? "ok" : "failed";
  cv_.notify_all();
  // Whatever this node reported must reach the store before it goes (unless
  // the store is gone already: then nobody is left to read it).
  cv_.wait_for(lock, 2 * kCallTimeout + kBeatPeriod,
               [&] { return store_gone_ || (pending_sent_ && done_sent_); });
  lock.unlock();
  if (config_.node_rank != 0) {
    (void)store_->Set(NodeKey(config_.node_rank, "left"), ToBytes("1"), kCallTimeout);
  } else {
    // The store goes with this process: wait until every launcher that is
    // still alive has read what it needs.
    lock.lock();
    // The job is over: a live launcher reads what it needs within a few
    // beats, so one that has not left by then is gone.
    cv_.wait_for(lock, Silence(true) + kCallTimeout, [&] {
      int live = 0;
      for (int j = 1; j < config_.nnodes; ++j) live += lost_[j] || !member_[j] ? 0 : 1;
      return left_ >= live;
    });
    lock.unlock();
  }
  {
    std::lock_guard<std::mutex> guard(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void NodeGroup::Loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    Round();
    lock.lock();
    // Woken early for a local report or the end, so that they go out at once.
    cv_.wait_for(lock, kBeatPeriod,
                 [&] { return stop_ || !pending_sent_ || (!done_value_.empty() && !done_sent_); });
  }
}

void NodeGroup::Round() {
  const auto now = Clock::now();
  const int me = config_.node_rank;
  int64_t beats = 0;
  Status st = store_->Add(NodeKey(me, "beat"), 1, &beats, kCallTimeout);

  std::string line, done;
  int kind = 0;
  bool finished_ok = false;
  bool failing = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failing = !pending_line_.empty() || !verdict_.empty();
    if (!pending_sent_) {
      line = pending_line_;
      kind = pending_kind_;
    }
    if (!done_sent_) done = done_value_;
    finished_ok = done_value_ == "ok" && !all_done_;
  }
  if (st.ok() && !line.empty()) {
    st = store_->Set(NodeKey(me, "report"), ToBytes(std::to_string(kind) + " " + line),
                     kCallTimeout);
  }
  if (st.ok() && !done.empty()) st = store_->Set(NodeKey(me, "done"), ToBytes(done), kCallTimeout);

  Bytes failed, all_done;
  const bool got_failed = st.ok() && store_->Get(NodeKey(0, "failed"), &failed, 0ms).ok();
  const bool got_all_done =
      st.ok() && me != 0 && finished_ok && store_->Get(NodeKey(0, "all_done"), &all_done, 0ms).ok();
  if (st.ok() && me == 0) Arbitrate(now, failing);

  std::lock_guard<std::mutex> lock(mutex_);
  if (st.ok()) {
    store_ok_at_ = Clock::now();
    if (!line.empty()) pending_sent_ = true;
    if (!done.empty()) done_sent_ = true;
    if (got_failed) AcceptVerdict(ToString(failed));
    if (got_all_done) all_done_ = true;
    if (got_failed || got_all_done) cv_.notify_all();
    if (!line.empty() || !done.empty()) cv_.notify_all();
    return;
  }
  store_error_ = st.ToString();
  const auto silence = Silence(failing);
  // Counted from the last answer, not from the first failure (a call to a
  // store that went away may itself take a while to fail), so that the
  // verdict comes as long after node 0 was last heard as its message says.
  const auto silent = Clock::now() - store_ok_at_;
  if (me != 0 && silent >= silence) {
    store_gone_ = true;
    SetVerdict(NodeName(0) + " is gone: its launcher, which hosts the rendezvous store at " +
                   config_.master_addr + ":" + std::to_string(config_.master_port) +
                   ", has not answered for " + Silent(silent, silence) +
                   " (it was killed, or its host or the network is down; last error: " +
                   store_error_ + ")",
               FailureKind::kNodeLost);
  }
}

// Node 0's thread: watches beats and reports, and writes the verdict.
void NodeGroup::Arbitrate(Clock::time_point now, bool failing) {
  const auto silence = Silence(failing || !candidates_.empty());
  for (int j = 1; j < config_.nnodes; ++j) {
    if (!member_[j]) continue;  // not in this start
    if (done_[j].empty()) {
      Bytes value;
      if (store_->Get(NodeKey(j, "done"), &value, 0ms).ok()) done_[j] = ToString(value);
    }
    int64_t beat = 0;
    if (store_->Add(NodeKey(j, "beat"), 0, &beat, kCallTimeout).ok() && beat != beat_[j]) {
      beat_[j] = beat;
      beat_changed_[j] = now;
      ++beats_since_report_[j];
    }
    if (!lost_[j] && done_[j].empty() && now - beat_changed_[j] >= silence) {
      lost_[j] = true;
      candidates_.push_back({static_cast<int>(FailureKind::kNodeLost), ++reports_seen_, -1,
                             NodeName(j) + " stopped responding: its launcher has not been " +
                                 "heard from for " + Silent(now - beat_changed_[j], silence) +
                                 " (it was killed, or its host or the network is down)"});
    }
  }
  // Each node reports at most once (ReportLocalFailure), under its own key;
  // among reports of one kind the earliest seen here wins (node order within
  // one round). Nothing outside the nodes' own keys orders them: a counter
  // that anyone with the secret could write would let them pick the verdict.
  for (int j = 0; j < config_.nnodes; ++j) {
    if (reported_[j] || !member_[j]) continue;
    Bytes value;
    if (!store_->Get(NodeKey(j, "report"), &value, 0ms).ok()) continue;
    reported_[j] = true;
    std::istringstream in(ToString(value));
    int kind = 0;
    std::string line;
    if (!(in >> kind) || !std::getline(in >> std::ws, line)) continue;
    candidates_.push_back({kind, ++reports_seen_, j, line});
    if (!first_report_) {
      first_report_ = now;
      std::fill(beats_since_report_.begin(), beats_since_report_.end(), 0);
    }
  }
  int64_t left = 0;
  for (int j = 1; j < config_.nnodes; ++j) {
    Bytes value;
    if (member_[j] && store_->Get(NodeKey(j, "left"), &value, 0ms).ok()) ++left;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    left_ = left;
    cv_.notify_all();
  }

  bool decided;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    decided = !verdict_.empty();
  }
  if (!decided && !candidates_.empty()) {
    // Decide once every other launcher that is still running has been heard
    // from twice since the first report (so all reports caused by one event
    // are in), or at once when a node is lost.
    bool ready = std::any_of(lost_.begin(), lost_.end(), [](bool l) { return l; });
    if (!ready) {
      ready = true;
      for (int j = 1; j < config_.nnodes; ++j) {
        if (member_[j] && done_[j].empty() && beats_since_report_[j] < 2) ready = false;
      }
    }
    if (ready) {
      const Candidate& best = *std::min_element(
          candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
            return a.kind != b.kind ? a.kind < b.kind : a.seq < b.seq;
          });
      // "<node that reported it, or -> <line>": a node can then refuse a
      // verdict that says it reported what it did not.
      (void)store_->Set(NodeKey(0, "failed"),
                        ToBytes((best.node < 0 ? "-" : std::to_string(best.node)) + "/" +
                                std::to_string(best.kind) + " " + best.line),
                        kCallTimeout);
      std::lock_guard<std::mutex> lock(mutex_);
      SetVerdict(best.line, FailureKind(best.kind));
    }
  }

  bool all_ok = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all_ok = done_value_ == "ok" && verdict_.empty() && !all_done_;
  }
  for (int j = 1; j < config_.nnodes && all_ok; ++j) all_ok = !member_[j] || done_[j] == "ok";
  if (all_ok && store_->Set(NodeKey(0, "all_done"), ToBytes("1"), kCallTimeout).ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    all_done_ = true;
    cv_.notify_all();
  }
}

}  // namespace plexus::run
