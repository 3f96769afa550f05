// The ABI 1.2 algorithms of plexus-algos (gather, scatter, allgatherv,
// alltoallv, allreduce_coalesced) on 1 to 5 ranks over an in-memory
// transport (mem_transport.hpp): exact results, uneven counts with zeros,
// the in-place forms, every dtype where only bytes move, and ranks that
// disagree failing with REMOTE instead of hanging or delivering a wrong
// layout.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mem_transport.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"

namespace {

using plexus::algos::AllreduceFn;
using plexus::algos::DtypeSize;
using plexus::algos::OpSignature;
using plexus::algos::PeerTransport;
using plexus::algos::Status;
using plexus::test::RunRanks;
using Bytes = std::vector<uint8_t>;

constexpr uint8_t kUntouched = 0xEE;

// Distinct bytes for each (source, index): a block out of place shows.
uint8_t Byte(uint32_t source, uint64_t i) {
  return uint8_t((source * 37 + i * 11 + 5) % 251);
}
Bytes Pattern(uint32_t source, uint64_t bytes) {
  Bytes b(bytes);
  for (uint64_t i = 0; i < bytes; ++i) b[i] = Byte(source, i);
  return b;
}

bool AllOk(const std::vector<Status>& st) {
  for (size_t r = 0; r < st.size(); ++r) {
    if (!st[r].ok()) {
      MESSAGE("rank " << r << ": " << st[r].message);
      return false;
    }
  }
  return true;
}

// Statuses of a run that must fail: REMOTE on at least one rank, and no
// rank timed out (nobody was left waiting) or failed otherwise.
void CheckFailsRemote(const std::vector<Status>& st, const std::string& words = "") {
  int remote = 0;
  bool named = words.empty();
  for (size_t r = 0; r < st.size(); ++r) {
    CHECK_MESSAGE((st[r].ok() || st[r].code == PLEXUS_ERR_REMOTE),
                  "rank " << r << ": " << st[r].code << " " << st[r].message);
    if (st[r].code == PLEXUS_ERR_REMOTE) ++remote;
    if (st[r].message.find(words) != std::string::npos) named = true;
  }
  CHECK(remote > 0);
  CHECK_MESSAGE(named, "no rank's error says '" << words << "'");
}

OpSignature Sig(plexus_collective_t coll, plexus_dtype_t dtype, uint64_t count, uint32_t root = 0,
                plexus_reduce_op_t op = 0) {
  return {0, coll, dtype, op, count, root};
}

// --- gather -----------------------------------------------------------------

void CheckGather(uint32_t n, uint32_t root, uint64_t count, plexus_dtype_t dtype, bool in_place) {
  CAPTURE(n);
  CAPTURE(root);
  CAPTURE(count);
  CAPTURE(dtype);
  CAPTURE(in_place);
  const uint64_t block = count * DtypeSize(dtype);
  std::vector<Bytes> send(n);
  for (uint32_t r = 0; r < n; ++r) send[r] = Pattern(r, block);
  Bytes recv(n * block, kUntouched);
  if (in_place && block) std::memcpy(recv.data() + root * block, send[root].data(), block);
  const auto st = RunRanks(n, [&](PeerTransport& t, uint32_t r) {
    const void* s = in_place && r == root ? recv.data() + root * block : send[r].data();
    return plexus::algos::BinomialGather(t, Sig(PLEXUS_COLL_GATHER, dtype, count, root), s,
                                         r == root ? recv.data() : nullptr);
  });
  REQUIRE(AllOk(st));
  Bytes expected;
  for (uint32_t r = 0; r < n; ++r) expected.insert(expected.end(), send[r].begin(), send[r].end());
  CHECK(recv == expected);
}

TEST_CASE("gather: every root of 1 to 5 ranks, in place or not, zero count") {
  for (uint32_t n = 1; n <= 5; ++n) {
    for (uint32_t root = 0; root < n; ++root) {
      for (uint64_t count : {0, 1, 7, 300}) {
        for (bool in_place : {false, true})
          CheckGather(n, root, count, PLEXUS_DTYPE_INT32, in_place);
      }
    }
  }
}

TEST_CASE("gather: every dtype, and blocks larger than a segment") {
  for (plexus_dtype_t d = 1; d <= PLEXUS_DTYPE_MAX_V1; ++d) CheckGather(3, 1, 5, d, false);
  CheckGather(5, 3, 100000, PLEXUS_DTYPE_FLOAT32, false);  // 400 KB a block
}

// --- scatter ----------------------------------------------------------------

void CheckScatter(uint32_t n, uint32_t root, uint64_t count, plexus_dtype_t dtype, bool in_place) {
  CAPTURE(n);
  CAPTURE(root);
  CAPTURE(count);
  CAPTURE(dtype);
  CAPTURE(in_place);
  const uint64_t block = count * DtypeSize(dtype);
  Bytes send;
  for (uint32_t r = 0; r < n; ++r) {
    const Bytes b = Pattern(r, block);
    send.insert(send.end(), b.begin(), b.end());
  }
  const Bytes original = send;
  std::vector<Bytes> recv(n, Bytes(block, kUntouched));
  const auto st = RunRanks(n, [&](PeerTransport& t, uint32_t r) {
    void* into = in_place && r == root ? send.data() + root * block : recv[r].data();
    return plexus::algos::BinomialScatter(t, Sig(PLEXUS_COLL_SCATTER, dtype, count, root),
                                          r == root ? send.data() : nullptr, into);
  });
  REQUIRE(AllOk(st));
  CHECK(send == original);  // only read (in place: the root's block stays)
  for (uint32_t r = 0; r < n; ++r) {
    CAPTURE(r);
    if (in_place && r == root) {
      CHECK(recv[r] == Bytes(block, kUntouched));
    } else {
      CHECK(recv[r] == Pattern(r, block));
    }
  }
}

TEST_CASE("scatter: every root of 1 to 5 ranks, in place or not, zero count") {
  for (uint32_t n = 1; n <= 5; ++n) {
    for (uint32_t root = 0; root < n; ++root) {
      for (uint64_t count : {0, 1, 7, 300}) {
        for (bool in_place : {false, true}) {
          CheckScatter(n, root, count, PLEXUS_DTYPE_INT32, in_place);
        }
      }
    }
  }
}

TEST_CASE("scatter: every dtype, and blocks larger than a segment") {
  for (plexus_dtype_t d = 1; d <= PLEXUS_DTYPE_MAX_V1; ++d) CheckScatter(4, 2, 5, d, false);
  CheckScatter(5, 2, 100000, PLEXUS_DTYPE_FLOAT32, false);
}

TEST_CASE("gather and scatter: ranks that disagree fail with REMOTE on every rank") {
  // Roots: every rank fails, naming both roots (AgreeOnRoot).
  for (plexus_collective_t coll : {PLEXUS_COLL_GATHER, PLEXUS_COLL_SCATTER}) {
    CAPTURE(coll);
    Bytes a(3 * 4 * 4, 1), b(3 * 4 * 4, 2);
    const auto st = RunRanks(3, [&](PeerTransport& t, uint32_t r) {
      const OpSignature sig = Sig(coll, PLEXUS_DTYPE_INT32, 4, r == 2 ? 1 : 0);
      return coll == PLEXUS_COLL_GATHER
                 ? plexus::algos::BinomialGather(t, sig, a.data(), b.data())
                 : plexus::algos::BinomialScatter(t, sig, a.data(), b.data());
    });
    for (const Status& s : st) {
      CHECK(s.code == PLEXUS_ERR_REMOTE);
      CHECK(s.message.find("disagree on the root") != std::string::npos);
    }
  }
  // Counts: the frames' signatures differ.
  for (plexus_collective_t coll : {PLEXUS_COLL_GATHER, PLEXUS_COLL_SCATTER}) {
    CAPTURE(coll);
    std::vector<Bytes> a(4, Bytes(4 * 5 * 4, 1)), b(4, Bytes(4 * 5 * 4, 2));
    const auto st = RunRanks(4, [&](PeerTransport& t, uint32_t r) {
      const OpSignature sig = Sig(coll, PLEXUS_DTYPE_INT32, r == 3 ? 5 : 4, 0);
      return coll == PLEXUS_COLL_GATHER
                 ? plexus::algos::BinomialGather(t, sig, a[r].data(), b[r].data())
                 : plexus::algos::BinomialScatter(t, sig, a[r].data(), b[r].data());
    });
    CheckFailsRemote(st, "mismatch");
  }
}

// --- allgatherv -------------------------------------------------------------

// Blocks laid out in reverse rank order with a one-element gap before each,
// so a block written at the wrong place or with the wrong size shows.
std::vector<uint64_t> ReversedDispls(const std::vector<uint64_t>& counts, uint64_t* extent) {
  std::vector<uint64_t> displs(counts.size());
  uint64_t at = 0;
  for (size_t j = counts.size(); j-- > 0;) {
    at += 1;
    displs[j] = at;
    at += counts[j];
  }
  *extent = at + 1;
  return displs;
}

void CheckAllgatherv(const std::vector<uint64_t>& counts, plexus_dtype_t dtype, bool in_place) {
  const uint32_t n = uint32_t(counts.size());
  const size_t elem = DtypeSize(dtype);
  CAPTURE(n);
  CAPTURE(dtype);
  CAPTURE(in_place);
  uint64_t extent = 0, total = 0;
  const std::vector<uint64_t> displs = ReversedDispls(counts, &extent);
  for (uint64_t c : counts) total += c;
  Bytes expected(extent * elem, kUntouched);
  std::vector<Bytes> send(n);
  for (uint32_t r = 0; r < n; ++r) {
    send[r] = Pattern(r, counts[r] * elem);
    std::copy(send[r].begin(), send[r].end(), expected.begin() + displs[r] * elem);
  }
  std::vector<Bytes> recv(n, Bytes(extent * elem, kUntouched));
  if (in_place) {
    for (uint32_t r = 0; r < n; ++r) {
      std::copy(send[r].begin(), send[r].end(), recv[r].begin() + displs[r] * elem);
    }
  }
  const auto st = RunRanks(n, [&](PeerTransport& t, uint32_t r) {
    const void* s = in_place ? recv[r].data() + displs[r] * elem : send[r].data();
    return plexus::algos::RingAllgatherv(t, Sig(PLEXUS_COLL_ALLGATHERV, dtype, total), s,
                                         recv[r].data(), counts, displs);
  });
  REQUIRE(AllOk(st));
  for (uint32_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(recv[r] == expected);
  }
}

TEST_CASE("allgatherv: uneven counts with zeros on 1 to 5 ranks, in place or not") {
  for (uint32_t n = 1; n <= 5; ++n) {
    std::vector<uint64_t> uneven(n), one_sender(n), none(n, 0);
    for (uint32_t r = 0; r < n; ++r) uneven[r] = (r * 3 + 1) % 4;  // 1 0 3 2 1
    one_sender[n - 1] = 9;
    for (const auto& counts : {uneven, one_sender, none}) {
      for (bool in_place : {false, true}) CheckAllgatherv(counts, PLEXUS_DTYPE_INT32, in_place);
    }
  }
}

TEST_CASE("allgatherv: every dtype, and blocks larger than a segment") {
  for (plexus_dtype_t d = 1; d <= PLEXUS_DTYPE_MAX_V1; ++d) CheckAllgatherv({2, 0, 5}, d, false);
  CheckAllgatherv({100000, 3, 0, 70000}, PLEXUS_DTYPE_FLOAT32, false);
}

TEST_CASE("allgatherv: ranks whose counts disagree fail with REMOTE, nothing lands") {
  struct Case {
    const char* what;
    uint32_t rank;  // whose recvcounts differ
    uint32_t block;
    uint64_t count;
  };
  // Rank 2 expects 5 elements of rank 0's 4; rank 3 expects none of rank
  // 1's 2 (an empty block is a frame too); rank 1 expects 3 of rank 3's 0.
  for (const Case& c :
       {Case{"larger", 2, 0, 5}, Case{"zero", 3, 1, 0}, Case{"from zero", 1, 3, 3}}) {
    CAPTURE(c.what);
    const std::vector<uint64_t> counts = {4, 2, 6, 0};
    std::vector<std::vector<uint64_t>> views(4, counts);
    views[c.rank][c.block] = c.count;
    std::vector<Bytes> recv(4, Bytes(64 * 4, kUntouched));
    const auto st = RunRanks(4, [&](PeerTransport& t, uint32_t r) {
      std::vector<uint64_t> displs(4);
      uint64_t at = 0;
      for (uint32_t j = 0; j < 4; ++j) {
        displs[j] = at;
        at += views[r][j];
      }
      const Bytes send = Pattern(r, views[r][r] * 4);
      return plexus::algos::RingAllgatherv(t, Sig(PLEXUS_COLL_ALLGATHERV, PLEXUS_DTYPE_INT32, 12),
                                           send.data(), recv[r].data(), views[r], displs);
    });
    CheckFailsRemote(st, "size mismatch");
  }
}

// --- alltoallv --------------------------------------------------------------

// Elements rank `from` sends rank `to`: uneven, zero for some pairs
// (including a rank's block to itself).
uint64_t PairCount(uint32_t from, uint32_t to) {
  return (from + 2 * to) % 3 * 2;
}

struct AlltoallvLayout {
  std::vector<uint64_t> sendcounts, sdispls, recvcounts, rdispls;
  uint64_t send_extent = 0, recv_extent = 0;
};

// shared: every peer is sent the same elements (overlapping send blocks,
// which the ABI allows). Receive blocks in reverse order with gaps.
AlltoallvLayout Layout(uint32_t n, uint32_t r, uint64_t (*count)(uint32_t, uint32_t), bool shared) {
  AlltoallvLayout l;
  for (uint32_t j = 0; j < n; ++j) {
    l.sendcounts.push_back(count(r, j));
    l.recvcounts.push_back(count(j, r));
    l.sdispls.push_back(shared ? 0 : l.send_extent);
    l.send_extent = shared ? std::max(l.send_extent, count(r, j)) : l.send_extent + count(r, j);
  }
  l.rdispls = ReversedDispls(l.recvcounts, &l.recv_extent);
  return l;
}

// The bytes rank `from` sends rank `to`.
Bytes Block(uint32_t n, uint32_t from, uint32_t to, uint64_t bytes, bool shared) {
  return Pattern(shared ? from : from * n + to, bytes);
}

void CheckAlltoallv(uint32_t n, plexus_dtype_t dtype, uint64_t (*count)(uint32_t, uint32_t),
                    bool shared) {
  const size_t elem = DtypeSize(dtype);
  CAPTURE(n);
  CAPTURE(dtype);
  CAPTURE(shared);
  std::vector<AlltoallvLayout> layout;
  std::vector<Bytes> send(n), recv(n), expected(n);
  for (uint32_t r = 0; r < n; ++r) {
    layout.push_back(Layout(n, r, count, shared));
    const AlltoallvLayout& l = layout[r];
    send[r].assign(l.send_extent * elem, kUntouched);
    recv[r].assign(l.recv_extent * elem, kUntouched);
    expected[r] = recv[r];
    for (uint32_t j = 0; j < n; ++j) {
      const Bytes out = Block(n, r, j, l.sendcounts[j] * elem, shared);
      std::copy(out.begin(), out.end(), send[r].begin() + l.sdispls[j] * elem);
      const Bytes in = Block(n, j, r, l.recvcounts[j] * elem, shared);
      std::copy(in.begin(), in.end(), expected[r].begin() + l.rdispls[j] * elem);
    }
  }
  const auto st = RunRanks(n, [&](PeerTransport& t, uint32_t r) {
    const AlltoallvLayout& l = layout[r];
    return plexus::algos::PairwiseAlltoallv(t, Sig(PLEXUS_COLL_ALLTOALLV, dtype, 0), send[r].data(),
                                            l.sendcounts, l.sdispls, recv[r].data(), l.recvcounts,
                                            l.rdispls);
  });
  REQUIRE(AllOk(st));
  for (uint32_t r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(recv[r] == expected[r]);
  }
}

uint64_t NoCounts(uint32_t, uint32_t) {
  return 0;
}
uint64_t OnlyToRankZero(uint32_t, uint32_t to) {
  return to == 0 ? 3 : 0;
}
uint64_t Large(uint32_t from, uint32_t to) {
  return from == to ? 1 : 70000 + from;
}

TEST_CASE("alltoallv: uneven counts with zeros on 1 to 5 ranks, overlapping send blocks") {
  for (uint32_t n = 1; n <= 5; ++n) {
    for (auto count : {PairCount, NoCounts, OnlyToRankZero}) {
      for (bool shared : {false, true}) CheckAlltoallv(n, PLEXUS_DTYPE_INT32, count, shared);
    }
  }
}

TEST_CASE("alltoallv: every dtype, and blocks larger than a segment") {
  for (plexus_dtype_t d = 1; d <= PLEXUS_DTYPE_MAX_V1; ++d) CheckAlltoallv(3, d, PairCount, false);
  CheckAlltoallv(3, PLEXUS_DTYPE_FLOAT32, Large, false);
}

TEST_CASE("alltoallv: a count that disagrees with the peer's fails with REMOTE, nothing lands") {
  // Rank 0 sends rank 1 four elements; rank 1 expects (a) three, (b) none.
  for (uint64_t expects : {3, 0}) {
    CAPTURE(expects);
    const uint32_t n = 3;
    std::vector<AlltoallvLayout> layout;
    for (uint32_t r = 0; r < n; ++r) layout.push_back(Layout(n, r, PairCount, false));
    REQUIRE(layout[0].sendcounts[1] == 4);
    layout[1].recvcounts[0] = expects;
    layout[1].rdispls = ReversedDispls(layout[1].recvcounts, &layout[1].recv_extent);
    std::vector<Bytes> send(n), recv(n);
    for (uint32_t r = 0; r < n; ++r) {
      send[r] = Pattern(r, layout[r].send_extent * 4);
      recv[r].assign(layout[r].recv_extent * 4, kUntouched);
    }
    const auto st = RunRanks(n, [&](PeerTransport& t, uint32_t r) {
      const AlltoallvLayout& l = layout[r];
      return plexus::algos::PairwiseAlltoallv(t, Sig(PLEXUS_COLL_ALLTOALLV, PLEXUS_DTYPE_INT32, 0),
                                              send[r].data(), l.sendcounts, l.sdispls,
                                              recv[r].data(), l.recvcounts, l.rdispls);
    });
    CheckFailsRemote(st, "size mismatch");
    CHECK(st[1].code == PLEXUS_ERR_REMOTE);
    // Rank 1's block for rank 0 was not written.
    const uint64_t at = layout[1].rdispls[0] * 4;
    CHECK(Bytes(recv[1].begin() + at, recv[1].begin() + at + expects * 4) ==
          Bytes(expects * 4, kUntouched));
  }
}

TEST_CASE("alltoallv: a rank's own block must agree with itself") {
  Bytes a(16), b(16);
  const std::vector<uint64_t> sendcounts = {2, 1}, recvcounts = {1, 1}, displs = {0, 2};
  const auto st = RunRanks(2, [&](PeerTransport& t, uint32_t r) {
    if (r == 1) {
      return plexus::algos::PairwiseAlltoallv(t, Sig(PLEXUS_COLL_ALLTOALLV, PLEXUS_DTYPE_INT8, 0),
                                              a.data(), recvcounts, displs, b.data(), recvcounts,
                                              displs);
    }
    return plexus::algos::PairwiseAlltoallv(t, Sig(PLEXUS_COLL_ALLTOALLV, PLEXUS_DTYPE_INT8, 0),
                                            a.data(), sendcounts, displs, b.data(), recvcounts,
                                            displs);
  });
  CHECK(st[0].code == PLEXUS_ERR_INVALID_ARGUMENT);
  CHECK(st[0].message.find("sends itself 2 elements but expects 1") != std::string::npos);
  CHECK(st[1].code == PLEXUS_ERR_REMOTE);  // told by rank 0, not left waiting
}

// --- allreduce_coalesced ----------------------------------------------------

template <class T>
T Value(uint32_t rank, size_t buffer, uint64_t i) {
  return T(int64_t((rank * 7 + buffer * 3 + i) % 11) - 5);
}

template <class T>
T Combine(T a, T b, plexus_reduce_op_t op) {
  switch (op) {
    case PLEXUS_OP_PROD:
      return T(a * b);
    case PLEXUS_OP_MIN:
      return std::min(a, b);
    case PLEXUS_OP_MAX:
      return std::max(a, b);
    default:  // sum, avg
      return T(a + b);
  }
}

template <class T>
void CheckCoalesced(uint32_t n, plexus_dtype_t dtype, plexus_reduce_op_t op,
                    const std::vector<uint64_t>& counts, AllreduceFn allreduce) {
  CAPTURE(n);
  CAPTURE(dtype);
  CAPTURE(op);
  CAPTURE(counts.size());
  const size_t nb = counts.size();
  uint64_t total = 0;
  for (uint64_t c : counts) total += c;
  // Even buffers out of place, odd ones in place.
  std::vector<std::vector<std::vector<T>>> send(n, std::vector<std::vector<T>>(nb));
  std::vector<std::vector<std::vector<T>>> recv = send;
  for (uint32_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < nb; ++i) {
      for (uint64_t k = 0; k < counts[i]; ++k) send[r][i].push_back(Value<T>(r, i, k));
      recv[r][i].assign(counts[i], T(99));
      if (i % 2) recv[r][i] = send[r][i];
    }
  }
  const auto st = RunRanks(n, [&](PeerTransport& t, uint32_t r) {
    std::vector<const void*> s(nb);
    std::vector<void*> d(nb);
    for (size_t i = 0; i < nb; ++i) {
      d[i] = recv[r][i].data();
      s[i] = i % 2 ? d[i] : send[r][i].data();
    }
    return plexus::algos::PackedAllreduceCoalesced(
        t, Sig(PLEXUS_COLL_ALLREDUCE_COALESCED, dtype, total, 0, op), s, d, counts, allreduce);
  });
  REQUIRE(AllOk(st));
  for (size_t i = 0; i < nb; ++i) {
    std::vector<T> expected(counts[i]);
    for (uint64_t k = 0; k < counts[i]; ++k) {
      T acc = Value<T>(0, i, k);
      for (uint32_t r = 1; r < n; ++r) acc = Combine(acc, Value<T>(r, i, k), op);
      expected[k] = op == PLEXUS_OP_AVG ? T(acc / T(n)) : acc;
    }
    for (uint32_t r = 0; r < n; ++r) {
      CAPTURE(i);
      CAPTURE(r);
      CHECK(recv[r][i] == expected);
    }
  }
}

