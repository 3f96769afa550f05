#include "signal_watcher.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace plexus::run {
namespace {

// Shared with the handler; lock-free atomics are async-signal-safe.
constexpr int kMaxSignal = 65;
std::atomic<int> g_counts[kMaxSignal];
std::atomic<int> g_write_fd{-1};
// Handlers between reading g_write_fd and finishing their write(): Uninstall()
// waits for none before closing, so a handler running on another thread never
// writes into a closed descriptor, or into whatever file reuses its number.
std::atomic<int> g_handlers_writing{0};
struct sigaction g_previous[kMaxSignal];
std::atomic<bool> g_in_use{false};

extern "C" void OnSignal(int sig) {
  int saved_errno = errno;  // write() may clobber it under the interrupted code
  if (sig > 0 && sig < kMaxSignal) g_counts[sig].fetch_add(1, std::memory_order_relaxed);
  g_handlers_writing.fetch_add(1);  // seq_cst: ordered before the load below
  int fd = g_write_fd.load();
  if (fd >= 0) {
    char byte = static_cast<char>(sig);
    // A full pipe is fine: it is already readable, and the count is kept above.
    (void)!::write(fd, &byte, 1);
  }
  g_handlers_writing.fetch_sub(1);
  errno = saved_errno;
}

}  // namespace

bool SignalWatcher::Install(const std::vector<int>& signals, std::string* error) {
  if (g_in_use.exchange(true)) {
    *error = "only one SignalWatcher may be installed at a time";
    return false;
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    g_in_use = false;
    return false;
  }
  read_fd_ = fds[0];
  g_write_fd = fds[1];
  for (int sig : signals) {
    if (sig <= 0 || sig >= kMaxSignal) {
      *error = "cannot watch signal " + std::to_string(sig);
      Uninstall();
      return false;
    }
    g_counts[sig] = 0;
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    // SA_RESTART keeps blocking writes to our stdout from failing with EINTR;
    // poll() is never restarted, so the main loop still wakes up.
    sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
    if (::sigaction(sig, &sa, &g_previous[sig]) != 0) {
      *error = "sigaction(" + std::to_string(sig) + "): " + std::strerror(errno);
      Uninstall();
      return false;
    }
    installed_.push_back(sig);
  }
  return true;
}

void SignalWatcher::Uninstall() {
  for (int sig : installed_) ::sigaction(sig, &g_previous[sig], nullptr);
  installed_.clear();
  if (read_fd_ >= 0) {
    // A handler still running on another thread has either seen -1 or is
    // counted in g_handlers_writing; wait out the counted ones (one write each).
    int wfd = g_write_fd.exchange(-1);
    while (g_handlers_writing.load() != 0) sched_yield();
    if (wfd >= 0) ::close(wfd);
    ::close(read_fd_);
    read_fd_ = -1;
    g_in_use = false;
  }
}

SignalWatcher::~SignalWatcher() {
  Uninstall();
}

void SignalWatcher::Drain() {
  char buf[256];
  while (::read(read_fd_, buf, sizeof(buf)) > 0) {
  }
}

int SignalWatcher::Take(int sig) {
  if (sig <= 0 || sig >= kMaxSignal) return 0;
  return g_counts[sig].exchange(0);
}

}  // namespace plexus::run
