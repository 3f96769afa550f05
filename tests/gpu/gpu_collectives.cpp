// Every collective of the NCCL backend on CUDA device buffers, checked
// exactly, under plexus-run (PLEXUS_BACKEND=nccl). Inputs are small integers
// whose sums, products and averages are exact in every dtype (float16 and
// bfloat16 included) and in any order of reduction.
//
//   gpu_collectives                 the battery (any world size; send/recv from 2):
//                                   every collective, stream ordering on the caller's
//                                   stream, in-order completion (count 0 included),
//                                   200 requests in flight, alltoall in a loop, wait(0);
//                                   at world size 1 then abort (posts fail ABORTED)
//   gpu_collectives --abort         2 ranks: comm.abort() from another thread ends a pending
//                                   allreduce promptly with ABORTED
//   gpu_collectives --dead-peer     2 ranks: rank 1 leaves; rank 0's allreduce fails within
//                                   its timeout, naming what it waited for
//   gpu_collectives --abi12 PLUGIN  without plexus-run: ABI 1.2 through the NCCL plugin's
//                                   table, one thread and GPU per rank (up to 3): gather,
//                                   scatter, allgatherv, alltoallv (uneven, zeros, in place),
//                                   allreduce_coalesced, comm_split (reversed keys, a rank
//                                   without a color at 3 ranks), checked exactly
// Prints "gpu_collectives: rank R: N checks passed" and exits 0, or the first
// failures and exits 1.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plexus/algos/half.hpp"
#include "plexus/plexus.hpp"

namespace {

using plexus::DType;
using plexus::ReduceOp;

std::atomic<int> g_checks{0};  // (--abi12 checks on one thread per rank)
std::atomic<int> g_failures{0};
thread_local uint32_t g_rank = 0;

void Check(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    std::fprintf(stderr, "gpu_collectives: rank %u: FAIL %s\n", g_rank, what.c_str());
  }
}

void Cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "gpu_collectives: rank %u: %s: %s\n", g_rank, what, cudaGetErrorString(e));
    std::exit(1);
  }
}

size_t SizeOf(DType t) {
  switch (t) {
    case DType::Int8:
    case DType::UInt8:
      return 1;
    case DType::Int16:
    case DType::UInt16:
    case DType::Float16:
    case DType::BFloat16:
      return 2;
    case DType::Int32:
    case DType::UInt32:
    case DType::Float32:
      return 4;
    default:
      return 8;
  }
}

const char* Name(DType t) {
  static const char* const n[] = {"?",        "int8",    "uint8",  "int16",  "uint16",
                                  "int32",    "uint32",  "int64",  "uint64", "float16",
                                  "bfloat16", "float32", "float64"};
  return n[uint32_t(t)];
}

// Encodes v (a small integer or half-integer) as one element of t.
void Put(DType t, void* at, double v) {
  switch (t) {
    case DType::Int8:
      *static_cast<int8_t*>(at) = int8_t(v);
      break;
    case DType::UInt8:
      *static_cast<uint8_t*>(at) = uint8_t(v);
      break;
    case DType::Int16:
      *static_cast<int16_t*>(at) = int16_t(v);
      break;
    case DType::UInt16:
      *static_cast<uint16_t*>(at) = uint16_t(v);
      break;
    case DType::Int32:
      *static_cast<int32_t*>(at) = int32_t(v);
      break;
    case DType::UInt32:
      *static_cast<uint32_t*>(at) = uint32_t(v);
      break;
    case DType::Int64:
      *static_cast<int64_t*>(at) = int64_t(v);
      break;
    case DType::UInt64:
      *static_cast<uint64_t*>(at) = uint64_t(v);
      break;
    case DType::Float16:
      *static_cast<uint16_t*>(at) = plexus::algos::FloatToFloat16(float(v));
      break;
    case DType::BFloat16:
      *static_cast<uint16_t*>(at) = plexus::algos::FloatToBFloat16(float(v));
      break;
    case DType::Float32:
      *static_cast<float*>(at) = float(v);
      break;
    case DType::Float64:
      *static_cast<double*>(at) = v;
      break;
  }
}

