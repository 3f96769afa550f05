#include "launcher.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

#include "exit_status.hpp"
#include "output_prefixer.hpp"
#include "program_path.hpp"
#include "signal_watcher.hpp"

namespace plexus::run {
namespace {

using Clock = std::chrono::steady_clock;

// After the last rank exited, how long to keep reading pipes that a leftover
// background process still holds open before giving up on them.
constexpr std::chrono::milliseconds kDrainTimeout{1000};
// Upper bound on one poll() so that a lost wake-up can only ever cost this much.
constexpr int kMaxPollMs = 1000;
// --elastic: how often the stall marks are read.
constexpr std::chrono::milliseconds kStallCheck{250};
// --elastic: how long a rank named by the others' stall lines has to report
// the same failure itself (then it is alive, just slow) before it is taken
// out as frozen.
constexpr std::chrono::milliseconds kTakeOutGrace{500};

void PrintError(const std::string& text) {
  std::string line = "plexus-run: " + text + "\n";
  (void)WriteAll(STDERR_FILENO, line.data(), line.size());
}

// Whether dir holds a flight-recorder dump (rank-R.json).
bool HasDumps(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return false;
  bool found = false;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    found = found || (name.rfind("rank-", 0) == 0 && name.size() > 10 &&
                      name.compare(name.size() - 5, 5, ".json") == 0);
  }
  ::closedir(d);
  return found;
}

// Whether process pid has a handler for sig (/proc/PID/status, SigCgt).
bool CatchesSignal(pid_t pid, int sig) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/status").c_str(), "r");
  if (!f) return false;
  char line[256];
  unsigned long long caught = 0;
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f)) {
    found = std::sscanf(line, "SigCgt: %llx", &caught) == 1;
  }
  std::fclose(f);
  return found && ((caught >> (sig - 1)) & 1);
}

