// plexus::abi::Call — one post of the C ABI, whatever the collective, and the
// argument checks every backend owes its caller, written once.
//
// A backend cannot trust its caller more than the host trusts the backend:
// the host checks capabilities, but a plugin is also driven by tests, by
// plexus-conformance and by other hosts. Each ABI entry point turns its
// arguments into a Call; CheckCall applies the ABI's rules for that
// collective (collectives.def declares them, keyed on Call::coll, never on
// a name); only a Call that passes reaches the backend's own code.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "plexus/abi/status.hpp"
#include "plexus/backend.h"

namespace plexus::abi {

// The arguments of one post. Fields a collective does not take stay zero.
struct Call {
  plexus_collective_t coll = 0;   // PLEXUS_COLL_*
  const void* sendbuf = nullptr;  // send: the message
  void* recvbuf = nullptr;        // broadcast: the buffer; recv: the message
  uint64_t count = 0;
  plexus_dtype_t dtype = 0;   // 0 for barrier
  plexus_reduce_op_t op = 0;  // allreduce, reduce, reduce_scatter
  uint32_t root = 0;          // broadcast, reduce, gather, scatter: root; send, recv: peer
  const plexus_placement* placement = nullptr;  // NULL: host memory, no stream

  // ABI 1.2. The arrays are borrowed for the post only: a backend that needs
  // them later copies them (VCounts below). size entries each, in elements.
  const uint64_t* sendcounts = nullptr;  // alltoallv
  const uint64_t* sdispls = nullptr;     // alltoallv
  const uint64_t* recvcounts = nullptr;  // allgatherv, alltoallv
  const uint64_t* rdispls = nullptr;     // allgatherv (its displs), alltoallv
  // allreduce_coalesced: nbuffers entries each; count is their sum.
  const void* const* sendbufs = nullptr;
  void* const* recvbufs = nullptr;
  const uint64_t* counts = nullptr;
  uint32_t nbuffers = 0;
};

// The per-rank counts and displacements of an allgatherv or alltoallv,
// copied out of a Call (whose arrays are the caller's only during the post).
// For allgatherv the send side is empty (the call's count is the send count).
struct VCounts {
  std::vector<uint64_t> sendcounts, sdispls, recvcounts, rdispls;
  static VCounts Of(const Call& call, uint32_t size);
};

// A Call that owns copies of its arrays (the per-rank ones its traits
// name), for a backend that runs it after the post returned: call's array
// members point into v, also in a copy.
struct OwnedCall {
  Call call;
  VCounts v;
  static OwnedCall Of(const Call& call, uint32_t size);
  OwnedCall() = default;
  OwnedCall(const OwnedCall& o) : call(o.call), v(o.v) { Point(); }
  OwnedCall(OwnedCall&& o) noexcept : call(o.call), v(std::move(o.v)) { Point(); }
  OwnedCall& operator=(OwnedCall o) noexcept {
    call = o.call;
    v = std::move(o.v);
    Point();
    return *this;
  }

 private:
  void Point();
};

// This rank's place in the communicator the call was posted on.
struct CommShape {
  uint32_t rank = 0;
  uint32_t size = 1;
};

// Bit (1u << PLEXUS_MEMORY_*) per memory type a backend accepts.
constexpr uint32_t kHostMemoryOnly = 1u << PLEXUS_MEMORY_HOST;

// Checks call against the ABI's rules for its collective:
//  - dtype (and op, for reductions) are codes of ABI 1; barrier takes none;
//  - root (broadcast, reduce, gather, scatter) is a rank; peer (send, recv)
//    is another rank;
//  - no NULL buffer where count > 0 needs one (reduce: recvbuf on the root only);
//  - the byte size of every buffer (count x element size, x size for the
//    per-rank blocks of allgather, reduce_scatter, alltoall) stays below 2^62;
//  - buffers overlap only as the ABI's in-place form of that collective;
//  - allgatherv, alltoallv: no NULL array, every block (count + displacement)
//    inside 2^62 bytes, receive blocks disjoint, allgatherv's send count is
//    recvcounts[rank], alltoallv's sendcounts[rank] is recvcounts[rank];
//  - allreduce_coalesced: 1 <= nbuffers, no NULL array, buffers pairwise
//    disjoint except sendbufs[i] == recvbufs[i], the sum of counts in range;
//  - placement names a memory type in memory_types (an unknown type is
//    INVALID_ARGUMENT, a known one the backend lacks UNSUPPORTED).
// Returns OK, or INVALID_ARGUMENT / UNSUPPORTED with "<collective>: <why>".
Status CheckCall(const Call& call, CommShape comm, uint32_t memory_types = kHostMemoryOnly);

// The call in words, for errors and crash reports:
// "broadcast(buf 0x7ffd..., count 8, float32, root 2, host memory)".
std::string DescribeCall(const Call& call);

// True for the collectives that reduce (allreduce, reduce, reduce_scatter):
// the ones whose op CheckCall checks, and that a backend may have to refuse
// for a dtype or memory it cannot reduce.
bool IsReduction(plexus_collective_t coll);

// Element size x count x blocks, the byte size of a buffer CheckCall accepted.
uint64_t CallBytes(const Call& call, uint64_t blocks = 1);

}  // namespace plexus::abi
