// Communicator::mem_alloc, the backends' shared buffers (ABI 1.3), through
// the public API. Launched under plexus-run or mpirun at several sizes:
//
//   shared_buffers_check --expect shared|ordinary [--mismatch]
//
// - The memory is what --expect says: a mapping of a shared buffer's file
//   in /dev/shm (/proc/self/maps) on a backend with shared memory on one
//   host, ordinary memory otherwise (PLEXUS_SHM=off, PLEXUS_SHM_WINDOWS=off,
//   one rank); zero-filled either way.
// - In-place allreduces on ranges of it at several offsets, every dtype x op
//   x count (a few elements, 20 KB, 1.2 MB: many chunks, the last one
//   uneven), in three rounds (the chunk counters turn over), one buffer
//   freed and another made between rounds; inputs exact in any order,
//   results compared bit for bit.
// - Two allreduces on a shared buffer 32767 small ones apart (the segment's
//   16-bit step numbers wrap between them; the chunk counters must still
//   tell the second from the first).
// - The buffers outlive the Communicator object.
// - --mismatch: rank 0 posts on its shared buffer, the others on vectors of
//   their own: every rank fails with REMOTE saying so, well within the
//   timeout (no hang), rather than summing garbage.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "check_util.hpp"
#include "plexus/algos/half.hpp"
#include "plexus/plexus.hpp"

namespace {

using plexus::DType;
using plexus::ReduceOp;
namespace algos = plexus::algos;
using plexus_check::Expect;

void Put(DType t, void* b, uint64_t i, double v) {
  switch (t) {
    case DType::Int8:
      static_cast<int8_t*>(b)[i] = int8_t(v);
      break;
    case DType::UInt8:
      static_cast<uint8_t*>(b)[i] = uint8_t(v);
      break;
    case DType::Int16:
      static_cast<int16_t*>(b)[i] = int16_t(v);
      break;
    case DType::UInt16:
      static_cast<uint16_t*>(b)[i] = uint16_t(v);
      break;
    case DType::Int32:
      static_cast<int32_t*>(b)[i] = int32_t(v);
      break;
    case DType::UInt32:
      static_cast<uint32_t*>(b)[i] = uint32_t(v);
      break;
    case DType::Int64:
      static_cast<int64_t*>(b)[i] = int64_t(v);
      break;
    case DType::UInt64:
      static_cast<uint64_t*>(b)[i] = uint64_t(v);
      break;
    case DType::Float16:
      static_cast<uint16_t*>(b)[i] = algos::FloatToFloat16(float(v));
      break;
    case DType::BFloat16:
      static_cast<uint16_t*>(b)[i] = algos::FloatToBFloat16(float(v));
      break;
    case DType::Float32:
      static_cast<float*>(b)[i] = float(v);
      break;
    case DType::Float64:
      static_cast<double*>(b)[i] = v;
      break;
  }
}

double Get(DType t, const void* b, uint64_t i) {
  switch (t) {
    case DType::Int8:
      return static_cast<const int8_t*>(b)[i];
    case DType::UInt8:
      return static_cast<const uint8_t*>(b)[i];
    case DType::Int16:
      return static_cast<const int16_t*>(b)[i];
    case DType::UInt16:
      return static_cast<const uint16_t*>(b)[i];
    case DType::Int32:
      return static_cast<const int32_t*>(b)[i];
    case DType::UInt32:
      return static_cast<const uint32_t*>(b)[i];
    case DType::Int64:
      return double(static_cast<const int64_t*>(b)[i]);
    case DType::UInt64:
      return double(static_cast<const uint64_t*>(b)[i]);
    case DType::Float16:
      return algos::Float16ToFloat(static_cast<const uint16_t*>(b)[i]);
    case DType::BFloat16:
      return algos::BFloat16ToFloat(static_cast<const uint16_t*>(b)[i]);
    case DType::Float32:
      return static_cast<const float*>(b)[i];
    case DType::Float64:
      return static_cast<const double*>(b)[i];
  }
  return 0;
}

// Rank r's element i for op, small integers whose reduction is exact: for
// Sum and Avg a(i) + d(r) with the d summing to 0 (so Avg is a(i) exactly,
// also for integers), for Prod 1s and 2s, for Min and Max 0..10.
double Value(ReduceOp op, uint32_t r, uint32_t n, uint64_t i) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return double(i % 5 + n) + (r == 0 ? -double(n - 1) : 1.0);
    case ReduceOp::Prod:
      return (i + r) % 3 == 0 ? 2 : 1;
    default:
      return double((i * 3 + r * 5) % 11);
  }
}

double Expected(ReduceOp op, uint32_t n, uint64_t i) {
  double acc = Value(op, 0, n, i);
  for (uint32_t r = 1; r < n; ++r) {
    const double v = Value(op, r, n, i);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc += v;
        break;
      case ReduceOp::Prod:
        acc *= v;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, v);
        break;
      case ReduceOp::Max:
        acc = std::max(acc, v);
        break;
    }
  }
  return op == ReduceOp::Avg ? acc / n : acc;
}

// The file /proc/self/maps names for the mapping holding p ("" if none).
std::string MappingOf(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  for (std::string line; std::getline(maps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2 || at < lo || at >= hi) continue;
    const size_t slash = line.find('/');
    return slash == std::string::npos ? "" : line.substr(slash);
  }
  return "";
}

