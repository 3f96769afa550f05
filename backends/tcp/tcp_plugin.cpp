// libplexus-tcp.so: the ABI v1 table of the TCP backend.
//
// This file is the glue between the C ABI and the C++ inside: it checks every
// argument (a vendor backend cannot trust its caller more than the host
// trusts it), turns each call into an OpBody for the communicator's worker,
// and makes sure no C++ exception leaves through the ABI.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <thread>

#include "mesh_connect.hpp"
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/comm_setting.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/backend.h"
#include "tcp_comm.hpp"
#include "tcp_log.hpp"

struct plexus_backend_ctx {
  plexus_host_v1 host;
};

namespace plexus::tcp {
// PLEXUS_TCP_ALGO: which allreduce algorithm to use.
enum class Algo { kAuto, kRing, kRecursiveDoubling, kPair };
// Below this many bytes recursive doubling's log2(size) latency wins over the
// ring's 2(size-1) steps; measured with plexus-bench on loopback.
constexpr uint64_t kRecursiveDoublingMaxBytes = 64 << 10;
// With two ranks, up to this many bytes the pair exchange (one step, the
// whole vector each way, reduced on both ranks) beats both: measured with
// plexus-bench --blocking on loopback, 2 pinned ranks on 2 cores, medians of
// 6-10 alternating launches per system, three runs: 4-64 KiB 0.88-1.07x the
// time of recursive doubling (about 0.95x), 128-512 KiB 0.81-0.90x the
// ring's; at 1 MiB 1.06-1.07x and at 2-4 MiB 0.99-1.09x the ring's (the pair
// exchange reduces twice the bytes).
constexpr uint64_t kPairMaxBytes = 512 << 10;
// PLEXUS_TCP_SPIN_US: how long a rank retries its sockets before it sleeps.
// A small allreduce's answer comes back over loopback in 5-10 us; sleeping
// and being woken costs about as much again. Off by default when there are
// more ranks than CPUs, where most spins would wait for a peer that needs
// this CPU (the spin yields the CPU after 10 us, but still costs the tries).
constexpr int64_t kDefaultSpinUs = 50;
}  // namespace plexus::tcp

struct plexus_comm {
  std::unique_ptr<plexus::tcp::TcpComm> impl;
  plexus::tcp::Algo algo = plexus::tcp::Algo::kAuto;
};

namespace plexus::tcp {
namespace {

constexpr uint32_t kAllDtypes = 0x1ffeu;                             // bits 1..12
constexpr uint32_t kCollectives = (1u << PLEXUS_COLL_COUNT_V1) - 1;  // all of v1

// Runs fn, turning any escaping exception into PLEXUS_ERR_INTERNAL.
template <typename Fn>
int32_t Guarded(plexus_comm* comm, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    if (comm && comm->impl) comm->impl->SetError("out of memory");
    return PLEXUS_ERR_SYSTEM;
  } catch (const std::exception& e) {
    if (comm && comm->impl) comm->impl->SetError(std::string("internal error: ") + e.what());
    return PLEXUS_ERR_INTERNAL;
  } catch (...) {
    return PLEXUS_ERR_INTERNAL;
  }
}

int32_t Reject(plexus_comm* comm, int32_t code, const std::string& message) {
  comm->impl->SetError(message);
  return code;
}

// Checks what every collective shares; returns PLEXUS_OK or the error it recorded.
int32_t CheckCommon(plexus_comm* comm, const char* what, uint64_t count, plexus_dtype_t dtype,
                    const plexus_placement* placement, plexus_request** req_out) {
  if (!comm || !comm->impl) return PLEXUS_ERR_INVALID_ARGUMENT;
  const std::string where = std::string("tcp ") + what + ": ";
  if (!req_out) return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, where + "req_out is NULL");
  *req_out = nullptr;
  if (algos::DtypeSize(dtype) == 0) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  where + "unknown dtype code " + std::to_string(dtype));
  }
  if (placement && placement->memory_type != PLEXUS_MEMORY_HOST) {
    return Reject(comm, PLEXUS_ERR_UNSUPPORTED,
                  where + "only host memory is supported (memory type " +
                      std::to_string(placement->memory_type) + ")");
  }
  // allgather, reduce_scatter and alltoall move count elements per rank:
  // their byte size is count x element size x ranks, which must not wrap.
  const bool per_rank = std::string_view(what) == "allgather" ||
                        std::string_view(what) == "reduce_scatter" ||
                        std::string_view(what) == "alltoall";
  const uint64_t blocks = per_rank ? comm->impl->size() : 1;
  if (count > (uint64_t(1) << 62) / algos::DtypeSize(dtype) / blocks) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  where + "count " + std::to_string(count) + " is too large: count x " +
                      std::to_string(algos::DtypeSize(dtype)) + " bytes" +
                      (per_rank ? " x " + std::to_string(blocks) + " ranks" : std::string()) +
                      " exceeds 2^62 bytes");
  }
  return PLEXUS_OK;
}

