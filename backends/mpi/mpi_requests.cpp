#include "mpi_requests.hpp"

#include "mpi_schedule.hpp"

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: MPIX_Query_cuda_support
#endif

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "plexus/algos/dtype.hpp"

namespace plexus::mpi {

void Log(const plexus_host_v1& host, int32_t level, const std::string& message) {
  if (host.log) host.log(host.ctx, level, message.c_str());
}

std::string MpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING + 1] = "";
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS || len <= 0) {
    return "MPI error " + std::to_string(code);
  }
  text[std::min(len, MPI_MAX_ERROR_STRING)] = '\0';
  return text;
}

int32_t StatusOfMpiError(int code) {
  int cls = code;
  if (MPI_Error_class(code, &cls) != MPI_SUCCESS) cls = code;
  switch (cls) {
    case MPI_SUCCESS:
      return PLEXUS_OK;
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_OP:
    case MPI_ERR_ROOT:
    case MPI_ERR_RANK:
    case MPI_ERR_ARG:
    case MPI_ERR_COMM:
      return PLEXUS_ERR_INVALID_ARGUMENT;
    case MPI_ERR_TRUNCATE:  // a peer sent more than was posted: the ranks disagree
      return PLEXUS_ERR_REMOTE;
#if defined(MPIX_ERR_PROC_FAILED)
    case MPIX_ERR_PROC_FAILED:
      return PLEXUS_ERR_REMOTE;
#endif
#if defined(MPIX_ERR_REVOKED)
    case MPIX_ERR_REVOKED:
      return PLEXUS_ERR_ABORTED;
#endif
    case MPI_ERR_INTERN:
      return PLEXUS_ERR_INTERNAL;
    default:
      return PLEXUS_ERR_SYSTEM;
  }
}

namespace {

const char* ThreadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE:
      return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED:
      return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED:
      return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE:
      return "MPI_THREAD_MULTIPLE";
    default:
      return "an unknown thread level";
  }
}

// Cancels what can be cancelled (receives) and hands the rest of req's MPI
// requests to the context. req->mutex held, the MPI lock not.
void AbandonLocked(plexus_request* req) {
  Abandoned a;
  a.comm = req->comm->mpi;
  {
    MpiLock lock(*req->comm->ctx);
    for (MPI_Request& r : req->pending) {
      if (r == MPI_REQUEST_NULL) continue;
      if (req->coll == PLEXUS_COLL_RECV) MPI_Cancel(&r);
      a.requests.push_back(r);
      r = MPI_REQUEST_NULL;
    }
  }
  if (a.requests.empty()) return;  // nothing of MPI's left: scratch can go with req
  a.scratch = std::move(req->scratch);
  a.discards = std::move(req->discards);
  a.vargs = std::move(req->vargs);
  req->comm->ctx->Abandon(std::move(a));
}

// "1500 ms", for messages about the operation timeout.
std::string Millis(int64_t ms) {
  return std::to_string(ms) + " ms";
}

}  // namespace

void MatchRecvs(plexus_comm* comm, uint32_t peer) {
  std::lock_guard<std::mutex> lock(comm->match_mutex);
  if (peer >= comm->unmatched.size()) return;
  std::deque<plexus_request*>& queue = comm->unmatched[peer];
  while (!queue.empty()) {
    plexus_request* req = queue.front();
    std::lock_guard<std::mutex> guard(req->mutex);
    while (req->status == PLEXUS_IN_PROGRESS && req->matched < req->to_match.size()) {
      const plexus_request::RecvChunk chunk = req->to_match[req->matched];
      MpiLock mpi_lock(*comm->ctx);
      int flag = 0;
      MPI_Message msg = MPI_MESSAGE_NULL;
      MPI_Status st;
      std::memset(&st, 0, sizeof st);
      int rc = MPI_Improbe(int(peer), kP2pTag, comm->mpi, &flag, &msg, &st);
      if (rc == MPI_SUCCESS && !flag) return;  // the rest has not arrived
      MPI_Request r = MPI_REQUEST_NULL;
      if (rc == MPI_SUCCESS) {
        int got = 0;
        if (MPI_Get_count(&st, req->type, &got) == MPI_SUCCESS && got == chunk.count) {
          rc = MPI_Imrecv(chunk.buf, chunk.count, req->type, &msg, &r);
        } else {
          int bytes = 0;
          MPI_Get_count(&st, MPI_BYTE, &bytes);
          if (bytes == MPI_UNDEFINED || bytes < 0) bytes = 0;
          auto discard = std::make_unique_for_overwrite<uint8_t[]>(size_t(bytes) + 1);
          rc = MPI_Imrecv(discard.get(), bytes, MPI_BYTE, &msg, &r);
          req->discards.push_back(std::move(discard));
          if (req->mismatch.empty()) {
            const size_t es = algos::DtypeSize(req->dtype);
            req->mismatch = "rank " + std::to_string(peer) + " sent " +
                            std::to_string(uint64_t(bytes) / (es ? es : 1)) + " " +
                            algos::DtypeName(req->dtype) + " elements where " +
                            std::to_string(chunk.count) +
                            " were expected (send and recv counts disagree)";
          }
        }
      }
      if (rc != MPI_SUCCESS) {
        // The recv fails; later recvs from peer match later messages.
        req->mismatch = "MPI_Improbe/MPI_Imrecv failed: " + MpiErrorText(rc);
        req->matched = req->to_match.size();
        break;
      }
      req->pending.push_back(r);
      ++req->matched;
    }
    req->queued = false;
    queue.pop_front();
    comm->ctx->queued_recvs.fetch_sub(1);
  }
}

