// libplexus-ucx.so: the ABI v1 table of the UCX backend.
//
// This file is the glue between the C ABI and the C++ inside: it checks every
// argument (a vendor backend cannot trust its caller more than the host
// trusts it), owns the process's ucp_context, turns each call into an OpBody
// for the communicator's worker thread, and makes sure no C++ exception
// leaves through the ABI.
#include <ucp/api/ucp.h>

#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>

#include "plexus/algos/collectives.hpp"
#include "plexus/algos/comm_setting.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/backend.h"
#include "ucx_comm.hpp"
#include "ucx_tag.hpp"
#include "ucx_transport.hpp"

struct plexus_backend_ctx {
  plexus_host_v1 host;
  // UCX configured as the environment says; shared by the communicators that
  // span hosts (and by all of them when UCX_RNDV_THRESH is set).
  ucp_context_h context = nullptr;
  // Set once an endpoint could not get UCP_ERR_HANDLING_MODE_PEER (ucx_connect.cpp).
  std::atomic<bool> no_peer_errors{false};
  // For communicators whose ranks are all on this host: the same
  // configuration with UCX's rendezvous threshold raised to
  // kOneHostRndvThresh (see there), made by the first such communicator.
  std::mutex one_host_mutex;  // guards the two below
  ucp_context_h one_host_context = nullptr;
  bool one_host_tried = false;  // creation was attempted (it failed if the context is null)
  std::atomic<bool> one_host_no_peer_errors{false};
};

namespace plexus::ucx {
// PLEXUS_UCX_ALGO: which allreduce algorithm to use.
enum class Algo { kAuto, kRing, kRecursiveDoubling };
// Below this many bytes recursive doubling's log2(size) latency wins over the
// ring's 2(size-1) steps (the TCP backend's threshold, also right here: see README).
constexpr uint64_t kRecursiveDoublingMaxBytes = 64 << 10;
// PLEXUS_UCX_SPIN_US: how long a waiting operation polls the worker before
// it arms the event fd and sleeps. Over shared memory a small message's
// answer arrives within a few microseconds, and sleeping on the event fd
// and being woken costs several times that. Off by default when there are
// more ranks than CPUs, where most spins would wait for a peer that needs
// this CPU (the spin yields after 10 us, but still costs the tries).
constexpr int64_t kDefaultSpinUs = 50;
// UCX_RNDV_THRESH for communicators on one host, unless the environment sets
// it. UCX's "auto" threshold sends messages from a few KiB on with its
// rendezvous protocol, which there means a cma copy (process_vm_readv) after
// a handshake; copying them through the shared-memory FIFO instead (eager)
// was faster at every size the algorithms send (up to kSegmentBytes,
// 256 KiB): 2 ranks, allreduce, medians of 6 alternating launches against
// UCX_RNDV_THRESH=auto, 16 KiB 5.5 vs 8.7 us, 64 KiB 14.3 vs 20.6 us, 1 MiB
// 156 vs 195 us, 4 MiB 763 vs 1132 us, 16 MiB 5.0 vs 6.3 ms. Larger
// messages (a big send/recv) keep the zero-copy rendezvous. Across hosts
// (verbs, tcp) UCX's own choice stands, and so it does with more ranks on
// the host than CPUs: an eager copy then waits for the receiver to be
// scheduled to drain the FIFO, where a cma rendezvous lets it pull the whole
// message in one call (plexus-conformance at 3 ranks plus the battery at 5
// on 2 CPUs: 64-66 s eager, 46-47 s with UCX's threshold). The protocol is
// the sender's choice, so ranks whose contexts differ still understand each
// other.
constexpr const char* kOneHostRndvThresh = "1m";
constexpr const char* kOneHostRndvText = "1 MiB";
}  // namespace plexus::ucx

struct plexus_comm {
  std::unique_ptr<plexus::ucx::UcxComm> impl;
  plexus::ucx::Algo algo = plexus::ucx::Algo::kAuto;
};

