// The part of plexus-run that starts the ranks, watches them and stops them.
//
// Life of a job:
//  1. prog is resolved on PATH once; if it cannot be executed nothing starts
//     and the result is kExitCannotExecute.
//  2. Each rank is fork()ed into a process group of its own (setpgid), with
//     PR_SET_PDEATHSIG so that a launcher killed by SIGKILL does not leave
//     ranks behind, and its stdout/stderr on pipes read by the launcher.
//  3. One thread polls those pipes plus a signal pipe (SignalWatcher) and
//     prefixes each line with "[rank] " (OutputPrefixer).
//  4. The first rank to exit non-zero or by a signal, a SIGINT/SIGTERM/SIGHUP
//     to the launcher, or --timeout ends the job: every rank's process group
//     gets SIGTERM (for an interrupt: the signal received), then SIGKILL once
//     the grace period is over, or at once on a second interrupt. When the
//     last rank is gone, whatever is left in the ranks' groups gets SIGKILL,
//     so grandchildren such as a shell's "sleep" are not orphaned.
//  5. One line on stderr says which rank failed and how; see RunJob().
//
// Process groups are signalled with kill(-pid): a rank that has exited is
// watched with waitid(WNOWAIT) and only reaped at the very end, so its pid,
// which is also its group id, cannot be reused by an unrelated process while
// the launcher may still signal it.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace plexus::run {

// Exit codes of plexus-run.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRankFailed = 1;       // a rank failed, or the launcher itself did
inline constexpr int kExitUsage = 2;            // bad command line
inline constexpr int kExitTimeout = 124;        // --timeout expired (like timeout(1))
inline constexpr int kExitCannotExecute = 127;  // prog not found / not executable (like sh)
inline constexpr int kExitSignalBase = 128;     // + the signal that interrupted plexus-run

// What kind of failure stopped a job, as told to the launchers on other
// hosts (node_group.hpp); lower is closer to the cause.
enum class FailureKind : int {
  kLauncher = 0,  // plexus-run itself: a signal it got, --timeout, prog not executable, internal
  kNodeLost = 1,  // a node's launcher went silent, or the store went away
  kStalled = 2,   // ranks timed out waiting for a rank that stopped making progress
  kSignal = 3,    // a rank was killed by a signal
  kExit = 4,      // a rank exited non-zero
};

struct LaunchConfig {
  std::vector<std::string> argv;                   // prog and its arguments; argv[0] is prog
  std::vector<std::vector<std::string>> rank_env;  // "NAME=value" lists, one per rank
  std::chrono::milliseconds grace{3000};           // SIGTERM → SIGKILL delay
  std::chrono::milliseconds timeout{0};            // whole-job limit; 0 = none
  bool prefix_output = true;  // false: ranks write straight to our stdout/stderr
  // --bind-to core: the CPU each rank (by index) is bound to, set in the
  // child before exec; empty: not bound.
  std::vector<int> rank_cpu;
  // After a rank failed: each rank's stall line from the store ("" where none),
  // "<communicator> <seq> <collective> <rank waited for> ..." as
  // core/src/stall_report.hpp writes it. Unset: no store to ask.
  std::function<std::vector<std::string>()> read_stall_lines;
  // After a rank failed: "" or a sentence saying that ranks which timed out
  // posted different collectives (core/src/stall_report.hpp, StallMismatch).
  std::function<std::string()> read_stall_mismatch;

  // Across hosts (plexus-run --nnodes); the defaults mean one host, and then
  // every message is as it has always been.
  int first_rank = 0;  // the job-wide rank of rank_env[0]; prefixes and messages use job-wide ranks
  int node_rank = -1;  // this host's node rank; -1: one host (no "node K" in messages)
  // Each node's host name ("" where unknown), for "rank 3 (node 1, host b)".
  std::vector<std::string> node_hosts;
  // Readable once the job failed on another node: the ranks here are then
  // stopped and remote_failure() is reported. -1: none.
  int remote_failure_fd = -1;
  std::function<std::string()> remote_failure;
  // Called once, when this node stops its ranks for a cause of its own (a rank
  // failed, a signal, --timeout, ...), with the line to tell the other nodes.
  std::function<void(FailureKind, const std::string&)> publish_failure;
  // After such a stop, once the ranks here are reaped: the job-wide first
  // failure when it was another node's, "" when it was this node's own.
  std::function<std::string()> settle_failure;

  // plexus-run --elastic (one host): a rank that fails leaves the job and
  // the others go on; a rank the others' stall marks name as having stopped
  // making progress is killed and leaves too. After each departure
  // publish_members(generation, the job ranks still in the job) tells the
  // ranks (Communicator::shrink). The job ends when every rank has exited; it
  // succeeded when every rank still in it exited 0.
  bool elastic = false;
  std::function<void(uint64_t, const std::vector<int>&)> publish_members;
  // --elastic with --max-restarts N: a rank that left is started again, N
  // times in all, once every rank in the job has reached the latest
  // generation (read_generations: each job rank's mark, 0 for none). It
  // joins in a generation of its own (PLEXUS_ELASTIC_JOIN), at the others'
  // next Communicator::grow(). One rank joins at a time.
  int rejoins = 0;
  // PLEXUS_TRACE_DIR (the ranks' flight-recorder dumps): when the job is
  // stopped for a failure, the ranks are asked to dump (SIGUSR1) before
  // they are stopped, and the report says where the dumps are.
  std::string trace_dir;
  std::function<std::vector<uint64_t>()> read_generations;
};

// "node 1, host b", or "node 1" where node_hosts does not know its host.
std::string NodeLabel(int node, const std::vector<std::string>& node_hosts);

// "ranks 2 and 3 (node 1, host b) and rank 4 (node 2, host c)": job-wide ranks,
// in ascending order, numbered node by node, ranks_per_node on each; with
// ranks_per_node <= 0 just "ranks 2, 3 and 4".
std::string NodeRankList(const std::vector<int>& ranks, int ranks_per_node,
                         const std::vector<std::string>& node_hosts);

// Runs one job to its end and returns plexus-run's exit code: kExitOk when
// every rank exited 0; kExitRankFailed, kExitTimeout, kExitCannotExecute or
// kExitSignalBase + signal otherwise, after printing one "plexus-run: ..."
// line to stderr, e.g.
//   plexus-run: rank 2 (pid 1234) exited with code 3; stopped the other 3 ranks
// (across nodes "rank 2 (node 1, host b, pid 1234) ..." and "rank 1 (node 0,
// host a) stopped making progress ...")
// or, when ranks timed out waiting for one that stopped making progress,
//   plexus-run: rank 1 stopped making progress (ranks 0 and 2 timed out waiting
//   for it in allreduce #3 on plexus/0; it was stopped by SIGSTOP);
//   the first to exit: rank 0 (pid 1234) exited with code 3; stopped ...
// Blocks until every rank has been reaped. Installs signal handlers for its
// duration (SIGCHLD, and SIGINT/SIGTERM/SIGHUP unless they are ignored, which
// then stay ignored for the ranks too, as nohup expects), and ignores
// SIGPIPE; restores all of them before returning. Call from one thread only.
int RunJob(const LaunchConfig& config);

}  // namespace plexus::run
