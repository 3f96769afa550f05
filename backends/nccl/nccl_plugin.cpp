// libplexus-nccl.so: the ABI v1 table of the NCCL backend.
//
// This file is the glue between the C ABI and NCCL: it checks every argument
// (memory type, device, pointers, dtype x op), maps Plexus dtypes and ops to
// NCCL's explicitly, posts each collective on the caller's stream or the
// communicator's own one, and makes sure no C++ exception leaves through the
// ABI. Collectives NCCL lacks are built from its own calls: alltoall from
// grouped ncclSend/ncclRecv, barrier from a one-word allreduce.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "cuda_api.hpp"
#include "nccl_bootstrap.hpp"
#include "nccl_comm.hpp"
#include "plexus/backend.h"

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
constexpr uint32_t kCollectives = (1u << PLEXUS_COLL_COUNT_V1) - 1;  // all of v1

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

void WriteError(char* buf, size_t len, const std::string& message) {
  if (!buf || len == 0) return;
  const size_t n = std::min(len - 1, message.size());
  message.copy(buf, n);
  buf[n] = '\0';
}

int32_t Reject(plexus_comm* comm, int32_t code, const std::string& message) {
  comm->core->SetError(message);
  return code;
}

template <typename Fn>
int32_t Guarded(plexus_comm* comm, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    if (comm && comm->core) comm->core->SetError("nccl: out of memory");
    return PLEXUS_ERR_SYSTEM;
  } catch (const std::exception& e) {
    if (comm && comm->core) comm->core->SetError(std::string("nccl: internal error: ") + e.what());
    return PLEXUS_ERR_INTERNAL;
  } catch (...) {
    return PLEXUS_ERR_INTERNAL;
  }
}

// What every data collective checks before posting: the request pointer,
// the dtype, CUDA memory of this communicator's device, the count.
int32_t CheckCommon(plexus_comm* comm, const char* what, uint64_t count, plexus_dtype_t dtype,
                    const plexus_placement* placement, plexus_request** req_out,
                    uint64_t blocks = 1) {
  if (!comm || !comm->core) return PLEXUS_ERR_INVALID_ARGUMENT;
  const std::string where = std::string("nccl ") + what + ": ";
  if (!req_out) return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, where + "req_out is NULL");
  *req_out = nullptr;
  const NcclType t = MapDtype(dtype);
  if (t.scale == 0) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  where + "unknown dtype code " + std::to_string(dtype));
  }
  if (!placement || placement->memory_type == PLEXUS_MEMORY_HOST) {
    return Reject(comm, PLEXUS_ERR_UNSUPPORTED,
                  where +
                      "host memory is not supported: NCCL reads and writes CUDA device memory "
                      "only (pass a placement with memory type CUDA, or use another backend "
                      "for host buffers)");
  }
  if (placement->struct_size < sizeof(plexus_placement) ||
      placement->memory_type != PLEXUS_MEMORY_CUDA) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  where + "bad placement (memory type " + std::to_string(placement->memory_type) +
                      ", struct_size " + std::to_string(placement->struct_size) + ")");
  }
  if (placement->device >= 0 && placement->device != comm->core->device()) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  where + "placement names CUDA device " + std::to_string(placement->device) +
                      " but this communicator uses device " + std::to_string(comm->core->device()));
  }
  if (count > (uint64_t(1) << 62) / t.size / blocks) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  where + "count " + std::to_string(count) + " is too large");
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
             std::initializer_list<Buffer> buffers, const P2PArgs* p2p, Enqueue&& enqueue,
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

// ---------------------------------------------------------------- lifecycle

