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
  const plexus::abi::Status st = CheckCall(call, CommShape{rank, size}, memory);
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

// --- ABI 1.2 ----------------------------------------------------------------

namespace {

Call Allgatherv(const void* send, void* recv, uint64_t sendcount, const uint64_t* counts,
                const uint64_t* displs) {
  Call c{PLEXUS_COLL_ALLGATHERV, send, recv, sendcount, kF32};
  c.recvcounts = counts;
  c.rdispls = displs;
  return c;
}

Call Alltoallv(const void* send, const uint64_t* sc, const uint64_t* sd, void* recv,
               const uint64_t* rc, const uint64_t* rd) {
  Call c{PLEXUS_COLL_ALLTOALLV, send, recv, 0, kF32};
  c.sendcounts = sc;
  c.sdispls = sd;
  c.recvcounts = rc;
  c.rdispls = rd;
  return c;
}

Call Coalesced(const void* const* send, void* const* recv, const uint64_t* counts, uint32_t n,
               uint64_t count) {
  Call c{PLEXUS_COLL_ALLREDUCE_COALESCED, nullptr, nullptr, count, kF32, kSum};
  c.sendbufs = send;
  c.recvbufs = recv;
  c.counts = counts;
  c.nbuffers = n;
  return c;
}

}  // namespace

TEST_CASE("1.2: valid calls pass, with their in-place forms") {
  float a[16] = {}, b[16] = {};
  CHECK(Refusal({PLEXUS_COLL_GATHER, a, b, 4, kF32, 0, 0}) == "");
  CHECK(Refusal({PLEXUS_COLL_GATHER, a, nullptr, 4, kF32, 0, 1}) == "");   // not the root
  CHECK(Refusal({PLEXUS_COLL_GATHER, b + 4, b, 4, kF32, 0, 1}, 1) == "");  // root 1, in place
  CHECK(Refusal({PLEXUS_COLL_SCATTER, a, b, 4, kF32, 0, 0}) == "");
  CHECK(Refusal({PLEXUS_COLL_SCATTER, nullptr, b, 4, kF32, 0, 1}) == "");   // not the root
  CHECK(Refusal({PLEXUS_COLL_SCATTER, a, a + 4, 4, kF32, 0, 1}, 1) == "");  // root 1, in place
  const uint64_t counts[] = {3, 0}, displs[] = {4, 0};
  CHECK(Refusal(Allgatherv(a, b, 3, counts, displs)) == "");
  CHECK(Refusal(Allgatherv(b + 4, b, 3, counts, displs)) == "");       // in place
  CHECK(Refusal(Allgatherv(nullptr, b, 0, counts, displs), 1) == "");  // sends nothing
  const uint64_t none[] = {0, 0};
  CHECK(Refusal(Allgatherv(nullptr, nullptr, 0, none, displs)) == "");  // moves nothing
  // Send blocks may overlap each other (both peers get a[0..2]).
  const uint64_t sc[] = {2, 2}, sd[] = {0, 0}, rc[] = {2, 1}, rd[] = {0, 2};
  CHECK(Refusal(Alltoallv(a, sc, sd, b, rc, rd)) == "");
  const void* sends[] = {a, a + 8};
  void* recvs[] = {b, a + 8};  // the second in place
  const uint64_t lens[] = {4, 3};
  CHECK(Refusal(Coalesced(sends, recvs, lens, 2, 7)) == "");
}

