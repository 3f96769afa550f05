// plexus::kit::OneHostShm — allreduce, reduce_scatter and allgather
// through one shared-memory segment, for a communicator whose ranks all run
// on this host.
//
// Why: a transport between two processes copies every byte at least twice
// (UCX's FIFO in and out, a socket through the kernel; UCX's cma copy is
// slower than memcpy), and on a machine whose cores all compute, the
// all-reduce's CPU time adds to a training step whole. Here each rank
// copies its vector once into its slot of a segment every rank maps, and
// reduces its piece straight from the peers' slots (issue 31; the floor
// this sets, against UCX, is in docs/benchmarks.md).
// Every backend built on OpQueue gets it (as NCCL's shared-memory transport
// serves every network plugin): tcp, ucx and vendors' plugins.
//
// The segment: a header, a line of flags per rank, and per rank two slots
// (halves) of slot_bytes, used alternately by consecutive chunks. A rank
// announces a step by raising its `published` counter; peers spin, then
// sleep on it with a futex. Chunk k of the communicator's running count uses
// half k % 2 and two steps, 2k+1 (my data is in my slot) and 2k+2 (my piece
// of the sum is in my slot):
//   large: copy the pieces of my chunk that others sum into my slot, publish
//          2k+1, wait for all; sum piece `rank` (mine first, from my own
//          buffer, then the others' in rank order from their slots) into my
//          output, copy it
//          into my slot, publish 2k+2, wait for all; copy the other pieces
//          from their owners' slots. With 2 ranks each byte is copied in
//          once, half the vector summed, half copied out.
//   small (one chunk of at most kReduceAllMaxBytes): copy, publish 2k+1,
//          wait for all; every rank sums the whole chunk in rank order.
// A half is written again only at chunk k+2, by a rank that has seen every
// peer publish 2(k+1)+1, which each does only after it has finished with
// chunk k: so no slot is overwritten while someone reads it, with no extra
// step. Every element is summed once, by one rank, in a fixed order (small:
// by every rank in rank order), so every rank gets the same bits.
//
// Trust: rank 0 creates the segment in /dev/shm with a random name,
// O_EXCL and mode 0600, and hands its name and a random token to the peers
// over the communicator's out-of-band channel (the job's authenticated
// store). A peer opens it only if this user owns it, nobody else may open
// it, it has the expected size and its header carries the token. Rank 0
// unlinks it once every rank has mapped it.
//
// Failures: a rank that fails an operation writes why into its line and
// wakes every sleeper; waiting ranks read it (REMOTE, naming the rank). A
// wait longer than the communicator's timeout fails with TIMEOUT naming the
// rank not heard from; a peer's exited process (local_process.hpp) is found
// within 100 ms; Abort() wakes the waiting thread (ABORTED; at once, or
// within 100 ms if it lands in the instructions before the futex call).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "plexus/algos/status.hpp"
#include "plexus/algos/transport.hpp"
#include "plexus/backend.h"
#include "plexus/kit/local_process.hpp"

namespace plexus::kit {

struct OneHostShmOptions {
  const char* backend = "";  // static storage; the prefix of messages ("tcp")
  // How long a waiting rank spins before it sleeps; 0 sleeps at once (more
  // ranks than CPUs: the peer it waits for may need this CPU).
  int64_t spin_us = 50;
};

class OneHostShm {
 public:
  // One chunk of at most this many bytes is reduced whole by every rank
  // (one step instead of two).
  static constexpr uint64_t kReduceAllMaxBytes = 16 << 10;
  // A vector of at most this many bytes travels in the line that carries
  // its signature and step: a waiting peer fetches one cache line.
  static constexpr uint64_t kInlineBytes = 32;

  // Collective: every rank of the communicator calls it in comm_create, at
  // the same point of its out-of-band calls. On success *out is the
  // communicator's segment, or null with *why_not saying why there is none
  // (not every rank on this host, PLEXUS_SHM=off, /dev/shm full, ...): every
  // rank gets the same answer. Fails only for a bad setting or a failed
  // out-of-band call. *info: a line for the log (what the segment is).
  static algos::Status Create(const plexus_host_v1& host, const plexus_comm_config_v1& config,
                              const OneHostShmOptions& options, std::unique_ptr<OneHostShm>* out,
                              std::string* why_not);
  ~OneHostShm();
  OneHostShm(const OneHostShm&) = delete;
  OneHostShm& operator=(const OneHostShm&) = delete;