int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** ctx_out) {
  // A host without the out-of-band functions cannot run NCCL's bootstrap.
  // It is also what the host's plugin probe passes, in a child fork()ed
  // without exec (plugins/backend_calls.cpp RunProbeChild): refusing before
  // any CUDA call keeps CUDA out of that child, where it is undefined once
  // the parent has initialised CUDA. Nothing above this line may call CUDA.
  if (!host || !ctx_out || host->struct_size < sizeof(plexus_host_v1) || !host->oob_allgather ||
      !host->oob_broadcast) {
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  try {
    std::string why;
    const CudaApi* api = LoadCudaApi(&why);
    if (!api) {
      LogHost(*host, PLEXUS_LOG_INFO, "nccl: " + why);  // quoted by the host when it refuses us
      return PLEXUS_ERR_UNSUPPORTED;
    }
    auto ctx = std::make_unique<plexus_backend_ctx>();
    ctx->host = *host;
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
    LogHost(*host, PLEXUS_LOG_INFO,
            "NCCL " + NcclVersionText(api->nccl_version) + " (" + api->nccl_path +
                "), CUDA runtime " + CudaVersionText(api->runtime_version) + " (" +
                api->cudart_path + "), CUDA driver " + CudaVersionText(DriverVersion(*api)) + ", " +
                std::to_string(count) + " CUDA device(s)");
    // Logged last, at INFO so that CPU jobs do not print it: the host quotes
    // it as the reason this backend
    // is unusable here (plexus-info, automatic selection).
    if (count == 0) {
      LogHost(
          *host, PLEXUS_LOG_INFO,
          "no CUDA device in this process (cudaGetDeviceCount: " +
              (e != cudaSuccess ? std::string(api->GetErrorName(e)) + ": " + api->GetErrorString(e)
                                : std::string("0 devices")) +
              "); this backend cannot create communicators here");
    }
    *ctx_out = ctx.release();
    return PLEXUS_OK;
  } catch (...) {
    return PLEXUS_ERR_SYSTEM;
  }
}

void Finalize(plexus_backend_ctx* ctx) {
  delete ctx;  // the libraries stay loaded: NCCL and CUDA are not made to be unloaded
}

int32_t GetCapabilities(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
  if (!ctx || !caps || caps->struct_size < sizeof(plexus_capabilities)) {
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  const uint32_t size = caps->struct_size;
  std::memset(caps, 0, sizeof *caps);
  caps->struct_size = size;
  caps->collectives = kCollectives;
  // CUDA memory only, and only where there is a device: without one this
  // backend can move no memory at all in this process (the host then
  // reports it as unusable here, with init's reason).
  caps->memory_types = ctx->device_count > 0 ? 1u << PLEXUS_MEMORY_CUDA : 0u;
  caps->dtypes = kAllDtypes;
  for (uint32_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op)
    caps->reduce_dtypes[op] = kReducibleDtypes;
  caps->flags = PLEXUS_CAP_IN_PLACE | PLEXUS_CAP_STREAM_ORDERED | PLEXUS_CAP_ABORT;
  caps->thread_level = PLEXUS_THREAD_MULTIPLE;
  return PLEXUS_OK;
}

int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* config,
                   plexus_comm** comm_out, char* error_buf, size_t error_len) {
  try {
    if (!ctx || !config || !comm_out ||
        config->struct_size < offsetof(plexus_comm_config_v1, oob) + sizeof(void*) ||
        config->size == 0 || config->rank >= config->size || config->timeout_ms <= 0 ||
        config->size > uint32_t(INT32_MAX)) {
      WriteError(error_buf, error_len, "nccl comm_create: invalid configuration");
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    *comm_out = nullptr;
    auto comm = std::make_unique<plexus_comm>();
    std::string error;
    const int32_t rc = CreateCommunicator(*ctx->api, ctx->host, *config, &comm->core, &error);
    if (rc != PLEXUS_OK) {
      WriteError(error_buf, error_len, "nccl comm_create: " + error);
      return rc;
    }
    *comm_out = comm.release();
    return PLEXUS_OK;
  } catch (const std::exception& e) {
    WriteError(error_buf, error_len, std::string("nccl comm_create: ") + e.what());
    return PLEXUS_ERR_INTERNAL;
  } catch (...) {
    WriteError(error_buf, error_len, "nccl comm_create: unknown exception");
    return PLEXUS_ERR_INTERNAL;
  }
}

void CommDestroy(plexus_comm* comm) {
  try {
    if (comm && comm->core) {
      // Finalize + destroy when healthy (flushes what NCCL still runs: with
      // complete = enqueued, a caller-stream kernel may still be on the
      // GPU), bounded by min(timeout, 5 s); abort when broken or overrun
      // (CommCore::Destroy). Never waits on a dead peer beyond that bound.
      comm->core->Destroy();
    }
    delete comm;  // the core lives on while a (leaked) request holds it
  } catch (...) {
  }
}

int32_t CommAbort(plexus_comm* comm) {
  if (!comm || !comm->core) return PLEXUS_ERR_INVALID_ARGUMENT;
  return Guarded(comm, [&] {
    comm->core->Abort(PLEXUS_ERR_ABORTED, "aborted by comm_abort");
    return PLEXUS_OK;
  });
}

size_t CommLastError(plexus_comm* comm, char* buf, size_t len) {
  if (!comm || !comm->core) return 0;
  try {
    return comm->core->LastError(buf, len);
  } catch (...) {
    return 0;
  }
}

int32_t Test(plexus_request* req) {
  if (!req || !req->core) return PLEXUS_ERR_INVALID_ARGUMENT;
  try {
    DeviceGuard device(req->core->api(), req->core->device());
    return PollRequest(req, true);
  } catch (...) {
    return PLEXUS_ERR_INTERNAL;
  }
}

int32_t Wait(plexus_request* req, int64_t timeout_ms) {
  if (!req || !req->core) return PLEXUS_ERR_INVALID_ARGUMENT;
  try {
    DeviceGuard device(req->core->api(), req->core->device());
    return WaitRequest(req, timeout_ms);
  } catch (...) {
    return PLEXUS_ERR_INTERNAL;
  }
}

size_t RequestError(plexus_request* req, char* buf, size_t len) {
  if (!req) {
    WriteError(buf, len, "");
    return 0;
  }
  try {
    std::lock_guard<std::mutex> lock(req->mutex);
    WriteError(buf, len, req->error);
    return req->error.size();
  } catch (...) {
    return 0;
  }
}

int32_t RequestFree(plexus_request* req) {
  if (!req) return PLEXUS_OK;
  {
    std::lock_guard<std::mutex> lock(req->mutex);
    if (req->status == PLEXUS_IN_PROGRESS) return PLEXUS_ERR_INVALID_USAGE;
  }
  delete req;
  return PLEXUS_OK;
}

// ---------------------------------------------------------------- collectives

int32_t Allreduce(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                  plexus_dtype_t dtype, plexus_reduce_op_t op, const plexus_placement* placement,
                  plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "allreduce", count, dtype, placement, req_out);
    ncclRedOp_t nop{};
    if (rc == PLEXUS_OK) rc = CheckReduction(comm, "allreduce", dtype, op, &nop);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "nccl allreduce: NULL buffer");
    }
    const NcclType t = MapDtype(dtype);
    return Post(
        comm, {"allreduce", count, dtype}, placement, {{"sendbuf", sendbuf}, {"recvbuf", recvbuf}},
        nullptr,
        [&](ncclComm_t nc, cudaStream_t s) {
          return comm->core->api().AllReduce(sendbuf, recvbuf, count, t.type, nop, nc, s);
        },
        req_out);
  });
}

