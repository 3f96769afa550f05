// trace_check: collectives for the flight recorder's tests, run under
// plexus-run with PLEXUS_TRACE_DIR set (tests/trace/trace_test.sh):
//
//   trace_check slow RANK MS [ITERATIONS]  RANK sleeps MS ms before each
//                                          allreduce (default 40 of them)
//   trace_check hang RANK AT               RANK stops posting at iteration
//                                          AT (sleeps 60 s); the others time
//                                          out (PLEXUS_TIMEOUT)
//   trace_check mismatch                   at iteration 5 rank 1 posts a
//                                          broadcast where the others
//                                          allreduce (PLEXUS_DEBUG=detail
//                                          makes every rank fail there)
//   trace_check dropped                    every other allreduce's Work is
//                                          dropped without a wait (each
//                                          into a buffer of its own); the
//                                          dumps must still show them
//                                          finished
//
// Every allreduce sums rank + 1 and is checked exactly. Exit 0 when every
// iteration ran and was right; 1 on an error (which hang and mismatch
// expect on some ranks).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "plexus/plexus.hpp"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "slow" && mode != "hang" && mode != "mismatch" && mode != "dropped") {
    std::fprintf(stderr,
                 "usage: trace_check slow RANK MS [ITERATIONS] | hang RANK AT | mismatch | "
                 "dropped\n");
    return 2;
  }
  const int who = argc > 2 ? std::atoi(argv[2]) : 1;
  const int arg = argc > 3 ? std::atoi(argv[3]) : 0;
  const int iterations = mode == "slow" && argc > 4 ? std::atoi(argv[4]) : 40;
  try {
    // Before comm: a dropped allreduce may write its buffer until comm is gone.
    std::vector<std::vector<int64_t>> dropped;
    auto comm = plexus::Communicator::from_env();
    const int me = int(comm.rank());
    std::vector<int64_t> buf(4096);
    dropped.reserve(size_t(iterations));
    for (int i = 0; i < iterations; ++i) {
      if (mode == "dropped" && i % 2 == 1) {
        dropped.emplace_back(buf.size(), int64_t(me + 1));
        (void)comm.allreduce(dropped.back().data(), dropped.back().data(), buf.size(),
                             plexus::DType::Int64, plexus::ReduceOp::Sum);
        continue;
      }
      if (mode == "slow" && me == who) std::this_thread::sleep_for(std::chrono::milliseconds(arg));
      if (mode == "hang" && me == who && i == arg) {
        std::printf("rank %d: stops posting at iteration %d\n", me, i);
        std::fflush(stdout);
        std::this_thread::sleep_for(std::chrono::seconds(60));
        return 1;
      }
      std::fill(buf.begin(), buf.end(), int64_t(me + 1));
      if (mode == "mismatch" && i == 5 && me == 1) {
        comm.broadcast(buf.data(), buf.size(), plexus::DType::Int64, 0).wait();
      } else {
        comm.allreduce(buf.data(), buf.data(), buf.size(), plexus::DType::Int64,
                       plexus::ReduceOp::Sum)
            .wait();
      }
      const int64_t want = int64_t(comm.size()) * (comm.size() + 1) / 2;
      if (buf[0] != want || buf.back() != want) {
        std::printf("rank %d: iteration %d: %lld, not %lld\n", me, i,
                    static_cast<long long>(buf[0]), static_cast<long long>(want));
        return 1;
      }
    }
    std::printf("rank %d: %d iterations, every result right\n", me, iterations);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trace_check: %s\n", e.what());
    return 1;
  }
}
