// kit::PostAlgos with the ABI 1.2 collectives, through kit::OpQueue over
// the in-memory transport of tests/algos (a double of our own seam): the
// arrays of allgatherv, alltoallv and allreduce_coalesced are the caller's
// only during the post (the test scribbles over them before waiting), a
// rank that moves nothing in a v-collective still takes part (never
// skipped as "count 0"), and the frames of every rank carry the same
// signature.
#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "../algos/mem_transport.hpp"
#include "plexus/kit/collective_algorithms.hpp"
#include "plexus/kit/op_queue.hpp"

namespace {

using plexus::algos::OpSignature;
using plexus::algos::Status;
using plexus::kit::Call;
using plexus::kit::QueuedRequests;
using plexus::test::MemTransport;
using plexus::test::MemWorld;

// The rest of a QueueTransport: no messages here; a failure tells the
// other ranks, as a real transport's Fail does. Abort is local (it tells
// nobody), and nothing here aborts a running operation: the queue's
// destructor calls it once a rank is done.
class QueueMemTransport : public MemTransport<plexus::kit::QueueTransport> {
 public:
  using MemTransport::MemTransport;
  Status PostMessage(plexus::kit::Message*) override {
    return {PLEXUS_ERR_INTERNAL, "no send/recv in this test"};
  }
  Status Drive(const std::function<bool()>&) override { return {}; }
  void Cancel() override {}
  void Fail(const OpSignature&, const Status& why) override { world_.Fail(rank_, why); }
  void Wake() override {}
  void Abort() override {}
};

// Elements rank `from` sends rank `to` in the alltoallv: uneven, and rank
// 0 neither sends nor receives anything.
uint64_t PairCount(uint32_t from, uint32_t to) {
  return from == 0 || to == 0 ? 0 : (from + to) % 3 + 1;
}
int32_t PairValue(uint32_t from, uint32_t to, uint64_t i) {
  return int32_t(from * 1000 + to * 100 + i);
}

// allgatherv: rank 1 (of 2 or more) contributes nothing.
uint64_t GatherCount(uint32_t rank) {
  return rank == 1 ? 0 : rank + 2;
}

constexpr uint64_t kScribble = 0xdeadbeefdeadbeefull;

TEST_CASE("PostAlgos: the 1.2 collectives through the queue, arrays borrowed for the post only") {
  for (uint32_t n = 1; n <= 4; ++n) {
    CAPTURE(n);
    MemWorld world(n, 20000);
    plexus_host_v1 host{};
    host.struct_size = sizeof host;
    const uint32_t root = 1 % n;
    std::vector<uint64_t> gv_counts(n), gv_displs(n);
    for (uint32_t r = 0; r < n; ++r) gv_counts[r] = GatherCount(r);
    std::exclusive_scan(gv_counts.begin(), gv_counts.end(), gv_displs.begin(), uint64_t{0});
    const uint64_t gv_total = std::accumulate(gv_counts.begin(), gv_counts.end(), uint64_t{0});

    std::vector<std::vector<int32_t>> gv_out(n), a2a_out(n), gather_out(n), scatter_out(n);
    std::vector<std::vector<std::vector<int32_t>>> coalesced(n);
    std::vector<std::thread> threads;
    std::vector<int> failures(n);
    for (uint32_t r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        QueueMemTransport t(world, r);
        plexus::kit::OpQueueOptions o;
        o.backend = "test";
        o.rank = r;
        o.size = n;
        o.timeout_ms = 20000;
        o.name = "test/0";
        plexus::kit::OpQueue q(host, t, o);
        std::vector<plexus_request*> reqs;
        auto post = [&](const Call& c) {
          plexus_request* req = nullptr;
          // (CHECK, not REQUIRE: this runs on a rank's thread)
          CHECK(plexus::kit::PostAlgos(q, c, plexus::kit::AllreduceAlgo::kRing, &req) == PLEXUS_OK);
          if (req) reqs.push_back(req);
        };

        // allgatherv
        std::vector<int32_t> gv_send(gv_counts[r]);
        for (uint64_t i = 0; i < gv_send.size(); ++i) gv_send[i] = int32_t(r * 100 + i);
        gv_out[r].assign(gv_total, -1);
        std::vector<uint64_t> counts = gv_counts, displs = gv_displs;
        Call gv{PLEXUS_COLL_ALLGATHERV, gv_send.data(), gv_out[r].data(), gv_counts[r],
                PLEXUS_DTYPE_INT32};
        gv.recvcounts = counts.data();
        gv.rdispls = displs.data();
        post(gv);
        counts.assign(n, kScribble);
        displs.assign(n, kScribble);

        // alltoallv
        std::vector<uint64_t> sc(n), sd(n), rc(n), rd(n);
        for (uint32_t j = 0; j < n; ++j) {
          sc[j] = PairCount(r, j);
          rc[j] = PairCount(j, r);
        }
        std::exclusive_scan(sc.begin(), sc.end(), sd.begin(), uint64_t{0});
        std::exclusive_scan(rc.begin(), rc.end(), rd.begin(), uint64_t{0});
        std::vector<int32_t> a2a_send;
        for (uint32_t j = 0; j < n; ++j) {
          for (uint64_t i = 0; i < sc[j]; ++i) a2a_send.push_back(PairValue(r, j, i));
        }
        a2a_out[r].assign(std::accumulate(rc.begin(), rc.end(), uint64_t{0}), -1);
        Call a2a{PLEXUS_COLL_ALLTOALLV, a2a_send.data(), a2a_out[r].data(), 0, PLEXUS_DTYPE_INT32};
        a2a.sendcounts = sc.data();
        a2a.sdispls = sd.data();
        a2a.recvcounts = rc.data();
        a2a.rdispls = rd.data();
        post(a2a);
        for (auto* v : {&sc, &sd, &rc, &rd}) v->assign(n, kScribble);

        // allreduce_coalesced: three buffers, the middle one empty, the last in place.
        const std::vector<uint64_t> lens = {5, 0, 3};
        std::vector<std::vector<int32_t>> in(3);
        coalesced[r].resize(3);
        for (size_t b = 0; b < 3; ++b) {
          for (uint64_t i = 0; i < lens[b]; ++i) in[b].push_back(int32_t(r + b * 10 + i));
          coalesced[r][b] = b == 2 ? in[b] : std::vector<int32_t>(lens[b], -1);
        }
        std::vector<const void*> sendbufs = {in[0].data(), in[1].data(), coalesced[r][2].data()};
        std::vector<void*> recvbufs = {coalesced[r][0].data(), coalesced[r][1].data(),
                                       coalesced[r][2].data()};
        std::vector<uint64_t> bufcounts = lens;
        Call co{PLEXUS_COLL_ALLREDUCE_COALESCED,
                nullptr,
                nullptr,
                8,
                PLEXUS_DTYPE_INT32,
                PLEXUS_OP_SUM};
        co.sendbufs = sendbufs.data();
        co.recvbufs = recvbufs.data();
        co.counts = bufcounts.data();
        co.nbuffers = 3;
        post(co);
        sendbufs.assign(3, nullptr);
        recvbufs.assign(3, nullptr);
        bufcounts.assign(3, kScribble);

        // gather to `root`, scatter from it: 2 elements a rank.
        const std::vector<int32_t> mine = {int32_t(r), int32_t(r * 10)};
        gather_out[r].assign(r == root ? 2 * n : 0, -1);
        post({PLEXUS_COLL_GATHER, mine.data(), r == root ? gather_out[r].data() : nullptr, 2,
              PLEXUS_DTYPE_INT32, 0, root});
        std::vector<int32_t> blocks;
        for (uint32_t j = 0; j < n; ++j) blocks.insert(blocks.end(), {int32_t(j + 7), int32_t(j)});
        scatter_out[r].assign(2, -1);
        post({PLEXUS_COLL_SCATTER, r == root ? blocks.data() : nullptr, scatter_out[r].data(), 2,
              PLEXUS_DTYPE_INT32, 0, root});

        for (plexus_request* req : reqs) {
          const int32_t rc_wait = QueuedRequests::Wait(*req, -1);
          if (rc_wait != PLEXUS_OK) {
            char text[512];
            QueuedRequests::Error(*req, text, sizeof text);
            MESSAGE("rank " << r << ": " << text);
            ++failures[r];
          }
          QueuedRequests::Free(req);
        }
      });
    }
    for (std::thread& th : threads) th.join();
    for (uint32_t r = 0; r < n; ++r) REQUIRE(failures[r] == 0);