  // The allreduce sig describes (seq, dtype, op, count) of sendbuf into
  // recvbuf (may be equal). BLOCKS until every rank has done its part, or
  // fails: REMOTE (a peer failed, exited or is in another operation),
  // TIMEOUT (no peer progress for the communicator's timeout), ABORTED.
  // One thread at a time (OpQueue runs operations one at a time).
  algos::Status Allreduce(const algos::OpSignature& sig, const void* sendbuf, void* recvbuf);

  // Reduce-scatter: sendbuf holds size blocks of sig.count elements, and
  // rank r gets block r reduced over all ranks in recvbuf (which may be
  // sendbuf + rank * count * elem_size). Each element is reduced once, by
  // the rank whose block holds it: its own part first, from its own buffer,
  // then the others' in rank order (the order of Allreduce's large chunks).
  // Per chunk, a rank copies into its slot the range of every block but its
  // own, publishes 2k+1, waits for all and reduces its block's range from
  // the peers' slots: one step, the others' blocks copied once.
  // Blocks and fails as Allreduce.
  algos::Status ReduceScatter(const algos::OpSignature& sig, const void* sendbuf, void* recvbuf);

  // Allgather: sig.count elements from every rank into block r of recvbuf
  // (sendbuf may be recvbuf + rank * count * elem_size). Per chunk, a rank
  // copies its range into its slot, publishes 2k+1, waits for all and
  // copies the peers' ranges out of their slots. Blocks and fails as
  // Allreduce.
  algos::Status Allgather(const algos::OpSignature& sig, const void* sendbuf, void* recvbuf);

  // The collectives the segment runs (allreduce, reduce_scatter, allgather),
  // and one of them by sig.coll: what a backend posts through the segment.
  static bool Runs(plexus_collective_t coll);
  algos::Status Run(const algos::OpSignature& sig, const void* sendbuf, void* recvbuf);

  // Shared buffers (the backend's mem_alloc, ABI 1.3). MemAlloc is
  // COLLECTIVE in order, not in time: every rank calls it with the same
  // bytes, in the same order among its MemAlloc calls; it talks to no peer.
  // It makes a file in /dev/shm of this user's alone (mode 0600, O_EXCL)
  // that holds `bytes` zero-filled bytes behind a page of header (the
  // segment's token, the rank, the allocation's number), maps it and sets
  // *out to its first byte (page-aligned). A peer maps it at the first
  // allreduce on it, believing it only under the segment's checks (owner,
  // mode, size, token); its owner unlinks it there once every peer has
  // (so a buffer never used stays in /dev/shm until it is freed). On
  // failure (/dev/shm full, say) *out is untouched and *why says why: the
  // caller uses memory of its own. Any thread; not concurrently with
  // MemFree.
  //
  // An in-place allreduce of more than kReduceAllMaxBytes that lies in one
  // allocation, at the same offset on every rank, runs without a copy: once
  // every rank has posted it, the vector is cut into chunks of slot_bytes,
  // and whichever rank's thread runs takes the next chunk (an atomic
  // counter in the segment), sums it from every rank's buffer in rank order
  // and writes the sum into every rank's buffer. No rank waits for another
  // between chunks, so a rank whose thread the scheduler has parked (both
  // cores busy with backward) holds nobody up: the others do its share. A
  // rank completes once every chunk is done. Ranks that disagree on the
  // buffer (one posts on a shared buffer, another on its own) fail at once
  // with a mismatch naming both.
  algos::Status MemAlloc(uint64_t bytes, void** out);
  // Frees what MemAlloc returned: unmaps it and this rank's mappings of the
  // peers' buffers of the same number. No operation on it may be pending on
  // this rank (the peers may be past it: they never touch it again without
  // this rank's post). INVALID_ARGUMENT for a pointer MemAlloc did not give.
  algos::Status MemFree(void* p);

  // Every collective this rank runs, over shared memory or not, before it
  // runs: a peer waiting here for this rank in another collective of the
  // same sequence number fails at once with both named. OpQueue's thread.
  void Announce(const algos::OpSignature& sig);

  // Tells every peer that this rank gave up, and why. Any thread; the first
  // call counts.
  void Fail(const algos::Status& why);
  // A running or later Allreduce returns ABORTED promptly. Any thread.
  void Abort();

  // "2 ranks, 2 x 512 KiB slots per rank" (for the backend's INFO line).
  std::string Describe() const;

