#include "mpi_collectives.hpp"

#include "mpi_schedule.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "plexus/algos/dtype.hpp"

namespace plexus::mpi {
namespace {

// Tag of every message of send/recv; MPI's collectives use none, the own
// allreduce schedules their own (mpi_tags.hpp).
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
      a.vargs = std::move(req_->vargs);
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

// A datatype for one block of a v-collective that MPI's ints cannot carry:
// count elements of base (es bytes each) at byte displacement at (from the
// buffer, or an absolute address with MPI_BOTTOM), as count / max pieces of
// max elements and one of the rest, so that no int of MPI's exceeds max and
// the displacement is an MPI_Aint. One element of it is the whole block.
// The caller has checked count / max <= INT_MAX (BlocksFit).
int MakeBlockType(MPI_Datatype base, uint64_t es, uint64_t count, uint64_t max, MPI_Aint at,
                  MPI_Datatype* out) {
  const uint64_t pieces = count / max, rest = count % max;
  MPI_Datatype piece = MPI_DATATYPE_NULL, tail = MPI_DATATYPE_NULL;
  int lens[2] = {0, 0};
  MPI_Aint displs[2] = {0, 0};
  MPI_Datatype types[2] = {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL};
  int k = 0;
  int rc = MPI_SUCCESS;
  if (pieces > 0) {
    rc = MPI_Type_contiguous(int(max), base, &piece);
    if (rc == MPI_SUCCESS) {
      lens[k] = int(pieces);
      displs[k] = at;
      types[k++] = piece;
    }
  }
  if (rc == MPI_SUCCESS && rest > 0) {
    rc = MPI_Type_contiguous(int(rest), base, &tail);
    if (rc == MPI_SUCCESS) {
      lens[k] = 1;
      displs[k] = MPI_Aint_add(at, MPI_Aint(pieces * max * es));
      types[k++] = tail;
    }
  }
  if (rc == MPI_SUCCESS) rc = MPI_Type_create_struct(k, lens, displs, types, out);
  if (piece != MPI_DATATYPE_NULL) MPI_Type_free(&piece);
  if (tail != MPI_DATATYPE_NULL) MPI_Type_free(&tail);
  if (rc != MPI_SUCCESS) return rc;
  rc = MPI_Type_commit(out);
  if (rc != MPI_SUCCESS) MPI_Type_free(out);
  return rc;
}

// Whether MakeBlockType can describe every block of counts (n entries): at
// most INT_MAX pieces of max elements each. Only a tiny PLEXUS_DEBUG_MPI_MAX_COUNT
// makes this false for a block inside the ABI's 2^62 bytes; *what then names
// the block and the limit.
bool BlocksFit(const uint64_t* counts, uint32_t n, uint64_t max, const char* side,
               std::string* what) {
  for (uint32_t j = 0; counts && j < n; ++j) {
    if (counts[j] / max > uint64_t(INT_MAX)) {
      *what = std::string(side) + " block of rank " + std::to_string(j) + " has " +
              std::to_string(counts[j]) + " elements; MPI's int counts take at most " +
              std::to_string(INT_MAX) + " pieces of " + std::to_string(max) +
              " elements (PLEXUS_DEBUG_MPI_MAX_COUNT) per block";
      return false;
    }
  }
  return true;
}

// One side (send or receive) of an MPI_Ialltoallw: for each rank j,
// counts[j] (or count, when counts is NULL) elements at displs[j] elements
// (0 when displs is NULL) from buf.
struct WSide {
  const void* buf = nullptr;
  const uint64_t* counts = nullptr;
  uint64_t count = 0;
  const uint64_t* displs = nullptr;
  int64_t skip = -1;      // this rank's block, in place: count 0 (it stays where it is)
  bool absolute = false;  // buf goes to MPI as MPI_BOTTOM, its address in each block's type
};

// Posts one MPI_Ialltoallw moving the blocks of s to the blocks of r. A block
// goes as (count, byte displacement, element type) when its count and its
// displacement in elements are at most max_count and the byte displacement
// fits MPI_Ialltoallw's int; otherwise (or with absolute) as one element of
// a derived type that holds its count and its 64-bit byte displacement
// itself (MakeBlockType), with displacement 0. Each rank describes its own
// blocks: MPI matches a message by its type signature (so many elements of
// the element type), not by how either side laid it out.
void PostAlltoallw(Posting& p, plexus_comm* comm, MPI_Datatype type, uint64_t es, const WSide& s,
                   const WSide& r) {
  const uint32_t n = comm->size;
  const uint64_t max = comm->ctx->max_count;
  auto v = std::make_unique<VArgs>();
  v->ints.assign(size_t(4) * n, 0);  // sendcounts, sdispls, recvcounts, rdispls
  v->types.assign(size_t(2) * n, type);
  std::vector<MPI_Datatype> derived;
  const auto describe = [&](const WSide& side, uint32_t j, int* count, int* displ,
                            MPI_Datatype* t) {
    const uint64_t c = int64_t(j) == side.skip ? 0 : side.counts ? side.counts[j] : side.count;
    if (c == 0) return true;  // 0 elements of the element type at 0
    const uint64_t d = side.displs ? side.displs[j] : 0;
    if (!side.absolute && c <= max && d <= max && d * es <= uint64_t(INT_MAX)) {
      *count = int(c);
      *displ = int(d * es);
      return true;
    }
    MPI_Aint at = MPI_Aint(d * es);
    if (side.absolute) {
      MPI_Aint base = 0;
      if (!p.Check(MPI_Get_address(side.buf, &base), "MPI_Get_address")) return false;
      at = MPI_Aint_add(base, at);
    }
    MPI_Datatype block = MPI_DATATYPE_NULL;
    if (!p.Check(MakeBlockType(type, es, c, max, at, &block), "MPI_Type_create_struct")) {
      return false;
    }
    derived.push_back(block);
    *count = 1;
    *displ = 0;
    *t = block;
    return true;
  };
  int* ints = v->ints.data();
  bool ok = true;
  for (uint32_t j = 0; j < n && ok; ++j) {
    ok = describe(s, j, &ints[j], &ints[n + j], &v->types[j]) &&
         describe(r, j, &ints[2 * n + j], &ints[3 * n + j], &v->types[n + j]);
  }
  if (ok) {
    MPI_Request req = MPI_REQUEST_NULL;
    p.Add(MPI_Ialltoallw(s.absolute ? MPI_BOTTOM : s.buf, ints, ints + n, v->types.data(),
                         r.absolute ? MPI_BOTTOM : const_cast<void*>(r.buf), ints + 2 * n,
                         ints + 3 * n, v->types.data() + n, comm->mpi, &req),
          &req, "MPI_Ialltoallw");
  }
  // Allowed while the operation runs (MPI keeps what it needs); freed
  // through copies of the handles, so that the posted array stays as MPI
  // saw it.
  for (MPI_Datatype& t : derived) MPI_Type_free(&t);
  p.req().vargs = std::move(v);
}

}  // namespace

namespace {

// The buffers of an allreduce_coalesced, to be packed into one.
struct Coalesced {
  const void* const* sendbufs;
  void* const* recvbufs;
  const uint64_t* counts;
  uint32_t nbuffers;
};

// Copies the buffers of c into pack (their sum of elements of es bytes) and
// records, for each, where its result goes (req->unpack, offsets from
// req->scratch, where pack starts at pack_offset).
void Pack(const Coalesced& c, uint64_t es, uint8_t* pack, uint64_t pack_offset,
          plexus_request* req) {
  uint64_t off = 0;
  req->unpack.reserve(c.nbuffers);
  for (uint32_t i = 0; i < c.nbuffers; ++i) {
    const uint64_t bytes = c.counts[i] * es;
    if (bytes == 0) continue;
    std::memcpy(pack + off, c.sendbufs[i], bytes);
    req->unpack.push_back({c.recvbufs[i], pack_offset + off, bytes});
    off += bytes;
  }
}

// Allreduce on host memory: one AllreduceSchedule per chunk of at most
// max_count elements, each with its own tag, all started now. With packed
// (allreduce_coalesced), send and recv are ignored: the buffers are copied
// into one, behind the schedules' scratch in the request's scratch memory,
// which is then reduced in place and copied out on completion.
int32_t PostAllreduceSchedules(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                               plexus_dtype_t dtype, plexus_reduce_op_t op, plexus_request** out,
                               const Coalesced* packed = nullptr) {
  plexus_backend_ctx* ctx = comm->ctx;
  const uint64_t es = algos::DtypeSize(dtype);
  const bool in_place = packed || send == recv;
  const uint64_t max = ctx->max_count;
  const uint64_t chunks = count <= max ? 1 : (count + max - 1) / max;
  const MPI_Op mop = ToMpiOp(ctx->half_ops, dtype, op);
  const plexus::mpi::AllreduceAlgorithm algorithm = ctx->allreduce_algorithm;

  std::unique_ptr<plexus_request> req(new plexus_request);  // (not value-initialised: no memset)
  req->comm = comm;
  req->coll = packed ? PLEXUS_COLL_ALLREDUCE_COALESCED : PLEXUS_COLL_ALLREDUCE;
  req->dtype = dtype;
  req->type = ToMpiType(dtype);
  req->own_schedule = true;
  req->bytes = count * es;
  uint64_t scratch_bytes = 0;
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t n = std::min(max, count - k * max);
    scratch_bytes += AllreduceSchedule::ScratchBytes(n, dtype, comm->size, in_place, algorithm,
                                                     ctx->shared_memory);
  }
  const uint64_t pack_offset = scratch_bytes;  // a multiple of es: aligned for the elements
  if (packed) scratch_bytes += count * es;
  if (scratch_bytes) req->scratch = comm->TakeScratch(scratch_bytes, &req->scratch_capacity);
  if (packed) {
    uint8_t* pack = req->scratch.get() + pack_offset;
    Pack(*packed, es, pack, pack_offset, req.get());
    send = recv = pack;
  }
  if (op == PLEXUS_OP_AVG) {
    req->average = recv;  // (packed: before the copies out)
    req->average_count = count;
  }