std::string Plural(int n, const char* word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string FormatSeconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

// NULL-terminated char* view of a vector of strings, built before fork():
// the child may not allocate.
class CStringArray {
 public:
  explicit CStringArray(const std::vector<std::string>& strings) {
    ptrs_.reserve(strings.size() + 1);
    for (const std::string& s : strings) ptrs_.push_back(const_cast<char*>(s.c_str()));
    ptrs_.push_back(nullptr);
  }
  char** get() { return ptrs_.data(); }

 private:
  std::vector<char*> ptrs_;
};

void CloseFd(int* fd) {
  if (*fd >= 0) ::close(*fd);
  *fd = -1;
}

class Launcher {
 public:
  explicit Launcher(const LaunchConfig& config) : config_(config) {}
  ~Launcher();

  int Run();

 private:
  enum class Cause {
    kNone,
    kRankFailed,
    kInterrupted,
    kTimeout,
    kCannotExecute,
    kInternal,
    kRemote,  // the job failed on another node (--nnodes)
  };

  struct Stream {
    int fd = -1;
    OutputPrefixer prefixer;
  };
  struct Rank {
    pid_t pid = -1;
    bool exited = false;
    bool left = false;     // --elastic: out of the job (failed, or taken out)
    std::string reason{};  // --elastic: why it was taken out, when it was
    std::optional<std::chrono::steady_clock::time_point> blamed_at{};  // --elastic
    bool restart_pending = false;  // --elastic: left, to be started again
    uint64_t joins_at = 0;         // --elastic: started again, joining at this generation
    int how = 0;                   // siginfo si_code: CLD_EXITED, CLD_KILLED or CLD_DUMPED
    int value = 0;                 // siginfo si_status: the exit code or the signal
    int stopped_by = 0;            // the signal that had stopped it when the job was stopped
    Stream out;
    Stream err;
  };

  bool InstallSignals();
  void RestoreSignals();
  bool SpawnAll();
  // Starts rank index. On failure: with why_not, says why there and leaves
  // the job running (a restart under --elastic); without, stops the job.
  bool Spawn(int index, std::string* why_not = nullptr);
  void KeepDump(int job_rank, int restart) const;
  void Loop();
  void ReadStream(Stream* stream);
  void CheckExits();
  void HandleSignals();
  void BeginStop(Cause cause, int sig);
  void SignalRanks(int sig);
  void KillRemaining();
  bool AllExited() const;
  void ReapAll();
  int Report();
  void PrintLocal(const std::string& line);
  std::string StallSummary() const;
  std::string RankWithPid(int index) const;
  std::string NodeLabel(int node) const;
  std::string ListRanks(const std::vector<int>& ranks, bool with_nodes) const;
  std::string NodePrefix() const;
  void PublishFailure();
  // --elastic: a rank left (its exit seen); tells the others.
  void Leave(int index);
  // --elastic: kills the ranks the others' stall marks name.
  void TakeOutStalled();
  std::string ElasticSummary() const;
  // --elastic with --max-restarts: starts a rank that left again once every
  // rank has reached the latest generation; notes newcomers that joined.
  void RestartLeft();
  // Notes the newcomers that joined (their mark reached their generation);
  // true when every running rank has reached the latest generation and one
  // of them is not a newcomer. reached: each job rank's mark.
  bool NoteJoined(std::vector<uint64_t>* reached);
  // --elastic: once every other rank has exited, a newcomer still waiting
  // to join never will: it is stopped.
  void EndWaitingNewcomers();
  std::vector<int> Members() const;

  const LaunchConfig& config_;
  std::string program_path_;
  std::vector<std::string> sh_argv_;  // "/bin/sh prog args" for scripts without #!
  std::vector<Rank> ranks_;
  SignalWatcher watcher_;
  struct sigaction saved_sigpipe_ {};
  bool sigpipe_saved_ = false;
  int dev_null_ = -1;

  bool stopping_ = false;
  bool killed_ = false;  // SIGKILL has been sent to every group
  Clock::time_point stop_deadline_;
  std::optional<Clock::time_point> job_deadline_;
  std::optional<Clock::time_point> drain_deadline_;

  Cause cause_ = Cause::kNone;
  int failed_rank_ = -1;
  int cause_errno_ = 0;
  std::string internal_error_;
  std::string remote_line_;   // Cause::kRemote: what failed elsewhere
  int interrupt_signal_ = 0;  // first SIGINT/SIGTERM/SIGHUP received
  int stopped_count_ = 0;     // ranks still running when the job was stopped
  int sigkilled_count_ = 0;   // of those, how many outlived the grace period

  // --elastic
  uint64_t generation_ = 0;  // departures and joins so far
  std::vector<std::string> departures_;
  std::vector<std::string> rejoined_;  // "rank 2 (pid 7) at 3.1 s, joined at 4.0 s"
  int rejoins_left_ = 0;
  bool ending_newcomers_ = false;
  std::vector<std::vector<std::string>> env_;  // each rank's, PLEXUS_ELASTIC_JOIN added on restart
  std::vector<std::string> stale_lines_;       // stall lines from before the last restart
  Clock::time_point started_at_ = Clock::now();
  Clock::time_point stall_checked_at_{};
};

Launcher::~Launcher() {
  for (Rank& r : ranks_) {
    CloseFd(&r.out.fd);
    CloseFd(&r.err.fd);
  }
  CloseFd(&dev_null_);
  RestoreSignals();
}

int Launcher::Run() {
  const std::string& program = config_.argv.front();
  int err = ResolveProgram(program, std::getenv("PATH"), &program_path_);
  if (err != 0) {
    PrintError("cannot execute '" + program + "': " + std::strerror(err));
    return kExitCannotExecute;
  }
  sh_argv_ = config_.argv;
  sh_argv_[0] = program_path_;
  sh_argv_.insert(sh_argv_.begin(), "sh");

  if (!InstallSignals()) return kExitRankFailed;
  if (config_.timeout.count() > 0) job_deadline_ = Clock::now() + config_.timeout;
  env_ = config_.rank_env;
  rejoins_left_ = config_.rejoins;
  SpawnAll();  // on failure it has already begun stopping the ranks it started
  Loop();
  ReapAll();
  int code = Report();
  if (code != kExitOk && !config_.trace_dir.empty() && HasDumps(config_.trace_dir)) {
    PrintError("the ranks' flight-recorder dumps are in " + config_.trace_dir + ": plexus-trace " +
               config_.trace_dir + " says what each did");
  }
  RestoreSignals();
  return code;
}

bool Launcher::InstallSignals() {
  std::string error;
  // A signal the launcher was started with ignored (nohup, "cmd &" in a
  // script) is left ignored, so the ranks inherit that across exec().
  std::vector<int> watched = {SIGCHLD};
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction current {};
    if (::sigaction(sig, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    watched.push_back(sig);
  }
  if (!watcher_.Install(watched, &error)) {
    PrintError("cannot install signal handlers: " + error);
    return false;
  }
  // A closed stdout (plexus-run ... | head) must not kill the launcher while
  // ranks are running; OutputPrefixer then just drops their output.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigpipe_saved_ = ::sigaction(SIGPIPE, &ignore, &saved_sigpipe_) == 0;
  return true;
}

void Launcher::RestoreSignals() {
  if (sigpipe_saved_) ::sigaction(SIGPIPE, &saved_sigpipe_, nullptr);
  sigpipe_saved_ = false;
}

bool Launcher::SpawnAll() {
  dev_null_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ranks_.reserve(config_.rank_env.size());
  for (size_t i = 0; i < config_.rank_env.size(); ++i) {
    // Built with append(): g++ 12 -O3 flags `"[" + std::string` with a bogus -Wrestrict.
    std::string prefix;
    if (config_.prefix_output) {
      prefix.append("[")
          .append(std::to_string(config_.first_rank + static_cast<int>(i)))
          .append("] ");
    }
    ranks_.push_back(Rank{.out = {-1, OutputPrefixer(prefix, STDOUT_FILENO)},
                          .err = {-1, OutputPrefixer(prefix, STDERR_FILENO)}});
    // A rank that could not start stays in ranks_ with pid -1, marked exited.
    if (!Spawn(static_cast<int>(i))) return false;
    // A Ctrl-C while starting 512 ranks should not wait for all of them.
    HandleSignals();
    if (stopping_) return false;
  }
  return true;
}

bool Launcher::Spawn(int index, std::string* why_not) {
  Rank& rank = ranks_[index];
  int out_pipe[2] = {-1, -1};
  int err_pipe[2] = {-1, -1};
  int status_pipe[2] = {-1, -1};  // carries errno from a failed exec, closes on success
  auto fail = [&](const char* what) {
    const std::string why =
        std::string(what) + " for rank " + std::to_string(index) + ": " + std::strerror(errno);
    rank.exited = true;  // never started: not one of the ranks to stop
    for (int* fd : {&out_pipe[0], &out_pipe[1], &err_pipe[0], &err_pipe[1], &status_pipe[0],
                    &status_pipe[1]}) {
      CloseFd(fd);
    }
    if (why_not) {
      *why_not = why;
    } else {
      internal_error_ = why;
      BeginStop(Cause::kInternal, SIGTERM);
    }
    return false;
  };
  // O_CLOEXEC everywhere: rank 5 must not inherit rank 4's pipes, or rank 4's
  // output would never reach EOF while rank 5 lives.
  if (config_.prefix_output &&
      (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)) {
    return fail("pipe");
  }
  if (::pipe2(status_pipe, O_CLOEXEC) != 0) return fail("pipe");

  // Everything the child touches is prepared here: after fork() in a
  // multithreaded process only async-signal-safe calls are allowed.
  CStringArray argv(config_.argv);
  CStringArray sh_argv(sh_argv_);
  CStringArray envp(env_[index]);
  const char* path = program_path_.c_str();
  // Rank 0 may read our stdin (e.g. piped input), unless it is a terminal: a
  // rank in its own process group that reads the terminal is stopped by SIGTTIN.
  const int stdin_fd = (index == 0 && !::isatty(STDIN_FILENO)) ? -1 : dev_null_;
  const struct sigaction child_sigpipe = saved_sigpipe_;
  const pid_t parent = ::getpid();
  cpu_set_t cpu;
  CPU_ZERO(&cpu);
  const bool bind = size_t(index) < config_.rank_cpu.size() && config_.rank_cpu[index] >= 0;
  if (bind) CPU_SET(config_.rank_cpu[index], &cpu);

  pid_t pid = ::fork();
  if (pid < 0) return fail("fork");
  if (pid == 0) {
    ::setpgid(0, 0);
    // If the launcher dies without a chance to clean up (SIGKILL, OOM), take
    // the rank with it; check getppid() in case that already happened.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(kExitCannotExecute);
    if (stdin_fd >= 0) ::dup2(stdin_fd, STDIN_FILENO);
    if (out_pipe[1] >= 0) ::dup2(out_pipe[1], STDOUT_FILENO);
    if (err_pipe[1] >= 0) ::dup2(err_pipe[1], STDERR_FILENO);
    ::sigaction(SIGPIPE, &child_sigpipe, nullptr);  // whatever plexus-run was given
    // (A CPU that cannot be had leaves the rank unbound, as without the option.)
    if (bind) (void)::sched_setaffinity(0, sizeof cpu, &cpu);
    ::execve(path, argv.get(), envp.get());
    if (errno == ENOEXEC) ::execve("/bin/sh", sh_argv.get(), envp.get());  // as execvp() does
    int e = errno;
    (void)!::write(status_pipe[1], &e, sizeof(e));
    ::_exit(kExitCannotExecute);
  }
  rank.pid = pid;
  // Also from the parent, so the group exists before we could signal it.
  ::setpgid(pid, pid);
  CloseFd(&out_pipe[1]);
  CloseFd(&err_pipe[1]);
  CloseFd(&status_pipe[1]);
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(status_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  CloseFd(&status_pipe[0]);
  rank.out.fd = out_pipe[0];
  rank.err.fd = err_pipe[0];
  for (int fd : {rank.out.fd, rank.err.fd}) {
    if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    // exec failed: the child is exiting with 127; not a rank failure to report.
    int status;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    rank.pid = -1;
    rank.exited = true;
    if (why_not) {
      *why_not = "cannot execute '" + config_.argv.front() + "': " + std::strerror(exec_errno);
      return false;
    }
    cause_errno_ = exec_errno;
    failed_rank_ = index;
    BeginStop(Cause::kCannotExecute, SIGTERM);
    return false;
  }
  return true;
}

bool Launcher::AllExited() const {
  return std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.exited; });
}

void Launcher::Loop() {
  std::vector<pollfd> fds;
  std::vector<Stream*> streams;  // streams[i] belongs to fds[i + 2]
  bool check_exits = true;
  while (true) {
    if (check_exits) CheckExits();
    check_exits = false;
    const Clock::time_point now = Clock::now();

    if (!stopping_ && job_deadline_ && now >= *job_deadline_) BeginStop(Cause::kTimeout, SIGTERM);
    if (config_.elastic && !stopping_ && now - stall_checked_at_ >= kStallCheck) {
      stall_checked_at_ = now;
      TakeOutStalled();
      RestartLeft();
      EndWaitingNewcomers();
      check_exits = true;
    }
    if (stopping_ && !killed_ && (now >= stop_deadline_ || AllExited())) KillRemaining();

    fds.clear();
    streams.clear();
    fds.push_back({watcher_.fd(), POLLIN, 0});
    // Only until the job is stopping: the descriptor stays readable.
    const bool watch_remote = config_.remote_failure_fd >= 0 && !stopping_;
    fds.push_back({watch_remote ? config_.remote_failure_fd : -1, POLLIN, 0});
    for (Rank& r : ranks_) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
    }
    if (AllExited()) {
      if (!drain_deadline_) drain_deadline_ = now + kDrainTimeout;
      if (streams.empty() || now >= *drain_deadline_) break;
    }

    std::optional<Clock::time_point> wake;
    auto earliest = [&](Clock::time_point t) { wake = wake ? std::min(*wake, t) : t; };
    if (!stopping_ && job_deadline_) earliest(*job_deadline_);
    if (stopping_ && !killed_) earliest(stop_deadline_);
    if (drain_deadline_) earliest(*drain_deadline_);
    int timeout_ms = config_.elastic ? int(kStallCheck.count()) : kMaxPollMs;
    if (wake) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(*wake - now).count();
      timeout_ms = static_cast<int>(std::clamp<long long>(left, 0, kMaxPollMs));
    }

    int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      internal_error_ = std::string("poll: ") + std::strerror(errno);
      if (!stopping_) BeginStop(Cause::kInternal, SIGTERM);
      if (!killed_) KillRemaining();
      check_exits = true;
      ::usleep(10000);  // do not spin if poll keeps failing; the exit checks go on
      continue;
    }
    if (ready <= 0) {
      check_exits = true;  // a timer expired; also a cheap safety net for exits
      continue;
    }
    if (fds[0].revents != 0) {
      watcher_.Drain();
      if (watcher_.Take(SIGCHLD) > 0) check_exits = true;
      HandleSignals();
    }
    if (fds[1].revents != 0 && !stopping_) {
      remote_line_ = config_.remote_failure ? config_.remote_failure() : "";
      if (remote_line_.empty()) remote_line_ = "another node failed";
      BeginStop(Cause::kRemote, SIGTERM);
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents != 0) ReadStream(streams[i - 2]);
    }
  }
  for (Rank& r : ranks_) {
    for (Stream* s : {&r.out, &r.err}) {
      s->prefixer.Flush();
      CloseFd(&s->fd);
    }
  }
}

