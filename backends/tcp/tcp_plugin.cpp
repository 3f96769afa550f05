// libplexus-tcp.so: the ABI v1 table of the TCP backend.
//
// The C glue (argument checks, test/wait/free, errors, no exception across
// the ABI) and the ordered operation queue come from plexus-kit; this file
// says what is TCP's own: how a communicator connects (mesh_connect.cpp),
// its settings, and which plexus-algos algorithm runs each collective.
#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "mesh_connect.hpp"
#include "plexus/algos/comm_setting.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/backend.h"
#include "plexus/kit/collective_algorithms.hpp"
#include "plexus/kit/op_queue.hpp"
#include "plexus/kit/settings.hpp"
#include "plexus/kit/table.hpp"
#include "socket_transport.hpp"
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
// plexus-bench --blocking on loopback (see docs/benchmarks.md); above it
// the ring wins, as the pair exchange reduces twice the bytes.
constexpr uint64_t kPairMaxBytes = 512 << 10;
// PLEXUS_TCP_SPIN_US: how long a rank retries its sockets before it sleeps. A
// small allreduce's answer comes back over loopback within microseconds;
// sleeping and being woken costs about as much again. Off by default when there
// are more ranks than CPUs, where most spins would wait for a peer that needs
// this CPU (the spin yields the CPU after 10 us, but still costs the tries).
constexpr int64_t kDefaultSpinUs = 50;
// Operations a caller waiting for the next one runs on its own thread
// (kit::OpQueueOptions::inline_max_bytes): every size up to this. Handing a
// large one to the worker and waking the caller after it cost more than it
// saved, and more in some launches than in others (docs/benchmarks.md).
constexpr uint64_t kInlineMaxBytes = 64 << 20;
}  // namespace plexus::tcp

struct plexus_comm : plexus::kit::QueuedComm<plexus::tcp::SocketTransport> {
  plexus::tcp::Algo algo = plexus::tcp::Algo::kAuto;
};

namespace plexus::tcp {
namespace {

// How to all-reduce `bytes` bytes on `size` ranks (PLEXUS_TCP_ALGO, or the
// measured choice above).
kit::AllreduceAlgo AllreduceAlgo(Algo chosen, uint32_t size, uint64_t bytes) {
  if (chosen == Algo::kAuto) {
    if (size == 2 && bytes <= kPairMaxBytes) return kit::AllreduceAlgo::kPairExchange;
    chosen = bytes > kRecursiveDoublingMaxBytes ? Algo::kRing : Algo::kRecursiveDoubling;
  }
  switch (chosen) {
    case Algo::kPair:
      return kit::AllreduceAlgo::kPairExchange;  // (the ring on other than 2 ranks)
    case Algo::kRecursiveDoubling:
      return kit::AllreduceAlgo::kRecursiveDoubling;
    default:
      return kit::AllreduceAlgo::kRing;
  }
}

struct TcpBackend : kit::AlgosBackend<plexus_comm, plexus_backend_ctx> {
  static constexpr const char* kName = "tcp";
  static const char* Version() { return PLEXUS_VERSION_STRING; }

  static int32_t CommCreate(plexus_backend_ctx& ctx, const plexus_comm_config_v1& config,
                            plexus_comm** comm_out, std::string* error) {
    // Settings first: a bad one fails before any connection is made.
    int64_t spin_us = config.size <= std::thread::hardware_concurrency() ? kDefaultSpinUs : 0;
    // PLEXUS_TCP_PIPELINE_DEPTH: ring segments in flight (default: 2 on one
    // host, 16 when a peer is on another; socket_transport.cpp says why).
    int64_t depth = 0;
    std::string why;
    if (!kit::IntSetting(ctx.host, config, settings::Id::kTcpSpinUs, &spin_us, &why) ||
        !kit::IntSetting(ctx.host, config, settings::Id::kTcpPipelineDepth, &depth, &why)) {
      *error = "tcp: " + why;
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    Algo algo = Algo::kAuto;
    if (const std::string v = algos::CommSetting(ctx.host, config, "PLEXUS_TCP_ALGO"); !v.empty()) {
      if (v == "ring") {
        algo = Algo::kRing;
      } else if (v == "rd" || v == "recursive_doubling") {
        algo = Algo::kRecursiveDoubling;
      } else if (v == "pair") {
        algo = Algo::kPair;  // the ring on other than 2 ranks
      } else if (v != "auto") {
        *error = "tcp: PLEXUS_TCP_ALGO='" + v + "' is not one of auto, ring, rd, pair";
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
    }
    std::vector<int> fds(config.size, -1);
    if (config.size > 1) {
      algos::Status st = ConnectMesh(ctx.host, config, &fds);
      if (!st.ok()) {
        *error = "tcp: connecting rank " + std::to_string(config.rank) + " of " + config.name +
                 ": " + st.message;
        return st.code;
      }
    }
    auto comm = std::make_unique<plexus_comm>();
    comm->algo = algo;
    comm->transport = std::make_unique<SocketTransport>(
        config.rank, config.size, std::move(fds), config.timeout_ms, spin_us, uint32_t(depth));
    std::unique_ptr<kit::OneHostShm> one_host;
    if (config.size > 1) {
      std::string shm;
      kit::OneHostShmOptions shm_options;
      shm_options.backend = kName;
      shm_options.spin_us = spin_us;
      if (algos::Status st = kit::MakeOneHostShm(ctx.host, config, shm_options, &one_host, &shm);
          !st.ok()) {
        *error =
            "tcp: rank " + std::to_string(config.rank) + " of " + config.name + ": " + st.message;
        return st.code;
      }
      Log(ctx.host, PLEXUS_LOG_INFO,
          std::string(config.name) + " rank " + std::to_string(config.rank) + ": " + shm);
    }
    comm->queue = std::make_unique<kit::OpQueue>(
        ctx.host, *comm->transport, kit::OpQueueOptions::For(kName, config, kInlineMaxBytes),
        std::move(one_host));
    *comm_out = comm.release();
    return PLEXUS_OK;
  }

  static int32_t Post(plexus_comm& comm, const kit::Call& call, plexus_request** req_out) {
    const auto algo = AllreduceAlgo(comm.algo, comm.queue->size(), kit::CallBytes(call));
    return kit::PostAlgos(*comm.queue, call, algo, req_out);
  }
};

}  // namespace
}  // namespace plexus::tcp

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** table_out) {
  return plexus::kit::HandOutTable<plexus::tcp::TcpBackend>(host_abi_minor, table_out);
}