void CheckMemory(const std::shared_ptr<void>& m, uint64_t bytes, bool expect_shared,
                 const std::string& what) {
  const std::string file = MappingOf(m.get());
  const bool shared =
      file.find("/dev/shm/plexus-shm-") == 0 && file.find("-w") != std::string::npos;
  Expect(shared == expect_shared, what + ": expected " +
                                      (expect_shared ? "a shared buffer" : "ordinary memory") +
                                      ", got a mapping of '" + file + "'");
  Expect(reinterpret_cast<uintptr_t>(m.get()) % 64 == 0, what + ": not 64-byte aligned");
  const auto* b = static_cast<const unsigned char*>(m.get());
  bool zero = true;
  for (uint64_t i = 0; i < bytes && zero; ++i) zero = b[i] == 0;
  Expect(zero, what + ": not zero-filled");
}

void CheckAllreduce(plexus::Communicator& comm, void* buf, DType t, ReduceOp op, uint64_t count,
                    const std::string& where) {
  const uint32_t r = comm.rank(), n = comm.size();
  for (uint64_t i = 0; i < count; ++i) Put(t, buf, i, Value(op, r, n, i));
  comm.allreduce(buf, buf, count, t, op).wait();
  uint64_t wrong = 0, first = 0;
  for (uint64_t i = 0; i < count; ++i) {
    if (Get(t, buf, i) != Expected(op, n, i) && wrong++ == 0) first = i;
  }
  Expect(wrong == 0, "allreduce " + std::string(plexus::ToString(t)) + " " + plexus::ToString(op) +
                         " count " + std::to_string(count) + " " + where + ": " +
                         std::to_string(wrong) + " wrong, first at " + std::to_string(first) +
                         ": " + std::to_string(Get(t, buf, first)) + " expected " +
                         std::to_string(Expected(op, n, first)));
}

int Mismatch(plexus::Communicator& comm, const std::shared_ptr<void>& shared) {
  const uint64_t count = 1 << 18;  // 1 MiB of float32
  std::vector<float> own(count, 1.0f);
  void* buf = comm.rank() == 0 ? shared.get() : own.data();
  const auto start = std::chrono::steady_clock::now();
  try {
    comm.allreduce(buf, buf, count, DType::Float32, ReduceOp::Sum).wait();
    Expect(false, "mismatch: the allreduce succeeded");
  } catch (const plexus::Error& e) {
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("rank %u: %s (after %.1f s)\n", comm.rank(), e.what(), s);
    Expect(e.status() == PLEXUS_ERR_REMOTE, "mismatch: not REMOTE");
    Expect(e.message().find("shared buffer (mem_alloc)") != std::string::npos,
           "mismatch: the message does not say that one side is on a shared buffer");
    Expect(s < 20, "mismatch: took " + std::to_string(s) + " s");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int expect = -1;  // 1 shared, 0 ordinary
  bool mismatch = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--expect" && i + 1 < argc && std::string(argv[i + 1]) == "shared") {
      expect = 1, ++i;
    } else if (a == "--expect" && i + 1 < argc && std::string(argv[i + 1]) == "ordinary") {
      expect = 0, ++i;
    } else if (a == "--mismatch") {
      mismatch = true;
    } else {
      expect = -1;
      break;
    }
  }
  if (expect < 0) {
    std::fprintf(stderr, "usage: shared_buffers_check --expect shared|ordinary [--mismatch]\n");
    return 2;
  }
  try {
    auto comm = std::make_unique<plexus::Communicator>(plexus::Communicator::from_env());
    plexus_check::rank = comm->rank();
    const uint64_t a_bytes = (3 << 20) + 17, b_bytes = 256 << 10;
    std::shared_ptr<void> a = comm->mem_alloc(a_bytes);
    std::shared_ptr<void> b = comm->mem_alloc(b_bytes);
    CheckMemory(a, a_bytes, expect == 1, "buffer a");
    CheckMemory(b, b_bytes, expect == 1, "buffer b");
    if (mismatch) {
      Mismatch(*comm, a);
    } else {
      for (int round = 0; round < 3; ++round) {
        for (DType t : plexus::kAllDTypes) {
          const uint64_t es = plexus::ElementSize(t);
          for (ReduceOp op : plexus::kAllReduceOps) {
            // Ranges at offsets that move each round; the large one ends
            // at a's last whole element.
            const uint64_t large = 1200000 / es;
            CheckAllreduce(*comm, static_cast<char*>(a.get()) + 64 * round, t, op, 5,
                           "at byte " + std::to_string(64 * round) + " of a");
            CheckAllreduce(*comm, static_cast<char*>(b.get()) + es * round, t, op, 20000 / es,
                           "at byte " + std::to_string(es * round) + " of b");
            const uint64_t off = (a_bytes - large * es) / es * es;
            CheckAllreduce(*comm, static_cast<char*>(a.get()) + off, t, op, large,
                           "at byte " + std::to_string(off) + " of a");
          }
        }
        b = comm->mem_alloc(b_bytes);  // (the old b is freed once the new one is made)
        CheckMemory(b, b_bytes, expect == 1, "buffer b, round " + std::to_string(round + 1));
      }
      const uint64_t count = (1 << 20) / 4;
      CheckAllreduce(*comm, a.get(), DType::Float32, ReduceOp::Sum, count, "before the wrap");
      for (int i = 0; i < 32767; ++i) {
        float two[2] = {1, 2};
        comm->allreduce(two, two, 2, DType::Float32, ReduceOp::Sum).wait();
      }
      CheckAllreduce(*comm, a.get(), DType::Float32, ReduceOp::Sum, count, "after the wrap");
    }
    const uint32_t rank = comm->rank();
    comm.reset();  // the buffers outlive the Communicator object
    std::memset(a.get(), 1, a_bytes);
    a.reset();
    b.reset();
    std::printf("rank %u: %d passed, %d failed\n", rank, plexus_check::passes,
                plexus_check::failures);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %u: %s\n", plexus_check::rank, e.what());
    return 1;
  }
  return plexus_check::failures == 0 ? 0 : 1;
}
