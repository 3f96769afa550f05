// Multi-rank correctness check of a backend through the public C++ API.
// Launched by `meson test` under plexus-run at several world sizes:
//
//   plexus-run -n 3 collectives_check [--large-bytes N] [--same-bits]
//
// Every dtype x op x count (0, 1, a prime, >= 4 MiB) for allreduce, in and
// out of place, with all ops of one dtype and count posted before any is
// waited for; broadcast from every root; allgather; barrier. Where the
// backend supports them (comm.supports(); otherwise rank 0 prints "skipped
// <coll>: not supported by <backend>"): reduce to every root, every dtype x
// op, in place on the root too, checking that other ranks' buffers are left
// alone; reduce_scatter, every dtype x op, in and out of place; alltoall; and
// send/recv as a ring exchange with both neighbours (2+ ranks) plus a 0-count
// message. At the large size, to keep the run short, reduce goes to one root
// per dtype, reduce_scatter and alltoall move ~4 MiB in all (not per rank),
// and reduce and reduce_scatter alternate in and out of place by dtype; the
// send/recv ring moves 4 MiB per message. Inputs are chosen so that
// every reduction is exact in any order (small integers, and products of +-1
// and 2), and results are compared bit for bit.
//
// --same-bits adds allreduces whose float sums are NOT exact (float32 and
// float64, sum and avg, random values of many magnitudes): every rank's
// result must be within rounding of the exact sum and have the same bits as
// every other rank's (compared through an allgather of a hash), as DDP
// replicas need (two-level allreduce, PLEXUS_HIERARCHY, promises it).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
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

bool IsSigned(DType t) {
  return t == DType::Int8 || t == DType::Int16 || t == DType::Int32 || t == DType::Int64 ||
         t == DType::Float16 || t == DType::BFloat16 || t == DType::Float32 || t == DType::Float64;
}

// Writes the small integer v as element i of a buffer of type t.
void Put(DType t, void* buf, uint64_t i, int64_t v) {
  switch (t) {
    case DType::Int8:
      static_cast<int8_t*>(buf)[i] = int8_t(v);
      break;
    case DType::UInt8:
      static_cast<uint8_t*>(buf)[i] = uint8_t(v);
      break;
    case DType::Int16:
      static_cast<int16_t*>(buf)[i] = int16_t(v);
      break;
    case DType::UInt16:
      static_cast<uint16_t*>(buf)[i] = uint16_t(v);
      break;
    case DType::Int32:
      static_cast<int32_t*>(buf)[i] = int32_t(v);
      break;
    case DType::UInt32:
      static_cast<uint32_t*>(buf)[i] = uint32_t(v);
      break;
    case DType::Int64:
      static_cast<int64_t*>(buf)[i] = v;
      break;
    case DType::UInt64:
      static_cast<uint64_t*>(buf)[i] = uint64_t(v);
      break;
    case DType::Float16:
      static_cast<uint16_t*>(buf)[i] = algos::FloatToFloat16(float(v));
      break;
    case DType::BFloat16:
      static_cast<uint16_t*>(buf)[i] = algos::FloatToBFloat16(float(v));
      break;
    case DType::Float32:
      static_cast<float*>(buf)[i] = float(v);
      break;
    case DType::Float64:
      static_cast<double*>(buf)[i] = double(v);
      break;
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
      case ReduceOp::Avg:
        acc += x;
        break;
      case ReduceOp::Prod:
        acc *= x;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, x);
        break;
      case ReduceOp::Max:
        acc = std::max(acc, x);
        break;
    }
  }
  return op == ReduceOp::Avg ? acc / int64_t(n) : acc;
}

// First index where data (count elements of t) differs from the value
// expected, or -1.
int64_t FirstMismatch(DType t, const uint8_t* data, uint64_t count,
                      const std::function<int64_t(uint64_t)>& expected) {
  std::vector<uint8_t> want(plexus::ElementSize(t));
  const size_t es = want.size();
  for (uint64_t i = 0; i < count; ++i) {
    Put(t, want.data(), 0, expected(i));
    if (std::memcmp(data + i * es, want.data(), es) != 0) return int64_t(i);
  }
  return -1;
}

int64_t FirstMismatch(DType t, const std::vector<uint8_t>& buf, uint64_t count,
                      const std::function<int64_t(uint64_t)>& expected) {
  return FirstMismatch(t, buf.data(), count, expected);
}

