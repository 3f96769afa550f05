// Calls a backend must refuse, for every collective of the list
// (collectives.def): a collective, dtype/op pair or memory type it does not
// claim (UNSUPPORTED or INVALID_ARGUMENT), and the arguments CheckCall
// (api/src/call.cpp) refuses with INVALID_ARGUMENT, derived from the
// collective's traits: NULL buffers, unknown dtype and op codes, roots and
// peers that are no rank, byte sizes past 2^62, buffers that overlap other
// than in the in-place form, and the per-rank count arrays and buffer lists
// at fault. Each refusal must post nothing, set *req_out to NULL and leave
// an error message; then (ABI 1.2 and later) a valid post of the same
// collective must still work on the same communicator. A call accepted by
// mistake is waited for (bounded), and the shared communicator is then
// replaced, since the ranks may be out of step.
//
// Every call here is invalid on every rank by itself (where only the root
// uses a buffer, every rank names itself root), so that no rank posts what
// the others refuse.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "buffer.hpp"
#include "check.hpp"
#include "collective_case.hpp"
#include "data.hpp"
#include "plexus/abi/call.hpp"
#include "plexus/abi/collectives.hpp"
#include "plugin.hpp"
#include "rank_record.hpp"
#include "refusals.hpp"
#include "requests.hpp"
#include "session.hpp"

namespace plexus::conformance {
namespace {

using abi::Layout;
using abi::Root;

constexpr uint64_t kTwo63 = uint64_t(1) << 63;
constexpr uint64_t kBlock = 4;  // elements per rank's block, or per buffer of a list

// Placements refused by a backend without CUDA memory, and by every backend.
const plexus_placement kCudaPlacement{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, 0, 0, nullptr};
const plexus_placement kUnknownPlacement{sizeof(plexus_placement), 99, -1, 0, nullptr};

// The Call's per-rank arrays, in the order of Valid::arrays.
constexpr const uint64_t* abi::Call::*kArrays[] = {&abi::Call::sendcounts, &abi::Call::sdispls,
                                                   &abi::Call::recvcounts, &abi::Call::rdispls};
constexpr const char* kArrayNames[] = {"sendcounts", "sdispls", "recvcounts", "rdispls"};

struct Args {
  plexus_dtype_t dtype = PLEXUS_DTYPE_INT32;
  plexus_reduce_op_t op = PLEXUS_OP_SUM;
  const plexus_placement* placement = nullptr;
};

// A valid call of coll on this rank and what it points into: kBlock
// elements per block, the per-rank arrays packed in rank order, sendbuf and
// recvbuf in the two scratch buffers (size * 16 elements of up to 8 bytes).
// A refusal edits it; its arrays never grow, so the Call's pointers stay.
struct Valid {
  abi::Call c;
  uint32_t rank, size;
  uint64_t es;  // bytes per element of the valid dtype
  uint8_t *send, *recv;
  std::vector<uint64_t> arrays[4];  // kArrays
  std::vector<uint64_t> counts;     // the buffer list's
  std::vector<const void*> sendbufs;
  std::vector<void*> recvbufs;