int32_t Broadcast(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t root,
                  const plexus_placement* placement, plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "broadcast", count, dtype, placement, req_out);
    if (rc != PLEXUS_OK) return rc;
    if (root >= comm->core->size()) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "nccl broadcast: root " + std::to_string(root) + " is not a rank (size " +
                        std::to_string(comm->core->size()) + ")");
    }
    if (count > 0 && !buf) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "nccl broadcast: NULL buffer");
    }
    const NcclType t = MapDtype(dtype);
    return Post(
        comm, {"broadcast", count, dtype, int64_t(root)}, placement, {{"buf", buf}}, nullptr,
        [&](ncclComm_t nc, cudaStream_t s) {
          return comm->core->api().Broadcast(buf, buf, count * t.scale, t.type, int(root), nc, s);
        },
        req_out);
  });
}

int32_t Reduce(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
               plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t root,
               const plexus_placement* placement, plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "reduce", count, dtype, placement, req_out);
    ncclRedOp_t nop{};
    if (rc == PLEXUS_OK) rc = CheckReduction(comm, "reduce", dtype, op, &nop);
    if (rc != PLEXUS_OK) return rc;
    if (root >= comm->core->size()) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "nccl reduce: root " + std::to_string(root) + " is not a rank (size " +
                        std::to_string(comm->core->size()) + ")");
    }
    const bool is_root = comm->core->rank() == root;
    if (count > 0 && (!sendbuf || (is_root && !recvbuf))) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "nccl reduce: NULL buffer");
    }
    // Off the root NCCL never touches recvbuff; the ABI lets it be NULL there.
    void* recv = is_root ? recvbuf : const_cast<void*>(sendbuf);
    const NcclType t = MapDtype(dtype);
    return Post(
        comm, {"reduce", count, dtype, int64_t(root)}, placement,
        {{"sendbuf", sendbuf}, {"recvbuf", is_root ? recvbuf : nullptr}}, nullptr,
        [&](ncclComm_t nc, cudaStream_t s) {
          return comm->core->api().Reduce(sendbuf, recv, count, t.type, nop, int(root), nc, s);
        },
        req_out);
  });
}

