// libplexus-nccl.so: the ABI v1 table of the NCCL backend.
//
// This file is the glue between the C ABI and NCCL: it checks every argument
// (memory type, device, pointers, dtype x op), maps Plexus dtypes and ops to
// NCCL's explicitly, posts each collective on the caller's stream or the
// communicator's own one, and makes sure no C++ exception leaves through the
// ABI. Collectives NCCL lacks are built from its own calls: alltoall,
// gather, scatter, allgatherv and alltoallv from grouped ncclSend/ncclRecv,
// allreduce_coalesced from grouped ncclAllReduce, barrier from a one-word
// allreduce; comm_split is ncclCommSplit.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_api.hpp"
#include "nccl_bootstrap.hpp"
#include "nccl_comm.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/backend.h"
#include "plexus/kit/table.hpp"

struct plexus_backend_ctx {
  plexus_host_v1 host;
  const plexus::nccl::CudaApi* api = nullptr;
  int device_count = 0;
};

struct plexus_comm {
  std::shared_ptr<plexus::nccl::CommCore> core;
  // The caller's stream last found to be on this communicator's device.
  void* checked_stream = nullptr;
};

namespace plexus::nccl {
namespace {

constexpr uint32_t kAllDtypes = 0x1ffeu;  // bits 1..12
// NCCL has no 16-bit integer type: int16/uint16 move as bytes, never reduce.
constexpr uint32_t kReducibleDtypes =
    kAllDtypes & ~((1u << PLEXUS_DTYPE_INT16) | (1u << PLEXUS_DTYPE_UINT16));
constexpr uint32_t kCollectives = (1u << PLEXUS_COLL_COUNT_V1_2) - 1;  // all of 1.2

// A Plexus dtype as NCCL sees it: its type, and how many NCCL elements one
// Plexus element is (2 for the 16-bit integers, moved as bytes).
struct NcclType {
  ncclDataType_t type = ncclUint8;
  uint32_t scale = 0;  // 0: unknown dtype
  uint32_t size = 0;   // bytes of one Plexus element
  bool reducible = false;
};

NcclType MapDtype(plexus_dtype_t d) {
  switch (d) {
    case PLEXUS_DTYPE_INT8:
      return {ncclInt8, 1, 1, true};
    case PLEXUS_DTYPE_UINT8:
      return {ncclUint8, 1, 1, true};
    case PLEXUS_DTYPE_INT16:
    case PLEXUS_DTYPE_UINT16:
      return {ncclUint8, 2, 2, false};
    case PLEXUS_DTYPE_INT32:
      return {ncclInt32, 1, 4, true};
    case PLEXUS_DTYPE_UINT32:
      return {ncclUint32, 1, 4, true};
    case PLEXUS_DTYPE_INT64:
      return {ncclInt64, 1, 8, true};
    case PLEXUS_DTYPE_UINT64:
      return {ncclUint64, 1, 8, true};
    case PLEXUS_DTYPE_FLOAT16:
      return {ncclFloat16, 1, 2, true};
    case PLEXUS_DTYPE_BFLOAT16:
      return {ncclBfloat16, 1, 2, true};
    case PLEXUS_DTYPE_FLOAT32:
      return {ncclFloat32, 1, 4, true};
    case PLEXUS_DTYPE_FLOAT64:
      return {ncclFloat64, 1, 8, true};
    default:
      return {};
  }
}

// ncclAvg: integers sum then divide (truncating, as the ABI says); floats are
// scaled by 1/size before the sum (NCCL's way), exact when size is a power of
// two and within rounding of "divide after the sum" otherwise.
bool MapOp(plexus_reduce_op_t op, ncclRedOp_t* out) {
  switch (op) {
    case PLEXUS_OP_SUM:
      *out = ncclSum;
      return true;
    case PLEXUS_OP_PROD:
      *out = ncclProd;
      return true;
    case PLEXUS_OP_MIN:
      *out = ncclMin;
      return true;
    case PLEXUS_OP_MAX:
      *out = ncclMax;
      return true;
    case PLEXUS_OP_AVG:
      *out = ncclAvg;
      return true;
    default:
      return false;
  }
}

const char* DtypeText(plexus_dtype_t d) {
  static const char* const kNames[] = {"?",        "int8",    "uint8",  "int16",  "uint16",
                                       "int32",    "uint32",  "int64",  "uint64", "float16",
                                       "bfloat16", "float32", "float64"};
  return d <= PLEXUS_DTYPE_MAX_V1 ? kNames[d] : "?";
}

void LogHost(const plexus_host_v1& host, int32_t level, const std::string& message) {
  if (host.log) host.log(host.ctx, level, message.c_str());
}

int32_t Reject(plexus_comm* comm, int32_t code, const std::string& message) {
  comm->core->SetError(message);
  return code;
}

// NCCL's own checks of a placement, after the kit's (which has made sure
// it names CUDA memory): a struct of the size we know, this communicator's
// device.
int32_t CheckPlacement(plexus_comm* comm, const char* what, const plexus_placement& placement) {
  const std::string where = std::string("nccl ") + what + ": ";
  if (placement.struct_size < sizeof(plexus_placement)) {
    return Reject(
        comm, PLEXUS_ERR_INVALID_ARGUMENT,
        where + "bad placement (struct_size " + std::to_string(placement.struct_size) + ")");
  }
  if (placement.device >= 0 && placement.device != comm->core->device()) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  where + "placement names CUDA device " + std::to_string(placement.device) +
                      " but this communicator uses device " + std::to_string(comm->core->device()));
  }
  return PLEXUS_OK;
}

