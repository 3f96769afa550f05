// Failures a backend must turn into errors, never into hangs or wrong data:
// a rank that never posts (the operation timeout), comm_abort from another
// thread while a wait is in progress, and collectives that do not match.
// Each runs on a fresh communicator (see fault_support.hpp).
#include <algorithm>
#include <atomic>
#include <thread>

#include "buffer.hpp"
#include "check.hpp"
#include "data.hpp"
#include "exchange.hpp"
#include "fault_support.hpp"
#include "operation.hpp"
#include "options.hpp"
#include "plexus/abi/call.hpp"
#include "plugin.hpp"

namespace plexus::conformance {
namespace {

constexpr int64_t kAbortAfterMs = 300;
constexpr int64_t kAbortPromptMs = 2000;
// The abort scenario's operation timeout: far above the moment of the abort,
// so that an ABORTED status cannot be a timeout in disguise.
constexpr int64_t kAbortCommTimeoutMs = 10000;

bool HasInt32Sum(const Context& ctx) {
  return (ctx.caps().collectives & (1u << PLEXUS_COLL_ALLREDUCE)) &&
         (ctx.caps().reduce_dtypes[PLEXUS_OP_SUM] & (1u << PLEXUS_DTYPE_INT32));
}

Outcome RankNeverPosts(Context& ctx) {
  if (ctx.size < 2) return Outcome::Skip("needs at least 2 ranks");
  if (!HasInt32Sum(ctx)) return Outcome::Skip("needs an int32 sum allreduce");
  const int64_t T = ctx.options.fault_timeout_ms;
  ScenarioComm comm(ctx, "timeout", T);
  if (!comm.get()) {
    return Outcome::Fail("comm_create(timeout_ms " + std::to_string(T) +
                         ") failed: " + StatusText(comm.status()) + ": " + comm.error());
  }
  const uint32_t last = ctx.size - 1;
  const std::string arrival = "timeout-done/" + std::to_string(ctx.seq);
  if (ctx.rank == last) {
    const std::string problem =
        PostLate(ctx, comm, arrival, AllButLast(ctx.size), 1024, PLEXUS_DTYPE_INT32);
    if (!problem.empty()) return Outcome::Fail(problem);
    return Outcome::Pass();
  }
  Findings f;
  std::string detail;
  {
    Operation op(ctx, comm.get(), PLEXUS_DTYPE_INT32);
    plexus_request* req = op.PostAllreduce(PLEXUS_OP_SUM, 1024, ctx.seq);
    if (!req) {
      bool ignored = false;
      op.Finish(&f, &ignored);  // records why the post failed
    } else {
      const int64_t bound = 4 * T;
      const Completion c = WaitFor(ctx.plugin(), req, bound);
      if (!c.done) {
        f.Add("the allreduce did not complete within " + std::to_string(bound) +
              " ms (4x timeout_ms " + std::to_string(T) + ") although rank " +
              std::to_string(last) + " never posted");
        if (!AbortAndReap(ctx.plugin(), comm.get(), req)) {
          op.Abandon();
          comm.MarkLeaked();
        } else {
          op.KeepAfterFailure("allreduce in '" + comm.name() + "'");
        }
      } else {
        f.Add(c.violation);
        if (c.status == PLEXUS_OK) {
          f.Add("the allreduce completed OK although rank " + std::to_string(last) +
                " never posted");
        } else if (c.status != PLEXUS_ERR_TIMEOUT && c.status != PLEXUS_ERR_REMOTE) {
          f.Add("completed with " + StatusText(c.status) + " (want TIMEOUT or REMOTE)");
        }
        if (c.status != PLEXUS_OK && c.elapsed_ms < T / 2) {
          f.Add("failed with " + StatusText(c.status) + " after " + std::to_string(c.elapsed_ms) +
                " ms, long before timeout_ms " + std::to_string(T) + " (rank " +
                std::to_string(last) + " is only late, not gone)");
        }
        if (c.status != PLEXUS_OK) {
          const std::string text = CheckErrorStrings(ctx, comm.get(), req, c.status, &f);
          detail = StatusText(c.status) + " after " + std::to_string(c.elapsed_ms) + " ms: " + text;
        }
        if (c.status != PLEXUS_OK) op.KeepAfterFailure("the timed-out allreduce");
        f.Add(CheckAndFree(ctx.plugin(), req, c.status));
      }
    }
  }
  (void)ctx.exchange().Arrive(arrival);
  return f.ToOutcome(detail);
}

Outcome AbortFromThread(Context& ctx) {
  if (ctx.size < 2) return Outcome::Skip("needs at least 2 ranks (a peer that delays)");
  if (!HasInt32Sum(ctx)) return Outcome::Skip("needs an int32 sum allreduce");
  ScenarioComm comm(ctx, "abort", kAbortCommTimeoutMs);
  if (!comm.get()) {
    return Outcome::Fail("comm_create failed: " + StatusText(comm.status()) + ": " + comm.error());
  }
  // Only rank 0 posts and aborts; the others post late. With several
  // aborting ranks, one's abort could reach another as a closed connection
  // (REMOTE) before that one's own abort, which the ABI allows.
  const std::string arrival = "abort-done/" + std::to_string(ctx.seq);
  if (ctx.rank != 0) {
    const std::string problem = PostLate(ctx, comm, arrival, {0}, 1024, PLEXUS_DTYPE_INT32);
    if (!problem.empty()) return Outcome::Fail(problem);
    return Outcome::Pass();
  }
  const TracedCalls& t = ctx.calls();
  Findings f;
  std::string detail;
  {
    Operation op(ctx, comm.get(), PLEXUS_DTYPE_INT32);
    // The ABI says an ABORTED request's buffers are the caller's again; a
    // backend that cannot cancel (MPI) may still write them. They are kept
    // and compared later ("no writes after ABORTED"), never freed.
    op.KeepAfterFailure("the aborted allreduce in '" + comm.name() + "'");
    plexus_request* req = op.PostAllreduce(PLEXUS_OP_SUM, 1024, ctx.seq);
    if (req) {
      std::atomic<int32_t> abort_rc{PLEXUS_IN_PROGRESS};
      Clock::time_point abort_at;
      std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(kAbortAfterMs));
        abort_at = Clock::now();
        abort_rc = t.comm_abort(comm.get());
      });
      const Completion c = WaitFor(ctx.plugin(), req, kAbortAfterMs + kAbortCommTimeoutMs);
      const auto done_at = Clock::now();
      aborter.join();
      const int64_t after_abort =
          std::chrono::duration_cast<std::chrono::milliseconds>(done_at - abort_at).count();
      if (abort_rc != PLEXUS_OK) f.Add("comm_abort returned " + StatusText(abort_rc));
      if (!c.done) {
        f.Add("the pending allreduce did not complete within " +
              std::to_string(kAbortCommTimeoutMs) +
              " ms of comm_abort (from another thread, "
              "while this thread was in wait())");
        if (!AbortAndReap(ctx.plugin(), comm.get(), req)) {
          op.Abandon();
          comm.MarkLeaked();
        }
      } else {
        f.Add(c.violation);
        if (c.status != PLEXUS_ERR_ABORTED) {
          f.Add("the pending allreduce completed with " + StatusText(c.status) +
                " after comm_abort (want ABORTED)");
        } else if (after_abort > kAbortPromptMs) {
          f.Add("the pending allreduce completed " + std::to_string(after_abort) +
                " ms after comm_abort (want promptly, < " + std::to_string(kAbortPromptMs) +
                " ms)");
        }
        if (c.status != PLEXUS_OK) CheckErrorStrings(ctx, comm.get(), req, c.status, &f);
        f.Add(CheckAndFree(ctx.plugin(), req, c.status));
        detail = "ABORTED " + std::to_string(after_abort) + " ms after comm_abort";
      }
      const int32_t again = t.comm_abort(comm.get());
      if (again != PLEXUS_OK) f.Add("a second comm_abort returned " + StatusText(again));
      // A post after the abort must fail, leaving an error message.
      Operation late(ctx, comm.get(), PLEXUS_DTYPE_INT32);
      late.KeepAfterFailure("the allreduce posted after comm_abort");
      const size_t s = late.AddBuffer(16, "sendbuf"), r = late.AddBuffer(16, "recvbuf");
      plexus_request* after = nullptr;
      const int32_t rc = t.post(comm.get(),
                                abi::Call{PLEXUS_COLL_ALLREDUCE, late.data(s), late.data(r), 16,
                                          PLEXUS_DTYPE_INT32, PLEXUS_OP_SUM, 0, nullptr},
                                &after);
      if (rc == PLEXUS_OK) {
        std::string then;
        if (after) {
          const Completion a = WaitFor(ctx.plugin(), after, 5000);
          then = a.done ? "; its request then completed with " + StatusText(a.status)
                        : "; its request was still pending after 5 s";
          if (a.done) {
            t.request_free(after);
          } else {
            comm.MarkLeaked();
            ctx.plugin().MarkLeaked();
          }
        }
        f.Add(
            "an allreduce posted after comm_abort returned OK (the ABI: later posts fail with "
            "ABORTED)" +
            then);
      } else {
        if (rc != PLEXUS_ERR_ABORTED && rc != PLEXUS_ERR_INVALID_USAGE) {
          f.Add("an allreduce posted after comm_abort returned " + StatusText(rc) +
                " (want ABORTED, or INVALID_USAGE)");
        }
        if (after) f.Add("the refused post after comm_abort left *req_out non-NULL");
        if (ctx.plugin().LastError(comm.get()).empty()) {
          f.Add("comm_last_error is empty after a post was refused because of the abort");
        }
      }
    } else {
      bool ignored = false;
      op.Finish(&f, &ignored);
    }
  }
  (void)ctx.exchange().Arrive(arrival);
  return f.ToOutcome(detail);
}

