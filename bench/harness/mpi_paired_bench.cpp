// mpi_paired_bench: Plexus' MPI backend and raw MPI_Allreduce, float32 sum,
// timed in one process, block against block, so that the overhead of going
// through Plexus is measured without the launch-to-launch noise of two runs
// (on a small machine one launch of a small allreduce can differ from the
// next by far more than the difference being measured).
//
//   PLEXUS_BACKEND=mpi mpirun -np 2 ... mpi_paired_bench
//       [-b MIN] [-e MAX] [-f FACTOR] [-r ROUNDS] [-t BLOCK_MS] [-w WARMUP] [--json FILE]
//       [--backend NAME]
//
// --backend (default mpi) names the Plexus backend the run must get:
// `PLEXUS_BACKEND=ucx ... --backend ucx` times Plexus' UCX backend against
// MPI_Allreduce the same way (both libraries in one process, one idle while
// the other runs), which cancels this VM's slow phases that two launches
// cannot.
//
// The program initialises MPI itself (MPI_THREAD_MULTIPLE), as an
// application that owns MPI does; the backend then uses that MPI and leaves
// finalising it to the program. Per size (bytes of one rank's buffer, out of
// place): WARMUP untimed calls of each; then ROUNDS rounds of two blocks, one
// of Communicator::allreduce(...).wait() calls and one of MPI_Allreduce calls
// on a duplicate of MPI_COMM_WORLD, in alternating order, each block
// MPI_Barrier'ed and timed with MPI_Wtime; the per-rank block time is reduced
// with MPI_MAX. A block has as many calls as take about BLOCK_MS (from the
// warm-up's timing, the same on every rank). Reported: the median over rounds
// of each system's time per call, and the medians of the per-round ratios
// plexus / MPI and differences plexus - MPI (microseconds per call): paired
// statistics, which cancel what a round's two blocks share. One checked call per
// size (inputs whose sum is exact) counts wrong elements over all ranks.
#include <mpi.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "plexus/plexus.hpp"

namespace {

struct Options {
  uint64_t min_bytes = 8, max_bytes = 64ull << 20, factor = 2;
  int rounds = 10, warmup = 5;
  double block_ms = 20;
  std::string json;
  std::string backend = "mpi";  // the Plexus backend the run must get
};

struct Row {
  uint64_t size = 0;
  double plexus_us = 0, mpi_us = 0, ratio = 0, added_us = 0;
  uint64_t calls_per_block = 0;
  int64_t wrong = 0;
};

bool ParseSize(std::string_view s, uint64_t* out) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end == s.data()) return false;
  std::string_view rest(end, size_t(s.data() + s.size() - end));
  int shift = 0;
  if (rest == "K" || rest == "k")
    shift = 10;
  else if (rest == "M" || rest == "m")
    shift = 20;
  else if (rest == "G" || rest == "g")
    shift = 30;
  else if (!rest.empty())
    return false;
  *out = v << shift;
  return true;
}

const char kUsage[] =
    "usage: mpi_paired_bench [-b MIN] [-e MAX] [-f FACTOR] [-r ROUNDS] [-t BLOCK_MS]\n"
    "                        [-w WARMUP] [--json FILE] [--backend NAME]\n"
    "Under mpirun with PLEXUS_BACKEND=mpi: allreduce float32 sum through Plexus and\n"
    "through MPI_Allreduce in the same process, ROUNDS alternating blocks of about\n"
    "BLOCK_MS each per size (defaults: 8 B .. 64 MiB x2, 10 rounds, 20 ms, 5 warm-up).\n"
    "--backend: the Plexus backend the run must get (default mpi; e.g. ucx, with\n"
    "PLEXUS_BACKEND=ucx).\n";

