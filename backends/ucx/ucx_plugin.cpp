// libplexus-ucx.so: the ABI v1 table of the UCX backend.
//
// The C glue (argument checks, test/wait/free, errors, no exception across
// the ABI) and the ordered operation queue come from plexus-kit; this file
// says what is UCX's own: the process's ucp_contexts, how a communicator
// connects (ucx_connect.cpp), its settings, and which plexus-algos algorithm
// runs each collective.
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

#include "plexus/algos/comm_setting.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/backend.h"
#include "plexus/kit/collective_algorithms.hpp"
#include "plexus/kit/op_queue.hpp"
#include "plexus/kit/settings.hpp"
#include "plexus/kit/table.hpp"
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
// ring's 2(size-1) steps (the TCP backend's threshold, also right here: see README.md).
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
// rendezvous protocol, which there means a cma copy (process_vm_readv) after a
// handshake; copying them through the shared-memory FIFO instead (eager) is
// faster at every size the algorithms send (up to kSegmentBytes, 256 KiB; see
// docs/benchmarks.md). Larger messages (a big send/recv) keep the zero-copy
// rendezvous. Across hosts (verbs, tcp) UCX's own choice stands, and so it does
// with more ranks on the host than CPUs: an eager copy then waits for the
// receiver to be scheduled to drain the FIFO, where a cma rendezvous lets it
// pull the whole message in one call (see docs/benchmarks.md). The protocol is
// the sender's choice, so ranks whose contexts differ still understand each
// other.
constexpr const char* kOneHostRndvThresh = "1m";
constexpr const char* kOneHostRndvText = "1 MiB";
}  // namespace plexus::ucx

struct plexus_comm : plexus::kit::QueuedComm<plexus::ucx::UcxTransport> {
  plexus::ucx::Algo algo = plexus::ucx::Algo::kAuto;
};

namespace plexus::ucx {
namespace {

// Operations of at most this many bytes may run on a waiting caller's
// thread: on 2 ranks over shared memory, running inline saves the hand-off
// up to this size and costs far more above it (see docs/benchmarks.md).
constexpr uint64_t kInlineMaxBytes = 128 << 10;

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

struct UcxBackend : kit::QueuedBackend<plexus_comm> {
  static constexpr const char* kName = "ucx";
  static constexpr uint32_t kCollectives = abi::kAllCollectives;  // PostAlgos runs them all

  // "0.1.0 (UCX 1.13.1)": the UCX library loaded at run time, in static storage.
  static const char* Version() {
    static const std::string version =
        std::string(PLEXUS_VERSION_STRING) + " (UCX " + ucp_get_version_string() + ")";
    return version.c_str();
  }

  static int32_t Init(const plexus_host_v1& host, plexus_backend_ctx** ctx_out) {
    if (!host.oob_allgather || !host.oob_broadcast) return PLEXUS_ERR_INVALID_ARGUMENT;
    ucp_context_h context = CreateContext(host, nullptr);
    if (!context) return PLEXUS_ERR_SYSTEM;
    auto* ctx = new (std::nothrow) plexus_backend_ctx;
    if (!ctx) {
      ucp_cleanup(context);
      return PLEXUS_ERR_SYSTEM;
    }
    ctx->host = host;
    ctx->context = context;
    std::string memory = "host";
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(context, &attr) == UCS_OK &&
        (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA))) {
      memory += " (UCX also handles CUDA memory; this backend reduces on the host only)";
    }
    LogHost(host, PLEXUS_LOG_INFO,
            std::string("UCX ") + ucp_get_version_string() + ", memory " + memory +
                ", resources: " + ContextResources(context));
    *ctx_out = ctx;
    return PLEXUS_OK;
  }

  static void Finalize(plexus_backend_ctx* ctx) {
    if (ctx->one_host_context) ucp_cleanup(ctx->one_host_context);  // made last, cleaned first
    if (ctx->context) ucp_cleanup(ctx->context);
    delete ctx;
  }

  static void Capabilities(plexus_backend_ctx&, plexus_capabilities& caps) {
    kit::SetAlgosHostCapabilities(caps, kCollectives);
  }

