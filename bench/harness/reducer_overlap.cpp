// reducer_overlap: how much of the reducer's communication a backward pass
// hides. A synthetic backward — a timed compute loop before each mark_ready,
// last parameter first — over float32 gradients; rank 0 prints one row per
// (gradient MB, compute/comm ratio):
//
//   comm_us     an iteration with no compute (copies in and out + all-reduces)
//   compute_us  the compute of one backward alone, measured (ratio x comm_us asked)
//   total_us    backward with compute, median of --iters
//   hidden      (compute + comm - total) / comm: the part of communication
//               that ran while backward computed (1.0 = all of it)
//
// --compute spin burns the CPU (a CPU backward: compute and communication
// share this machine's cores); --compute sleep leaves the CPU free (a GPU
// backward, where the CPU only drives communication).
//
//   PLEXUS_BACKEND=tcp plexus-run -n 2 reducer_overlap [--mb 25,100] [--ratio 1,2]
//       [--params 50] [--iters 10] [--compute spin|sleep] [--bucket-cap-mb 25] [--bucket-view]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "plexus/plexus.hpp"
#include "plexus/reducer/reducer.hpp"

using namespace plexus;
using Clock = std::chrono::steady_clock;

namespace {

volatile double g_sink = 0;

void Compute(double us, bool spin) {
  if (us <= 0) return;
  if (!spin) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(us));
    return;
  }
  const auto end = Clock::now() + std::chrono::duration<double, std::micro>(us);
  double x = 1.0;
  while (Clock::now() < end) {
    for (int i = 0; i < 200; ++i) x = x * 1.0000001 + 1e-9;
  }
  g_sink = x;
}

std::vector<double> ParseList(const std::string& s) {
  std::vector<double> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) v.push_back(std::stod(item));
  return v;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Usage() {
  std::printf(
      "usage: reducer_overlap [--mb LIST] [--ratio LIST] [--params N] [--iters N]\n"
      "                       [--compute spin|sleep] [--bucket-cap-mb MB] [--bucket-view]\n"
      "  --mb LIST          gradient megabytes per row (default 25,100)\n"
      "  --ratio LIST       compute time as a multiple of communication time (default 1,2)\n"
      "  --params N         gradients per model, equal sizes (default 50)\n"
      "  --iters N          timed iterations per row, median reported (default 10)\n"
      "  --compute MODE     spin (burn the CPU, default) or sleep (CPU free, as a GPU backward)\n"
      "  --bucket-cap-mb MB reducer bucket cap (default 25, with a 1 MiB first bucket)\n"
      "  --bucket-view      gradients are computed into their buckets (DDP's\n"
      "                     gradient_as_bucket_view): no copies in or out\n"
      "Run under a launcher: PLEXUS_BACKEND=tcp plexus-run -n 2 reducer_overlap\n");
}

}  // namespace

int main(int argc, char** argv) try {
  std::vector<double> mbs = {25, 100}, ratios = {1, 2};
  size_t nparams = 50;
  int iters = 10;
  bool spin = true;
  double cap_mb = 0;
  bool bucket_view = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") return Usage(), 0;
    if (a == "--mb")
      mbs = ParseList(value());
    else if (a == "--ratio")
      ratios = ParseList(value());
    else if (a == "--params")
      nparams = std::stoul(value());
    else if (a == "--iters")
      iters = std::stoi(value());
    else if (a == "--compute")
      spin = value() != "sleep";
    else if (a == "--bucket-cap-mb")
      cap_mb = std::stod(value());
    else if (a == "--bucket-view")
      bucket_view = true;
    else {
      Usage();
      return 2;
    }
  }
  auto comm = Communicator::from_env();
  if (comm.rank() == 0) {
    std::printf("# reducer overlap on %s, %u ranks, %zu float32 gradients, compute=%s%s\n",
                comm.backend_name().c_str(), comm.size(), nparams, spin ? "spin" : "sleep",
                bucket_view ? ", bucket views" : "");
    std::printf("# %8s %7s %6s %11s %11s %11s %8s %14s\n", "MB", "buckets", "ratio", "comm_us",
                "compute_us", "total_us", "hidden", "not_hidden_us");
  }
  for (double mb : mbs) {
    const uint64_t count = uint64_t(mb * 1024 * 1024 / 4 / nparams);
    std::vector<reducer::Parameter> params;
    for (size_t i = 0; i < nparams; ++i) {
      params.push_back({"p" + std::to_string(i), {int64_t(count)}, count, DType::Float32, -1});
    }
    reducer::ReducerOptions o;
    if (cap_mb > 0) o.bucket_cap_bytes = o.first_bucket_bytes = uint64_t(cap_mb * 1024 * 1024);
    reducer::Reducer r(comm, params, o);
    std::vector<std::vector<float>> grads(nparams, std::vector<float>(count, 1.0f));
    // One iteration; per_param_us of compute before each gradient. Returns us.
    // With reduce = false, the compute alone (sleep_for overshoots, so the
    // compute time is measured, not assumed).
    auto iteration = [&](double per_param_us, bool reduce = true) {
      comm.barrier().wait();
      const auto t0 = Clock::now();
      if (reduce) r.prepare_for_backward();
      for (size_t i = nparams; i-- > 0;) {
        Compute(per_param_us, spin);
        if (reduce) r.mark_ready(i, bucket_view ? r.bucket_view(i) : grads[i].data());
      }
      if (reduce) r.finalize();
      double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      comm.allreduce(&us, &us, 1, DType::Float64, ReduceOp::Max).wait();  // the slowest rank
      return us;
    };
    for (int w = 0; w < 3; ++w) iteration(0);  // warm-up, includes the bucket rebuild
    std::vector<double> comm_runs;
    for (int k = 0; k < iters; ++k) comm_runs.push_back(iteration(0));
    const double comm_us = Median(comm_runs);
    for (double ratio : ratios) {
      std::vector<double> computes;
      for (int k = 0; k < iters; ++k)
        computes.push_back(iteration(ratio * comm_us / nparams, false));
      const double compute_us = Median(computes);
      std::vector<double> totals;
      double not_hidden = 0;
      for (int k = 0; k < iters; ++k) {
        totals.push_back(iteration(ratio * comm_us / nparams));
        not_hidden += r.stats().last.comm_not_hidden_time / iters;
      }
      const double total = Median(totals);
      const double hidden = std::clamp((compute_us + comm_us - total) / comm_us, 0.0, 1.0);
      if (comm.rank() == 0) {
        std::printf("  %8.1f %7zu %6.2f %11.0f %11.0f %11.0f %7.0f%% %14.0f\n", mb,
                    r.stats().buckets.size(), ratio, comm_us, compute_us, total, 100 * hidden,
                    not_hidden);
        std::fflush(stdout);
      }
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "reducer_overlap: %s\n", e.what());
  return 1;
}