void Launcher::ReadStream(Stream* stream) {
  char buf[65536];
  ssize_t n = ::read(stream->fd, buf, sizeof(buf));
  if (n > 0) {
    stream->prefixer.Feed(buf, static_cast<size_t>(n));
    return;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
  // EOF (every writer is gone) or a read error: print what is left, stop watching.
  stream->prefixer.Flush();
  CloseFd(&stream->fd);
}

void Launcher::CheckExits() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    if (r.exited) continue;
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    // WNOWAIT: look, but leave the zombie, so that r.pid (= its process group
    // id) stays reserved until ReapAll().
    if (::waitid(P_PID, static_cast<id_t>(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid == 0) {
      continue;
    }
    r.exited = true;
    r.how = info.si_code;
    r.value = info.si_status;
    const bool failed = !(info.si_code == CLD_EXITED && info.si_status == 0);
    if (failed && !stopping_ && config_.elastic) {
      Leave(static_cast<int>(i));
      continue;
    }
    if (failed && !stopping_) {
      failed_rank_ = static_cast<int>(i);
      BeginStop(Cause::kRankFailed, SIGTERM);
    }
  }
}

void Launcher::HandleSignals() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    int count = watcher_.Take(sig);
    if (count == 0) continue;
    if (interrupt_signal_ == 0) interrupt_signal_ = sig;
    if (!stopping_) {
      // Forward the very signal: a rank may treat SIGINT (checkpoint and
      // leave) differently from SIGTERM.
      BeginStop(Cause::kInterrupted, sig);
      if (count > 1 && !killed_) KillRemaining();
    } else if (!killed_) {
      // A second Ctrl-C means "now": skip the rest of the grace period.
      KillRemaining();
    }
  }
}