int32_t CheckReduction(plexus_comm* comm, const char* what, plexus_dtype_t dtype,
                       plexus_reduce_op_t op, ncclRedOp_t* nccl_op) {
  if (!MapOp(op, nccl_op)) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  std::string("nccl ") + what + ": unknown reduce op code " + std::to_string(op));
  }
  if (!MapDtype(dtype).reducible) {
    return Reject(comm, PLEXUS_ERR_UNSUPPORTED,
                  std::string("nccl ") + what + ": NCCL has no " + DtypeText(dtype) +
                      " type, so it cannot reduce " + DtypeText(dtype) +
                      " (collectives that only move data take it; reduce it as int32, or on "
                      "another backend)");
  }
  return PLEXUS_OK;
}

// A buffer the caller says is CUDA memory: is it, and on our device? Called
// with the post mutex held (the pointer cache lives under it).
int32_t CheckBuffer(plexus_comm* comm, const char* what, const char* role, const void* p) {
  CommCore& c = *comm->core;
  if (c.KnownDevicePointer(p)) return PLEXUS_OK;
  const std::string where = std::string("nccl ") + what + ": " + role + " ";
  char addr[32];
  std::snprintf(addr, sizeof addr, "%p", p);
  cudaPointerAttributes attr{};
  const cudaError_t e = c.api().PointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    c.api().GetLastError();
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  where + addr + " is not a valid pointer (cudaPointerGetAttributes: " +
                      c.api().GetErrorString(e) + ")");
  }
  if (attr.type == cudaMemoryTypeUnregistered || attr.type == cudaMemoryTypeHost) {
    return Reject(comm, PLEXUS_ERR_UNSUPPORTED,
                  where + addr +
                      " is host memory, which NCCL does not read or write (this backend "
                      "moves CUDA device memory only)");
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != c.device()) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  where + addr + " is on CUDA device " + std::to_string(attr.device) +
                      "; this communicator uses device " + std::to_string(c.device()));
  }
  c.RememberDevicePointer(p);
  return PLEXUS_OK;
}

struct Buffer {
  const char* role;
  const void* ptr;
};

// What Post needs to name an operation in an error: op, seq, count, dtype,
// root or peer (built only on failure).
struct OpInfo {
  const char* what;
  uint64_t count;
  plexus_dtype_t dtype;
  int64_t root = -1;  // root (broadcast, reduce) or peer (send, recv); -1: none
  bool is_peer = false;
};

std::string Describe(const OpInfo& op, uint64_t seq) {
  std::string text = std::string("nccl ") + op.what + " #" + std::to_string(seq) + " (" +
                     std::to_string(op.count) + " x " + DtypeText(op.dtype);
  if (op.root >= 0) text += (op.is_peer ? ", peer " : ", root ") + std::to_string(op.root);
  return text + ")";
}

// A send or recv to queue instead of enqueueing at once (nccl_comm.hpp).
struct P2PArgs {
  bool is_send;
  void* buf;
  size_t count;  // NCCL elements
  ncclDataType_t type;
  int peer;
};