void Unqueue(plexus_request* req) {
  plexus_comm* comm = req->comm;
  std::lock_guard<std::mutex> lock(comm->match_mutex);
  if (!req->queued) return;
  std::erase(comm->unmatched[req->peer], req);
  req->queued = false;
  comm->ctx->queued_recvs.fetch_sub(1);
}

void FinishData(plexus_request* req) {
  if (req->average && req->average_count) {
    algos::FinishAverage(req->average, req->average_count, req->dtype, req->comm->size);
  }
  for (const plexus_request::Unpack& u : req->unpack) {
    std::memcpy(u.to, req->scratch.get() + u.from, u.bytes);
  }
}

int32_t Progress(plexus_request* req) {
  if (req->on_one_host) return req->status.load(std::memory_order_acquire);
  plexus_comm* comm = req->comm;
  if (comm->ctx->queued_recvs.load(std::memory_order_acquire) > 0) comm->ctx->MatchAllRecvs();
  // Every test and wait moves every own schedule of the process on (a peer
  // may need another of them finished before it can serve this one); an
  // in-progress own schedule is always among them, aborts included.
  comm->ctx->AdvanceSchedules();
  if (req->own_schedule) return req->status.load(std::memory_order_acquire);
  std::lock_guard<std::mutex> guard(req->mutex);
  if (req->status != PLEXUS_IN_PROGRESS) return req->status;
  const char* what = algos::CollectiveName(req->coll);
  if (comm->aborted.load()) {
    AbandonLocked(req);
    req->status = PLEXUS_ERR_ABORTED;
    return req->status;
  }

  // A recv with chunks to match has not finished.
  bool done = req->matched == req->to_match.size();
  bool moved = false;        // an MPI request completed: progress
  int failed = MPI_SUCCESS;  // MPI error of a request
  {
    MpiLock lock(*comm->ctx);
    for (size_t i = 0; i < req->pending.size(); ++i) {
      if (req->pending[i] == MPI_REQUEST_NULL) continue;
      int flag = 0;
      MPI_Status st;
      std::memset(&st, 0, sizeof st);
      const int rc = MPI_Test(&req->pending[i], &flag, &st);
      if (rc != MPI_SUCCESS) {
        failed = rc;
        break;
      }
      if (!flag) {
        done = false;
        continue;
      }
      moved = true;
    }
  }
  // A mismatched message fails the recv once it is in (its buffer is ours).
  const bool mismatched = done && !req->mismatch.empty();

  if (failed != MPI_SUCCESS || mismatched) {
    std::string message = std::string("mpi ") + what;
    if (req->coll == PLEXUS_COLL_SEND) message += " to rank " + std::to_string(req->peer);
    if (req->coll == PLEXUS_COLL_RECV) message += " from rank " + std::to_string(req->peer);
    if (failed == MPI_SUCCESS) {
      message += ": " + req->mismatch;
      req->status = PLEXUS_ERR_REMOTE;
    } else {
      message += " failed in MPI: " + MpiErrorText(failed);
      req->status = StatusOfMpiError(failed);
      if (req->status == PLEXUS_OK) req->status = PLEXUS_ERR_SYSTEM;
    }
    comm->SetError(message);
    AbandonLocked(req);
    return req->status;
  }
  if (!done) {
    const auto now = std::chrono::steady_clock::now();
    if (moved) {
      req->progress_at = now;
    } else if (comm->timeout_ms > 0 &&
               now - req->progress_at >= std::chrono::milliseconds(comm->timeout_ms)) {
      // The operation timeout. MPI does not say which rank its collectives
      // wait for; send and recv know their peer.
      std::string message = std::string("mpi ") + what;
      if (req->coll == PLEXUS_COLL_SEND || req->coll == PLEXUS_COLL_RECV) {
        const std::string peer = "rank " + std::to_string(req->peer);
        message += (req->coll == PLEXUS_COLL_SEND ? " to " : " from ") + peer +
                   ": no progress for " + Millis(comm->timeout_ms) + " (timeout_ms): " + peer +
                   (req->coll == PLEXUS_COLL_SEND ? " has not received it" : " has not sent it") +
                   " (it may not have posted the matching " +
                   (req->coll == PLEXUS_COLL_SEND ? "recv" : "send") + ", be slow, or be dead)";
      } else {
        message += ": no progress for " + Millis(comm->timeout_ms) +
                   " (timeout_ms): some rank of the " + std::to_string(comm->size) +
                   " has not posted this " + what +
                   ", is slow or dead, or posted a different collective (MPI does not say "
                   "which rank it waits for)";
      }
      req->status = PLEXUS_ERR_TIMEOUT;
      comm->Break(PLEXUS_ERR_TIMEOUT, message);
      AbandonLocked(req);
      return req->status;
    }
    return PLEXUS_IN_PROGRESS;
  }

  if (req->root_check) {
    const int mine = int(req->root), highest = req->root_check[0], lowest = -req->root_check[1];
    if (highest != mine || lowest != mine) {
      const std::string message =
          std::string("mpi ") + what + ": the ranks disagree on the root: this rank (" +
          std::to_string(comm->rank) + ") posted root " + std::to_string(mine) +
          ", another rank posted root " + std::to_string(highest != mine ? highest : lowest);
      req->status = PLEXUS_ERR_REMOTE;
      comm->Break(PLEXUS_ERR_REMOTE, message);
      return req->status;
    }
  }
  FinishData(req);
  req->scratch.reset();
  req->vargs.reset();
  req->status = PLEXUS_OK;
  return req->status;
}

