// The matrix: every collective of the list the backend claims x claimed
// dtype x op x count or count pattern x placement (out of place, and in
// its in-place form) x root, results checked exactly on every rank
// (collective_case.hpp), plus send/recv in a ring and the barrier. A
// collective the backend does not claim gets one SKIP line saying why.
#include <algorithm>
#include <string>
#include <vector>

#include "check.hpp"
#include "collective_case.hpp"
#include "data.hpp"
#include "operation.hpp"
#include "options.hpp"
#include "plexus/abi/call.hpp"
#include "plexus/abi/collectives.hpp"
#include "plugin.hpp"
#include "rank_record.hpp"

namespace plexus::conformance {
namespace {

// send and recv, tested together: every rank sends to its right and
// receives from its left.
struct RingCase {
  plexus_dtype_t dtype;
  uint64_t count;
  bool send_first;  // every rank posts its send before its recv
};

// 0, 1, a prime, the large count, and one that the world size does not
// divide (for size > 1), each once.
std::vector<uint64_t> Counts(bool per_rank_blocks, uint32_t size, uint64_t max_count) {
  const uint64_t large = per_rank_blocks ? std::max<uint64_t>(1, max_count / size) : max_count;
  std::vector<uint64_t> counts;
  for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(1009), large, uint64_t(4) * size + 1}) {
    if (std::find(counts.begin(), counts.end(), n) == counts.end()) counts.push_back(n);
  }
  return counts;
}

std::vector<uint8_t> Bytes(uint64_t elements, plexus_dtype_t dtype) {
  return std::vector<uint8_t>(elements * ElementSize(dtype));
}

Outcome RunRing(Context& ctx, const RingCase& c) {
  const TracedCalls& t = ctx.calls();
  plexus_comm* comm = ctx.comm();
  const uint32_t rank = ctx.rank, size = ctx.size;
  const uint64_t n = c.count, salt = ctx.seq;
  const plexus_dtype_t dt = c.dtype;
  Operation op(ctx, comm, dt);
  SetPhase("backend collective post");
  const uint32_t right = (rank + 1) % size, left = (rank + size - 1) % size;
  const size_t s = op.AddBuffer(n, "send buf");
  const size_t r = op.AddBuffer(n, "recv buf");
  FillMoveData(dt, rank, salt, 0, n, op.data(s));
  auto want = Bytes(n, dt);
  FillMoveData(dt, left, salt, 0, n, want.data());
  op.ExpectUntouched(s, 0, n, "send buf");
  op.ExpectResult(r, 0, n, std::move(want), "recv buf (from rank " + std::to_string(left) + ")");
  // Paired: even ranks send first, odd ranks receive first, which works
  // even on a backend that runs operations one at a time. Send-first:
  // every rank posts its send, then its recv; a backend whose posts are
  // truly asynchronous completes both.
  const bool send_first = c.send_first || rank % 2 == 0;
  auto post_send =
      [&] {
        plexus_request* q = nullptr;
        op.Posted(
            "send to rank " + std::to_string(right),
            t.post(comm, abi::Call{PLEXUS_COLL_SEND, op.data(s), nullptr, n, dt, 0, right, nullptr},
                   &q),
            &q);
      };
  auto post_recv =
      [&] {
        plexus_request* q = nullptr;
        op.Posted(
            "recv from rank " + std::to_string(left),
            t.post(comm, abi::Call{PLEXUS_COLL_RECV, nullptr, op.data(r), n, dt, 0, left, nullptr},
                   &q),
            &q);
      };
  if (send_first) {
    post_send();
    post_recv();
      } else {
        post_recv();
        post_send();
      }
  Findings f;
  Outcome o;
  bool broken = false;
  op.Finish(&f, &broken);
  o = f.ToOutcome();
  o.comm_broken = broken;
  return o;
}

Outcome RunBarrier(Context& ctx) {
  Operation op(ctx, ctx.comm(), PLEXUS_DTYPE_UINT8);
  plexus_request* req = nullptr;
  op.Posted("barrier", ctx.calls().post(ctx.comm(), abi::Call{PLEXUS_COLL_BARRIER}, &req), &req);
  Findings f;
  bool broken = false;
  op.Finish(&f, &broken);
  Outcome o = f.ToOutcome();
  o.comm_broken = broken;
  return o;
}

std::vector<plexus_dtype_t> DtypesIn(uint32_t mask) {
  std::vector<plexus_dtype_t> out;
  for (plexus_dtype_t d = 1; d <= PLEXUS_DTYPE_MAX_V1; ++d) {
    if (mask & (1u << d)) out.push_back(d);
  }
  return out;
}

