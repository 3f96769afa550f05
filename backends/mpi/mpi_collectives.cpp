#include "mpi_collectives.hpp"

#include "mpi_schedule.hpp"

#include <algorithm>
#include <memory>
#include <string>

#include "plexus/algos/dtype.hpp"

namespace plexus::mpi {
namespace {

// Tag of every message of send/recv; MPI's collectives use none, the own
// allreduce schedules their own (plexus_comm::CollTag).
constexpr int kTag = kP2pTag;

// Byte offset into a caller's buffer (NULL stays NULL for empty operations).
inline void* At(void* p, uint64_t bytes) {
  return p ? static_cast<uint8_t*>(p) + bytes : p;
}
inline const void* At(const void* p, uint64_t bytes) {
  return p ? static_cast<const uint8_t*>(p) + bytes : p;
}

// Collects the MPI requests of one operation while holding the MPI lock.
class Posting {
 public:
  Posting(plexus_comm* comm, plexus_collective_t coll, plexus_dtype_t dtype)
      : comm_(comm), req_(std::make_unique<plexus_request>()), lock_(*comm->ctx) {
    req_->comm = comm;
    req_->coll = coll;
    req_->dtype = dtype;
    req_->type = dtype ? ToMpiType(dtype) : MPI_DATATYPE_NULL;
    req_->progress_at = std::chrono::steady_clock::now();
  }

  plexus_request& req() { return *req_; }
  bool ok() const { return rc_ == MPI_SUCCESS; }

  // Records the outcome of one MPI call that wrote *r (a pointer, so that the
  // call has written it before it is read: argument order is unspecified).
  bool Add(int rc, const MPI_Request* r, const char* call) {
    if (!Check(rc, call)) return false;
    req_->pending.push_back(*r);
    return true;
  }
  // Records the outcome of an MPI call without a request (datatypes).
  bool Check(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return true;
    if (rc_ == MPI_SUCCESS) {
      rc_ = rc;
      call_ = call;
    }
    return false;
  }

  // Divide count elements at buf by the communicator size on completion.
  void Average(void* buf, uint64_t count) {
    req_->average = buf;
    req_->average_count = count;
  }

  int32_t Finish(plexus_request** out) {
    lock_.unlock();
    if (rc_ == MPI_SUCCESS) {
      *out = req_.release();
      return PLEXUS_OK;
    }
    int32_t code = StatusOfMpiError(rc_);
    if (code == PLEXUS_OK) code = PLEXUS_ERR_SYSTEM;
    std::string message = std::string("mpi ") + algos::CollectiveName(req_->coll) + ": " + call_ +
                          " failed: " + MpiErrorText(rc_);
    if (req_->pending.empty()) {
      comm_->SetError(message);
      return code;
    }
    // Part of the operation is in MPI already: this rank is out of step.
    message += " (after " + std::to_string(req_->pending.size()) +
               " chunk(s) were posted; the communicator is no longer usable)";
    {
      std::lock_guard<std::mutex> guard(req_->mutex);
      Abandoned a;
      a.comm = comm_->mpi;
      a.requests = std::move(req_->pending);
      a.scratch = std::move(req_->scratch);
      comm_->ctx->Abandon(std::move(a));
    }
    comm_->Break(code, message);
    return code;
  }