int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** ctx_out) {
  if (!host || !ctx_out || host->struct_size < sizeof(plexus_host_v1) || !host->oob_allgather ||
      !host->oob_broadcast) {
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  auto* ctx = new (std::nothrow) plexus_backend_ctx{*host};
  if (!ctx) return PLEXUS_ERR_SYSTEM;
  *ctx_out = ctx;
  return PLEXUS_OK;
}

void Finalize(plexus_backend_ctx* ctx) {
  delete ctx;
}

int32_t GetCapabilities(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
  if (!ctx || !caps || caps->struct_size < sizeof(plexus_capabilities)) {
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  const uint32_t size = caps->struct_size;
  std::memset(caps, 0, sizeof *caps);
  caps->struct_size = size;
  caps->collectives = kCollectives;
  caps->memory_types = 1u << PLEXUS_MEMORY_HOST;
  caps->dtypes = kAllDtypes;
  for (uint32_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op)
    caps->reduce_dtypes[op] = kAllDtypes;
  caps->flags = PLEXUS_CAP_IN_PLACE | PLEXUS_CAP_ABORT;
  caps->thread_level = PLEXUS_THREAD_MULTIPLE;
  return PLEXUS_OK;
}

void WriteError(char* buf, size_t len, const std::string& message) {
  if (!buf || len == 0) return;
  const size_t n = std::min(len - 1, message.size());
  message.copy(buf, n);
  buf[n] = '\0';
}

int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* config,
                   plexus_comm** comm_out, char* error_buf, size_t error_len) {
  try {
    if (!ctx || !config || !comm_out ||
        config->struct_size < offsetof(plexus_comm_config_v1, oob) + sizeof(void*) ||
        config->size == 0 || config->rank >= config->size || config->timeout_ms <= 0) {
      WriteError(error_buf, error_len, "tcp comm_create: invalid configuration");
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    *comm_out = nullptr;
    std::vector<int> fds(config->size, -1);
    if (config->size > 1) {
      algos::Status st = ConnectMesh(ctx->host, *config, &fds);
      if (!st.ok()) {
        WriteError(error_buf, error_len,
                   "tcp: connecting rank " + std::to_string(config->rank) + " of " + config->name +
                       ": " + st.message);
        return st.code;
      }
    }
    int64_t spin_us = config->size <= std::thread::hardware_concurrency() ? kDefaultSpinUs : 0;
    if (const std::string v = algos::CommSetting(ctx->host, *config, "PLEXUS_TCP_SPIN_US");
        !v.empty()) {
      char* end = nullptr;
      const long long us = std::strtoll(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || us < 0 || us > 1000000) {
        WriteError(
            error_buf, error_len,
            "tcp: PLEXUS_TCP_SPIN_US='" + v + "' is not a number of microseconds (0-1000000)");
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
      spin_us = us;
    }
    // PLEXUS_TCP_PIPELINE_DEPTH: ring segments in flight (default: 2 on one
    // host, 16 when a peer is on another; socket_transport.cpp says why).
    int64_t depth = 0;
    if (const std::string v = algos::CommSetting(ctx->host, *config, "PLEXUS_TCP_PIPELINE_DEPTH");
        !v.empty()) {
      char* end = nullptr;
      depth = std::strtoll(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || depth < 1 || depth > 16) {
        WriteError(error_buf, error_len,
                   "tcp: PLEXUS_TCP_PIPELINE_DEPTH='" + v + "' is not a number of segments (1-16)");
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
    }
    auto transport = std::make_unique<SocketTransport>(
        config->rank, config->size, std::move(fds), config->timeout_ms, spin_us, uint32_t(depth));
    Algo algo = Algo::kAuto;
    if (const std::string v = algos::CommSetting(ctx->host, *config, "PLEXUS_TCP_ALGO");
        !v.empty()) {
      if (v == "ring") {
        algo = Algo::kRing;
      } else if (v == "rd" || v == "recursive_doubling") {
        algo = Algo::kRecursiveDoubling;
      } else if (v == "pair") {
        algo = Algo::kPair;  // the ring on other than 2 ranks
      } else if (v != "auto") {
        WriteError(error_buf, error_len,
                   "tcp: PLEXUS_TCP_ALGO='" + v + "' is not one of auto, ring, rd, pair");
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
    }
    auto* comm = new plexus_comm;
    comm->algo = algo;
    comm->impl = std::make_unique<TcpComm>(ctx->host, config->rank, config->size,
                                           config->timeout_ms, config->name, std::move(transport));
    *comm_out = comm;
    return PLEXUS_OK;
  } catch (const std::exception& e) {
    WriteError(error_buf, error_len, std::string("tcp comm_create: ") + e.what());
    return PLEXUS_ERR_INTERNAL;
  }
}

void CommDestroy(plexus_comm* comm) {
  try {
    delete comm;
  } catch (...) {
  }
}

int32_t CommAbort(plexus_comm* comm) {
  if (!comm || !comm->impl) return PLEXUS_ERR_INVALID_ARGUMENT;
  return Guarded(comm, [&] {
    comm->impl->Abort();
    return PLEXUS_OK;
  });
}

size_t CommLastError(plexus_comm* comm, char* buf, size_t len) {
  if (!comm || !comm->impl) return 0;
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
  if (timeout_ms < 0) timeout_ms = req->default_timeout_ms;
  // An operation run on this thread cannot be left when the wait's own time
  // is up, so only a wait as long as the operation's deadline runs it here.
  if (timeout_ms >= req->default_timeout_ms && req->comm) req->comm->RunInlineIfNext(req);
  std::unique_lock<std::mutex> lock(req->mutex);
  const bool done = req->done_cv.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                          [&] { return req->status != PLEXUS_IN_PROGRESS; });
  return done ? req->status : PLEXUS_ERR_TIMEOUT;
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

int32_t Allreduce(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                  plexus_dtype_t dtype, plexus_reduce_op_t op, const plexus_placement* placement,
                  plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "allreduce", count, dtype, placement, req_out);
    if (rc != PLEXUS_OK) return rc;
    if (!algos::CanReduce(dtype, op)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "tcp allreduce: unknown reduce op code " + std::to_string(op));
    }
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "tcp allreduce: NULL buffer");
    }
    algos::OpSignature sig{0, PLEXUS_COLL_ALLREDUCE, dtype, op, count, 0};
    Algo algo = comm->algo;
    if (algo == Algo::kAuto) {
      const uint64_t bytes = count * algos::DtypeSize(dtype);
      if (comm->impl->size() == 2 && bytes <= kPairMaxBytes) {
        algo = Algo::kPair;
      } else {
        algo = bytes > kRecursiveDoublingMaxBytes ? Algo::kRing : Algo::kRecursiveDoubling;
      }
    }
    return comm->impl->Post(
        sig,
        [sendbuf, recvbuf, algo](algos::PeerTransport& t, const algos::OpSignature& s) {
          switch (algo) {
            case Algo::kPair:
              return algos::PairExchangeAllreduce(t, s, sendbuf, recvbuf);
            case Algo::kRecursiveDoubling:
              return algos::RecursiveDoublingAllreduce(t, s, sendbuf, recvbuf);
            default:
              return algos::RingAllreduce(t, s, sendbuf, recvbuf);
          }
        },
        req_out);
  });
}