// First index of buf whose byte is not fill, or -1.
int64_t FirstChangedByte(const std::vector<uint8_t>& buf, uint8_t fill) {
  for (size_t i = 0; i < buf.size(); ++i) {
    if (buf[i] != fill) return int64_t(i);
  }
  return -1;
}

// True (once per collective) when the backend supports coll; otherwise rank 0
// says it is skipped.
bool Supported(plexus::Communicator& comm, plexus_collective_t coll, const char* name) {
  if (comm.supports(coll)) return true;
  static std::set<plexus_collective_t> said;
  if (comm.rank() == 0 && said.insert(coll).second) {
    std::printf("skipped %s: not supported by %s\n", name, comm.backend_name().c_str());
    std::fflush(stdout);
  }
  return false;
}

// Waits for work; on failure records it under what and returns false.
bool Finished(plexus::Work& work, const std::string& what) {
  try {
    work.wait();
    return true;
  } catch (const plexus::Error& e) {
    Expect(false, what + ": " + e.what());
    return false;
  }
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
    const std::string what = Name(
        "allreduce", t, count, std::string(plexus::ToString(j.op)) + (in_place ? " in-place" : ""));
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
    const int64_t bad =
        FirstMismatch(t, bufs[root], count, [&](uint64_t i) { return int64_t((i + root) % 100); });
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
  const int64_t bad = FirstMismatch(
      t, recv, n * count, [&](uint64_t i) { return value(uint32_t(i / count), i % count); });
  Expect(bad < 0, what + " wrong at element " + std::to_string(bad));
}

// Reduce of every op to each root in roots, all posted before any is waited
// for. In place, every rank passes sendbuf == recvbuf (only the root's is the
// in-place form; the others' must be left as they were). Out of place, the
// non-roots pass NULL (odd roots) or a buffer that must stay untouched.
void CheckReduce(plexus::Communicator& comm, DType t, uint64_t count, bool in_place,
                 const std::vector<uint32_t>& roots) {
  const uint32_t n = comm.size(), r = comm.rank();
  const size_t es = plexus::ElementSize(t);
  struct Job {
    ReduceOp op;
    uint32_t root;
    std::vector<uint8_t> send, recv;
    plexus::Work work;
  };
  std::vector<Job> jobs;
  jobs.reserve(roots.size() * 5);
  for (uint32_t root : roots) {
    for (ReduceOp op : plexus::kAllReduceOps) {
      Job j{op, root, std::vector<uint8_t>(count * es), std::vector<uint8_t>(count * es, 0xAB), {}};
      for (uint64_t i = 0; i < count; ++i) Put(t, j.send.data(), i, Input(t, op, r, n, i));
      jobs.push_back(std::move(j));
    }
  }
  for (Job& j : jobs) {
    void* out = in_place                           ? j.send.data()
                : (r == j.root || j.root % 2 == 0) ? j.recv.data()
                                                   : nullptr;
    j.work = comm.reduce(j.send.data(), out, count, t, j.op, j.root);
  }
  for (Job& j : jobs) {
    const std::string what = Name("reduce", t, count,
                                  std::string(plexus::ToString(j.op)) + " root " +
                                      std::to_string(j.root) + (in_place ? " in-place" : ""));
    if (!Finished(j.work, what)) continue;
    if (r == j.root) {
      const auto& result = in_place ? j.send : j.recv;
      const int64_t bad =
          FirstMismatch(t, result, count, [&](uint64_t i) { return Expected(t, j.op, n, i); });
      Expect(bad < 0, what + " wrong at element " + std::to_string(bad));
    } else {
      const int64_t bad =
          FirstMismatch(t, j.send, count, [&](uint64_t i) { return Input(t, j.op, r, n, i); });
      Expect(bad < 0, what + ": a non-root's sendbuf changed at element " + std::to_string(bad));
      if (!in_place) {
        const int64_t touched = FirstChangedByte(j.recv, 0xAB);
        Expect(touched < 0,
               what + ": a non-root's recvbuf was written at byte " + std::to_string(touched));
      }
    }
  }
}