int32_t Allgather(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                  plexus_dtype_t dtype, const plexus_placement* placement,
                  plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "allgather", count, dtype, placement, req_out,
                             comm && comm->core ? comm->core->size() : 1);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "nccl allgather: NULL buffer");
    }
    const NcclType t = MapDtype(dtype);
    return Post(
        comm, {"allgather", count, dtype}, placement, {{"sendbuf", sendbuf}, {"recvbuf", recvbuf}},
        nullptr,
        [&](ncclComm_t nc, cudaStream_t s) {
          return comm->core->api().AllGather(sendbuf, recvbuf, count * t.scale, t.type, nc, s);
        },
        req_out);
  });
}

int32_t ReduceScatter(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                      plexus_dtype_t dtype, plexus_reduce_op_t op,
                      const plexus_placement* placement, plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "reduce_scatter", count, dtype, placement, req_out,
                             comm && comm->core ? comm->core->size() : 1);
    ncclRedOp_t nop{};
    if (rc == PLEXUS_OK) rc = CheckReduction(comm, "reduce_scatter", dtype, op, &nop);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "nccl reduce_scatter: NULL buffer");
    }
    const NcclType t = MapDtype(dtype);
    return Post(
        comm, {"reduce_scatter", count, dtype}, placement,
        {{"sendbuf", sendbuf}, {"recvbuf", recvbuf}}, nullptr,
        [&](ncclComm_t nc, cudaStream_t s) {
          return comm->core->api().ReduceScatter(sendbuf, recvbuf, count, t.type, nop, nc, s);
        },
        req_out);
  });
}

int32_t Alltoall(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                 plexus_dtype_t dtype, const plexus_placement* placement,
                 plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "alltoall", count, dtype, placement, req_out,
                             comm && comm->core ? comm->core->size() : 1);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "nccl alltoall: NULL buffer");
    }
    const NcclType t = MapDtype(dtype);
    const uint32_t n = comm->core->size();
    const uint64_t block = count * t.size;
    const auto* s8 = static_cast<const uint8_t*>(sendbuf);
    auto* r8 = static_cast<uint8_t*>(recvbuf);
    if (count > 0 && s8 < r8 + block * n && r8 < s8 + block * n) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "nccl alltoall: sendbuf and recvbuf overlap (alltoall is not in place)");
    }
    // NCCL has no alltoall: one group of a send and a receive per rank
    // (itself included), which NCCL runs as a single launch.
    return Post(
        comm, {"alltoall", count, dtype}, placement, {{"sendbuf", sendbuf}, {"recvbuf", recvbuf}},
        nullptr,
        [&](ncclComm_t nc, cudaStream_t s) {
          const CudaApi& api = comm->core->api();
          ncclResult_t r = api.GroupStart();
          if (r != ncclSuccess) return r;
          ncclResult_t first = ncclSuccess;
          // Inside a group NCCL only records the calls; a non-blocking
          // communicator may still say ncclInProgress for one, which is no
          // failure (ncclGroupEnd's result covers the launch).
          const auto ok = [](ncclResult_t x) { return x == ncclSuccess || x == ncclInProgress; };
          for (uint32_t peer = 0; peer < n && ok(first); ++peer) {
            first = api.Send(s8 + peer * block, count * t.scale, t.type, int(peer), nc, s);
            if (ok(first))
              first = api.Recv(r8 + peer * block, count * t.scale, t.type, int(peer), nc, s);
          }
          if (first == ncclInProgress) first = ncclSuccess;
          // The group is always closed; its result covers the whole launch.
          r = api.GroupEnd();
          return first != ncclSuccess ? first : r;
        },
        req_out);
  });
}