  // The tags: the same sequence numbers on every rank, since every rank posts
  // the same allreduces (and so the same chunks) in the same order.
  req->schedules.reserve(chunks);  // (before the sequence numbers are taken: may throw)
  const uint64_t seq = comm->coll_seq.fetch_add(chunks);
  req->seq = seq;
  req->progress_at = std::chrono::steady_clock::now();
  int rc = MPI_SUCCESS;
  const char* call = "";
  bool finished = true;
  bool deferred = false;
  {
    // (sched_mutex before the MPI lock: it guards the tag slots.)
    std::lock_guard<std::mutex> slots(ctx->sched_mutex);
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
      a.tags = ctx->tags;
      a.slot = comm->TagSlot(seq + k);
      a.kind = TagKind(dtype, op);
      a.rank = comm->rank;
      a.size = comm->size;
      a.scratch = req->scratch ? req->scratch.get() + scratch_off : nullptr;
      a.algorithm = algorithm;
      a.shared_memory = ctx->shared_memory;
      scratch_off += AllreduceSchedule::ScratchBytes(n, dtype, comm->size, in_place, algorithm,
                                                     ctx->shared_memory);
      AllreduceSchedule* made = nullptr;
      try {
        made = &req->schedules.emplace_back(a);
        // The schedule a wrap-around of the tag slots before is still
        // running: this one and the chunks after it start later
        // (AdvanceRequest).
        deferred = deferred || !comm->TakeSlot(seq + k);
      } catch (const std::bad_alloc&) {
        // The sequence numbers are taken: out of step with the peers now,
        // as after a failed post (below).
        rc = MPI_ERR_NO_MEM;
        call = "allocating an allreduce schedule";
        break;
      }
      AllreduceSchedule& s = *made;
      if (deferred) {
        finished = false;
        continue;
      }
      rc = s.Start(&call);
      if (s.done()) comm->ReleaseSlot(seq + k);
      finished = finished && s.done();
    }
  }
  if (rc != MPI_SUCCESS) {
    int32_t code = StatusOfMpiError(rc);
    if (code == PLEXUS_OK) code = PLEXUS_ERR_SYSTEM;
    std::string message = std::string("mpi ") + algos::CollectiveName(req->coll) + ": " + call +
                          " failed: " + MpiErrorText(rc);
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
    FinishData(req.get());
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
  void* result = recv;  // where the reduced block is when the MPI calls are done
  if (count <= comm->ctx->max_count) {
    if (in_place) {
      plexus_request& req = p.req();
      req.scratch = std::make_unique_for_overwrite<uint8_t[]>(block);
      req.unpack.push_back({recv, 0, block});
      result = req.scratch.get();
    }
    MPI_Request r = MPI_REQUEST_NULL;
    p.Add(MPI_Ireduce_scatter_block(send, result, int(count), type, mop, comm->mpi, &r), &r,
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
  if (op == PLEXUS_OP_AVG) p.Average(result, count);  // (before the copy to recv)
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

// Posts the root check of a gather or scatter (plexus_request::root_check)
// ahead of the operation itself, on the same communicator, so every rank
// posts both in the same order.
bool PostRootCheck(Posting& p, plexus_comm* comm, uint32_t root) {
  if (comm->size == 1) return true;
  p.req().root = root;
  p.req().root_check.reset(new int[2]{int(root), -int(root)});
  MPI_Request r = MPI_REQUEST_NULL;
  return p.Add(
      MPI_Iallreduce(MPI_IN_PLACE, p.req().root_check.get(), 2, MPI_INT, MPI_MAX, comm->mpi, &r),
      &r, "MPI_Iallreduce (root check)");
}

int32_t PostGather(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                   plexus_dtype_t dtype, uint32_t root, plexus_request** out) {
  Posting p(comm, PLEXUS_COLL_GATHER, dtype);
  if (!PostRootCheck(p, comm, root)) return p.Finish(out);
  const uint64_t es = algos::DtypeSize(dtype), block = count * es;
  const bool is_root = comm->rank == root;
  p.req().bytes = is_root ? block * comm->size : block;
  const MPI_Datatype type = p.req().type;
  void* dst = is_root ? recv : nullptr;  // the other ranks' recvbuf is not touched
  const bool in_place =
      is_root && count > 0 && send == At(static_cast<const void*>(recv), uint64_t(root) * block);
  if (count <= comm->ctx->max_count) {
    MPI_Request r = MPI_REQUEST_NULL;
    p.Add(MPI_Igather(in_place ? MPI_IN_PLACE : send, int(count), type, dst, int(count), type,
                      int(root), comm->mpi, &r),
          &r, "MPI_Igather");
    return p.Finish(out);
  }
  ForEachChunk(count, comm->ctx->max_count, [&](uint64_t off, int n) {
    MPI_Datatype chunk = MPI_DATATYPE_NULL;
    if (!p.Check(MakeChunkType(type, n, MPI_Aint(block), &chunk), "MPI_Type_create_resized")) {
      return false;
    }
    MPI_Request r = MPI_REQUEST_NULL;
    // In place, MPI finds the root's chunk at recv + off + root * extent: the ABI's place.
    const bool posted = p.Add(MPI_Igather(in_place ? MPI_IN_PLACE : At(send, off * es), n, type,
                                          At(dst, off * es), 1, chunk, int(root), comm->mpi, &r),
                              &r, "MPI_Igather");
    MPI_Type_free(&chunk);
    return posted;
  });
  return p.Finish(out);
}

int32_t PostScatter(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                    plexus_dtype_t dtype, uint32_t root, plexus_request** out) {
  Posting p(comm, PLEXUS_COLL_SCATTER, dtype);
  if (!PostRootCheck(p, comm, root)) return p.Finish(out);
  const uint64_t es = algos::DtypeSize(dtype), block = count * es;
  const bool is_root = comm->rank == root;
  p.req().bytes = is_root ? block * comm->size : block;
  const MPI_Datatype type = p.req().type;
  const void* src = is_root ? send : nullptr;  // the other ranks' sendbuf is not read
  const bool in_place = is_root && count > 0 && recv == At(send, uint64_t(root) * block);
  if (count <= comm->ctx->max_count) {
    MPI_Request r = MPI_REQUEST_NULL;
    p.Add(MPI_Iscatter(src, int(count), type, in_place ? MPI_IN_PLACE : recv, int(count), type,
                       int(root), comm->mpi, &r),
          &r, "MPI_Iscatter");
    return p.Finish(out);
  }
  ForEachChunk(count, comm->ctx->max_count, [&](uint64_t off, int n) {
    MPI_Datatype chunk = MPI_DATATYPE_NULL;
    if (!p.Check(MakeChunkType(type, n, MPI_Aint(block), &chunk), "MPI_Type_create_resized")) {
      return false;
    }
    MPI_Request r = MPI_REQUEST_NULL;
    // In place, the root's own chunk (at send + off + root * extent) stays.
    const bool posted = p.Add(
        MPI_Iscatter(At(src, off * es), 1, chunk, in_place ? MPI_IN_PLACE : At(recv, off * es), n,
                     type, int(root), comm->mpi, &r),
        &r, "MPI_Iscatter");
    MPI_Type_free(&chunk);
    return posted;
  });
  return p.Finish(out);
}

int32_t PostAllgatherv(plexus_comm* comm, const void* send, uint64_t sendcount, void* recv,
                       const uint64_t* recvcounts, const uint64_t* displs, plexus_dtype_t dtype,
                       plexus_request** out) {
  const uint32_t n = comm->size;
  const uint64_t es = algos::DtypeSize(dtype), max = comm->ctx->max_count;
  uint64_t total = 0;
  bool ints = true;  // every count and displacement an int (at most max_count)
  for (uint32_t j = 0; j < n; ++j) {
    total += recvcounts[j];
    ints = ints && recvcounts[j] <= max && displs[j] <= max;
  }
  // The same on every rank (recvcounts and displs are), and so is the choice
  // of MPI call below.
  std::string why;
  if (!ints && !BlocksFit(recvcounts, n, max, "receive", &why)) {
    comm->SetError("mpi allgatherv: " + why);
    return PLEXUS_ERR_UNSUPPORTED;
  }
  Posting p(comm, PLEXUS_COLL_ALLGATHERV, dtype);
  p.req().bytes = total * es;
  const MPI_Datatype type = p.req().type;
  const bool in_place = recv && send == At(static_cast<const void*>(recv), displs[comm->rank] * es);
  if (ints) {
    auto v = std::make_unique<VArgs>();
    v->ints.resize(size_t(2) * n);
    for (uint32_t j = 0; j < n; ++j) {
      v->ints[j] = int(recvcounts[j]);
      v->ints[n + j] = int(displs[j]);
    }
    MPI_Request r = MPI_REQUEST_NULL;
    // sendcount == recvcounts[rank] <= max (the kit checked the first).
    p.Add(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, int(sendcount), type, recv,
                          v->ints.data(), v->ints.data() + n, type, comm->mpi, &r),
          &r, "MPI_Iallgatherv");
    p.req().vargs = std::move(v);
    return p.Finish(out);
  }
  // A count or displacement beyond MPI's int: as an all-to-all of blocks
  // whose types carry them (PostAlltoallw), this rank's block going to
  // every rank. In place this rank's own block stays, and sendbuf (inside
  // recvbuf) goes as MPI_BOTTOM plus its address, so that MPI never sees
  // one buffer as both send and receive buffer.
  WSide s, r;
  s.buf = send;
  s.count = sendcount;
  s.absolute = in_place || (send && send == recv);
  r.buf = recv;
  r.counts = recvcounts;
  r.displs = displs;
  if (in_place) s.skip = r.skip = comm->rank;
  PostAlltoallw(p, comm, type, es, s, r);
  return p.Finish(out);
}

int32_t PostAlltoallv(plexus_comm* comm, const void* send, const uint64_t* sendcounts,
                      const uint64_t* sdispls, void* recv, const uint64_t* recvcounts,
                      const uint64_t* rdispls, plexus_dtype_t dtype, plexus_request** out) {
  // Always MPI_Ialltoallw, not MPI_Ialltoallv: whether a count or a
  // displacement exceeds MPI's int is a fact of each rank's own arrays here
  // (unlike allgatherv's, which are the same on every rank), and every rank
  // must post the same MPI collective. MPI_Ialltoallw lets each rank
  // describe its own blocks, with int counts and byte displacements where
  // they fit (no derived type: as cheap as MPI_Ialltoallv, and Open MPI's
  // libnbc runs both as one send and one receive per peer) and a derived
  // type where they do not.
  const uint32_t n = comm->size;
  const uint64_t es = algos::DtypeSize(dtype), max = comm->ctx->max_count;
  std::string why;
  if (!BlocksFit(sendcounts, n, max, "send", &why) ||
      !BlocksFit(recvcounts, n, max, "receive", &why)) {
    comm->SetError("mpi alltoallv: " + why);
    return PLEXUS_ERR_UNSUPPORTED;
  }
  Posting p(comm, PLEXUS_COLL_ALLTOALLV, dtype);
  uint64_t total = 0;
  for (uint32_t j = 0; j < n; ++j) total += sendcounts[j] + recvcounts[j];
  p.req().bytes = total * es;
  WSide s, r;
  s.buf = send;
  s.counts = sendcounts;
  s.displs = sdispls;
  // One buffer holding both the send and the receive blocks (disjoint, the
  // kit checked): the send side goes as absolute addresses, so that MPI
  // never sees one buffer as both.
  s.absolute = send && send == recv;
  r.buf = recv;
  r.counts = recvcounts;
  r.displs = rdispls;
  PostAlltoallw(p, comm, p.req().type, es, s, r);
  return p.Finish(out);
}

int32_t PostAllreduceCoalesced(plexus_comm* comm, const void* const* sendbufs,
                               void* const* recvbufs, const uint64_t* counts, uint32_t nbuffers,
                               uint64_t total, plexus_dtype_t dtype, plexus_reduce_op_t op,
                               bool host_memory, plexus_request** out) {
  // Host memory: packed into one buffer, one allreduce, copied out. A DDP
  // bucket is typically many small tensors: one allreduce per buffer would
  // pay the latency of every one (recursive doubling's log2(n) rounds, or
  // the ring's 2 (n - 1), each a message per buffer) and choose each one's
  // algorithm by its own small size, where the packed one pays the rounds
  // once and runs the ring from the bucket's size. The copies in and out cost
  // two passes over the data in memory, little next to the allreduce's own
  // (and nothing is sent twice).
  const Coalesced c{sendbufs, recvbufs, counts, nbuffers};
  if (host_memory && comm->ctx->allreduce_algorithm != AllreduceAlgorithm::kMpi) {
    return PostAllreduceSchedules(comm, nullptr, nullptr, total, dtype, op, out, &c);
  }
  Posting p(comm, PLEXUS_COLL_ALLREDUCE_COALESCED, dtype);
  const uint64_t es = algos::DtypeSize(dtype), max = comm->ctx->max_count;
  p.req().bytes = total * es;
  const MPI_Datatype type = p.req().type;
  const MPI_Op mop = ToMpiOp(comm->ctx->half_ops, dtype, op);
  if (host_memory) {
    // PLEXUS_MPI_ALLREDUCE=mpi: packed the same way, MPI_Iallreduce in place.
    plexus_request& req = p.req();
    req.scratch = std::make_unique_for_overwrite<uint8_t[]>(std::max<uint64_t>(total * es, 1));
    Pack(c, es, req.scratch.get(), 0, &req);
    void* pack = req.scratch.get();
    ForEachChunk(total, max, [&](uint64_t off, int n) {
      MPI_Request r = MPI_REQUEST_NULL;
      return p.Add(MPI_Iallreduce(MPI_IN_PLACE, At(pack, off * es), n, type, mop, comm->mpi, &r),
                   &r, "MPI_Iallreduce");
    });
    if (op == PLEXUS_OP_AVG) p.Average(pack, total);  // (before the copies out)
    return p.Finish(out);
  }
  // CUDA memory (a CUDA-aware MPI): the backend does not touch device
  // memory, so no packing; one MPI_Iallreduce per buffer (and chunk), all
  // completing one request. (AVG and the 16-bit floats, which need the
  // host, are refused on CUDA memory before this.) Zero-count buffers are
  // skipped on every rank alike.
  for (uint32_t i = 0; i < nbuffers && p.ok(); ++i) {
    if (counts[i] == 0) continue;
    const bool in_place = sendbufs[i] == recvbufs[i];
    ForEachChunk(counts[i], max, [&](uint64_t off, int n) {
      MPI_Request r = MPI_REQUEST_NULL;
      const void* s = in_place ? MPI_IN_PLACE : At(sendbufs[i], off * es);
      return p.Add(MPI_Iallreduce(s, At(recvbufs[i], off * es), n, type, mop, comm->mpi, &r), &r,
                   "MPI_Iallreduce");
    });
  }
  return p.Finish(out);
}

}  // namespace plexus::mpi
