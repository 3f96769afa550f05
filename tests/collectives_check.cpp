// Multi-rank correctness check of a backend through the public C++ API.
// Launched by `meson test` under plexus-run at several world sizes:
//
//   plexus-run -n 3 collectives_check [--large-bytes N]
//
// Every dtype x op x count (0, 1, a prime, >= 4 MiB) for allreduce, in and
// out of place, with all ops of one dtype and count posted before any is
// waited for; broadcast from every root; allgather; barrier. Inputs are
// chosen so that every reduction is exact in any order (small integers, and
// products of +-1 and 2), and results are compared bit for bit.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "plexus/algos/half.hpp"
#include "plexus/plexus.hpp"

namespace {

using plexus::DType;
using plexus::ReduceOp;
namespace algos = plexus::algos;

int g_failures = 0;
int g_passes = 0;
uint32_t g_rank = 0;

void Expect(bool ok, const std::string& what) {
  if (ok) {
    ++g_passes;
    return;
  }
  if (++g_failures <= 20) std::fprintf(stderr, "rank %u: FAILED %s\n", g_rank, what.c_str());
}

bool IsSigned(DType t) {
  return t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64 ||
         t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 ||
         t == DType::Float64;
}

// Writes the small integer v as element i of a buffer of type t.
void Put(DType t, void* buf, uint64_t i, int64_t v) {
  switch (t) {
    case DType::Int8: static_cast<int8_t*>(buf)[i] = int8_t(v); break;
    case DType::UInt8: static_cast<uint8_t*>(buf)[i] = uint8_t(v); break;
    case DType::Int16: static_cast<int16_t*>(buf)[i] = int16_t(v); break;
    case DType::UInt16: static_cast<uint16_t*>(buf)[i] = uint16_t(v); break;
    case DType::Int32: static_cast<int32_t*>(buf)[i] = int32_t(v); break;
    case DType::UInt32: static_cast<uint32_t*>(buf)[i] = uint32_t(v); break;
    case DType::Int64: static_cast<int64_t*>(buf)[i] = v; break;
    case DType::UInt64: static_cast<uint64_t*>(buf)[i] = uint64_t(v); break;
    case DType::Float16: static_cast<uint16_t*>(buf)[i] = algos::FloatToFloat16(float(v)); break;
    case DType::BFloat16: static_cast<uint16_t*>(buf)[i] = algos::FloatToBFloat16(float(v)); break;
    case DType::Float32: static_cast<float*>(buf)[i] = float(v); break;
    case DType::Float64: static_cast<double*>(buf)[i] = double(v); break;
  }
}

// Input of rank r at element i for op, on n ranks.
int64_t Input(DType t, ReduceOp op, uint32_t r, uint32_t n, uint64_t i) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: {
      // Deviations sum to zero, so the average is exactly `base`.
      const int64_t base = n + int64_t(i * 7 % 13);
      return base + (n == 1 ? 0 : (r == 0 ? -int64_t(n - 1) : 1));
    }
    case ReduceOp::Prod:
      if (IsSigned(t) && (i + 2 * r) % 7 == 3) return -1;
      return (i + r) % 5 == 0 ? 2 : 1;
    case ReduceOp::Min:
    case ReduceOp::Max:
      return int64_t((i * 31 + r * 17) % 61) - (IsSigned(t) ? 30 : 0);
  }
  return 0;
}

int64_t Expected(DType t, ReduceOp op, uint32_t n, uint64_t i) {
  int64_t acc = Input(t, op, 0, n, i);
  for (uint32_t r = 1; r < n; ++r) {
    const int64_t x = Input(t, op, r, n, i);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg: acc += x; break;
      case ReduceOp::Prod: acc *= x; break;
      case ReduceOp::Min: acc = std::min(acc, x); break;
      case ReduceOp::Max: acc = std::max(acc, x); break;
    }
  }
  return op == ReduceOp::Avg ? acc / int64_t(n) : acc;
}

// First index where buf differs from the value expected, or -1.
int64_t FirstMismatch(DType t, const std::vector<uint8_t>& buf, uint64_t count,
                      const std::function<int64_t(uint64_t)>& expected) {
  std::vector<uint8_t> want(plexus::ElementSize(t));
  const size_t es = want.size();
  for (uint64_t i = 0; i < count; ++i) {
    Put(t, want.data(), 0, expected(i));
    if (std::memcmp(buf.data() + i * es, want.data(), es) != 0) return int64_t(i);
  }
  return -1;
}

std::string Name(const char* coll, DType t, uint64_t count, const std::string& extra) {
  return std::string(coll) + " " + plexus::ToString(t) + " count " + std::to_string(count) + " " +
         extra;
}