// Posts one operation: under the post mutex, checks the buffers and the
// stream, takes an event, then either queues it (point-to-point: launched
// with the others of its group, nccl_comm.hpp) or, after launching what is
// queued and letting a call NCCL still completes in the background settle,
// runs enqueue (the NCCL calls; none for count 0) and records the event.
// When NCCL says ncclInProgress (every call with work at world size >= 2),
// the call is settled here before returning, so that a returned post means
// "enqueued on the stream": work the caller then queues on the same stream
// runs after it. No copy, no host sync.
template <typename Enqueue>
int32_t Post(plexus_comm* comm, const OpInfo& op, const plexus_placement* placement,
             std::span<const Buffer> buffers, const P2PArgs* p2p, Enqueue&& enqueue,
             plexus_request** req_out) {
  CommCore& c = *comm->core;
  const CudaApi& api = c.api();
  const char* what = op.what;
  auto req = std::make_unique<plexus_request>();
  req->core = comm->core;
  req->op = what;
  // NCCL and the events need the communicator's device current, whatever
  // thread posts (and without making a context on GPU 0: DeviceGuard).
  DeviceGuard device(api, c.device());
  std::unique_lock<std::mutex> lock(c.post_mutex());
  std::string why;
  if (const int32_t f = c.Failure(&why)) {
    return Reject(comm, f, std::string("nccl ") + what + ": the communicator has failed: " + why);
  }
  const ncclComm_t nc = c.nccl_locked();
  if (!nc) {
    return Reject(comm, PLEXUS_ERR_ABORTED, std::string("nccl ") + what + ": aborted");
  }
  if (device.result() != cudaSuccess) {
    return Reject(comm, PLEXUS_ERR_SYSTEM,
                  std::string("nccl ") + what + ": cudaSetDevice(" + std::to_string(c.device()) +
                      "): " + api.GetErrorString(device.result()));
  }
  req->seq = c.NextSeq();
  req->posted_ns = NowNs();
  // count 0 is a real operation in the posting order (ABI) but touches no
  // buffer: they may be NULL, and are not checked.
  if (op.count > 0) {
    for (const Buffer& b : buffers) {
      if (b.ptr) {
        const int32_t rc = CheckBuffer(comm, what, b.role, b.ptr);
        if (rc != PLEXUS_OK) return rc;
      }
    }
  }
  auto stream = static_cast<cudaStream_t>(placement ? placement->stream : nullptr);
  if (!stream) {
    stream = c.own_stream();
  } else {
    req->stream_ordered = true;  // complete = enqueued on it (nccl_comm.hpp)
    if (stream != comm->checked_stream && api.StreamGetDevice) {
      int dev = -1;
      const cudaError_t e = api.StreamGetDevice(stream, &dev);
      if (e != cudaSuccess || dev != c.device()) {
        if (e != cudaSuccess) api.GetLastError();
        return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                      std::string("nccl ") + what + ": the placement's stream " +
                          (e != cudaSuccess ? std::string("is not a valid stream (") +
                                                  api.GetErrorString(e) + ")"
                                            : "belongs to CUDA device " + std::to_string(dev)) +
                          "; this communicator uses device " + std::to_string(c.device()));
      }
      comm->checked_stream = stream;
    }
  }
  cudaEvent_t event = nullptr;
  if (!c.AcquireEvent(&event, &why)) {
    return Reject(comm, PLEXUS_ERR_SYSTEM, Describe(op, req->seq) + ": " + why);
  }
  req->event = event;  // given back by ~plexus_request on every path below

  if (p2p) {
    // Checked and tracked now; the NCCL call comes with the group launch
    // (none for count 0: its event is recorded with the group, in order).
    c.QueueP2PLocked({{req.get(), stream},
                      p2p->is_send,
                      p2p->buf,
                      p2p->count,
                      p2p->type,
                      p2p->peer,
                      op.count,
                      DtypeText(op.dtype)});
    *req_out = req.release();
    return PLEXUS_OK;
  }
  // Stream order: the queued sends/recvs were posted first, so they go first;
  // and NCCL takes no new call while one is still in progress. Both wait
  // here, bounded by the timeout and ended by comm_abort.
  int32_t rc = c.LaunchQueuedLocked(true, &why);
  if (rc == PLEXUS_OK) rc = c.SettleLocked(true, &why);
  if (rc != PLEXUS_OK) {
    return Reject(comm, rc,
                  Describe(op, req->seq) + ": could not be posted: " +
                      (rc == PLEXUS_ERR_ABORTED ? std::string("aborted") : why));
  }
  const CommCore::Pending pending{req.get(), stream};
  const int64_t start = NowNs();
  ncclResult_t r = ncclSuccess;
  if (op.count > 0) {
    CommCore::MarkHanded(&pending, 1);
    r = enqueue(nc, stream);
  }
  rc = c.AfterCallLocked(r, &pending, 1, start,
                         r == ncclSuccess ? std::string() : Describe(op, req->seq), &why);
  if (rc != PLEXUS_OK) return Reject(comm, rc, why);
  if (r == ncclInProgress) {
    // Settled before returning (see above). If that fails (timeout, NCCL
    // error, comm_abort), the communicator is aborted; the operation was
    // handed to NCCL all the same, so the post stands: test/wait report the
    // failure once NCCL has let go of the buffers.
    c.SettleLocked(true, &why);
  }
  *req_out = req.release();
  return PLEXUS_OK;
}

