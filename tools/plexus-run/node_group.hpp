// NodeGroup: the launchers of one job across hosts (plexus-run --nnodes N)
// and what they tell each other through the rendezvous store.
//
// One plexus-run runs on each host ("node"); node 0's hosts the store. Every
// launcher holds a store client of its own, which claims the identity
// "node/K" (store_protocol.hpp): a second launcher with --node-rank K is
// refused at once, told who holds it, and stops; the job goes on. What a
// launcher says lives under its own "plexus/node/K/launch/", which the store
// accepts from node K's connection only, so a process that has the job's
// secret but is not one of its launchers (a stray launcher, a second job
// started with the same token file, a script) can neither speak for a node
// nor give the verdict:
//
//   node/K/launch/info     "nproc=2 nnodes=3 host=NAME start=S": node K has joined, and with
//                          what; S counts the restarts (plexus-run --max-restarts)
//   node/K/launch/beat     counter, +1 every kBeatPeriod while node K's launcher is alive
//   node/K/launch/report   "<kind> <line>": the local failure node K saw (once);
//                          kind: FailureKind, lower = closer to the root cause
//   node/K/launch/done     "ok" or "failed": node K's ranks have ended (its beats may stop)
//   node/K/launch/left     node K's launcher needs the store no longer
//   node/0/launch/failed   the job-wide verdict, "<node that reported it, or ->/<kind> <line>":
//                          the line every launcher reports, and its FailureKind
//   node/0/launch/all_done "1": every node's ranks exited 0
//
// While joining, every launcher checks each node's info against its own
// options. A disagreement involving node 0 stops the job when node 0 sees it
// (node 0 writes the verdict); seen by any other node, it stops only that
// launcher: one started with --nnodes 4 --node-rank 3 beside a job of 3 is
// refused, and the job of 3 goes on.
//
// Node 0's launcher is the arbiter. It watches the other launchers' beats: a
// node that is not done and whose beat has not moved for lost_after is lost
// (its launcher was killed, or its host or link is down); once the job is
// failing, 5 s of silence do (see Silence()). When a failure is
// reported it waits until every other live launcher has beaten twice more, or
// one is found lost, so that a rank that merely exited because a peer
// vanished is not blamed for it; then it writes "failed" with the report of
// the lowest kind (the earliest among equals). The other launchers poll
// the verdict; a launcher whose store calls fail for as long (lost_after, or
// 5 s once it is failing itself), counted from its last call that succeeded,
// declares node 0 (and the store with it) gone. A launcher refuses a verdict
// that says it reported a failure it never reported (its own ranks are the
// one thing it knows for certain), and logs it. Node 0 keeps serving the store at the end
// until every live launcher has left, so that none of them mistakes the end
// for node 0's death.
//
// Restarts (--max-restarts): every start of the ranks has a fresh store and
// a fresh NodeGroup, the same port. A launcher that joins start S reads
// node 0's info; while it says an earlier start, the store is still the old
// one (node 0 is waiting for the others to leave it), and the launcher
// connects again a moment later. Other nodes of an earlier start count as not
// yet joined; one of a later start is an error.
//
// Thread safety: one helper thread does the beats and polls; the public
// methods are called from the launcher's main thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher.hpp"
#include "plexus/rendezvous_store.hpp"

namespace plexus::run {

struct NodeGroupConfig {
  int nnodes = 1;
  int node_rank = 0;
  int nproc = 1;
  std::string master_addr;
  uint16_t master_port = 0;
  std::chrono::milliseconds join_timeout{300000};  // every node must have joined by then
  // Silence that makes a node lost while the job is healthy (plexus-run:
  // --node-timeout, default PLEXUS_TIMEOUT); once it is failing, at most 5 s.
  std::chrono::milliseconds lost_after{300000};
  int start = 0;  // restarts before this start of the ranks (--max-restarts)
  // --nnodes MIN:MAX (nnodes is MAX): node 0 starts once every node joined,
  // or min_nodes did and last_call passed since; min_nodes == nnodes: every
  // node, as always.
  int min_nodes = 1;
  std::chrono::milliseconds last_call{30000};
};

class NodeGroup {
 public:
  // Connects to the store (node 0 must have started it already on its host),
  // claims node_rank, publishes this node and waits until all nnodes have
  // joined with the same nproc and nnodes. Returns false with *error set (a
  // whole sentence) otherwise.
  static bool Join(const NodeGroupConfig& config, std::unique_ptr<NodeGroup>* out,
                   std::string* error);

  ~NodeGroup();

  // Starts the helper thread (beats, polls, and on node 0 the arbiter).
  void Start();

  // Readable (level-triggered) once the job-wide verdict is known: poll it.
  int wake_fd() const { return wake_read_; }

