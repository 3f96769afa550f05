// One rank of the network-fault tests (netns_job_test.sh linkdown|blip):
// float32 sum-allreduces in a loop, each checked exactly, until told to stop.
// Adapted from tests/security/fault_rank.cpp; the fault comes from outside
// (a link taken down), not from a rank.
//
//   net_loop_rank OUT_DIR [ELEMENTS]
//
// Iteration i: rank r contributes r + 1 + (i % 7) in every element of a
// vector of ELEMENTS (default 1 Mi) floats; the sum is exact in any order.
// After each, a 1-element max-allreduce of a flag that rank 0 sets once
// OUT_DIR/stop exists: every rank ends after the same iteration. Rank 0 writes
// the number of iterations done so far to OUT_DIR/progress after each.
//
// A rank that finishes, every result right, writes "<iterations>" to
// OUT_DIR/rank<R>.ok and exits 0; a wrong result writes OUT_DIR/rank<R>.bad
// and exits 1; a plexus::Error writes "<unix time> <what()>" to
// OUT_DIR/rank<R>.err (the wall-clock time, comparable across namespaces,
// which share the clock) and exits 3. SIGTERM is ignored, so that a
// plexus-run stopping its ranks (it does once it hears a node is gone) does
// not end a rank before it reports; plexus-run's --grace bounds that.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "plexus/plexus.hpp"

namespace {

void WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  if (FILE* f = std::fopen(tmp.c_str(), "w")) {
    std::fputs(text.c_str(), f);
    std::fputc('\n', f);
    std::fclose(f);
    std::rename(tmp.c_str(), path.c_str());
  }
}

bool Exists(const std::string& path) {
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    std::fclose(f);
    return true;
  }
  return false;
}

std::string Now() {
  const double t =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", t);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: net_loop_rank OUT_DIR [ELEMENTS]\n");
    return 2;
  }
  signal(SIGTERM, SIG_IGN);
  const std::string dir = argv[1];
  const size_t elements = argc == 3 ? std::strtoull(argv[2], nullptr, 10) : size_t(1) << 20;
  const char* rank_env = std::getenv("PLEXUS_RANK");
  const std::string tag = rank_env ? rank_env : "unknown";
  try {
    plexus::Communicator comm = plexus::Communicator::from_env();
    const uint32_t rank = comm.rank();
    const uint32_t n = comm.size();
    std::vector<float> v(elements);
    std::vector<uint32_t> stop(1);
    uint64_t iter = 0;
    for (;; ++iter) {
      const float mine = float(rank + 1 + iter % 7);
      std::fill(v.begin(), v.end(), mine);
      comm.allreduce(std::span(v)).wait();
      const float expected = float(n) * float(n + 1) / 2 + float(n) * float(iter % 7);
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] != expected) {
          const std::string what = "iteration " + std::to_string(iter) + ": element " +
                                   std::to_string(i) + " is " + std::to_string(v[i]) +
                                   ", expected " + std::to_string(expected);
          std::fprintf(stderr, "rank %u: WRONG RESULT %s\n", rank, what.c_str());
          WriteFile(dir + "/rank" + tag + ".bad", what);
          return 1;
        }
      }
      stop[0] = rank == 0 && Exists(dir + "/stop") ? 1 : 0;
      comm.allreduce(std::span(stop), plexus::ReduceOp::Max).wait();
      if (rank == 0) WriteFile(dir + "/progress", std::to_string(iter + 1));
      if (stop[0] != 0) break;
    }
    std::fprintf(stderr, "rank %u: %llu allreduces of %zu floats, every result right\n", rank,
                 (unsigned long long)(iter + 1), elements);
    WriteFile(dir + "/rank" + tag + ".ok", std::to_string(iter + 1));
    return 0;
  } catch (const plexus::Error& e) {
    const std::string when = Now();
    std::fprintf(stderr, "rank %s: plexus::Error at %s: %s\n", tag.c_str(), when.c_str(), e.what());
    WriteFile(dir + "/rank" + tag + ".err", when + " " + e.what());
    return 3;
  } catch (const std::exception& e) {
    const std::string when = Now();
    std::fprintf(stderr, "rank %s: unexpected exception: %s\n", tag.c_str(), e.what());
    WriteFile(dir + "/rank" + tag + ".err", when + " unexpected: " + e.what());
    return 4;
  }
}