namespace plexus::ucx {
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
                    const plexus_placement* placement, plexus_request** req_out,
                    bool per_rank = false) {
  if (!comm || !comm->impl) return PLEXUS_ERR_INVALID_ARGUMENT;
  // Built only for an error: every post passes here.
  auto where = [what] { return std::string("ucx ") + what + ": "; };
  if (!req_out) return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, where() + "req_out is NULL");
  *req_out = nullptr;
  if (algos::DtypeSize(dtype) == 0) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  where() + "unknown dtype code " + std::to_string(dtype));
  }
  if (placement && placement->memory_type != PLEXUS_MEMORY_HOST) {
    return Reject(comm, PLEXUS_ERR_UNSUPPORTED,
                  where() + "only host memory is supported (memory type " +
                      std::to_string(placement->memory_type) + ")");
  }
  // Buffers of size blocks (allgather, reduce_scatter, alltoall) must fit too.
  const uint64_t blocks = per_rank ? comm->impl->size() : 1;
  if (count > (uint64_t(1) << 62) / algos::DtypeSize(dtype) / blocks) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                  where() + "count " + std::to_string(count) + " is too large" +
                      (per_rank ? " for " + std::to_string(blocks) + " ranks" : ""));
  }
  return PLEXUS_OK;
}

// "tcp/lo tcp/eth0 posix/memory ..." from ucp_context_print_info's resource
// lines ("#   resource 0  :  md 0  dev 0  flags -- tcp/lo"): what UCX may use.
std::string ContextResources(ucp_context_h context) {
  char* text = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&text, &len);
  if (!f) return "";
  ucp_context_print_info(context, f);
  std::fclose(f);
  const std::string all(text ? text : "", len);
  std::free(text);
  std::string out;
  std::set<std::string> seen;
  for (size_t at = 0; (at = all.find("resource", at)) != std::string::npos;) {
    size_t eol = all.find('\n', at);
    if (eol == std::string::npos) eol = all.size();
    const std::string line = all.substr(at, eol - at);
    at = eol;
    const size_t space = line.find_last_of(' ');
    if (space == std::string::npos) continue;
    const std::string tok = line.substr(space + 1);
    if (tok.find('/') != std::string::npos && seen.insert(tok).second) {
      out += (out.empty() ? "" : " ") + tok;
    }
  }
  return out;
}

void LogHost(const plexus_host_v1& host, int32_t level, const std::string& message) {
  if (host.log) host.log(host.ctx, level, message.c_str());
}

// A UCP context configured by UCX's own variables from the environment
// (UCX_TLS, UCX_NET_DEVICES, ...), untouched by Plexus, except that a
// non-null rndv_thresh sets UCX's RNDV_THRESH. Logs why it failed (null).
ucp_context_h CreateContext(const plexus_host_v1& host, const char* rndv_thresh) {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);
  if (s != UCS_OK) {
    LogHost(host, PLEXUS_LOG_ERROR, std::string("ucp_config_read failed: ") + ucs_status_string(s));
    return nullptr;
  }
  if (rndv_thresh) s = ucp_config_modify(config, "RNDV_THRESH", rndv_thresh);
  if (s != UCS_OK) {
    ucp_config_release(config);
    LogHost(host, PLEXUS_LOG_ERROR,
            std::string("ucp_config_modify(RNDV_THRESH) failed: ") + ucs_status_string(s));
    return nullptr;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  // Each communicator's worker is driven by its own thread.
  params.mt_workers_shared = 1;
  ucp_context_h context = nullptr;
  s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (s != UCS_OK) {
    LogHost(host, PLEXUS_LOG_ERROR, std::string("ucp_init failed: ") + ucs_status_string(s));
    return nullptr;
  }
  return context;
}