  // The job-wide verdict, "" while there is none.
  std::string Failure();
  // What kind of failure the verdict is; unset while there is none, and for a
  // verdict the join gave (two nodes disagree).
  std::optional<FailureKind> VerdictKind();

  // A local failure, to be reported (once; later calls are ignored). Does
  // not block: the helper thread sends it.
  void ReportLocalFailure(FailureKind kind, const std::string& line);

  // After a local failure, once the local ranks are gone: waits (at most
  // min(lost_after, 5 s) + a moment) for the verdict; returns it when it is another
  // failure than the one reported here, "" when it is ours or none came.
  std::string SettleFailure();

  // After every local rank exited 0: marks this node done and waits until all
  // nodes are (returns "") or the job failed elsewhere (returns the verdict).
  std::string FinishOk();

  // After a failed job whose ranks wrote flight-recorder dumps to dir
  // (PLEXUS_TRACE_DIR, on each node's own host): every node sends its ranks'
  // dump files through the store, under its own keys, and node 0 writes the
  // other nodes' into its dir (waiting at most 10 s in all). Returns, on
  // node 0, what it collected ("" when nothing), a line to print.
  std::string ShareTraces(const std::string& dir);

  // Last call: marks this node done (ok or not), says it has left, and on
  // node 0 waits (bounded) until the other live launchers have left too.
  // Stops the helper thread.
  void Leave(bool ok);

  // The host name each node gave when it joined ("" where unknown).
  const std::vector<std::string>& hosts() const { return hosts_; }

  // Node 0's name for this start of the job (PLEXUS_JOB_ID for the ranks'
  // flight-recorder dumps); "" where node 0 gave none.
  const std::string& job_id() const { return job_id_; }
  // MASTER_PORT of every rank of this start: the free port node 0 picked on
  // its host for torch.distributed's env:// rendezvous (0: none).
  uint16_t torch_port() const { return torch_port_; }

  // The start this node joined (a late node of an elastic job joins node 0's).
  int start() const { return start_; }
  // The nodes of this start, in order (node 0 says which: every node, or with
  // MIN:MAX those that joined in time); this node may not be one of them.
  std::vector<int> members() const;
  bool is_member() const { return member_[config_.node_rank]; }

  // A node that is not in this start (it came late): waits, without beats,
  // until the job is over (true) or node 0's store of this start is gone
  // (false: join the next). Bounded by polls of the store only.
  bool WaitOutStart();

 private:
  NodeGroup(const NodeGroupConfig& config, std::unique_ptr<RendezvousStore> store);
  void Loop();
  void Round();
  void Arbitrate(std::chrono::steady_clock::time_point now, bool failing);
  // The silence after which a node counts as lost: lost_after, or at most
  // kLostOnceFailing (node_group.cpp) once the job is failing.
  std::chrono::milliseconds Silence(bool failing) const;
  void SetVerdict(const std::string& line, std::optional<FailureKind> kind);  // holds mutex_
  // The verdict as read from the store, "<node> <line>": SetVerdict(line)
  // unless it contradicts this node's own report. Holds mutex_.
  void AcceptVerdict(const std::string& text);
  std::string NodeName(int node) const;

  using Clock = std::chrono::steady_clock;
  struct Candidate {
    int kind;
    int64_t seq;  // the order node 0 saw it in
    int node;     // who reported it; -1: the arbiter itself (a lost node)
    std::string line;
  };

  const NodeGroupConfig config_;
  std::unique_ptr<RendezvousStore> store_;
  std::vector<std::string> hosts_;
  std::thread thread_;
  int wake_read_ = -1;
  int wake_write_ = -1;

  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  int start_ = 0;
  std::vector<bool> member_;
  std::string verdict_;
  std::optional<FailureKind> verdict_kind_;
  bool verdict_refused_ = false;  // a contradicting verdict was logged
  std::string job_id_;
  uint16_t torch_port_ = 0;
  bool store_gone_ = false;       // node 0 was declared gone (the store with it)
  bool all_done_ = false;
  bool pending_sent_ = true;  // false while a local report waits to be sent
  int pending_kind_ = 0;
  std::string pending_line_;
  std::string reported_line_;  // what this node reported, once sent
  std::string done_value_;     // this node's done/K, once set
  bool done_sent_ = false;
  Clock::time_point store_ok_at_{};  // end of the last round that worked
  std::string store_error_;

  // Arbiter state (node 0's thread only).
  std::vector<int64_t> beat_;
  std::vector<Clock::time_point> beat_changed_;
  std::vector<int> beats_since_report_;
  std::vector<std::string> done_;
  std::vector<bool> lost_;
  std::vector<bool> reported_;  // node j's report has been read
  int64_t reports_seen_ = 0;    // candidates so far, numbering them in order
  std::vector<Candidate> candidates_;
  std::optional<Clock::time_point> first_report_;
  int64_t left_ = 0;
};

}  // namespace plexus::run