void Launcher::BeginStop(Cause cause, int sig) {
  if (stopping_) return;
  stopping_ = true;
  cause_ = cause;
  stop_deadline_ = Clock::now() + config_.grace;
  stopped_count_ = static_cast<int>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return !r.exited; }));
  // A rank stopped by SIGSTOP/SIGTSTP is one that stopped making progress:
  // remember it for the report. WNOWAIT leaves the state for others to see.
  for (Rank& r : ranks_) {
    if (r.exited || r.pid <= 0) continue;
    siginfo_t info;
    std::memset(&info, 0, sizeof(info));
    if (::waitid(P_PID, static_cast<id_t>(r.pid), &info, WSTOPPED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid != 0 && info.si_code == CLD_STOPPED) {
      r.stopped_by = info.si_status;
    }
  }
  // PLEXUS_TRACE_DIR: every rank that can writes its flight recorder's ring
  // first (SIGUSR1; the ranks that failed wrote theirs already), so that the
  // one that hangs, which no error reaches, has its say too.
  // Only to a rank that catches SIGUSR1 (Plexus's recorder does once it has
  // a communicator), and not to its group: for the others the signal would
  // kill (a rank still starting, a shell, a data-loader worker).
  if (!config_.trace_dir.empty() && cause != Cause::kInterrupted) {
    for (const Rank& r : ranks_) {
      if (!r.exited && r.pid > 0 && CatchesSignal(r.pid, SIGUSR1)) ::kill(r.pid, SIGUSR1);
    }
    // (A loop: the ranks' exits interrupt the sleep with SIGCHLD.)
    const Clock::time_point dumped_by = Clock::now() + std::chrono::milliseconds(500);
    for (Clock::time_point now; (now = Clock::now()) < dumped_by;) {
      ::usleep(static_cast<useconds_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(dumped_by - now).count()));
    }
  }
  // A stopped rank is not continued (SIGCONT): it would wake up into the
  // failed collective and blur whom the others waited for. SIGKILL at the end
  // of the grace period ends it.
  SignalRanks(sig);
  if (cause != Cause::kRemote) PublishFailure();
}

std::string Launcher::NodeLabel(int node) const {
  return plexus::run::NodeLabel(node, config_.node_hosts);
}

