// plexus::kit::QueueTransport — what OpQueue (op_queue.hpp) needs of a
// backend's transport, beyond the PeerTransport the algorithms use.
//
// Collectives run as plexus-algos algorithms over Exchange()/Start(). The
// ABI's send and recv are messages that stay in flight while more are
// posted (a rank may post a send and a recv to one peer, then wait for
// both), so the queue drives them itself through PostMessage() and Drive().
//
// Threads: the queue calls everything from one thread at a time (the thread
// running the communicator's current operation), except Wake() and Abort(),
// which any thread may call at any time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "plexus/algos/status.hpp"
#include "plexus/algos/transport.hpp"
#include "plexus/kit/one_host_shm.hpp"

namespace plexus::kit {

// One message of a send or recv operation. A transport usually derives its
// own type from it to keep its progress (NewMessage makes them).
struct Message {
  virtual ~Message() = default;
  bool is_send = false;
  uint32_t peer = 0;
  // What the message is: coll SEND, count and dtype of the call, root the
  // sender, seq its number among the messages of that sender to that
  // receiver. Both sides fill it the same, so a receiver can check it.
  algos::OpSignature sig;
  uint8_t* data = nullptr;  // the caller's buffer, borrowed until complete
  size_t bytes = 0;
  bool complete = false;  // set by the transport, read by the queue
};

class QueueTransport : public algos::PeerTransport {
 public:
  // A fresh Message of the transport's own type (fields zero).
  virtual std::unique_ptr<Message> NewMessage() { return std::make_unique<Message>(); }

  // Starts m, behind the messages already started to or from its peer. m
  // stays at its address until it is complete or Cancel() has returned. An
  // error starts nothing.
  virtual algos::Status PostMessage(Message* m) = 0;

  // Moves started messages until done() is true or Wake() was called (both
  // OK), or fails: TIMEOUT after the communicator's timeout without progress,
  // REMOTE when a peer fails or disagrees, ABORTED after Abort(). BLOCKS.
  virtual algos::Status Drive(const std::function<bool()>& done) = 0;

  // A batch of messages begins: the no-progress clock starts now.
  virtual void StartClock() {}

  // After a failure: forgets every started message and makes sure the
  // transport writes no buffer of one afterwards. Bounded. Idempotent.
  virtual void Cancel() = 0;

  // Tells every peer, best effort and bounded, that this rank gave up on
  // sig and why, so that none waits for its timeout. Not after an abort
  // (abort is local).
  virtual void Fail(const algos::OpSignature& sig, const algos::Status& why) = 0;

  // Any thread: a running Drive() returns OK so its caller can post more.
  virtual void Wake() = 0;
  // Any thread, idempotent: a running or later Drive(), Exchange() or
  // Finish() returns ABORTED promptly.
  virtual void Abort() = 0;
};

// In a backend's comm_create, before its OpQueue exists: makes the
// communicator's one-host shared-memory segment (collective, over
// config.oob; one_host_shm.hpp) into *shm (null where there is none), for
// the queue to own: PostAlgos then runs allreduce, reduce_scatter and
// allgather through it instead of the transport, and the queue tells it of
// failures and aborts. *info says what was decided, for the backend's INFO
// line ("allreduce, reduce_scatter and allgather over shared memory (2
// ranks, 2 x 512 KiB slots per rank)" or "no shared memory: <why>"). Fails
// only for a bad PLEXUS_SHM* setting or a failed out-of-band exchange.
algos::Status MakeOneHostShm(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                             const OneHostShmOptions& options, std::unique_ptr<OneHostShm>* shm,
                             std::string* info);

}  // namespace plexus::kit
