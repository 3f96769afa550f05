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
// Prints "gpu_collectives: rank R: N checks passed" and exits 0, or the first
// failures and exits 1.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "plexus/algos/half.hpp"
#include "plexus/plexus.hpp"

namespace {

using plexus::DType;
using plexus::ReduceOp;

int g_checks = 0;
int g_failures = 0;
uint32_t g_rank = 0;

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

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
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
              g_checks - g_failures, g_failures);
  std::fflush(stdout);
  return g_failures == 0 ? 0 : 1;
}