TEST_CASE("allreduce_coalesced: exact for integers, empty buffers, in place, every allreduce") {
  const std::vector<uint64_t> counts = {3, 0, 1, 17, 0, 5, 1000};
  for (AllreduceFn fn : {&plexus::algos::RingAllreduce, &plexus::algos::RecursiveDoublingAllreduce,
                         &plexus::algos::PairExchangeAllreduce}) {
    for (uint32_t n = 1; n <= 5; ++n) {
      CheckCoalesced<int32_t>(n, PLEXUS_DTYPE_INT32, PLEXUS_OP_SUM, counts, fn);
      CheckCoalesced<int64_t>(n, PLEXUS_DTYPE_INT64, PLEXUS_OP_MIN, counts, fn);
      CheckCoalesced<int8_t>(n, PLEXUS_DTYPE_INT8, PLEXUS_OP_MAX, counts, fn);
      CheckCoalesced<int32_t>(n, PLEXUS_DTYPE_INT32, PLEXUS_OP_AVG, counts, fn);
      CheckCoalesced<double>(n, PLEXUS_DTYPE_FLOAT64, PLEXUS_OP_SUM, counts, fn);
    }
  }
  // One buffer (all-reduced where it is) and only empty ones.
  CheckCoalesced<int32_t>(3, PLEXUS_DTYPE_INT32, PLEXUS_OP_SUM, {70000},
                          plexus::algos::RingAllreduce);
  CheckCoalesced<int32_t>(3, PLEXUS_DTYPE_INT32, PLEXUS_OP_SUM, {0, 0},
                          plexus::algos::RingAllreduce);
}