// The ranks post allreduces that differ (the last rank: fewer elements, or
// float32 instead of int32). An error on some rank passes; OK with wrong
// data on any rank fails; OK on every rank fails even if the data happen to
// be right, because the mismatch went unnoticed.
Outcome Mismatch(Context& ctx, bool by_dtype) {
  if (ctx.size < 2) return Outcome::Skip("needs at least 2 ranks");
  if (!HasInt32Sum(ctx)) return Outcome::Skip("needs an int32 sum allreduce");
  if (by_dtype && !(ctx.caps().reduce_dtypes[PLEXUS_OP_SUM] & (1u << PLEXUS_DTYPE_FLOAT32))) {
    return Outcome::Skip("needs a float32 sum allreduce");
  }
  const int64_t T = ctx.options.fault_timeout_ms;
  ScenarioComm comm(ctx, by_dtype ? "mismatch-dtype" : "mismatch-count", T);
  if (!comm.get()) {
    return Outcome::Fail("comm_create failed: " + StatusText(comm.status()) + ": " + comm.error());
  }
  const bool odd = ctx.rank == ctx.size - 1;
  const uint64_t count = (!by_dtype && odd) ? 1000 : 1024;
  const plexus_dtype_t dtype = (by_dtype && odd) ? PLEXUS_DTYPE_FLOAT32 : PLEXUS_DTYPE_INT32;
  const std::string mine = std::string(DtypeName(dtype)) + " x " + std::to_string(count) + ": ";
  Findings f;
  Outcome o;
  Operation op(ctx, comm.get(), dtype);
  plexus_request* req = op.PostAllreduce(PLEXUS_OP_SUM, count, ctx.seq);
  if (!req) {
    // Refusing at post time is a detection too, if it says why.
    bool ignored = false;
    const std::string err = ctx.plugin().LastError(comm.get());
    if (err.empty()) f.Add("the post failed with an empty comm_last_error");
    op.Finish(&f, &ignored);
    o = Outcome::Pass(mine + "post refused: " + err);
    o.tag = "error";
    return f.empty() ? o : f.ToOutcome();
  }
  return JudgeMismatch(ctx, comm, op, req, mine, "allreduce");
}