    for (uint32_t r = 0; r < n; ++r) {
      CAPTURE(r);
      std::vector<int32_t> gv_expected;
      for (uint32_t j = 0; j < n; ++j) {
        for (uint64_t i = 0; i < gv_counts[j]; ++i) gv_expected.push_back(int32_t(j * 100 + i));
      }
      CHECK(gv_out[r] == gv_expected);
      std::vector<int32_t> a2a_expected;
      for (uint32_t j = 0; j < n; ++j) {
        for (uint64_t i = 0; i < PairCount(j, r); ++i) a2a_expected.push_back(PairValue(j, r, i));
      }
      CHECK(a2a_out[r] == a2a_expected);
      for (size_t b = 0; b < 3; ++b) {
        for (uint64_t i = 0; i < coalesced[r][b].size(); ++i) {
          // sum over ranks of (rank + b * 10 + i)
          CHECK(coalesced[r][b][i] == int32_t(n * (n - 1) / 2 + n * (b * 10 + i)));
        }
      }
      CHECK(scatter_out[r] == std::vector<int32_t>{int32_t(r + 7), int32_t(r)});
    }
    std::vector<int32_t> gather_expected;
    for (uint32_t j = 0; j < n; ++j)
      gather_expected.insert(gather_expected.end(), {int32_t(j), int32_t(j * 10)});
    CHECK(gather_out[root] == gather_expected);

