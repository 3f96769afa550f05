// The matrix: every claimed collective x claimed dtype x op x count x
// placement (out of place, in place in the ABI's documented form) x root,
// results checked exactly on every rank (see data.hpp for why the inputs
// make that possible), plus send/recv in a ring.
#include <algorithm>
#include <string>
#include <vector>

#include "check.hpp"
#include "data.hpp"
#include "operation.hpp"
#include "options.hpp"
#include "plexus/abi/call.hpp"
#include "plugin.hpp"
#include "rank_record.hpp"

namespace plexus::conformance {
namespace {

// A "collective" of the matrix: the nine ABI codes, with send and recv
// tested together as a ring.
constexpr plexus_collective_t kSendRecvRing = 100;

struct Case {
  plexus_collective_t coll;
  plexus_dtype_t dtype;
  plexus_reduce_op_t op;  // 0 for data-only collectives
  uint64_t count;
  uint32_t root;
  bool in_place;
  bool send_first;  // ring: every rank posts its send before its recv
};

bool IsReduction(plexus_collective_t c) {
  return c == PLEXUS_COLL_ALLREDUCE || c == PLEXUS_COLL_REDUCE || c == PLEXUS_COLL_REDUCE_SCATTER;
}
bool HasRoot(plexus_collective_t c) {
  return c == PLEXUS_COLL_BROADCAST || c == PLEXUS_COLL_REDUCE;
}
bool HasInPlace(plexus_collective_t c) {
  return c == PLEXUS_COLL_ALLREDUCE || c == PLEXUS_COLL_REDUCE || c == PLEXUS_COLL_ALLGATHER ||
         c == PLEXUS_COLL_REDUCE_SCATTER;
}
// count is per rank block, and buffers hold size * count elements.
bool IsBlocked(plexus_collective_t c) {
  return c == PLEXUS_COLL_ALLGATHER || c == PLEXUS_COLL_REDUCE_SCATTER || c == PLEXUS_COLL_ALLTOALL;
}

std::string GroupName(plexus_collective_t c) {
  return c == kSendRecvRing ? "send/recv" : CollectiveName(c);
}

std::string Capability(const Case& c) {
  std::string s = GroupName(c.coll) + " " + DtypeName(c.dtype);
  if (IsReduction(c.coll)) s += std::string(" ") + OpName(c.op);
  return s;
}

std::string CaseName(const Case& c) {
  std::string s = Capability(c) + " count=" + std::to_string(c.count);
  if (HasRoot(c.coll)) s += " root=" + std::to_string(c.root);
  if (c.in_place) s += " in-place";
  if (c.coll == kSendRecvRing) s += c.send_first ? " send-first" : " paired";
  return s;
}

// 0, 1, a prime, the large count, and one that the world size does not
// divide (for size > 1), each once.
std::vector<uint64_t> Counts(plexus_collective_t coll, uint32_t size, uint64_t max_count) {
  const uint64_t large = IsBlocked(coll) ? std::max<uint64_t>(1, max_count / size) : max_count;
  std::vector<uint64_t> counts;
  for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(1009), large, uint64_t(4) * size + 1}) {
    if (std::find(counts.begin(), counts.end(), n) == counts.end()) counts.push_back(n);
  }
  return counts;
}

std::vector<uint8_t> Bytes(uint64_t elements, plexus_dtype_t dtype) {
  return std::vector<uint8_t>(elements * ElementSize(dtype));
}

