// SignalWatcher: turns asynchronous signals into something poll() can wait on
// (the self-pipe trick).
//
// The launcher's main loop sleeps in poll() on the ranks' output pipes; a
// signal (SIGCHLD when a rank exits, SIGINT/SIGTERM/SIGHUP from the user) must
// wake it. The handler only bumps a per-signal counter and writes one byte to
// a non-blocking pipe: both are async-signal-safe, and it works whichever
// thread the kernel picks to run the handler (the store server runs its own
// thread, so signalfd and a blocked mask would be fragile).
//
// Handlers are process-wide, so at most one SignalWatcher may exist at a time.
// Its methods are called from the launcher thread only.
#pragma once

#include <string>
#include <vector>

namespace plexus::run {

class SignalWatcher {
 public:
  SignalWatcher() = default;
  ~SignalWatcher();  // restores the previous dispositions and closes the pipe

  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Installs handlers for signals. Returns false and fills *error on failure
  // (nothing is left installed then).
  bool Install(const std::vector<int>& signals, std::string* error);

  // Readable whenever a watched signal arrived since the last Drain().
  int fd() const { return read_fd_; }

  // Empties the wake-up pipe. Call when fd() polled readable.
  void Drain();

  // How many times sig arrived since the last call; resets the count.
  int Take(int sig);

 private:
  void Uninstall();

  int read_fd_ = -1;
  std::vector<int> installed_;
};

}  // namespace plexus::run
