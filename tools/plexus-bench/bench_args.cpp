#include "bench_args.hpp"

#include <cctype>
#include <cstdio>
#include <limits>
#include <string_view>

namespace plexus::bench {
namespace {

constexpr const char* kUsage = R"(Usage: plexus-bench [options]

Measures one collective of the Plexus backend chosen by PLEXUS_BACKEND, like
nccl-tests: one row per size with the time, the algorithm bandwidth and the
bus bandwidth, out of place and in place, and the number of wrong elements of
a separate checked iteration. Launch it on every rank, e.g.

  PLEXUS_BACKEND=tcp plexus-run -n 2 plexus-bench -b 8 -e 64M -f 2

Options (sizes take a K, M or G suffix, powers of 1024):
  -b, --minbytes SIZE       smallest size (default 8)
  -e, --maxbytes SIZE       largest size (default 64M)
  -f, --stepfactor N        multiply the size by N from row to row (default 2)
  -n, --iters N             timed iterations per size (default 20)
  -w, --warmup_iters N      untimed iterations per size before them (default 5;
                            the first size's go on for at least 100 ms: a
                            job's first milliseconds are not its speed)
  -c, --check 0|1           run a checked iteration per size and count wrong
                            elements (default 1)
  -o, --op OP               sum, prod, min, max, avg or all (default sum);
                            reductions only
  -d, --datatype TYPE       int8, uint8, int16, uint16, int32, uint32, int64,
                            uint64, float16, bfloat16, float32, float64 or all
                            (default float32; nccl-tests' names char, int,
                            half, float, double are accepted too)
  -t, --collective NAME     allreduce, broadcast, reduce, allgather,
                            reduce_scatter, alltoall, sendrecv, barrier,
                            gather, scatter, allgatherv, alltoallv,
                            allreduce_coalesced or reduce_scatterv (default
                            allreduce)
  -r, --root N              root rank of broadcast, reduce, gather and
                            scatter (default 0)
      --blocking            wait for each timed operation before posting the
                            next (the default posts the whole batch at once)
      --mem-alloc           take the buffers from Communicator::mem_alloc: the
                            backend's shared buffers (ABI 1.3) where it has
                            them, on which an in-place allreduce on one host
                            runs without copies (the in-place column)
      --json FILE           also write every row to FILE as JSON (rank 0)
  -h, --help                print this help and exit

Size: bytes of one rank's buffer, as in nccl-tests. allreduce, broadcast,
reduce, sendrecv: the buffer of `count` elements. allgather: the whole output
(size / ranks bytes sent by each rank). reduce_scatter: the whole input (each
rank receives size / ranks bytes). alltoall: the whole send buffer (size /
ranks bytes to each peer). gather: the root's whole output; scatter: the
root's whole input (size / ranks bytes to each rank). allgatherv,
alltoallv and reduce_scatterv: as allgather, alltoall and reduce_scatter,
with every rank's count given in the per-rank arrays of the v-collective
(equal blocks, so the two can be compared). allreduce_coalesced: as allreduce, the buffer cut into 8 buffers
posted as one operation. Sizes are rounded down to whole elements (whole
blocks of ranks elements for the per-rank collectives); count is the size in
elements. barrier runs once, with size 0.

Timing: per size, -w warm-up operations (each waited for), then a barrier,
then -n operations posted back to back as one batch (nccl-tests' method),
then a wait for all of them; a rank's time is the batch time / -n, and the
time printed is the maximum over ranks (an allreduce with max). With
--blocking each operation is waited for before the next is posted (as a
blocking MPI_Allreduce loop is). algbw = size / time; busbw = algbw * factor,
factor = 2(n-1)/n for allreduce and allreduce_coalesced, (n-1)/n for
allgather, reduce_scatter, alltoall, gather, scatter and their v forms, 1 for
broadcast, reduce and sendrecv (n = ranks).

Check (-c 1): one more operation per size and placement on fresh inputs whose
reduction is exact in any order (small integers; products of +-1 and 2), each
rank counts its wrong output elements, and #wrong is their sum. N/A: not
checked, or no such placement. In place follows the ABI: allreduce
send == recv; reduce send == recv; allgather send == recv + rank * count;
reduce_scatter recv == send + rank * count; gather (on the root) send ==
recv + root * count; scatter (on the root) recv == send + root * count;
allgatherv send == recv + displs[rank]; reduce_scatterv recv == send +
sdispls[rank]; allreduce_coalesced each buffer's
send == recv; broadcast has one buffer and is reported in the in-place
columns; alltoall, alltoallv and sendrecv have no in-place form.

Output: rank 0 prints a header, one row per size as it is measured, and a
footer with the total of wrong elements and the average bus bandwidth.
Exit status: 0 all rows right; 1 wrong elements or a failure; 2 bad command
line, or the backend does not support the collective.
)";

// A decimal number, with a K, M or G suffix (powers of 1024) if allow_suffix.
bool ParseNumber(std::string_view text, uint64_t* out, bool allow_suffix) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  uint64_t v = 0;
  size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const uint64_t d = uint64_t(text[i] - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) return false;
    v = v * 10 + d;
  }
  uint64_t mult = 1;
  if (i < text.size() && allow_suffix) {
    switch (std::toupper(static_cast<unsigned char>(text[i]))) {
      case 'K':
        mult = 1ull << 10;
        break;
      case 'M':
        mult = 1ull << 20;
        break;
      case 'G':
        mult = 1ull << 30;
        break;
      default:
        return false;
    }
    ++i;
  }
  if (i != text.size()) return false;
  if (v > std::numeric_limits<uint64_t>::max() / mult) return false;
  *out = v * mult;
  return true;
}

bool ParseDtype(std::string_view s, std::vector<DType>* out) {
  if (s == "all") {
    out->assign(std::begin(kAllDTypes), std::end(kAllDTypes));
    return true;
  }
  struct Alias {
    const char* name;
    DType type;
  };
  static const Alias kAliases[] = {{"char", DType::Int8},      {"int", DType::Int32},
                                   {"half", DType::Float16},   {"float", DType::Float32},
                                   {"double", DType::Float64}, {"bf16", DType::BFloat16}};
  for (const Alias& a : kAliases) {
    if (s == a.name) {
      *out = {a.type};
      return true;
    }
  }
  for (DType t : kAllDTypes) {
    if (s == ToString(t)) {
      *out = {t};
      return true;
    }
  }
  return false;
}

bool ParseOp(std::string_view s, std::vector<ReduceOp>* out) {
  if (s == "all") {
    out->assign(std::begin(kAllReduceOps), std::end(kAllReduceOps));
    return true;
  }
  for (ReduceOp op : kAllReduceOps) {
    if (s == ToString(op)) {
      *out = {op};
      return true;
    }
  }
  return false;
}

// Every collective -t takes, in --help's order.
constexpr Collective kAllCollectives[] = {Collective::Allreduce,
                                          Collective::Broadcast,
                                          Collective::Reduce,
                                          Collective::Allgather,
                                          Collective::ReduceScatter,
                                          Collective::Alltoall,
                                          Collective::SendRecv,
                                          Collective::Barrier,
                                          Collective::Gather,
                                          Collective::Scatter,
                                          Collective::Allgatherv,
                                          Collective::Alltoallv,
                                          Collective::AllreduceCoalesced,
                                          Collective::ReduceScatterv};

// "allreduce, broadcast, ... or reduce_scatterv".
std::string CollectiveNames() {
  std::string s;
  const size_t n = std::size(kAllCollectives);
  for (size_t i = 0; i < n; ++i) {
    s += i == 0 ? "" : i + 1 == n ? " or " : ", ";
    s += CollectiveName(kAllCollectives[i]);
  }
  return s;
}

bool ParseCollective(std::string_view s, Collective* out) {
  for (Collective c : kAllCollectives) {
    if (s == CollectiveName(c)) {
      *out = c;
      return true;
    }
  }
  if (s == "reducescatter") {
    *out = Collective::ReduceScatter;
    return true;
  }
  return false;
}

int Bad(const std::string& message) {
  std::fprintf(stderr, "plexus-bench: %s\n(plexus-bench --help for usage)\n", message.c_str());
  return 2;
}

}  // namespace

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::Allreduce:
      return "allreduce";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::Reduce:
      return "reduce";
    case Collective::Allgather:
      return "allgather";
    case Collective::ReduceScatter:
      return "reduce_scatter";
    case Collective::Alltoall:
      return "alltoall";
    case Collective::SendRecv:
      return "sendrecv";
    case Collective::Barrier:
      return "barrier";
    case Collective::Gather:
      return "gather";
    case Collective::Scatter:
      return "scatter";
    case Collective::Allgatherv:
      return "allgatherv";
    case Collective::Alltoallv:
      return "alltoallv";
    case Collective::AllreduceCoalesced:
      return "allreduce_coalesced";
    case Collective::ReduceScatterv:
      return "reduce_scatterv";
  }
  return "unknown";
}

