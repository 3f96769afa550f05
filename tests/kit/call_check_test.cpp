// kit::CheckCall: the ABI's argument rules, once for every backend. Each
// case is a call a backend must refuse (or accept), with the words the
// refusal must contain.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "plexus/kit/call.hpp"

namespace {

using plexus::kit::Call;
using plexus::kit::CheckCall;
using plexus::kit::CommShape;

constexpr plexus_dtype_t kF32 = PLEXUS_DTYPE_FLOAT32;
constexpr plexus_reduce_op_t kSum = PLEXUS_OP_SUM;

// The refusal of call on rank `rank` of `size` ranks: "" when accepted.
std::string Refusal(const Call& call, uint32_t rank = 0, uint32_t size = 2,
                    uint32_t memory = plexus::kit::kHostMemoryOnly, int32_t* code = nullptr) {
  const plexus::algos::Status st = CheckCall(call, CommShape{rank, size}, memory);
  if (code) *code = st.code;
  return st.ok() ? "" : st.message;
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("valid calls of every collective pass") {
  float a[16] = {}, b[16] = {};
  CHECK(Refusal({PLEXUS_COLL_ALLREDUCE, a, b, 8, kF32, kSum}) == "");
  CHECK(Refusal({PLEXUS_COLL_ALLREDUCE, a, a, 8, kF32, kSum}) == "");  // in place
  CHECK(Refusal({PLEXUS_COLL_BROADCAST, nullptr, a, 8, kF32, 0, 1}) == "");
  CHECK(Refusal({PLEXUS_COLL_REDUCE, a, nullptr, 8, kF32, kSum, 1}) == "");  // not the root
  CHECK(Refusal({PLEXUS_COLL_REDUCE, a, a, 8, kF32, kSum, 0}) == "");        // root, in place
  CHECK(Refusal({PLEXUS_COLL_ALLGATHER, a, b, 4, kF32}) == "");
  CHECK(Refusal({PLEXUS_COLL_ALLGATHER, b + 4, b, 4, kF32}, 1) == "");  // in place, rank 1
  CHECK(Refusal({PLEXUS_COLL_REDUCE_SCATTER, a, b, 4, kF32, kSum}) == "");
  CHECK(Refusal({PLEXUS_COLL_REDUCE_SCATTER, a, a + 4, 4, kF32, kSum}, 1) == "");  // in place
  CHECK(Refusal({PLEXUS_COLL_ALLTOALL, a, b, 4, kF32}) == "");
  CHECK(Refusal({PLEXUS_COLL_BARRIER}) == "");
  CHECK(Refusal({PLEXUS_COLL_SEND, a, nullptr, 8, kF32, 0, 1}) == "");
  CHECK(Refusal({PLEXUS_COLL_RECV, nullptr, a, 8, kF32, 0, 1}) == "");
  // count 0 touches no buffer: NULL is fine.
  CHECK(Refusal({PLEXUS_COLL_ALLREDUCE, nullptr, nullptr, 0, kF32, kSum}) == "");
}

TEST_CASE("codes: dtype, op, collective") {
  float a[8] = {};
  CHECK(
      Has(Refusal({PLEXUS_COLL_ALLREDUCE, a, a, 8, 99, kSum}), "allreduce: unknown dtype code 99"));
  CHECK(Has(Refusal({PLEXUS_COLL_RECV, nullptr, a, 8, 0, 0, 1}), "recv: unknown dtype code 0"));
  CHECK(Has(Refusal({PLEXUS_COLL_REDUCE_SCATTER, a, a, 4, kF32, 6}), "unknown reduce op code 6"));
  CHECK(Has(Refusal({PLEXUS_COLL_ALLREDUCE, a, a, 8, kF32, 0}), "unknown reduce op code 0"));
  // Ops are not looked at where nothing is reduced.
  CHECK(Refusal({PLEXUS_COLL_ALLGATHER, a, a, 4, kF32, 77}) == "");
  CHECK(Has(Refusal({42}), "unknown collective code 42"));
}

TEST_CASE("ranks: roots and peers") {
  float a[8] = {};
  CHECK(Has(Refusal({PLEXUS_COLL_BROADCAST, nullptr, a, 8, kF32, 0, 2}),
            "broadcast: root 2 is not a rank (size 2)"));
  CHECK(Has(Refusal({PLEXUS_COLL_REDUCE, a, a, 8, kF32, kSum, 7}), "root 7 is not a rank"));
  CHECK(Has(Refusal({PLEXUS_COLL_SEND, a, nullptr, 8, kF32, 0, 2}),
            "send: peer 2 is not another rank (rank 0, size 2)"));
  CHECK(Has(Refusal({PLEXUS_COLL_RECV, nullptr, a, 8, kF32, 0, 0}), "peer 0 is not another rank"));
}

TEST_CASE("NULL buffers where count > 0 needs them") {
  float a[8] = {};
  CHECK(Has(Refusal({PLEXUS_COLL_ALLREDUCE, nullptr, a, 8, kF32, kSum}), "NULL buffer (sendbuf)"));
  CHECK(Has(Refusal({PLEXUS_COLL_ALLREDUCE, a, nullptr, 8, kF32, kSum}), "NULL buffer (recvbuf)"));
  CHECK(Has(Refusal({PLEXUS_COLL_BROADCAST, nullptr, nullptr, 8, kF32, 0, 0}), "NULL buffer"));
  CHECK(Has(Refusal({PLEXUS_COLL_REDUCE, a, nullptr, 8, kF32, kSum, 0}),
            "NULL buffer (recvbuf on the root)"));
  CHECK(Has(Refusal({PLEXUS_COLL_SEND, nullptr, nullptr, 8, kF32, 0, 1}), "NULL buffer"));
}

TEST_CASE("sizes that do not fit, per rank where blocks are per rank") {
  float a[8] = {};
  const uint64_t big = uint64_t(1) << 61;  // x 4 bytes = 2^63
  CHECK(Has(Refusal({PLEXUS_COLL_ALLREDUCE, a, a, big, kF32, kSum}), "is too large"));
  // 2^59 x 4 bytes = 2^61 fits for allreduce, not x 4 ranks for allgather.
  const uint64_t c = uint64_t(1) << 59;
  CHECK(!Has(Refusal({PLEXUS_COLL_ALLREDUCE, a, a, c, kF32, kSum}, 0, 4), "too large"));
  CHECK(Has(Refusal({PLEXUS_COLL_ALLGATHER, a, a, c, kF32}, 0, 4), "x 4 ranks exceeds 2^62 bytes"));
}

TEST_CASE("overlaps other than the collective's in-place form") {
  float a[16] = {};
  CHECK(Has(Refusal({PLEXUS_COLL_ALLREDUCE, a, a + 1, 4, kF32, kSum}),
            "overlap without being equal"));
  CHECK(Has(Refusal({PLEXUS_COLL_REDUCE, a, a + 1, 4, kF32, kSum, 0}), "overlap"));
  CHECK(Refusal({PLEXUS_COLL_REDUCE, a, a + 1, 4, kF32, kSum, 1}) ==
        "");  // recvbuf unused off the root
  CHECK(Has(Refusal({PLEXUS_COLL_ALLGATHER, a + 1, a, 2, kF32}), "in-place position"));
  CHECK(Has(Refusal({PLEXUS_COLL_ALLGATHER, a, a, 2, kF32}, 1), "in-place position"));
  CHECK(Has(Refusal({PLEXUS_COLL_REDUCE_SCATTER, a, a + 1, 2, kF32, kSum}), "in-place position"));
  CHECK(Has(Refusal({PLEXUS_COLL_ALLTOALL, a, a + 2, 2, kF32}), "alltoall is not in place"));
  CHECK(Has(Refusal({PLEXUS_COLL_ALLTOALL, a, a, 2, kF32}), "not in place"));
}

TEST_CASE("memory types: unknown is invalid, known but absent is unsupported") {
  float a[8] = {};
  int32_t code = 0;
  plexus_placement cuda{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, 0, 0, nullptr};
  CHECK(Has(Refusal({PLEXUS_COLL_ALLREDUCE, a, a, 8, kF32, kSum, 0, &cuda}, 0, 2,
                    plexus::kit::kHostMemoryOnly, &code),
            "CUDA memory is not supported by this backend (it takes host memory only)"));
  CHECK(code == PLEXUS_ERR_UNSUPPORTED);
  plexus_placement odd{sizeof(plexus_placement), 77, -1, 0, nullptr};
  CHECK(Has(Refusal({PLEXUS_COLL_BROADCAST, nullptr, a, 8, kF32, 0, 0, &odd}, 0, 2,
                    plexus::kit::kHostMemoryOnly, &code),
            "unknown memory type 77"));
  CHECK(code == PLEXUS_ERR_INVALID_ARGUMENT);
  // No placement is host memory: refused by a CUDA-only backend.
  CHECK(Has(Refusal({PLEXUS_COLL_ALLREDUCE, a, a, 8, kF32, kSum}, 0, 2, 1u << PLEXUS_MEMORY_CUDA),
            "host memory is not supported by this backend (it takes CUDA memory only)"));
  CHECK(Refusal({PLEXUS_COLL_ALLREDUCE, a, a, 8, kF32, kSum, 0, &cuda}, 0, 2,
                1u << PLEXUS_MEMORY_CUDA) == "");
}

TEST_CASE("the call in words") {
  float a[4] = {};
  const std::string text =
      plexus::kit::DescribeCall({PLEXUS_COLL_BROADCAST, nullptr, nullptr, 8, kF32, 0, 2});
  CHECK(text == "broadcast(buf NULL, count 8, float32, root 2)");
  const std::string r = plexus::kit::DescribeCall({PLEXUS_COLL_REDUCE, a, a, 4, kF32, kSum, 1});
  CHECK(Has(r, "reduce(sendbuf 0x"));
  CHECK(Has(r, ", count 4, float32, sum, root 1)"));
  CHECK(plexus::kit::DescribeCall({PLEXUS_COLL_BARRIER}) == "barrier()");
}