// The context for a communicator whose ranks are all on this host: the
// one-host context, made on first use, or the default one when
// UCX_RNDV_THRESH is set (the user's choice) or the one-host context
// cannot be made. *no_peer_errors: the flag that goes with it.
ucp_context_h OneHostContext(plexus_backend_ctx* ctx, std::atomic<bool>** no_peer_errors) {
  std::lock_guard<std::mutex> lock(ctx->one_host_mutex);
  if (!ctx->one_host_tried) {
    ctx->one_host_tried = true;
    if (!std::getenv("UCX_RNDV_THRESH")) {
      ctx->one_host_context = CreateContext(ctx->host, kOneHostRndvThresh);
    }
  }
  if (!ctx->one_host_context) return ctx->context;
  *no_peer_errors = &ctx->one_host_no_peer_errors;
  return ctx->one_host_context;
}

int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** ctx_out) {
  if (!host || !ctx_out || host->struct_size < sizeof(plexus_host_v1) || !host->oob_allgather ||
      !host->oob_broadcast) {
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  try {
    ucp_context_h context = CreateContext(*host, nullptr);
    if (!context) return PLEXUS_ERR_SYSTEM;
    auto* ctx = new (std::nothrow) plexus_backend_ctx;
    if (ctx) {
      ctx->host = *host;
      ctx->context = context;
    }
    if (!ctx) {
      ucp_cleanup(context);
      return PLEXUS_ERR_SYSTEM;
    }
    std::string memory = "host";
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(context, &attr) == UCS_OK &&
        (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA))) {
      memory += " (UCX also handles CUDA memory; this backend reduces on the host only)";
    }
    LogHost(*host, PLEXUS_LOG_INFO,
            std::string("UCX ") + ucp_get_version_string() + ", memory " + memory +
                ", resources: " + ContextResources(context));
    *ctx_out = ctx;
    return PLEXUS_OK;
  } catch (...) {
    return PLEXUS_ERR_SYSTEM;
  }
}

