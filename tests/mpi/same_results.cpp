// Runs a fixed, deterministic set of collectives and writes what each rank
// received, raw, to OUTDIR/<collective>.<rank>, so that two runs of the same
// binary on different backends can be compared byte for byte
// (same_results.sh: plexus-run + tcp against mpirun + mpi).
//
//   same_results OUTDIR
//
// Every dtype x op for allreduce, reduce and reduce_scatter, in and out of
// place; broadcast; allgather (in and out of place); alltoall; a send/recv
// ring (2+ ranks). Counts 1 and 2500 (2500 crosses PLEXUS_DEBUG_MPI_MAX_COUNT=1000,
// which the test uses to exercise the MPI backend's chunking). Sums are exact
// in any order, but not always divisible by the world size, so AVG also checks
// that both backends divide once and truncate integers toward zero alike.
// A collective the backend does not support writes no file (rank 0 says so).
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "plexus/algos/half.hpp"
#include "plexus/plexus.hpp"

namespace {

using plexus::DType;
using plexus::ReduceOp;
namespace algos = plexus::algos;

bool IsUnsigned(DType t) {
  return t == DType::UInt8 || t == DType::UInt16 || t == DType::UInt32 || t == DType::UInt64;
}

void Put(DType t, uint8_t* buf, uint64_t i, int64_t v) {
  switch (t) {
    case DType::Int8:
      reinterpret_cast<int8_t*>(buf)[i] = int8_t(v);
      break;
    case DType::UInt8:
      buf[i] = uint8_t(v);
      break;
    case DType::Int16: {
      int16_t x = int16_t(v);
      std::memcpy(buf + 2 * i, &x, 2);
      break;
    }
    case DType::UInt16: {
      uint16_t x = uint16_t(v);
      std::memcpy(buf + 2 * i, &x, 2);
      break;
    }
    case DType::Int32: {
      int32_t x = int32_t(v);
      std::memcpy(buf + 4 * i, &x, 4);
      break;
    }
    case DType::UInt32: {
      uint32_t x = uint32_t(v);
      std::memcpy(buf + 4 * i, &x, 4);
      break;
    }
    case DType::Int64:
      std::memcpy(buf + 8 * i, &v, 8);
      break;
    case DType::UInt64: {
      uint64_t x = uint64_t(v);
      std::memcpy(buf + 8 * i, &x, 8);
      break;
    }
    case DType::Float16: {
      uint16_t x = algos::FloatToFloat16(float(v));
      std::memcpy(buf + 2 * i, &x, 2);
      break;
    }
    case DType::BFloat16: {
      uint16_t x = algos::FloatToBFloat16(float(v));
      std::memcpy(buf + 2 * i, &x, 2);
      break;
    }
    case DType::Float32: {
      float x = float(v);
      std::memcpy(buf + 4 * i, &x, 4);
      break;
    }
    case DType::Float64: {
      double x = double(v);
      std::memcpy(buf + 8 * i, &x, 8);
      break;
    }
  }
}

// Rank r's input at element i for op: small values whose reduction is exact.
int64_t Input(DType t, ReduceOp op, uint32_t r, uint64_t i) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: {
      const int64_t v = int64_t((i * 7 + r * 3) % 11);
      return IsUnsigned(t) ? v : v - 6;  // signed sums are often negative
    }
    case ReduceOp::Prod:
      if (!IsUnsigned(t) && (i + r) % 5 == 1) return -1;
      return (i * 3 + r) % 4 == 0 ? 2 : 1;
    case ReduceOp::Min:
    case ReduceOp::Max: {
      const int64_t v = int64_t((i * 13 + r * 29) % 50);
      return IsUnsigned(t) ? v : v - 25;
    }
  }
  return 0;
}

class Output {
 public:
  Output(std::string dir, uint32_t rank) : dir_(std::move(dir)), rank_(rank) {}
  // Appends bytes to OUTDIR/<coll>.<rank>.
  void Write(const std::string& coll, const std::vector<uint8_t>& bytes) {
    const std::string path = dir_ + "/" + coll + "." + std::to_string(rank_);
    FILE* f = std::fopen(path.c_str(), "ab");
    if (!f || (bytes.size() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())) {
      throw std::runtime_error("cannot write " + path);
    }
    std::fclose(f);
  }
  // Creates the file even when this rank has nothing to write (reduce off root).
  void Touch(const std::string& coll) { Write(coll, {}); }

