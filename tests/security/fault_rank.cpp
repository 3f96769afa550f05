// One rank of the failure and authentication tests. Started by plexus-run or by
// hand (PLEXUS_RANK, PLEXUS_WORLD_SIZE, PLEXUS_MASTER_ADDR/PORT, PLEXUS_TOKEN):
//
//   fault_rank OUT_DIR MODE
//
//   allreduce       one float32 sum-allreduce of 1024 elements, checked.
//   kill            float32 sum-allreduces of 4 MiB in a loop; rank 2 SIGKILLs
//                   itself in the middle of iteration 3 (after posting it), the
//                   others must get an error.
//   late            rank 1 sleeps 2.5 x PLEXUS_TIMEOUT before its allreduce, so
//                   rank 0's times out (and rank 1's after it).
//   mismatch-root   rank 0 reduces to root 0, every other rank to root 1: with
//                   nothing on the wire to disagree about, they time out.
//   mismatch-count  rank 0 allreduces 1000 elements, every other rank 1001.
//   mismatch-kind   rank 0 allreduces, every other rank broadcasts (same count).
//   freeze          like kill, but rank 1 stops itself with SIGSTOP in the
//                   middle of iteration 3: a rank that hangs instead of dying.
//   loop            checked 1024-element allreduces for FAULT_RANK_SECONDS
//                   (default 8) as rank 0 counts them, then exit 0: a job that
//                   runs while a test does something to it.
//
// A rank that catches a plexus::Error writes "<seconds> <what()>" to
// OUT_DIR/rank<R>.err and exits 3; a rank that finishes writes OUT_DIR/rank<R>.ok
// and exits 0. SIGTERM is ignored, so that plexus-run (which stops the other
// ranks once one died) cannot end a survivor before it reports its error; its
// --grace period bounds that, and every collective is bounded by PLEXUS_TIMEOUT.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "plexus/plexus.hpp"

namespace {

using Clock = std::chrono::steady_clock;

void WriteFile(const std::string& path, const std::string& text) {
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    std::fputs(text.c_str(), f);
    std::fputc('\n', f);
    std::fclose(f);
  }
}

// 4 MiB allreduces in a loop; `victim` raises sig in the middle of the 4th
// (after posting it). Returns 1 if the loop ever ends: the others must fail.
int LoopUntilSignal(plexus::Communicator& comm, uint32_t victim, int sig, const char* what) {
  const uint32_t rank = comm.rank();
  std::vector<float> v(size_t(1) << 20, 1.0f);
  for (int iter = 0; iter < 1000; ++iter) {
    plexus::Work w = comm.allreduce(std::span(v));
    if (rank == victim && iter == 3) {
      std::fprintf(stderr, "rank %u: raising %s in the middle of allreduce %d\n", rank,
                   sig == SIGKILL ? "SIGKILL" : "SIGSTOP", iter);
      std::fflush(stderr);
      raise(sig);
    }
    w.wait();
    std::fill(v.begin(), v.end(), 1.0f);
  }
  std::fprintf(stderr, "rank %u: 1000 allreduces completed although rank %u %s\n", rank, victim,
               what);
  return 1;
}

int Run(plexus::Communicator& comm, const std::string& mode) {
  const uint32_t rank = comm.rank();
  if (mode == "allreduce") {
    std::vector<float> v(1024, float(rank + 1));
    comm.allreduce(std::span(v)).wait();
    const float expected = float(comm.size()) * float(comm.size() + 1) / 2;
    for (float x : v) {
      if (x != expected) {
        std::fprintf(stderr, "rank %u: wrong result %g, expected %g\n", rank, double(x),
                     double(expected));
        return 1;
      }
    }
    return 0;
  }
  if (mode == "loop") {
    const char* s = std::getenv("FAULT_RANK_SECONDS");
    const double seconds = s ? std::atof(s) : 8.0;
    const auto start = Clock::now();
    // The last element is rank 0's "stop" vote, so that every rank stops
    // after the same allreduce.
    std::vector<float> v(1025);
    for (long iter = 0;; ++iter) {
      std::fill(v.begin(), v.end() - 1, float(rank + 1));
      v.back() = rank == 0 && std::chrono::duration<double>(Clock::now() - start).count() > seconds;
      comm.allreduce(std::span(v)).wait();
      const float expected = float(comm.size()) * float(comm.size() + 1) / 2;
      for (size_t i = 0; i + 1 < v.size(); ++i) {
        if (v[i] != expected) {
          std::fprintf(stderr, "rank %u: wrong result %g in allreduce %ld, expected %g\n", rank,
                       double(v[i]), iter, double(expected));
          return 1;
        }
      }
      if (v.back() > 0) return 0;
    }
  }
  if (mode == "kill") return LoopUntilSignal(comm, 2, SIGKILL, "died");
  if (mode == "freeze") return LoopUntilSignal(comm, 1, SIGSTOP, "froze");
  if (mode == "late") {
    if (rank == 1) {
      std::this_thread::sleep_for(comm.timeout() * 5 / 2);
    }
    std::vector<float> v(1024, 1.0f);
    comm.allreduce(std::span(v)).wait();
    return 0;
  }
  if (mode == "mismatch-root") {
    std::vector<float> v(1000, 1.0f);
    comm.reduce(v.data(), v.data(), v.size(), plexus::DType::Float32, plexus::ReduceOp::Sum,
                rank == 0 ? 0 : 1)
        .wait();
    return 0;
  }
  if (mode == "mismatch-count") {
    std::vector<float> v(rank == 0 ? 1000 : 1001, 1.0f);
    comm.allreduce(std::span(v)).wait();
    return 0;
  }
  if (mode == "mismatch-kind") {
    std::vector<float> v(1000, 1.0f);
    if (rank == 0) {
      comm.allreduce(std::span(v)).wait();
    } else {
      comm.broadcast(std::span(v), 0).wait();
    }
    return 0;
  }
  std::fprintf(stderr, "fault_rank: unknown mode '%s'\n", mode.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr,
                 "usage: fault_rank OUT_DIR "
                 "allreduce|loop|kill|freeze|late|mismatch-root|mismatch-count|mismatch-kind\n");
    return 2;
  }
  signal(SIGTERM, SIG_IGN);
  const std::string dir = argv[1];
  const std::string mode = argv[2];
  const char* rank_env = std::getenv("PLEXUS_RANK");
  if (rank_env == nullptr) rank_env = std::getenv("RANK");  // started as torchrun would
  const std::string tag = rank_env ? rank_env : "unknown";
  const auto start = Clock::now();
  auto seconds = [&] {
    return std::to_string(std::chrono::duration<double>(Clock::now() - start).count());
  };
  try {
    plexus::Communicator comm = plexus::Communicator::from_env();
    const int rc = Run(comm, mode);
    if (rc == 0) WriteFile(dir + "/rank" + tag + ".ok", seconds());
    return rc;
  } catch (const plexus::Error& e) {
    std::fprintf(stderr, "rank %s: plexus::Error: %s\n", tag.c_str(), e.what());
    WriteFile(dir + "/rank" + tag + ".err", seconds() + " " + e.what());
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: unexpected exception: %s\n", tag.c_str(), e.what());
    WriteFile(dir + "/rank" + tag + ".err", seconds() + " unexpected: " + e.what());
    return 4;
  }
}