// Reduce-scatter of every op in ops, posted together. Rank r's input at
// global element g (of n * count) is Input(g); block r of the result is
// Expected(r * count + k).
void CheckReduceScatter(plexus::Communicator& comm, DType t, uint64_t count, bool in_place,
                        const std::vector<ReduceOp>& ops) {
  const uint32_t n = comm.size(), r = comm.rank();
  const size_t es = plexus::ElementSize(t);
  struct Job {
    ReduceOp op;
    std::vector<uint8_t> send, recv;
    plexus::Work work;
  };
  std::vector<Job> jobs;
  jobs.reserve(ops.size());
  for (ReduceOp op : ops) {
    Job j{op, std::vector<uint8_t>(n * count * es), std::vector<uint8_t>(count * es, 0xAB), {}};
    for (uint64_t g = 0; g < n * count; ++g) Put(t, j.send.data(), g, Input(t, op, r, n, g));
    jobs.push_back(std::move(j));
  }
  for (Job& j : jobs) {
    void* out = in_place ? j.send.data() + r * count * es : j.recv.data();
    j.work = comm.reduce_scatter(j.send.data(), out, count, t, j.op);
  }
  for (Job& j : jobs) {
    const std::string what =
        Name("reduce_scatter", t, count,
             std::string(plexus::ToString(j.op)) + (in_place ? " in-place" : ""));
    if (!Finished(j.work, what)) continue;
    const uint8_t* result = in_place ? j.send.data() + r * count * es : j.recv.data();
    const int64_t bad = FirstMismatch(
        t, result, count, [&](uint64_t k) { return Expected(t, j.op, n, r * count + k); });
    Expect(bad < 0, what + " wrong at element " + std::to_string(bad));
  }
}

// Block j of rank r's sendbuf holds Value(r, j, k); block j of its recvbuf
// must receive Value(j, r, k).
void CheckAlltoall(plexus::Communicator& comm, DType t, uint64_t count) {
  const uint32_t n = comm.size(), r = comm.rank();
  const size_t es = plexus::ElementSize(t);
  auto value = [](uint32_t src, uint32_t dst, uint64_t k) {
    return int64_t((src * 29 + dst * 11 + k) % 97);
  };
  std::vector<uint8_t> send(n * count * es), recv(n * count * es, 0xEF);
  for (uint32_t j = 0; j < n; ++j) {
    for (uint64_t k = 0; k < count; ++k) Put(t, send.data(), j * count + k, value(r, j, k));
  }
  const std::string what = Name("alltoall", t, count, "");
  plexus::Work work = comm.alltoall(send.data(), recv.data(), count, t);
  if (!Finished(work, what)) return;
  const int64_t bad = FirstMismatch(
      t, recv, n * count, [&](uint64_t i) { return value(uint32_t(i / count), r, i % count); });
  Expect(bad < 0, what + " wrong at element " + std::to_string(bad));
}

// Ring exchange: every rank sends one message to each neighbour and receives
// one from each, all four posted before any is waited for. With 2 ranks both
// neighbours are the same rank: the messages then match in posting order.
void CheckSendRecv(plexus::Communicator& comm, DType t, uint64_t count) {
  const uint32_t n = comm.size(), r = comm.rank();
  if (n < 2) return;
  const size_t es = plexus::ElementSize(t);
  const uint32_t right = (r + 1) % n, left = (r + n - 1) % n;
  // dir 0: travelling right (to rank + 1), dir 1: travelling left.
  auto payload = [](uint32_t src, int dir, uint64_t k) {
    return int64_t((src * 13 + uint64_t(dir) * 41 + k) % 89);
  };
  std::vector<uint8_t> to_right(count * es), to_left(count * es);
  std::vector<uint8_t> from_left(count * es, 0xAB), from_right(count * es, 0xAB);
  for (uint64_t k = 0; k < count; ++k) {
    Put(t, to_right.data(), k, payload(r, 0, k));
    Put(t, to_left.data(), k, payload(r, 1, k));
  }
  plexus::Work works[4] = {
      comm.send(to_right.data(), count, t, right),
      comm.send(to_left.data(), count, t, left),
      comm.recv(from_left.data(), count, t, left),
      comm.recv(from_right.data(), count, t, right),
  };
  const char* names[4] = {"send to right", "send to left", "recv from left", "recv from right"};
  bool ok[4];
  for (int i = 0; i < 4; ++i) ok[i] = Finished(works[i], Name("send/recv", t, count, names[i]));
  if (ok[2]) {
    const int64_t bad =
        FirstMismatch(t, from_left, count, [&](uint64_t k) { return payload(left, 0, k); });
    Expect(bad < 0,
           Name("send/recv", t, count, "from left") + " wrong at element " + std::to_string(bad));
  }
  if (ok[3]) {
    const int64_t bad =
        FirstMismatch(t, from_right, count, [&](uint64_t k) { return payload(right, 1, k); });
    Expect(bad < 0,
           Name("send/recv", t, count, "from right") + " wrong at element " + std::to_string(bad));
  }
}