bool Parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) return false;
    const std::string_view v = argv[++i];
    uint64_t n = 0;
    if (a == "-b" || a == "-e" || a == "-f") {
      if (!ParseSize(v, &n)) return false;
      (a == "-b" ? o->min_bytes : a == "-e" ? o->max_bytes : o->factor) = n;
    } else if (a == "-r" || a == "-w") {
      if (!ParseSize(v, &n) || n > 100000) return false;
      (a == "-r" ? o->rounds : o->warmup) = int(n);
    } else if (a == "-t") {
      if (!ParseSize(v, &n) || n == 0) return false;
      o->block_ms = double(n);
    } else if (a == "--json") {
      o->json = std::string(v);
    } else if (a == "--backend") {
      o->backend = std::string(v);
    } else {
      return false;
    }
  }
  return o->min_bytes >= 4 && o->min_bytes <= o->max_bytes && o->factor >= 2 && o->rounds >= 1;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Seconds per call of `calls` calls of f, the slowest rank's.
template <typename F>
double TimeBlock(MPI_Comm comm, uint64_t calls, F&& f) {
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  for (uint64_t i = 0; i < calls; ++i) f();
  double t = (MPI_Wtime() - t0) / double(calls), slowest = 0;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
  return slowest;
}

void WriteJson(const Options& o, int ranks, const std::string& version,
               const std::vector<Row>& rows) {
  std::ofstream f(o.json);
  f << "{\n  \"benchmark\": \"mpi_paired_bench\",\n  \"collective\": \"allreduce\",\n"
    << "  \"type\": \"float32\",\n  \"redop\": \"sum\",\n  \"ranks\": " << ranks
    << ",\n  \"backend\": \"mpi\",\n  \"backend_version\": \"" << version << "\",\n"
    << "  \"timing\": \"paired\",\n  \"rounds\": " << o.rounds
    << ",\n  \"block_ms\": " << o.block_ms << ",\n  \"rows\": [\n";
  char buf[512];
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double factor = ranks > 1 ? 2.0 * (ranks - 1) / ranks : 0.0;
    const double algbw = double(r.size) / (r.plexus_us * 1e3);
    const double raw_algbw = double(r.size) / (r.mpi_us * 1e3);
    std::snprintf(buf, sizeof buf,
                  "    {\"size\": %llu, \"count\": %llu, \"calls_per_block\": %llu,"
                  " \"out_of_place\": {\"time_us\": %.4f, \"algbw_gbs\": %.6g, \"busbw_gbs\":"
                  " %.6g, \"wrong\": %lld}, \"mpi_allreduce\": {\"time_us\": %.4f, \"busbw_gbs\":"
                  " %.6g}, \"ratio\": %.5f, \"added_us\": %.4f}%s\n",
                  (unsigned long long)r.size, (unsigned long long)(r.size / 4),
                  (unsigned long long)r.calls_per_block, r.plexus_us, algbw, algbw * factor,
                  (long long)r.wrong, r.mpi_us, raw_algbw * factor, r.ratio, r.added_us,
                  i + 1 < rows.size() ? "," : "");
    f << buf;
  }
  f << "  ]\n}\n";
}