 private:
  std::string dir_;
  uint32_t rank_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: same_results OUTDIR\n");
    return 2;
  }
  try {
    auto comm = plexus::Communicator::from_env();
    const uint32_t n = comm.size(), r = comm.rank();
    std::printf("rank %u of %u: backend %s\n", r, n, comm.backend_name().c_str());
    Output out(argv[1], r);
    std::set<plexus_collective_t> said;
    auto supported = [&](plexus_collective_t c, const char* name) {
      if (comm.supports(c)) return true;
      if (r == 0 && said.insert(c).second) {
        std::printf("skipped %s: not supported by %s\n", name, comm.backend_name().c_str());
      }
      return false;
    };
    const uint64_t counts[] = {1, 2500};

    for (DType t : plexus::kAllDTypes) {
      const size_t es = plexus::ElementSize(t);
      for (uint64_t count : counts) {
        const uint64_t bytes = count * es;
        // allreduce, out of place then in place
        for (ReduceOp op : plexus::kAllReduceOps) {
          std::vector<uint8_t> send(bytes), recv(bytes);
          for (uint64_t i = 0; i < count; ++i) Put(t, send.data(), i, Input(t, op, r, i));
          comm.allreduce(send.data(), recv.data(), count, t, op).wait();
          comm.allreduce(send.data(), send.data(), count, t, op).wait();
          out.Write("allreduce", recv);
          out.Write("allreduce", send);
        }
        // broadcast from the last rank
        {
          std::vector<uint8_t> buf(bytes);
          for (uint64_t i = 0; i < count; ++i) {
            Put(t, buf.data(), i, r == n - 1 ? int64_t((i * 5) % 100) : 0);
          }
          comm.broadcast(buf.data(), count, t, n - 1).wait();
          out.Write("broadcast", buf);
        }
        // allgather, out of place then in place
        {
          std::vector<uint8_t> send(bytes), recv(n * bytes), inplace(n * bytes);
          for (uint64_t i = 0; i < count; ++i) {
            Put(t, send.data(), i, int64_t((r * 17 + i) % 100));
            Put(t, inplace.data() + r * bytes, i, int64_t((r * 19 + i) % 100));
          }
          comm.allgather(send.data(), recv.data(), count, t).wait();
          comm.allgather(inplace.data() + r * bytes, inplace.data(), count, t).wait();
          out.Write("allgather", recv);
          out.Write("allgather", inplace);
        }
        if (supported(PLEXUS_COLL_REDUCE, "reduce")) {
          const uint32_t root = 1 % n;
          for (ReduceOp op : plexus::kAllReduceOps) {
            std::vector<uint8_t> send(bytes), recv(bytes);
            for (uint64_t i = 0; i < count; ++i) Put(t, send.data(), i, Input(t, op, r, i));
            comm.reduce(send.data(), r == root ? recv.data() : nullptr, count, t, op, root).wait();
            comm.reduce(send.data(), send.data(), count, t, op, root).wait();  // in place on root
            if (r == root) {
              out.Write("reduce", recv);
              out.Write("reduce", send);
            } else {
              out.Touch("reduce");
            }
          }
        }
        if (supported(PLEXUS_COLL_REDUCE_SCATTER, "reduce_scatter")) {
          for (ReduceOp op : plexus::kAllReduceOps) {
            std::vector<uint8_t> send(n * bytes), recv(bytes);
            for (uint64_t g = 0; g < n * count; ++g) Put(t, send.data(), g, Input(t, op, r, g));
            comm.reduce_scatter(send.data(), recv.data(), count, t, op).wait();
            comm.reduce_scatter(send.data(), send.data() + r * bytes, count, t, op).wait();
            out.Write("reduce_scatter", recv);
            out.Write("reduce_scatter", std::vector<uint8_t>(send.begin() + r * bytes,
                                                             send.begin() + (r + 1) * bytes));
          }
        }
        if (supported(PLEXUS_COLL_ALLTOALL, "alltoall")) {
          std::vector<uint8_t> send(n * bytes), recv(n * bytes);
          for (uint64_t g = 0; g < n * count; ++g) {
            Put(t, send.data(), g, int64_t((r * 31 + g * 7) % 100));
          }
          comm.alltoall(send.data(), recv.data(), count, t).wait();
          out.Write("alltoall", recv);
        }
        if (n >= 2 && supported(PLEXUS_COLL_SEND, "send") && supported(PLEXUS_COLL_RECV, "recv")) {
          std::vector<uint8_t> to_right(bytes), to_left(bytes), from_left(bytes), from_right(bytes);
          for (uint64_t i = 0; i < count; ++i) {
            Put(t, to_right.data(), i, int64_t((r * 11 + i) % 100));
            Put(t, to_left.data(), i, int64_t((r * 23 + i * 3) % 100));
          }
          const uint32_t right = (r + 1) % n, left = (r + n - 1) % n;
          plexus::Work w[4] = {comm.send(to_right.data(), count, t, right),
                               comm.send(to_left.data(), count, t, left),
                               comm.recv(from_left.data(), count, t, left),
                               comm.recv(from_right.data(), count, t, right)};
          for (auto& x : w) x.wait();
          out.Write("sendrecv", from_left);
          out.Write("sendrecv", from_right);
        }
      }
    }
    comm.barrier().wait();
    std::printf("rank %u of %u: done\n", r, n);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "same_results: %s\n", e.what());
    return 1;
  }
  return 0;
}
