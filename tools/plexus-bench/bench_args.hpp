// Command line of plexus-bench: nccl-tests' options plus the collective, the
// root, the timing mode and a JSON output file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plexus/backend.h"
#include "plexus/types.hpp"

namespace plexus::bench {

// What -t selects. All but SendRecv are ABI collectives; SendRecv pairs a
// send to rank + 1 with a receive from rank - 1 (nccl-tests' sendrecv).
enum class Collective {
  Allreduce,
  Broadcast,
  Reduce,
  Allgather,
  ReduceScatter,
  Alltoall,
  SendRecv,
  Barrier,
  // ABI 1.2
  Gather,
  Scatter,
  Allgatherv,          // equal blocks, through the v-collective
  Alltoallv,           // equal blocks, through the v-collective
  AllreduceCoalesced,  // the buffer as kCoalescedBuffers buffers in one post
  // ABI 1.4
  ReduceScatterv,  // equal blocks, through the v-collective
};

// allreduce_coalesced splits each size into this many buffers.
constexpr uint32_t kCoalescedBuffers = 8;

struct BenchArgs {
  uint64_t min_bytes = 8;
  uint64_t max_bytes = 64ull << 20;
  uint64_t step_factor = 2;
  int iters = 20;
  int warmup_iters = 5;
  bool check = true;
  bool blocking = false;   // wait for each operation before posting the next
  bool mem_alloc = false;  // buffers from Communicator::mem_alloc (shared buffers)
  Collective collective = Collective::Allreduce;
  uint32_t root = 0;
  std::vector<ReduceOp> ops{ReduceOp::Sum};
  std::vector<DType> dtypes{DType::Float32};
  std::string json_path;  // empty: no JSON
};

// Result of parsing: either arguments to run with, or an exit code (0 after
// --help, 2 after a bad command line) with the text already printed.
struct ParseResult {
  std::optional<BenchArgs> args;
  int exit_code = 0;
};

ParseResult ParseArgs(int argc, char** argv);

const char* CollectiveName(Collective c);
// The ABI collectives a backend must support to run c.
std::vector<plexus_collective_t> RequiredCollectives(Collective c);
// Whether c reduces (takes -o), has a root (takes -r), moves data (takes -d).
bool IsReduction(Collective c);
bool HasRoot(Collective c);
bool MovesData(Collective c);

}  // namespace plexus::bench
