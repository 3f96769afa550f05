// plexus-demo: one allreduce over every backend that loads, checked and timed.
//
//   plexus-run -n 4 plexus-demo            # every backend found
//   PLEXUS_BACKEND=tcp plexus-run -n 4 plexus-demo
//
// Rank r contributes r + 1 in every element, so each element of the sum must
// be size (size + 1) / 2 exactly. Rank 0 prints one line per backend.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "plexus/launch_env.hpp"
#include "plexus/plexus.hpp"
#include "backend_calls.hpp"
#include "plugin_loader.hpp"

namespace {

constexpr const char* kUsage = R"(Usage: plexus-demo [--count N] [--iters N]

Runs a float32 sum-allreduce of N elements (default 1048576) on every backend
that loads (or only $PLEXUS_BACKEND), checks the result exactly and prints the
average time per allreduce and the bus bandwidth. Launch it with plexus-run,
mpirun, srun or torchrun --no-python; alone it runs as a single rank.
)";

struct Candidate {
  std::string name;     // for the report
  std::string spec;     // what CommunicatorOptions::backend gets
  std::string skipped;  // why it is not tried, or ""
};

// Backends the demo tries: $PLEXUS_BACKEND, else every plugin file found.
// Files nobody named are first run in a child process: one that crashes in
// its entry function or init is reported and skipped, not fatal.
std::vector<Candidate> Backends() {
  if (const char* b = std::getenv("PLEXUS_BACKEND"); b && *b) return {{b, b, ""}};
  std::vector<Candidate> found;
  for (const std::string& path : plexus::DiscoverPluginFiles()) {
    std::string file = std::filesystem::path(path).filename().string();
    Candidate c{file.substr(10, file.size() - 13), path, ""};  // libplexus-<name>.so
    if (plexus::Status st = plexus::ProbeInChild(path, std::chrono::seconds(20)); !st.ok()) {
      c.skipped = st.message();
    }
    found.push_back(c);
  }
  return found;
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
  const char* requested = std::getenv("PLEXUS_BACKEND");
  const bool explicit_choice = requested && *requested;
  const auto backends = Backends();
  if (backends.empty()) {
    std::fprintf(stderr, "plexus-demo: no backend plugins found (set PLEXUS_PLUGIN_PATH)\n");
    return 1;
  }
  int failures = 0, ran = 0;
  for (const Candidate& c : backends) {
    const std::string& b = c.name;
    if (!c.skipped.empty()) {
      if (LaunchRank() == 0) std::printf("%-6s skipped: %s\n", b.c_str(), c.skipped.c_str());
      continue;
    }
    try {
      if (!RunOne(c.spec, count, iters)) ++failures;
      ++ran;
    } catch (const plexus::Error& e) {
      // A backend found on disk but unusable here (MPI without mpirun, NCCL
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
