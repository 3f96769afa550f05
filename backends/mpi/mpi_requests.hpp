// The MPI backend's objects behind the ABI's opaque handles, and the request
// machinery that maps ABI requests onto MPI requests.
//
// One plexus_backend_ctx per process (per loaded library) owns MPI's
// initialisation: MPI is initialised with MPI_Init_thread(MPI_THREAD_MULTIPLE)
// only if nobody did so before, and finalised in finalize() only if this
// backend initialised it. Every plexus_comm owns one MPI_Comm_idup of
// MPI_COMM_WORLD with MPI_ERRORS_RETURN, so MPI failures come back as codes
// (turned into ABI statuses carrying MPI_Error_string) instead of aborting.
//
// A posted operation is either one or more non-blocking MPI calls (several
// when the count exceeds what one MPI call takes, int), or, for allreduce on
// host memory, the backend's own schedules of point-to-point messages
// (mpi_schedule.hpp), one per chunk. Its plexus_request holds their
// MPI_Requests (or schedules) and a finishing step run once all completed
// (divide for AVG, copy out of a scratch buffer, check a received count).
// test() is MPI_Test, after advancing every active schedule of the process;
// wait() repeats that, back to back for as long as the operation could still
// be moving data (its size decides), then sleeping a little longer each
// time, until done, aborted or the deadline.
// MPI cannot cancel collectives: a timed-out wait leaves the request pending,
// and an abort makes pending requests report PLEXUS_ERR_ABORTED while their
// MPI requests (and scratch buffers) are kept by the context until MPI
// completes them.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mpi_one_host.hpp"
#include "mpi_schedule.hpp"
#include "mpi_tags.hpp"
#include "mpi_types.hpp"
#include "plexus/backend.h"
#include "plexus/kit/errors.hpp"

namespace plexus::mpi {

// Writes message through the host's logger; silent without one.
void Log(const plexus_host_v1& host, int32_t level, const std::string& message);

// MPI_Error_string of code, or "MPI error <code>".
std::string MpiErrorText(int code);

// The ABI status class of an MPI error code.
int32_t StatusOfMpiError(int code);

// The argument arrays of a v-collective (MPI_Iallgatherv, MPI_Ialltoallw):
// MPI may read them until the operation completes, so they live with its
// request (and, after an abort, with what the context keeps). The caller's
// uint64_t arrays are borrowed for the post only; these are our copies.
struct VArgs {
  std::vector<int> ints;            // counts and displacements, as MPI takes them
  std::vector<MPI_Datatype> types;  // MPI_Ialltoallw's per-peer types (freed after the post)
};

// MPI requests of an aborted operation that MPI may still be working on (or
// own schedules, which the context keeps running to their end), the scratch
// memory they may still write, and the communicator they run on.
struct Abandoned {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> requests;
  std::vector<AllreduceSchedule> schedules;
  std::unique_ptr<uint8_t[]> scratch;
  std::vector<std::unique_ptr<uint8_t[]>> discards;  // mismatched messages still arriving
  std::unique_ptr<VArgs> vargs;                      // arrays MPI may still read
};

}  // namespace plexus::mpi

struct plexus_backend_ctx {
  explicit plexus_backend_ctx(const plexus_host_v1& h) : host(h) {}

  // Initialises MPI if nobody did (MPI_Init_thread), or adopts the
  // application's MPI; creates the half ops. Idempotent. Call with
  // state_mutex held. On failure *error says why.
  int32_t EnsureMpi(std::string* error);

  // Keeps an aborted operation's MPI requests until they complete (and runs
  // its schedules to their end).
  void Abandon(plexus::mpi::Abandoned a);
  // Tests the abandoned requests and advances the abandoned schedules,
  // dropping finished ones, and frees the communicators released meanwhile
  // that no abandoned operation uses any more; returns how many operations
  // are left. Takes the MPI lock itself.
  size_t ReapAbandoned();
  // MPI_Comm_free(comm) now, or once its abandoned operations have finished:
  // Open MPI's non-blocking collectives crash when their communicator is
  // freed under them, whatever the standard says about deferred freeing.
  void ReleaseComm(MPI_Comm comm);