// "rank 3 (node 1, host b, pid 4242)", or on one host "rank 3 (pid 4242)".
std::string Launcher::RankWithPid(int index) const {
  std::string name = "rank " + std::to_string(config_.first_rank + index) + " (";
  if (config_.node_rank >= 0) name += NodeLabel(config_.node_rank) + ", ";
  return name + "pid " + std::to_string(ranks_[index].pid) + ")";
}

// See NodeRankList() (launcher.hpp); "ranks 2, 3 and 4" on one host or
// without with_nodes.
std::string Launcher::ListRanks(const std::vector<int>& ranks, bool with_nodes) const {
  if (config_.node_rank < 0 || !with_nodes) return NodeRankList(ranks, 0, {});
  return NodeRankList(ranks, static_cast<int>(config_.rank_env.size()), config_.node_hosts);
}

// "node 1: " when the job spans nodes, "" on one host.
std::string Launcher::NodePrefix() const {
  if (config_.node_rank < 0) return "";
  return "node " + std::to_string(config_.node_rank) + ": ";
}

// Tells the other nodes (--nnodes) why this one stopped its ranks.
void Launcher::PublishFailure() {
  if (!config_.publish_failure) return;
  FailureKind kind = FailureKind::kLauncher;
  std::string line;
  switch (cause_) {
    case Cause::kRankFailed: {
      const Rank& r = ranks_[failed_rank_];
      kind = r.how == CLD_EXITED ? FailureKind::kExit : FailureKind::kSignal;
      line = RankWithPid(failed_rank_) + " " + DescribeExit(r.how, r.value);
      // Ranks that timed out leave word of whom they waited for before they
      // exit: name that rank (perhaps on another node) rather than this one.
      std::string stall = StallSummary();
      if (!stall.empty()) {
        kind = FailureKind::kStalled;
        line = stall + "; the first to exit: " + line;
      }
      break;
    }
    case Cause::kInterrupted:
      line = NodePrefix() + "plexus-run received " + SignalName(interrupt_signal_);
      break;
    case Cause::kTimeout:
      line =
          NodePrefix() + "job timed out after " + FormatSeconds(config_.timeout) + " (--timeout)";
      break;
    case Cause::kCannotExecute:
      line = NodePrefix() + "cannot execute '" + config_.argv.front() +
             "': " + std::strerror(cause_errno_);
      break;
    case Cause::kInternal:
      line = NodePrefix() + internal_error_;
      break;
    case Cause::kNone:
    case Cause::kRemote:
      return;
  }
  config_.publish_failure(kind, line);
}

void Launcher::SignalRanks(int sig) {
  for (const Rank& r : ranks_) {
    if (r.pid <= 0) continue;
    // The whole group, so that children of the rank (a shell's commands, a
    // data-loader's workers) get it too. Harmless if the group is empty.
    ::kill(-r.pid, sig);
    // A rank that moved itself to another group still gets it directly.
    if (!r.exited && ::getpgid(r.pid) != r.pid) ::kill(r.pid, sig);
  }
}

void Launcher::KillRemaining() {
  killed_ = true;
  sigkilled_count_ = static_cast<int>(
      std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return !r.exited; }));
  SignalRanks(SIGKILL);
}