 private:
  plexus_comm* comm_;
  std::unique_ptr<plexus_request> req_;
  MpiLock lock_;
  int rc_ = MPI_SUCCESS;
  const char* call_ = "";
};

// Calls fn(offset, n) for consecutive chunks of at most max elements covering
// [0, count); once (with n = 0) when count is 0. Stops when fn returns false.
template <typename Fn>
void ForEachChunk(uint64_t count, uint64_t max, Fn&& fn) {
  uint64_t off = 0;
  do {
    const uint64_t n = std::min(max, count - off);
    if (!fn(off, int(n))) return;
    off += n;
  } while (off < count);
}

// A datatype of n elements of base whose extent is extent bytes: one chunk
// of a per-rank block, the next rank's chunk one block further on.
int MakeChunkType(MPI_Datatype base, int n, MPI_Aint extent, MPI_Datatype* out) {
  MPI_Datatype contiguous = MPI_DATATYPE_NULL;
  int rc = MPI_Type_contiguous(n, base, &contiguous);
  if (rc != MPI_SUCCESS) return rc;
  rc = MPI_Type_create_resized(contiguous, 0, extent, out);
  MPI_Type_free(&contiguous);
  if (rc != MPI_SUCCESS) return rc;
  rc = MPI_Type_commit(out);
  if (rc != MPI_SUCCESS) MPI_Type_free(out);
  return rc;
}

}  // namespace

namespace {

// Allreduce on host memory: one AllreduceSchedule per chunk of at most
// max_count elements, each with its own tag, all started now.
int32_t PostAllreduceSchedules(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                               plexus_dtype_t dtype, plexus_reduce_op_t op, plexus_request** out) {
  plexus_backend_ctx* ctx = comm->ctx;
  const uint64_t es = algos::DtypeSize(dtype);
  const bool in_place = send == recv;
  const uint64_t max = ctx->max_count;
  const uint64_t chunks = count <= max ? 1 : (count + max - 1) / max;
  const MPI_Op mop = ToMpiOp(ctx->half_ops, dtype, op);
  const plexus::mpi::AllreduceAlgorithm algorithm = ctx->allreduce_algorithm;

  std::unique_ptr<plexus_request> req(new plexus_request);  // (not value-initialised: no memset)
  req->comm = comm;
  req->coll = PLEXUS_COLL_ALLREDUCE;
  req->dtype = dtype;
  req->type = ToMpiType(dtype);
  req->own_schedule = true;
  req->bytes = count * es;
  if (op == PLEXUS_OP_AVG) {
    req->average = recv;
    req->average_count = count;
  }
  uint64_t scratch_bytes = 0;
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t n = std::min(max, count - k * max);
    scratch_bytes += AllreduceSchedule::ScratchBytes(n, dtype, comm->size, in_place, algorithm);
  }
  if (scratch_bytes) req->scratch = comm->TakeScratch(scratch_bytes, &req->scratch_capacity);

  // The tags: the same sequence numbers on every rank, since every rank posts
  // the same allreduces (and so the same chunks) in the same order.
  const uint64_t seq = comm->coll_seq.fetch_add(chunks);
  req->seq = seq;
  req->progress_at = std::chrono::steady_clock::now();
  req->schedules.reserve(chunks);
  int rc = MPI_SUCCESS;
  const char* call = "";
  bool finished = true;
  {
    MpiLock lock(*ctx);
    uint64_t scratch_off = 0;
    for (uint64_t k = 0; k < chunks && rc == MPI_SUCCESS; ++k) {
      const uint64_t off = k * max, n = std::min(max, count - off);
      AllreduceSchedule::Args a;
      a.recv = At(recv, off * es);
      a.send = in_place ? a.recv : At(send, off * es);
      a.count = n;
      a.dtype = dtype;
      a.op = op;
      a.op_mpi = mop;
      a.type = req->type;
      a.comm = comm->mpi;
      a.tag = comm->CollTag(seq + k, dtype, op);
      a.rank = comm->rank;
      a.size = comm->size;
      a.scratch = req->scratch ? req->scratch.get() + scratch_off : nullptr;
      a.algorithm = algorithm;
      scratch_off += AllreduceSchedule::ScratchBytes(n, dtype, comm->size, in_place, algorithm);
      AllreduceSchedule& s = req->schedules.emplace_back(a);
      rc = s.Start(&call);
      finished = finished && s.done();
    }
  }
  if (rc != MPI_SUCCESS) {
    int32_t code = StatusOfMpiError(rc);
    if (code == PLEXUS_OK) code = PLEXUS_ERR_SYSTEM;
    std::string message = std::string("mpi allreduce: ") + call + " failed: " + MpiErrorText(rc);
    Abandoned a;
    a.comm = comm->mpi;
    {
      MpiLock lock(*ctx);
      for (auto& s : req->schedules) s.TakeRequests(&a.requests, &a.discards);
    }
    // Either part of the operation is in MPI already, or this rank has used
    // tags its peers will use for their next allreduce: either way it is out
    // of step with them, and going on could pair different allreduces.
    if (!a.requests.empty()) {
      a.scratch = std::move(req->scratch);
      ctx->Abandon(std::move(a));
    }
    comm->Break(code, message +
                          " (this rank is now out of step with its peers; the communicator "
                          "is no longer usable)");
    return code;
  }
  if (finished) {  // one rank, or count 0: done already
    req->schedules.clear();
    if (req->average && count) algos::FinishAverage(recv, count, dtype, comm->size);
    if (req->scratch) comm->GiveScratch(std::move(req->scratch), req->scratch_capacity);
    req->status = PLEXUS_OK;
    *out = req.release();
    return PLEXUS_OK;
  }
  plexus_request* r = req.release();
  ctx->Activate(r);
  *out = r;
  return PLEXUS_OK;
}

}  // namespace

