// libplexus-uds.so: the ABI table of an example backend that runs Plexus
// collectives over Unix-domain sockets between the ranks of one host.
//
// This file is the only place that speaks the C ABI; behind it is ordinary
// C++. It has three jobs. Check every argument, because a backend cannot trust
// its caller more than the host trusts the backend (the host checks the
// capabilities, but not pointers, roots or overlaps). Turn each collective into
// a closure over a plexus-algos algorithm for the communicator's worker. And
// let no C++ exception cross the ABI: every entry point catches everything
// and returns a status instead.
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <new>
#include <utility>

#include "plexus/algos/collectives.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/backend.h"
#include "uds_comm.hpp"

struct plexus_backend_ctx {
  plexus_host_v1 host;  // a copy of the table; what it points to outlives us
};

struct plexus_comm {
  std::unique_ptr<uds::UdsComm> impl;
};

namespace uds {
namespace algos = plexus::algos;
namespace {

constexpr uint32_t kAllDtypes = 0x1ffeu;  // bits 1..12: every dtype of ABI 1
// Recursive doubling (log2 n steps) beats the ring (2(n-1) steps) below this.
constexpr uint64_t kSmallAllreduceBytes = 64 << 10;

// Checks what every operation shares, then posts it. bad_buffers is NULL or
// why the buffers are unusable; p2p_buf is the message of a send/recv. Nothing
// thrown leaves: the C ABI gets a status instead.
int32_t PostOp(plexus_comm* comm, const OpSignature& sig, const char* bad_buffers,
               const plexus_placement* where, plexus_request** req_out, OpBody body,
               void* p2p_buf = nullptr) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  UdsComm& c = *comm->impl;
  try {
    auto fail = [&](int32_t code, const std::string& why) {
      return c.Reject(code, std::string("uds ") + algos::CollectiveName(sig.coll) + ": " + why);
    };
    const bool p2p = sig.coll == PLEXUS_COLL_SEND || sig.coll == PLEXUS_COLL_RECV;
    const bool rooted = p2p || sig.coll == PLEXUS_COLL_BROADCAST || sig.coll == PLEXUS_COLL_REDUCE;
    const bool reduces = sig.coll == PLEXUS_COLL_ALLREDUCE || sig.coll == PLEXUS_COLL_REDUCE ||
                         sig.coll == PLEXUS_COLL_REDUCE_SCATTER;
    const size_t elem = algos::DtypeSize(sig.dtype);
    if (!req_out) return fail(PLEXUS_ERR_INVALID_ARGUMENT, "req_out is NULL");
    *req_out = nullptr;
    if (sig.coll != PLEXUS_COLL_BARRIER && elem == 0) {
      return fail(PLEXUS_ERR_INVALID_ARGUMENT, "unknown dtype code " + std::to_string(sig.dtype));
    }
    if (reduces && !algos::CanReduce(sig.dtype, sig.op)) {
      return fail(PLEXUS_ERR_INVALID_ARGUMENT, "unknown reduce op code " + std::to_string(sig.op));
    }
    if (where && where->memory_type != PLEXUS_MEMORY_HOST) {
      return fail(PLEXUS_ERR_UNSUPPORTED, "only host memory is supported");
    }
    if (elem && sig.count > (uint64_t(1) << 62) / elem / c.size()) {
      return fail(PLEXUS_ERR_INVALID_ARGUMENT,
                  "count " + std::to_string(sig.count) + " is too large");
    }
    if (rooted && (sig.root >= c.size() || (p2p && sig.root == c.rank()))) {
      return fail(PLEXUS_ERR_INVALID_ARGUMENT,
                  (p2p ? "peer " : "root ") + std::to_string(sig.root) +
                      " is not a valid rank for rank " + std::to_string(c.rank()) + " of " +
                      std::to_string(c.size()));
    }
    if (sig.count > 0 && bad_buffers) return fail(PLEXUS_ERR_INVALID_ARGUMENT, bad_buffers);
    return c.Post(sig, std::move(body), p2p_buf, req_out);
  } catch (const std::bad_alloc&) {
    return c.Reject(PLEXUS_ERR_SYSTEM, "out of memory");
  } catch (...) {
    return PLEXUS_ERR_INTERNAL;
  }
}

// The five collectives that run an algorithm of the shape (sendbuf, recvbuf).
using SendRecvAlgorithm = Status (*)(algos::PeerTransport&, const OpSignature&, const void*, void*);
int32_t PostSendRecv(plexus_comm* comm, const OpSignature& sig, SendRecvAlgorithm algorithm,
                     const void* sendbuf, void* recvbuf, const char* bad_buffers,
                     const plexus_placement* where, plexus_request** req_out) {
  return PostOp(comm, sig, bad_buffers, where, req_out,
                [=](algos::PeerTransport& t, const OpSignature& s) {
                  return algorithm(t, s, sendbuf, recvbuf);
                });
}

const char* NullIf(bool is_null) {
  return is_null ? "NULL buffer" : nullptr;
}

// ---- the table's functions, in table order ----

int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** ctx_out) {
  if (!host || !ctx_out || host->struct_size < sizeof(plexus_host_v1) || !host->oob_allgather) {
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  *ctx_out = new (std::nothrow) plexus_backend_ctx{*host};
  return *ctx_out ? PLEXUS_OK : PLEXUS_ERR_SYSTEM;
}

void Finalize(plexus_backend_ctx* ctx) {
  delete ctx;
}

int32_t GetCapabilities(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
  if (!ctx || !caps || caps->struct_size < sizeof caps->struct_size) {
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  plexus_capabilities all{};
  all.struct_size = caps->struct_size;
  all.collectives = (1u << PLEXUS_COLL_COUNT_V1) - 1;  // all nine
  all.memory_types = 1u << PLEXUS_MEMORY_HOST;
  all.dtypes = kAllDtypes;
  for (uint32_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op)
    all.reduce_dtypes[op] = kAllDtypes;
  all.flags = PLEXUS_CAP_IN_PLACE | PLEXUS_CAP_ABORT;
  all.thread_level = PLEXUS_THREAD_MULTIPLE;
  // Fill only as much as the host's struct has room for.
  std::memcpy(caps, &all, std::min<size_t>(caps->struct_size, sizeof all));
  return PLEXUS_OK;
}

// A setting of this communicator: its own configuration when the host is 1.1
// (config->get_config lies inside struct_size), else the process's (1.0).
// Returns the value's length, -1 when unset; value holds at most len - 1 bytes.
int64_t GetConfig(const plexus_backend_ctx& ctx, const plexus_comm_config_v1& config,
                  const char* key, char* value, size_t len) {
  const size_t needed = offsetof(plexus_comm_config_v1, config_ctx) + sizeof(void*);
  if (config.struct_size >= needed && config.get_config) {
    return config.get_config(config.config_ctx, key, value, len);
  }
  if (ctx.host.get_config) return ctx.host.get_config(ctx.host.ctx, key, value, len);
  return -1;
}

int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* config,
                   plexus_comm** comm_out, char* error_buf, size_t error_len) {
  auto fail = [&](int32_t code, const std::string& why) {
    CopyOut("uds comm_create: " + why, error_buf, error_len);
    return code;
  };
  if (!ctx || !config || !comm_out ||
      config->struct_size < offsetof(plexus_comm_config_v1, oob) + sizeof(void*) ||
      config->size == 0 || config->rank >= config->size || config->timeout_ms <= 0) {
    return fail(PLEXUS_ERR_INVALID_ARGUMENT, "invalid configuration");
  }
  *comm_out = nullptr;
  std::vector<int> fds(config->size, -1);
  auto close_all = [&] {
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
  };
  try {
    char dir[256] = "";
    if (GetConfig(*ctx, *config, "PLEXUS_UDS_DIR", dir, sizeof dir) >= int64_t(sizeof dir)) {
      return fail(PLEXUS_ERR_INVALID_ARGUMENT, "PLEXUS_UDS_DIR is too long");
    }
    Status st = ConnectMesh(ctx->host, *config, dir, &fds);
    if (!st.ok()) {
      close_all();
      return fail(st.code, "rank " + std::to_string(config->rank) + ": " + st.message);
    }
    auto transport =  // owns the sockets from here
        std::make_unique<UdsTransport>(config->rank, std::exchange(fds, {}), config->timeout_ms);
    auto comm = std::make_unique<plexus_comm>();
    comm->impl = std::make_unique<UdsComm>(ctx->host, *config, std::move(transport));
    *comm_out = comm.release();
    return PLEXUS_OK;
  } catch (const std::exception& e) {
    close_all();
    return fail(PLEXUS_ERR_SYSTEM, e.what());
  }
}

void CommDestroy(plexus_comm* comm) {
  delete comm;  // aborts what is left and joins the worker (~UdsComm)
}

int32_t CommAbort(plexus_comm* comm) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  try {
    comm->impl->Abort();
    return PLEXUS_OK;
  } catch (...) {
    return PLEXUS_ERR_SYSTEM;  // out of memory for the message; nothing else throws
  }
}