 private:
  OneHostShm() = default;
  uint8_t* Slot(uint32_t rank, uint32_t half) const;
  void Publish(uint32_t value);
  // Until every peer's published counter reaches target (or failure).
  // inline_half >= 0: spin on the peers' inline line of that half (its
  // stamp) rather than their counters.
  algos::Status WaitAll(uint32_t target, const algos::OpSignature& sig, int inline_half = -1);
  algos::Status WaitFor(uint32_t peer, uint32_t target, const algos::OpSignature& sig,
                        int inline_half);
  void WriteSignature(uint32_t half, const algos::OpSignature& sig);
  algos::Status AllreduceInline(const algos::OpSignature& sig, const uint8_t* send, uint8_t* recv);
  algos::Status CheckPeers(const algos::OpSignature& sig) const;  // failures, abort
  algos::Status CheckSignatures(uint32_t half, const algos::OpSignature& sig) const;
  std::string Prefix(const algos::OpSignature& sig) const;
  // INVALID_ARGUMENT when sendbuf (send_blocks x sig.count elements) or
  // recvbuf would be larger than any address space.
  algos::Status CheckBuffers(const algos::OpSignature& sig, const void* sendbuf,
                             uint64_t send_blocks, const void* recvbuf, uint64_t recv_blocks) const;
  algos::Status Mismatch(const algos::OpSignature& sig, uint32_t peer,
                         const algos::OpSignature& theirs, const std::string& their_where = "",
                         const std::string& my_where = "") const;
  void WakeAll();

  // Shared buffers (one_host_windows.cpp).
  // A buffer of MemAlloc. Unmapped (and its file unlinked if still there)
  // when the last holder lets go: MemFree, ~OneHostShm, or an operation
  // running on it (which holds it for its duration).
  struct Window {
    uint32_t index = 0;           // the rank's MemAlloc call that made it, from 0
    uint64_t bytes = 0;           // usable bytes, after the header page
    uint8_t* base = nullptr;      // usable bytes of this rank's mapping
    std::string name;             // its file in /dev/shm
    bool linked = true;           // the file is still there
    std::vector<uint8_t*> peers;  // by rank: usable bytes of its mapping (null: not yet)
    ~Window();
  };
  std::string WindowName(uint32_t rank, uint32_t index) const;
  // The window holding [p, p + bytes), or null. Locks windows_mutex_.
  std::shared_ptr<Window> FindWindow(const uint8_t* p, uint64_t bytes);
  algos::Status MapPeers(Window& w, const algos::OpSignature& sig);
  algos::Status WindowAllreduce(const algos::OpSignature& sig, Window& w, uint64_t offset);
  algos::Status WaitChunksDone(uint32_t target, const algos::OpSignature& sig);
  // After a window operation failed here (abort, a peer's failure, the
  // timeout): no chunk is taken any more, and the chunks peers are summing
  // now are waited for, up to a bound, so that nobody writes into this
  // rank's buffer once its request has completed.
  void LeaveWindowOp(uint32_t generation, uint64_t chunks);
  void DropWindows();  // ~OneHostShm

  std::string backend_;
  uint32_t rank_ = 0;
  uint32_t size_ = 0;
  int64_t timeout_ms_ = 0;
  std::chrono::microseconds spin_{0};
  uint64_t slot_bytes_ = 0;
  uint8_t* base_ = nullptr;  // the mapping, mapped_bytes_ long; owned
  size_t mapped_bytes_ = 0;
  size_t slots_offset_ = 0;       // where the slots start in base_
  std::vector<ProcessId> peers_;  // by rank
  uint32_t chunk_ = 0;            // chunks done on this communicator (wraps)
  std::string name_;              // the segment's name in /dev/shm (unlinked)
  uint8_t token_[16] = {};        // rank 0's token, in the header
  std::mutex windows_mutex_;      // MemAlloc, MemFree (callers' threads) against FindWindow
  std::vector<std::shared_ptr<Window>> windows_;
  uint32_t windows_made_ = 0;    // MemAlloc calls so far, failed ones too
  uint32_t window_ops_ = 0;      // allreduces on windows so far: their generation
  bool windows_enabled_ = true;  // PLEXUS_SHM_WINDOWS is not off
  std::atomic<bool> aborted_{false};
  std::atomic<bool> failed_{false};
};

}  // namespace plexus::kit