int32_t PointToPoint(bool is_send, plexus_comm* comm, void* buf, uint64_t count,
                     plexus_dtype_t dtype, uint32_t peer, const plexus_placement* placement,
                     plexus_request** req_out) {
  const char* what = is_send ? "send" : "recv";
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, what, count, dtype, placement, req_out);
    if (rc != PLEXUS_OK) return rc;
    if (peer >= comm->core->size() || peer == comm->core->rank()) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    std::string("nccl ") + what + ": peer " + std::to_string(peer) +
                        " is not another rank (rank " + std::to_string(comm->core->rank()) +
                        ", size " + std::to_string(comm->core->size()) + ")");
    }
    if (count > 0 && !buf) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    std::string("nccl ") + what + ": NULL buffer");
    }
    const NcclType t = MapDtype(dtype);
    const P2PArgs args{is_send, buf, size_t(count * t.scale), t.type, int(peer)};
    return Post(
        comm, {what, count, dtype, int64_t(peer), true}, placement, {{"buf", buf}}, &args,
        [](ncclComm_t, cudaStream_t) { return ncclInternalError; },  // never called: queued
        req_out);
  });
}

int32_t Send(plexus_comm* comm, const void* buf, uint64_t count, plexus_dtype_t dtype,
             uint32_t peer, const plexus_placement* placement, plexus_request** req_out) {
  return PointToPoint(true, comm, const_cast<void*>(buf), count, dtype, peer, placement, req_out);
}

int32_t Recv(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t peer,
             const plexus_placement* placement, plexus_request** req_out) {
  return PointToPoint(false, comm, buf, count, dtype, peer, placement, req_out);
}

// A one-word allreduce on the communicator's own stream: it cannot finish
// on any rank before every rank has posted it.
int32_t Barrier(plexus_comm* comm, plexus_request** req_out) {
  return Guarded(comm, [&] {
    if (!comm || !comm->core) return PLEXUS_ERR_INVALID_ARGUMENT;
    if (!req_out) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "nccl barrier: req_out is NULL");
    }
    *req_out = nullptr;
    void* word = comm->core->scratch();
    return Post(
        comm, {"barrier", 1, PLEXUS_DTYPE_INT32}, nullptr, {}, nullptr,
        [&](ncclComm_t nc, cudaStream_t s) {
          return comm->core->api().AllReduce(word, word, 1, ncclInt32, ncclSum, nc, s);
        },
        req_out);
  });
}

// ---------------------------------------------------------------- the table

// "0.1.0 (NCCL 2.28.9, CUDA runtime 13.0, CUDA driver 13.0)": what this
// process loaded, filled by the entry function on its first call (which
// loads the libraries, touching no device); static storage. The driver's
// version says "not asked yet" where libcuda was loaded before us (see
// cuda_api.cpp: the entry function also runs in the host's forked probe);
// init's log line has it then.
char g_version[256] = PLEXUS_VERSION_STRING " (NCCL not loaded)";

void FillVersion() {
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
}

plexus_backend_v1 MakeTable() {
  plexus_backend_v1 t{};
  t.struct_size = sizeof(plexus_backend_v1);
  t.abi_major = PLEXUS_ABI_MAJOR;
  t.abi_minor = PLEXUS_ABI_MINOR;
  t.name = "nccl";
  t.version = g_version;
  t.init = Init;
  t.finalize = Finalize;
  t.get_capabilities = GetCapabilities;
  t.comm_create = CommCreate;
  t.comm_destroy = CommDestroy;
  t.comm_abort = CommAbort;
  t.comm_last_error = CommLastError;
  t.test = Test;
  t.wait = Wait;
  t.request_free = RequestFree;
  t.request_error = RequestError;
  t.allreduce = Allreduce;
  t.broadcast = Broadcast;
  t.reduce = Reduce;
  t.allgather = Allgather;
  t.reduce_scatter = ReduceScatter;
  t.alltoall = Alltoall;
  t.barrier = Barrier;
  t.send = Send;
  t.recv = Recv;
  return t;
}

const plexus_backend_v1 kTable = MakeTable();

}  // namespace
}  // namespace plexus::nccl

extern "C" PLEXUS_BACKEND_EXPORT int32_t
plexus_backend_get_v1(uint32_t host_abi_minor, const plexus_backend_v1** table_out) {
  (void)host_abi_minor;  // every 1.x host can drive this table (1.1 fields are checked)
  if (!table_out) return PLEXUS_ERR_INVALID_ARGUMENT;
  plexus::nccl::FillVersion();
  *table_out = &plexus::nccl::kTable;
  return PLEXUS_OK;
}
