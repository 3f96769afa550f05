// plexus-run's SignalWatcher torn down while another thread takes a watched
// signal: the handler must never write into the wake-up pipe's descriptor after
// Uninstall() closed it (a file opened next would get its number and a stray
// byte). Under ThreadSanitizer (scripts/tsan.sh) the write and the close race
// without the handlers' count; here a stray byte in the next pipe fails too.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "signal_watcher.hpp"

namespace {

extern "C" void IgnoreSignal(int) {}

}  // namespace

TEST_CASE("SignalWatcher: uninstalling while another thread takes the signal") {
  // The disposition the watcher restores: a handler, so a late SIGUSR1 is harmless.
  struct sigaction quiet {};
  quiet.sa_handler = IgnoreSignal;
  sigemptyset(&quiet.sa_mask);
  REQUIRE(::sigaction(SIGUSR1, &quiet, nullptr) == 0);

  // Only the raising thread takes the signal (raise() targets the caller).
  sigset_t usr1;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &usr1, nullptr) == 0);
  std::atomic<bool> stop{false};
  std::thread raiser([&] {
    pthread_sigmask(SIG_UNBLOCK, &usr1, nullptr);
    while (!stop.load()) ::raise(SIGUSR1);
  });

  int stray = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int rounds = 0;
  while (std::chrono::steady_clock::now() < until) {
    {
      plexus::run::SignalWatcher watcher;
      std::string error;
      REQUIRE_MESSAGE(watcher.Install({SIGUSR1}, &error), error);
    }
    // Likely reuses the numbers the watcher's pipe just freed.
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0);
    char byte;
    std::this_thread::yield();
    if (::read(fds[0], &byte, 1) == 1) ++stray;
    ::close(fds[0]);
    ::close(fds[1]);
    ++rounds;
  }
  stop = true;
  raiser.join();
  MESSAGE(rounds << " install/uninstall rounds under a stream of SIGUSR1");
  CHECK_MESSAGE(stray == 0, stray << " stray byte(s) written after the watcher closed its pipe");
}
