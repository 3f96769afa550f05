// plexus::kit::OpQueue — the ordered operation queue of one communicator,
// for backends whose transport moves bytes between two ranks
// (QueueTransport) and whose collectives are plexus-algos algorithms.
//
// Posting only queues work, so every collective is asynchronous, and every
// rank runs its communicator's operations strictly in posting order, one at
// a time: on the queue's worker thread, or on a caller that blocks in wait()
// for the operation next in line (RunInlineIfNext), which saves the two
// thread hand-offs that dominate a small collective. Whichever thread runs
// an operation is the only one driving the transport meanwhile (running_,
// under mutex_, hands it over). Consecutive send/recv operations run
// together, so a rank may post a send and a recv to one peer before waiting.
//
// After the first failure the communicator is BROKEN (the ABI's "After a
// failure"): every pending and later operation fails with that first error,
// because peers can no longer be assumed to be in step.
//
// Completion protocol (one for every backend, proven by the ThreadSanitizer
// run in tests/kit): the thread that completes a request sets its status
// and, when a thread sleeps on it, notifies its condition variable, all
// while holding the request's mutex. A waiter may read the status without
// the mutex (it is atomic), but only QueuedRequests::Free ends the request,
// and Free takes the mutex first: so the request is freed only after the
// completing thread has released it and no longer touches it. (Notifying
// after unlocking would let a waiter free the condition variable while the
// notify is still inside it: a use-after-free that could leave the worker
// blocked in pthread_cond_broadcast and the next operation never run.) A
// wait that runs its operation inline reads the status without taking the
// mutex and nobody is notified: two lock round trips and a broadcast less
// per small operation (see docs/benchmarks.md).
//
// request_notify (ABI 1.5): the completing thread takes the request's done
// function under the same mutex, and calls it once the operation's run is
// over (running_ cleared), never with a lock held: done may then post, wait
// and free. The worker itself waiting inside a done (a user's callback that
// posts and waits) runs the queue up to its request on the spot, since no
// other thread would.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plexus/algos/status.hpp"
#include "plexus/algos/transport.hpp"
#include "plexus/backend.h"
#include "plexus/kit/call.hpp"
#include "plexus/kit/errors.hpp"
#include "plexus/kit/queue_transport.hpp"
#include "plexus/kit/settings.hpp"

namespace plexus::kit {
class OpQueue;
}

// The ABI's opaque request type, for backends built on OpQueue. Freed with
// request_free (QueuedRequests::Free) once complete.
struct plexus_request {
  plexus::kit::OpQueue* queue = nullptr;  // not owned; used only while pending
  std::mutex mutex;
  std::condition_variable done_cv;
  // Written under mutex (error first); read with or without it.
  std::atomic<int32_t> status{PLEXUS_IN_PROGRESS};
  int waiters = 0;                 // threads asleep on done_cv; guarded by mutex
  std::string error;               // why status < 0 (request_error); guarded by mutex
  int64_t default_timeout_ms = 0;  // wait(req, negative) waits this long
  // request_notify's function and argument while pending; guarded by mutex.
  void (*notify)(void* arg, int32_t status) = nullptr;
  void* notify_arg = nullptr;
  bool notify_asked = false;  // request_notify was called (once per request)
};

namespace plexus::kit {

// What runs a collective: the transport, for plexus-algos' algorithms (an
// OpProviders converts to it), and the communicator's one-host shared
// memory, a provider of its own that the queue's poster may choose instead
// (kit::PostAlgos on one host), or null.
struct OpProviders {
  algos::PeerTransport& transport;
  OneHostShm* one_host_shm = nullptr;
  operator algos::PeerTransport&() const { return transport; }
};

// The work of one collective: runs with the providers and the operation's
// signature (seq filled in), on whichever thread runs the operation.
using OpBody = std::function<algos::Status(const OpProviders&, const algos::OpSignature&)>;

struct OpQueueOptions {
  const char* backend = "";  // static storage; the prefix of messages ("tcp")
  uint32_t rank = 0;
  uint32_t size = 1;
  int64_t timeout_ms = 0;  // the communicator's (wait(req, -1) waits this long)
  std::string name;        // the communicator's, for messages
  // Operations of at most this many bytes (count x element size) may run on
  // a waiting caller's thread; larger ones stay on the worker. Each backend
  // sets it from its own measurements (docs/benchmarks.md).
  uint64_t inline_max_bytes = 64 << 10;

