// Calls a backend must refuse: collectives, dtype/op pairs and memory types
// it does not claim (UNSUPPORTED, or INVALID_ARGUMENT), and invalid
// arguments (NULL buffers, unknown codes, ranks out of range). Each refusal
// must post nothing, set *req_out to NULL and leave an error message. A
// call that is accepted by mistake is waited for (bounded), and the shared
// communicator is then replaced, since the ranks may be out of step.
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "buffer.hpp"
#include "check.hpp"
#include "data.hpp"
#include "plexus/abi/call.hpp"
#include "plugin.hpp"
#include "rank_record.hpp"
#include "refusals.hpp"
#include "requests.hpp"
#include "session.hpp"

namespace plexus::conformance {
namespace {

// Everything one call needs; the defaults are valid for every collective.
struct Args {
  bool null_send = false;
  bool null_recv = false;
  uint64_t count = 4;
  plexus_dtype_t dtype = PLEXUS_DTYPE_INT32;
  plexus_reduce_op_t op = PLEXUS_OP_SUM;
  int64_t root = -1;  // -1: 0 (rooted) or the ring neighbour (send/recv)
  const plexus_placement* placement = nullptr;
};

bool IsReduction(plexus_collective_t c) {
  return c == PLEXUS_COLL_ALLREDUCE || c == PLEXUS_COLL_REDUCE || c == PLEXUS_COLL_REDUCE_SCATTER;
}
bool HasRoot(plexus_collective_t c) {
  return c == PLEXUS_COLL_BROADCAST || c == PLEXUS_COLL_REDUCE;
}
bool IsPointToPoint(plexus_collective_t c) {
  return c == PLEXUS_COLL_SEND || c == PLEXUS_COLL_RECV;
}

bool HasSlot(const plexus_backend_v1& t, plexus_collective_t c) {
  switch (c) {
    case PLEXUS_COLL_ALLREDUCE:
      return t.allreduce;
    case PLEXUS_COLL_BROADCAST:
      return t.broadcast;
    case PLEXUS_COLL_REDUCE:
      return t.reduce;
    case PLEXUS_COLL_ALLGATHER:
      return t.allgather;
    case PLEXUS_COLL_REDUCE_SCATTER:
      return t.reduce_scatter;
    case PLEXUS_COLL_ALLTOALL:
      return t.alltoall;
    case PLEXUS_COLL_BARRIER:
      return t.barrier;
    case PLEXUS_COLL_SEND:
      return t.send;
    case PLEXUS_COLL_RECV:
      return t.recv;
    default:
      return false;
  }
}

// Calls coll with args on the shared communicator. send/recv buffers hold
// size * 16 elements of up to 8 bytes, enough for every collective.
int32_t Invoke(Context& ctx, plexus_collective_t coll, const Args& a, Buffer& send, Buffer& recv,
               plexus_request** req) {
  const TracedCalls& t = ctx.calls();
  plexus_comm* comm = ctx.comm();
  const void* s = a.null_send ? nullptr : send.data();
  void* r = a.null_recv ? nullptr : recv.data();
  SetPhase("backend collective call with arguments it must refuse");
  const uint32_t root = a.root >= 0 ? uint32_t(a.root) : 0;
  const uint32_t right = a.root >= 0 ? uint32_t(a.root) : (ctx.rank + 1) % ctx.size;
  const uint32_t left = a.root >= 0 ? uint32_t(a.root) : (ctx.rank + ctx.size - 1) % ctx.size;
  auto post = [&](const abi::Call& call) { return t.post(comm, call, req); };
  switch (coll) {
    case PLEXUS_COLL_ALLREDUCE:
      return post({PLEXUS_COLL_ALLREDUCE, s, r, a.count, a.dtype, a.op, 0, a.placement});
    case PLEXUS_COLL_BROADCAST:
      return post({PLEXUS_COLL_BROADCAST, nullptr, r, a.count, a.dtype, 0, root, a.placement});
    case PLEXUS_COLL_REDUCE:
      return post({PLEXUS_COLL_REDUCE, s, r, a.count, a.dtype, a.op, root, a.placement});
    case PLEXUS_COLL_ALLGATHER:
      return post({PLEXUS_COLL_ALLGATHER, s, r, a.count, a.dtype, 0, 0, a.placement});
    case PLEXUS_COLL_REDUCE_SCATTER:
      return post({PLEXUS_COLL_REDUCE_SCATTER, s, r, a.count, a.dtype, a.op, 0, a.placement});
    case PLEXUS_COLL_ALLTOALL:
      return post({PLEXUS_COLL_ALLTOALL, s, r, a.count, a.dtype, 0, 0, a.placement});
    case PLEXUS_COLL_BARRIER:
      return post({PLEXUS_COLL_BARRIER});
    case PLEXUS_COLL_SEND:
      return post({PLEXUS_COLL_SEND, s, nullptr, a.count, a.dtype, 0, right, a.placement});
    case PLEXUS_COLL_RECV:
      return post({PLEXUS_COLL_RECV, nullptr, r, a.count, a.dtype, 0, left, a.placement});
    default:
      return PLEXUS_ERR_INTERNAL;
  }
}

struct Refusal {
  std::string what;
  Args args;
};

// The calls of one collective of ABI 1.0 with Args (see Invoke).
Outcome ExpectRefused(Context& ctx, plexus_collective_t coll, const std::vector<Refusal>& calls,
                      bool strict) {
  std::vector<RefusedCall> made;
  for (const Refusal& r : calls) {
    made.push_back({r.what, [coll, args = r.args](Context& c, Buffer& send, Buffer& recv,
                                                  plexus_request** req) {
                      return Invoke(c, coll, args, send, recv, req);
                    }});
  }
  return ExpectRefusedCalls(ctx, CollectiveName(coll), made,
                            strict ? Refuse::kUnclaimed : Refuse::kAnyError);
}

Check Make(const std::string& name, plexus_collective_t coll, std::vector<Refusal> calls,
           bool strict) {
  Check c;
  c.name = name;
  c.group = "arguments";
  c.run = [coll, calls = std::move(calls), strict](Context& ctx) {
    return ExpectRefused(ctx, coll, calls, strict);
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

// Placements refused by a backend without CUDA memory, and by every backend.
const plexus_placement kCudaPlacement{sizeof(plexus_placement), PLEXUS_MEMORY_CUDA, 0, 0, nullptr};
const plexus_placement kUnknownPlacement{sizeof(plexus_placement), 99, -1, 0, nullptr};

}  // namespace

std::vector<Check> ArgumentChecks(const plexus_capabilities& caps, uint32_t size) {
  std::vector<Check> out;
  // The table is not known here, only the capabilities: the unclaimed
  // collectives' checks find out at run time whether the slot exists.
  bool any_unclaimed = false;
  for (plexus_collective_t coll = 0; coll < PLEXUS_COLL_COUNT_V1; ++coll) {
    if (caps.collectives & (1u << coll)) continue;
    any_unclaimed = true;
    Check c;
    c.name = std::string("arguments: unclaimed collective ") + CollectiveName(coll);
    c.group = "arguments";
    c.run = [coll](Context& ctx) {
      if (!HasSlot(ctx.table(), coll)) return Outcome::Skip("slot is NULL (nothing to call)");
      return ExpectRefused(ctx, coll, {{"valid arguments", Args{}}}, true);
    };
    out.push_back(std::move(c));
  }
  if (!any_unclaimed)
    out.push_back(SkipLine("arguments: unclaimed collectives", "every collective of ABI 1.0 is claimed"));

  bool any_pair = false;
  for (plexus_collective_t coll = 0; coll < PLEXUS_COLL_COUNT_V1; ++coll) {
    if (!(caps.collectives & (1u << coll)) || coll == PLEXUS_COLL_BARRIER) continue;
    std::vector<Refusal> calls;
    for (plexus_dtype_t dt = 1; dt <= PLEXUS_DTYPE_MAX_V1; ++dt) {
      if (IsReduction(coll)) {
        for (plexus_reduce_op_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op) {
          if (caps.reduce_dtypes[op] & (1u << dt)) continue;
          Args a;
          a.dtype = dt;
          a.op = op;
          calls.push_back({std::string("unclaimed ") + DtypeName(dt) + " " + OpName(op), a});
        }
      } else if (!(caps.dtypes & (1u << dt))) {
        Args a;
        a.dtype = dt;
        calls.push_back({std::string("unclaimed dtype ") + DtypeName(dt), a});
      }
    }
    if (calls.empty()) continue;
    any_pair = true;
    out.push_back(
        Make(std::string("arguments: ") + CollectiveName(coll) + " unclaimed dtypes and ops", coll,
             std::move(calls), true));
  }
  if (!any_pair) {
    out.push_back(SkipLine("arguments: unclaimed dtypes and ops",
                           "every claimed collective claims every dtype (and op)"));
  }

  for (plexus_collective_t coll = 0; coll < PLEXUS_COLL_COUNT_V1; ++coll) {
    if (!(caps.collectives & (1u << coll)) || coll == PLEXUS_COLL_BARRIER) continue;
    const std::string name = CollectiveName(coll);
    // A dtype the collective accepts, so only the argument under test is wrong.
    plexus_dtype_t dt = PLEXUS_DTYPE_INT32;
    plexus_reduce_op_t rop = PLEXUS_OP_SUM;
    const uint32_t dmask = IsReduction(coll) ? caps.reduce_dtypes[PLEXUS_OP_SUM] : caps.dtypes;
    if (!(dmask & (1u << dt))) {
      for (plexus_dtype_t d = 1; d <= PLEXUS_DTYPE_MAX_V1; ++d) {
        if (dmask & (1u << d)) {
          dt = d;
          break;
        }
      }
    }
    Args base;
    base.dtype = dt;
    base.op = rop;
    std::vector<Refusal> memory;
    if (!(caps.memory_types & (1u << PLEXUS_MEMORY_CUDA))) {
      Args a = base;
      a.placement = &kCudaPlacement;
      memory.push_back({"CUDA memory (not claimed)", a});
    }
    {
      Args a = base;
      a.placement = &kUnknownPlacement;
      memory.push_back({"memory type 99", a});
    }
    out.push_back(Make("arguments: " + name + " unclaimed memory types", coll, memory, true));

    std::vector<Refusal> invalid;
    const bool has_send = coll != PLEXUS_COLL_BROADCAST && coll != PLEXUS_COLL_RECV;
    const bool has_recv = coll != PLEXUS_COLL_SEND;
    if (has_send) {
      Args a = base;
      a.null_send = true;
      invalid.push_back({"NULL sendbuf and count 4", a});
    }
    if (has_recv && coll != PLEXUS_COLL_REDUCE) {
      Args a = base;
      a.null_recv = true;
      invalid.push_back({std::string(coll == PLEXUS_COLL_BROADCAST ? "NULL buf" : "NULL recvbuf") +
                             " and count 4",
                         a});
    }
    {
      Args a = base;
      a.dtype = 99;
      invalid.push_back({"dtype code 99", a});
    }
    if (IsReduction(coll)) {
      Args a = base;
      a.op = 99;
      invalid.push_back({"op code 99", a});
    }
    if (HasRoot(coll)) {
      Args a = base;
      a.root = size;
      invalid.push_back({"root " + std::to_string(size) + " (out of range)", a});
    }
    if (IsPointToPoint(coll)) {
      Args a = base;
      a.root = size;
      invalid.push_back({"peer " + std::to_string(size) + " (out of range)", a});
    }
    {
      // Counts whose size in bytes does not fit the address space: a backend
      // that multiplies count x element size (x ranks) without checking
      // wraps around and then reads or writes far past the buffers.
      const uint64_t es = ElementSize(dt);
      const bool per_rank = coll == PLEXUS_COLL_ALLGATHER || coll == PLEXUS_COLL_ALLTOALL ||
                            coll == PLEXUS_COLL_REDUCE_SCATTER;
      Args a = base;
      a.count = (uint64_t(1) << 63) / es;
      invalid.push_back({"count " + std::to_string(a.count) + " (count x " + std::to_string(es) +
                             " bytes is 2^63)",
                         a});
      if (per_rank && size > 1) {
        Args b = base;
        const uint64_t unit = uint64_t(size) * es;
        b.count = ((uint64_t(1) << 63) + unit - 1) / unit;
        invalid.push_back({"count " + std::to_string(b.count) + " (count x " + std::to_string(es) +
                               " bytes x " + std::to_string(size) + " ranks reaches 2^63)",
                           b});
      }
    }
    out.push_back(Make("arguments: " + name + " invalid arguments", coll, invalid, false));
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
