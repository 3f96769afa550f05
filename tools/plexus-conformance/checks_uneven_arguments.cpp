// Calls of the ABI 1.2 collectives a backend must refuse with
// INVALID_ARGUMENT, posting nothing: counts and displacements whose byte
// size overflows, overlapping receive blocks, alltoallv send and receive
// blocks that overlap, an allgatherv sendcount other than recvcounts[rank]
// (reduce_scatterv's recvcount other than sendcounts[rank]),
// roots out of range, allreduce_coalesced with nbuffers 0, NULL arrays or
// overlapping buffers, and NULL buffers and unknown codes. Then a valid post
// of the same collective must still work on the same communicator (nothing
// was posted, the communicator is usable). Also: unclaimed dtypes, ops and
// memory types (UNSUPPORTED or INVALID_ARGUMENT), and the slot of a 1.2
// collective the capabilities do not claim.
//
// Every call here is invalid on every rank by itself (a rank that names
// itself as the root, say), so that no rank posts what the others refuse.
#include <cstdint>
#include <string>
#include <vector>

#include "buffer.hpp"
#include "check.hpp"
#include "collective_case.hpp"
#include "data.hpp"
#include "plexus/abi/call.hpp"
#include "plexus/abi/collectives.hpp"
#include "plugin.hpp"
#include "refusals.hpp"
#include "session.hpp"