  // The options of a communicator made by comm_create with config.
  static OpQueueOptions For(const char* backend, const plexus_comm_config_v1& config,
                            uint64_t inline_max_bytes) {
    OpQueueOptions o;
    o.backend = backend;
    o.rank = config.rank;
    o.size = config.size;
    o.timeout_ms = config.timeout_ms;
    o.name = config.name ? config.name : "";
    o.inline_max_bytes = inline_max_bytes;
    return o;
  }
};

class OpQueue {
 public:
  // Does not take ownership of host or transport, which must outlive it;
  // owns the communicator's one-host segment (MakeOneHostShm), if any.
  // Starts the worker thread.
  OpQueue(const plexus_host_v1& host, QueueTransport& transport, OpQueueOptions options,
          std::unique_ptr<OneHostShm> one_host_shm = nullptr);
  // Aborts what is pending (each request completes ABORTED) and joins the
  // worker. Bounded.
  ~OpQueue();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Queues a collective; on success *req is a new request owned by the
  // caller. An empty body completes in its place without running (a
  // zero-count operation: the ABI lets it skip the peers). After Abort()
  // posts fail with ABORTED (nothing posted); on a broken communicator they
  // succeed and the request fails with the first error. Any thread.
  int32_t Post(algos::OpSignature sig, OpBody body, plexus_request** req);

  // Queues one send or receive of count elements to or from peer.
  int32_t PostMessage(bool is_send, uint32_t peer, void* data, uint64_t count, plexus_dtype_t dtype,
                      plexus_request** req);

  // Called by a thread about to block on req for the whole operation
  // deadline: when req is next in line and nothing runs, runs it here.
  // Returns at once otherwise.
  void RunInlineIfNext(plexus_request* req);

  // Called by a request's waiter that is this queue's worker (inside a
  // request_notify function it runs): runs the queue's operations on this
  // thread until req completes or timeout_ms passes. False when this thread
  // is not the worker (nothing done).
  bool RunOnWorkerUntil(plexus_request* req, int64_t timeout_ms);

  void Abort();  // any thread, any time; idempotent
  ErrorSlot& errors() { return errors_; }
  uint32_t rank() const { return options_.rank; }
  uint32_t size() const { return options_.size; }
  const OpQueueOptions& options() const { return options_; }
  // The communicator's one-host shared-memory segment, or null.
  OneHostShm* one_host_shm() const { return one_host_shm_.get(); }

 private:
  enum class Kind { kCollective, kMessage, kNothing };
  // A completed request's request_notify function, to call once the run is over.
  struct Notification {
    void (*done)(void* arg, int32_t status) = nullptr;
    void* arg = nullptr;
    int32_t status = PLEXUS_OK;
    void Fire() const {
      if (done) done(arg, status);
    }
  };
  struct PendingOp {
    Kind kind = Kind::kNothing;
    algos::OpSignature sig;
    OpBody body;
    plexus_request* req = nullptr;
    std::unique_ptr<Message> message;  // kMessage
  };
  int32_t Enqueue(PendingOp op, plexus_request** req);
  void WorkerLoop();
  // Pops the first queued operation (mutex_ held by lock, the queue not
  // empty) into *op and sets running_; on a broken communicator completes
  // it with the first error instead, releasing lock, and returns false.
  bool TakeFront(std::unique_lock<std::mutex>& lock, PendingOp* op);
  // Runs op (popped from the queue with running_ set), completes it, clears running_.
  void Execute(PendingOp op);
  void ExecuteCollective(PendingOp& op);
  // Runs the messages at the head of the queue, taking in more as they are
  // posted, until none is left in flight.
  void RunMessages(PendingOp first);
  void RecordFailure(const algos::OpSignature& sig, const algos::Status& st);
  // Sets req's status (and wakes its waiters); returns its notification.
  static Notification Complete(plexus_request* req, const algos::Status& st);
  // Complete, from the thread that runs an operation: the notification waits
  // in notifications_ until Execute ends the run.
  void CompleteInRun(plexus_request* req, const algos::Status& st);