template <typename Enqueue>
int32_t Post(plexus_comm* comm, const OpInfo& op, const plexus_placement* placement,
             std::initializer_list<Buffer> buffers, const P2PArgs* p2p, Enqueue&& enqueue,
             plexus_request** req_out) {
  return Post(comm, op, placement, std::span<const Buffer>(buffers.begin(), buffers.size()), p2p,
              std::forward<Enqueue>(enqueue), req_out);
}

// One NCCL group: NCCL only records the calls made between ncclGroupStart
// and ncclGroupEnd and launches them together, so that the sends and
// receives of a collective built from them progress at once (and
// allreduce_coalesced's allreduces are fused). body(issue) makes the calls,
// each as issue([&] { return api.Send(...); }); after the first failure the
// rest are skipped. A non-blocking communicator may say ncclInProgress for a
// call inside a group, which is no failure: ncclGroupEnd's result covers the
// launch. The group is always closed.
template <typename Body>
ncclResult_t InGroup(const CudaApi& api, Body&& body) {
  ncclResult_t r = api.GroupStart();
  if (r != ncclSuccess) return r;
  ncclResult_t first = ncclSuccess;
  const auto issue = [&first](auto&& call) {
    if (first != ncclSuccess) return;
    const ncclResult_t x = call();
    if (x != ncclSuccess && x != ncclInProgress) first = x;
  };
  body(issue);
  r = api.GroupEnd();
  return first != ncclSuccess ? first : r;
}

// ---------------------------------------------------------------- lifecycle

// ---------------------------------------------------------------- collectives