// A 0-count message to the right neighbour, and one from the left.
void CheckEmptyMessage(plexus::Communicator& comm) {
  const uint32_t n = comm.size(), r = comm.rank();
  if (n < 2) return;
  plexus::Work s = comm.send(nullptr, 0, DType::Float32, (r + 1) % n);
  plexus::Work v = comm.recv(nullptr, 0, DType::Float32, (r + n - 1) % n);
  Expect(Finished(s, "send of 0 elements"), "send of 0 elements");
  Expect(Finished(v, "recv of 0 elements"), "recv of 0 elements");
}

// Completion in posting order (backend.h): a barrier posted after a
// reduce_scatter completes after it, so when the barrier's wait() returns
// the reduce_scatter has completed. (The mpi backend's own runner once
// completed the barrier first.)
void CheckPostingOrder(plexus::Communicator& comm, uint64_t count) {
  const uint32_t n = comm.size();
  std::vector<float> send(count * n, 1.0f), recv(count, 0.0f);
  int early = 0;
  for (int i = 0; i < 10; ++i) {
    plexus::Work rs =
        comm.reduce_scatter(send.data(), recv.data(), count, DType::Float32, ReduceOp::Sum);
    plexus::Work b = comm.barrier();
    b.wait();
    if (!rs.test()) ++early;
    rs.wait();
  }
  Expect(early == 0, "a barrier posted after a reduce_scatter of " + std::to_string(count) +
                         " float32 per rank completed before it (" + std::to_string(early) +
                         " of 10)");
  // The other way round: a reduce_scatter (two-level under PLEXUS_HIERARCHY=on)
  // posted after an alltoall, which never goes in two levels, completes after it.
  if (!comm.supports(PLEXUS_COLL_ALLTOALL)) return;
  std::vector<float> a_send(count * n * 4, 1.0f), a_recv(count * n * 4);
  int ahead = 0;
  for (int i = 0; i < 10; ++i) {
    plexus::Work a = comm.alltoall(a_send.data(), a_recv.data(), count * 4, DType::Float32);
    plexus::Work rs =
        comm.reduce_scatter(send.data(), recv.data(), count, DType::Float32, ReduceOp::Sum);
    rs.wait();
    if (!a.test()) ++ahead;
    a.wait();
  }
  Expect(ahead == 0, "a reduce_scatter of " + std::to_string(count) +
                         " float32 per rank posted after an alltoall completed before it (" +
                         std::to_string(ahead) + " of 10)");
}

}  // namespace

// A value of rank r at element i: random sign, mantissa and magnitude
// (10^-3 .. 10^3), so that float sums round differently in other orders.
double Inexact(uint32_t r, uint64_t i) {
  uint64_t h = (uint64_t(r) + 1) * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  const double unit = double(h >> 11) / double(1ull << 53) * 2 - 1;
  static const double kScale[] = {1e-3, 1e-2, 0.1, 1, 10, 100, 1000};
  return unit * kScale[h % 7];
}

template <class F>
void CheckSameBits(plexus::Communicator& comm, DType t, uint64_t count, ReduceOp op) {
  const std::string what = std::string("same bits: allreduce ") + plexus::ToString(t) + " " +
                           plexus::ToString(op) + " of " + std::to_string(count);
  const uint32_t n = comm.size();
  std::vector<F> buf(count);
  for (uint64_t i = 0; i < count; ++i) buf[i] = F(Inexact(comm.rank(), i));
  uint64_t hash = 1469598103934665603ull;
  try {
    comm.allreduce(buf.data(), buf.data(), count, t, op).wait();
    hash = plexus_check::Fnv1a(buf.data(), count * sizeof(F), hash);
    std::vector<uint64_t> hashes(n);
    comm.allgather(&hash, hashes.data(), 1, DType::UInt64).wait();
    uint32_t differ = n;
    for (uint32_t r = 0; r < n && differ == n; ++r) {
      if (hashes[r] != hash) differ = r;
    }
    Expect(differ == n, what + ": rank " + std::to_string(differ) + "'s result has other bits");
  } catch (const plexus::Error& e) {
    Expect(false, what + ": " + e.what());
    return;
  }
  // Within rounding of the exact sum: n roundings of float's epsilon each,
  // relative to the sum of magnitudes.
  const double eps = sizeof(F) == 4 ? 6e-8 : 1.2e-16;
  int64_t bad = -1;
  for (uint64_t i = 0; i < count && bad < 0; ++i) {
    double exact = 0, magnitude = 0;
    for (uint32_t r = 0; r < n; ++r) {
      exact += double(F(Inexact(r, i)));
      magnitude += std::abs(double(F(Inexact(r, i))));
    }
    if (op == ReduceOp::Avg) exact /= n, magnitude /= n;
    if (std::abs(double(buf[i]) - exact) > 4 * n * eps * magnitude) bad = int64_t(i);
  }
  Expect(bad < 0, what + ": not the sum at element " + std::to_string(bad));
}