size_t CommLastError(plexus_comm* comm, char* buf, size_t len) {
  if (!comm) return 0;
  try {
    return comm->impl->LastError(buf, len);
  } catch (...) {
    return 0;
  }
}

int32_t Test(plexus_request* req) {
  if (!req) return PLEXUS_ERR_INVALID_ARGUMENT;
  std::lock_guard<std::mutex> lock(req->mutex);
  return req->status;
}

int32_t Wait(plexus_request* req, int64_t timeout_ms) {
  if (!req) return PLEXUS_ERR_INVALID_ARGUMENT;
  if (timeout_ms < 0) timeout_ms = req->default_wait_ms;
  timeout_ms = std::min<int64_t>(timeout_ms, int64_t(1) << 40);  // no overflow in wait_for
  std::unique_lock<std::mutex> lock(req->mutex);
  req->done.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                     [&] { return req->status != PLEXUS_IN_PROGRESS; });
  // Still pending: TIMEOUT, never IN_PROGRESS (also for timeout_ms == 0).
  return req->status == PLEXUS_IN_PROGRESS ? PLEXUS_ERR_TIMEOUT : req->status;
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

int32_t Allreduce(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                  plexus_dtype_t dtype, plexus_reduce_op_t op, const plexus_placement* where,
                  plexus_request** req_out) {
  const bool small = count * algos::DtypeSize(dtype) <= kSmallAllreduceBytes;
  return PostSendRecv(comm, {0, PLEXUS_COLL_ALLREDUCE, dtype, op, count, 0},
                      small ? algos::RecursiveDoublingAllreduce : algos::RingAllreduce, sendbuf,
                      recvbuf, NullIf(!sendbuf || !recvbuf), where, req_out);
}