int32_t WaitFor(plexus_request* req, int64_t timeout_ms) {
  using Clock = std::chrono::steady_clock;
  if (timeout_ms < 0) timeout_ms = req->comm->timeout_ms;
  if (req->on_one_host) return req->comm->one_host->Wait(req, timeout_ms);
  int32_t rc = Progress(req);
  if (rc != PLEXUS_IN_PROGRESS) return rc;
  // MPI progresses only inside MPI calls (Open MPI has no progress thread),
  // so the loop keeps testing, in two phases:
  //  - back to back for as long as the operation could still be moving data:
  //    kActiveBase plus its bytes at kActiveRate. Each test runs Open MPI's
  //    progress engine once, which itself yields the CPU when it found
  //    nothing to do if mpi_yield_when_idle is set (mpirun sets it on an
  //    oversubscribed host; bench/compare sets it): the same policy as Open
  //    MPI's own blocking calls, which wait like this for as long as it
  //    takes. A yield or sleep of ours on top would add a system call to
  //    every turn, which costs small operations their latency and stretches
  //    mid-sized ones (see docs/benchmarks.md), since nothing moves the
  //    bytes of a message through the sockets but these tests;
  //  - after that the operation waits for a peer rather than for data, and
  //    the loop sleeps, doubling from 20 us to at most 250 us, so that a long
  //    wait costs little CPU (the other ranks of an oversubscribed host need
  //    it) while multi-step MPI algorithms still get progressed often
  //    (a cap of a millisecond or more slows an oversubscribed host's
  //    collectives down: see docs/benchmarks.md).
  // The deadline (and an abort, which Progress reports) is checked on every
  // turn, so both phases honour the timeout.
  constexpr auto kActiveBase = std::chrono::microseconds(250);
  constexpr uint64_t kActiveRate = 256;  // bytes per microsecond (0.25 GB/s)
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  const auto active_until =
      start + kActiveBase +
      std::chrono::microseconds(std::min<uint64_t>(req->bytes / kActiveRate, uint64_t(1) << 40));
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) return PLEXUS_ERR_TIMEOUT;
    if (now >= active_until) {
      std::this_thread::sleep_for(std::min<Clock::duration>(nap, deadline - now));
      nap = std::min(nap * 2, std::chrono::microseconds(250));
    }
    rc = Progress(req);
    if (rc != PLEXUS_IN_PROGRESS) return rc;
  }
}