int main(int argc, char** argv) {
  uint64_t large_bytes = 4u << 20;
  bool same_bits = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--large-bytes" && i + 1 < argc) {
      large_bytes = std::strtoull(argv[++i], nullptr, 10);
    } else if (std::string(argv[i]) == "--same-bits") {
      same_bits = true;
    } else {
      std::fprintf(stderr, "usage: collectives_check [--large-bytes N] [--same-bits]\n");
      return 2;
    }
  }
  try {
    auto comm = plexus::Communicator::from_env();
    plexus_check::rank = comm.rank();
    const uint32_t n = comm.size();
    const bool reduce = Supported(comm, PLEXUS_COLL_REDUCE, "reduce");
    const bool reduce_scatter = Supported(comm, PLEXUS_COLL_REDUCE_SCATTER, "reduce_scatter");
    const bool alltoall = Supported(comm, PLEXUS_COLL_ALLTOALL, "alltoall");
    const bool send_recv =
        Supported(comm, PLEXUS_COLL_SEND, "send") && Supported(comm, PLEXUS_COLL_RECV, "recv");
    std::vector<uint32_t> all_roots;
    for (uint32_t root = 0; root < n; ++root) all_roots.push_back(root);
    const std::vector<ReduceOp> all_ops(std::begin(plexus::kAllReduceOps),
                                        std::end(plexus::kAllReduceOps));
    uint32_t index = 0;  // of the dtype, to spread the large-size variants
    for (DType t : plexus::kAllDTypes) {
      const size_t es = plexus::ElementSize(t);
      const uint64_t large = large_bytes / es;
      const uint64_t counts[] = {0, 1, 1009, large};
      for (uint64_t count : counts) {
        CheckAllreduce(comm, t, count, false);
        CheckAllreduce(comm, t, count, true);
        CheckBroadcast(comm, t, count);
        CheckAllgather(comm, t, count, false);
        CheckAllgather(comm, t, count, true);
        if (count != large) {
          if (reduce) {
            CheckReduce(comm, t, count, false, all_roots);
            CheckReduce(comm, t, count, true, all_roots);
          }
          if (reduce_scatter) {
            CheckReduceScatter(comm, t, count, false, all_ops);
            CheckReduceScatter(comm, t, count, true, all_ops);
          }
          if (alltoall) CheckAlltoall(comm, t, count);
          if (send_recv && count > 0) CheckSendRecv(comm, t, count);
        } else {
          const bool in_place = index % 2 == 1;
          if (reduce) CheckReduce(comm, t, count, in_place, {index % n});
          if (reduce_scatter) CheckReduceScatter(comm, t, large / n, in_place, all_ops);
          if (alltoall) CheckAlltoall(comm, t, large / n);
          if (send_recv) CheckSendRecv(comm, t, count);
        }
      }
      comm.barrier().wait();
      ++index;
    }
    if (send_recv) CheckEmptyMessage(comm);
    if (reduce_scatter) {
      for (uint64_t count : {uint64_t(1), uint64_t(1) << 18}) CheckPostingOrder(comm, count);
    }
    if (same_bits) {
      for (uint64_t count : {uint64_t(1), uint64_t(1009), uint64_t(100003), large_bytes / 4 + 3}) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
          CheckSameBits<float>(comm, DType::Float32, count, op);
          CheckSameBits<double>(comm, DType::Float64, count, op);
        }
      }
    }
    for (int i = 0; i < 10; ++i) comm.barrier().wait();
    std::printf("rank %u of %u (%s): %d checks passed, %d failed\n", comm.rank(), comm.size(),
                comm.backend_name().c_str(), plexus_check::passes, plexus_check::failures);
  } catch (const plexus::Error& e) {
    std::fprintf(stderr, "rank %u: %s\n", plexus_check::rank, e.what());
    return 1;
  }
  return plexus_check::failures == 0 ? 0 : 1;
}