int32_t Broadcast(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t root,
                  const plexus_placement* placement, plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "broadcast", count, dtype, placement, req_out);
    if (rc != PLEXUS_OK) return rc;
    if (root >= comm->impl->size()) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "tcp broadcast: root " + std::to_string(root) + " is not a rank (size " +
                        std::to_string(comm->impl->size()) + ")");
    }
    if (count > 0 && !buf)
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "tcp broadcast: NULL buffer");
    algos::OpSignature sig{0, PLEXUS_COLL_BROADCAST, dtype, 0, count, root};
    return comm->impl->Post(
        sig,
        [buf](algos::PeerTransport& t, const algos::OpSignature& s) {
          return algos::BinomialBroadcast(t, s, buf);
        },
        req_out);
  });
}

int32_t Allgather(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                  plexus_dtype_t dtype, const plexus_placement* placement,
                  plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "allgather", count, dtype, placement, req_out);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "tcp allgather: NULL buffer");
    }
    algos::OpSignature sig{0, PLEXUS_COLL_ALLGATHER, dtype, 0, count, 0};
    return comm->impl->Post(
        sig,
        [sendbuf, recvbuf](algos::PeerTransport& t, const algos::OpSignature& s) {
          return algos::RingAllgather(t, s, sendbuf, recvbuf);
        },
        req_out);
  });
}