// Runs after the other failure checks (whose operations other ranks may
// still have been driving meanwhile): with PLEXUS_CAP_ABORT, the buffers of
// every request that failed or was aborted must hold what they held at
// completion.
Outcome NoWritesAfterAbort(Context& ctx) {
  if (!(ctx.plugin().caps().flags & PLEXUS_CAP_ABORT)) {
    return Outcome::Skip(
        "no PLEXUS_CAP_ABORT: the library underneath may use the buffers of a "
        "failed or aborted operation until it ends (they were kept alive)");
  }
  const size_t n = WatchedBufferCount();
  if (n == 0) return Outcome::Skip("no request of this rank failed or was aborted");
  const std::string changed = ChangedWatchedBuffers();
  if (!changed.empty()) {
    return Outcome::Fail(
        "the backend wrote buffers after their request had completed with an error or "
        "ABORTED, which PLEXUS_CAP_ABORT forbids: " +
        changed);
  }
  return Outcome::Pass(std::to_string(n) + " buffer(s) of failed or aborted requests unchanged");
}

Check Make(const std::string& name, std::function<Outcome(Context&)> fn) {
  Check c;
  c.name = name;
  c.group = "failures";
  c.run = std::move(fn);
  return c;
}

}  // namespace

std::vector<Check> FailureChecks(const plexus_capabilities& caps, uint32_t size) {
  std::vector<Check> out;
  out.push_back(Make("failures: a rank never posts (operation timeout)", RankNeverPosts));
  out.push_back(Make("failures: comm_abort from another thread", AbortFromThread));
  Check count = Make("failures: mismatched allreduce counts",
                     [](Context& ctx) { return Mismatch(ctx, false); });
  count.combine = CombineMismatch;
  out.push_back(std::move(count));
  Check dtype = Make("failures: mismatched allreduce dtypes (int32 vs float32)",
                     [](Context& ctx) { return Mismatch(ctx, true); });
  dtype.combine = CombineMismatch;
  out.push_back(std::move(dtype));
  // ABI 1.2's mismatches, before the check of the buffers they leave behind.
  for (Check& c : MismatchChecks(caps, size)) out.push_back(std::move(c));
  out.push_back(
      Make("failures: no writes to buffers of failed or aborted requests", NoWritesAfterAbort));
  return out;
}

}  // namespace plexus::conformance
