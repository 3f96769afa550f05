// The point-to-point interface every algorithm in plexus-algos is written
// against. A backend that can move bytes between two ranks implements
// PeerTransport once and gets every collective from this library.
//
// Transport and algorithm never mix: an algorithm decides who sends which
// bytes to whom, in which step; the transport moves them, frames them with the
// operation's signature, checks the peer agrees, and enforces deadlines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "plexus/algos/status.hpp"
#include "plexus/backend.h"

namespace plexus::algos {

// Identity of one collective operation, carried in every frame of it so that
// a receiver can tell when two ranks are in different operations.
struct OpSignature {
  uint64_t seq = 0;              // position of the op in its communicator, from 0
  plexus_collective_t coll = 0;  // PLEXUS_COLL_*
  plexus_dtype_t dtype = 0;      // PLEXUS_DTYPE_*, 0 for barrier
  plexus_reduce_op_t op = 0;     // PLEXUS_OP_*, 0 when the collective does not reduce
  uint64_t count = 0;            // the count argument of the call
  uint32_t root = 0;             // root (or peer for send/recv), 0 when unused
};

struct SendSpec {
  uint32_t peer;
  const void* data;  // borrowed until Exchange returns
  size_t bytes;
};

struct RecvSpec {
  uint32_t peer;
  void* data;  // borrowed until Exchange returns; exactly `bytes` arrive
  size_t bytes;
};

// The root of the frames by which ranks agree on a root (AgreeOnRoot): they
// must match whatever root each rank named.
constexpr uint32_t kAgreeingRoot = 0xFFFFFFFFu;

class PeerTransport {
 public:
  virtual ~PeerTransport() = default;

  virtual uint32_t rank() const = 0;
  virtual uint32_t size() const = 0;

  // Performs every send and every receive concurrently and returns when all
  // have completed, so a step in which a rank both sends and receives can
  // never deadlock on full socket buffers. A receive must find a frame of the
  // same signature and exactly `bytes` payload bytes, else REMOTE (mismatch,
  // naming both sides). BLOCKS; fails with TIMEOUT when no progress is made
  // for the communicator's timeout, REMOTE when a peer fails, ABORTED on
  // abort. After a failure the transport is unusable.
  virtual Status Exchange(const OpSignature& sig, std::span<const SendSpec> sends,
                          std::span<const RecvSpec> recvs) = 0;

  // Optional pipelining: Start() queues a batch of transfers and returns a
  // ticket at once; Finish(ticket) blocks until that batch (and every batch
  // started before it) has completed. Buffers stay borrowed until then. An
  // algorithm can so reduce one segment while the next is on the wire. The
  // default runs the batch at once with Exchange(), which is correct for any
  // transport, just not overlapped.
  virtual Status Start(const OpSignature& sig, std::span<const SendSpec> sends,
                       std::span<const RecvSpec> recvs, uint64_t* ticket) {
    *ticket = 0;
    return Exchange(sig, sends, recvs);
  }
  virtual Status Finish(uint64_t ticket) {
    (void)ticket;
    return {};
  }

  // How many started batches an algorithm should keep in flight (a hint;
  // algorithms cap it). Across hosts a link holds its bandwidth times its
  // delay (about 1 MB at 1 GB/s and 1 ms), so a transport with peers on
  // other hosts wants several; on one host two are best (more in flight made
  // large allreduces over TCP loopback slower: see docs/benchmarks.md).
  virtual uint32_t PipelineDepth() const { return 2; }

  // The longest message an algorithm should send in a step whose receiver
  // takes it straight into the caller's buffer (nothing to reduce, so no
  // scratch segment to keep in the cache): 0 means the algorithm's own
  // segment size, which keeps PipelineDepth() segments on the wire. A
  // transport that moves a large message in one copy from buffer to buffer
  // (UCX's rendezvous over cma, on one host) asks for more: one message of
  // 32 MiB is copied once, as 128 segments of 256 KiB it is copied twice
  // (in and out of the shared-memory FIFO).
  virtual uint64_t DirectMessageBytes() const { return 0; }

  // The longest message an algorithm should send in a step whose receiver
  // reduces it (into a scratch segment): 0 means the algorithm's own
  // segment size. A transport whose library moves data only inside its own
  // calls (MPI) asks for more: a segment in flight while the previous one
  // is reduced does not move meanwhile, and the library pipelines a long
  // message itself.
  virtual uint64_t ReduceMessageBytes() const { return 0; }
};

}  // namespace plexus::algos