    // Every frame of one operation carries the same signature on every rank:
    // allgatherv the sum of recvcounts, alltoallv 0, coalesced the sum of counts.
    for (const OpSignature& s : world.Sent()) {
      if (s.coll == PLEXUS_COLL_ALLGATHERV) CHECK(s.count == gv_total);
      if (s.coll == PLEXUS_COLL_ALLTOALLV) CHECK(s.count == 0);
      if (s.coll == PLEXUS_COLL_ALLREDUCE_COALESCED) CHECK(s.count == 8);
    }
    CHECK(world.Unread() == 0);
  }
}

TEST_CASE("PostAlgos: v-collectives where every count is 0 still run, and fail on disagreement") {
  // Two ranks; rank 0 posts an allgatherv and an alltoallv of nothing at
  // all, rank 1 says rank 0 sends it one element in each. Skipping the
  // "empty" posts on rank 0 would leave rank 1 to its timeout; running them
  // fails both operations with REMOTE at once.
  MemWorld world(2, 20000);
  plexus_host_v1 host{};
  host.struct_size = sizeof host;
  std::vector<int32_t> status(2 * 2, PLEXUS_OK);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      QueueMemTransport t(world, r);
      plexus::kit::OpQueueOptions o;
      o.backend = "test";
      o.rank = r;
      o.size = 2;
      o.timeout_ms = 20000;
      o.name = "test/0";
      plexus::kit::OpQueue q(host, t, o);
      int32_t buf[4] = {};
      const std::vector<uint64_t> zero = {0, 0}, one_from_0 = {1, 0}, displs = {0, 1};
      Call gv{PLEXUS_COLL_ALLGATHERV, buf, buf + 2, 0, PLEXUS_DTYPE_INT32};
      gv.recvcounts = r == 0 ? zero.data() : one_from_0.data();
      gv.rdispls = displs.data();
      Call a2a{PLEXUS_COLL_ALLTOALLV, buf, buf + 2, 0, PLEXUS_DTYPE_INT32};
      a2a.sendcounts = zero.data();
      a2a.sdispls = displs.data();
      a2a.recvcounts = r == 0 ? zero.data() : one_from_0.data();
      a2a.rdispls = displs.data();
      plexus_request* reqs[2] = {};
      CHECK(plexus::kit::PostAlgos(q, gv, plexus::kit::AllreduceAlgo::kRing, &reqs[0]) ==
            PLEXUS_OK);
      CHECK(plexus::kit::PostAlgos(q, a2a, plexus::kit::AllreduceAlgo::kRing, &reqs[1]) ==
            PLEXUS_OK);
      for (int i = 0; i < 2; ++i) {
        if (!reqs[i]) continue;
        status[r * 2 + i] = QueuedRequests::Wait(*reqs[i], -1);
        QueuedRequests::Free(reqs[i]);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  // (The frames' count differs too, 0 against 1: a collective mismatch.)
  for (int32_t s : status) CHECK(s == PLEXUS_ERR_REMOTE);
}

// reduce_scatterv (ABI 1.4) has no case of its own in the kit: PostAlgos
// runs the algorithm the list binds to it, on copies of the arrays (the
// test scribbles over them before waiting). Ranks whose sendcounts differ
// but add up alike fail with REMOTE on every rank, at once: the frames'
// signature carries a hash of the counts.
enum class Disagree { kNone, kBlockEnds, kAllEmpty };
void RunReduceScatterv(Disagree disagree, std::vector<int32_t>* status,
                       std::vector<std::vector<int32_t>>* out) {
  constexpr uint32_t n = 3;
  MemWorld world(n, 20000);
  plexus_host_v1 host{};
  host.struct_size = sizeof host;
  status->assign(n, PLEXUS_OK);
  out->assign(n, {});
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      QueueMemTransport t(world, r);
      plexus::kit::OpQueueOptions o;
      o.backend = "test";
      o.rank = r;
      o.size = n;
      o.timeout_ms = 20000;
      o.name = "test/0";
      plexus::kit::OpQueue q(host, t, o);
      // Rank 2 disagrees on where blocks 0 and 2 end, not on their sum; a
      // rank whose block is empty may finish before it hears of it.
      std::vector<uint64_t> counts = {3, 2, 5};
      if (disagree == Disagree::kBlockEnds && r == 2) counts = {4, 2, 4};
      // A rank with nothing to move at all must still meet the others' frames.
      if (disagree == Disagree::kAllEmpty && r == 0) counts = {0, 0, 0};
      const std::vector<uint64_t> displs_in_reverse = {counts[2] + counts[1], counts[2], 0};
      std::vector<uint64_t> displs = displs_in_reverse;
      std::vector<int32_t> send(10);
      for (uint32_t b = 0; b < n; ++b) {
        for (uint64_t i = 0; i < counts[b]; ++i)
          send[displs[b] + i] = int32_t(r * 100 + b * 10 + i);
      }
      (*out)[r].assign(counts[r], -1);
      Call c{PLEXUS_COLL_REDUCE_SCATTERV, send.data(),  (*out)[r].data(), counts[r],
             PLEXUS_DTYPE_INT32,          PLEXUS_OP_SUM};
      c.sendcounts = counts.data();
      c.sdispls = displs.data();
      plexus_request* req = nullptr;
      (*status)[r] = plexus::kit::PostAlgos(q, c, plexus::kit::AllreduceAlgo::kRing, &req);
      std::fill(counts.begin(), counts.end(), kScribble);
      std::fill(displs.begin(), displs.end(), kScribble);
      if (req) {
        (*status)[r] = QueuedRequests::Wait(*req, -1);
        QueuedRequests::Free(req);
      }
    });
  }
  for (std::thread& th : threads) th.join();
}

TEST_CASE("PostAlgos: reduce_scatterv through the list, and counts that disagree") {
  std::vector<int32_t> status;
  std::vector<std::vector<int32_t>> out;
  RunReduceScatterv(Disagree::kNone, &status, &out);
  for (int32_t s : status) CHECK(s == PLEXUS_OK);
  // Block b, element i: the sum over ranks of r * 100 + b * 10 + i.
  CHECK(out[0] == std::vector<int32_t>{300, 303, 306});
  CHECK(out[1] == std::vector<int32_t>{330, 333});
  CHECK(out[2] == std::vector<int32_t>{360, 363, 366, 369, 372});
  RunReduceScatterv(Disagree::kBlockEnds, &status, &out);
  for (int32_t s : status) CHECK(s == PLEXUS_ERR_REMOTE);
  RunReduceScatterv(Disagree::kAllEmpty, &status, &out);
  for (int32_t s : status) CHECK(s == PLEXUS_ERR_REMOTE);
}

}  // namespace