namespace {

// Ends req's ownership of its schedules: what they still have running (a)
// goes to the context with req's scratch memory, which they use; with
// nothing running, the scratch goes back to the communicator's cache.
// sched_mutex held.
void HandOver(plexus_request* req, Abandoned a) {
  plexus_comm* comm = req->comm;
  req->schedules.clear();
  if (a.schedules.empty() && a.requests.empty() && a.discards.empty()) {
    if (req->scratch) comm->GiveScratch(std::move(req->scratch), req->scratch_capacity);
    return;
  }
  a.comm = comm->mpi;
  a.scratch = std::move(req->scratch);
  comm->ctx->Abandon(std::move(a));
}

// After an abort: req's unfinished schedules go on, run by the context to
// their end (a peer may still need their messages). sched_mutex held.
void AbandonSchedules(plexus_request* req) {
  Abandoned a;
  for (auto& s : req->schedules) {
    // (One still waiting for its tag slot has nothing in MPI: it is dropped.)
    if (!s.done() && s.started()) a.schedules.push_back(std::move(s));
  }
  HandOver(req, std::move(a));
}

// After a failure: what req's schedules have in MPI goes to the context as
// plain requests (no further steps). sched_mutex held.
void FailSchedules(plexus_request* req) {
  Abandoned a;
  {
    MpiLock lock(*req->comm->ctx);  // (TakeRequests cancels posted receives)
    for (auto& s : req->schedules) s.TakeRequests(&a.requests, &a.discards);
  }
  HandOver(req, std::move(a));
}

// Receives the first message from peer with tag into a buffer of its own,
// adding both to *keep (for the context to keep until MPI is done with
// them; Abandon takes abandoned_mutex, which comes before the MPI lock).
// MPI lock held.
void DrainMessage(plexus_comm* comm, int peer, int tag, Abandoned* keep) {
  int flag = 0;
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Status st;
  std::memset(&st, 0, sizeof st);
  if (MPI_Improbe(peer, tag, comm->mpi, &flag, &msg, &st) != MPI_SUCCESS || !flag) return;
  int bytes = 0;
  MPI_Get_count(&st, MPI_BYTE, &bytes);
  if (bytes == MPI_UNDEFINED || bytes < 0) bytes = 0;
  keep->comm = comm->mpi;
  keep->discards.push_back(std::make_unique_for_overwrite<uint8_t[]>(size_t(bytes) + 1));
  MPI_Request r = MPI_REQUEST_NULL;
  if (MPI_Imrecv(keep->discards.back().get(), bytes, MPI_BYTE, &msg, &r) == MPI_SUCCESS) {
    keep->requests.push_back(r);
  }
}

// The operation timeout of an own schedule: names the rank the stalled step
// waits for, and, when that rank's next message belongs to the same
// allreduce with another dtype or op, says so (PLEXUS_ERR_REMOTE); otherwise
// PLEXUS_ERR_TIMEOUT. Breaks the communicator with the message.
// sched_mutex held.
int32_t ScheduleTimeout(plexus_request* req) {
  plexus_comm* comm = req->comm;
  const char* what = algos::CollectiveName(req->coll);
  std::string message = std::string("mpi ") + what + " #" + std::to_string(req->seq) + " (" +
                        algos::DtypeName(req->dtype) + "): no progress for " +
                        Millis(comm->timeout_ms) + " (timeout_ms)";
  int32_t code = PLEXUS_ERR_TIMEOUT;
  if (!req->schedules.empty() && !req->schedules.back().started()) {
    message += ": waiting for earlier allreduces of this communicator to finish (more than " +
               std::to_string(comm->ctx->tags.slots) + " in flight), and none moved";
  }
  for (size_t k = 0; k < req->schedules.size(); ++k) {
    const AllreduceSchedule& s = req->schedules[k];
    bool receiving = false;
    const int peer = s.WaitingFor(&receiving);
    if (peer < 0) continue;
    const std::string name = "rank " + std::to_string(peer);
    message += std::string(": waiting for ") +
               (receiving ? "a message from " + name : name + " to take a message") + " (step " +
               std::to_string(s.steps_done() + 1) + " of " + std::to_string(s.step_count()) + ", " +
               s.algorithm_name() + ")";
    Abandoned drained;
    if (receiving) {
      // What is the peer sending instead? The first message it has queued
      // for us, if any (MPI_Iprobe leaves it where it is).
      int flag = 0;
      MPI_Status st;
      std::memset(&st, 0, sizeof st);
      MpiLock lock(*comm->ctx);
      if (MPI_Iprobe(peer, MPI_ANY_TAG, comm->mpi, &flag, &st) == MPI_SUCCESS && flag) {
        const std::optional<TagParts> parts = comm->ctx->tags.Parts(st.MPI_TAG);
        const bool same_slot = parts && parts->slot == comm->TagSlot(req->seq + k);
        const bool same_kind = parts && parts->kind == TagKind(req->dtype, s.op());
        const uint64_t expected = s.ExpectedCount();
        if (st.MPI_TAG == kP2pTag) {
          message += "; " + name + " sent a point-to-point message (send) instead";
          code = PLEXUS_ERR_REMOTE;
        } else if (same_slot && same_kind && !s.ExpectsFrom(peer, parts->count, parts->ring)) {
          // The same allreduce with another count: its messages carry their
          // lengths (and the schedule, which the count picks) in the tag, so
          // they never matched.
          int got = 0;
          MPI_Get_count(&st, req->type, &got);
          const bool ring = parts->ring;
          message += "; " + name + " sent " + std::to_string(got) + " " +
                     algos::DtypeName(req->dtype) + " elements (" +
                     (ring ? "ring" : "recursive doubling") + ") where this rank expects " +
                     std::to_string(expected) + " (" + s.algorithm_name() +
                     "): the ranks passed different counts";
          code = PLEXUS_ERR_REMOTE;
          DrainMessage(comm, peer, st.MPI_TAG, &drained);
        } else if (same_slot && !same_kind) {
          // (A message with this allreduce's own tag is a later step's, queued
          // behind the one awaited: no mismatch; the timeout text below holds.)
          const plexus_dtype_t dtype = DtypeOfKind(parts->kind);
          const plexus_reduce_op_t op = OpOfKind(parts->kind);
          message += "; " + name + " posted this allreduce with dtype " + algos::DtypeName(dtype) +
                     " and op " + algos::ReduceOpName(op) + ", this rank with " +
                     algos::DtypeName(req->dtype) + " and " +
                     algos::ReduceOpName(req->schedules[k].op()) +
                     ": the ranks must post the same collectives with the same dtype, op and "
                     "count";
          code = PLEXUS_ERR_REMOTE;
          // Take the peer's message off its hands (it times out the same
          // way and takes ours), so that neither send stays pending forever.
          DrainMessage(comm, peer, st.MPI_TAG, &drained);
        }
      }
    }
    if (!drained.discards.empty()) comm->ctx->Abandon(std::move(drained));
    if (code == PLEXUS_ERR_TIMEOUT) {
      message += "; " + name + " has not posted this allreduce, is slow or dead, or posted " +
                 "a different collective";
    }
    break;
  }
  comm->Break(code, message);
  return code;
}

void SetStatus(plexus_request* req, int32_t status) {
  std::lock_guard<std::mutex> guard(req->mutex);
  req->status.store(status, std::memory_order_release);
}

// Advances req's schedules; true once req has left PLEXUS_IN_PROGRESS (done,
// failed or aborted). sched_mutex held.
bool AdvanceRequest(plexus_request* req) {
  plexus_comm* comm = req->comm;
  if (comm->aborted.load()) {
    AbandonSchedules(req);
    SetStatus(req, PLEXUS_ERR_ABORTED);
    return true;
  }
  int rc = MPI_SUCCESS;
  const char* call = "";
  bool done = true;
  bool waiting_for_slot = false;
  size_t steps = 0;
  const AllreduceSchedule* failed = nullptr;
  {
    MpiLock lock(*comm->ctx);
    // (Schedules finish roughly in order: skip the finished ones in front.)
    while (req->first_open < req->schedules.size() && req->schedules[req->first_open].done()) {
      req->first_open_steps += req->schedules[req->first_open++].steps_done();
    }
    steps = req->first_open_steps;
    for (size_t k = req->first_open; k < req->schedules.size(); ++k) {
      AllreduceSchedule& s = req->schedules[k];
      if (!s.done()) {
        if (!s.started()) {
          // Waiting for its tag slot (plexus_comm::TakeSlot). After a
          // failure of the communicator it never starts.
          if (const int32_t broken = comm->broken_code(); broken != PLEXUS_OK) {
            lock.unlock();
            FailSchedules(req);
            SetStatus(req, broken);
            return true;
          }
          if (!comm->TakeSlot(req->seq + k)) {
            // The later ones wait behind it (their slots' holders are
            // younger still): try again from here on the next round.
            done = false;
            waiting_for_slot = true;
            break;
          }
          rc = s.Start(&call);
        } else {
          rc = s.Advance(&call);
        }
        if (rc != MPI_SUCCESS) {
          failed = &s;
          break;
        }
        if (s.done()) {
          comm->ReleaseSlot(req->seq + k);
        } else {
          done = false;
        }
      }
      steps += s.steps_done();
    }
  }
  if (rc != MPI_SUCCESS) {
    int32_t code = StatusOfMpiError(rc);
    if (code == PLEXUS_OK) code = PLEXUS_ERR_SYSTEM;
    std::string message = std::string("mpi ") + algos::CollectiveName(req->coll) + " #" +
                          std::to_string(req->seq) + " ";
    if (!failed->error().empty()) {
      message += "failed: " + failed->error();
      code = PLEXUS_ERR_REMOTE;
    } else {
      message += std::string("failed in MPI (") + call + "): " + MpiErrorText(rc);
    }
    FailSchedules(req);
    comm->Break(code, message);
    SetStatus(req, code);
    return true;
  }
  if (!done) {
    const auto now = std::chrono::steady_clock::now();
    // Waiting behind other operations is not a stall while they move.
    if (waiting_for_slot && comm->progress_at > req->progress_at) {
      req->progress_at = comm->progress_at;
    }
    if (steps != req->progress_steps) {
      req->progress_steps = steps;
      req->progress_at = now;
      comm->progress_at = now;
      return false;
    }
    if (comm->timeout_ms <= 0 ||
        now - req->progress_at < std::chrono::milliseconds(comm->timeout_ms)) {
      return false;
    }
    // Unlike an abort, a timeout ends the schedules: what they have in MPI
    // is kept until it completes, but no further step is posted, so that a
    // message that will never come (a dead peer, another dtype) leaves
    // nothing behind that would keep MPI_Finalize from running.
    const int32_t code = ScheduleTimeout(req);
    FailSchedules(req);
    SetStatus(req, code);
    return true;
  }
  req->schedules.clear();
  FinishData(req);
  if (req->scratch) comm->GiveScratch(std::move(req->scratch), req->scratch_capacity);
  SetStatus(req, PLEXUS_OK);
  return true;
}

// Whether every rank of the job runs on this host and Open MPI moves their
// messages through shared memory, from what mpirun gives every rank alike
// (so every rank answers the same): OMPI_COMM_WORLD_LOCAL_SIZE equal to
// OMPI_COMM_WORLD_SIZE, the ob1 PML (the default where UCX has no network
// device) and a BTL selection that keeps vader ("sm" in Open MPI 5). Any
// other MPI, or a selection it cannot read, is "no": the thresholds measured
// over TCP then hold. *why says which in words.
bool OneHostSharedMemory(std::string* why) {
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!size || !local) {
    *why = "no OMPI_COMM_WORLD_LOCAL_SIZE: whether the ranks share a host is not known";
    return false;
  }
  if (std::string(size) != local) {
    *why = std::string("ranks on several hosts (") + local + " of " + size + " on this one)";
    return false;
  }
  const char* pml = std::getenv("OMPI_MCA_pml");
  if (pml && std::string(pml) != "ob1") {
    *why = std::string("every rank on this host, PML ") + pml;
    return false;
  }
  const char* btl = std::getenv("OMPI_MCA_btl");
  if (btl && *btl) {
    std::string list = btl;
    const bool exclude = list[0] == '^';
    if (exclude) list.erase(0, 1);
    bool named = false;
    size_t start = 0;
    while (start <= list.size()) {
      const size_t end = std::min(list.find(',', start), list.size());
      const std::string item = list.substr(start, end - start);
      named = named || item == "vader" || item == "sm";
      start = end + 1;
    }
    if (named == exclude) {
      *why = std::string("every rank on this host, shared memory left out (btl ") + btl + ")";
      return false;
    }
  }
  *why = "every rank on this host, over shared memory";
  return true;
}

}  // namespace

}  // namespace plexus::mpi