  // Own schedules (allreduce on host memory). Activate() makes req's
  // schedules advance from every test/wait; AdvanceSchedules() advances every
  // active one (completing, failing or aborting requests as they finish) and
  // every abandoned one, and is cheap when there are none; DropSchedules(comm)
  // abandons those of comm (comm_destroy with requests left over). Take
  // sched_mutex, then a request's mutex or abandoned_mutex, then the MPI
  // lock, in that order.
  void Activate(plexus_request* req);
  void AdvanceSchedules();
  void DropSchedules(plexus_comm* comm);

  const plexus_host_v1 host;  // copy of the host's table (its pointers outlive us)
  uint64_t max_count =
      2147483647;  // most elements one MPI call is given (PLEXUS_DEBUG_MPI_MAX_COUNT)
  // Allreduce on host memory (PLEXUS_MPI_ALLREDUCE); set at init, then read only.
  plexus::mpi::AllreduceAlgorithm allreduce_algorithm = plexus::mpi::AllreduceAlgorithm::kAuto;
  // Every rank of the job on this host, over Open MPI's shared memory
  // (OneHostSharedMemory in mpi_requests.cpp); set by EnsureMpi, then read only.
  bool shared_memory = false;
  // An allreduce over the one-host segment failed because a peer made no
  // progress, exited or gave up (mpi_one_host.hpp): it may be stopped or
  // gone, and MPI_Finalize, which waits for every rank, could wait forever.
  // finalize() then skips it, as it does when the MPI path left abandoned
  // requests behind.
  std::atomic<bool> one_host_lost_peer{false};

  std::mutex state_mutex;  // guards MPI initialisation and comm_create
  std::atomic<bool> mpi_ready{false};
  bool we_initialised = false;                     // MPI_Init_thread was ours: finalise it
  std::atomic<int> provided{MPI_THREAD_MULTIPLE};  // thread level MPI granted
  std::atomic<bool> cuda_aware{false};
  plexus::mpi::HalfOps half_ops;
  std::string library_version;  // "Open MPI v4.1.4", for log lines
  int tag_ub = 32767;           // MPI_TAG_UB (the standard's minimum until MPI says)
  plexus::mpi::TagLayout tags;  // from tag_ub, set by EnsureMpi with it

  // Serialises every MPI call when MPI granted less than MPI_THREAD_MULTIPLE.
  // serialize is written once, before the first communicator exists.
  std::mutex mpi_mutex;
  bool serialize = false;

  std::mutex abandoned_mutex;
  std::vector<plexus::mpi::Abandoned> abandoned;  // guarded by abandoned_mutex
  std::vector<MPI_Comm> released;                 // guarded by abandoned_mutex
  std::atomic<size_t> abandoned_schedules{0};     // entries of abandoned with schedules

  // Every communicator, for MatchAllRecvs; taken before any comm's
  // match_mutex. queued_recvs counts the recvs of all of them that wait to
  // be matched (cheap to read in every test/wait).
  std::mutex comms_mutex;
  std::vector<plexus_comm*> comms;  // guarded by comms_mutex
  std::atomic<size_t> queued_recvs{0};
  // Matches what has arrived for every queued recv of every communicator:
  // run by every test/wait, since a peer may need this rank to take a
  // message (a large send waits for its receiver) before it can serve the
  // request being waited for.
  void MatchAllRecvs();

  std::mutex sched_mutex;
  std::vector<plexus_request*> active;  // requests with running schedules; guarded by sched_mutex
  std::atomic<size_t> active_count{0};  // active.size(), read without the lock

 private:
  size_t ReapLocked();  // abandoned_mutex held
};