TEST_CASE("allreduce_coalesced: a count that is not the sum is refused") {
  int32_t a[4] = {}, b[4] = {};
  const void* s[] = {a, b};
  void* d[] = {a, b};
  const std::vector<uint64_t> counts = {4, 4};
  const auto st = RunRanks(1, [&](PeerTransport& t, uint32_t) {
    return plexus::algos::PackedAllreduceCoalesced(
        t, Sig(PLEXUS_COLL_ALLREDUCE_COALESCED, PLEXUS_DTYPE_INT32, 7, 0, PLEXUS_OP_SUM), s, d,
        counts, plexus::algos::RingAllreduce);
  });
  CHECK(st[0].code == PLEXUS_ERR_INTERNAL);
}

}  // namespace

// --- reduce_scatterv (ABI 1.4) ----------------------------------------------

// Rank r's input element i of block b: small integers, so every sum is exact
// in any order.
int32_t Input(uint32_t r, uint32_t b, uint64_t i) {
  return int32_t((r + 1) * 1000 + b * 10 + i % 7);
}

void CheckReduceScatterv(const std::vector<uint64_t>& counts, bool in_place) {
  const uint32_t n = uint32_t(counts.size());
  CAPTURE(n);
  CAPTURE(in_place);
  uint64_t extent = 0;
  const std::vector<uint64_t> displs = ReversedDispls(counts, &extent);
  std::vector<std::vector<int32_t>> send(n, std::vector<int32_t>(extent, -1));
  for (uint32_t r = 0; r < n; ++r) {
    for (uint32_t b = 0; b < n; ++b) {
      for (uint64_t i = 0; i < counts[b]; ++i) send[r][displs[b] + i] = Input(r, b, i);
    }
  }
  std::vector<std::vector<int32_t>> recv(n);
  for (uint32_t r = 0; r < n; ++r) recv[r].assign(counts[r] + 1, -7);  // one past: untouched
  const auto st = RunRanks(n, [&](PeerTransport& t, uint32_t r) {
    plexus::abi::Call call{PLEXUS_COLL_REDUCE_SCATTERV,
                           send[r].data(),
                           in_place ? send[r].data() + displs[r] : recv[r].data(),
                           counts[r],
                           PLEXUS_DTYPE_INT32,
                           PLEXUS_OP_SUM};
    call.sendcounts = counts.data();
    call.sdispls = displs.data();
    return plexus::algos::Algorithm<PLEXUS_COLL_REDUCE_SCATTERV>::Run(
        t, Sig(PLEXUS_COLL_REDUCE_SCATTERV, PLEXUS_DTYPE_INT32, 0, 0, PLEXUS_OP_SUM), call);
  });
  REQUIRE(AllOk(st));
  for (uint32_t r = 0; r < n; ++r) {
    CAPTURE(r);
    const int32_t* got = in_place ? send[r].data() + displs[r] : recv[r].data();
    bool exact = true;
    for (uint64_t i = 0; i < counts[r]; ++i) {
      int32_t sum = 0;
      for (uint32_t q = 0; q < n; ++q) sum += Input(q, r, i);
      exact = exact && got[i] == sum;
    }
    CHECK(exact);
    if (!in_place) CHECK(recv[r][counts[r]] == -7);
    // The gaps between blocks stay untouched.
    if (in_place) CHECK(send[r][0] == -1);
  }
}

TEST_CASE("reduce_scatterv: uneven counts with zeros on 1 to 5 ranks, in place or not") {
  for (uint32_t n = 1; n <= 5; ++n) {
    std::vector<uint64_t> uneven(n), one_block(n), none(n, 0);
    for (uint32_t r = 0; r < n; ++r) uneven[r] = (r * 3 + 1) % 4;  // 1 0 3 2 1
    one_block[n - 1] = 9;
    for (const auto& counts : {uneven, one_block, none}) {
      for (bool in_place : {false, true}) CheckReduceScatterv(counts, in_place);
    }
  }
}

TEST_CASE("reduce_scatterv: blocks larger than a segment") {
  CheckReduceScatterv({100000, 3, 0, 70000}, false);
  CheckReduceScatterv({0, 140000, 65537}, true);
}