int32_t PostAllreduce(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                      plexus_dtype_t dtype, plexus_reduce_op_t op, bool host_memory,
                      plexus_request** out) {
  if (host_memory && comm->ctx->allreduce_algorithm != AllreduceAlgorithm::kMpi) {
    return PostAllreduceSchedules(comm, send, recv, count, dtype, op, out);
  }
  Posting p(comm, PLEXUS_COLL_ALLREDUCE, dtype);
  const uint64_t es = algos::DtypeSize(dtype);
  p.req().bytes = count * es;
  const MPI_Datatype type = p.req().type;
  const MPI_Op mop = ToMpiOp(comm->ctx->half_ops, dtype, op);
  const bool in_place = send == recv;
  ForEachChunk(count, comm->ctx->max_count, [&](uint64_t off, int n) {
    MPI_Request r = MPI_REQUEST_NULL;
    const void* s = in_place ? MPI_IN_PLACE : At(send, off * es);
    return p.Add(MPI_Iallreduce(s, At(recv, off * es), n, type, mop, comm->mpi, &r), &r,
                 "MPI_Iallreduce");
  });
  if (op == PLEXUS_OP_AVG) p.Average(recv, count);
  return p.Finish(out);
}

int32_t PostBroadcast(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype,
                      uint32_t root, plexus_request** out) {
  Posting p(comm, PLEXUS_COLL_BROADCAST, dtype);
  const uint64_t es = algos::DtypeSize(dtype);
  p.req().bytes = count * es;
  const MPI_Datatype type = p.req().type;
  ForEachChunk(count, comm->ctx->max_count, [&](uint64_t off, int n) {
    MPI_Request r = MPI_REQUEST_NULL;
    return p.Add(MPI_Ibcast(At(buf, off * es), n, type, int(root), comm->mpi, &r), &r,
                 "MPI_Ibcast");
  });
  return p.Finish(out);
}

int32_t PostReduce(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                   plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t root,
                   plexus_request** out) {
  Posting p(comm, PLEXUS_COLL_REDUCE, dtype);
  const uint64_t es = algos::DtypeSize(dtype);
  p.req().bytes = count * es;
  const MPI_Datatype type = p.req().type;
  const MPI_Op mop = ToMpiOp(comm->ctx->half_ops, dtype, op);
  const bool is_root = comm->rank == root;
  const bool in_place = is_root && send == recv;
  ForEachChunk(count, comm->ctx->max_count, [&](uint64_t off, int n) {
    MPI_Request r = MPI_REQUEST_NULL;
    const void* s = in_place ? MPI_IN_PLACE : At(send, off * es);
    void* d = is_root ? At(recv, off * es) : nullptr;  // other ranks' recv is not touched
    return p.Add(MPI_Ireduce(s, d, n, type, mop, int(root), comm->mpi, &r), &r, "MPI_Ireduce");
  });
  if (op == PLEXUS_OP_AVG && is_root) p.Average(recv, count);
  return p.Finish(out);
}