int32_t Broadcast(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t root,
                  const plexus_placement* where, plexus_request** req_out) {
  return PostOp(comm, {0, PLEXUS_COLL_BROADCAST, dtype, 0, count, root}, NullIf(!buf), where,
                req_out, [=](algos::PeerTransport& t, const OpSignature& s) {
                  return algos::BinomialBroadcast(t, s, buf);
                });
}

int32_t Reduce(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
               plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t root,
               const plexus_placement* where, plexus_request** req_out) {
  const bool on_root = comm && comm->impl->rank() == root;  // elsewhere recvbuf may be NULL
  return PostSendRecv(comm, {0, PLEXUS_COLL_REDUCE, dtype, op, count, root}, algos::BinomialReduce,
                      sendbuf, recvbuf, NullIf(!sendbuf || (on_root && !recvbuf)), where, req_out);
}

int32_t Allgather(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                  plexus_dtype_t dtype, const plexus_placement* where, plexus_request** req_out) {
  return PostSendRecv(comm, {0, PLEXUS_COLL_ALLGATHER, dtype, 0, count, 0}, algos::RingAllgather,
                      sendbuf, recvbuf, NullIf(!sendbuf || !recvbuf), where, req_out);
}

int32_t ReduceScatter(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                      plexus_dtype_t dtype, plexus_reduce_op_t op, const plexus_placement* where,
                      plexus_request** req_out) {
  return PostSendRecv(comm, {0, PLEXUS_COLL_REDUCE_SCATTER, dtype, op, count, 0},
                      algos::RingReduceScatter, sendbuf, recvbuf, NullIf(!sendbuf || !recvbuf),
                      where, req_out);
}