plexus_request::~plexus_request() = default;

// ---------------------------------------------------------------------------
// plexus_backend_ctx

int32_t plexus_backend_ctx::EnsureMpi(std::string* error) {
  using plexus::mpi::Log;
  using plexus::mpi::MpiErrorText;
  if (mpi_ready.load()) return PLEXUS_OK;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    *error =
        "MPI was already finalised in this process and cannot be initialised again (MPI allows "
        "one MPI_Init per process; the mpi backend finalises MPI when its last communicator is "
        "destroyed, so keep one communicator alive for the whole job)";
    return PLEXUS_ERR_INVALID_USAGE;
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  int level = MPI_THREAD_SINGLE;
  if (!initialized) {
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &level);
    if (rc != MPI_SUCCESS) {
      *error = "MPI_Init_thread failed: " + MpiErrorText(rc);
      return PLEXUS_ERR_SYSTEM;
    }
    we_initialised = true;
    // Our MPI: report errors as codes instead of aborting the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  } else if (MPI_Query_thread(&level) != MPI_SUCCESS) {
    level = MPI_THREAD_SINGLE;
  }
  provided = level;
  serialize = level < MPI_THREAD_MULTIPLE;
  if (level < MPI_THREAD_SERIALIZED) {
    Log(host, PLEXUS_LOG_WARN,
        std::string("MPI provides only ") + plexus::mpi::ThreadLevelName(level) +
            "; the backend serialises its MPI calls, but this MPI may still require them to "
            "come from the thread that initialised it");
  }
  const int rc = half_ops.Create();
  if (rc != MPI_SUCCESS) {
    *error = "creating the float16/bfloat16 reduction ops failed: " + MpiErrorText(rc);
    if (we_initialised) {
      MPI_Finalize();
      we_initialised = false;
    }
    return plexus::mpi::StatusOfMpiError(rc);
  }
  {
    void* attr = nullptr;
    int found = 0;
    if (MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &attr, &found) == MPI_SUCCESS && found &&
        attr && *static_cast<int*>(attr) > plexus::mpi::kP2pTag) {
      tag_ub = *static_cast<int*>(attr);
    }
    tags = plexus::mpi::TagLayout::For(tag_ub);
  }
  bool cuda = false;
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  // Compiled against an MPI with the CUDA extension; ask the library in use.
  cuda = MPIX_Query_cuda_support() != 0;