int Run(const Options& o) {
  auto comm = plexus::Communicator::from_env();
  MPI_Comm raw;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(raw, &rank);
  MPI_Comm_size(raw, &ranks);
  if (uint32_t(rank) != comm.rank() || uint32_t(ranks) != comm.size()) {
    std::fprintf(stderr, "mpi_paired_bench: Plexus says rank %u of %u, MPI rank %d of %d\n",
                 comm.rank(), comm.size(), rank, ranks);
    return 1;
  }
  const std::string backend = comm.backend_name();
  if (backend != o.backend) {
    std::fprintf(stderr, "mpi_paired_bench: needs PLEXUS_BACKEND=%s (got backend %s)\n",
                 o.backend.c_str(), backend.c_str());
    return 2;
  }
  if (rank == 0) {
    std::printf("# mpi_paired_bench: allreduce float32 sum, %d rank(s), backend %s %s\n", ranks,
                backend.c_str(), comm.backend_version().c_str());
    std::printf(
        "# %d rounds per size, each a block of Plexus calls and a block of "
        "MPI_Allreduce calls (order alternating), ~%.0f ms per block\n",
        o.rounds, o.block_ms);
    std::printf("#%11s %12s %8s %12s %12s %8s %10s %7s\n", "size", "count", "calls", "plexus(us)",
                "mpi(us)", "ratio", "added(us)", "#wrong");
    std::fflush(stdout);
  }
  const uint64_t max_count = o.max_bytes / 4;
  std::vector<float> send(max_count), recv(max_count);
  std::vector<Row> rows;
  for (uint64_t size = o.min_bytes; size <= o.max_bytes; size *= o.factor) {
    const uint64_t count = size / 4;
    float* s = send.data();
    float* d = recv.data();
    for (uint64_t i = 0; i < count; ++i) s[i] = float(rank + 1) + float(i % 7);
    auto via_plexus = [&] {
      comm.allreduce(s, d, count, plexus::DType::Float32, plexus::ReduceOp::Sum).wait();
    };
    auto via_mpi = [&] { MPI_Allreduce(s, d, int(count), MPI_FLOAT, MPI_SUM, raw); };
    const uint64_t warm = uint64_t(std::max(o.warmup, 1));
    TimeBlock(raw, warm, via_plexus);
    const double t_warm = TimeBlock(raw, warm, via_mpi);
    const uint64_t calls =
        std::clamp<uint64_t>(uint64_t(o.block_ms * 1e-3 / std::max(t_warm, 1e-9)), 3, 1000000);
    std::vector<double> tp, tm, ratios, added;
    for (int k = 0; k < o.rounds; ++k) {
      double a, b;
      if (k % 2 == 0) {
        a = TimeBlock(raw, calls, via_plexus);
        b = TimeBlock(raw, calls, via_mpi);
      } else {
        b = TimeBlock(raw, calls, via_mpi);
        a = TimeBlock(raw, calls, via_plexus);
      }
      tp.push_back(a * 1e6);
      tm.push_back(b * 1e6);
      ratios.push_back(a / b);
      added.push_back((a - b) * 1e6);
    }
    // The check: every element's sum over ranks is an exact small integer.
    std::fill(d, d + count, -1.0f);
    via_plexus();
    long long wrong = 0, total = 0;
    for (uint64_t i = 0; i < count; ++i) {
      const float want = float(ranks * (ranks + 1) / 2) + float(ranks) * float(i % 7);
      wrong += d[i] != want;
    }
    MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, raw);
    Row r;
    r.size = size;
    r.plexus_us = Median(tp);
    r.mpi_us = Median(tm);
    r.ratio = Median(ratios);
    r.added_us = Median(added);
    r.calls_per_block = calls;
    r.wrong = total;
    rows.push_back(r);
    if (rank == 0) {
      std::printf("%12llu %12llu %8llu %12.2f %12.2f %8.3f %10.2f %7lld\n",
                  (unsigned long long)size, (unsigned long long)count, (unsigned long long)calls,
                  r.plexus_us, r.mpi_us, r.ratio, r.added_us, total);
      std::fflush(stdout);
    }
    if (size > o.max_bytes / o.factor) break;
  }
  if (rank == 0 && !o.json.empty()) WriteJson(o, ranks, comm.backend_version(), rows);
  MPI_Comm_free(&raw);
  for (const Row& r : rows) {
    if (r.wrong) return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!Parse(argc, argv, &o)) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  // A singleton MPI_Init can hang or start daemons: insist on a launcher.
  if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMIX_RANK") &&
      !std::getenv("PMI_RANK")) {
    std::fputs(
        "mpi_paired_bench: run it under mpirun (none of OMPI_COMM_WORLD_SIZE, PMIX_RANK, "
        "PMI_RANK is set)\n",
        stderr);
    return 2;
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 1;
  try {
    rc = Run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_paired_bench: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