TEST_CASE("1.2: gather and scatter roots and root buffers") {
  float a[16] = {};
  CHECK(Has(Refusal({PLEXUS_COLL_GATHER, a, a, 4, kF32, 0, 2}),
            "gather: root 2 is not a rank (size 2)"));
  CHECK(Has(Refusal({PLEXUS_COLL_SCATTER, a, a, 4, kF32, 0, 9}), "scatter: root 9 is not a rank"));
  CHECK(Has(Refusal({PLEXUS_COLL_GATHER, a, nullptr, 4, kF32, 0, 0}),
            "NULL buffer (recvbuf on the root)"));
  CHECK(Has(Refusal({PLEXUS_COLL_SCATTER, nullptr, a, 4, kF32, 0, 0}),
            "NULL buffer (sendbuf on the root)"));
  CHECK(Has(Refusal({PLEXUS_COLL_SCATTER, a, nullptr, 4, kF32, 0, 1}), "NULL buffer (recvbuf)"));
  CHECK(Has(Refusal({PLEXUS_COLL_GATHER, a + 1, a, 4, kF32, 0, 0}),
            "not at the in-place position (recvbuf + root x count elements)"));
  CHECK(Has(Refusal({PLEXUS_COLL_SCATTER, a, a + 1, 4, kF32, 0, 0}),
            "not at the in-place position (sendbuf + root x count elements)"));
  // 2^60 x 4 bytes fits one block, not 2 ranks' worth on the root.
  const uint64_t c = uint64_t(1) << 60;
  CHECK(
      Has(Refusal({PLEXUS_COLL_GATHER, a, a + 8, c, kF32, 0, 0}), "x 2 ranks exceeds 2^62 bytes"));
}

TEST_CASE("1.2: allgatherv and alltoallv arrays, sizes and overlaps") {
  float a[64] = {}, b[64] = {};
  const uint64_t counts[] = {2, 2}, displs[] = {0, 2};
  CHECK(Has(Refusal(Allgatherv(a, b, 2, nullptr, displs)), "NULL recvcounts or displs"));
  CHECK(Has(Refusal(Allgatherv(a, b, 2, counts, nullptr)), "NULL recvcounts or displs"));
  CHECK(Has(Refusal(Alltoallv(a, counts, nullptr, b, counts, displs)),
            "NULL counts or displacements array"));
  // The send count is recvcounts[rank].
  CHECK(Has(Refusal(Allgatherv(a, b, 3, counts, displs), 1),
            "sendcount 3 differs from recvcounts[1] = 2"));
  // Overflow: count + displacement, and x element size.
  const uint64_t huge[] = {1, UINT64_MAX}, big[] = {uint64_t(1) << 61, 1}, zero[] = {0, 0};
  CHECK(Has(Refusal(Allgatherv(a, b, 1, counts, huge)),
            "receive block of rank 1 (count 2, displacement 18446744073709551615) ends beyond "
            "2^62 bytes"));
  CHECK(Has(Refusal(Allgatherv(a, b, uint64_t(1) << 61, big, zero)),
            "receive block of rank 0 (count 2305843009213693952, displacement 0) ends beyond"));
  CHECK(Has(Refusal(Alltoallv(a, counts, huge, b, counts, displs)),
            "send block of rank 1 (count 2, displacement 18446744073709551615) ends beyond"));
  CHECK(Has(Refusal(Alltoallv(a, big, zero, b, counts, displs)), "send block of rank 0"));
  // Receive blocks that share an element.
  const uint64_t overlapping[] = {0, 1};
  CHECK(Has(Refusal(Allgatherv(a, b, 2, counts, overlapping)),
            "receive blocks of ranks 0 and 1 overlap"));
  CHECK(Has(Refusal(Alltoallv(a, counts, displs, b, counts, overlapping)),
            "receive blocks of ranks 0 and 1 overlap"));
  // An empty block overlaps nothing.
  const uint64_t one_empty[] = {2, 0};
  CHECK(Refusal(Allgatherv(a, b, 2, one_empty, zero)) == "");
  // allgatherv: sendbuf inside recvbuf only at displs[rank].
  CHECK(Has(Refusal(Allgatherv(b + 1, b, 2, counts, displs)), "not at the in-place position"));
  // alltoallv is not in place: no send block may touch a receive block.
  const uint64_t into_rank1[] = {3, 20}, far[] = {8, 20};
  CHECK(Has(Refusal(Alltoallv(a, counts, into_rank1, a, counts, displs)),
            "send block of rank 0 overlaps receive block of rank 1 (alltoallv is not in place)"));
  const uint64_t apart[] = {40, 50};
  CHECK(Refusal(Alltoallv(a, counts, apart, a, counts, displs)) == "");  // same buffer, disjoint
  // A rank's block to itself must agree with itself.
  const uint64_t three_two[] = {3, 2};
  CHECK(Has(Refusal(Alltoallv(a, three_two, far, b, counts, displs)),
            "sendcounts[0] = 3 differs from recvcounts[0] = 2"));
  // NULL buffers where a block is not empty.
  CHECK(Has(Refusal(Allgatherv(a, nullptr, 2, counts, displs)), "NULL buffer (recvbuf)"));
  CHECK(
      Has(Refusal(Alltoallv(nullptr, counts, displs, b, counts, displs)), "NULL buffer (sendbuf)"));
}