int32_t Reduce(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
               plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t root,
               const plexus_placement* placement, plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "reduce", count, dtype, placement, req_out);
    if (rc != PLEXUS_OK) return rc;
    if (!algos::CanReduce(dtype, op)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "tcp reduce: unknown reduce op code " + std::to_string(op));
    }
    if (root >= comm->impl->size()) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "tcp reduce: root " + std::to_string(root) + " is not a rank (size " +
                        std::to_string(comm->impl->size()) + ")");
    }
    const bool is_root = comm->impl->rank() == root;
    if (count > 0 && (!sendbuf || (is_root && !recvbuf))) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "tcp reduce: NULL buffer");
    }
    algos::OpSignature sig{0, PLEXUS_COLL_REDUCE, dtype, op, count, root};
    return comm->impl->Post(
        sig,
        [sendbuf, recvbuf](algos::PeerTransport& t, const algos::OpSignature& s) {
          return algos::BinomialReduce(t, s, sendbuf, recvbuf);
        },
        req_out);
  });
}

int32_t ReduceScatter(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                      plexus_dtype_t dtype, plexus_reduce_op_t op,
                      const plexus_placement* placement, plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "reduce_scatter", count, dtype, placement, req_out);
    if (rc != PLEXUS_OK) return rc;
    if (!algos::CanReduce(dtype, op)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "tcp reduce_scatter: unknown reduce op code " + std::to_string(op));
    }
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "tcp reduce_scatter: NULL buffer");
    }
    algos::OpSignature sig{0, PLEXUS_COLL_REDUCE_SCATTER, dtype, op, count, 0};
    return comm->impl->Post(
        sig,
        [sendbuf, recvbuf](algos::PeerTransport& t, const algos::OpSignature& s) {
          return algos::RingReduceScatter(t, s, sendbuf, recvbuf);
        },
        req_out);
  });
}

int32_t Alltoall(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                 plexus_dtype_t dtype, const plexus_placement* placement,
                 plexus_request** req_out) {
  return Guarded(comm, [&] {
    int32_t rc = CheckCommon(comm, "alltoall", count, dtype, placement, req_out);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "tcp alltoall: NULL buffer");
    }
    const uint64_t bytes = count * algos::DtypeSize(dtype) * comm->impl->size();
    const auto* s = static_cast<const uint8_t*>(sendbuf);
    const auto* r = static_cast<const uint8_t*>(recvbuf);
    if (count > 0 && s < r + bytes && r < s + bytes) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "tcp alltoall: sendbuf and recvbuf overlap (alltoall is not in place)");
    }
    algos::OpSignature sig{0, PLEXUS_COLL_ALLTOALL, dtype, 0, count, 0};
    return comm->impl->Post(
        sig,
        [sendbuf, recvbuf](algos::PeerTransport& t, const algos::OpSignature& sg) {
          return algos::PairwiseAlltoall(t, sg, sendbuf, recvbuf);
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
    if (peer >= comm->impl->size() || peer == comm->impl->rank()) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    std::string("tcp ") + what + ": peer " + std::to_string(peer) +
                        " is not another rank (rank " + std::to_string(comm->impl->rank()) +
                        ", size " + std::to_string(comm->impl->size()) + ")");
    }
    if (count > 0 && !buf) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    std::string("tcp ") + what + ": NULL buffer");
    }
    return comm->impl->PostP2P(is_send, peer, buf, count, dtype, req_out);
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

int32_t Barrier(plexus_comm* comm, plexus_request** req_out) {
  return Guarded(comm, [&] {
    if (!comm || !comm->impl) return PLEXUS_ERR_INVALID_ARGUMENT;
    if (!req_out) return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "tcp barrier: req_out is NULL");
    algos::OpSignature sig{0, PLEXUS_COLL_BARRIER, 0, 0, 0, 0};
    return comm->impl->Post(
        sig,
        [](algos::PeerTransport& t, const algos::OpSignature& s) {
          return algos::DisseminationBarrier(t, s);
        },
        req_out);
  });
}

const plexus_backend_v1 kTable = [] {
  plexus_backend_v1 t{};
  t.struct_size = sizeof(plexus_backend_v1);
  t.abi_major = PLEXUS_ABI_MAJOR;
  t.abi_minor = PLEXUS_ABI_MINOR;
  t.name = "tcp";
  t.version = PLEXUS_VERSION_STRING;
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
  t.allgather = Allgather;
  t.barrier = Barrier;
  t.reduce = Reduce;
  t.reduce_scatter = ReduceScatter;
  t.alltoall = Alltoall;
  t.send = Send;
  t.recv = Recv;
  return t;
}();

}  // namespace
}  // namespace plexus::tcp

extern "C" __attribute__((visibility("default"))) int32_t plexus_backend_get_v1(
    uint32_t host_abi_minor, const plexus_backend_v1** table_out) {
  (void)host_abi_minor;  // every 1.x host can drive this 1.0 table
  if (!table_out) return PLEXUS_ERR_INVALID_ARGUMENT;
  *table_out = &plexus::tcp::kTable;
  return PLEXUS_OK;
}