// Each collective's NCCL call, once the kit and CheckPlacement have passed
// it: the reduction NCCL can do, then Post (which checks the buffers are
// device memory of this device and the stream is on it).
int32_t PostCall(plexus_comm* comm, const kit::Call& call, plexus_request** req_out) {
  const char* what = algos::CollectiveName(call.coll);
  CommCore& core = *comm->core;
  if (call.coll == PLEXUS_COLL_BARRIER) {
    // A one-word allreduce on the communicator's own stream: it cannot finish
    // on any rank before every rank has posted it.
    void* word = core.scratch();
    return Post(
        comm, {"barrier", 1, PLEXUS_DTYPE_INT32}, nullptr, {}, nullptr,
        [&](ncclComm_t nc, cudaStream_t s) {
          return core.api().AllReduce(word, word, 1, ncclInt32, ncclSum, nc, s);
        },
        req_out);
  }
  if (const int32_t rc = CheckPlacement(comm, what, *call.placement); rc != PLEXUS_OK) return rc;
  const bool reduces = kit::IsReduction(call.coll);
  ncclRedOp_t nop{};
  if (reduces) {
    if (const int32_t rc = CheckReduction(comm, what, call.dtype, call.op, &nop); rc != PLEXUS_OK) {
      return rc;
    }
  }
  const NcclType t = MapDtype(call.dtype);
  const void* sendbuf = call.sendbuf;
  void* recvbuf = call.recvbuf;
  const uint64_t count = call.count;
  const uint32_t root = call.root;
  const plexus_placement* placement = call.placement;
  switch (call.coll) {
    case PLEXUS_COLL_ALLREDUCE:
      return Post(
          comm, {"allreduce", count, call.dtype}, placement,
          {{"sendbuf", sendbuf}, {"recvbuf", recvbuf}}, nullptr,
          [&](ncclComm_t nc, cudaStream_t s) {
            return core.api().AllReduce(sendbuf, recvbuf, count, t.type, nop, nc, s);
          },
          req_out);
    case PLEXUS_COLL_BROADCAST:
      return Post(
          comm, {"broadcast", count, call.dtype, int64_t(root)}, placement, {{"buf", recvbuf}},
          nullptr,
          [&](ncclComm_t nc, cudaStream_t s) {
            return core.api().Broadcast(recvbuf, recvbuf, count * t.scale, t.type, int(root), nc,
                                        s);
          },
          req_out);
    case PLEXUS_COLL_REDUCE: {
      const bool is_root = core.rank() == root;
      // Off the root NCCL never touches recvbuff; the ABI lets it be NULL there.
      void* recv = is_root ? recvbuf : const_cast<void*>(sendbuf);
      return Post(
          comm, {"reduce", count, call.dtype, int64_t(root)}, placement,
          {{"sendbuf", sendbuf}, {"recvbuf", is_root ? recvbuf : nullptr}}, nullptr,
          [&](ncclComm_t nc, cudaStream_t s) {
            return core.api().Reduce(sendbuf, recv, count, t.type, nop, int(root), nc, s);
          },
          req_out);
    }
    case PLEXUS_COLL_ALLGATHER:
      return Post(
          comm, {"allgather", count, call.dtype}, placement,
          {{"sendbuf", sendbuf}, {"recvbuf", recvbuf}}, nullptr,
          [&](ncclComm_t nc, cudaStream_t s) {
            return core.api().AllGather(sendbuf, recvbuf, count * t.scale, t.type, nc, s);
          },
          req_out);
    case PLEXUS_COLL_REDUCE_SCATTER:
      return Post(
          comm, {"reduce_scatter", count, call.dtype}, placement,
          {{"sendbuf", sendbuf}, {"recvbuf", recvbuf}}, nullptr,
          [&](ncclComm_t nc, cudaStream_t s) {
            return core.api().ReduceScatter(sendbuf, recvbuf, count, t.type, nop, nc, s);
          },
          req_out);
    case PLEXUS_COLL_ALLTOALL: {
      const uint32_t n = core.size();
      const uint64_t block = count * t.size;
      const size_t elems = count * t.scale;
      const auto* s8 = static_cast<const uint8_t*>(sendbuf);
      auto* r8 = static_cast<uint8_t*>(recvbuf);
      // NCCL has no alltoall: one group of a send and a receive per rank
      // (itself included), which NCCL runs as a single launch.
      return Post(
          comm, {"alltoall", count, call.dtype}, placement,
          {{"sendbuf", sendbuf}, {"recvbuf", recvbuf}}, nullptr,
          [&](ncclComm_t nc, cudaStream_t s) {
            const CudaApi& api = core.api();
            return InGroup(api, [&](const auto& issue) {
              for (uint32_t peer = 0; peer < n; ++peer) {
                issue([&] { return api.Send(s8 + peer * block, elems, t.type, int(peer), nc, s); });
                issue([&] { return api.Recv(r8 + peer * block, elems, t.type, int(peer), nc, s); });
              }
            });
          },
          req_out);
    }
    // The collectives of ABI 1.2 that NCCL lacks: grouped ncclSend/ncclRecv
    // (a rank sends to and receives from itself like from any other rank,
    // except in place, where its own block stays where it is). The arrays
    // of the v-collectives are only read here, during the post: everything
    // is handed to NCCL before it returns, so there is nothing to copy.
    case PLEXUS_COLL_GATHER: {
      const uint32_t n = core.size();
      const bool is_root = core.rank() == root;
      const uint64_t block = count * t.size;
      const size_t elems = count * t.scale;
      auto* r8 = static_cast<uint8_t*>(recvbuf);
      const bool in_place =
          is_root && static_cast<const uint8_t*>(sendbuf) == r8 + uint64_t(root) * block;
      return Post(
          comm, {"gather", count, call.dtype, int64_t(root)}, placement,
          {{"sendbuf", sendbuf}, {"recvbuf", is_root ? recvbuf : nullptr}}, nullptr,
          [&](ncclComm_t nc, cudaStream_t s) {
            const CudaApi& api = core.api();
            return InGroup(api, [&](const auto& issue) {
              if (!in_place) {
                issue([&] { return api.Send(sendbuf, elems, t.type, int(root), nc, s); });
              }
              for (uint32_t j = 0; is_root && j < n; ++j) {
                if (j == root && in_place) continue;
                issue([&] { return api.Recv(r8 + j * block, elems, t.type, int(j), nc, s); });
              }
            });
          },
          req_out);
    }
    case PLEXUS_COLL_SCATTER: {
      const uint32_t n = core.size();
      const bool is_root = core.rank() == root;
      const uint64_t block = count * t.size;
      const size_t elems = count * t.scale;
      const auto* s8 = static_cast<const uint8_t*>(sendbuf);
      const bool in_place =
          is_root && static_cast<const uint8_t*>(recvbuf) == s8 + uint64_t(root) * block;
      return Post(
          comm, {"scatter", count, call.dtype, int64_t(root)}, placement,
          {{"sendbuf", is_root ? sendbuf : nullptr}, {"recvbuf", recvbuf}}, nullptr,
          [&](ncclComm_t nc, cudaStream_t s) {
            const CudaApi& api = core.api();
            return InGroup(api, [&](const auto& issue) {
              for (uint32_t j = 0; is_root && j < n; ++j) {
                if (j == root && in_place) continue;
                issue([&] { return api.Send(s8 + j * block, elems, t.type, int(j), nc, s); });
              }
              if (!in_place) {
                issue([&] { return api.Recv(recvbuf, elems, t.type, int(root), nc, s); });
              }
            });
          },
          req_out);
    }
    case PLEXUS_COLL_ALLGATHERV: {
      const uint32_t n = core.size(), me = core.rank();
      const uint64_t* counts = call.recvcounts;
      const uint64_t* displs = call.rdispls;
      uint64_t total = 0;  // the same on every rank: all skip NCCL when it is 0
      for (uint32_t j = 0; j < n; ++j) total += counts[j];
      auto* r8 = static_cast<uint8_t*>(recvbuf);
      const bool in_place = r8 && static_cast<const uint8_t*>(sendbuf) == r8 + displs[me] * t.size;
      return Post(
          comm, {"allgatherv", total, call.dtype}, placement,
          {{"sendbuf", count > 0 ? sendbuf : nullptr}, {"recvbuf", recvbuf}}, nullptr,
          [&](ncclComm_t nc, cudaStream_t s) {
            const CudaApi& api = core.api();
            return InGroup(api, [&](const auto& issue) {
              for (uint32_t j = 0; j < n; ++j) {
                if (j == me && in_place) continue;
                if (count > 0) {
                  issue([&] { return api.Send(sendbuf, count * t.scale, t.type, int(j), nc, s); });
                }
                if (counts[j] > 0) {
                  issue([&] {
                    return api.Recv(r8 + displs[j] * t.size, counts[j] * t.scale, t.type, int(j),
                                    nc, s);
                  });
                }
              }
            });
          },
          req_out);
    }
    case PLEXUS_COLL_ALLTOALLV: {
      const uint32_t n = core.size();
      uint64_t sent = 0, received = 0;
      for (uint32_t j = 0; j < n; ++j) {
        sent += call.sendcounts[j];
        received += call.recvcounts[j];
      }
      const auto* s8 = static_cast<const uint8_t*>(sendbuf);
      auto* r8 = static_cast<uint8_t*>(recvbuf);
      // A rank with nothing to send or receive makes no NCCL call; its peers
      // expect nothing from it either (their counts agree with its own).
      return Post(
          comm, {"alltoallv", sent + received, call.dtype}, placement,
          {{"sendbuf", sent > 0 ? sendbuf : nullptr},
           {"recvbuf", received > 0 ? recvbuf : nullptr}},
          nullptr,
          [&](ncclComm_t nc, cudaStream_t s) {
            const CudaApi& api = core.api();
            return InGroup(api, [&](const auto& issue) {
              for (uint32_t j = 0; j < n; ++j) {
                if (call.sendcounts[j] > 0) {
                  issue([&] {
                    return api.Send(s8 + call.sdispls[j] * t.size, call.sendcounts[j] * t.scale,
                                    t.type, int(j), nc, s);
                  });
                }
                if (call.recvcounts[j] > 0) {
                  issue([&] {
                    return api.Recv(r8 + call.rdispls[j] * t.size, call.recvcounts[j] * t.scale,
                                    t.type, int(j), nc, s);
                  });
                }
              }
            });
          },
          req_out);
    }
    case PLEXUS_COLL_ALLREDUCE_COALESCED: {
      // One ncclAllReduce per buffer in one group: NCCL fuses a group's
      // collectives into as few launches as it can, so the bucket costs
      // about what one allreduce of its size does, without a packing copy.
      // Every buffer's pointers are checked like allreduce's.
      std::vector<Buffer> buffers;
      buffers.reserve(size_t(2) * call.nbuffers);
      for (uint32_t i = 0; i < call.nbuffers; ++i) {
        if (call.counts[i] == 0) continue;
        buffers.push_back({"sendbufs[i]", call.sendbufs[i]});
        if (call.recvbufs[i] != call.sendbufs[i])
          buffers.push_back({"recvbufs[i]", call.recvbufs[i]});
      }
      return Post(
          comm, {"allreduce_coalesced", count, call.dtype}, placement, buffers, nullptr,
          [&](ncclComm_t nc, cudaStream_t s) {
            const CudaApi& api = core.api();
            return InGroup(api, [&](const auto& issue) {
              for (uint32_t i = 0; i < call.nbuffers; ++i) {
                if (call.counts[i] == 0) continue;
                issue([&] {
                  return api.AllReduce(call.sendbufs[i], call.recvbufs[i], call.counts[i], t.type,
                                       nop, nc, s);
                });
              }
            });
          },
          req_out);
    }
    default: {  // send, recv
      const bool is_send = call.coll == PLEXUS_COLL_SEND;
      void* buf = is_send ? const_cast<void*>(sendbuf) : recvbuf;
      const P2PArgs args{is_send, buf, size_t(count * t.scale), t.type, int(root)};
      return Post(
          comm, {what, count, call.dtype, int64_t(root), true}, placement, {{"buf", buf}}, &args,
          [](ncclComm_t, cudaStream_t) { return ncclInternalError; },  // never called: queued
          req_out);
    }
  }
}