#endif
  cuda_aware = cuda;
  std::string layout;
  shared_memory = plexus::mpi::OneHostSharedMemory(&layout);
  mpi_ready = true;
  Log(host, PLEXUS_LOG_INFO,
      std::string(we_initialised ? "initialised " : "using the application's ") + library_version +
          " at " + plexus::mpi::ThreadLevelName(level) +
          (cuda ? ", CUDA-aware" : ", host memory only") + "; " + layout +
          (shared_memory
               ? ": allreduce with 2 ranks takes the ring at 4-8 KiB and from 16 KiB"
               : ": allreduce with 2 ranks takes the ring at 64-128 KiB and from 512 KiB"));
  return PLEXUS_OK;
}

void plexus_backend_ctx::Abandon(plexus::mpi::Abandoned a) {
  std::lock_guard<std::mutex> lock(abandoned_mutex);
  if (!a.schedules.empty()) abandoned_schedules.fetch_add(1);
  abandoned.push_back(std::move(a));
}

size_t plexus_backend_ctx::ReapAbandoned() {
  std::lock_guard<std::mutex> lock(abandoned_mutex);
  return ReapLocked();
}

void plexus_backend_ctx::ReleaseComm(MPI_Comm comm) {
  std::lock_guard<std::mutex> lock(abandoned_mutex);
  released.push_back(comm);
  ReapLocked();
}