Outcome RunCase(Context& ctx, const Case& c) {
  const TracedCalls& t = ctx.calls();
  plexus_comm* comm = ctx.comm();
  const uint32_t rank = ctx.rank, size = ctx.size;
  const uint64_t n = c.count, salt = ctx.seq;
  const plexus_dtype_t dt = c.dtype;
  Operation op(ctx, comm, dt);
  plexus_request* req = nullptr;
  SetPhase("backend collective post");

  switch (c.coll) {
    case PLEXUS_COLL_ALLREDUCE: {
      const size_t s = op.AddBuffer(n, "sendbuf");
      FillReduceInput(dt, c.op, rank, size, salt, 0, n, op.data(s));
      auto want = Bytes(n, dt);
      FillReduceResult(dt, c.op, size, salt, 0, n, want.data());
      size_t r = s;
      if (!c.in_place) {
        r = op.AddBuffer(n, "recvbuf");
        op.ExpectUntouched(s, 0, n, "sendbuf");
      }
      op.ExpectResult(r, 0, n, std::move(want), "recvbuf");
      op.Posted(
          "allreduce",
          t.post(comm,
                 abi::Call{PLEXUS_COLL_ALLREDUCE, op.data(s), op.data(r), n, dt, c.op, 0, nullptr},
                 &req),
          &req);
      break;
    }
    case PLEXUS_COLL_BROADCAST: {
      const size_t b = op.AddBuffer(n, "buf");
      auto want = Bytes(n, dt);
      FillMoveData(dt, c.root, salt, 0, n, want.data());
      if (rank == c.root) FillMoveData(dt, c.root, salt, 0, n, op.data(b));
      op.ExpectResult(b, 0, n, std::move(want), rank == c.root ? "root's buf" : "buf");
      op.Posted(
          "broadcast",
          t.post(comm,
                 abi::Call{PLEXUS_COLL_BROADCAST, nullptr, op.data(b), n, dt, 0, c.root, nullptr},
                 &req),
          &req);
      break;
    }
    case PLEXUS_COLL_REDUCE: {
      const size_t s = op.AddBuffer(n, "sendbuf");
      FillReduceInput(dt, c.op, rank, size, salt, 0, n, op.data(s));
      void* recv = nullptr;
      if (rank == c.root) {
        auto want = Bytes(n, dt);
        FillReduceResult(dt, c.op, size, salt, 0, n, want.data());
        size_t r = s;
        if (!c.in_place) {
          r = op.AddBuffer(n, "recvbuf");
          op.ExpectUntouched(s, 0, n, "sendbuf");
        }
        op.ExpectResult(r, 0, n, std::move(want), "root's recvbuf");
        recv = op.data(r);
      } else {
        op.ExpectUntouched(s, 0, n, "sendbuf");
        if (!c.in_place) {  // in place, a non-root passes recvbuf NULL ("may be NULL")
          const size_t r = op.AddBuffer(n, "non-root recvbuf");
          op.ExpectUntouched(r, 0, n, "recvbuf of a non-root rank (the ABI says not touched)");
          recv = op.data(r);
        }
      }
      op.Posted(
          "reduce",
          t.post(comm,
                 abi::Call{PLEXUS_COLL_REDUCE, op.data(s), recv, n, dt, c.op, c.root, nullptr},
                 &req),
          &req);
      break;
    }
    case PLEXUS_COLL_ALLGATHER: {
      const size_t r = op.AddBuffer(n * size, "recvbuf");
      auto want = Bytes(n * size, dt);
      for (uint32_t j = 0; j < size; ++j) {
        FillMoveData(dt, j, salt, 0, n, want.data() + j * n * ElementSize(dt));
      }
      const void* send;
      if (c.in_place) {
        FillMoveData(dt, rank, salt, 0, n, op.element(r, rank * n));
        send = op.element(r, rank * n);
      } else {
        const size_t s = op.AddBuffer(n, "sendbuf");
        FillMoveData(dt, rank, salt, 0, n, op.data(s));
        op.ExpectUntouched(s, 0, n, "sendbuf");
        send = op.data(s);
      }
      op.ExpectResult(r, 0, n * size, std::move(want), "recvbuf");
      op.Posted(
          "allgather",
          t.post(comm, abi::Call{PLEXUS_COLL_ALLGATHER, send, op.data(r), n, dt, 0, 0, nullptr},
                 &req),
          &req);
      break;
    }
    case PLEXUS_COLL_REDUCE_SCATTER: {
      const size_t s = op.AddBuffer(n * size, "sendbuf");
      FillReduceInput(dt, c.op, rank, size, salt, 0, n * size, op.data(s));
      auto want = Bytes(n, dt);
      FillReduceResult(dt, c.op, size, salt, uint64_t(rank) * n, n, want.data());
      void* recv;
      if (c.in_place) {
        // Only block `rank` is specified afterwards; the others may be scratch.
        op.ExpectResult(s, rank * n, n, std::move(want), "block `rank` of sendbuf (in place)");
        recv = op.element(s, rank * n);
      } else {
        const size_t r = op.AddBuffer(n, "recvbuf");
        op.ExpectUntouched(s, 0, n * size, "sendbuf");
        op.ExpectResult(r, 0, n, std::move(want), "recvbuf");
        recv = op.data(r);
      }
      op.Posted(
          "reduce_scatter",
          t.post(comm,
                 abi::Call{PLEXUS_COLL_REDUCE_SCATTER, op.data(s), recv, n, dt, c.op, 0, nullptr},
                 &req),
          &req);
      break;
    }
    case PLEXUS_COLL_ALLTOALL: {
      const size_t s = op.AddBuffer(n * size, "sendbuf");
      const size_t r = op.AddBuffer(n * size, "recvbuf");
      FillMoveData(dt, rank, salt, 0, n * size, op.data(s));
      auto want = Bytes(n * size, dt);
      for (uint32_t j = 0; j < size; ++j) {
        FillMoveData(dt, j, salt, uint64_t(rank) * n, n, want.data() + j * n * ElementSize(dt));
      }
      op.ExpectUntouched(s, 0, n * size, "sendbuf");
      op.ExpectResult(r, 0, n * size, std::move(want), "recvbuf");
      op.Posted(
          "alltoall",
          t.post(comm,
                 abi::Call{PLEXUS_COLL_ALLTOALL, op.data(s), op.data(r), n, dt, 0, 0, nullptr},
                 &req),
          &req);
      break;
    }
    case kSendRecvRing: {
      const uint32_t right = (rank + 1) % size, left = (rank + size - 1) % size;
      const size_t s = op.AddBuffer(n, "send buf");
      const size_t r = op.AddBuffer(n, "recv buf");
      FillMoveData(dt, rank, salt, 0, n, op.data(s));
      auto want = Bytes(n, dt);
      FillMoveData(dt, left, salt, 0, n, want.data());
      op.ExpectUntouched(s, 0, n, "send buf");
      op.ExpectResult(r, 0, n, std::move(want),
                      "recv buf (from rank " + std::to_string(left) + ")");
      // Paired: even ranks send first, odd ranks receive first, which works
      // even on a backend that runs operations one at a time. Send-first:
      // every rank posts its send, then its recv; a backend whose posts are
      // truly asynchronous completes both.
      const bool send_first = c.send_first || rank % 2 == 0;
      auto post_send = [&] {
        plexus_request* q = nullptr;
        op.Posted(
            "send to rank " + std::to_string(right),
            t.post(comm, abi::Call{PLEXUS_COLL_SEND, op.data(s), nullptr, n, dt, 0, right, nullptr},
                   &q),
            &q);
      };
      auto post_recv = [&] {
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
      break;
    }
    default:
      return Outcome::Fail("internal: unknown collective");
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

void Add(std::vector<Check>* out, const Case& c) {
  Check check;
  check.name = CaseName(c);
  check.group = GroupName(c.coll);
  check.capability = Capability(c);
  check.run = [c](Context& ctx) { return RunCase(ctx, c); };
  out->push_back(std::move(check));
}

std::vector<plexus_dtype_t> DtypesIn(uint32_t mask) {
  std::vector<plexus_dtype_t> out;
  for (plexus_dtype_t d = 1; d <= PLEXUS_DTYPE_MAX_V1; ++d) {
    if (mask & (1u << d)) out.push_back(d);
  }
  return out;
}

}  // namespace

std::vector<Check> CollectiveChecks(const plexus_capabilities& caps, uint32_t size,
                                    const Options& options) {
  std::vector<Check> out;
  const bool in_place = caps.flags & PLEXUS_CAP_IN_PLACE;
  auto claimed = [&](plexus_collective_t c) { return (caps.collectives & (1u << c)) != 0; };
  std::vector<uint32_t> roots = {0};
  if (size > 1) roots.push_back(size - 1);

  const plexus_collective_t order[] = {PLEXUS_COLL_ALLREDUCE,      PLEXUS_COLL_BROADCAST,
                                       PLEXUS_COLL_REDUCE,         PLEXUS_COLL_ALLGATHER,
                                       PLEXUS_COLL_REDUCE_SCATTER, PLEXUS_COLL_ALLTOALL};
  for (plexus_collective_t coll : order) {
    if (!claimed(coll)) continue;
    const auto counts = Counts(coll, size, options.max_count);
    const std::vector<uint32_t> coll_roots = HasRoot(coll) ? roots : std::vector<uint32_t>{0};
    std::vector<bool> placements = {false};
    if (in_place && HasInPlace(coll)) placements.push_back(true);
    if (IsReduction(coll)) {
      for (plexus_dtype_t dt : DtypesIn(0xFFFFFFFFu)) {
        for (plexus_reduce_op_t rop = PLEXUS_OP_SUM; rop <= PLEXUS_OP_MAX_V1; ++rop) {
          if (!(caps.reduce_dtypes[rop] & (1u << dt))) continue;
          for (uint64_t n : counts)
            for (uint32_t root : coll_roots)
              for (bool ip : placements) Add(&out, {coll, dt, rop, n, root, ip, false});
        }
      }
    } else {
      for (plexus_dtype_t dt : DtypesIn(caps.dtypes)) {
        for (uint64_t n : counts)
          for (uint32_t root : coll_roots)
            for (bool ip : placements) Add(&out, {coll, dt, 0, n, root, ip, false});
      }
    }
  }
  if (claimed(PLEXUS_COLL_SEND) && claimed(PLEXUS_COLL_RECV)) {
    if (size < 2) {
      Check skip;
      skip.name = "send/recv ring";
      skip.group = "send/recv";
      skip.run = [](Context&) { return Outcome::Skip("needs at least 2 ranks"); };
      out.push_back(std::move(skip));
    } else {
      const auto counts = Counts(PLEXUS_COLL_SEND, size, options.max_count);
      for (plexus_dtype_t dt : DtypesIn(caps.dtypes)) {
        for (uint64_t n : counts) Add(&out, {kSendRecvRing, dt, 0, n, 0, false, false});
      }
      for (uint64_t n : {uint64_t(1009), options.max_count}) {
        Add(&out, {kSendRecvRing, PLEXUS_DTYPE_INT32, 0, n, 0, false, true});
      }
    }
  }
  if (claimed(PLEXUS_COLL_BARRIER)) {
    Check b;
    b.name = "barrier";
    b.group = "barrier";
    b.run = RunBarrier;
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace plexus::conformance
