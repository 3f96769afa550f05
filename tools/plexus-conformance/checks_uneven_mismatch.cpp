// Mismatched uneven collectives: every rank's call is valid by itself, but
// the ranks disagree. allgatherv: the last rank sends more elements than the
// others' recvcounts say; reduce_scatterv: the last rank's block is longer
// in its own sendcounts than in the others'; alltoallv: the last rank sends rank 0 more than
// rank 0's recvcounts say; gather and scatter: the last rank names itself
// the root, the others rank 0. As for the mismatched allreduces
// (checks_failures.cpp): an error on some rank (REMOTE, or TIMEOUT within
// the bound) passes; no completion within 4x timeout_ms + 5 s fails; OK
// with data other than this rank's own view of the call expects fails; OK
// on every rank fails, since the mismatch went unnoticed. Each runs on a
// fresh communicator with the fault timeout, posted once every rank has it.
#include <string>
#include <vector>

#include "check.hpp"
#include "collective_case.hpp"
#include "data.hpp"
#include "exchange.hpp"
#include "fault_support.hpp"
#include "operation.hpp"
#include "options.hpp"
#include "plexus/abi/call.hpp"
#include "plexus/abi/collectives.hpp"
#include "plugin.hpp"

namespace plexus::conformance {
namespace {

constexpr uint64_t kCount = 1000;  // per rank (allgatherv, gather, scatter) or pair (alltoallv)
constexpr uint64_t kExtra = 24;    // what the odd rank sends beyond that

std::vector<uint8_t> MoveData(plexus_dtype_t dt, uint32_t rank, uint64_t salt, uint64_t first,
                              uint64_t count) {
  std::vector<uint8_t> v(count * ElementSize(dt));
  FillMoveData(dt, rank, salt, first, count, v.data());
  return v;
}

// Packed displacements of counts; *total their sum.
std::vector<uint64_t> Packed(const std::vector<uint64_t>& counts, uint64_t* total) {
  std::vector<uint64_t> displs(counts.size());
  uint64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = at;
    at += counts[i];
  }
  *total = at;
  return displs;
}

// Posts this rank's view of the mismatched call on op; returns the request
// (nullptr when the post failed) and says what this rank did in *mine.
plexus_request* PostMine(Context& ctx, plexus_comm* comm, Operation& op, plexus_collective_t coll,
                         plexus_dtype_t dt, std::string* mine) {
  const uint32_t rank = ctx.rank, size = ctx.size, last = size - 1;
  const bool odd = rank == last;
  const uint64_t salt = ctx.seq;
  const TracedCalls& t = ctx.calls();
  plexus_request* req = nullptr;
  switch (coll) {
    case PLEXUS_COLL_ALLGATHERV: {
      // Everybody's recvcounts say kCount for every rank, except the last
      // rank's own, which says (and it sends) kCount + kExtra.
      std::vector<uint64_t> counts(size, kCount);
      if (odd) counts[last] = kCount + kExtra;
      uint64_t total = 0;
      const std::vector<uint64_t> displs = Packed(counts, &total);
      const size_t r = op.AddBuffer(total, "recvbuf");
      const size_t s = op.AddBuffer(counts[rank], "sendbuf");
      FillMoveData(dt, rank, salt, 0, counts[rank], op.data(s));
      for (uint32_t j = 0; j < size; ++j) {
        op.ExpectResult(r, displs[j], counts[j], MoveData(dt, j, salt, 0, counts[j]),
                        "block of rank " + std::to_string(j));
      }
      *mine = "sendcount " + std::to_string(counts[rank]) + ", recvcounts[" + std::to_string(last) +
              "] " + std::to_string(counts[last]) + ": ";
      op.Posted("allgatherv",
                t.post(comm,
                       abi::Call{.coll = PLEXUS_COLL_ALLGATHERV,
                                 .sendbuf = op.data(s),
                                 .recvbuf = op.data(r),
                                 .count = counts[rank],
                                 .dtype = dt,
                                 .placement = nullptr,
                                 .recvcounts = counts.data(),
                                 .rdispls = displs.data()},
                       &req),
                &req);
      break;
    }
    case PLEXUS_COLL_REDUCE_SCATTERV: {
      // Everybody's sendcounts say kCount for every block, except the last
      // rank's, whose own block (and recvcount) says kCount + kExtra.
      std::vector<uint64_t> counts(size, kCount);
      if (odd) counts[last] = kCount + kExtra;
      uint64_t total = 0;
      const std::vector<uint64_t> displs = Packed(counts, &total);
      const size_t s = op.AddBuffer(total, "sendbuf");
      const size_t r = op.AddBuffer(counts[rank], "recvbuf");
      FillReduceInput(dt, PLEXUS_OP_SUM, rank, size, salt, 0, total, op.data(s));
      auto want = std::vector<uint8_t>(counts[rank] * ElementSize(dt));
      FillReduceResult(dt, PLEXUS_OP_SUM, size, salt, displs[rank], counts[rank], want.data());
      op.ExpectResult(r, 0, counts[rank], std::move(want), "recvbuf");
      *mine = "recvcount " + std::to_string(counts[rank]) + ", sendcounts[" + std::to_string(last) +
              "] " + std::to_string(counts[last]) + ": ";
      op.Posted("reduce_scatterv",
                t.post(comm,
                       abi::Call{.coll = PLEXUS_COLL_REDUCE_SCATTERV,
                                 .sendbuf = op.data(s),
                                 .recvbuf = op.data(r),
                                 .count = counts[rank],
                                 .dtype = dt,
                                 .op = PLEXUS_OP_SUM,
                                 .placement = nullptr,
                                 .sendcounts = counts.data(),
                                 .sdispls = displs.data()},
                       &req),
                &req);
      break;
    }
    case PLEXUS_COLL_ALLTOALLV: {
      // kCount between every pair, except that the last rank sends rank 0
      // kCount + kExtra while rank 0 expects kCount from it.
      std::vector<uint64_t> sendcounts(size, kCount), recvcounts(size, kCount);
      if (odd) sendcounts[0] = kCount + kExtra;
      uint64_t stotal = 0, rtotal = 0;
      const std::vector<uint64_t> sdispls = Packed(sendcounts, &stotal);
      const std::vector<uint64_t> rdispls = Packed(recvcounts, &rtotal);
      const size_t s = op.AddBuffer(stotal, "sendbuf");
      const size_t r = op.AddBuffer(rtotal, "recvbuf");
      for (uint32_t j = 0; j < size; ++j) {
        FillMoveData(dt, rank, salt, uint64_t(j) << 32, sendcounts[j], op.element(s, sdispls[j]));
      }
      for (uint32_t i = 0; i < size; ++i) {
        op.ExpectResult(r, rdispls[i], recvcounts[i],
                        MoveData(dt, i, salt, uint64_t(rank) << 32, recvcounts[i]),
                        "block from rank " + std::to_string(i));
      }
      *mine = "sendcounts[0] " + std::to_string(sendcounts[0]) + ", recvcounts[" +
              std::to_string(last) + "] " + std::to_string(recvcounts[last]) + ": ";
      op.Posted("alltoallv",
                t.post(comm,
                       abi::Call{.coll = PLEXUS_COLL_ALLTOALLV,
                                 .sendbuf = op.data(s),
                                 .recvbuf = op.data(r),
                                 .dtype = dt,
                                 .placement = nullptr,
                                 .sendcounts = sendcounts.data(),
                                 .sdispls = sdispls.data(),
                                 .recvcounts = recvcounts.data(),
                                 .rdispls = rdispls.data()},
                       &req),
                &req);
      break;
    }
    case PLEXUS_COLL_GATHER:
    case PLEXUS_COLL_SCATTER: {
      const uint32_t root = odd ? last : 0;
      const bool gather = coll == PLEXUS_COLL_GATHER;
      const uint64_t n = kCount;
      const size_t s =
          op.AddBuffer(gather || rank == root ? (gather ? n : n * size) : 0, "sendbuf");
      const size_t r =
          op.AddBuffer(!gather || rank == root ? (gather ? n * size : n) : 0, "recvbuf");
      if (gather) {
        FillMoveData(dt, rank, salt, 0, n, op.data(s));
        if (rank == root) {
          for (uint32_t j = 0; j < size; ++j) {
            op.ExpectResult(r, uint64_t(j) * n, n, MoveData(dt, j, salt, 0, n),
                            "root's block of rank " + std::to_string(j));
          }
        }
      } else {
        if (rank == root) FillMoveData(dt, rank, salt, 0, n * size, op.data(s));
        op.ExpectResult(r, 0, n, MoveData(dt, root, salt, uint64_t(rank) * n, n), "recvbuf");
      }
      *mine = "root " + std::to_string(root) + ": ";
      const void* send = op.data(s);
      void* recv = op.data(r);
      if (gather && rank != root) recv = nullptr;
      if (!gather && rank != root) send = nullptr;
      // coll is gather or scatter: the same arguments.
      op.Posted(CollectiveName(coll),
                t.post(comm, abi::Call{coll, send, recv, n, dt, 0, root, nullptr}, &req), &req);
      break;
    }
    default:
      break;
  }
  return op.requests().empty() ? nullptr : op.requests().back();
}

Outcome Mismatch12(Context& ctx, plexus_collective_t coll) {
  if (!(ctx.caps().collectives & (1u << coll))) return Outcome::Skip(NotClaimedReason(ctx, coll));
  if (!ctx.plugin().HasCollective(coll)) return Outcome::Skip(ctx.plugin().NoSlotReason(coll));
  if (ctx.size < 2) return Outcome::Skip("needs at least 2 ranks");
  plexus_dtype_t dt = PLEXUS_DTYPE_INT32;
  const uint32_t dtypes =
      abi::IsReduction(coll) ? ctx.caps().reduce_dtypes[PLEXUS_OP_SUM] : ctx.caps().dtypes;
  if (!(dtypes & (1u << dt))) {
    for (plexus_dtype_t d = 1; d <= PLEXUS_DTYPE_MAX_V1; ++d) {
      if (dtypes & (1u << d)) {
        dt = d;
        break;
      }
    }
  }
  const int64_t T = ctx.options.fault_timeout_ms;
  ScenarioComm comm(ctx, std::string("mismatch-") + CollectiveName(coll), T);
  // Every rank has made the communicator before any posts: a mismatch that
  // two fast ranks detect at once must not reach a rank still connecting
  // (UCX then fails that rank's comm_create with their error), which would
  // be a check of comm_create, not of the collective.
  const Status met = ctx.exchange().Barrier("mismatch12/" + std::to_string(ctx.seq));
  if (!comm.get()) {
    return Outcome::Fail("comm_create failed: " + StatusText(comm.status()) + ": " + comm.error());
  }
  if (!met.ok()) return Outcome::Fail("store barrier after comm_create: " + met.message());
  Operation op(ctx, comm.get(), dt);
  std::string mine;
  plexus_request* req = PostMine(ctx, comm.get(), op, coll, dt, &mine);
  if (!req) {
    // Every rank's call is valid by itself: refusing it is a bug.
    Findings f;
    bool ignored = false;
    op.Finish(&f, &ignored);
    if (f.empty()) f.Add(mine + "the post failed");
    return f.ToOutcome();
  }
  return JudgeMismatch(ctx, comm, op, req, mine, CollectiveName(coll));
}

Check Make(const std::string& name, plexus_collective_t coll) {
  Check c;
  c.name = name;
  c.group = "failures";
  c.run = [coll](Context& ctx) { return Mismatch12(ctx, coll); };
  c.combine = CombineMismatch;
  return c;
}

}  // namespace

std::vector<Check> MismatchChecks12(const plexus_capabilities&, uint32_t) {
  return {
      Make("failures: mismatched allgatherv counts (one rank sends more)", PLEXUS_COLL_ALLGATHERV),
      Make("failures: mismatched alltoallv counts (one rank sends rank 0 more)",
           PLEXUS_COLL_ALLTOALLV),
      Make("failures: mismatched reduce_scatterv counts (one rank's block is longer)",
           PLEXUS_COLL_REDUCE_SCATTERV),
      Make("failures: gather with different roots", PLEXUS_COLL_GATHER),
      Make("failures: scatter with different roots", PLEXUS_COLL_SCATTER),
  };
}

}  // namespace plexus::conformance