  static int32_t CommCreate(plexus_backend_ctx& ctx, const plexus_comm_config_v1& config,
                            plexus_comm** comm_out, std::string* error) {
    const std::string name = config.name ? config.name : "";
    if (config.size > kMaxRanks) {
      *error = "ucx comm_create: " + std::to_string(config.size) + " ranks; at most " +
               std::to_string(kMaxRanks) + " fit the message tags";
      return PLEXUS_ERR_UNSUPPORTED;
    }
    Algo algo = Algo::kAuto;
    if (const std::string v = algos::CommSetting(ctx.host, config, "PLEXUS_UCX_ALGO"); !v.empty()) {
      if (v == "ring") {
        algo = Algo::kRing;
      } else if (v == "rd" || v == "recursive_doubling") {
        algo = Algo::kRecursiveDoubling;
      } else if (v != "auto") {
        *error = "ucx: PLEXUS_UCX_ALGO='" + v + "' is not one of auto, ring, rd";
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
    }
    // PLEXUS_UCX_ERR_MODE (ucx_transport.hpp): auto (default) asks UCX for
    // endpoints that report a peer's failure where the peer is on another
    // host, and watches peers on this host itself, so that they can use
    // shared memory and cma; peer asks for it everywhere; none nowhere.
    ErrMode err_mode = ErrMode::kAuto;
    if (const std::string v = algos::CommSetting(ctx.host, config, "PLEXUS_UCX_ERR_MODE");
        !v.empty()) {
      if (v == "none") {
        err_mode = ErrMode::kNone;
      } else if (v == "peer") {
        err_mode = ErrMode::kPeer;
      } else if (v != "auto") {
        *error = "ucx: PLEXUS_UCX_ERR_MODE='" + v + "' is not one of auto, peer, none";
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
    }
    // A CPU for every rank (with fewer, spinning and eager copies wait for a
    // peer that needs this CPU; see kDefaultSpinUs and kOneHostRndvThresh).
    const bool cpu_per_rank = config.size <= std::thread::hardware_concurrency();
    int64_t spin_us = cpu_per_rank ? kDefaultSpinUs : 0;
    if (std::string why;
        !kit::IntSetting(ctx.host, config, settings::Id::kUcxSpinUs, &spin_us, &why)) {
      *error = "ucx: " + why;
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    // Every rank of a communicator makes the same choice: each sees all
    // ranks on its host, or none does.
    const bool one_host = config.size > 1 && config.local_size == config.size && cpu_per_rank;
    std::atomic<bool>* no_peer_errors = &ctx.no_peer_errors;
    ucp_context_h context = one_host ? OneHostContext(&ctx, &no_peer_errors) : ctx.context;
    const bool eager = context != ctx.context;
    auto transport = std::make_unique<UcxTransport>(ctx.host, context, no_peer_errors, config.rank,
                                                    config.size, config.timeout_ms, spin_us, name);
    // On one host UCX moves a message from 1 MiB (kOneHostRndvThresh) with
    // its rendezvous, a single cma copy from the sender's buffer into the
    // receiver's; below it through the FIFO, copied in and out. So the
    // steps that receive straight into the caller's buffer (the ring
    // allreduce's allgather half, allgather) send whole blocks, which beats
    // 256 KiB segments on large vectors (see docs/benchmarks.md).
    if (one_host) transport->set_direct_message_bytes(UINT64_MAX);
    algos::Status st = transport->Connect(config, err_mode);
    if (!st.ok()) {
      *error =
          "ucx: connecting rank " + std::to_string(config.rank) + " of " + name + ": " + st.message;
      return st.code;
    }
    std::string shm;
    std::unique_ptr<kit::OneHostShm> one_host_shm;
    if (config.size > 1) {
      kit::OneHostShmOptions shm_options;
      shm_options.backend = kName;
      shm_options.spin_us = spin_us;
      if (st = kit::MakeOneHostShm(ctx.host, config, shm_options, &one_host_shm, &shm); !st.ok()) {
        *error = "ucx: rank " + std::to_string(config.rank) + " of " + name + ": " + st.message;
        return st.code;
      }
    }
    if (config.size > 1) {
      LogHost(ctx.host, PLEXUS_LOG_INFO,
              name + " rank " + std::to_string(config.rank) + " of " + std::to_string(config.size) +
                  ": peers reached over " + transport->transports() +
                  (eager ? std::string("; messages below ") + kOneHostRndvText +
                               " are copied through shared memory (on one host the backend sets "
                               "UCX_RNDV_THRESH=" +
                               kOneHostRndvThresh + "; set it yourself to choose)"
                         : std::string()) +
                  (transport->warm_up().empty() ? "" : "; " + transport->warm_up()) + "; " + shm);
    }
    auto comm = std::make_unique<plexus_comm>();
    comm->algo = algo;
    comm->transport = std::move(transport);
    comm->queue = std::make_unique<kit::OpQueue>(
        ctx.host, *comm->transport, kit::OpQueueOptions::For(kName, config, kInlineMaxBytes),
        std::move(one_host_shm));
    *comm_out = comm.release();
    return PLEXUS_OK;
  }

  static int32_t Post(plexus_comm& comm, const kit::Call& call, plexus_request** req_out) {
    const bool ring =
        comm.algo == Algo::kRing ||
        (comm.algo == Algo::kAuto && kit::CallBytes(call) > kRecursiveDoublingMaxBytes);
    return kit::PostAlgos(*comm.queue, call,
                          ring ? kit::AllreduceAlgo::kRing : kit::AllreduceAlgo::kRecursiveDoubling,
                          req_out);
  }
};

}  // namespace
}  // namespace plexus::ucx

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** table_out) {
  return plexus::kit::HandOutTable<plexus::ucx::UcxBackend>(host_abi_minor, table_out);
}