  Valid(const Context& ctx, plexus_collective_t coll, const Args& a, Buffer& s, Buffer& r)
      : rank(ctx.rank), size(ctx.size), es(ElementSize(a.dtype)), send(s.data()), recv(r.data()) {
    const abi::Traits t = abi::TraitsOf(coll);
    c.coll = coll;
    if (!t.typed) return;
    c.dtype = a.dtype;
    c.op = t.reduces ? a.op : 0;
    c.placement = a.placement;
    // The sender's right neighbour, the receiver's left one.
    if (t.root == Root::kPeer) c.root = (rank + (t.needs_send ? 1 : size - 1)) % size;
    c.count = kBlock;
    if (t.layout == Layout::kBufferList) {
      counts = {kBlock, kBlock};
      sendbufs = {send, send + kBlock * es};
      recvbufs = {recv, recv + kBlock * es};
      c.sendbufs = sendbufs.data();
      c.recvbufs = recvbufs.data();
      c.counts = counts.data();
      c.nbuffers = 2;
      c.count = 2 * kBlock;
      return;
    }
    const bool v = t.layout == Layout::kPerRankCounts;
    if (v || t.needs_send) c.sendbuf = send;
    if (v || t.needs_recv) c.recvbuf = recv;
    if (!v) return;
    for (int i = 0; i < 4; ++i) {
      if (!(i < 2 ? t.send_per_rank : t.recv_per_rank)) continue;
      for (uint32_t j = 0; j < size; ++j) arrays[i].push_back(i % 2 ? kBlock * j : kBlock);
      c.*kArrays[i] = arrays[i].data();
    }
    if (t.send_per_rank && t.recv_per_rank) c.count = 0;
  }
  Valid(const Valid&) = delete;                         // c points into it
  uint32_t Other() const { return (rank + 1) % size; }  // this rank when alone
};

using Edit = std::function<void(Valid&)>;

RefusedCall Refused(plexus_collective_t coll, std::string what, Args a, Edit edit = {}) {
  return {std::move(what),
          [coll, a, edit](Context& ctx, Buffer& send, Buffer& recv, plexus_request** req) {
            Valid v(ctx, coll, a, send, recv);
            if (edit) edit(v);
            return ctx.calls().post(ctx.comm(), v.c, req);
          }};
}

// The calls CheckCall refuses with INVALID_ARGUMENT, each one edit of a
// valid call.
std::vector<RefusedCall> InvalidCalls(plexus_collective_t coll, const Args& a, uint32_t size) {
  const abi::Traits t = abi::TraitsOf(coll);
  const uint64_t es = ElementSize(a.dtype), big = kTwo63 / es;
  const uint64_t wrap = es > 1 ? UINT64_MAX / es + 1 : 0;
  const std::string bytes = std::to_string(es) + " bytes";
  const bool own_root = t.root == Root::kRoot && (t.send_on_root_only || t.recv_on_root_only);
  std::vector<RefusedCall> out;
  auto add = [&](std::string what, Edit e) {
    if (own_root) what += " (each rank its own root)";
    out.push_back(Refused(coll, std::move(what), a, [own_root, e](Valid& v) {
      if (own_root) v.c.root = v.rank;
      e(v);
    }));
  };
  add("dtype code 99", [](Valid& v) { v.c.dtype = 99; });
  if (t.reduces) add("op code 99", [](Valid& v) { v.c.op = 99; });
  const std::string n = std::to_string(size);
  if (t.root == Root::kRoot) {
    out.push_back(
        Refused(coll, "root " + n + " (out of range)", a, [=](Valid& v) { v.c.root = size; }));
  }
  if (t.root == Root::kPeer) {
    add("peer " + n + " (out of range)", [=](Valid& v) { v.c.root = size; });
    add("peer = this rank", [](Valid& v) { v.c.root = v.rank; });
  }

  const bool per_rank = t.layout == Layout::kPerRankCounts;
  const bool one = !per_rank && t.needs_send != t.needs_recv;  // broadcast, send, recv: "buf"
  const std::string count4 = per_rank ? "" : " and count 4";
  if (per_rank || t.needs_send) {
    add(std::string("NULL ") + (one ? "buf" : "sendbuf") + count4,
        [](Valid& v) { v.c.sendbuf = nullptr; });
  }
  if (per_rank || t.needs_recv) {
    add(std::string("NULL ") + (one ? "buf" : "recvbuf") + count4,
        [](Valid& v) { v.c.recvbuf = nullptr; });
  }
  if (t.layout == Layout::kCount) {
    // A backend that multiplies count x element size (x ranks) unchecked
    // wraps around, then reads or writes far past the buffers.
    add("count " + std::to_string(big) + " (count x " + bytes + " is 2^63)",
        [=](Valid& v) { v.c.count = big; });
    if ((t.send_per_rank || t.recv_per_rank) && size > 1) {
      const uint64_t unit = uint64_t(size) * es, c = (kTwo63 + unit - 1) / unit;
      add("count " + std::to_string(c) + " (count x " + bytes + " x " + n + " ranks reaches 2^63)",
          [=](Valid& v) { v.c.count = c; });
    }
  }
  // Overlap other than the in-place form (a buffer list's per buffer: below).
  const bool list = t.layout == Layout::kBufferList;
  if (!list && t.in_place == abi::InPlace::kDisjoint) {
    add("recvbuf = sendbuf (not in place)", [](Valid& v) { v.c.recvbuf = v.send; });
  } else if (!list && t.in_place == abi::InPlace::kSendBlock) {
    add("recvbuf one element into sendbuf (not the in-place position)",
        [](Valid& v) { v.c.recvbuf = v.send + v.es; });
  } else if (!list && t.in_place != abi::InPlace::kNone) {
    add("sendbuf one element into recvbuf (not the in-place position)",
        [](Valid& v) { v.c.sendbuf = v.recv + v.es; });
  }

  if (per_rank) {
    const bool both = t.send_per_rank && t.recv_per_rank;
    for (int i : {0, 2}) {  // counts at i, displacements at i + 1
      if (!(i == 0 ? t.send_per_rank : t.recv_per_rank)) continue;
      const std::string counts = kArrayNames[i], displs = kArrayNames[i + 1];
      // Another rank's entry, so that the check of this rank's own block
      // alone does not catch it.
      add(counts + "[another rank] " + std::to_string(big) + " (x " + bytes + " is 2^63)",
          [=](Valid& v) {
            v.arrays[i][v.Other()] = big;
            if (v.Other() == v.rank && !both) v.c.count = big;
          });
      add(displs + "[another rank] 2^64-2 (count + displacement wraps around)",
          [=](Valid& v) { v.arrays[i + 1][v.Other()] = UINT64_MAX - 1; });
      if (wrap != 0) {
        add(displs + "[another rank] " + std::to_string(wrap) + " (x " + bytes +
                " wraps around to 0)",
            [=](Valid& v) { v.arrays[i + 1][v.Other()] = wrap; });
      }
      // Blocks that are written, or reduced into one rank's result, may not
      // share an element (alltoallv's send blocks may).
      if (size > 1 && (i == 2 || !both)) {
        add(std::string("overlapping ") + (i == 0 ? "send" : "receive") + " blocks (every " +
                displs + " 0)",
            [=](Valid& v) { std::fill(v.arrays[i + 1].begin(), v.arrays[i + 1].end(), 0); });
      }
      add("NULL " + counts, [=](Valid& v) { v.c.*kArrays[i] = nullptr; });
      add("NULL " + displs, [=](Valid& v) { v.c.*kArrays[i + 1] = nullptr; });
    }
    if (both) {
      add("sendcounts[rank] 5 but recvcounts[rank] 4", [](Valid& v) { v.arrays[0][v.rank] = 5; });
    } else {
      add(std::string(t.recv_per_rank ? "sendcount 5 but recvcounts"
                                      : "recvcount 5 but sendcounts") +
              "[rank] 4",
          [](Valid& v) { v.c.count = 5; });
    }
  }

  if (t.layout == Layout::kBufferList) {
    add("nbuffers 0", [](Valid& v) { v.c.nbuffers = 0; });
    add("NULL sendbufs array", [](Valid& v) { v.c.sendbufs = nullptr; });
    add("NULL recvbufs array", [](Valid& v) { v.c.recvbufs = nullptr; });
    add("NULL counts array", [](Valid& v) { v.c.counts = nullptr; });
    add("sendbufs[1] NULL and counts[1] 4", [](Valid& v) { v.sendbufs[1] = nullptr; });
    add("recvbufs[0] and recvbufs[1] overlap (2 elements apart, 4 each)",
        [](Valid& v) { v.recvbufs[1] = v.recv + 2 * v.es; });
    add("sendbufs[1] = recvbufs[0] (buffers of different i share memory)",
        [](Valid& v) { v.sendbufs[1] = v.recv; });
    add("sendbufs[0] one element into recvbufs[0] (overlap, not equal)", [](Valid& v) {
      v.sendbufs[0] = v.recv + v.es;
      v.recvbufs[1] = v.recv + 2 * kBlock * v.es;
    });
    add("counts[0] " + std::to_string(big) + " (x " + bytes + " is 2^63)",
        [=](Valid& v) { v.counts[0] = big; });
    add("counts 2^64-1 and 2 (their sum wraps around to 1)", [](Valid& v) {
      v.counts[0] = UINT64_MAX;
      v.counts[1] = 2;
    });
  }
  return out;
}

// A dtype (and op) the collective accepts, so that only the argument under
// test is wrong: int32 when claimed.
Args BaseArgs(const plexus_capabilities& caps, plexus_collective_t coll) {
  Args a;
  const uint32_t mask = abi::IsReduction(coll) ? caps.reduce_dtypes[PLEXUS_OP_SUM] : caps.dtypes;
  for (plexus_dtype_t d = 1; !(mask & (1u << a.dtype)) && d <= PLEXUS_DTYPE_MAX_V1; ++d) {
    if (mask & (1u << d)) a.dtype = d;
  }
  return a;
}

// Valid calls but for a dtype/op pair the capabilities do not claim.
std::vector<RefusedCall> UnclaimedPairs(const plexus_capabilities& caps, plexus_collective_t coll,
                                        const Args& base) {
  std::vector<RefusedCall> out;
  for (plexus_dtype_t dt = 1; dt <= PLEXUS_DTYPE_MAX_V1; ++dt) {
    Args a = base;
    a.dtype = dt;
    if (!abi::IsReduction(coll)) {
      if (!(caps.dtypes & (1u << dt)))
        out.push_back(Refused(coll, std::string("unclaimed dtype ") + DtypeName(dt), a));
      continue;
    }
    for (a.op = PLEXUS_OP_SUM; a.op <= PLEXUS_OP_MAX_V1; ++a.op) {
      if (caps.reduce_dtypes[a.op] & (1u << dt)) continue;
      out.push_back(
          Refused(coll, std::string("unclaimed ") + DtypeName(dt) + " " + OpName(a.op), a));
    }
  }
  return out;
}

// Refusals, then (then_valid) a valid post of the same collective that must
// still work on the communicator.
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

Check SkipLine(const std::string& name, const std::string& why) {
  Check c;
  c.name = name;
  c.group = "arguments";
  c.run = [why](Context&) { return Outcome::Skip(why); };
  return c;
}

}  // namespace

std::vector<Check> ArgumentChecks(const plexus_capabilities& caps, uint32_t size) {
  std::vector<Check> out;
  bool any_unclaimed = false, any_pair = false;
  for (plexus_collective_t coll = 0; coll < abi::kCollectiveCount; ++coll) {
    const Args base = BaseArgs(caps, coll);
    if (!(caps.collectives & (1u << coll))) {
      // Its slot, if the table has one, must refuse a valid call.
      any_unclaimed = true;
      out.push_back(Make(std::string("arguments: unclaimed collective ") + CollectiveName(coll),
                         coll, {Refused(coll, "valid arguments", base)}, Refuse::kUnclaimed, false,
                         base));
      continue;
    }
    if (!abi::TraitsOf(coll).typed) continue;  // barrier: no arguments
    const std::string name = std::string("arguments: ") + CollectiveName(coll);
    if (std::vector<RefusedCall> pairs = UnclaimedPairs(caps, coll, base); !pairs.empty()) {
      any_pair = true;
      out.push_back(Make(name + " unclaimed dtypes and ops", coll, std::move(pairs),
                         Refuse::kUnclaimed, false, base));
    }
    std::vector<RefusedCall> memory;
    Args a = base;
    if (!(caps.memory_types & (1u << PLEXUS_MEMORY_CUDA))) {
      a.placement = &kCudaPlacement;
      memory.push_back(Refused(coll, "CUDA memory (not claimed)", a));
    }
    a.placement = &kUnknownPlacement;
    memory.push_back(Refused(coll, "memory type 99", a));
    out.push_back(Make(name + " unclaimed memory types", coll, std::move(memory),
                       Refuse::kUnclaimed, false, base));
    // (send and recv cannot be posted alone to show the communicator works.)
    out.push_back(Make(name + " invalid arguments", coll, InvalidCalls(coll, base, size),
                       Refuse::kInvalidArgument, abi::TraitsOf(coll).root != abi::Root::kPeer,
                       base));
  }
  if (!any_pair) {
    out.insert(out.begin(), SkipLine("arguments: unclaimed dtypes and ops",
                                     "every claimed collective claims every dtype (and op)"));
  }
  if (!any_unclaimed) {
    out.insert(out.begin(),
               SkipLine("arguments: unclaimed collectives", "every collective is claimed"));
  }
  return out;
}

Outcome ExpectRefusedCalls(Context& ctx, const std::string& collective,
                           const std::vector<RefusedCall>& calls, Refuse want) {
  Findings f;
  bool broken = false;
  std::set<std::string> statuses;
  // A non-NULL *req_out before the call: a refusal must overwrite it with NULL.
  static char poison_target;
  plexus_request* const kPoison = reinterpret_cast<plexus_request*>(&poison_target);
  for (const RefusedCall& call : calls) {
    Buffer send(uint64_t(ctx.size) * 16 * 8), recv(uint64_t(ctx.size) * 16 * 8);
    plexus_request* req = kPoison;
    SetPhase("backend collective call with arguments it must refuse");
    const int32_t rc = call.call(ctx, send, recv, &req);
    const std::string where = collective + " with " + call.what;
    if (rc == PLEXUS_OK) {
      f.Add(where + " was accepted (OK)");
      broken = true;
      if (req && req != kPoison) {
        const Completion c = WaitFor(ctx.plugin(), req, ctx.op_bound_ms());
        if (c.done) {
          ctx.calls().request_free(req);
        } else if (!AbortAndReap(ctx.plugin(), ctx.comm(), req)) {
          Abandon(std::move(send));
          Abandon(std::move(recv));
          ctx.session.MarkMainLeaked();
        } else if (ctx.plugin().caps().flags & PLEXUS_CAP_ABORT) {
          Watch(std::move(send), "sendbuf of an aborted " + where);
          Watch(std::move(recv), "recvbuf of an aborted " + where);
        } else {
          Abandon(std::move(send));
          Abandon(std::move(recv));
        }
      }
      continue;
    }
    statuses.insert(StatusText(rc));
    if (rc > 0) {
      f.Add(where + " returned a positive status " + std::to_string(rc));
      continue;
    }
    if (want == Refuse::kUnclaimed && rc != PLEXUS_ERR_UNSUPPORTED &&
        rc != PLEXUS_ERR_INVALID_ARGUMENT) {
      f.Add(where + " returned " + StatusText(rc) + " (want UNSUPPORTED or INVALID_ARGUMENT)");
    }
    if (want == Refuse::kInvalidArgument && rc != PLEXUS_ERR_INVALID_ARGUMENT) {
      f.Add(where + " returned " + StatusText(rc) + " (want INVALID_ARGUMENT)");
    }
    if (req != nullptr) {
      f.Add(where + " returned " + StatusText(rc) + " but did not set *req_out to NULL");
    }
    const std::string err = ctx.plugin().LastError(ctx.comm());
    if (err.empty())
      f.Add(where + " returned " + StatusText(rc) + " with an empty comm_last_error");
    f.Add(send.CheckGuards("sendbuf"));
    f.Add(recv.CheckGuards("recvbuf"));
  }
  Outcome o = f.ToOutcome();
  if (o.verdict == Verdict::kPass) {
    std::string list;
    for (const std::string& s : statuses) list += (list.empty() ? "" : ", ") + s;
    o.detail = std::to_string(calls.size()) + " call(s) refused with " + list;
  }
  o.comm_broken = broken;
  return o;
}

}  // namespace plexus::conformance