std::vector<plexus_collective_t> RequiredCollectives(Collective c) {
  switch (c) {
    case Collective::Allreduce:
      return {PLEXUS_COLL_ALLREDUCE};
    case Collective::Broadcast:
      return {PLEXUS_COLL_BROADCAST};
    case Collective::Reduce:
      return {PLEXUS_COLL_REDUCE};
    case Collective::Allgather:
      return {PLEXUS_COLL_ALLGATHER};
    case Collective::ReduceScatter:
      return {PLEXUS_COLL_REDUCE_SCATTER};
    case Collective::Alltoall:
      return {PLEXUS_COLL_ALLTOALL};
    case Collective::SendRecv:
      return {PLEXUS_COLL_SEND, PLEXUS_COLL_RECV};
    case Collective::Barrier:
      return {PLEXUS_COLL_BARRIER};
    case Collective::Gather:
      return {PLEXUS_COLL_GATHER};
    case Collective::Scatter:
      return {PLEXUS_COLL_SCATTER};
    case Collective::Allgatherv:
      return {PLEXUS_COLL_ALLGATHERV};
    case Collective::Alltoallv:
      return {PLEXUS_COLL_ALLTOALLV};
    case Collective::AllreduceCoalesced:
      return {PLEXUS_COLL_ALLREDUCE_COALESCED};
    case Collective::ReduceScatterv:
      return {PLEXUS_COLL_REDUCE_SCATTERV};
  }
  return {};
}