struct NcclRequests {
  static int32_t Test(plexus_request& req) {
    DeviceGuard device(req.core->api(), req.core->device());
    return PollRequest(&req, true);
  }
  static int32_t Wait(plexus_request& req, int64_t timeout_ms) {
    DeviceGuard device(req.core->api(), req.core->device());
    return WaitRequest(&req, timeout_ms);
  }
  static int32_t Free(plexus_request* req) {
    {
      std::lock_guard<std::mutex> lock(req->mutex);
      if (req->status == PLEXUS_IN_PROGRESS) return PLEXUS_ERR_INVALID_USAGE;
    }
    delete req;
    return PLEXUS_OK;
  }
  static size_t Error(plexus_request& req, char* buf, size_t len) {
    std::lock_guard<std::mutex> lock(req.mutex);
    kit::CopyOut(req.error, buf, len);
    return req.error.size();
  }
};

// "0.1.0 (NCCL 2.28.9, CUDA runtime 13.0, CUDA driver 13.0)": what this
// process loaded, filled by the entry function on its first call (which
// loads the libraries, touching no device); static storage. The driver's
// version says "not asked yet" where libcuda was loaded before us (see
// cuda_api.cpp: the entry function also runs in the host's forked probe);
// init's log line has it then.
char g_version[256] = PLEXUS_VERSION_STRING " (NCCL not loaded)";