void Launcher::ReapAll() {
  for (Rank& r : ranks_) {
    if (r.pid <= 0) continue;
    int status;
    while (::waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

// Prints the report of a failure seen here; across nodes, the job-wide first
// failure comes first when it was another node's.
void Launcher::Leave(int index) {
  Rank& r = ranks_[index];
  r.left = true;
  const double at = std::chrono::duration<double>(Clock::now() - started_at_).count();
  char when[32];
  std::snprintf(when, sizeof when, "%.1f s", at);
  std::string why = DescribeExit(r.how, r.value);
  if (!r.reason.empty()) why = r.reason + "; " + why;
  departures_.push_back(RankWithPid(index) + " at " + when + ": " + why);
  r.joins_at = 0;
  ++generation_;
  const std::vector<int> members = Members();
  if (config_.publish_members) config_.publish_members(generation_, members);
  // (The restarts left, less those promised to ranks already waiting.)
  const int promised = static_cast<int>(std::count_if(
      ranks_.begin(), ranks_.end(), [](const Rank& other) { return other.restart_pending; }));
  r.restart_pending = rejoins_left_ - promised > 0 && !ending_newcomers_ && !members.empty();
  PrintError(
      RankWithPid(index) + " " + why + "; the job goes on without it (--elastic): " +
      (members.empty() ? std::string("no rank is left") : ListRanks(members, false) + " left") +
      (r.restart_pending ? "; it starts again once they have gone on" : ""));
}

std::vector<int> Launcher::Members() const {
  std::vector<int> members;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    // (A rank that finished, exit 0, is in no later generation.)
    if (!ranks_[i].left && !ranks_[i].exited) {
      members.push_back(config_.first_rank + static_cast<int>(i));
    }
  }
  return members;
}

bool Launcher::NoteJoined(std::vector<uint64_t>* reached_out) {
  if (!config_.read_generations) return false;
  const std::vector<uint64_t> reached = config_.read_generations();
  auto at = [&](size_t i) {
    const size_t job_rank = static_cast<size_t>(config_.first_rank) + i;
    return job_rank < reached.size() ? reached[job_rank] : 0;
  };
  const double now_s = std::chrono::duration<double>(Clock::now() - started_at_).count();
  char when[32];
  std::snprintf(when, sizeof when, "%.1f s", now_s);
  // Every rank still running has reached the latest generation, and one of
  // them was there before (a newcomer needs someone to join).
  bool settled = true, running = false;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    if (r.left || r.exited) continue;
    if (r.joins_at != 0 && at(i) >= r.joins_at) {
      r.joins_at = 0;
      rejoined_.back() += std::string(", joined at ") + when;
      PrintError(RankWithPid(static_cast<int>(i)) +
                 " joined the others (--elastic): " + ListRanks(Members(), false) + " in the job");
    }
    settled = settled && at(i) >= generation_;
    running = running || r.joins_at == 0;
  }
  if (reached_out) *reached_out = reached;
  return settled && running;
}

// The flight-recorder dump the process that left wrote (PLEXUS_TRACE_DIR/
// rank-R.json, on its failure) gets a name of its own before rank R starts
// again, which would write its own under that name.
void Launcher::KeepDump(int job_rank, int restart) const {
  if (config_.trace_dir.empty()) return;
  const std::string dump = config_.trace_dir + "/rank-" + std::to_string(job_rank);
  const std::string kept = dump + ".before-restart-" + std::to_string(restart) + ".json";
  if (::rename((dump + ".json").c_str(), kept.c_str()) == 0) {
    PrintError("rank " + std::to_string(job_rank) + "'s flight-recorder dump is now " + kept);
  }
}

void Launcher::RestartLeft() {
  if (stopping_ || ending_newcomers_) return;
  const bool pending = std::any_of(ranks_.begin(), ranks_.end(),
                                   [](const Rank& r) { return r.restart_pending || r.joins_at; });
  if (!pending || !NoteJoined(nullptr)) return;
  const double now_s = std::chrono::duration<double>(Clock::now() - started_at_).count();
  char when[32];
  std::snprintf(when, sizeof when, "%.1f s", now_s);
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    if (!r.restart_pending) continue;
    if (rejoins_left_ <= 0) {
      r.restart_pending = false;
      continue;
    }
    // Its output first (it is dead: what is left is in the pipe), then the
    // new process gets pipes of its own.
    for (Stream* stream : {&r.out, &r.err}) {
      char buf[65536];
      ssize_t n;
      while (stream->fd >= 0 &&
             ((n = ::read(stream->fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))) {
        if (n > 0) stream->prefixer.Feed(buf, static_cast<size_t>(n));
      }
      stream->prefixer.Flush();
      CloseFd(&stream->fd);
    }
    // What the old process left behind (children in its group) goes too:
    // nothing may speak as this rank beside the new one.
    ::kill(-r.pid, SIGKILL);
    int status;
    while (::waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
    }
    const int restart = config_.rejoins - rejoins_left_ + 1;
    --rejoins_left_;
    KeepDump(config_.first_rank + static_cast<int>(i), restart);
    r = Rank{.out = {-1, std::move(r.out.prefixer)}, .err = {-1, std::move(r.err.prefixer)}};
    r.joins_at = ++generation_;
    const std::vector<int> members = Members();
    if (config_.publish_members) config_.publish_members(generation_, members);
    if (config_.read_stall_lines) {
      // (Kept when the read fails: the lines of before still concern the old.)
      std::vector<std::string> lines = config_.read_stall_lines();
      if (!lines.empty()) stale_lines_ = std::move(lines);
    }
    env_[i] = config_.rank_env[i];
    env_[i].push_back("PLEXUS_ELASTIC_JOIN=" + std::to_string(generation_));
    std::string why_not;
    if (!Spawn(static_cast<int>(i), &why_not)) {
      // The job goes on without it, as when it left.
      r.left = true;
      r.joins_at = 0;
      departures_.push_back("rank " + std::to_string(config_.first_rank + int(i)) + " at " + when +
                            ": could not be started again (" + why_not + ")");
      ++generation_;
      const std::vector<int> without = Members();
      if (config_.publish_members) config_.publish_members(generation_, without);
      PrintError("could not start rank " + std::to_string(config_.first_rank + int(i)) +
                 " again (restart " + std::to_string(restart) + " of --max-restarts " +
                 std::to_string(config_.rejoins) + "): " + why_not +
                 "; the job goes on without it (--elastic): " + ListRanks(without, false) +
                 " left");
      return;
    }
    rejoined_.push_back(RankWithPid(static_cast<int>(i)) + " at " + when);
    PrintError("started " + RankWithPid(static_cast<int>(i)) + " again (restart " +
               std::to_string(restart) + " of --max-restarts " + std::to_string(config_.rejoins) +
               "); it joins at the others' next Communicator::grow()");
    return;  // one at a time
  }
}

void Launcher::EndWaitingNewcomers() {
  if (stopping_) return;
  bool waiting = false;
  for (const Rank& r : ranks_) {
    if (r.left || r.exited) continue;
    if (r.joins_at == 0) return;  // a rank of the job still runs
    waiting = true;
  }
  if (!waiting) return;
  ending_newcomers_ = true;  // (no rank is started again from now on)
  NoteJoined(nullptr);       // it may have joined since the last look
  for (Rank& r : ranks_) {
    if (r.left || r.exited || r.joins_at == 0) continue;
    r.reason = "the others finished before it joined, stopped";
    ::kill(-r.pid, SIGKILL);
  }
}

void Launcher::TakeOutStalled() {
  if (!config_.read_stall_lines) return;
  const std::vector<std::string> lines = config_.read_stall_lines();
  const int first = config_.first_rank, n = static_cast<int>(ranks_.size());
  std::vector<std::vector<int>> waiters(n);
  std::vector<std::string> where(n), blamed_in(n);  // blamed_in: "<comm> <seq>"
  std::vector<uint64_t> blamed_seq(n, 0);
  struct Said {
    std::string comm;
    uint64_t seq = 0;
  };
  std::vector<Said> said(lines.size());
  for (int r = 0; r < static_cast<int>(lines.size()); ++r) {
    std::istringstream in(lines[r]);
    std::string what;
    // Lines from before a rank was started again concern communicators gone.
    if (r < static_cast<int>(stale_lines_.size()) && lines[r] == stale_lines_[r]) continue;
    if (!(in >> said[r].comm >> said[r].seq >> what)) continue;
    // A rank that left no longer speaks for anyone.
    if (r >= first && r - first < n && ranks_[r - first].left) continue;
    for (int b; in >> b;) {
      if (b == r || b < first || b - first >= n) continue;
      waiters[b - first].push_back(r);
      if (where[b - first].empty()) {
        where[b - first] = what + " #" + std::to_string(said[r].seq) + " on " + said[r].comm;
        blamed_in[b - first] = said[r].comm;
        blamed_seq[b - first] = said[r].seq;
      }
    }
  }
  const Clock::time_point now = Clock::now();
  for (int i = 0; i < n; ++i) {
    Rank& r = ranks_[i];
    if (waiters[i].empty() || r.exited || r.left || !r.reason.empty()) continue;
    // A rank that reports the same failure itself is alive: it was only slow
    // to mark it when the others looked (shrink() reports every survivor's).
    const size_t me = static_cast<size_t>(first + i);
    if (me < said.size() && said[me].comm == blamed_in[i] && said[me].seq + 1 >= blamed_seq[i]) {
      r.blamed_at.reset();
      continue;
    }
    if (!r.blamed_at) r.blamed_at = now;
    if (now - *r.blamed_at < kTakeOutGrace) continue;
    r.reason = "stopped making progress (" + ListRanks(waiters[i], false) +
               " timed out waiting for it in " + where[i] + "), taken out";
    ::kill(-r.pid, SIGKILL);
  }
}

std::string Launcher::ElasticSummary() const {
  int left = 0;
  for (const Rank& r : ranks_) left += r.left ? 0 : 1;
  std::string text = "the job ended on " + std::to_string(left) + " of " +
                     std::to_string(ranks_.size()) + " ranks (--elastic); left: ";
  for (size_t i = 0; i < departures_.size(); ++i) text += (i ? "; " : "") + departures_[i];
  for (size_t i = 0; i < rejoined_.size(); ++i) {
    text += (i ? "; " : "; started again: ") + rejoined_[i];
  }
  return text;
}

void Launcher::PrintLocal(const std::string& line) {
  const std::string root = config_.settle_failure ? config_.settle_failure() : "";
  if (root.empty()) {
    PrintError(line);
  } else {
    const std::string prefix = NodePrefix();
    const bool ours = line.compare(0, prefix.size(), prefix) == 0;
    PrintError(root + "; on node " + std::to_string(config_.node_rank) + ", " +
               (ours ? line.substr(prefix.size()) : line));
  }
}

int Launcher::Report() {
  // " (2 got SIGKILL)" when the grace period ran out (or a second Ctrl-C came).
  const std::string killed_note =
      sigkilled_count_ > 0 ? " (" + std::to_string(sigkilled_count_) + " got SIGKILL)" : "";
  const std::string stopped =
      stopped_count_ > 0 ? Plural(stopped_count_, "rank") + killed_note : "";
  int code = kExitOk;
  if (config_.elastic && !departures_.empty() && cause_ == Cause::kNone) {
    const std::string summary = ElasticSummary();
    bool ok = false;
    for (const Rank& r : ranks_) ok = ok || !r.left;
    for (const Rank& r : ranks_) {
      if (!r.left && !(r.how == CLD_EXITED && r.value == 0)) ok = false;
    }
    PrintError(summary);
    return ok ? kExitOk : kExitRankFailed;
  }
  switch (cause_) {
    case Cause::kNone:
      return kExitOk;
    case Cause::kRankFailed: {
      const Rank& r = ranks_[failed_rank_];
      std::string line = StallSummary();
      if (!line.empty()) line += "; the first to exit: ";
      line += RankWithPid(failed_rank_) + " " + DescribeExit(r.how, r.value);
      if (stopped_count_ == 1 && ranks_.size() == 2) {
        line += "; stopped the other rank" + killed_note;
      } else if (stopped_count_ > 0 && stopped_count_ == static_cast<int>(ranks_.size()) - 1) {
        line += "; stopped the other " + stopped;
      } else if (stopped_count_ > 0) {
        line += "; stopped the " + stopped + " still running";
      }
      PrintLocal(line);
      code = kExitRankFailed;
      break;
    }
    case Cause::kInterrupted:
      PrintLocal(NodePrefix() + "received " + SignalName(interrupt_signal_) +
                 (stopped.empty() ? "" : "; stopped " + stopped));
      code = kExitRankFailed;
      break;
    case Cause::kTimeout:
      PrintLocal(NodePrefix() + "job timed out after " + FormatSeconds(config_.timeout) +
                 " (--timeout)" + (stopped.empty() ? "" : "; stopped " + stopped));
      code = kExitTimeout;
      break;
    case Cause::kCannotExecute:
      PrintLocal(NodePrefix() + "cannot execute '" + config_.argv.front() + "' (rank " +
                 std::to_string(config_.first_rank + failed_rank_) + "): " +
                 std::strerror(cause_errno_) + (stopped.empty() ? "" : "; stopped " + stopped));
      code = kExitCannotExecute;
      break;
    case Cause::kInternal:
      PrintLocal(NodePrefix() + internal_error_ + (stopped.empty() ? "" : "; stopped " + stopped));
      code = kExitRankFailed;
      break;
    case Cause::kRemote:
      PrintError(remote_line_ + (stopped.empty() ? ""
                                                 : "; stopped " + stopped + " here on node " +
                                                       std::to_string(config_.node_rank)));
      code = kExitRankFailed;
      break;
  }
  // Interrupted at any point (also while stopping for another reason): the
  // shell convention 128 + signal, so scripts can tell a Ctrl-C apart.
  if (interrupt_signal_ != 0) code = kExitSignalBase + interrupt_signal_;
  return code;
}

// "rank 1 stopped making progress (ranks 0 and 2 timed out waiting for it in
// allreduce #3 on plexus/0; it was stopped by SIGSTOP)", from the
// ranks' stall lines and the stopped states seen; "" when neither names a rank.
//
// Ranks are job-wide: across nodes (--nnodes) the lines cover every rank of
// the job, and the rank blamed may run on another node; ranks_[i] is rank
// first_rank + i.
std::string Launcher::StallSummary() const {
  if (config_.read_stall_mismatch) {
    std::string mismatch = config_.read_stall_mismatch();
    if (!mismatch.empty()) return mismatch;
  }
  std::vector<std::string> lines;
  if (config_.read_stall_lines) lines = config_.read_stall_lines();
  const int first = config_.first_rank;
  const int n = std::max(static_cast<int>(lines.size()), first + static_cast<int>(ranks_.size()));
  auto stopped_by = [&](int b) {
    return b >= first && b - first < static_cast<int>(ranks_.size()) ? ranks_[b - first].stopped_by
                                                                     : 0;
  };
  std::vector<std::vector<int>> waiters(n);  // waiters[b]: ranks that timed out waiting for b
  std::string where;                         // "allreduce #3 on plexus/0"
  {
    for (int r = 0; r < n && r < static_cast<int>(lines.size()); ++r) {
      std::istringstream in(lines[r]);
      std::string comm, seq, what;
      if (!(in >> comm >> seq >> what)) continue;
      if (where.empty()) where = what + " #" + seq + " on " + comm;
      for (int b; in >> b;) {
        if (b >= 0 && b < n && b != r) waiters[b].push_back(r);
      }
    }
  }
  std::vector<int> blamed;
  for (int b = 0; b < n; ++b) {
    if (!waiters[b].empty() || stopped_by(b) != 0) blamed.push_back(b);
  }
  if (blamed.empty()) return "";
  std::string text = ListRanks(blamed, true) + " stopped making progress (";
  std::string details;
  for (int b : blamed) {
    std::string about;
    if (!waiters[b].empty()) {
      about = ListRanks(waiters[b], false) + " timed out waiting for " +
              (blamed.size() == 1 ? std::string("it") : "rank " + std::to_string(b)) + " in " +
              where;
    }
    if (stopped_by(b) != 0) {
      if (!about.empty()) about += "; ";
      about += (blamed.size() == 1 ? std::string("it") : "rank " + std::to_string(b)) +
               " was stopped by " + SignalName(stopped_by(b));
    }
    if (!details.empty()) details += "; ";
    details += about;
  }
  return text + details + ")";
}

}  // namespace