// Device buffer of count elements of t, filled from host values.
struct DeviceBuf {
  void* p = nullptr;
  size_t bytes = 0;
  DeviceBuf(size_t b) : bytes(b) { Cuda(cudaMalloc(&p, b ? b : 1), "cudaMalloc"); }
  ~DeviceBuf() { cudaFree(p); }
  void Load(const std::vector<uint8_t>& h) {
    Cuda(cudaMemcpy(p, h.data(), h.size(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> h(bytes);
    Cuda(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return h;
  }
};

std::vector<uint8_t> Encode(DType t, size_t count, const std::function<double(size_t)>& f) {
  std::vector<uint8_t> h(count * SizeOf(t));
  for (size_t i = 0; i < count; ++i) Put(t, h.data() + i * SizeOf(t), f(i));
  return h;
}

// Rank r's element i: 1..9, so that products over a few ranks stay exact.
double Input(uint32_t r, size_t i, ReduceOp op) {
  if (op == ReduceOp::Prod) return double(1 + (r + i) % 2);  // 1 or 2
  return double(1 + (r * 3 + i) % 9);
}

double Reduced(ReduceOp op, uint32_t n, size_t i, bool integer) {
  double acc = Input(0, i, op);
  for (uint32_t r = 1; r < n; ++r) {
    const double v = Input(r, i, op);
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
  if (op == ReduceOp::Avg) acc = integer ? std::trunc(acc / n) : acc / n;
  return acc;
}

bool IsInteger(DType t) {
  return t != DType::Float16 && t != DType::BFloat16 && t != DType::Float32 && t != DType::Float64;
}

const char* OpName(ReduceOp op) {
  static const char* const n[] = {"?", "sum", "prod", "min", "max", "avg"};
  return n[uint32_t(op)];
}

void Battery(plexus::Communicator& comm, int device) {
  const uint32_t n = comm.size(), me = comm.rank();
  plexus_placement where{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, device, 0, nullptr};
  const std::vector<DType> all = {DType::Int8,    DType::UInt8,    DType::Int16,   DType::UInt16,
                                  DType::Int32,   DType::UInt32,   DType::Int64,   DType::UInt64,
                                  DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
  const std::vector<ReduceOp> ops = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max,
                                     ReduceOp::Avg};
  for (size_t count : {size_t(1), size_t(1000), size_t(1) << 20}) {
    for (DType t : all) {
      const size_t es = SizeOf(t);
      const std::string tag = std::string(Name(t)) + " x" + std::to_string(count);
      const bool reducible = t != DType::Int16 && t != DType::UInt16;
      // allreduce, every op, out of place and in place
      for (ReduceOp op : ops) {
        if (!reducible) break;
        if (op == ReduceOp::Avg && (n & (n - 1)) != 0 && !IsInteger(t)) continue;  // 1/n inexact
        auto in = Encode(t, count, [&](size_t i) { return Input(me, i, op); });
        auto want = Encode(t, count, [&](size_t i) { return Reduced(op, n, i, IsInteger(t)); });
        DeviceBuf s(in.size()), r(in.size());
        s.Load(in);
        comm.allreduce(s.p, r.p, count, t, op, &where).wait();
        Check(r.Read() == want, "allreduce " + std::string(OpName(op)) + " " + tag);
        comm.allreduce(s.p, s.p, count, t, op, &where).wait();
        Check(s.Read() == want, "allreduce in place " + std::string(OpName(op)) + " " + tag);
      }
      if (!reducible) {
        bool refused = false;
        DeviceBuf s(count * es);
        try {
          comm.allreduce(s.p, s.p, count, t, ReduceOp::Sum, &where).wait();
        } catch (const plexus::Error& e) {
          refused = e.status() == PLEXUS_ERR_UNSUPPORTED;
        }
        Check(refused, "allreduce of " + tag + " is UNSUPPORTED");
      }
      // broadcast from the last rank
      {
        const uint32_t root = n - 1;
        auto mine = Encode(t, count, [&](size_t i) { return Input(me, i, ReduceOp::Sum); });
        auto want = Encode(t, count, [&](size_t i) { return Input(root, i, ReduceOp::Sum); });
        DeviceBuf b(mine.size());
        b.Load(mine);
        comm.broadcast(b.p, count, t, root, &where).wait();
        Check(b.Read() == want, "broadcast " + tag);
      }
      // reduce (sum) to rank 0
      if (reducible) {
        auto in = Encode(t, count, [&](size_t i) { return Input(me, i, ReduceOp::Sum); });
        auto want = Encode(t, count, [&](size_t i) { return Reduced(ReduceOp::Sum, n, i, true); });
        DeviceBuf s(in.size()), r(in.size());
        s.Load(in);
        comm.reduce(s.p, me == 0 ? r.p : nullptr, count, t, ReduceOp::Sum, 0, &where).wait();
        if (me == 0) Check(r.Read() == want, "reduce " + tag);
      }
      // allgather, out of place and in place
      {
        auto in = Encode(t, count, [&](size_t i) { return Input(me, i, ReduceOp::Sum); });
        std::vector<uint8_t> want;
        for (uint32_t r = 0; r < n; ++r) {
          auto part = Encode(t, count, [&](size_t i) { return Input(r, i, ReduceOp::Sum); });
          want.insert(want.end(), part.begin(), part.end());
        }
        DeviceBuf s(in.size()), r(in.size() * n);
        s.Load(in);
        comm.allgather(s.p, r.p, count, t, &where).wait();
        Check(r.Read() == want, "allgather " + tag);
        DeviceBuf ip(in.size() * n);
        Cuda(cudaMemcpy(static_cast<uint8_t*>(ip.p) + me * in.size(), in.data(), in.size(),
                        cudaMemcpyHostToDevice),
             "cudaMemcpy");
        comm.allgather(static_cast<uint8_t*>(ip.p) + me * in.size(), ip.p, count, t, &where).wait();
        Check(ip.Read() == want, "allgather in place " + tag);
      }
      // reduce_scatter (sum)
      if (reducible) {
        auto in = Encode(t, count * n, [&](size_t i) { return Input(me, i, ReduceOp::Sum); });
        auto want = Encode(
            t, count, [&](size_t i) { return Reduced(ReduceOp::Sum, n, me * count + i, true); });
        DeviceBuf s(in.size()), r(count * es);
        s.Load(in);
        comm.reduce_scatter(s.p, r.p, count, t, ReduceOp::Sum, &where).wait();
        Check(r.Read() == want, "reduce_scatter " + tag);
      }
      // alltoall: block j of rank r holds r*10 + j + 1 (mod a small range)
      {
        auto val = [&](uint32_t from, uint32_t to, size_t i) {
          return double(1 + (from * 5 + to * 3 + i) % 11);
        };
        std::vector<uint8_t> in, want;
        for (uint32_t j = 0; j < n; ++j) {
          auto b = Encode(t, count, [&](size_t i) { return val(me, j, i); });
          in.insert(in.end(), b.begin(), b.end());
          auto w = Encode(t, count, [&](size_t i) { return val(j, me, i); });
          want.insert(want.end(), w.begin(), w.end());
        }
        DeviceBuf s(in.size()), r(in.size());
        s.Load(in);
        comm.alltoall(s.p, r.p, count, t, &where).wait();
        Check(r.Read() == want, "alltoall " + tag);
      }
      // send/recv around the ring
      if (n >= 2) {
        const uint32_t next = (me + 1) % n, prev = (me + n - 1) % n;
        auto out = Encode(t, count, [&](size_t i) { return Input(me, i, ReduceOp::Sum); });
        auto want = Encode(t, count, [&](size_t i) { return Input(prev, i, ReduceOp::Sum); });
        DeviceBuf s(out.size()), r(out.size());
        s.Load(out);
        // Every rank posts its send before its recv, and waits for neither
        // before both are posted: the ABI allows it, and NCCL's ncclSend and
        // ncclRecv issued one by one would deadlock on it (each blocks on the
        // GPU until matched). The backend launches them as one group.
        plexus::Work a = comm.send(s.p, count, t, next, &where);
        plexus::Work b = comm.recv(r.p, count, t, prev, &where);
        a.wait();
        b.wait();
        Check(r.Read() == want, "send/recv, both ranks send first " + tag);
        // The same, waiting for the recv first, then driving it by test().
        DeviceBuf r2(out.size());
        plexus::Work c = comm.send(s.p, count, t, next, &where);
        plexus::Work d = comm.recv(r2.p, count, t, prev, &where);
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!d.test() && std::chrono::steady_clock::now() < give_up) {
        }
        Check(d.completed(), "send/recv completes through test() alone " + tag);
        c.wait();
        Check(r2.Read() == want, "send/recv, recv waited first " + tag);
        // Posted sends/recvs launch when a collective is posted after them,
        // ahead of it in stream order.
        DeviceBuf r3(out.size());
        DeviceBuf one(4);
        plexus::Work e = comm.send(s.p, count, t, next, &where);
        plexus::Work f = comm.recv(r3.p, count, t, prev, &where);
        plexus::Work g = comm.allreduce(one.p, one.p, 1, DType::Float32, ReduceOp::Sum, &where);
        g.wait();
        f.wait();
        e.wait();
        Check(r3.Read() == want, "send/recv then a collective, nothing waited in between " + tag);
      }
    }
  }
  comm.barrier().wait();
  Check(true, "barrier");
  {
    DeviceBuf z(4);
    comm.allreduce(z.p, z.p, 0, DType::Float32, ReduceOp::Sum, &where).wait();
    Check(true, "count 0 allreduce completes");
  }
  // Stream ordering with the caller's stream. With PLEXUS_CAP_STREAM_ORDERED
  // "complete" means "enqueued on the stream", so the results may be read
  // only after wait(), and then only by work ordered on the same stream
  // (here a copy, then a synchronisation of that stream alone). Out of
  // place, into a buffer poisoned on the stream first: at world size 1 too
  // NCCL must really copy the input (an in-place sum over one rank is a
  // no-op and could not fail), so any reordering shows.
  {
    cudaStream_t st;
    Cuda(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreate");
    const size_t count = size_t(1) << 22;
    std::vector<float> out(count, -1.f);
    DeviceBuf d(count * 4), r(count * 4);
    plexus_placement on{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, device, 0, st};
    for (int round = 0; round < 3; ++round) {
      std::vector<float> in(count, float(me + 1 + round));
      Cuda(cudaMemcpyAsync(d.p, in.data(), count * 4, cudaMemcpyHostToDevice, st), "H2D");
      Cuda(cudaMemsetAsync(r.p, 0xff, count * 4, st), "cudaMemsetAsync");  // NaN
      plexus::Work w = comm.allreduce(d.p, r.p, count, DType::Float32, ReduceOp::Sum, &on);
      w.wait();
      Cuda(cudaMemcpyAsync(out.data(), r.p, count * 4, cudaMemcpyDeviceToHost, st), "D2H");
      Cuda(cudaStreamSynchronize(st), "cudaStreamSynchronize");
      const float want = float(n) * float(n + 1) / 2 + float(n) * float(round);
      bool ok = true;
      for (float v : out) ok = ok && v == want;
      Check(ok, "allreduce ordered on the caller's stream, round " + std::to_string(round));
    }
    // In-order completion across streams: a caller-stream request posted
    // after an own-stream one completes only after it.
    DeviceBuf big(count * 4);
    Cuda(cudaMemset(big.p, 0, count * 4), "cudaMemset");
    plexus::Work a = comm.allreduce(big.p, big.p, count, DType::Float32, ReduceOp::Sum, &where);
    plexus::Work b = comm.allreduce(d.p, r.p, count, DType::Float32, ReduceOp::Sum, &on);
    b.wait();
    Check(a.test(), "an own-stream request completes before a later caller-stream one");
    a.wait();
    Cuda(cudaStreamSynchronize(st), "cudaStreamSynchronize");
    cudaStreamDestroy(st);
  }
  // A zero-count operation completes in posting order, not at once.
  {
    const size_t count = size_t(1) << 22;
    DeviceBuf big(count * 4);
    Cuda(cudaMemset(big.p, 0, count * 4), "cudaMemset");
    plexus::Work a = comm.allreduce(big.p, big.p, count, DType::Float32, ReduceOp::Sum, &where);
    DeviceBuf zb(4);
    plexus::Work z = comm.allreduce(zb.p, zb.p, 0, DType::Float32, ReduceOp::Sum, &where);
    z.wait();
    Check(a.test(), "a count-0 allreduce completes only after the one posted before it");
    a.wait();
  }
  // Many requests in flight (the event pool grows), waited in order.
  {
    DeviceBuf v(200 * 4);
    std::vector<float> ones(200, 1.f);
    Cuda(cudaMemcpy(v.p, ones.data(), 200 * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    std::vector<plexus::Work> works;
    for (int i = 0; i < 200; ++i) {
      works.push_back(comm.allreduce(static_cast<float*>(v.p) + i, static_cast<float*>(v.p) + i, 1,
                                     DType::Float32, ReduceOp::Max, &where));
    }
    bool ok = true;
    for (plexus::Work& w : works) {
      try {
        w.wait();
      } catch (const plexus::Error&) {
        ok = false;
      }
    }
    std::vector<float> back(200);
    Cuda(cudaMemcpy(back.data(), v.p, 200 * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (float x : back) ok = ok && x == 1.f;
    Check(ok, "200 allreduces posted back to back, then waited in order");
  }
  // alltoall again and again (one group per call; settled before the next).
  {
    const size_t count = 1000;
    std::vector<float> in(count * n), want(count * n);
    for (uint32_t j = 0; j < n; ++j) {
      for (size_t i = 0; i < count; ++i) {
        in[j * count + i] = float(me * 100 + j);
        want[j * count + i] = float(j * 100 + me);
      }
    }
    DeviceBuf s(in.size() * 4), r(in.size() * 4);
    Cuda(cudaMemcpy(s.p, in.data(), in.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    bool ok = true;
    for (int round = 0; round < 50 && ok; ++round) {
      Cuda(cudaMemset(r.p, 0, in.size() * 4), "cudaMemset");
      comm.alltoall(s.p, r.p, count, DType::Float32, &where).wait();
      std::vector<float> got(in.size());
      Cuda(cudaMemcpy(got.data(), r.p, got.size() * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
      ok = got == want;
    }
    Check(ok, "alltoall 50 times in a row");
  }
  // wait(0) polls: it returns (done) or says TIMEOUT (still pending), never
  // anything else.
  {
    const size_t count = size_t(1) << 22;
    DeviceBuf big(count * 4);
    Cuda(cudaMemset(big.p, 0, count * 4), "cudaMemset");
    plexus::Work w = comm.allreduce(big.p, big.p, count, DType::Float32, ReduceOp::Sum, &where);
    bool ok = true;
    for (int i = 0; i < 100000 && !w.completed(); ++i) {
      try {
        w.wait(std::chrono::milliseconds(0));
      } catch (const plexus::Error& e) {
        ok = ok && e.status() == PLEXUS_ERR_TIMEOUT;
        if (e.status() != PLEXUS_ERR_TIMEOUT) break;
      }
    }
    Check(ok, "wait(0) returns or says TIMEOUT, nothing else");
    w.wait();
  }
  // Host memory: refused with UNSUPPORTED that says so.
  {
    std::vector<float> h(16, 1.f);
    plexus_placement host{sizeof(plexus_placement), PLEXUS_MEMORY_HOST, -1, 0, nullptr};
    std::string msg;
    int32_t code = 0;
    try {
      comm.allreduce(h.data(), h.data(), h.size(), DType::Float32, ReduceOp::Sum, &host).wait();
    } catch (const plexus::Error& e) {
      code = e.status();
      msg = e.message();
    }
    Check(code == PLEXUS_ERR_UNSUPPORTED, "host placement is UNSUPPORTED (" + msg + ")");
    code = 0;
    try {
      comm.allreduce(h.data(), h.data(), h.size(), DType::Float32, ReduceOp::Sum, &where).wait();
    } catch (const plexus::Error& e) {
      code = e.status();
      msg = e.message();
    }
    Check(code == PLEXUS_ERR_UNSUPPORTED && msg.find("host memory") != std::string::npos,
          "a host pointer under a CUDA placement is UNSUPPORTED (" + msg + ")");
  }
}

// comm.abort() at world size 1, after the battery (it breaks the
// communicator): posts fail with ABORTED, a second abort is harmless, a
// request that completed before stays completed, a pending one ends ABORTED.
void AbortWorld1(plexus::Communicator& comm, int device) {
  plexus_placement where{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, device, 0, nullptr};
  const size_t count = size_t(1) << 22;
  DeviceBuf b(count * 4);
  Cuda(cudaMemset(b.p, 0, count * 4), "cudaMemset");
  plexus::Work done = comm.allreduce(b.p, b.p, 1, DType::Float32, ReduceOp::Sum, &where);
  done.wait();
  plexus::Work pending = comm.allreduce(b.p, b.p, count, DType::Float32, ReduceOp::Sum, &where);
  comm.abort();
  bool twice = true;
  try {
    comm.abort();
  } catch (...) {
    twice = false;
  }
  Check(twice, "a second abort() is harmless");
  int32_t code = 0;
  try {
    done.wait();
  } catch (const plexus::Error& e) {
    code = e.status();
  }
  Check(code == 0, "waiting on a request that completed before the abort still says OK");
  code = 0;
  try {
    pending.wait(std::chrono::milliseconds(10000));
  } catch (const plexus::Error& e) {
    code = e.status();
  }
  // It may have finished on the GPU before the abort took effect.
  Check(code == 0 || code == PLEXUS_ERR_ABORTED,
        "a request pending at abort ends OK or ABORTED (got " + std::to_string(code) + ")");
  code = 0;
  try {
    comm.allreduce(b.p, b.p, 1, DType::Float32, ReduceOp::Sum, &where).wait();
  } catch (const plexus::Error& e) {
    code = e.status();
  }
  Check(code == PLEXUS_ERR_ABORTED, "a post after abort fails with ABORTED");
}

int Abort(plexus::Communicator& comm, int device) {
  plexus_placement where{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, device, 0, nullptr};
  DeviceBuf b(4096);
  comm.barrier().wait();
  if (comm.rank() == 0) {
    plexus::Work w = comm.allreduce(b.p, b.p, 1024, DType::Float32, ReduceOp::Sum, &where);
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.abort();
    });
    const auto start = std::chrono::steady_clock::now();
    int32_t code = 0;
    try {
      w.wait();
    } catch (const plexus::Error& e) {
      code = e.status();
    }
    t.join();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - start)
                        .count();
    Check(code == PLEXUS_ERR_ABORTED, "pending allreduce ends ABORTED after comm.abort()");
    Check(ms < 5000, "... within 5 s (took " + std::to_string(ms) + " ms)");
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(2));  // never posts it
  }
  return 0;
}

int DeadPeer(plexus::Communicator& comm, int device) {
  plexus_placement where{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, device, 0, nullptr};
  DeviceBuf b(4096);
  comm.barrier().wait();
  if (comm.rank() != 0) return 0;  // leaves without the allreduce
  const auto start = std::chrono::steady_clock::now();
  int32_t code = 0;
  std::string msg;
  try {
    comm.allreduce(b.p, b.p, 1024, DType::Float32, ReduceOp::Sum, &where).wait();
  } catch (const plexus::Error& e) {
    code = e.status();
    msg = e.message();
  }
  const auto s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf("gpu_collectives: rank 0: the allreduce without its peer: %s\n", msg.c_str());
  Check(code == PLEXUS_ERR_TIMEOUT || code == PLEXUS_ERR_REMOTE,
        "allreduce with a departed peer fails with TIMEOUT or REMOTE");
  Check(s <= comm.timeout().count() / 1000 + 5,
        "... within the timeout (took " + std::to_string(s) + " s)");
  return 0;
}

// ---------------------------------------------------------------------------
// --abi12 PLUGIN: the collectives of ABI 1.2 and comm_split on CUDA memory,
// through the NCCL plugin's table (libplexus's Communicator does not post
// them yet). One process, one thread per rank and GPU (up to 3 ranks, one
// where there is one GPU), each with its own backend context; the host's
// out-of-band channel is shared memory between the threads.

// A group's out-of-band channel: its members meet at a barrier.
struct OobGroup {
  explicit OobGroup(uint32_t n) : size(n), sync(std::ptrdiff_t(n)) {}
  uint32_t size;
  std::barrier<> sync;
  std::mutex mutex;
  std::vector<uint8_t> buf;
};
// What the plugin gets as plexus_oob*: the group and this member's rank in it.
struct OobHandle {
  OobGroup* group;
  uint32_t rank;
};

int32_t OobAllgather(void*, plexus_oob* oob, const void* in, void* out, uint64_t bytes, int64_t) {
  auto* h = reinterpret_cast<OobHandle*>(oob);
  OobGroup& g = *h->group;
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.buf.size() < g.size * bytes) g.buf.resize(g.size * bytes);
    std::memcpy(g.buf.data() + h->rank * bytes, in, bytes);
  }
  g.sync.arrive_and_wait();
  std::memcpy(out, g.buf.data(), g.size * bytes);
  g.sync.arrive_and_wait();  // nobody writes the next round before all have read this one
  return PLEXUS_OK;
}

int32_t OobBroadcast(void*, plexus_oob* oob, void* buf, uint64_t bytes, uint32_t root, int64_t) {
  auto* h = reinterpret_cast<OobHandle*>(oob);
  OobGroup& g = *h->group;
  if (h->rank == root) {
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.buf.size() < bytes) g.buf.resize(bytes);
    std::memcpy(g.buf.data(), buf, bytes);
  }
  g.sync.arrive_and_wait();
  if (h->rank != root) std::memcpy(buf, g.buf.data(), bytes);
  g.sync.arrive_and_wait();
  return PLEXUS_OK;
}

void AbiLog(void*, int32_t level, const char* message) {
  if (level <= PLEXUS_LOG_WARN) std::fprintf(stderr, "gpu_collectives: plugin: %s\n", message);
}

uint8_t Pat(uint32_t from, uint32_t to, uint64_t i, size_t b) {
  return uint8_t(1 + from * 61 + to * 17 + i * 7 + b * 3);
}
void FillBlock(uint8_t* p, size_t es, uint64_t n, uint32_t from, uint32_t to) {
  for (uint64_t i = 0; i < n; ++i) {
    for (size_t b = 0; b < es; ++b) p[i * es + b] = Pat(from, to, i, b);
  }
}
bool BlockIs(const uint8_t* p, size_t es, uint64_t n, uint32_t from, uint32_t to) {
  for (uint64_t i = 0; i < n; ++i) {
    for (size_t b = 0; b < es; ++b) {
      if (p[i * es + b] != Pat(from, to, i, b)) return false;
    }
  }
  return true;
}
constexpr uint8_t kGuard = 0xA5;

struct AbiRank {
  const plexus_backend_v1* t;
  plexus_comm* comm;
  uint32_t rank, size;
  int device;
  plexus_placement where;

  std::string Error() const {
    char buf[1024] = "";
    t->comm_last_error(comm, buf, sizeof buf);
    return buf;
  }
  // Posts, waits, frees; true when the operation completed OK.
  template <typename PostFn>
  bool Run(const std::string& what, PostFn&& post) {
    plexus_request* req = nullptr;
    const int32_t rc = post(&req);
    if (rc != PLEXUS_OK) {
      Check(false, what + ": post returned " + std::to_string(rc) + " (" + Error() + ")");
      return false;
    }
    const int32_t w = t->wait(req, -1);
    if (w == PLEXUS_ERR_TIMEOUT && t->test(req) == PLEXUS_IN_PROGRESS) {
      std::fprintf(stderr, "gpu_collectives: rank %u: FAIL %s still pending; stopping\n", rank,
                   what.c_str());
      std::_Exit(1);
    }
    t->request_free(req);
    Check(w == PLEXUS_OK, what + ": wait returned " + std::to_string(w) + " (" + Error() + ")");
    return w == PLEXUS_OK;
  }
};

void AbiGatherScatter(AbiRank& a) {
  for (DType dt : {DType::Int8, DType::Int16, DType::Float16, DType::Int32, DType::Float64}) {
    const uint32_t d = uint32_t(dt);
    const size_t es = SizeOf(dt);
    for (uint64_t count : {0, 3, 1000}) {
      for (uint32_t root = 0; root < a.size; ++root) {
        for (bool in_place : {false, true}) {
          const std::string tag = std::string(Name(dt)) + " x" + std::to_string(count) + " root " +
                                  std::to_string(root) + (in_place ? " in place" : "");
          const bool is_root = a.rank == root;
          const uint64_t block = count * es;
          {
            std::vector<uint8_t> hs(block), hr(a.size * block + es, kGuard);
            FillBlock(hs.data(), es, count, a.rank, root);
            if (in_place && is_root) FillBlock(hr.data() + root * block, es, count, a.rank, root);
            DeviceBuf s(hs.size()), r(hr.size());
            s.Load(hs);
            r.Load(hr);
            const void* sp = in_place && is_root ? static_cast<uint8_t*>(r.p) + root * block : s.p;
            if (a.Run("gather " + tag,
                      [&](plexus_request** req) {
                        return a.t->gather(a.comm, sp, is_root ? r.p : nullptr, count, d, root,
                                           &a.where, req);
                      }) &&
                is_root) {
              const auto got = r.Read();
              bool ok = got[a.size * block] == kGuard;
              for (uint32_t j = 0; j < a.size; ++j) {
                ok = ok && BlockIs(got.data() + j * block, es, count, j, root);
              }
              Check(ok, "gather " + tag);
            }
          }
          {
            std::vector<uint8_t> hs(a.size * block), hr(block + es, kGuard);
            for (uint32_t j = 0; j < a.size; ++j) {
              FillBlock(hs.data() + j * block, es, count, root, j);
            }
            DeviceBuf s(hs.size()), r(hr.size());
            s.Load(hs);
            r.Load(hr);
            void* rp = in_place && is_root ? static_cast<uint8_t*>(s.p) + root * block : r.p;
            if (a.Run("scatter " + tag, [&](plexus_request** req) {
                  return a.t->scatter(a.comm, is_root ? s.p : nullptr, rp, count, d, root, &a.where,
                                      req);
                })) {
              bool ok = true;
              if (rp == r.p) {
                const auto got = r.Read();
                ok = BlockIs(got.data(), es, count, root, a.rank) && got[block] == kGuard;
              }
              if (is_root) ok = ok && s.Read() == hs;  // read, never written
              Check(ok, "scatter " + tag);
            }
          }
        }
      }
    }
  }
}

void AbiV(AbiRank& a) {
  const uint32_t n = a.size, me = a.rank;
  for (DType dt : {DType::UInt8, DType::UInt16, DType::BFloat16, DType::Float32, DType::Int64}) {
    const uint32_t d = uint32_t(dt);
    const size_t es = SizeOf(dt);
    for (uint32_t v = 0; v < 3; ++v) {
      const uint64_t scale = v == 2 ? 1000 : 1;
      // allgatherv: uneven counts with zeros, reversed layout, gaps; in place and not
      for (bool in_place : {false, true}) {
        const std::string tag =
            std::string(Name(dt)) + " variant " + std::to_string(v) + (in_place ? " in place" : "");
        std::vector<uint64_t> counts(n), displs(n);
        for (uint32_t j = 0; j < n; ++j) counts[j] = ((j + v) * 3) % 5 * scale;
        uint64_t pos = 1;
        for (uint32_t j = n; j-- > 0;) {
          displs[j] = pos;
          pos += counts[j] + 1;
        }
        std::vector<uint8_t> hr((pos + 1) * es, kGuard), hs(counts[me] * es);
        FillBlock(hs.data(), es, counts[me], me, 0);
        if (in_place) FillBlock(hr.data() + displs[me] * es, es, counts[me], me, 0);
        DeviceBuf s(hs.size()), r(hr.size());
        s.Load(hs);
        r.Load(hr);
        const void* sp = in_place ? static_cast<uint8_t*>(r.p) + displs[me] * es : s.p;
        if (a.Run("allgatherv " + tag, [&](plexus_request** req) {
              return a.t->allgatherv(a.comm, sp, counts[me], r.p, counts.data(), displs.data(), d,
                                     &a.where, req);
            })) {
          std::vector<uint8_t> want = hr;
          for (uint32_t j = 0; j < n; ++j)
            FillBlock(want.data() + displs[j] * es, es, counts[j], j, 0);
          Check(r.Read() == want, "allgatherv " + tag);
        }
      }
      // alltoallv: c(i, j) from rank i to rank j, zeros included
      {
        const std::string tag = std::string(Name(dt)) + " variant " + std::to_string(v);
        const auto c = [&](uint32_t i, uint32_t j) {
          return uint64_t((i * 2 + j + v) % 4) * scale;
        };
        std::vector<uint64_t> sc(n), sd(n), rc(n), rd(n);
        uint64_t pos = 0;
        for (uint32_t j = n; j-- > 0;) {
          sc[j] = c(me, j);
          sd[j] = pos;
          pos += sc[j] + 2;
        }
        std::vector<uint8_t> hs(pos * es, kGuard);
        pos = 1;
        for (uint32_t j = 0; j < n; ++j) {
          rc[j] = c(j, me);
          rd[j] = pos;
          pos += rc[j] + 1;
        }
        std::vector<uint8_t> hr((pos + 1) * es, kGuard);
        for (uint32_t j = 0; j < n; ++j) FillBlock(hs.data() + sd[j] * es, es, sc[j], me, j);
        DeviceBuf s(hs.size()), r(hr.size());
        s.Load(hs);
        r.Load(hr);
        if (a.Run("alltoallv " + tag, [&](plexus_request** req) {
              return a.t->alltoallv(a.comm, s.p, sc.data(), sd.data(), r.p, rc.data(), rd.data(), d,
                                    &a.where, req);
            })) {
          std::vector<uint8_t> want = hr;
          for (uint32_t j = 0; j < n; ++j) FillBlock(want.data() + rd[j] * es, es, rc[j], j, me);
          Check(r.Read() == want && s.Read() == hs, "alltoallv " + tag);
        }
      }
    }
  }
}

void AbiCoalesced(AbiRank& a) {
  for (DType dt : {DType::Int32, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      const std::vector<uint64_t> counts = {3, 0, 100000, 1};
      const uint32_t nb = uint32_t(counts.size());
      std::vector<std::unique_ptr<DeviceBuf>> sends, recvs;
      std::vector<const void*> sp(nb);
      std::vector<void*> rp(nb);
      for (uint32_t b = 0; b < nb; ++b) {
        sends.push_back(std::make_unique<DeviceBuf>(counts[b] * SizeOf(dt)));
        sends[b]->Load(Encode(dt, counts[b], [&](size_t i) { return Input(a.rank, i + b, op); }));
        if (b % 2 == 0) {  // in place
          sp[b] = rp[b] = sends[b]->p;
          recvs.push_back(nullptr);
        } else {
          recvs.push_back(std::make_unique<DeviceBuf>(counts[b] * SizeOf(dt)));
          sp[b] = sends[b]->p;
          rp[b] = recvs[b]->p;
        }
      }
      const std::string tag = std::string(Name(dt)) + " " + OpName(op);
      if (a.Run("allreduce_coalesced " + tag, [&](plexus_request** req) {
            return a.t->allreduce_coalesced(a.comm, sp.data(), rp.data(), counts.data(), nb,
                                            uint32_t(dt), uint32_t(op), &a.where, req);
          })) {
        bool ok = true;
        for (uint32_t b = 0; b < nb; ++b) {
          const auto want = Encode(
              dt, counts[b], [&](size_t i) { return Reduced(op, a.size, i + b, IsInteger(dt)); });
          ok = ok && (recvs[b] ? recvs[b]->Read() : sends[b]->Read()) == want;
        }
        Check(ok, "allreduce_coalesced " + tag);
      }
    }
  }
}

// A child works: an allgatherv of parent ranks in the host's order, a barrier.
void AbiChild(const plexus_backend_v1* t, plexus_comm* child, uint32_t parent_rank, int device,
              const std::vector<uint32_t>& members, const std::string& what) {
  AbiRank c{t,      child,
            0,      uint32_t(members.size()),
            device, {sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, device, 0, nullptr}};
  for (uint32_t k = 0; k < members.size(); ++k) {
    if (members[k] == parent_rank) c.rank = k;
  }
  std::vector<uint64_t> counts(c.size, 1), displs(c.size);
  for (uint32_t k = 0; k < c.size; ++k) displs[k] = k;
  DeviceBuf s(4), r(4 * c.size);
  const int32_t mine = int32_t(parent_rank);
  s.Load(std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(&mine),
                              reinterpret_cast<const uint8_t*>(&mine) + 4));
  if (c.Run(what + ": allgatherv", [&](plexus_request** req) {
        return t->allgatherv(child, s.p, 1, r.p, counts.data(), displs.data(), PLEXUS_DTYPE_INT32,
                             &c.where, req);
      })) {
    const auto got = r.Read();
    bool ok = true;
    for (uint32_t k = 0; k < c.size; ++k) {
      int32_t x = -1;
      std::memcpy(&x, got.data() + 4 * k, 4);
      ok = ok && x == int32_t(members[k]);
    }
    Check(ok, what + ": ranks in (key, parent rank) order");
  }
  c.Run(what + ": barrier", [&](plexus_request** req) { return t->barrier(child, req); });
}

// Rank `rank` of `size` (thread and GPU `rank`).
void AbiThread(const plexus_backend_v1* t, uint32_t rank, uint32_t size, OobGroup* world,
               OobGroup* pairs, OobGroup* everyone) {
  g_rank = rank;
  Cuda(cudaSetDevice(int(rank)), "cudaSetDevice");
  plexus_host_v1 host{};
  host.struct_size = sizeof host;
  host.abi_major = PLEXUS_ABI_MAJOR;
  host.abi_minor = PLEXUS_ABI_MINOR;
  host.log = AbiLog;
  host.oob_allgather = OobAllgather;
  host.oob_broadcast = OobBroadcast;
  host.local_address = "";
  plexus_backend_ctx* ctx = nullptr;
  if (t->init(&host, &ctx) != PLEXUS_OK) {
    Check(false, "init");
    return;
  }
  OobHandle handle{world, rank};
  plexus_comm_config_v1 cfg{};
  cfg.struct_size = sizeof cfg;
  cfg.rank = rank;
  cfg.size = size;
  cfg.local_rank = rank;
  cfg.local_size = size;
  cfg.device = int32_t(rank);
  cfg.timeout_ms = 20000;
  cfg.name = "gpu-abi12/world";
  cfg.oob = reinterpret_cast<plexus_oob*>(&handle);
  char why[1024] = "";
  plexus_comm* comm = nullptr;
  if (t->comm_create(ctx, &cfg, &comm, why, sizeof why) != PLEXUS_OK) {
    Check(false, std::string("comm_create: ") + why);
    t->finalize(ctx);
    return;
  }
  AbiRank a{t,    comm,      rank,
            size, int(rank), {sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, int(rank), 0, nullptr}};
  AbiGatherScatter(a);
  AbiV(a);
  AbiCoalesced(a);
  // comm_split: ranks 0 and 2 (or 0 and 1, or 0 alone) with reversed keys;
  // at 3 ranks rank 1 without a color.
  const bool joins = !(size == 3 && rank == 1);
  std::vector<uint32_t> members;
  for (uint32_t j = size; j-- > 0;) {
    if (!(size == 3 && j == 1)) members.push_back(j);  // key size - j: reversed
  }
  uint32_t new_rank = 0;
  for (uint32_t k = 0; k < members.size(); ++k) {
    if (members[k] == rank) new_rank = k;
  }
  OobHandle pair_handle{pairs, new_rank};
  plexus_comm_config_v1 child_cfg = cfg;
  child_cfg.rank = new_rank;
  child_cfg.size = uint32_t(members.size());
  child_cfg.name = "gpu-abi12/split";
  child_cfg.oob = reinterpret_cast<plexus_oob*>(&pair_handle);
  plexus_comm* child = nullptr;
  const int32_t rc = t->comm_split(comm, joins ? 0xF0000000u : PLEXUS_SPLIT_NO_COLOR, size - rank,
                                   joins ? &child_cfg : nullptr, &child, why, sizeof why);
  Check(rc == PLEXUS_OK && (child != nullptr) == joins, std::string("comm_split: ") + why);
  if (child) AbiChild(t, child, rank, int(rank), members, "split with reversed keys");
  // The parent afterwards, and a split that everyone joins in parent order.
  AbiChild(
      t, comm, rank, int(rank),
      [&] {
        std::vector<uint32_t> all(size);
        for (uint32_t j = 0; j < size; ++j) all[j] = j;
        return all;
      }(),
      "the parent after the split");
  OobHandle all_handle{everyone, rank};
  plexus_comm_config_v1 all_cfg = cfg;
  all_cfg.name = "gpu-abi12/split-all";
  all_cfg.oob = reinterpret_cast<plexus_oob*>(&all_handle);
  plexus_comm* whole = nullptr;
  Check(t->comm_split(comm, 3, 0, &all_cfg, &whole, why, sizeof why) == PLEXUS_OK && whole,
        std::string("comm_split, everyone: ") + why);
  if (whole) {
    AbiRank w{t, whole, rank, size, int(rank), a.where};
    AbiCoalesced(w);
    t->comm_destroy(whole);
  }
  if (child) t->comm_destroy(child);
  t->comm_destroy(comm);
  t->finalize(ctx);
}

int Abi12(const char* plugin) {
  void* lib = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "gpu_collectives: dlopen %s: %s\n", plugin, dlerror());
    return 1;
  }
  auto entry = reinterpret_cast<plexus_backend_get_v1_fn>(dlsym(lib, PLEXUS_BACKEND_ENTRY_V1));
  const plexus_backend_v1* t = nullptr;
  if (!entry || entry(PLEXUS_ABI_MINOR, &t) != PLEXUS_OK || !t || !t->gather || !t->comm_split) {
    std::fprintf(stderr, "gpu_collectives: %s has no ABI 1.2 table with comm_split\n", plugin);
    return 1;
  }
  int visible = 0;
  Cuda(cudaGetDeviceCount(&visible), "cudaGetDeviceCount");
  const uint32_t size = uint32_t(std::min(visible, 3));
  std::printf("gpu_collectives --abi12: %u rank(s) in one process, %s %s\n", size, t->name,
              t->version);
  OobGroup world(size), pairs(size == 3 ? 2 : size), everyone(size);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < size; ++r) {
    threads.emplace_back(AbiThread, t, r, size, &world, &pairs, &everyone);
  }
  for (auto& th : threads) th.join();
  std::printf("gpu_collectives --abi12: %d checks passed, %d failed\n",
              g_checks.load() - g_failures.load(), g_failures.load());
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--abi12") {
    if (argc != 3) {
      std::fprintf(stderr, "usage: gpu_collectives --abi12 /path/to/libplexus-nccl.so\n");
      return 2;
    }
    return Abi12(argv[2]);
  }
  plexus::CommunicatorOptions opts;
  if (mode == "--dead-peer") opts.timeout = std::chrono::seconds(8);
  plexus::Communicator comm = plexus::Communicator::from_env(opts);
  g_rank = comm.rank();
  // As the backend chooses: the local rank, or local rank % count where
  // each process sees fewer GPUs (per-rank CUDA_VISIBLE_DEVICES).
  int visible = 0;
  Cuda(cudaGetDeviceCount(&visible), "cudaGetDeviceCount");
  int device = int(comm.local_rank());
  if (device >= visible && visible > 0) device %= visible;
  Cuda(cudaSetDevice(device), "cudaSetDevice");
  if (comm.rank() == 0) {
    std::printf("gpu_collectives: %u rank(s), backend %s %s\n", comm.size(),
                comm.backend_name().c_str(), comm.backend_version().c_str());
  }
  if (mode == "--abort") {
    Abort(comm, device);
  } else if (mode == "--dead-peer") {
    DeadPeer(comm, device);
  } else {
    Battery(comm, device);
    if (comm.size() == 1) AbortWorld1(comm, device);
  }
  std::printf("gpu_collectives: rank %u: %d checks passed, %d failed\n", comm.rank(),
              g_checks.load() - g_failures.load(), g_failures.load());
  std::fflush(stdout);
  return g_failures == 0 ? 0 : 1;
}