namespace plexus::mpi {

// Holds ctx.mpi_mutex for the scope when MPI calls must be serialised.
class MpiLock {
 public:
  explicit MpiLock(plexus_backend_ctx& ctx) : lock_(ctx.mpi_mutex, std::defer_lock) {
    if (ctx.serialize) lock_.lock();
  }
  void unlock() {
    if (lock_.owns_lock()) lock_.unlock();
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace plexus::mpi

struct plexus_comm {
  plexus_backend_ctx* ctx = nullptr;
  MPI_Comm mpi = MPI_COMM_NULL;  // our duplicate of MPI_COMM_WORLD
  uint32_t rank = 0;
  uint32_t size = 0;
  int64_t timeout_ms = 0;
  std::string name;
  std::atomic<bool> aborted{false};

  plexus::kit::ErrorSlot errors;  // comm_last_error
  void SetError(std::string message) { errors.Set(std::move(message)); }
  // Marks the communicator unusable (a post failed half way): later posts
  // fail with code. Records message as the last error.
  void Break(int32_t code, const std::string& message);
  // PLEXUS_OK, or the status every post must fail with now (aborted, broken).
  int32_t Usable(const char* what);

  // The tag slot of the k-th own schedule posted on this communicator (the
  // same k on every rank): k cycles through the slots MPI_TAG_UB leaves
  // (mpi_tags.hpp).
  uint64_t TagSlot(uint64_t k) const;
  std::atomic<uint64_t> coll_seq{0};  // schedules posted so far

  // Allreduce on host memory through the one-host segment, when every rank
  // shares this host (mpi_one_host.hpp); null otherwise. Set by
  // comm_create, reset first by comm_destroy.
  std::unique_ptr<plexus::mpi::OneHostRunner> one_host;
  // Collectives posted so far (send and recv not counted): the sequence
  // numbers the segment compares across ranks.
  std::atomic<uint64_t> collectives_posted{0};

  // Schedule k starts only once schedule k - slots (same tag slot) has
  // finished on this rank, so the schedules of one slot run one after the
  // other in sequence order on every rank: MPI then matches every tag's
  // messages in the same order everywhere, however far the sequence has
  // wrapped around and whatever order the ranks progress them in. A
  // schedule whose turn has not come waits unstarted (AdvanceRequest starts
  // it). Guarded by ctx->sched_mutex.
  bool TakeSlot(uint64_t k);
  void ReleaseSlot(uint64_t k);
  // When a schedule here last moved (a step done, or finished): an
  // operation waiting for a slot is not stalled while others move. Guarded
  // by sched_mutex.
  std::chrono::steady_clock::time_point progress_at{};
  // PLEXUS_OK, or the status of the failure that broke the communicator.
  int32_t broken_code() const { return broken_.load(std::memory_order_acquire); }

  // recv requests with chunks not matched yet, per peer, in posting order
  // (MPI matches a peer's messages in order; so must we). Guarded by
  // match_mutex, which is taken before any request's mutex.
  std::mutex match_mutex;
  std::vector<std::deque<plexus_request*>> unmatched;

  // One cached scratch buffer, so that in-place allreduces do not map and
  // fault in fresh memory every call. Take returns one of at least bytes
  // (*capacity its size); Give keeps it for the next caller, or frees it.
  std::unique_ptr<uint8_t[]> TakeScratch(uint64_t bytes, uint64_t* capacity);
  void GiveScratch(std::unique_ptr<uint8_t[]> buf, uint64_t capacity);

 private:
  std::vector<uint64_t> slot_next_;  // TagSlot(k) -> the schedule that may start next; sched_mutex
  std::mutex scratch_mutex_;
  std::unique_ptr<uint8_t[]> scratch_;  // guarded by scratch_mutex_
  uint64_t scratch_capacity_ = 0;

  std::mutex error_mutex_;
  std::atomic<int32_t> broken_{PLEXUS_OK};  // written under error_mutex_
  std::string broken_reason_;
};

struct plexus_request {
  plexus_comm* comm = nullptr;
  plexus_collective_t coll = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;  // element type, for received counts
  uint32_t peer = 0;                      // send/recv only

  std::mutex mutex;                  // guards everything below
  std::vector<MPI_Request> pending;  // MPI_REQUEST_NULL once complete

  // recv: the chunks (one MPI message each) not matched yet are
  // to_match[matched..]; guarded by comm->match_mutex and mutex (both held
  // to write). A chunk is matched with MPI_Improbe and received with
  // MPI_Imrecv (see MatchRecvs), into a buffer of its own when the message
  // has another size (mismatch then says so, and the recv fails with it).
  struct RecvChunk {
    void* buf;
    int count;
  };
  std::vector<RecvChunk> to_match;
  size_t matched = 0;
  bool queued = false;  // in comm->unmatched[peer]; guarded by comm->match_mutex
  std::string mismatch;
  std::vector<std::unique_ptr<uint8_t[]>> discards;
  // Written under mutex; read without it where a stale value is harmless
  // (test/wait of own schedules, which AdvanceSchedules completes).
  std::atomic<int32_t> status{PLEXUS_IN_PROGRESS};

  // Finishing steps, run once after every MPI request completed (or every
  // schedule finished), in this order (FinishData):
  void* average = nullptr;  // divide average_count elements here by comm->size (AVG)
  uint64_t average_count = 0;
  plexus_dtype_t dtype = 0;
  std::unique_ptr<uint8_t[]> scratch;  // MPI wrote (part of) the result here ...
  struct Unpack {
    void* to;       // ... and bytes of it at scratch + from go here
    uint64_t from;  // (in-place reduce_scatter; allreduce_coalesced's packed buffers)
    uint64_t bytes;
  };
  std::vector<Unpack> unpack;
  std::unique_ptr<plexus::mpi::VArgs> vargs;  // v-collectives: arrays MPI reads until done
  // gather, scatter: {root, -root} maximised over the ranks by an
  // MPI_Iallreduce posted with the operation. MPI cannot tell that ranks
  // named different roots (at 2 ranks both "roots" just send, and the
  // operation completes); on completion a root other than this rank's fails
  // it with REMOTE instead of reporting success.
  std::unique_ptr<int[]> root_check;
  uint32_t root = 0;

  // Own schedules (allreduce on host memory): one per chunk, all running at
  // once; pending is then unused and scratch (scratch_capacity bytes) is
  // theirs, returned to the communicator's cache on completion. Guarded by
  // ctx->sched_mutex.
  std::vector<plexus::mpi::AllreduceSchedule> schedules;
  uint64_t scratch_capacity = 0;
  bool own_schedule = false;  // set before the request is published, never changed
  // Run by comm->one_host's thread, which sets status (nothing else of the
  // request is used). Set before the request is published, never changed.
  bool on_one_host = false;

  uint64_t bytes = 0;  // data one rank moves: how long wait() tests back to back

  // The operation timeout (the communicator's timeout_ms without progress):
  // when the request last moved (posted, an MPI request or a schedule step
  // completed), and how many had completed then. Guarded by mutex (MPI
  // requests) or ctx->sched_mutex (own schedules).
  std::chrono::steady_clock::time_point progress_at;
  size_t progress_steps = 0;
  uint64_t seq = 0;  // own schedules: the first chunk's sequence number
  // Own schedules: those before first_open are finished (AdvanceRequest
  // skips them), first_open_steps their steps. Guarded by sched_mutex.
  size_t first_open = 0;
  size_t first_open_steps = 0;
  ~plexus_request();
};

namespace plexus::mpi {

// Matches the messages from peer to comm's recvs waiting for them, oldest
// first, as far as they have arrived (MPI_Improbe + MPI_Imrecv). Never a
// plain MPI_Irecv: Open MPI 4.1 writes a message longer than the receive
// buffer past its end (see AllreduceSchedule::Match). Takes
// comm->match_mutex, then the requests' mutexes.
void MatchRecvs(plexus_comm* comm, uint32_t peer);
// Takes req (a recv) out of its communicator's queue of unmatched recvs.
void Unqueue(plexus_request* req);

// The finishing steps of a request whose data has all arrived: the AVG
// division (req->average), then the copies out of req->scratch
// (req->unpack). Before scratch is released.
void FinishData(plexus_request* req);

// test(): progresses req without blocking; see the ABI's test().
int32_t Progress(plexus_request* req);

// wait(): Progress in a loop (back to back, then with yields, then with
// sleeps) until done or timeout_ms (negative = the communicator's timeout;
// 0 = one test).
int32_t WaitFor(plexus_request* req, int64_t timeout_ms);

}  // namespace plexus::mpi