void CheckAllreduce(plexus::Communicator& comm, DType t, uint64_t count, bool in_place) {
  const uint32_t n = comm.size(), r = comm.rank();
  const size_t es = plexus::ElementSize(t);
  struct Job {
    ReduceOp op;
    std::vector<uint8_t> send, recv;
    plexus::Work work;
  };
  std::vector<Job> jobs;
  jobs.reserve(5);
  for (ReduceOp op : plexus::kAllReduceOps) {
    Job j{op, std::vector<uint8_t>(count * es), std::vector<uint8_t>(count * es, 0xAB), {}};
    for (uint64_t i = 0; i < count; ++i) Put(t, j.send.data(), i, Input(t, op, r, n, i));
    jobs.push_back(std::move(j));
  }
  // Post all five before waiting for any: several requests outstanding.
  for (Job& j : jobs) {
    void* out = in_place ? j.send.data() : j.recv.data();
    j.work = comm.allreduce(j.send.data(), out, count, t, j.op);
  }
  for (Job& j : jobs) {
    const std::string what = Name("allreduce", t, count, std::string(plexus::ToString(j.op)) +
                                                              (in_place ? " in-place" : ""));
    try {
      j.work.wait();
    } catch (const plexus::Error& e) {
      Expect(false, what + ": " + e.what());
      continue;
    }
    const auto& result = in_place ? j.send : j.recv;
    const int64_t bad =
        FirstMismatch(t, result, count, [&](uint64_t i) { return Expected(t, j.op, n, i); });
    Expect(bad < 0, what + " wrong at element " + std::to_string(bad));
  }
}

void CheckBroadcast(plexus::Communicator& comm, DType t, uint64_t count) {
  const uint32_t n = comm.size(), r = comm.rank();
  const size_t es = plexus::ElementSize(t);
  std::vector<std::vector<uint8_t>> bufs(n, std::vector<uint8_t>(count * es));
  std::vector<plexus::Work> works;
  for (uint32_t root = 0; root < n; ++root) {
    for (uint64_t i = 0; i < count; ++i) {
      Put(t, bufs[root].data(), i, r == root ? int64_t((i + root) % 100) : 101);
    }
    works.push_back(comm.broadcast(bufs[root].data(), count, t, root));
  }
  for (uint32_t root = 0; root < n; ++root) {
    const std::string what = Name("broadcast", t, count, "root " + std::to_string(root));
    try {
      works[root].wait();
    } catch (const plexus::Error& e) {
      Expect(false, what + ": " + e.what());
      continue;
    }
    const int64_t bad = FirstMismatch(t, bufs[root], count,
                                      [&](uint64_t i) { return int64_t((i + root) % 100); });
    Expect(bad < 0, what + " wrong at element " + std::to_string(bad));
  }
}

void CheckAllgather(plexus::Communicator& comm, DType t, uint64_t count, bool in_place) {
  const uint32_t n = comm.size(), r = comm.rank();
  const size_t es = plexus::ElementSize(t);
  std::vector<uint8_t> send(count * es), recv(n * count * es, 0xCD);
  auto value = [&](uint32_t rank, uint64_t i) { return int64_t((rank * 13 + i) % 97); };
  void* src = in_place ? recv.data() + r * count * es : send.data();
  for (uint64_t i = 0; i < count; ++i) Put(t, src, i, value(r, i));
  const std::string what = Name("allgather", t, count, in_place ? "in-place" : "");
  try {
    comm.allgather(src, recv.data(), count, t).wait();
  } catch (const plexus::Error& e) {
    Expect(false, what + ": " + e.what());
    return;
  }
  const int64_t bad = FirstMismatch(t, recv, n * count,
                                    [&](uint64_t i) { return value(uint32_t(i / count), i % count); });
  Expect(bad < 0, what + " wrong at element " + std::to_string(bad));
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t large_bytes = 4u << 20;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--large-bytes" && i + 1 < argc) {
      large_bytes = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: collectives_check [--large-bytes N]\n");
      return 2;
    }
  }
  try {
    auto comm = plexus::Communicator::from_env();
    g_rank = comm.rank();
    for (DType t : plexus::kAllDTypes) {
      const uint64_t counts[] = {0, 1, 1009, large_bytes / plexus::ElementSize(t)};
      for (uint64_t count : counts) {
        CheckAllreduce(comm, t, count, false);
        CheckAllreduce(comm, t, count, true);
        CheckBroadcast(comm, t, count);
        CheckAllgather(comm, t, count, false);
        CheckAllgather(comm, t, count, true);
      }
      comm.barrier().wait();
    }
    for (int i = 0; i < 10; ++i) comm.barrier().wait();
    std::printf("rank %u of %u (%s): %d checks passed, %d failed\n", comm.rank(), comm.size(),
                comm.backend_name().c_str(), g_passes, g_failures);
  } catch (const plexus::Error& e) {
    std::fprintf(stderr, "rank %u: %s\n", g_rank, e.what());
    return 1;
  }
  return g_failures == 0 ? 0 : 1;
}
