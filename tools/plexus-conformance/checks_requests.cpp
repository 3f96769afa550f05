// The request protocol: barrier semantics, several requests in flight, test()
// never blocking, wait()'s timeout, and waits from several threads.
//
// The timing checks need a rank that is late on purpose. The ranks meet at a
// store barrier (not the backend's), rank 0 sleeps, raises a store flag and
// only then posts; the others post at once and observe their request while
// it cannot complete. The flag tells a request that completed "too early"
// from one whose rank 0 was merely scheduled late.
#include <atomic>
#include <thread>
#include <vector>

#include "check.hpp"
#include "exchange.hpp"
#include "operation.hpp"
#include "options.hpp"
#include "plexus/abi/call.hpp"
#include "plugin.hpp"

namespace plexus::conformance {
namespace {

constexpr int64_t kBarrierDelayMs = 300;
constexpr int64_t kLateDelayMs = 600;
constexpr int64_t kTestMaxMs = 50;

std::string FlagName(const Context& ctx) {
  return "posted/" + std::to_string(ctx.seq);
}

// Store barrier, then rank 0 sleeps delay_ms and raises the flag. Returns ""
// or why the store failed.
std::string MeetThenDelayRankZero(Context& ctx, int64_t delay_ms) {
  Status st = ctx.exchange().Barrier("start/" + std::to_string(ctx.seq));
  if (!st.ok()) return "store barrier: " + st.message();
  if (ctx.rank == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    st = ctx.exchange().Raise(FlagName(ctx));
    if (!st.ok()) return "store: " + st.message();
  }
  return {};
}

bool RankZeroPosted(Context& ctx) {
  bool raised = false;
  (void)ctx.exchange().IsRaised(FlagName(ctx), &raised);
  return raised;
}

Outcome WithBroken(const Findings& f, bool broken, const std::string& pass_detail = {}) {
  Outcome o = f.ToOutcome(pass_detail);
  o.comm_broken = broken;
  return o;
}

Outcome BarrierWaits(Context& ctx) {
  if (ctx.size < 2) return Outcome::Skip("needs at least 2 ranks");
  if (const std::string e = MeetThenDelayRankZero(ctx, kBarrierDelayMs); !e.empty()) {
    return Outcome::Fail(e);
  }
  Findings f;
  bool broken = false;
  Operation op(ctx, ctx.comm(), PLEXUS_DTYPE_UINT8);
  plexus_request* req = nullptr;
  const auto posted = Clock::now();
  if (!op.Posted("barrier", ctx.calls().post(ctx.comm(), abi::Call{PLEXUS_COLL_BARRIER}, &req),
                 &req)) {
    op.Finish(&f, &broken);
    return WithBroken(f, broken);
  }
  std::string detail;
  if (ctx.rank != 0) {
    // Poll until it completes; it must not before rank 0 has posted.
    const auto deadline = posted + std::chrono::milliseconds(ctx.op_bound_ms());
    int32_t rc = PLEXUS_IN_PROGRESS;
    while (Clock::now() < deadline && (rc = ctx.calls().test(req)) == PLEXUS_IN_PROGRESS) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (rc != PLEXUS_IN_PROGRESS && !RankZeroPosted(ctx)) {
      f.Add("barrier completed (" + StatusText(rc) + ") " + std::to_string(MillisSince(posted)) +
            " ms after it was posted, before rank 0 had posted its barrier (rank 0 posts " +
            std::to_string(kBarrierDelayMs) + " ms late)");
    }
    detail = "completed " + std::to_string(MillisSince(posted)) + " ms after posting; rank 0 was " +
             std::to_string(kBarrierDelayMs) + " ms late";
  }
  op.Finish(&f, &broken);
  return WithBroken(f, broken, detail);
}

Outcome ManyOutstanding(Context& ctx) {
  uint32_t k = 8;
  if (ctx.caps().max_outstanding != 0 && ctx.caps().max_outstanding < k) {
    k = ctx.caps().max_outstanding;
  }
  if (!(ctx.caps().reduce_dtypes[PLEXUS_OP_SUM] & (1u << PLEXUS_DTYPE_INT32))) {
    return Outcome::Skip("needs an int32 sum allreduce");
  }
  Findings f;
  bool broken = false;
  std::vector<std::unique_ptr<Operation>> ops;
  for (uint32_t i = 0; i < k; ++i) {
    ops.push_back(std::make_unique<Operation>(ctx, ctx.comm(), PLEXUS_DTYPE_INT32));
    // Different lengths and data, so that a result landing in the wrong
    // request's buffer is caught.
    ops.back()->PostAllreduce(i % 2 ? PLEXUS_OP_MAX : PLEXUS_OP_SUM, 1000 + 17 * i,
                              ctx.seq * 64 + i);
  }
  for (uint32_t i = k; i-- > 0;) ops[i]->Finish(&f, &broken);
  return WithBroken(f, broken,
                    std::to_string(k) + " allreduces posted before any wait, waited in reverse");
}

// Rank 0 posts late; the others watch their pending request. probe returns
// problems found while the request is pending.
Outcome WhilePending(Context& ctx,
                     const std::function<std::string(plexus_request*, Findings*)>& probe) {
  if (ctx.size < 2) return Outcome::Skip("needs at least 2 ranks (a peer that posts late)");
  if (!(ctx.caps().reduce_dtypes[PLEXUS_OP_SUM] & (1u << PLEXUS_DTYPE_INT32))) {
    return Outcome::Skip("needs an int32 sum allreduce");
  }
  if (const std::string e = MeetThenDelayRankZero(ctx, kLateDelayMs); !e.empty()) {
    return Outcome::Fail(e);
  }
  Findings f;
  bool broken = false;
  Operation op(ctx, ctx.comm(), PLEXUS_DTYPE_INT32);
  plexus_request* req = op.PostAllreduce(PLEXUS_OP_SUM, 4099, ctx.seq);
  std::string detail;
  if (req && ctx.rank != 0) detail = probe(req, &f);
  op.Finish(&f, &broken);
  return WithBroken(f, broken, detail);
}

Outcome TestNeverBlocks(Context& ctx) {
  return WhilePending(ctx, [&](plexus_request* req, Findings* f) {
    const auto start = Clock::now();
    int64_t worst = 0;
    int calls = 0;
    while (MillisSince(start) < kLateDelayMs - 200) {
      const auto t0 = Clock::now();
      const int32_t rc = ctx.calls().test(req);
      worst = std::max<int64_t>(worst, MillisSince(t0));
      ++calls;
      if (rc != PLEXUS_IN_PROGRESS) {
        if (!RankZeroPosted(ctx)) {
          f->Add("test() returned " + StatusText(rc) + " for an allreduce rank 0 had not posted");
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (worst >= kTestMaxMs) {
      f->Add("test() took " + std::to_string(worst) +
             " ms on a pending request (it must not "
             "block; limit " +
             std::to_string(kTestMaxMs) + " ms)");
    }
    return std::to_string(calls) + " calls on a pending request, the slowest " +
           std::to_string(worst) + " ms";
  });
}

Outcome WaitTimeout(Context& ctx) {
  return WhilePending(ctx, [&](plexus_request* req, Findings* f) {
    const TracedCalls& t = ctx.calls();
    auto t0 = Clock::now();
    const int32_t rc0 = t.wait(req, 0);
    const int64_t d0 = MillisSince(t0);
    t0 = Clock::now();
    const int32_t rc50 = t.wait(req, 50);
    const int64_t d50 = MillisSince(t0);
    const int32_t tr = t.test(req);
    const int32_t fr = t.request_free(req);
    const int32_t tr2 = t.test(req);
    // Rank 0 posting before the probes ended (a heavily loaded machine)
    // makes their results meaningless; the request then simply completes.
    if (RankZeroPosted(ctx)) return std::string("rank 0 posted before the probes ended");
    if (rc0 != PLEXUS_ERR_TIMEOUT) {
      f->Add("wait(req, 0) on a pending request returned " + StatusText(rc0) +
             " (must be exactly TIMEOUT)");
    }
    if (d0 >= kTestMaxMs) f->Add("wait(req, 0) blocked for " + std::to_string(d0) + " ms");
    if (rc50 != PLEXUS_ERR_TIMEOUT) {
      f->Add("wait(req, 50) on a pending request returned " + StatusText(rc50) +
             " (must be exactly TIMEOUT)");
    } else if (d50 < 40) {
      f->Add("wait(req, 50) returned TIMEOUT after " + std::to_string(d50) +
             " ms (it must block until the request completes or 50 ms pass)");
    } else if (d50 > 1000) {
      f->Add("wait(req, 50) took " + std::to_string(d50) + " ms");
    }
    if (tr != PLEXUS_IN_PROGRESS) {
      f->Add("test() after wait() timed out returned " + StatusText(tr) +
             " (the request must still be pending)");
    }
    if (fr != PLEXUS_ERR_INVALID_USAGE) {
      f->Add("request_free() of a pending request returned " + StatusText(fr) +
             " (must be INVALID_USAGE, changing nothing)");
    }
    if (tr2 != PLEXUS_IN_PROGRESS) {
      f->Add("test() after a refused request_free() returned " + StatusText(tr2));
    }
    return "wait(0) " + StatusText(rc0) + " in " + std::to_string(d0) + " ms, wait(50) " +
           StatusText(rc50) + " in " + std::to_string(d50) + " ms, request_free " + StatusText(fr);
  });
}

Outcome ThreadedWaits(Context& ctx) {
  if (ctx.caps().thread_level != PLEXUS_THREAD_MULTIPLE) {
    return Outcome::Skip("thread_level is serialized");
  }
  if (!(ctx.caps().reduce_dtypes[PLEXUS_OP_SUM] & (1u << PLEXUS_DTYPE_INT32))) {
    return Outcome::Skip("needs an int32 sum allreduce");
  }
  constexpr int kThreads = 4;
  if (const std::string e = MeetThenDelayRankZero(ctx, kBarrierDelayMs); !e.empty()) {
    return Outcome::Fail(e);
  }
  Findings f;
  bool broken = false;
  std::vector<std::unique_ptr<Operation>> ops;
  std::vector<plexus_request*> reqs;
  for (int i = 0; i < kThreads; ++i) {
    ops.push_back(std::make_unique<Operation>(ctx, ctx.comm(), PLEXUS_DTYPE_INT32));
    reqs.push_back(ops.back()->PostAllreduce(PLEXUS_OP_SUM, 2000 + 31 * i, ctx.seq * 64 + i));
  }
  // Each thread waits for one request; rank 0 is late, so on the other
  // ranks all of them are inside wait() at once.
  const auto deadline = Clock::now() + std::chrono::milliseconds(ctx.op_bound_ms());
  std::vector<Completion> done(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    if (!reqs[i]) continue;
    threads.emplace_back([&, i] { done[i] = WaitUntil(ctx.plugin(), reqs[i], deadline); });
  }
  for (auto& th : threads) th.join();
  for (int i = 0; i < kThreads; ++i) {
    if (reqs[i] && done[i].done && done[i].status != PLEXUS_OK) {
      f.Add("request " + std::to_string(i) + " waited in a thread completed with " +
            StatusText(done[i].status));
    }
  }
  for (int i = kThreads; i-- > 0;) ops[i]->Finish(&f, &broken);
  return WithBroken(f, broken, std::to_string(kThreads) + " threads waiting at once");
}

// What a request_notify function saw. Allocated, and left alone if the
// function never ran: the backend may still call it later.
struct Notified {
  std::atomic<int> calls{0};
  std::atomic<int32_t> status{PLEXUS_IN_PROGRESS};
  std::atomic<bool> rank_zero_had_posted{false};
  std::thread::id thread;
  Context* ctx = nullptr;
};

void RecordNotified(void* arg, int32_t status) {
  auto* n = static_cast<Notified*>(arg);
  n->rank_zero_had_posted = n->ctx->rank == 0 || RankZeroPosted(*n->ctx);
  n->thread = std::this_thread::get_id();
  n->status = status;
  ++n->calls;
}

// ABI 1.5: done runs once, with the status test() gives, not before the
// operation completes (rank 0 posts late), and at once, here, for a request
// that has completed; a second request_notify and a NULL done are refused.
Outcome Notify(Context& ctx) {
  if (!ctx.plugin().has_request_notify()) {
    return Outcome::Skip("no request_notify (ABI 1.5, optional: the host waits itself)");
  }
  if (!(ctx.caps().reduce_dtypes[PLEXUS_OP_SUM] & (1u << PLEXUS_DTYPE_INT32))) {
    return Outcome::Skip("needs an int32 sum allreduce");
  }
  if (const std::string e = MeetThenDelayRankZero(ctx, kBarrierDelayMs); !e.empty()) {
    return Outcome::Fail(e);
  }
  Findings f;
  bool broken = false;
  const TracedCalls& t = ctx.calls();
  auto* pending = new Notified;
  pending->ctx = &ctx;
  Operation op(ctx, ctx.comm(), PLEXUS_DTYPE_INT32);
  plexus_request* req = op.PostAllreduce(PLEXUS_OP_SUM, 3001, ctx.seq * 64);
  if (req) {
    const int32_t rc = t.request_notify(req, RecordNotified, pending);
    if (rc != PLEXUS_OK) f.Add("request_notify on a pending allreduce returned " + StatusText(rc));
    const int32_t again = t.request_notify(req, RecordNotified, pending);
    if (again != PLEXUS_ERR_INVALID_USAGE) {
      f.Add("a second request_notify on one request returned " + StatusText(again) +
            " (want PLEXUS_ERR_INVALID_USAGE)");
    }
  }
  op.Finish(&f, &broken);  // waits, checks every element, frees
  // done may run a moment after wait() returned; the request is freed by now.
  const auto deadline = Clock::now() + std::chrono::milliseconds(ctx.op_bound_ms());
  while (req && pending->calls == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a second call, if any
  if (req) {
    if (pending->calls != 1) {
      f.Add("done of the allreduce ran " + std::to_string(pending->calls.load()) +
            " times (want once)");
    } else {
      if (pending->status != PLEXUS_OK) {
        f.Add("done of the allreduce got " + StatusText(pending->status) + ", test() OK");
      }
      if (!pending->rank_zero_had_posted) {
        f.Add("done of the allreduce ran before rank 0 had posted its part");
      }
    }
  }
  if (pending->calls > 0) delete pending;  // else the backend may still call it: left alone

  // A completed request: done runs before request_notify returns, here.
  Operation done_op(ctx, ctx.comm(), PLEXUS_DTYPE_INT32);
  plexus_request* completed = done_op.PostAllreduce(PLEXUS_OP_SUM, 17, ctx.seq * 64 + 1);
  if (completed) {
    const Completion c = WaitUntil(ctx.plugin(), completed,
                                   Clock::now() + std::chrono::milliseconds(ctx.op_bound_ms()));
    if (c.done) {
      Notified now;
      now.ctx = &ctx;
      const int32_t bad = t.request_notify(completed, nullptr, &now);
      if (bad != PLEXUS_ERR_INVALID_ARGUMENT) {
        f.Add("request_notify with a NULL done returned " + StatusText(bad));
      }
      const int32_t rc = t.request_notify(completed, RecordNotified, &now);
      if (rc != PLEXUS_OK || now.calls != 1 || now.thread != std::this_thread::get_id() ||
          now.status != c.status) {
        f.Add("request_notify on a completed request returned " + StatusText(rc) +
              " having run done " + std::to_string(now.calls.load()) + " times before it returned" +
              (now.calls == 1 && now.thread != std::this_thread::get_id() ? " on another thread"
                                                                          : "") +
              " (want once, on the caller's thread, with the request's status)");
      }
    }
  }
  done_op.Finish(&f, &broken);
  return WithBroken(f, broken, "done ran once, after rank 0 posted; at once when complete");
}

Check Make(const std::string& name, std::function<Outcome(Context&)> fn) {
  Check c;
  c.name = name;
  c.group = "requests";
  c.run = std::move(fn);
  return c;
}

}  // namespace

std::vector<Check> RequestChecks(const plexus_capabilities& caps, uint32_t) {
  std::vector<Check> out;
  const bool allreduce = caps.collectives & (1u << PLEXUS_COLL_ALLREDUCE);
  if (caps.collectives & (1u << PLEXUS_COLL_BARRIER)) {
    out.push_back(Make("requests: barrier waits for the last rank", BarrierWaits));
  }
  if (allreduce) {
    out.push_back(
        Make("requests: 8 allreduces in flight, waited in reverse order", ManyOutstanding));
    out.push_back(Make("requests: test() never blocks", TestNeverBlocks));
    out.push_back(Make("requests: wait() with a timeout on a pending request", WaitTimeout));
    out.push_back(Make("requests: waits from several threads", ThreadedWaits));
    out.push_back(Make("requests: request_notify (ABI 1.5)", Notify));
  }
  return out;
}

}  // namespace plexus::conformance