namespace plexus::conformance {
namespace {

constexpr uint64_t kTwo63 = uint64_t(1) << 63;

// Placements refused by a backend without CUDA memory, and by every backend.
const plexus_placement kCudaPlacement{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, 0, 0, nullptr};
const plexus_placement kUnknownPlacement{sizeof(plexus_placement), 99, -1, 0, nullptr};

// What every call of one check varies; the rest is valid.
struct Args {
  plexus_dtype_t dtype = PLEXUS_DTYPE_INT32;
  plexus_reduce_op_t op = PLEXUS_OP_SUM;
  const plexus_placement* placement = nullptr;
};

// --- gather and scatter -------------------------------------------------

enum class Root { kZero, kSelf, kOutOfRange };

struct Rooted {
  uint64_t count = 4;
  Root root = Root::kZero;
  bool null_send = false;
  bool null_recv = false;
};

RefusedCall RootedCall(plexus_collective_t coll, std::string what, Rooted r, Args a) {
  return {std::move(what),
          [coll, r, a](Context& ctx, Buffer& send, Buffer& recv, plexus_request** req) {
            const uint32_t root = r.root == Root::kZero   ? 0
                                  : r.root == Root::kSelf ? ctx.rank
                                                          : ctx.size;
            const void* s = r.null_send ? nullptr : send.data();
            void* v = r.null_recv ? nullptr : recv.data();
            // coll is gather or scatter: the same arguments.
            return ctx.calls().post(
                ctx.comm(), abi::Call{coll, s, v, r.count, a.dtype, 0, root, a.placement}, req);
          }};
}

std::vector<RefusedCall> RootedInvalid(plexus_collective_t coll, Args a, uint32_t size) {
  const bool gather = coll == PLEXUS_COLL_GATHER;
  const uint64_t es = ElementSize(a.dtype);
  std::vector<RefusedCall> out;
  out.push_back(RootedCall(coll, "root " + std::to_string(size) + " (out of range)",
                           {4, Root::kOutOfRange, false, false}, a));
  // The buffer every rank needs, and the one only the root needs (every
  // rank names itself root, so that each call is invalid on every rank).
  if (gather) {
    out.push_back(RootedCall(coll, "NULL sendbuf and count 4", {4, Root::kZero, true, false}, a));
    out.push_back(RootedCall(coll, "NULL recvbuf on the root and count 4 (each rank its own root)",
                             {4, Root::kSelf, false, true}, a));
  } else {
    out.push_back(RootedCall(coll, "NULL recvbuf and count 4", {4, Root::kZero, false, true}, a));
    out.push_back(RootedCall(coll, "NULL sendbuf on the root and count 4 (each rank its own root)",
                             {4, Root::kSelf, true, false}, a));
  }
  Args bad = a;
  bad.dtype = 99;
  out.push_back(RootedCall(coll, "dtype code 99", {4, Root::kZero, false, false}, bad));
  const uint64_t big = kTwo63 / es;
  out.push_back(RootedCall(coll,
                           "count " + std::to_string(big) + " (count x " + std::to_string(es) +
                               " bytes is 2^63; each rank its own root)",
                           {big, Root::kSelf, false, false}, a));
  if (size > 1) {
    const uint64_t unit = uint64_t(size) * es;
    const uint64_t block = (kTwo63 + unit - 1) / unit;
    out.push_back(RootedCall(coll,
                             "count " + std::to_string(block) + " (the root's " +
                                 std::string(gather ? "recvbuf" : "sendbuf") + ", count x " +
                                 std::to_string(es) + " bytes x " + std::to_string(size) +
                                 " ranks, reaches 2^63; each rank its own root)",
                             {block, Root::kSelf, false, false}, a));
  }
  return out;
}

// --- allgatherv and reduce_scatterv -------------------------------------

// Valid: 4 elements per rank, packed in rank order; edit changes it. The
// arrays describe the blocks (allgatherv's recvbuf, reduce_scatterv's
// sendbuf); count is this rank's block, the other buffer.
struct GatherV {
  std::vector<uint64_t> counts, displs;
  uint64_t count = 4;
  bool null_counts = false, null_displs = false, null_own = false, null_blocks = false;
};

RefusedCall VCall(plexus_collective_t coll, std::string what,
                  std::function<void(GatherV&, uint32_t, uint32_t)> edit, Args a) {
  return {std::move(what),
          [coll, edit, a](Context& ctx, Buffer& send, Buffer& recv, plexus_request** req) {
            GatherV v;
            for (uint32_t r = 0; r < ctx.size; ++r) {
              v.counts.push_back(4);
              v.displs.push_back(4 * uint64_t(r));
            }
            edit(v, ctx.rank, ctx.size);
            const bool gather = coll == PLEXUS_COLL_ALLGATHERV;
            abi::Call c{.coll = coll,
                        .sendbuf = (gather ? v.null_own : v.null_blocks) ? nullptr : send.data(),
                        .recvbuf = (gather ? v.null_blocks : v.null_own) ? nullptr : recv.data(),
                        .count = v.count,
                        .dtype = a.dtype,
                        .op = gather ? 0 : a.op,
                        .placement = a.placement};
            (gather ? c.recvcounts : c.sendcounts) = v.null_counts ? nullptr : v.counts.data();
            (gather ? c.rdispls : c.sdispls) = v.null_displs ? nullptr : v.displs.data();
            return ctx.calls().post(ctx.comm(), c, req);
          }};
}

std::vector<RefusedCall> VInvalid(plexus_collective_t coll, Args a, uint32_t size) {
  const uint64_t es = ElementSize(a.dtype);
  const uint64_t big = kTwo63 / es, wrap = es > 1 ? UINT64_MAX / es + 1 : 0;
  const bool gather = coll == PLEXUS_COLL_ALLGATHERV;
  const std::string counts = gather ? "recvcounts" : "sendcounts";
  const std::string count = gather ? "sendcount" : "recvcount";
  const std::string own = gather ? "sendbuf" : "recvbuf", blocks = gather ? "recvbuf" : "sendbuf";
  auto call = [&](std::string what, std::function<void(GatherV&, uint32_t, uint32_t)> edit,
                  Args args) { return VCall(coll, std::move(what), std::move(edit), args); };
  std::vector<RefusedCall> out;
  out.push_back(call(
      count + " 5 but " + counts + "[rank] 4", [](GatherV& v, uint32_t, uint32_t) { v.count = 5; },
      a));
  // Another rank's entry (this rank's own with one rank), so that the
  // count check alone does not catch it.
  out.push_back(call(
      counts + "[another rank] " + std::to_string(big) + " (x " + std::to_string(es) +
          " bytes is 2^63)",
      [big](GatherV& v, uint32_t rank, uint32_t n) {
        const uint32_t j = (rank + 1) % n;
        v.counts[j] = big;
        if (j == rank) v.count = big;
      },
      a));
  out.push_back(call(
      "displs[another rank] 2^64-2 (count + displacement wraps around)",
      [](GatherV& v, uint32_t rank, uint32_t n) { v.displs[(rank + 1) % n] = UINT64_MAX - 1; }, a));
  if (wrap != 0) {
    out.push_back(call(
        "displs[another rank] " + std::to_string(wrap) + " (x " + std::to_string(es) +
            " bytes wraps around to 0)",
        [wrap](GatherV& v, uint32_t rank, uint32_t n) { v.displs[(rank + 1) % n] = wrap; }, a));
  }
  if (size > 1) {
    out.push_back(call(
        std::string(gather ? "overlapping receive blocks" : "overlapping send blocks") +
            " (every displacement 0)",
        [](GatherV& v, uint32_t, uint32_t) { std::fill(v.displs.begin(), v.displs.end(), 0); }, a));
  }
  out.push_back(call(
      "NULL " + counts, [](GatherV& v, uint32_t, uint32_t) { v.null_counts = true; }, a));
  out.push_back(call(
      "NULL displs", [](GatherV& v, uint32_t, uint32_t) { v.null_displs = true; }, a));
  out.push_back(call(
      "NULL " + own + " and " + count + " 4",
      [](GatherV& v, uint32_t, uint32_t) { v.null_own = true; }, a));
  out.push_back(call(
      "NULL " + blocks, [](GatherV& v, uint32_t, uint32_t) { v.null_blocks = true; }, a));
  Args bad = a;
  bad.dtype = 99;
  out.push_back(call(
      "dtype code 99", [](GatherV&, uint32_t, uint32_t) {}, bad));
  if (!gather) {
    bad = a;
    bad.op = 99;
    out.push_back(call(
        "op code 99", [](GatherV&, uint32_t, uint32_t) {}, bad));
  }
  return out;
}

// --- alltoallv -------------------------------------------------------------

// Valid: 4 elements to and from every rank, packed in rank order, sendbuf
// and recvbuf separate; edit changes it.
struct AllV {
  std::vector<uint64_t> sendcounts, sdispls, recvcounts, rdispls;
  bool null[4] = {false, false, false, false};  // the four arrays
  bool null_send = false, null_recv = false;
  bool recv_is_send = false;  // recvbuf = sendbuf
};

RefusedCall AlltoallvCall(std::string what, std::function<void(AllV&, uint32_t, uint32_t)> edit,
                          Args a) {
  return {
      std::move(what), [edit, a](Context& ctx, Buffer& send, Buffer& recv, plexus_request** req) {
        AllV v;
        for (uint32_t r = 0; r < ctx.size; ++r) {
          for (auto* arr : {&v.sendcounts, &v.recvcounts}) arr->push_back(4);
          for (auto* arr : {&v.sdispls, &v.rdispls}) arr->push_back(4 * uint64_t(r));
        }
        edit(v, ctx.rank, ctx.size);
        void* r = v.null_recv ? nullptr : v.recv_is_send ? send.data() : recv.data();
        return ctx.calls().post(ctx.comm(),
                                abi::Call{.coll = PLEXUS_COLL_ALLTOALLV,
                                          .sendbuf = v.null_send ? nullptr : send.data(),
                                          .recvbuf = r,
                                          .dtype = a.dtype,
                                          .placement = a.placement,
                                          .sendcounts = v.null[0] ? nullptr : v.sendcounts.data(),
                                          .sdispls = v.null[1] ? nullptr : v.sdispls.data(),
                                          .recvcounts = v.null[2] ? nullptr : v.recvcounts.data(),
                                          .rdispls = v.null[3] ? nullptr : v.rdispls.data()},
                                req);
      }};
}

std::vector<RefusedCall> AlltoallvInvalid(Args a, uint32_t size) {
  const uint64_t es = ElementSize(a.dtype);
  const uint64_t big = kTwo63 / es, wrap = es > 1 ? UINT64_MAX / es + 1 : 0;
  std::vector<RefusedCall> out;
  out.push_back(AlltoallvCall(
      "sendcounts[another rank] " + std::to_string(big) + " (x " + std::to_string(es) +
          " bytes is 2^63)",
      [big](AllV& v, uint32_t rank, uint32_t n) { v.sendcounts[(rank + 1) % n] = big; }, a));
  out.push_back(AlltoallvCall(
      "recvcounts[another rank] " + std::to_string(big) + " (x " + std::to_string(es) +
          " bytes is 2^63)",
      [big](AllV& v, uint32_t rank, uint32_t n) { v.recvcounts[(rank + 1) % n] = big; }, a));
  out.push_back(AlltoallvCall(
      "rdispls[another rank] 2^64-2 (count + displacement wraps around)",
      [](AllV& v, uint32_t rank, uint32_t n) { v.rdispls[(rank + 1) % n] = UINT64_MAX - 1; }, a));
  if (wrap != 0) {
    out.push_back(AlltoallvCall(
        "sdispls[another rank] " + std::to_string(wrap) + " (x " + std::to_string(es) +
            " bytes wraps around to 0)",
        [wrap](AllV& v, uint32_t rank, uint32_t n) { v.sdispls[(rank + 1) % n] = wrap; }, a));
  }
  if (size > 1) {
    out.push_back(AlltoallvCall(
        "overlapping receive blocks (every rdispls 0)",
        [](AllV& v, uint32_t, uint32_t) { std::fill(v.rdispls.begin(), v.rdispls.end(), 0); }, a));
  }
  out.push_back(AlltoallvCall(
      "recvbuf = sendbuf (receive blocks overlap the send blocks; not in place)",
      [](AllV& v, uint32_t, uint32_t) { v.recv_is_send = true; }, a));
  const char* names[4] = {"sendcounts", "sdispls", "recvcounts", "rdispls"};
  for (int i = 0; i < 4; ++i) {
    out.push_back(AlltoallvCall(
        std::string("NULL ") + names[i], [i](AllV& v, uint32_t, uint32_t) { v.null[i] = true; },
        a));
  }
  out.push_back(AlltoallvCall(
      "NULL sendbuf", [](AllV& v, uint32_t, uint32_t) { v.null_send = true; }, a));
  out.push_back(AlltoallvCall(
      "NULL recvbuf", [](AllV& v, uint32_t, uint32_t) { v.null_recv = true; }, a));
  Args bad = a;
  bad.dtype = 99;
  out.push_back(AlltoallvCall(
      "dtype code 99", [](AllV&, uint32_t, uint32_t) {}, bad));
  return out;
}

// --- allreduce_coalesced ---------------------------------------------------

// Valid: two buffers of 4 elements, sendbufs[i] at sendbuf + 4i, recvbufs[i]
// at recvbuf + 4i; edit changes it (pointers as element offsets: sends[i],
// recvs[i] index into the send and recv scratch buffers, -1 = NULL).
struct Coalesced {
  std::vector<int64_t> sends = {0, 4}, recvs = {0, 4};
  std::vector<bool> send_in_recv = {false, false};  // sendbufs[i] points into recv scratch
  std::vector<uint64_t> counts = {4, 4};
  uint32_t nbuffers = 2;
  bool null_sends = false, null_recvs = false, null_counts = false;
};

RefusedCall CoalescedCall(std::string what, std::function<void(Coalesced&)> edit, Args a) {
  return {std::move(what),
          [edit, a](Context& ctx, Buffer& send, Buffer& recv, plexus_request** req) {
            Coalesced c;
            edit(c);
            const size_t es = ElementSize(a.dtype) ? ElementSize(a.dtype) : 4;
            std::vector<const void*> sends;
            std::vector<void*> recvs;
            for (size_t i = 0; i < c.sends.size(); ++i) {
              uint8_t* base = c.send_in_recv[i] ? recv.data() : send.data();
              sends.push_back(c.sends[i] < 0 ? nullptr : base + size_t(c.sends[i]) * es);
            }
            for (int64_t e : c.recvs)
              recvs.push_back(e < 0 ? nullptr : recv.data() + size_t(e) * es);
            return ctx.calls().post(ctx.comm(),
                                    abi::Call{.coll = PLEXUS_COLL_ALLREDUCE_COALESCED,
                                              .dtype = a.dtype,
                                              .op = a.op,
                                              .placement = a.placement,
                                              .sendbufs = c.null_sends ? nullptr : sends.data(),
                                              .recvbufs = c.null_recvs ? nullptr : recvs.data(),
                                              .counts = c.null_counts ? nullptr : c.counts.data(),
                                              .nbuffers = c.nbuffers},
                                    req);
          }};
}

std::vector<RefusedCall> CoalescedInvalid(Args a) {
  const uint64_t es = ElementSize(a.dtype);
  const uint64_t big = kTwo63 / es;
  std::vector<RefusedCall> out;
  out.push_back(CoalescedCall(
      "nbuffers 0", [](Coalesced& c) { c.nbuffers = 0; }, a));
  out.push_back(CoalescedCall(
      "NULL sendbufs array", [](Coalesced& c) { c.null_sends = true; }, a));
  out.push_back(CoalescedCall(
      "NULL recvbufs array", [](Coalesced& c) { c.null_recvs = true; }, a));
  out.push_back(CoalescedCall(
      "NULL counts array", [](Coalesced& c) { c.null_counts = true; }, a));
  out.push_back(CoalescedCall(
      "sendbufs[1] NULL and counts[1] 4", [](Coalesced& c) { c.sends[1] = -1; }, a));
  out.push_back(CoalescedCall(
      "recvbufs[0] and recvbufs[1] overlap (2 elements apart, 4 each)",
      [](Coalesced& c) { c.recvs[1] = 2; }, a));
  out.push_back(CoalescedCall(
      "sendbufs[1] = recvbufs[0] (buffers of different i share memory)",
      [](Coalesced& c) {
        c.sends[1] = 0;
        c.send_in_recv[1] = true;
      },
      a));
  out.push_back(CoalescedCall(
      "sendbufs[0] one element into recvbufs[0] (overlap, not equal)",
      [](Coalesced& c) {
        c.sends[0] = 1;
        c.send_in_recv[0] = true;
        c.recvs[1] = 8;
      },
      a));
  out.push_back(CoalescedCall(
      "counts[0] " + std::to_string(big) + " (x " + std::to_string(es) + " bytes is 2^63)",
      [big](Coalesced& c) { c.counts[0] = big; }, a));
  out.push_back(CoalescedCall(
      "counts 2^64-1 and 2 (their sum wraps around to 1)",
      [](Coalesced& c) {
        c.counts[0] = UINT64_MAX;
        c.counts[1] = 2;
      },
      a));
  Args bad = a;
  bad.dtype = 99;
  out.push_back(CoalescedCall(
      "dtype code 99", [](Coalesced&) {}, bad));
  bad = a;
  bad.op = 99;
  out.push_back(CoalescedCall(
      "op code 99", [](Coalesced&) {}, bad));
  return out;
}

// --- valid calls, for the unclaimed checks ---------------------------------

RefusedCall ValidCall(plexus_collective_t coll, std::string what, Args a) {
  switch (coll) {
    case PLEXUS_COLL_GATHER:
    case PLEXUS_COLL_SCATTER:
      return RootedCall(coll, std::move(what), {}, a);
    case PLEXUS_COLL_ALLGATHERV:
    case PLEXUS_COLL_REDUCE_SCATTERV:
      return VCall(
          coll, std::move(what), [](GatherV&, uint32_t, uint32_t) {}, a);
    case PLEXUS_COLL_ALLTOALLV:
      return AlltoallvCall(
          std::move(what), [](AllV&, uint32_t, uint32_t) {}, a);
    default:
      return CoalescedCall(
          std::move(what), [](Coalesced&) {}, a);
  }
}

// --- the checks ------------------------------------------------------------

bool Reduces(plexus_collective_t coll) {
  return abi::IsReduction(coll);
}

// A dtype (and op) the collective accepts, so that only the argument under
// test is wrong: int32 when claimed.
Args BaseArgs(const plexus_capabilities& caps, plexus_collective_t coll) {
  Args a;
  const uint32_t mask = Reduces(coll) ? caps.reduce_dtypes[PLEXUS_OP_SUM] : caps.dtypes;
  if (!(mask & (1u << a.dtype))) {
    for (plexus_dtype_t d = 1; d <= PLEXUS_DTYPE_MAX_V1; ++d) {
      if (mask & (1u << d)) {
        a.dtype = d;
        break;
      }
    }
  }
  return a;
}

// Refusals, then (invalid arguments only) a valid post of the same
// collective that must still work on the communicator.
Check Make(const std::string& name, plexus_collective_t coll, std::vector<RefusedCall> calls,
           Refuse want, bool then_valid, Args base) {
  Check c;
  c.name = name;
  c.group = "arguments";
  c.run = [coll, calls = std::move(calls), want, then_valid, base](Context& ctx) {
    if (!ctx.plugin().HasCollective(coll)) return Outcome::Skip(ctx.plugin().NoSlotReason(coll));
    Outcome o = ExpectRefusedCalls(ctx, CollectiveName(coll), calls, want);
    if (!then_valid || o.comm_broken) return o;
    const Outcome after = RunSmall(ctx, coll, base.dtype, base.op);
    if (after.verdict == Verdict::kFail) {
      Outcome f = Outcome::Fail((o.verdict == Verdict::kFail ? o.detail + "; " : std::string()) +
                                "after the refused calls a valid " + CollectiveName(coll) +
                                " on the same communicator failed: " + after.detail);
      f.comm_broken = after.comm_broken;
      return f;
    }
    if (o.verdict == Verdict::kPass) {
      o.detail += "; then a valid " + std::string(CollectiveName(coll)) + " worked";
    }
    return o;
  };
  return c;
}

}  // namespace

std::vector<Check> ArgumentChecks12(const plexus_capabilities& caps, uint32_t size) {
  std::vector<Check> out;
  for (plexus_collective_t coll = 0; coll < abi::kCollectiveCount; ++coll) {
    if (abi::MinorOf(coll) < 2) continue;
    const std::string name = CollectiveName(coll);
    const Args base = BaseArgs(caps, coll);
    if (!(caps.collectives & (1u << coll))) {
      // Its slot, if the table has one, must refuse a valid call.
      Check c;
      c.name = "arguments: unclaimed collective " + name;
      c.group = "arguments";
      c.run = [coll, base](Context& ctx) {
        if (!ctx.plugin().HasCollective(coll)) {
          const std::string why = ctx.plugin().NoSlotReason(coll);
          return Outcome::Skip(why.rfind("backend", 0) == 0 ? why
                                                            : "slot is NULL (nothing to call)");
        }
        return ExpectRefusedCalls(ctx, CollectiveName(coll),
                                  {ValidCall(coll, "valid arguments", base)}, Refuse::kUnclaimed);
      };
      out.push_back(std::move(c));
      continue;
    }

    std::vector<RefusedCall> unclaimed;
    for (plexus_dtype_t dt = 1; dt <= PLEXUS_DTYPE_MAX_V1; ++dt) {
      if (Reduces(coll)) {
        for (plexus_reduce_op_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op) {
          if (caps.reduce_dtypes[op] & (1u << dt)) continue;
          Args a = base;
          a.dtype = dt;
          a.op = op;
          unclaimed.push_back(
              ValidCall(coll, std::string("unclaimed ") + DtypeName(dt) + " " + OpName(op), a));
        }
      } else if (!(caps.dtypes & (1u << dt))) {
        Args a = base;
        a.dtype = dt;
        unclaimed.push_back(ValidCall(coll, std::string("unclaimed dtype ") + DtypeName(dt), a));
      }
    }
    if (!unclaimed.empty()) {
      out.push_back(Make("arguments: " + name + " unclaimed dtypes and ops", coll,
                         std::move(unclaimed), Refuse::kUnclaimed, false, base));
    }

    std::vector<RefusedCall> memory;
    if (!(caps.memory_types & (1u << PLEXUS_MEMORY_CUDA))) {
      Args a = base;
      a.placement = &kCudaPlacement;
      memory.push_back(ValidCall(coll, "CUDA memory (not claimed)", a));
    }
    {
      Args a = base;
      a.placement = &kUnknownPlacement;
      memory.push_back(ValidCall(coll, "memory type 99", a));
    }
    out.push_back(Make("arguments: " + name + " unclaimed memory types", coll, std::move(memory),
                       Refuse::kUnclaimed, false, base));

    std::vector<RefusedCall> invalid;
    switch (coll) {
      case PLEXUS_COLL_GATHER:
      case PLEXUS_COLL_SCATTER:
        invalid = RootedInvalid(coll, base, size);
        break;
      case PLEXUS_COLL_ALLGATHERV:
      case PLEXUS_COLL_REDUCE_SCATTERV:
        invalid = VInvalid(coll, base, size);
        break;
      case PLEXUS_COLL_ALLTOALLV:
        invalid = AlltoallvInvalid(base, size);
        break;
      default:
        invalid = CoalescedInvalid(base);
    }
    out.push_back(Make("arguments: " + name + " invalid arguments", coll, std::move(invalid),
                       Refuse::kInvalidArgument, true, base));
  }
  return out;
}

}  // namespace plexus::conformance