struct NcclBackend {
  static constexpr const char* kName = "nccl";
  static constexpr uint32_t kCollectives = nccl::kCollectives;
  using Requests = NcclRequests;

  static const char* Version() {
    static std::once_flag once;
    std::call_once(once, [] {
      try {
        std::string why;
        const CudaApi* api = LoadCudaApi(&why);
        const std::string text =
            std::string(PLEXUS_VERSION_STRING) + " (" +
            (api ? "NCCL " + NcclVersionText(api->nccl_version) + ", CUDA runtime " +
                       CudaVersionText(api->runtime_version) + ", CUDA driver " +
                       CudaVersionText(api->driver_version)
                 : "unusable: " + why) +
            ")";
        std::snprintf(g_version, sizeof g_version, "%s", text.c_str());
      } catch (...) {
      }
    });
    return g_version;
  }

  static int32_t Init(const plexus_host_v1& host, plexus_backend_ctx** ctx_out) {
    // A host without the out-of-band functions cannot run NCCL's bootstrap.
    // It is also what the host's plugin probe passes, in a child fork()ed
    // without exec (core's RunProbeChild): refusing before any CUDA call
    // keeps CUDA out of that child, where it is undefined once the parent
    // has initialised CUDA. Nothing above this line may call CUDA.
    if (!host.oob_allgather || !host.oob_broadcast) return PLEXUS_ERR_INVALID_ARGUMENT;
    try {
      std::string why;
      const CudaApi* api = LoadCudaApi(&why);
      if (!api) {
        LogHost(host, PLEXUS_LOG_INFO, "nccl: " + why);  // quoted by the host when it refuses us
        return PLEXUS_ERR_UNSUPPORTED;
      }
      auto ctx = std::make_unique<plexus_backend_ctx>();
      ctx->host = host;
      ctx->api = api;
      // Whether this process sees a GPU: decides the memory types the
      // capabilities offer. Safe without a driver (libcuda): the runtime then
      // returns cudaErrorInsufficientDriver or cudaErrorNoDevice.
      int count = 0;
      const cudaError_t e = api->GetDeviceCount(&count);
      if (e != cudaSuccess) {
        api->GetLastError();
        count = 0;
      }
      ctx->device_count = count;
      LogHost(host, PLEXUS_LOG_INFO,
              "NCCL " + NcclVersionText(api->nccl_version) + " (" + api->nccl_path +
                  "), CUDA runtime " + CudaVersionText(api->runtime_version) + " (" +
                  api->cudart_path + "), CUDA driver " + CudaVersionText(DriverVersion(*api)) +
                  ", " + std::to_string(count) + " CUDA device(s)");
      // Logged last, at INFO so that CPU jobs do not print it: the host quotes
      // it as the reason this backend
      // is unusable here (plexus-info, automatic selection).
      if (count == 0) {
        LogHost(host, PLEXUS_LOG_INFO,
                "no CUDA device in this process (cudaGetDeviceCount: " +
                    (e != cudaSuccess
                         ? std::string(api->GetErrorName(e)) + ": " + api->GetErrorString(e)
                         : std::string("0 devices")) +
                    "); this backend cannot create communicators here");
      }
      *ctx_out = ctx.release();
      return PLEXUS_OK;
    } catch (...) {
      return PLEXUS_ERR_SYSTEM;
    }
  }

