// Posting of each collective as non-blocking MPI calls. The arguments were
// checked by mpi_plugin.cpp (codes known, ranks in range, buffers non-NULL
// where needed, counts in range, the communicator usable); these functions
// only map them onto MPI:
//
//   allreduce       host memory: the backend's own point-to-point schedules
//                   (mpi_schedule.hpp), one per chunk, each with its own tag;
//                   CUDA memory: MPI_Iallreduce, in place (send == recv) ->
//                   MPI_IN_PLACE
//   broadcast       MPI_Ibcast
//   reduce          MPI_Ireduce; in place on root -> MPI_IN_PLACE there
//   allgather       MPI_Iallgather; send == recv + rank * count -> MPI_IN_PLACE
//                   (MPI's in-place layout is the ABI's)
//   reduce_scatter  MPI_Ireduce_scatter_block; in place (recv == send + rank *
//                   count) goes through a count-element scratch buffer, since
//                   MPI's in-place form puts the result at the start of the
//                   buffer and may overwrite the other blocks
//   alltoall        MPI_Ialltoall
//   barrier         MPI_Ibarrier
//   send / recv     MPI_Isend / MPI_Irecv, one tag, so messages between two
//                   ranks match in posting order; a recv checks the count
//                   it got
//   gather          MPI_Igather; in place on root (send == recv + root *
//                   count) -> MPI_IN_PLACE there (MPI's layout is the ABI's)
//   scatter         MPI_Iscatter; in place on root (recv == send + root *
//                   count) -> MPI_IN_PLACE there
//   allgatherv      MPI_Iallgatherv with int copies of the counts and
//                   displacements (kept with the request: MPI reads them
//                   until it completes); in place (send == recv +
//                   displs[rank]) -> MPI_IN_PLACE. With a count or
//                   displacement above max_count, MPI_Ialltoallw instead
//                   (below); the arrays are the same on every rank, so all
//                   ranks choose alike
//   alltoallv       MPI_Ialltoallw always: per peer, int count and byte
//                   displacement where they fit, else one element of a
//                   derived type carrying the block's 64-bit displacement
//                   and its count in pieces of max_count (each rank decides
//                   for its own blocks; MPI matches type signatures)
//   allreduce_coalesced
//                   host memory: the buffers packed into one, one allreduce
//                   as above (in place), copied out on completion; CUDA
//                   memory: one MPI_Iallreduce per buffer, one request
//
// Counts above ctx->max_count (INT_MAX unless PLEXUS_DEBUG_MPI_MAX_COUNT says less)
// are split into several MPI calls of at most max_count elements, all posted
// at once: allgather and alltoall chunks use a block datatype whose extent is
// the whole per-rank block; reduce_scatter chunks become one MPI_Ireduce per
// block and chunk. AVG is MPI_SUM followed, on completion, by a division by
// the communicator size on the ranks that hold a result.
#pragma once

#include <cstdint>

#include "mpi_requests.hpp"
#include "plexus/backend.h"

namespace plexus::mpi {

// Each posts the operation and sets *out (PLEXUS_OK), or fails with *out
// untouched and the reason in comm's last error. If MPI refused a call after
// earlier chunks of the same operation were posted, those are abandoned and
// the communicator is marked unusable (its ranks are out of step).
int32_t PostAllreduce(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                      plexus_dtype_t dtype, plexus_reduce_op_t op, bool host_memory,
                      plexus_request** out);
int32_t PostBroadcast(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype,
                      uint32_t root, plexus_request** out);
int32_t PostReduce(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                   plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t root,
                   plexus_request** out);
int32_t PostAllgather(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                      plexus_dtype_t dtype, plexus_request** out);
int32_t PostReduceScatter(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                          plexus_dtype_t dtype, plexus_reduce_op_t op, plexus_request** out);
int32_t PostAlltoall(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                     plexus_dtype_t dtype, plexus_request** out);
int32_t PostBarrier(plexus_comm* comm, plexus_request** out);
int32_t PostSend(plexus_comm* comm, const void* buf, uint64_t count, plexus_dtype_t dtype,
                 uint32_t peer, plexus_request** out);
int32_t PostRecv(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t peer,
                 plexus_request** out);
int32_t PostGather(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                   plexus_dtype_t dtype, uint32_t root, plexus_request** out);
int32_t PostScatter(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                    plexus_dtype_t dtype, uint32_t root, plexus_request** out);
// recvcounts and displs (comm->size entries) are read during the call only.
int32_t PostAllgatherv(plexus_comm* comm, const void* send, uint64_t sendcount, void* recv,
                       const uint64_t* recvcounts, const uint64_t* displs, plexus_dtype_t dtype,
                       plexus_request** out);
// The four arrays (comm->size entries) are read during the call only.
int32_t PostAlltoallv(plexus_comm* comm, const void* send, const uint64_t* sendcounts,
                      const uint64_t* sdispls, void* recv, const uint64_t* recvcounts,
                      const uint64_t* rdispls, plexus_dtype_t dtype, plexus_request** out);
// The arrays (nbuffers entries) are read during the call only; total is the
// sum of counts.
int32_t PostAllreduceCoalesced(plexus_comm* comm, const void* const* sendbufs,
                               void* const* recvbufs, const uint64_t* counts, uint32_t nbuffers,
                               uint64_t total, plexus_dtype_t dtype, plexus_reduce_op_t op,
                               bool host_memory, plexus_request** out);

}  // namespace plexus::mpi