int32_t PostAllgather(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                      plexus_dtype_t dtype, plexus_request** out) {
  Posting p(comm, PLEXUS_COLL_ALLGATHER, dtype);
  const uint64_t es = algos::DtypeSize(dtype);
  p.req().bytes = count * es * comm->size;
  const MPI_Datatype type = p.req().type;
  const bool in_place =
      count > 0 && send == At(static_cast<const void*>(recv), uint64_t(comm->rank) * count * es);
  if (count <= comm->ctx->max_count) {
    MPI_Request r = MPI_REQUEST_NULL;
    p.Add(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, int(count), type, recv, int(count), type,
                         comm->mpi, &r),
          &r, "MPI_Iallgather");
    return p.Finish(out);
  }
  ForEachChunk(count, comm->ctx->max_count, [&](uint64_t off, int n) {
    MPI_Datatype block = MPI_DATATYPE_NULL;
    if (!p.Check(MakeChunkType(type, n, MPI_Aint(count * es), &block), "MPI_Type_create_resized")) {
      return false;
    }
    MPI_Request r = MPI_REQUEST_NULL;
    // In place, MPI finds this rank's chunk at recv + off + rank * extent: the ABI's place.
    const bool posted = p.Add(MPI_Iallgather(in_place ? MPI_IN_PLACE : At(send, off * es), n, type,
                                             At(recv, off * es), 1, block, comm->mpi, &r),
                              &r, "MPI_Iallgather");
    MPI_Type_free(&block);  // allowed while the operation runs
    return posted;
  });
  return p.Finish(out);
}

int32_t PostReduceScatter(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                          plexus_dtype_t dtype, plexus_reduce_op_t op, plexus_request** out) {
  Posting p(comm, PLEXUS_COLL_REDUCE_SCATTER, dtype);
  const uint64_t es = algos::DtypeSize(dtype);
  p.req().bytes = count * es * comm->size;
  const MPI_Datatype type = p.req().type;
  const MPI_Op mop = ToMpiOp(comm->ctx->half_ops, dtype, op);
  const uint64_t block = count * es;
  const bool in_place = count > 0 && recv == At(send, uint64_t(comm->rank) * block);
  if (count <= comm->ctx->max_count) {
    void* dst = recv;
    if (in_place) {
      plexus_request& req = p.req();
      req.scratch = std::make_unique_for_overwrite<uint8_t[]>(block);
      req.scratch_to = recv;
      req.scratch_bytes = block;
      dst = req.scratch.get();
    }
    MPI_Request r = MPI_REQUEST_NULL;
    p.Add(MPI_Ireduce_scatter_block(send, dst, int(count), type, mop, comm->mpi, &r), &r,
          "MPI_Ireduce_scatter_block");
  } else {
    // One reduce per (block j -> rank j, chunk); all ranks post them in the same order.
    for (uint32_t j = 0; j < comm->size && p.ok(); ++j) {
      const bool mine = j == comm->rank;
      ForEachChunk(count, comm->ctx->max_count, [&](uint64_t off, int n) {
        MPI_Request r = MPI_REQUEST_NULL;
        const void* s = At(send, j * block + off * es);
        if (mine && in_place) {  // recv + off is exactly s: MPI's in-place reduce
          return p.Add(
              MPI_Ireduce(MPI_IN_PLACE, const_cast<void*>(s), n, type, mop, int(j), comm->mpi, &r),
              &r, "MPI_Ireduce");
        }
        return p.Add(MPI_Ireduce(s, mine ? At(recv, off * es) : nullptr, n, type, mop, int(j),
                                 comm->mpi, &r),
                     &r, "MPI_Ireduce");
      });
    }
  }
  if (op == PLEXUS_OP_AVG) p.Average(recv, count);
  return p.Finish(out);
}