TEST_CASE("1.2: allreduce_coalesced buffers") {
  float a[32] = {}, b[32] = {};
  const void* sends[] = {a, a + 8};
  void* recvs[] = {b, b + 8};
  const uint64_t lens[] = {4, 3};
  CHECK(Has(Refusal(Coalesced(sends, recvs, lens, 0, 0)), "allreduce_coalesced: nbuffers is 0"));
  CHECK(Has(Refusal(Coalesced(nullptr, recvs, lens, 2, 7)), "NULL buffer or count array"));
  CHECK(Has(Refusal(Coalesced(sends, nullptr, lens, 2, 7)), "NULL buffer or count array"));
  CHECK(Has(Refusal(Coalesced(sends, recvs, nullptr, 2, 7)), "NULL buffer or count array"));
  CHECK(Has(Refusal(Coalesced(sends, recvs, lens, 2, 8)), "count 8 is not the sum of counts (7)"));
  const void* null_send[] = {a, nullptr};
  CHECK(Has(Refusal(Coalesced(null_send, recvs, lens, 2, 7)), "NULL buffer 1 (count 3)"));
  const uint64_t empty_second[] = {4, 0};
  CHECK(Refusal(Coalesced(null_send, recvs, empty_second, 2, 4)) == "");  // empty: NULL is fine
  // Buffers of different i overlap: recv 1 inside recv 0, send 1 inside recv 0.
  void* recv_overlap[] = {b, b + 2};
  CHECK(Has(Refusal(Coalesced(sends, recv_overlap, lens, 2, 7)), "buffers 0 and 1 overlap"));
  const void* send_in_recv[] = {a, b + 1};
  CHECK(Has(Refusal(Coalesced(send_in_recv, recvs, lens, 2, 7)), "buffers 0 and 1 overlap"));
  // One buffer's send and recv overlap without being equal.
  const void* shifted[] = {b + 1, a + 8};
  CHECK(Has(Refusal(Coalesced(shifted, recvs, lens, 2, 7)),
            "sendbufs[0] and recvbufs[0] overlap without being equal"));
  // The sum of counts in bytes.
  const uint64_t huge[] = {1, uint64_t(1) << 60};
  CHECK(Has(Refusal(Coalesced(sends, recvs, huge, 2, (uint64_t(1) << 60) + 1)),
            "the counts add up to more than 2^62 bytes (at buffer 1)"));
  const uint64_t wrap[] = {UINT64_MAX, 2};
  CHECK(Has(Refusal(Coalesced(sends, recvs, wrap, 2, 1)), "add up to more than 2^62 bytes"));
  // A reduction: the op is checked.
  Call bad_op = Coalesced(sends, recvs, lens, 2, 7);
  bad_op.op = 0;
  CHECK(Has(Refusal(bad_op), "unknown reduce op code 0"));
}

TEST_CASE("1.2: the calls in words") {
  const uint64_t counts[] = {1, 1}, displs[] = {0, 1};
  const std::string v =
      plexus::kit::DescribeCall(Alltoallv(nullptr, counts, displs, nullptr, counts, displs));
  CHECK(v == "alltoallv(sendbuf NULL, recvbuf NULL, float32)");
  const std::string g = plexus::kit::DescribeCall(Allgatherv(nullptr, nullptr, 3, counts, displs));
  CHECK(g == "allgatherv(sendbuf NULL, recvbuf NULL, sendcount 3, float32)");
  CHECK(Has(plexus::kit::DescribeCall(Coalesced(nullptr, nullptr, nullptr, 5, 9)),
            ", 5 buffers, count 9, float32, sum)"));
}