size_t plexus_backend_ctx::ReapLocked() {
  if (abandoned.empty() && released.empty()) return 0;
  plexus::mpi::MpiLock mpi_lock(*this);
  std::erase_if(abandoned, [&](plexus::mpi::Abandoned& a) {
    bool done = true;
    for (auto& s : a.schedules) {
      if (s.done()) continue;
      const char* call = "";
      // A failure ends the schedule; what it has in MPI is then waited for.
      if (s.Advance(&call) != MPI_SUCCESS) s.TakeRequests(&a.requests, &a.discards);
      if (!s.done()) done = false;
    }
    for (MPI_Request& r : a.requests) {
      if (r == MPI_REQUEST_NULL) continue;
      int flag = 0;
      if (MPI_Test(&r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        // Failed is finished, as far as our memory is concerned.
        if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
        r = MPI_REQUEST_NULL;
        continue;
      }
      if (!flag) done = false;
    }
    if (done && !a.schedules.empty()) abandoned_schedules.fetch_sub(1);
    return done;
  });
  std::erase_if(released, [&](MPI_Comm& comm) {
    for (const auto& a : abandoned) {
      if (a.comm == comm) return false;
    }
    MPI_Comm_free(&comm);
    return true;
  });
  return abandoned.size();
}

void plexus_backend_ctx::MatchAllRecvs() {
  std::lock_guard<std::mutex> lock(comms_mutex);
  for (plexus_comm* comm : comms) {
    if (comm->aborted.load()) continue;
    for (uint32_t peer = 0; peer < comm->size; ++peer) {
      bool waiting = false;
      {
        std::lock_guard<std::mutex> match_lock(comm->match_mutex);
        waiting = !comm->unmatched[peer].empty();
      }
      if (waiting) plexus::mpi::MatchRecvs(comm, peer);
    }
  }
}

void plexus_backend_ctx::Activate(plexus_request* req) {
  std::lock_guard<std::mutex> lock(sched_mutex);
  active.push_back(req);
  active_count.store(active.size(), std::memory_order_release);
}

void plexus_backend_ctx::AdvanceSchedules() {
  // Aborted schedules go on in the background, as MPI's own collectives would.
  if (abandoned_schedules.load(std::memory_order_acquire) > 0) ReapAbandoned();
  if (active_count.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lock(sched_mutex);
  size_t kept = 0;
  for (plexus_request* req : active) {
    bool left = false;
    try {
      left = plexus::mpi::AdvanceRequest(req);
    } catch (...) {  // (out of memory for an error text): keep it, try again
    }
    if (!left) active[kept++] = req;
  }
  active.resize(kept);
  active_count.store(kept, std::memory_order_release);
}

void plexus_backend_ctx::DropSchedules(plexus_comm* comm) {
  std::lock_guard<std::mutex> lock(sched_mutex);
  std::erase_if(active, [&](plexus_request* req) {
    if (req->comm != comm) return false;
    plexus::mpi::AbandonSchedules(req);
    plexus::mpi::SetStatus(req, PLEXUS_ERR_ABORTED);
    return true;
  });
  active_count.store(active.size(), std::memory_order_release);
}

// ---------------------------------------------------------------------------
// plexus_comm

void plexus_comm::Break(int32_t code, const std::string& message) {
  errors.Set(message);
  std::lock_guard<std::mutex> lock(error_mutex_);
  if (broken_ == PLEXUS_OK) {
    broken_ = code;
    broken_reason_ = message;
  }
}

int32_t plexus_comm::Usable(const char* what) {
  if (aborted.load()) {
    errors.Set(std::string("mpi ") + what + ": the communicator " + name + " was aborted");
    return PLEXUS_ERR_ABORTED;
  }
  // Every post comes here: no lock unless the communicator is broken.
  if (broken_.load(std::memory_order_acquire) == PLEXUS_OK) return PLEXUS_OK;
  std::lock_guard<std::mutex> lock(error_mutex_);
  if (broken_ == PLEXUS_OK) return PLEXUS_OK;
  errors.Set(std::string("mpi ") + what + ": the communicator " + name +
             " is unusable after an earlier failure (" + broken_reason_ + ")");
  return broken_;
}

uint64_t plexus_comm::TagSlot(uint64_t k) const {
  return k % ctx->tags.slots;
}

bool plexus_comm::TakeSlot(uint64_t k) {
  if (slot_next_.empty()) {
    slot_next_.resize(ctx->tags.slots);
    for (uint64_t s = 0; s < slot_next_.size(); ++s) slot_next_[s] = s;
  }
  // Strictly in sequence: k - slots has finished and nothing else can come
  // first (a free slot alone is not enough: k + slots could take it before
  // k, which waits behind another slot).
  return slot_next_[size_t(TagSlot(k))] == k;
}

void plexus_comm::ReleaseSlot(uint64_t k) {
  if (!slot_next_.empty()) slot_next_[size_t(TagSlot(k))] = k + ctx->tags.slots;
  progress_at = std::chrono::steady_clock::now();
}

std::unique_ptr<uint8_t[]> plexus_comm::TakeScratch(uint64_t bytes, uint64_t* capacity) {
  {
    std::lock_guard<std::mutex> lock(scratch_mutex_);
    if (scratch_ && scratch_capacity_ >= bytes) {
      *capacity = scratch_capacity_;
      scratch_capacity_ = 0;
      return std::move(scratch_);
    }
  }
  *capacity = bytes;
  return std::make_unique_for_overwrite<uint8_t[]>(bytes);
}

void plexus_comm::GiveScratch(std::unique_ptr<uint8_t[]> buf, uint64_t capacity) {
  constexpr uint64_t kMaxCached = uint64_t(256) << 20;  // more is freed after use
  if (!buf || capacity > kMaxCached) return;
  std::lock_guard<std::mutex> lock(scratch_mutex_);
  if (!scratch_ || scratch_capacity_ < capacity) {
    scratch_ = std::move(buf);
    scratch_capacity_ = capacity;
  }
}