void Finalize(plexus_backend_ctx* ctx) {
  if (!ctx) return;
  if (ctx->one_host_context) ucp_cleanup(ctx->one_host_context);  // made last, cleaned first
  if (ctx->context) ucp_cleanup(ctx->context);
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
      WriteError(error_buf, error_len, "ucx comm_create: invalid configuration");
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    *comm_out = nullptr;
    const std::string name = config->name ? config->name : "";
    if (config->size > kMaxRanks) {
      WriteError(error_buf, error_len,
                 "ucx comm_create: " + std::to_string(config->size) + " ranks; at most " +
                     std::to_string(kMaxRanks) + " fit the message tags");
      return PLEXUS_ERR_UNSUPPORTED;
    }
    Algo algo = Algo::kAuto;
    if (const std::string v = algos::CommSetting(ctx->host, *config, "PLEXUS_UCX_ALGO");
        !v.empty()) {
      if (v == "ring") {
        algo = Algo::kRing;
      } else if (v == "rd" || v == "recursive_doubling") {
        algo = Algo::kRecursiveDoubling;
      } else if (v != "auto") {
        WriteError(error_buf, error_len,
                   "ucx: PLEXUS_UCX_ALGO='" + v + "' is not one of auto, ring, rd");
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
    }
    // PLEXUS_UCX_ERR_MODE (ucx_transport.hpp): auto (default) asks UCX for
    // endpoints that report a peer's failure where the peer is on another
    // host, and watches peers on this host itself, so that they can use
    // shared memory and cma; peer asks for it everywhere; none nowhere.
    ErrMode err_mode = ErrMode::kAuto;
    if (const std::string v = algos::CommSetting(ctx->host, *config, "PLEXUS_UCX_ERR_MODE");
        !v.empty()) {
      if (v == "none") {
        err_mode = ErrMode::kNone;
      } else if (v == "peer") {
        err_mode = ErrMode::kPeer;
      } else if (v != "auto") {
        WriteError(error_buf, error_len,
                   "ucx: PLEXUS_UCX_ERR_MODE='" + v + "' is not one of auto, peer, none");
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
    }
    // A CPU for every rank (with fewer, spinning and eager copies wait for a
    // peer that needs this CPU; see kDefaultSpinUs and kOneHostRndvThresh).
    const bool cpu_per_rank = config->size <= std::thread::hardware_concurrency();
    int64_t spin_us = cpu_per_rank ? kDefaultSpinUs : 0;
    if (const std::string v = algos::CommSetting(ctx->host, *config, "PLEXUS_UCX_SPIN_US");
        !v.empty()) {
      char* end = nullptr;
      const long long us = std::strtoll(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || us < 0 || us > 1000000) {
        WriteError(
            error_buf, error_len,
            "ucx: PLEXUS_UCX_SPIN_US='" + v + "' is not a number of microseconds (0-1000000)");
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
      spin_us = us;
    }
    // Every rank of a communicator makes the same choice: each sees all
    // ranks on its host, or none does.
    const bool one_host = config->size > 1 && config->local_size == config->size && cpu_per_rank;
    std::atomic<bool>* no_peer_errors = &ctx->no_peer_errors;
    ucp_context_h context = one_host ? OneHostContext(ctx, &no_peer_errors) : ctx->context;
    const bool eager = context != ctx->context;
    auto transport =
        std::make_unique<UcxTransport>(ctx->host, context, no_peer_errors, config->rank,
                                       config->size, config->timeout_ms, spin_us, name);
    algos::Status st = transport->Connect(*config, err_mode);
    if (!st.ok()) {
      WriteError(error_buf, error_len,
                 "ucx: connecting rank " + std::to_string(config->rank) + " of " + name + ": " +
                     st.message);
      return st.code;
    }
    if (config->size > 1) {
      LogHost(ctx->host, PLEXUS_LOG_INFO,
              name + " rank " + std::to_string(config->rank) + " of " +
                  std::to_string(config->size) + ": peers reached over " + transport->transports() +
                  (eager ? std::string("; messages below ") + kOneHostRndvText +
                               " are copied through shared memory (on one host the backend sets "
                               "UCX_RNDV_THRESH=" +
                               kOneHostRndvThresh + "; set it yourself to choose)"
                         : std::string()));
    }
    auto comm = std::make_unique<plexus_comm>();
    comm->algo = algo;
    comm->impl = std::make_unique<UcxComm>(ctx->host, config->rank, config->size,
                                           config->timeout_ms, name, std::move(transport));
    *comm_out = comm.release();
    return PLEXUS_OK;
  } catch (const std::exception& e) {
    WriteError(error_buf, error_len, std::string("ucx comm_create: ") + e.what());
    return PLEXUS_ERR_INTERNAL;
  } catch (...) {
    WriteError(error_buf, error_len, "ucx comm_create: unknown exception");
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
  // A request still in progress belongs to a live communicator (comm_destroy
  // completes every pending one), so req->comm is only used then.
  std::unique_lock<std::mutex> lock(req->mutex);
  if (req->status == PLEXUS_IN_PROGRESS && timeout_ms >= req->default_timeout_ms && req->comm) {
    lock.unlock();
    req->comm->RunInlineIfNext(req);
    lock.lock();
  }
  // Done (typically: run inline just now): no deadline to compute.
  if (req->status != PLEXUS_IN_PROGRESS) return req->status;
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
                    "ucx allreduce: unknown reduce op code " + std::to_string(op));
    }
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "ucx allreduce: NULL buffer");
    }
    algos::OpSignature sig{0, PLEXUS_COLL_ALLREDUCE, dtype, op, count, 0};
    const bool ring =
        comm->algo == Algo::kRing ||
        (comm->algo == Algo::kAuto && count * algos::DtypeSize(dtype) > kRecursiveDoublingMaxBytes);
    // Two pointers only, so that std::function keeps the body in place
    // rather than allocating it (a third capture would cost a malloc a post).
    if (ring) {
      return comm->impl->Post(
          sig,
          [sendbuf, recvbuf](algos::PeerTransport& t, const algos::OpSignature& s) {
            return algos::RingAllreduce(t, s, sendbuf, recvbuf);
          },
          req_out);
    }
    return comm->impl->Post(
        sig,
        [sendbuf, recvbuf](algos::PeerTransport& t, const algos::OpSignature& s) {
          return algos::RecursiveDoublingAllreduce(t, s, sendbuf, recvbuf);
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
                    "ucx broadcast: root " + std::to_string(root) + " is not a rank (size " +
                        std::to_string(comm->impl->size()) + ")");
    }
    if (count > 0 && !buf)
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "ucx broadcast: NULL buffer");
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
    int32_t rc = CheckCommon(comm, "allgather", count, dtype, placement, req_out, true);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "ucx allgather: NULL buffer");
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
                    "ucx reduce: unknown reduce op code " + std::to_string(op));
    }
    if (root >= comm->impl->size()) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "ucx reduce: root " + std::to_string(root) + " is not a rank (size " +
                        std::to_string(comm->impl->size()) + ")");
    }
    const bool is_root = comm->impl->rank() == root;
    if (count > 0 && (!sendbuf || (is_root && !recvbuf))) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "ucx reduce: NULL buffer");
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
    int32_t rc = CheckCommon(comm, "reduce_scatter", count, dtype, placement, req_out, true);
    if (rc != PLEXUS_OK) return rc;
    if (!algos::CanReduce(dtype, op)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "ucx reduce_scatter: unknown reduce op code " + std::to_string(op));
    }
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "ucx reduce_scatter: NULL buffer");
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
    int32_t rc = CheckCommon(comm, "alltoall", count, dtype, placement, req_out, true);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "ucx alltoall: NULL buffer");
    }
    const uint64_t bytes = count * algos::DtypeSize(dtype) * comm->impl->size();
    const auto* s = static_cast<const uint8_t*>(sendbuf);
    const auto* r = static_cast<const uint8_t*>(recvbuf);
    if (count > 0 && s < r + bytes && r < s + bytes) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    "ucx alltoall: sendbuf and recvbuf overlap (alltoall is not in place)");
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
                    std::string("ucx ") + what + ": peer " + std::to_string(peer) +
                        " is not another rank (rank " + std::to_string(comm->impl->rank()) +
                        ", size " + std::to_string(comm->impl->size()) + ")");
    }
    if (count > 0 && !buf) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT,
                    std::string("ucx ") + what + ": NULL buffer");
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
    if (!req_out) return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, "ucx barrier: req_out is NULL");
    algos::OpSignature sig{0, PLEXUS_COLL_BARRIER, 0, 0, 0, 0};
    return comm->impl->Post(
        sig,
        [](algos::PeerTransport& t, const algos::OpSignature& s) {
          return algos::DisseminationBarrier(t, s);
        },
        req_out);
  });
}

// "0.1.0 (UCX 1.13.1)": the UCX library loaded at run time, in static storage.
const char* VersionString() {
  static const std::string version =
      std::string(PLEXUS_VERSION_STRING) + " (UCX " + ucp_get_version_string() + ")";
  return version.c_str();
}

const plexus_backend_v1 kTable = [] {
  plexus_backend_v1 t{};
  t.struct_size = sizeof(plexus_backend_v1);
  t.abi_major = PLEXUS_ABI_MAJOR;
  t.abi_minor = PLEXUS_ABI_MINOR;
  t.name = "ucx";
  t.version = VersionString();
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
}  // namespace plexus::ucx

extern "C" __attribute__((visibility("default"))) int32_t plexus_backend_get_v1(
    uint32_t host_abi_minor, const plexus_backend_v1** table_out) {
  (void)host_abi_minor;  // every 1.x host can drive this table (1.1 fields are checked)
  if (!table_out) return PLEXUS_ERR_INVALID_ARGUMENT;
  *table_out = &plexus::ucx::kTable;
  return PLEXUS_OK;
}