int32_t Alltoall(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                 plexus_dtype_t dtype, const plexus_placement* where, plexus_request** req_out) {
  const char* bad = NullIf(!sendbuf || !recvbuf);
  if (!bad && comm) {  // not in place: the two buffers may not overlap at all
    const uint64_t bytes = count * algos::DtypeSize(dtype) * comm->impl->size();
    const auto* s = static_cast<const char*>(sendbuf);
    const auto* r = static_cast<const char*>(recvbuf);
    if (s < r + bytes && r < s + bytes) bad = "sendbuf and recvbuf overlap (not in place)";
  }
  return PostSendRecv(comm, {0, PLEXUS_COLL_ALLTOALL, dtype, 0, count, 0}, algos::PairwiseAlltoall,
                      sendbuf, recvbuf, bad, where, req_out);
}

int32_t Barrier(plexus_comm* comm, plexus_request** req_out) {
  return PostOp(comm, {0, PLEXUS_COLL_BARRIER, 0, 0, 0, 0}, nullptr, nullptr, req_out,
                [](algos::PeerTransport& t, const OpSignature& s) {
                  return algos::DisseminationBarrier(t, s);
                });
}

int32_t Send(plexus_comm* comm, const void* buf, uint64_t count, plexus_dtype_t dtype,
             uint32_t peer, const plexus_placement* where, plexus_request** req_out) {
  return PostOp(comm, {0, PLEXUS_COLL_SEND, dtype, 0, count, peer}, NullIf(!buf), where, req_out,
                nullptr, const_cast<void*>(buf));
}

int32_t Recv(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t peer,
             const plexus_placement* where, plexus_request** req_out) {
  return PostOp(comm, {0, PLEXUS_COLL_RECV, dtype, 0, count, peer}, NullIf(!buf), where, req_out,
                nullptr, buf);
}

size_t RequestError(plexus_request* req, char* buf, size_t len) {
  if (!req) return 0;
  try {
    std::lock_guard<std::mutex> lock(req->mutex);
    CopyOut(req->error, buf, len);
    return req->error.size();
  } catch (...) {
    return 0;
  }
}

// A 1.0 host copies the table only up to its own sizeof and never sees
// request_error; a 1.1 host reads it because struct_size and abi_minor say
// it is there.
constexpr plexus_backend_v1 kTable = {
    .struct_size = sizeof(plexus_backend_v1),
    .abi_major = PLEXUS_ABI_MAJOR,
    .abi_minor = PLEXUS_ABI_MINOR,
    .name = "uds",
    .version = "0.1.0 (example: Unix-domain sockets, one host)",
    .init = Init,
    .finalize = Finalize,
    .get_capabilities = GetCapabilities,
    .comm_create = CommCreate,
    .comm_destroy = CommDestroy,
    .comm_abort = CommAbort,
    .comm_last_error = CommLastError,
    .test = Test,
    .wait = Wait,
    .request_free = RequestFree,
    .allreduce = Allreduce,
    .broadcast = Broadcast,
    .reduce = Reduce,
    .allgather = Allgather,
    .reduce_scatter = ReduceScatter,
    .alltoall = Alltoall,
    .barrier = Barrier,
    .send = Send,
    .recv = Recv,
    .request_error = RequestError,  // added in 1.1
};

}  // namespace
}  // namespace uds

// The one exported symbol. Any 1.x host can drive this table, so the host's
// minor is not checked; a backend that needed 1.N features from the host
// would return PLEXUS_ERR_UNSUPPORTED here when host_abi_minor < N.
extern "C" PLEXUS_BACKEND_EXPORT int32_t
plexus_backend_get_v1(uint32_t host_abi_minor, const plexus_backend_v1** table_out) {
  (void)host_abi_minor;
  if (!table_out) return PLEXUS_ERR_INVALID_ARGUMENT;
  *table_out = &uds::kTable;
  return PLEXUS_OK;
}
