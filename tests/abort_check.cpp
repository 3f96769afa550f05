// Abort from another thread: rank 0 posts collectives that cannot complete
// (rank 1 does not join them); a second thread aborts the communicator; every
// pending operation must then fail with PLEXUS_ERR_ABORTED, promptly, and
// later posts must fail too. Run under `plexus-run -n 2`.
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "plexus/plexus.hpp"

int main() {
  using Clock = std::chrono::steady_clock;
  auto comm = plexus::Communicator::from_env();
  if (comm.size() != 2) {
    std::fprintf(stderr, "abort_check needs exactly 2 ranks\n");
    return 2;
  }
  int failures = 0;
  if (comm.rank() == 0) {
    std::vector<float> a(1 << 20, 1.0f), b(1000, 2.0f);
    std::vector<plexus::Work> works;
    works.push_back(comm.allreduce(std::span(a)));
    works.push_back(comm.broadcast(std::span(b), 1));
    works.push_back(comm.barrier());
    const auto t0 = Clock::now();
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.abort();
    });
    for (size_t i = 0; i < works.size(); ++i) {
      int32_t status = 0;
      try {
        works[i].wait(std::chrono::seconds(20));
      } catch (const plexus::Error& e) {
        status = e.status();
        std::printf("pending op %zu: %s\n", i, e.what());
      }
      if (status != PLEXUS_ERR_ABORTED) {
        std::printf("FAILED: pending op %zu ended with status %d, not ABORTED\n", i, status);
        ++failures;
      }
    }
    aborter.join();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("all pending operations ended %.2f s after they were posted (abort at 0.3 s)\n", s);
    if (s > 5) {
      std::printf("FAILED: abort took too long\n");
      ++failures;
    }
    int32_t later = 0;
    try {
      comm.barrier().wait(std::chrono::seconds(5));
    } catch (const plexus::Error& e) {
      later = e.status();
    }
    if (later != PLEXUS_ERR_ABORTED) {
      std::printf("FAILED: a post after abort ended with status %d\n", later);
      ++failures;
    }
    std::printf("abort: %d passed, %d failed\n", 4 - failures, failures);
  } else {
    // Stay connected, join nothing, until rank 0 is done.
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  return failures == 0 ? 0 : 1;
}