  const plexus_host_v1& host_;
  QueueTransport& transport_;
  const OpQueueOptions options_;
  const std::unique_ptr<OneHostShm> one_host_shm_;
  ErrorSlot errors_;

  std::mutex mutex_;  // guards everything below
  std::condition_variable queue_cv_;
  std::deque<PendingOp> queue_;
  uint64_t next_seq_ = 0;          // collectives: the same on every rank
  std::vector<uint64_t> sent_to_;  // messages, per peer and direction
  std::vector<uint64_t> received_from_;
  bool stopping_ = false;
  bool running_ = false;           // an operation runs (worker or inline)
  bool running_messages_ = false;  // ... and it is RunMessages, which takes in later posts
  algos::Status broken_;           // the first failure; OK while healthy
  // Filled by the thread that runs an operation, emptied by it as the run
  // ends (under mutex_ then).
  std::vector<Notification> notifications_;
  std::thread worker_;             // last: starts once everything above exists
};

// test, wait, request_free and request_error for plexus_request above
// (kit::MakeTable's B::Requests).
struct QueuedRequests {
  static int32_t Test(plexus_request& req);
  static int32_t Wait(plexus_request& req, int64_t timeout_ms);
  static int32_t Free(plexus_request* req);
  static size_t Error(plexus_request& req, char* buf, size_t len);
  static int32_t Notify(plexus_request& req, void (*done)(void* arg, int32_t status), void* arg);
};

// What a backend over OpQueue keeps per communicator: derive its plexus_comm
// from QueuedComm<ItsTransport> and add its own settings.
template <class Transport>
struct QueuedComm {
  // Declared before the queue, so destroyed after it: the queue's destructor
  // joins the worker, which uses the transport.
  std::unique_ptr<Transport> transport;
  std::unique_ptr<OpQueue> queue;
};

// mem_alloc and mem_free (ABI 1.3) on the queue's one-host segment
// (OneHostShm::MemAlloc); PLEXUS_ERR_UNSUPPORTED where it has none. A
// failure's message goes into queue.errors().
int32_t QueueMemAlloc(OpQueue& queue, uint64_t bytes, void** ptr_out);
int32_t QueueMemFree(OpQueue& queue, void* ptr);

// The members of a MakeTable class B that are the same for every backend
// whose plexus_comm (Comm) holds its OpQueue in `queue` (a unique_ptr,
// declared after the transport it drives): derive B from QueuedBackend<Comm>.
template <class Comm>
struct QueuedBackend {
  using Requests = QueuedRequests;
  static void CommDestroy(Comm* comm) { delete comm; }
  static void CommAbort(Comm& comm) { comm.queue->Abort(); }
  static ErrorSlot& Errors(Comm& comm) { return comm.queue->errors(); }
  static CommShape Shape(const Comm& comm) { return {comm.queue->rank(), comm.queue->size()}; }
  static uint32_t MemoryTypes(const Comm&) { return 1u << PLEXUS_MEMORY_HOST; }
  static int32_t MemAlloc(Comm& comm, uint64_t bytes, void** ptr_out) {
    return QueueMemAlloc(*comm.queue, bytes, ptr_out);
  }
  static int32_t MemFree(Comm& comm, void* ptr) { return QueueMemFree(*comm.queue, ptr); }
};

// More of the same for the simplest such backend, one whose process-wide
// context is the host table alone (Ctx: struct plexus_backend_ctx {
// plexus_host_v1 host; }) and whose collectives are plexus-algos algorithms
// on host memory: Init (which needs the out-of-band functions, to connect),
// Finalize, kCollectives (every collective of the list, as PostAlgos runs
// them all) and Capabilities.
template <class Comm, class Ctx>
struct AlgosBackend : QueuedBackend<Comm> {
  static constexpr uint32_t kCollectives = abi::kAllCollectives;
  static int32_t Init(const plexus_host_v1& host, Ctx** ctx_out) {
    if (!host.oob_allgather || !host.oob_broadcast) return PLEXUS_ERR_INVALID_ARGUMENT;
    *ctx_out = new Ctx{host};
    return PLEXUS_OK;
  }
  static void Finalize(Ctx* ctx) { delete ctx; }
  static void Capabilities(Ctx&, plexus_capabilities& caps) {
    SetAlgosHostCapabilities(caps, kCollectives);
  }
};

}  // namespace plexus::kit
