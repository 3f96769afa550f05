// plexus-demo: one allreduce on each of Plexus' backends that runs here,
// checked and timed. It uses the installed C++ API only, as a program of
// yours would: the same binary on every backend, no rebuild.
//
//   plexus-run -n 4 plexus-demo            # tcp, mpi, ucx, nccl: each that runs here
//   PLEXUS_BACKEND=tcp plexus-run -n 4 plexus-demo
//   PLEXUS_BACKEND=/path/to/libplexus-mine.so plexus-run -n 4 plexus-demo
//
// Rank r contributes r + 1 in every element, so each element of the sum must
// be size (size + 1) / 2 exactly. Rank 0 prints one line per backend.
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plexus/launch_env.hpp"
#include "plexus/plexus.hpp"
#include "plexus/settings/environment.hpp"

namespace {

constexpr const char* kUsage = R"(Usage: plexus-demo [--count N] [--iters N]

Runs a float32 sum-allreduce of N elements (default 1048576) on each of
Plexus' backends (tcp, mpi, ucx, nccl) that runs here, or only on
$PLEXUS_BACKEND (a name or the path of a plugin, a vendor's for instance),
checks the result exactly and prints the average time per allreduce and the
bus bandwidth. A backend that cannot run here is listed as skipped, with the
reason. Launch it with plexus-run, mpirun, srun or torchrun --no-python; alone
it runs as a single rank.
)";

// Plexus' own backends, in the order the demo reports them. Any other plugin
// runs when PLEXUS_BACKEND names it.
constexpr std::array<const char*, 4> kPlexusBackends = {"tcp", "mpi", "ucx", "nccl"};

// Backends the demo tries: $PLEXUS_BACKEND, else each of Plexus' own. Why one
// cannot run here (not built, its library missing, MPI without mpirun, NCCL
// without a GPU) is what Communicator::from_env throws.
std::vector<std::string> Backends() {
  if (const char* b = plexus::settings::Raw(plexus::settings::Id::kBackend); b && *b) return {b};
  return {kPlexusBackends.begin(), kPlexusBackends.end()};
}

// This process's rank per the launcher, for printing once when no
// communicator could be created.
uint32_t LaunchRank() {
  plexus::LaunchInfo info;
  return plexus::DiscoverLaunch(plexus::ProcessEnv(), &info).ok() ? info.rank : 0;
}

// Runs the demo on one backend; returns false when the result was wrong.
bool RunOne(const std::string& backend, uint64_t count, int iters) {
  plexus::CommunicatorOptions options;
  options.backend = backend;
  auto comm = plexus::Communicator::from_env(options);
  const uint32_t n = comm.size();
  std::vector<float> data(count);
  auto fill = [&] { std::fill(data.begin(), data.end(), float(comm.rank() + 1)); };

  fill();
  comm.allreduce(std::span(data)).wait();  // warm-up, also checked below
  const float expected = float(n) * float(n + 1) / 2;
  uint64_t wrong = 0;
  for (float v : data) wrong += (v != expected);

  double total_s = 0;
  for (int i = 0; i < iters; ++i) {
    fill();
    comm.barrier().wait();
    const auto t0 = std::chrono::steady_clock::now();
    comm.allreduce(std::span(data)).wait();
    total_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (float v : data) wrong += (v != expected);
  }
  const double avg_us = total_s / iters * 1e6;
  const double bytes = double(count) * sizeof(float);
  const double busbw = n > 1 ? bytes / (avg_us * 1e-6) * 2.0 * (n - 1) / n / 1e9 : 0.0;
  if (comm.rank() == 0) {
    std::printf(
        "%-6s %s allreduce %llu x float32 over %u rank(s): element = %g (expected %g), "
        "%llu wrong, %.1f us avg over %d, busbw %.2f GB/s\n",
        comm.backend_name().c_str(), wrong ? "FAIL" : "ok  ",
        static_cast<unsigned long long>(count), n, double(data[0]), double(expected),
        static_cast<unsigned long long>(wrong), avg_us, iters, busbw);
    std::fflush(stdout);
  }
  return wrong == 0;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t count = 1 << 20;
  int iters = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if ((a == "--count" || a == "--iters") && i + 1 < argc) {
      const long long v = std::atoll(argv[++i]);
      if (v < 1) {
        std::fprintf(stderr, "plexus-demo: %s needs a positive number\n", a.c_str());
        return 2;
      }
      if (a == "--count") {
        count = uint64_t(v);
      } else {
        iters = int(v);
      }
      continue;
    }
    std::fprintf(stderr, "plexus-demo: unknown argument '%s'\n%s", a.c_str(), kUsage);
    return 2;
  }
  const char* requested = plexus::settings::Raw(plexus::settings::Id::kBackend);
  const bool explicit_choice = requested && *requested;
  int failures = 0, ran = 0;
  for (const std::string& b : Backends()) {
    try {
      if (!RunOne(b, count, iters)) ++failures;
      ++ran;
    } catch (const plexus::Error& e) {
      // A backend that cannot run here (not built, MPI without mpirun, NCCL
      // without a GPU) is skipped; one the user asked for by name is an error.
      if (explicit_choice) {
        std::fprintf(stderr, "%s\n", e.what());
        ++failures;
      } else if (LaunchRank() == 0) {
        std::printf("%-6s skipped: %s\n", b.c_str(), e.what());
        std::fflush(stdout);
      }
    }
  }
  if (ran == 0 && failures == 0) {
    std::fprintf(stderr, "plexus-demo: no backend could run here\n");
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