  static void Finalize(plexus_backend_ctx* ctx) {
    delete ctx;  // the libraries stay loaded: NCCL and CUDA are not made to be unloaded
  }

  static void Capabilities(plexus_backend_ctx& ctx, plexus_capabilities& caps) {
    caps.collectives = kCollectives;
    // CUDA memory only, and only where there is a device: without one this
    // backend can move no memory at all in this process (the host then
    // reports it as unusable here, with init's reason).
    caps.memory_types = ctx.device_count > 0 ? 1u << PLEXUS_MEMORY_CUDA : 0u;
    caps.dtypes = kAllDtypes;
    for (uint32_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op)
      caps.reduce_dtypes[op] = kReducibleDtypes;
    caps.flags = PLEXUS_CAP_IN_PLACE | PLEXUS_CAP_STREAM_ORDERED | PLEXUS_CAP_ABORT;
    caps.thread_level = PLEXUS_THREAD_MULTIPLE;
  }

  static int32_t CommCreate(plexus_backend_ctx& ctx, const plexus_comm_config_v1& config,
                            plexus_comm** comm_out, std::string* error) {
    if (config.size > uint32_t(INT32_MAX)) {
      *error = "nccl comm_create: " + std::to_string(config.size) + " ranks; NCCL takes an int";
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    auto comm = std::make_unique<plexus_comm>();
    const int32_t rc = CreateCommunicator(*ctx.api, ctx.host, config, &comm->core, error);
    if (rc != PLEXUS_OK) {
      *error = "nccl comm_create: " + *error;
      return rc;
    }
    *comm_out = comm.release();
    return PLEXUS_OK;
  }

#if PLEXUS_NCCL_HAS_SPLIT
  // ncclCommSplit (nccl_bootstrap.cpp): the new communicator on the parent's
  // device, with its own NCCL communicator, stream, events and requests.
  static int32_t CommSplit(plexus_comm& comm, uint32_t color, uint32_t key,
                           const plexus_comm_config_v1* config, plexus_comm** comm_out,
                           std::string* error) {
    if (config && config->size > uint32_t(INT32_MAX)) {
      *error = "nccl comm_split: " + std::to_string(config->size) + " ranks; NCCL takes an int";
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    auto child = std::make_unique<plexus_comm>();
    const int32_t rc =
        SplitCommunicator(comm.core->api(), *comm.core, color, key, config, &child->core, error);
    if (rc != PLEXUS_OK) {
      *error = "nccl " + *error;
      return rc;
    }
    *comm_out = child->core ? child.release() : nullptr;
    return PLEXUS_OK;
  }
#endif

  static void CommDestroy(plexus_comm* comm) {
    if (comm->core) {
      // Finalize + destroy when healthy (flushes what NCCL still runs: with
      // complete = enqueued, a caller-stream kernel may still be on the
      // GPU), bounded by min(timeout, 5 s); abort when broken or overrun
      // (CommCore::Destroy). Never waits on a dead peer beyond that bound.
      comm->core->Destroy();
    }
    delete comm;  // the core lives on while a (leaked) request holds it
  }
  static void CommAbort(plexus_comm& comm) {
    comm.core->Abort(PLEXUS_ERR_ABORTED, "aborted by comm_abort");
  }
  static kit::ErrorSlot& Errors(plexus_comm& comm) {
    return comm.core->errors();
  }
  static kit::CommShape Shape(const plexus_comm& comm) {
    return {comm.core->rank(), comm.core->size()};
  }
  static uint32_t MemoryTypes(const plexus_comm&) {
    return 1u << PLEXUS_MEMORY_CUDA;
  }
  static int32_t Post(plexus_comm& comm, const kit::Call& call, plexus_request** req_out) {
    return PostCall(&comm, call, req_out);
  }
};

}  // namespace
}  // namespace plexus::nccl

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** table_out) {
  return plexus::kit::HandOutTable<plexus::nccl::NcclBackend>(host_abi_minor, table_out);
}
