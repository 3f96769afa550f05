// The TCP backend's allreduce algorithms agree bit for bit. Launched by
// `meson test` under plexus-run with 2 and 3 ranks:
//
//   plexus-run -n 2 tcp_allreduce_algos_check
//
// Opens one communicator per PLEXUS_TCP_ALGO (ring, pair, auto) and runs the
// same allreduce on each (auto only with 2 ranks, where it picks the pair
// exchange or the ring): every dtype x op, in and out of place, at counts
// around the block split and the segment boundaries. Inputs are chosen so
// that the bytes depend on the operand order of each reduction: +0 on one
// rank where the other has -0 (min and max return their first operand when
// the two compare equal), and NaNs whose payload names the rank. The pair
// exchange (2 ranks) must give the ring's bytes, on every rank, except that
// where both results are NaN their payloads may differ: which payload an
// operation keeps is up to the compiled code (the compiler may swap the
// operands of an addition), not a property of the algorithm. With 3 ranks
// "pair" runs the ring. Every rank must also hold the ring's bytes of rank 0.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check_util.hpp"
#include "plexus/algos/half.hpp"
#include "plexus/plexus.hpp"

namespace {

using plexus::DType;
using plexus::ReduceOp;

using plexus_check::Expect;

// A value for element i on rank r, as a double, or NaN (payload from r).
double Value(uint32_t r, uint64_t i) {
  switch (i % 8) {
    case 0:
      return r % 2 ? -0.0 : 0.0;
    case 1:
      return r % 2 ? 0.0 : -0.0;
    case 2:
      return 1.0 + double(r) * 1e-3 + double(i % 97) * 1e-7;
    case 3:
      return -3.25 * double(r + 1) + double(i % 13);
    case 4:
      return 1e8 * (r % 2 ? 1.0 : -1.0) + double(i % 5);
    case 5:
      return std::nan("");  // payload set below
    default:
      return double(int64_t(i % 11) - 5) * double(r + 1);
  }
}

void Put(DType t, void* buf, uint64_t i, uint32_t r) {
  const double v = Value(r, i);
  const bool nan = std::isnan(v);
  switch (t) {
    case DType::Float32: {
      float f = float(v);
      if (nan) {
        uint32_t bits = 0x7fc00000u | (r + 1) << 4 | uint32_t(i % 7);
        std::memcpy(&f, &bits, sizeof f);
      }
      static_cast<float*>(buf)[i] = f;
      break;
    }
    case DType::Float64: {
      double d = v;
      if (nan) {
        uint64_t bits = 0x7ff8000000000000ull | uint64_t(r + 1) << 8 | (i % 7);
        std::memcpy(&d, &bits, sizeof d);
      }
      static_cast<double*>(buf)[i] = d;
      break;
    }
    case DType::Float16:
      static_cast<uint16_t*>(buf)[i] =
          nan ? uint16_t(0x7e00u | (r + 1) << 4) : plexus::algos::FloatToFloat16(float(v));
      break;
    case DType::BFloat16:
      static_cast<uint16_t*>(buf)[i] =
          nan ? uint16_t(0x7fc0u | (r + 1) << 2) : plexus::algos::FloatToBFloat16(float(v));
      break;
    case DType::Int32:
      static_cast<int32_t*>(buf)[i] = nan ? int32_t(r) : int32_t(std::fmod(v, 1000.0));
      break;
    default:
      std::memset(static_cast<uint8_t*>(buf) + i * plexus::ElementSize(t), int(r + i),
                  plexus::ElementSize(t));
      break;
  }
}

std::string Name(const char* algo, DType t, ReduceOp op, uint64_t count, bool in_place) {
  return std::string(algo) + " allreduce " + plexus::ToString(t) + " " + plexus::ToString(op) +
         " count " + std::to_string(count) + (in_place ? " in-place" : "");
}

bool IsNaN(DType t, const uint8_t* p) {
  switch (t) {
    case DType::Float32: {
      float f;
      std::memcpy(&f, p, sizeof f);
      return std::isnan(f);
    }
    case DType::Float64: {
      double d;
      std::memcpy(&d, p, sizeof d);
      return std::isnan(d);
    }
    case DType::Float16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    }
    case DType::BFloat16: {
      uint16_t h;
      std::memcpy(&h, p, sizeof h);
      return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
    }
    default:
      return false;
  }
}

// Equal bytes, element by element, but two NaNs are equal whatever their payloads.
bool Same(DType t, const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return false;
  const size_t es = plexus::ElementSize(t);
  for (size_t i = 0; i < a.size(); i += es) {
    if (std::memcmp(&a[i], &b[i], es) == 0) continue;
    if (!IsNaN(t, &a[i]) || !IsNaN(t, &b[i])) return false;
  }
  return true;
}

std::vector<uint8_t> Run(plexus::Communicator& comm, DType t, ReduceOp op, uint64_t count,
                         bool in_place) {
  const size_t es = plexus::ElementSize(t);
  std::vector<uint8_t> send(count * es), recv(count * es, 0xAB);
  for (uint64_t i = 0; i < count; ++i) Put(t, send.data(), i, comm.rank());
  if (in_place) {
    comm.allreduce(send.data(), send.data(), count, t, op).wait();
    return send;
  }
  comm.allreduce(send.data(), recv.data(), count, t, op).wait();
  return recv;
}

}  // namespace

int main() {
  try {
    std::vector<plexus::Communicator> comms;
    const char* algos[] = {"ring", "pair", "auto"};
    for (const char* algo : algos) {
      plexus::CommunicatorOptions options;
      options.config["PLEXUS_TCP_ALGO"] = algo;
      comms.push_back(plexus::Communicator::from_env(options));
    }
    plexus::Communicator& ring = comms[0];
    plexus_check::rank = ring.rank();
    const DType dtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                            DType::Int32};
    for (DType t : dtypes) {
      const uint64_t seg = (256u << 10) / plexus::ElementSize(t);  // kSegmentBytes
      const uint64_t counts[] = {1, 2, 3, 17, 2 * seg - 1, 2 * seg + 1, 3 * seg + 5};
      for (ReduceOp op : plexus::kAllReduceOps) {
        for (uint64_t count : counts) {
          for (bool in_place : {false, true}) {
            const std::vector<uint8_t> want = Run(ring, t, op, count, in_place);
            std::vector<uint8_t> root = want;
            ring.broadcast(root.data(), root.size(), DType::UInt8, 0).wait();
            Expect(Same(t, root, want), Name("ring", t, op, count, in_place) + ": ranks differ");
            // auto picks recursive doubling for small vectors on 3+ ranks,
            // whose operand order differs from the ring's by design.
            const size_t compared = ring.size() == 2 ? comms.size() : 2;
            for (size_t a = 1; a < compared; ++a) {
              const std::vector<uint8_t> got = Run(comms[a], t, op, count, in_place);
              Expect(Same(t, got, want),
                     Name(algos[a], t, op, count, in_place) + ": not the ring's bytes");
            }
          }
        }
      }
    }
    for (auto& comm : comms) comm.barrier().wait();
    std::printf("rank %u of %u: %d checks passed, %d failed\n", ring.rank(), ring.size(),
                plexus_check::passes, plexus_check::failures);
    return plexus_check::failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %u: %s\n", plexus_check::rank, e.what());
    return 1;
  }
}
