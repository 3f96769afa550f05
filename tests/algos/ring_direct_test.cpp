// The ring allreduce and ring allgather of plexus-algos when the transport
// asks for direct messages (PeerTransport::DirectMessageBytes: the steps
// that receive straight into the caller's buffer cut their blocks at that
// size instead of at the scratch segment): 1 to 5 ranks over the in-memory
// transport, exact results for every message size from a few elements to
// whole blocks (UINT64_MAX, as the UCX backend asks on one host), in place
// and not, int8 (one byte: the largest element count per message) and
// float32.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "mem_transport.hpp"
#include "plexus/algos/collectives.hpp"

namespace {

using plexus::algos::OpSignature;
using plexus::algos::PeerTransport;
using plexus::algos::Status;
using plexus::test::RunRanks;

// Element i of rank r: small integers, so every sum is exact in any order.
template <class T>
T Input(uint32_t r, uint64_t i) {
  return T(r + 1 + i % 5);
}

template <class T>
void CheckAllreduce(uint32_t n, uint64_t count, plexus_dtype_t dtype, uint64_t direct,
                    bool in_place) {
  CAPTURE(n);
  CAPTURE(count);
  CAPTURE(direct);
  CAPTURE(in_place);
  std::vector<std::vector<T>> out(n);
  const auto st = RunRanks(
      n,
      [&](PeerTransport& t, uint32_t r) -> Status {
        std::vector<T> in(count);
        for (uint64_t i = 0; i < count; ++i) in[i] = Input<T>(r, i);
        out[r].assign(count, T(-1));
        OpSignature sig{};
        sig.coll = PLEXUS_COLL_ALLREDUCE;
        sig.dtype = dtype;
        sig.op = PLEXUS_OP_SUM;
        sig.count = count;
        if (in_place) {
          out[r] = in;
          return plexus::algos::RingAllreduce(t, sig, out[r].data(), out[r].data());
        }
        return plexus::algos::RingAllreduce(t, sig, in.data(), out[r].data());
      },
      20000, direct);
  for (uint32_t r = 0; r < n; ++r) {
    REQUIRE_MESSAGE(st[r].ok(), st[r].message);
    for (uint64_t i = 0; i < count; ++i) {
      T want = 0;
      for (uint32_t q = 0; q < n; ++q) want = T(want + Input<T>(q, i));
      if (out[r][i] != want) FAIL("rank " << r << " element " << i);
    }
  }
}

template <class T>
void CheckAllgather(uint32_t n, uint64_t count, plexus_dtype_t dtype, uint64_t direct) {
  CAPTURE(n);
  CAPTURE(count);
  CAPTURE(direct);
  std::vector<std::vector<T>> out(n);
  const auto st = RunRanks(
      n,
      [&](PeerTransport& t, uint32_t r) -> Status {
        std::vector<T> in(count);
        for (uint64_t i = 0; i < count; ++i) in[i] = Input<T>(r, i);
        out[r].assign(count * n, T(-1));
        OpSignature sig{};
        sig.coll = PLEXUS_COLL_ALLGATHER;
        sig.dtype = dtype;
        sig.count = count;
        return plexus::algos::RingAllgather(t, sig, in.data(), out[r].data());
      },
      20000, direct);
  for (uint32_t r = 0; r < n; ++r) {
    REQUIRE_MESSAGE(st[r].ok(), st[r].message);
    for (uint32_t q = 0; q < n; ++q) {
      for (uint64_t i = 0; i < count; ++i) {
        if (out[r][q * count + i] != Input<T>(q, i))
          FAIL("rank " << r << " block " << q << " element " << i);
      }
    }
  }
}

}  // namespace

TEST_CASE("ring allreduce and allgather with direct messages: 1 to 5 ranks, int8 and float32") {
  // 0: the scratch segment (256 KiB); 12 bytes: many messages per block;
  // UINT64_MAX: whole blocks (no overflow in the segment arithmetic).
  for (uint64_t direct : {uint64_t{0}, uint64_t{12}, UINT64_MAX}) {
    for (uint32_t n = 1; n <= 5; ++n) {
      std::vector<uint64_t> counts = {0, 1, 7, 1009};
      // Blocks longer than a 256 KiB segment (int8: 300000 bytes in one
      // block at 1 rank, split over 2-5 ranks still above it at 2).
      if (direct != 12) counts.push_back(600001);
      for (uint64_t count : counts) {
        for (bool in_place : {false, true}) {
          CheckAllreduce<int8_t>(n, count, PLEXUS_DTYPE_INT8, direct, in_place);
          CheckAllreduce<float>(n, count, PLEXUS_DTYPE_FLOAT32, direct, in_place);
        }
        CheckAllgather<int8_t>(n, count, PLEXUS_DTYPE_INT8, direct);
        CheckAllgather<float>(n, count, PLEXUS_DTYPE_FLOAT32, direct);
      }
    }
  }
}
