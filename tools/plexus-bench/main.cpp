// plexus-bench: nccl-tests-style measurement of one collective on any backend.
//
//   PLEXUS_BACKEND=tcp plexus-run -n 2 plexus-bench -b 8 -e 64M -f 2 -t allreduce
//
// Every rank runs the same sequence of collectives; rank 0 prints. See
// --help (bench_args.cpp) for the options, the size convention and the
// timing method; measurement.hpp for how one row is measured.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "measurement.hpp"
#include "plexus/plexus.hpp"
#include "report.hpp"

namespace {

using namespace plexus;
using namespace plexus::bench;

constexpr int kExitWrong = 1;
constexpr int kExitRefused = 2;

struct Combo {
  DType type;
  ReduceOp op;
};

// Why this backend and job cannot run the benchmark at all, or "".
std::string Refusal(const Communicator& comm, const BenchArgs& args) {
  const plexus_capabilities& caps = comm.capabilities();
  const std::string backend =
      "backend '" + comm.backend_name() + "' (" + comm.backend_version() + ")";
  if (MovesData(args.collective) && !(caps.memory_types & (1u << PLEXUS_MEMORY_HOST))) {
    return backend + " does not support host memory, which is all plexus-bench uses";
  }
  for (plexus_collective_t c : RequiredCollectives(args.collective)) {
    if (!comm.supports(c)) {
      std::string what = CollectiveName(args.collective);
      if (RequiredCollectives(args.collective).size() > 1) {
        what += " (it has no " + std::string(c == PLEXUS_COLL_SEND ? "send" : "recv") + ")";
      }
      return backend + " does not support " + what;
    }
  }
  if (HasRoot(args.collective) && args.root >= comm.size()) {
    return "--root " + std::to_string(args.root) + " is not a rank of this job (" +
           std::to_string(comm.size()) + " rank(s))";
  }
  if (args.collective == Collective::SendRecv && comm.size() < 2) {
    return "sendrecv needs at least 2 ranks";
  }
  return "";
}

// The (dtype, op) pairs to run, in nccl-tests' order (types outer, ops inner);
// pairs the backend cannot do are left out and described in *skipped.
std::vector<Combo> Combos(const Communicator& comm, const BenchArgs& args,
                          std::vector<std::string>* skipped) {
  const plexus_capabilities& caps = comm.capabilities();
  std::vector<Combo> out;
  if (args.collective == Collective::Barrier) return {{DType::Float32, ReduceOp::Sum}};
  for (DType t : args.dtypes) {
    const uint32_t tbit = 1u << static_cast<uint32_t>(t);
    if (!IsReduction(args.collective)) {
      if (caps.dtypes & tbit) {
        out.push_back({t, ReduceOp::Sum});
      } else {
        skipped->push_back(std::string(ToString(t)));
      }
      continue;
    }
    for (ReduceOp op : args.ops) {
      if (caps.reduce_dtypes[static_cast<uint32_t>(op)] & tbit) {
        out.push_back({t, op});
      } else {
        skipped->push_back(std::string(ToString(t)) + " " + ToString(op));
      }
    }
  }
  return out;
}

std::vector<uint64_t> Sizes(const BenchArgs& args) {
  if (args.collective == Collective::Barrier) return {0};
  std::vector<uint64_t> sizes;
  for (uint64_t s = args.min_bytes;;) {
    sizes.push_back(s);
    if (args.step_factor == 1 || s == 0 || s > args.max_bytes / args.step_factor) break;
    s *= args.step_factor;
  }
  return sizes;
}

int Run(const BenchArgs& args) {
  auto comm = Communicator::from_env();
  const bool lead = comm.rank() == 0;
  if (const std::string why = Refusal(comm, args); !why.empty()) {
    if (lead) std::fprintf(stderr, "plexus-bench: %s\n", why.c_str());
    return kExitRefused;
  }
  std::vector<std::string> skipped;
  const std::vector<Combo> combos = Combos(comm, args, &skipped);
  if (combos.empty()) {
    if (lead) {
      std::fprintf(stderr,
                   "plexus-bench: backend '%s' does not support %s on any requested "
                   "dtype%s\n",
                   comm.backend_name().c_str(), CollectiveName(args.collective),
                   IsReduction(args.collective) ? " and op" : "");
    }
    return kExitRefused;
  }

  RankTally tally(comm);
  Runner runner(comm, args, tally);
  Report report(
      args, RunInfo{comm.backend_name(), comm.backend_version(), comm.backend_path(), comm.size()});
  // Every rank learns whether rank 0 can write the JSON file, so all stop together.
  const std::string json_error = lead ? report.CheckJsonWritable() : "";
  if (tally.Broadcast(json_error.empty() ? 0 : 1) != 0) {
    if (lead) std::fprintf(stderr, "plexus-bench: %s\n", json_error.c_str());
    return kExitRefused;
  }
  if (lead) {
    report.PrintHeader();
    if (!tally.trusted() && comm.size() > 1) {
      report.PrintNote(
          "no rendezvous store (plain mpirun?): #wrong is gathered through the "
          "backend under test; set MASTER_ADDR/MASTER_PORT or use plexus-run for "
          "an independent check");
    }
    for (const std::string& s : skipped) {
      report.PrintNote("skipped " + s + ": not supported by backend " + comm.backend_name());
    }
  }
  uint64_t wrong = 0;
  for (const Combo& c : combos) {
    for (uint64_t size : Sizes(args)) {
      const Row row = runner.Measure(c.type, c.op, size);
      for (const Cell* cell : {&row.out_of_place, &row.in_place}) {
        if (cell->wrong > 0) wrong += uint64_t(cell->wrong);
      }
      if (lead) report.AddRow(row);
    }
  }
  if (lead) report.Finish();
  runner.Sync();  // nobody leaves while another rank still reports
  return wrong == 0 ? 0 : kExitWrong;
}

}  // namespace

int main(int argc, char** argv) {
  const ParseResult parsed = ParseArgs(argc, argv);
  if (!parsed.args) return parsed.exit_code;
  try {
    return Run(*parsed.args);
  } catch (const plexus::Error& e) {
    std::fprintf(stderr, "plexus-bench: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plexus-bench: %s\n", e.what());
  }
  return 1;
}