Check Make(std::string name, std::string group, std::string capability,
           std::function<Outcome(Context&)> run) {
  Check check;
  check.name = std::move(name);
  check.group = std::move(group);
  check.capability = std::move(capability);
  check.run = std::move(run);
  return check;
}

// The cases of one claimed collective of the list.
void AddCases(std::vector<Check>* out, plexus_collective_t coll, const plexus_capabilities& caps,
              uint32_t size, uint64_t max_count) {
  const abi::Traits t = abi::TraitsOf(coll);
  std::vector<bool> placements = {false};
  if ((caps.flags & PLEXUS_CAP_IN_PLACE) && t.in_place != abi::InPlace::kNone &&
      t.in_place != abi::InPlace::kDisjoint) {
    placements.push_back(true);
  }
  // Every count at the first and last root; every other root with one.
  const std::vector<uint64_t> counts = Counts(t.send_per_rank || t.recv_per_rank, size, max_count);
  const uint32_t roots = t.root == abi::Root::kRoot ? size : 1;
  auto add = [&](const CollectiveCase& c) {
    out->push_back(Make(CaseName(c, size, max_count), CollectiveName(coll), CaseCapability(c),
                        [c](Context& ctx) { return RunCollectiveCase(ctx, c, ctx.comm()); }));
  };
  for (plexus_dtype_t dt : DtypesIn(t.reduces ? ~0u : caps.dtypes)) {
    for (plexus_reduce_op_t rop = PLEXUS_OP_SUM; rop <= (t.reduces ? PLEXUS_OP_MAX_V1 : 1); ++rop) {
      if (t.reduces && !(caps.reduce_dtypes[rop] & (1u << dt))) continue;
      const plexus_reduce_op_t op = t.reduces ? rop : 0;
      for (Pattern p : PatternsOf(coll, op)) {
        for (uint32_t root = 0; root < roots; ++root) {
          const bool edge = root == 0 || root == size - 1;
          for (uint64_t n : p != Pattern::kNone ? std::vector<uint64_t>{0}
                            : edge              ? counts
                                                : std::vector<uint64_t>{1009}) {
            for (bool ip : placements) add({coll, dt, op, n, root, ip, p});
          }
        }
      }
    }
  }
}

}  // namespace

std::vector<Check> CollectiveChecks(const plexus_capabilities& caps, uint32_t size,
                                    const Options& options) {
  std::vector<Check> out;
  auto claimed = [&](plexus_collective_t c) { return (caps.collectives & (1u << c)) != 0; };
  for (plexus_collective_t coll = 0; coll < abi::kCollectiveCount; ++coll) {
    const abi::Traits t = abi::TraitsOf(coll);
    if (!t.typed || t.root == abi::Root::kPeer) continue;  // the barrier and the ring, below
    if (claimed(coll)) {
      AddCases(&out, coll, caps, size, options.max_count);
    } else {
      out.push_back(Make(
          std::string(CollectiveName(coll)) + " (ABI 1." + std::to_string(abi::MinorOf(coll)) + ")",
          CollectiveName(coll), "",
          [coll](Context& ctx) { return Outcome::Skip(NotClaimedReason(ctx, coll)); }));
    }
  }
  if (claimed(PLEXUS_COLL_SEND) && claimed(PLEXUS_COLL_RECV)) {
    std::vector<RingCase> cases;
    for (plexus_dtype_t dt : DtypesIn(caps.dtypes)) {
      for (uint64_t n : Counts(false, size, options.max_count)) cases.push_back({dt, n, false});
    }
    for (uint64_t n : {uint64_t(1009), options.max_count})
      cases.push_back({PLEXUS_DTYPE_INT32, n, true});
    if (size < 2) {
      cases.clear();
      out.push_back(Make("send/recv ring", "send/recv", "",
                         [](Context&) { return Outcome::Skip("needs at least 2 ranks"); }));
    }
    for (const RingCase& c : cases) {
      const std::string cap = std::string("send/recv ") + DtypeName(c.dtype);
      out.push_back(Make(
          cap + " count=" + std::to_string(c.count) + (c.send_first ? " send-first" : " paired"),
          "send/recv", cap, [c](Context& ctx) { return RunRing(ctx, c); }));
    }
  }
  if (claimed(PLEXUS_COLL_BARRIER)) out.push_back(Make("barrier", "barrier", "", RunBarrier));
  return out;
}

}  // namespace plexus::conformance
