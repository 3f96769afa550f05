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
//
// rejoin and rejoin-die (plexus-run --elastic --max-restarts 1): as kill,
// with an iteration every 50 ms and Communicator::grow() every 5th: the
// launcher starts rank 2 again, it joins at the next grow() and takes the
// iteration to go on from by broadcast from a rank that was there (the
// state of this loop). rejoin ends on 3 ranks; in rejoin-die the newcomer
// dies as soon as it has joined, before the state comes, and the others go
// on without it (shrink() again) on 2.
//
// rejoin TRACE_DIR: before its SIGKILL, rank 2 has its flight recorder dump
// (SIGUSR1; plexus-run runs it with PLEXUS_TRACE_DIR=TRACE_DIR) and waits
// for the file, so that the test sees that the dump survives the restart.
// rejoin-gone: rank 2 deletes its own program before its SIGKILL (run a
// copy), so that plexus-run cannot start it again: the others go on on 2.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "plexus/plexus.hpp"

namespace {

std::string JobRanks(const plexus::Communicator& comm) {
  std::string ranks;
  for (uint32_t r : comm.job_ranks()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  return ranks;
}

// After grow(): every rank takes the iteration from the lowest rank that
// was there before (a newcomer's joined() is true).
void ShareIteration(plexus::Communicator& comm, int* iteration) {
  int64_t root = comm.joined() ? comm.size() : comm.rank();
  comm.allreduce(&root, &root, 1, plexus::DType::Int64, plexus::ReduceOp::Min).wait();
  int64_t at = *iteration;
  comm.broadcast(&at, 1, plexus::DType::Int64, uint32_t(root)).wait();
  *iteration = int(at);
}

// Has the flight recorder write its dump (on SIGUSR1), and waits for it.
void LeaveDump(const std::string& path) {
  ::raise(SIGUSR1);
  struct stat st {};
  for (int i = 0; i < 500 && ::stat(path.c_str(), &st) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::printf("rank 2: %s %s\n", path.c_str(),
              ::stat(path.c_str(), &st) == 0 ? "written" : "not written within 5 s");
}

}  // namespace

int main(int argc, char** argv) {
  const std::string how = argc > 1 ? argv[1] : "none";
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 40;
  const std::string trace_dir = argc > 3 ? argv[3] : "";
  if (how != "kill" && how != "stop" && how != "kill2" && how != "none" && how != "rejoin" &&
      how != "rejoin-die" && how != "rejoin-gone") {
    std::fprintf(stderr,
                 "usage: elastic_check kill|stop|kill2|rejoin|rejoin-die|rejoin-gone|none "
                 "[ITERATIONS [TRACE_DIR]]\n");
    return 2;
  }
  const bool rejoin = how.rfind("rejoin", 0) == 0;
  try {
    auto comm = plexus::Communicator::from_env();
    const uint32_t me = comm.job_ranks()[comm.rank()];
    const bool newcomer = comm.joined();
    constexpr uint64_t kCount = 4096;
    std::vector<int64_t> buf(kCount);
    int recoveries = 0, grows = 0, first = 0;
    if (newcomer) {
      if (how == "rejoin-die") {
        std::printf("rank %u: joined; SIGKILL before the state comes\n", me);
        std::fflush(stdout);
        ::raise(SIGKILL);
      }
      ShareIteration(comm, &first);
      std::printf("rank %u: joined at iteration %d: %u ranks (job ranks %s)\n", me, first,
                  comm.size(), JobRanks(comm).c_str());
      std::fflush(stdout);
    }
    for (int i = first; i < iterations; ++i) {
      if (i == 20 && me == 2 && !newcomer && how != "none") {
        if (!trace_dir.empty()) LeaveDump(trace_dir + "/rank-2.json");
        if (how == "rejoin-gone") {
          char self[4096];
          const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
          if (n > 0) self[n] = '\0';
          std::printf("rank %u: deleting %s\n", me, n > 0 ? self : "?");
          if (n <= 0 || ::unlink(self) != 0) return 1;
        }
        std::printf("rank %u: %s at iteration %d\n", me, how == "stop" ? "SIGSTOP" : "SIGKILL", i);
        std::fflush(stdout);
        ::raise(how == "stop" ? SIGSTOP : SIGKILL);
      }
      if (rejoin) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      bool grow_now = rejoin && i % 5 == 0 && i != first;
      const auto posted = std::chrono::steady_clock::now();  // (a rank freezes about now)
      for (;;) {
        try {
          if (std::exchange(grow_now, false)) {
            if (auto grown = comm.grow()) {
              const uint32_t before = comm.size();
              comm = std::move(*grown);
              ++grows;
              int at = i;
              ShareIteration(comm, &at);
              std::printf("rank %u: grew at iteration %d: %u -> %u ranks (job ranks %s)\n", me, i,
                          before, comm.size(), JobRanks(comm).c_str());
              std::fflush(stdout);
            }
          }
          std::fill(buf.begin(), buf.end(), int64_t(me + 1) * (i + 1));
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
          const double since_posted =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - posted)
                  .count();
          std::printf(
              "rank %u: recovered in %.0f ms: %u -> %u ranks (job ranks %s), iteration %d; %.0f ms "
              "after its allreduce was posted\n",
              me, ms, before, comm.size(), JobRanks(comm).c_str(), i, since_posted);
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
    std::printf("rank %u of %u: %d iterations, %d recover%s, %d grow%s, every result right\n", me,
                comm.size(), iterations - first, recoveries, recoveries == 1 ? "y" : "ies", grows,
                grows == 1 ? "" : "s");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_check: %s\n", e.what());
    return 1;
  }
}
