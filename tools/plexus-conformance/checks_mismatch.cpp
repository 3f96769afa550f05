// Mismatched collectives: every rank's call is valid
// by itself, but the ranks disagree: per-rank counts that the last rank sees
// otherwise, or a root it names otherwise (PostMine). As for the mismatched
// allreduces (checks_failures.cpp): an error on some rank (REMOTE, or
// TIMEOUT within the bound) passes; no completion within 4x timeout_ms + 5 s
// fails; OK with data other than this rank's own view of the call expects
// fails; OK on every rank fails, since the mismatch went unnoticed. Each
// runs on a fresh communicator with the fault timeout, posted once every
// rank has it.
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

constexpr uint64_t kCount = 1000;  // elements per block
constexpr uint64_t kExtra = 24;    // what the last rank adds to one block

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
// Per-rank counts (kCount per block) disagree on the last rank: in the
// arrays all ranks share (allgatherv, reduce_scatterv) its own block is
// kExtra longer, else it sends rank 0 kExtra more; a rooted collective's
// last rank names itself the root, the others rank 0.
plexus_request* PostMine(Context& ctx, plexus_comm* comm, Operation& op, plexus_collective_t coll,
                         plexus_dtype_t dt, std::string* mine) {
  const abi::Traits t = abi::TraitsOf(coll);
  const bool per_rank = t.layout == abi::Layout::kPerRankCounts;
  const uint32_t rank = ctx.rank, size = ctx.size, last = size - 1;
  const uint64_t salt = ctx.seq;
  std::vector<uint64_t> sendcounts(size, kCount), recvcounts(size, kCount);
  std::vector<uint64_t>& odd = t.send_per_rank ? sendcounts : recvcounts;
  const uint32_t at = t.counts_alike ? last : 0;
  if (per_rank && rank == last) odd[at] += kExtra;
  const uint64_t count = t.counts_alike ? odd[rank] : kCount;
  const uint32_t root = t.root == abi::Root::kRoot && rank == last ? last : 0;
  uint64_t send_total = 0, recv_total = 0;
  const std::vector<uint64_t> sdispls = Packed(sendcounts, &send_total);
  const std::vector<uint64_t> rdispls = Packed(recvcounts, &recv_total);
  const bool sends = per_rank || (t.needs_send && (!t.send_on_root_only || rank == root));
  const bool recvs = per_rank || (t.needs_recv && (!t.recv_on_root_only || rank == root));
  const uint64_t send_extent = sends ? (t.send_per_rank ? send_total : count) : 0;
  const size_t s = op.AddBuffer(send_extent, "sendbuf");
  const size_t r = op.AddBuffer(recvs ? (t.recv_per_rank ? recv_total : count) : 0, "recvbuf");
  // Rank i's block for rank j starts at element j << 32 of i's data when
  // i sends each rank its own block.
  auto first = [&](uint32_t j) { return t.send_per_rank ? uint64_t(j) << 32 : 0; };
  if (sends && t.reduces) {
    FillReduceInput(dt, PLEXUS_OP_SUM, rank, size, salt, 0, send_extent, op.data(s));
  } else if (sends && t.send_per_rank) {
    for (uint32_t j = 0; j < size; ++j)
      FillMoveData(dt, rank, salt, first(j), sendcounts[j], op.element(s, sdispls[j]));
  } else if (sends) {
    FillMoveData(dt, rank, salt, 0, count, op.data(s));
  } else if (recvs && rank == root && t.root == abi::Root::kRoot) {
    FillMoveData(dt, rank, salt, 0, count, op.data(r));  // broadcast: the root's buf is the input
  }
  if (recvs && t.reduces) {
    std::vector<uint8_t> want(count * ElementSize(dt));
    FillReduceResult(dt, PLEXUS_OP_SUM, size, salt, t.send_per_rank ? sdispls[rank] : 0, count,
                     want.data());
    op.ExpectResult(r, 0, count, std::move(want), "recvbuf");
  } else if (recvs && t.recv_per_rank) {
    for (uint32_t i = 0; i < size; ++i) {
      op.ExpectResult(r, rdispls[i], recvcounts[i],
                      MoveData(dt, i, salt, first(rank), recvcounts[i]),
                      "block from rank " + std::to_string(i));
    }
  } else if (recvs) {
    op.ExpectResult(r, 0, count, MoveData(dt, root, salt, first(rank), count), "recvbuf");
  }
  abi::Call c{.coll = coll,
              .sendbuf = sends ? op.data(s) : nullptr,
              .recvbuf = recvs ? op.data(r) : nullptr,
              .count = t.send_per_rank && t.recv_per_rank ? 0 : count,
              .dtype = dt,
              .op = t.reduces ? PLEXUS_OP_SUM : 0,
              .root = root};
  if (t.root == abi::Root::kRoot) {
    *mine = "root " + std::to_string(root) + ": ";
  } else {
    *mine = std::string(t.send_per_rank ? "sendcounts[" : "recvcounts[") + std::to_string(at) +
            "] " + std::to_string(odd[at]) + ", ";
    *mine +=
        t.counts_alike
            ? std::string(t.recv_per_rank ? "sendcount " : "recvcount ") + std::to_string(count)
            : "recvcounts[" + std::to_string(last) + "] " + std::to_string(recvcounts[last]);
    *mine += ": ";
  }
  if (per_rank && t.send_per_rank) {
    c.sendcounts = sendcounts.data();
    c.sdispls = sdispls.data();
  }
  if (per_rank && t.recv_per_rank) {
    c.recvcounts = recvcounts.data();
    c.rdispls = rdispls.data();
  }
  plexus_request* req = nullptr;
  op.Posted(CollectiveName(coll), ctx.calls().post(comm, c, &req), &req);
  return op.requests().empty() ? nullptr : op.requests().back();
}

Outcome RunMismatched(Context& ctx, plexus_collective_t coll) {
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
  const Status met = ctx.exchange().Barrier("mismatch/" + std::to_string(ctx.seq));
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
  c.run = [coll](Context& ctx) { return RunMismatched(ctx, coll); };
  c.combine = CombineMismatch;
  return c;
}

}  // namespace

// The collectives whose ranks can disagree on counts or on the root.
std::vector<Check> MismatchChecks(const plexus_capabilities&, uint32_t) {
  std::vector<Check> out;
  for (plexus_collective_t coll = 0; coll < abi::kCollectiveCount; ++coll) {
    const abi::Traits t = abi::TraitsOf(coll);
    const std::string name = CollectiveName(coll);
    if (t.root == abi::Root::kRoot)
      out.push_back(Make("failures: " + name + " with different roots", coll));
    if (t.layout != abi::Layout::kPerRankCounts) continue;
    const char* how = !t.counts_alike   ? "one rank sends rank 0 more"
                      : t.recv_per_rank ? "one rank sends more"
                                        : "one rank's block is longer";
    out.push_back(Make("failures: mismatched " + name + " counts (" + how + ")", coll));
  }
  return out;
}

}  // namespace plexus::conformance
