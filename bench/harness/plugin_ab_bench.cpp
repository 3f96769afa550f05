// plugin_ab_bench: two builds of one backend plugin, timed in one process,
// block against block, so that a change to a backend (the kit, a new check)
// is measured without the launch-to-launch noise of two runs.
//
//   plexus-run -n 2 plugin_ab_bench A.so B.so [-t allreduce|broadcast]
//       [-s SIZE]... [-r ROUNDS] [-m BLOCK_MS] [-w WARMUP]
//
// Each rank opens one communicator on plugin A and one on plugin B (two
// libraries, loaded side by side: a plugin exports its entry function alone).
// Per size (bytes of one rank's buffer, float32, sum, out of place; root 0
// for broadcast): WARMUP calls on each; then ROUNDS rounds of two blocks, one
// on each communicator, in alternating order, each block preceded by a
// barrier on A and timed per rank; the block time is the max over ranks (an
// allreduce on A). A block has as many blocking calls as take about BLOCK_MS.
// Printed per size: the median time per call of A and of B, and the median of
// the per-round ratios B / A (paired: what a round's two blocks share
// cancels). One checked call per size and plugin counts wrong elements.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <string>
#include <vector>

#include "plexus/plexus.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

uint64_t ParseSize(const char* text) {
  char* end = nullptr;
  uint64_t v = std::strtoull(text, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  if (*end == 'M' || *end == 'm') v <<= 20;
  return v;
}

struct Setup {
  std::string a, b, collective = "allreduce";
  std::vector<uint64_t> sizes;
  int rounds = 20, warmup = 20;
  double block_ms = 20;
};

// One blocking call of the collective on comm.
void Call(plexus::Communicator& comm, const std::string& what, std::vector<float>& send,
          std::vector<float>& recv) {
  if (what == "broadcast") {
    comm.broadcast(recv.data(), recv.size(), plexus::DType::Float32, 0).wait();
  } else {
    comm.allreduce(send.data(), recv.data(), send.size(), plexus::DType::Float32,
                   plexus::ReduceOp::Sum)
        .wait();
  }
}

// Seconds of `calls` calls on comm, the max over ranks (measured on sync).
double Block(plexus::Communicator& comm, plexus::Communicator& sync, const std::string& what,
             std::vector<float>& send, std::vector<float>& recv, uint64_t calls) {
  sync.barrier().wait();
  const auto start = Clock::now();
  for (uint64_t i = 0; i < calls; ++i) Call(comm, what, send, recv);
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  sync.allreduce(&seconds, &seconds, 1, plexus::DType::Float64, plexus::ReduceOp::Max).wait();
  return seconds;
}

// Wrong elements of one checked call (allreduce of rank + 1: the sum of
// 1..size is exact; broadcast of root 0's 7).
int64_t Checked(plexus::Communicator& comm, const std::string& what, size_t count) {
  std::vector<float> send(count, float(comm.rank() + 1)), recv(count, -1.0f);
  if (what == "broadcast" && comm.rank() == 0) std::fill(recv.begin(), recv.end(), 7.0f);
  Call(comm, what, send, recv);
  const float want = what == "broadcast" ? 7.0f : float(comm.size() * (comm.size() + 1) / 2);
  int64_t wrong = std::count_if(recv.begin(), recv.end(), [&](float x) { return x != want; });
  comm.allreduce(&wrong, &wrong, 1, plexus::DType::Int64, plexus::ReduceOp::Sum).wait();
  return wrong;
}

}  // namespace

int main(int argc, char** argv) {
  Setup s;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "plugin_ab_bench: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::printf(
          "usage: plexus-run -n N plugin_ab_bench A.so B.so [-t allreduce|broadcast] [-s SIZE]...\n"
          "       [-r ROUNDS] [-m BLOCK_MS] [-w WARMUP]\n"
          "Times two builds of one backend plugin in one process, block against block;\n"
          "prints the median time per call of each and the median per-round ratio B/A.\n");
      return 0;
    } else if (arg == "-t") {
      s.collective = next();
    } else if (arg == "-s") {
      s.sizes.push_back(ParseSize(next()));
    } else if (arg == "-r") {
      s.rounds = std::atoi(next());
    } else if (arg == "-m") {
      s.block_ms = std::atof(next());
    } else if (arg == "-w") {
      s.warmup = std::atoi(next());
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2 || (s.collective != "allreduce" && s.collective != "broadcast")) {
    std::fprintf(stderr, "usage: plugin_ab_bench A.so B.so [-t allreduce|broadcast] ... (--help)\n");
    return 2;
  }
  s.a = positional[0];
  s.b = positional[1];
  if (s.sizes.empty()) s.sizes = {8, 1 << 20};

  plexus::CommunicatorOptions oa, ob;
  oa.backend = s.a;
  ob.backend = s.b;
  auto a = plexus::Communicator::from_env(oa);
  auto b = plexus::Communicator::from_env(ob);
  // One CPU per rank, as bench/compare pins its ranks.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(a.rank() % std::max(1u, std::thread::hardware_concurrency()), &cpus);
  (void)sched_setaffinity(0, sizeof cpus, &cpus);

  if (a.rank() == 0) {
    std::printf("# %s, float32, %u ranks; A = %s, B = %s\n", s.collective.c_str(), a.size(),
                s.a.c_str(), s.b.c_str());
    std::printf("# %10s %8s %12s %12s %10s %12s %12s\n", "bytes", "calls", "A us", "B us",
                "B/A", "B/A lo", "B/A hi");
  }
  for (uint64_t bytes : s.sizes) {
    const size_t count = std::max<size_t>(1, bytes / sizeof(float));
    std::vector<float> send(count, 1.0f), recv(count, 0.0f);
    for (int i = 0; i < s.warmup; ++i) {
      Call(a, s.collective, send, recv);
      Call(b, s.collective, send, recv);
    }
    // Calls per block, from a timed warm-up block on A (the same on every rank).
    double probe = Block(a, a, s.collective, send, recv, 10) / 10;
    uint64_t calls = std::max<uint64_t>(1, uint64_t(s.block_ms / 1000 / std::max(probe, 1e-9)));
    std::vector<double> ta, tb, ratio;
    for (int round = 0; round < s.rounds; ++round) {
      double x, y;
      if (round % 2 == 0) {
        x = Block(a, a, s.collective, send, recv, calls);
        y = Block(b, a, s.collective, send, recv, calls);
      } else {
        y = Block(b, a, s.collective, send, recv, calls);
        x = Block(a, a, s.collective, send, recv, calls);
      }
      ta.push_back(x / calls * 1e6);
      tb.push_back(y / calls * 1e6);
      ratio.push_back(y / x);
    }
    const int64_t wrong = Checked(a, s.collective, count) + Checked(b, s.collective, count);
    std::vector<double> sorted = ratio;
    std::sort(sorted.begin(), sorted.end());
    if (a.rank() == 0) {
      std::printf("  %10llu %8llu %12.2f %12.2f %10.4f %12.4f %12.4f%s\n", (unsigned long long)bytes,
                  (unsigned long long)calls, Median(ta), Median(tb), Median(ratio),
                  sorted[sorted.size() / 4], sorted[sorted.size() * 3 / 4],
                  wrong ? "  WRONG RESULTS" : "");
    }
    if (wrong) return 1;
  }
  return 0;
}