int32_t PostAlltoall(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                     plexus_dtype_t dtype, plexus_request** out) {
  Posting p(comm, PLEXUS_COLL_ALLTOALL, dtype);
  const uint64_t es = algos::DtypeSize(dtype);
  p.req().bytes = count * es * comm->size;
  const MPI_Datatype type = p.req().type;
  if (count <= comm->ctx->max_count) {
    MPI_Request r = MPI_REQUEST_NULL;
    p.Add(MPI_Ialltoall(send, int(count), type, recv, int(count), type, comm->mpi, &r), &r,
          "MPI_Ialltoall");
    return p.Finish(out);
  }
  ForEachChunk(count, comm->ctx->max_count, [&](uint64_t off, int n) {
    MPI_Datatype block = MPI_DATATYPE_NULL;
    if (!p.Check(MakeChunkType(type, n, MPI_Aint(count * es), &block), "MPI_Type_create_resized")) {
      return false;
    }
    MPI_Request r = MPI_REQUEST_NULL;
    const bool posted = p.Add(
        MPI_Ialltoall(At(send, off * es), 1, block, At(recv, off * es), 1, block, comm->mpi, &r),
        &r, "MPI_Ialltoall");
    MPI_Type_free(&block);
    return posted;
  });
  return p.Finish(out);
}

int32_t PostBarrier(plexus_comm* comm, plexus_request** out) {
  Posting p(comm, PLEXUS_COLL_BARRIER, 0);
  MPI_Request r = MPI_REQUEST_NULL;
  p.Add(MPI_Ibarrier(comm->mpi, &r), &r, "MPI_Ibarrier");
  return p.Finish(out);
}

int32_t PostSend(plexus_comm* comm, const void* buf, uint64_t count, plexus_dtype_t dtype,
                 uint32_t peer, plexus_request** out) {
  Posting p(comm, PLEXUS_COLL_SEND, dtype);
  p.req().peer = peer;
  const uint64_t es = algos::DtypeSize(dtype);
  p.req().bytes = count * es;
  const MPI_Datatype type = p.req().type;
  // One message per chunk; a count of 0 is one empty message, matched by the
  // peer's recv of 0 elements.
  ForEachChunk(count, comm->ctx->max_count, [&](uint64_t off, int n) {
    MPI_Request r = MPI_REQUEST_NULL;
    return p.Add(MPI_Isend(At(buf, off * es), n, type, int(peer), kTag, comm->mpi, &r), &r,
                 "MPI_Isend");
  });
  return p.Finish(out);
}

int32_t PostRecv(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t peer,
                 plexus_request** out) {
  auto req = std::make_unique<plexus_request>();
  req->comm = comm;
  req->coll = PLEXUS_COLL_RECV;
  req->dtype = dtype;
  req->type = ToMpiType(dtype);
  req->peer = peer;
  const uint64_t es = algos::DtypeSize(dtype);
  req->bytes = count * es;
  req->progress_at = std::chrono::steady_clock::now();
  ForEachChunk(count, comm->ctx->max_count, [&](uint64_t off, int n) {
    req->to_match.push_back({At(buf, off * es), n});
    return true;
  });
  plexus_request* r = req.release();
  {
    std::lock_guard<std::mutex> lock(comm->match_mutex);
    comm->unmatched[peer].push_back(r);
    r->queued = true;
    comm->ctx->queued_recvs.fetch_add(1);
  }
  MatchRecvs(comm, peer);  // what has arrived already
  *out = r;
  return PLEXUS_OK;
}

}  // namespace plexus::mpi
