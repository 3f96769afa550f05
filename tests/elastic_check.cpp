// elastic_check: a loop of allreduces that survives a rank leaving, under
// plexus-run --elastic:
//
//   plexus-run -n 3 --elastic elastic_check kill|stop|kill2|none [ITERATIONS]
//
// At iteration 20 the last rank sends itself SIGKILL (gone: its connections
// break) or SIGSTOP (frozen: the others time out, PLEXUS_TIMEOUT, and the
// launcher takes it out). The others' allreduce fails; they call
// Communicator::shrink(), which waits for the launcher's word on who is left,
// and redo the iteration on the smaller communicator. kill2: as kill, and
// rank 1 dies too, as soon as it has seen the first failure: a second rank
// leaving while the first's survivors make their communicator (rank 0 then
// goes on alone). Every result is checked
// exactly: job rank j contributes (j + 1) * (i + 1) to every element, so the
// sum says which ranks took part. Each survivor prints
//   rank R: recovered in X ms: 3 -> 2 ranks (job ranks 0, 1), iteration 20
//   rank R of 2: ITERATIONS iterations, 1 recovery, every result right
// and exits 0; a wrong result or an error shrink() cannot fix exits 1.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plexus/plexus.hpp"

int main(int argc, char** argv) {
  const std::string how = argc > 1 ? argv[1] : "none";
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 40;
  if (how != "kill" && how != "stop" && how != "kill2" && how != "none") {
    std::fprintf(stderr, "usage: elastic_check kill|stop|kill2|none [ITERATIONS]\n");
    return 2;
  }
  try {
    auto comm = plexus::Communicator::from_env();
    const uint32_t me = comm.job_ranks()[comm.rank()];
    const uint32_t victim = comm.size() - 1;
    constexpr uint64_t kCount = 4096;
    std::vector<int64_t> buf(kCount);
    int recoveries = 0;
    for (int i = 0; i < iterations; ++i) {
      if (i == 20 && me == victim && how != "none") {
        std::printf("rank %u: %s at iteration %d\n", me, how == "stop" ? "SIGSTOP" : "SIGKILL", i);
        std::fflush(stdout);
        ::raise(how == "stop" ? SIGSTOP : SIGKILL);
      }
      for (;;) {
        std::fill(buf.begin(), buf.end(), int64_t(me + 1) * (i + 1));
        try {
          comm.allreduce(buf.data(), buf.data(), kCount, plexus::DType::Int64,
                         plexus::ReduceOp::Sum)
              .wait();
          break;
        } catch (const plexus::Error& e) {
          std::printf("rank %u: iteration %d failed: %s\n", me, i, e.what());
          if (how == "kill2" && me == 1 && recoveries == 0) {
            std::printf("rank %u: SIGKILL while the others recover\n", me);
            std::fflush(stdout);
            ::raise(SIGKILL);
          }
          const auto t0 = std::chrono::steady_clock::now();
          const uint32_t before = comm.size();
          comm = comm.shrink();
          const double ms =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
          std::string ranks;
          for (uint32_t r : comm.job_ranks())
            ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
          std::printf(
              "rank %u: recovered in %.0f ms: %u -> %u ranks (job ranks %s), iteration %d\n", me,
              ms, before, comm.size(), ranks.c_str(), i);
          std::fflush(stdout);
          ++recoveries;
        }
      }
      int64_t want = 0;
      for (uint32_t r : comm.job_ranks()) want += int64_t(r + 1) * (i + 1);
      for (uint64_t k = 0; k < kCount; ++k) {
        if (buf[k] != want) {
          std::printf("rank %u: iteration %d: element %llu is %lld, not %lld\n", me, i,
                      static_cast<unsigned long long>(k), static_cast<long long>(buf[k]),
                      static_cast<long long>(want));
          return 1;
        }
      }
    }
    std::printf("rank %u of %u: %d iterations, %d recover%s, every result right\n", me, comm.size(),
                iterations, recoveries, recoveries == 1 ? "y" : "ies");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_check: %s\n", e.what());
    return 1;
  }
}