std::string NodeLabel(int node, const std::vector<std::string>& node_hosts) {
  std::string label = "node " + std::to_string(node);
  if (node >= 0 && node < static_cast<int>(node_hosts.size()) && !node_hosts[node].empty()) {
    label += ", host " + node_hosts[node];
  }
  return label;
}

std::string NodeRankList(const std::vector<int>& ranks, int ranks_per_node,
                         const std::vector<std::string>& node_hosts) {
  auto plain = [](const std::vector<int>& list) {
    std::string text = list.size() == 1 ? "rank " : "ranks ";
    for (size_t i = 0; i < list.size(); ++i) {
      if (i > 0) text += i + 1 == list.size() ? " and " : ", ";
      text += std::to_string(list[i]);
    }
    return text;
  };
  if (ranks_per_node <= 0) return plain(ranks);
  std::vector<std::string> groups;
  for (size_t i = 0; i < ranks.size();) {
    const int node = ranks[i] / ranks_per_node;
    std::vector<int> same;
    for (; i < ranks.size() && ranks[i] / ranks_per_node == node; ++i) same.push_back(ranks[i]);
    groups.push_back(plain(same) + " (" + NodeLabel(node, node_hosts) + ")");
  }
  std::string text;
  for (size_t i = 0; i < groups.size(); ++i) {
    if (i > 0) text += i + 1 == groups.size() ? " and " : ", ";
    text += groups[i];
  }
  return text;
}

int RunJob(const LaunchConfig& config) {
  if (config.argv.empty() || config.rank_env.empty()) {
    PrintError("internal error: RunJob needs a program and at least one rank");
    return kExitUsage;
  }
  Launcher launcher(config);
  return launcher.Run();
}

}  // namespace plexus::run