bool IsReduction(Collective c) {
  return c == Collective::Allreduce || c == Collective::Reduce || c == Collective::ReduceScatter ||
         c == Collective::AllreduceCoalesced || c == Collective::ReduceScatterv;
}
bool HasRoot(Collective c) {
  return c == Collective::Broadcast || c == Collective::Reduce || c == Collective::Gather ||
         c == Collective::Scatter;
}
bool MovesData(Collective c) {
  return c != Collective::Barrier;
}

ParseResult ParseArgs(int argc, char** argv) {
  BenchArgs a;
  ParseResult bad;
  bad.exit_code = 2;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return ParseResult{};
    }
    if (arg == "--mem-alloc") {
      a.mem_alloc = true;
      continue;
    }
    if (arg == "--blocking") {
      a.blocking = true;
      continue;
    }
    // Split "--name=value" and "-xVALUE"; otherwise the value is the next word.
    std::string name = arg, value;
    bool have_value = false;
    if (arg.rfind("--", 0) == 0) {
      if (const size_t eq = arg.find('='); eq != std::string::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        have_value = true;
      }
    } else if (arg.size() > 2 && arg[0] == '-') {
      name = arg.substr(0, 2);
      value = arg.substr(2);
      have_value = true;
    }
    struct Opt {
      const char* s;
      const char* l;
    };
    static const Opt kOpts[] = {
        {"-b", "--minbytes"}, {"-e", "--maxbytes"},     {"-f", "--stepfactor"},
        {"-n", "--iters"},    {"-w", "--warmup_iters"}, {"-c", "--check"},
        {"-o", "--op"},       {"-d", "--datatype"},     {"-t", "--collective"},
        {"-r", "--root"},     {"--json", "--json"}};
    const Opt* opt = nullptr;
    for (const Opt& o : kOpts) {
      if (name == o.s || name == o.l) opt = &o;
    }
    if (!opt) {
      bad.exit_code = Bad("unknown option '" + arg + "'");
      return bad;
    }
    if (!have_value) {
      if (i + 1 >= argc) {
        bad.exit_code = Bad(std::string("option ") + opt->l + " needs a value");
        return bad;
      }
      value = argv[++i];
    }
    const std::string key = opt->l;
    auto invalid = [&](const char* what) {
      bad.exit_code = Bad("invalid value '" + value + "' for " + key + " (" + what + ")");
      return bad;
    };
    uint64_t v = 0;
    if (key == "--minbytes" || key == "--maxbytes") {
      if (!ParseNumber(value, &v, true)) return invalid("a size in bytes, with K, M or G");
      (key == "--minbytes" ? a.min_bytes : a.max_bytes) = v;
    } else if (key == "--stepfactor") {
      if (!ParseNumber(value, &v, false) || v < 1 || v > 1024) return invalid("1..1024");
      a.step_factor = v;
    } else if (key == "--iters") {
      if (!ParseNumber(value, &v, false) || v < 1 || v > 1000000) return invalid("1..1000000");
      a.iters = int(v);
    } else if (key == "--warmup_iters") {
      if (!ParseNumber(value, &v, false) || v > 1000000) return invalid("0..1000000");
      a.warmup_iters = int(v);
    } else if (key == "--check") {
      if (value != "0" && value != "1") return invalid("0 or 1");
      a.check = value == "1";
    } else if (key == "--op") {
      if (!ParseOp(value, &a.ops)) return invalid("sum, prod, min, max, avg or all");
    } else if (key == "--datatype") {
      if (!ParseDtype(value, &a.dtypes)) return invalid("int8 ... float64 or all");
    } else if (key == "--collective") {
      if (!ParseCollective(value, &a.collective)) {
        return invalid(CollectiveNames().c_str());
      }
    } else if (key == "--root") {
      if (!ParseNumber(value, &v, false) || v > std::numeric_limits<uint32_t>::max()) {
        return invalid("a rank");
      }
      a.root = uint32_t(v);
    } else if (key == "--json") {
      if (value.empty()) return invalid("a file name");
      a.json_path = value;
    }
  }
  if (a.min_bytes > a.max_bytes) {
    bad.exit_code = Bad("--minbytes (" + std::to_string(a.min_bytes) + ") exceeds --maxbytes (" +
                        std::to_string(a.max_bytes) + ")");
    return bad;
  }
  if (a.step_factor == 1 && a.min_bytes != a.max_bytes) {
    bad.exit_code = Bad("--stepfactor 1 needs --minbytes == --maxbytes");
    return bad;
  }
  ParseResult ok;
  ok.args = std::move(a);
  return ok;
}

}  // namespace plexus::bench
