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
#include "plexus/algos/collectives.hpp"
#include "plexus/algos/comm_setting.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/backend.h"
#include "plexus/kit/op_queue.hpp"
#include "plexus/kit/table.hpp"
#include "socket_transport.hpp"

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
  // Declared before the queue, so destroyed after it (the queue joins its
  // worker, which uses the transport).
  std::unique_ptr<plexus::tcp::SocketTransport> transport;
  std::unique_ptr<plexus::kit::OpQueue> queue;
  plexus::tcp::Algo algo = plexus::tcp::Algo::kAuto;
};

namespace plexus::tcp {
namespace {

constexpr uint32_t kAllDtypes = 0x1ffeu;  // bits 1..12

// A setting's value as a whole number in [lo, hi]; false if it is not one.
bool ParseSetting(const std::string& v, int64_t lo, int64_t hi, int64_t* out) {
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || x < lo || x > hi) return false;
  *out = x;
  return true;
}

// The algorithm of an allreduce of `bytes` bytes on `size` ranks.
Algo AllreduceAlgo(Algo chosen, uint32_t size, uint64_t bytes) {
  if (chosen != Algo::kAuto) return chosen;
  if (size == 2 && bytes <= kPairMaxBytes) return Algo::kPair;
  return bytes > kRecursiveDoublingMaxBytes ? Algo::kRing : Algo::kRecursiveDoubling;
}

// The plexus-algos algorithm that runs call. Two pointers (and an enum) at
// most in each closure, so that std::function keeps it in place rather than
// allocating it on every post.
kit::OpBody BodyOf(const plexus_comm& comm, const kit::Call& call) {
  const void* send = call.sendbuf;
  void* recv = call.recvbuf;
  switch (call.coll) {
    case PLEXUS_COLL_ALLREDUCE: {
      const Algo algo = AllreduceAlgo(comm.algo, comm.queue->size(), kit::CallBytes(call));
      return [send, recv, algo](algos::PeerTransport& t, const algos::OpSignature& s) {
        switch (algo) {
          case Algo::kPair:
            return algos::PairExchangeAllreduce(t, s, send, recv);
          case Algo::kRecursiveDoubling:
            return algos::RecursiveDoublingAllreduce(t, s, send, recv);
          default:
            return algos::RingAllreduce(t, s, send, recv);
        }
      };
    }
    case PLEXUS_COLL_BROADCAST:
      return [recv](algos::PeerTransport& t, const algos::OpSignature& s) {
        return algos::BinomialBroadcast(t, s, recv);
      };
    case PLEXUS_COLL_REDUCE:
      return [send, recv](algos::PeerTransport& t, const algos::OpSignature& s) {
        return algos::BinomialReduce(t, s, send, recv);
      };
    case PLEXUS_COLL_ALLGATHER:
      return [send, recv](algos::PeerTransport& t, const algos::OpSignature& s) {
        return algos::RingAllgather(t, s, send, recv);
      };
    case PLEXUS_COLL_REDUCE_SCATTER:
      return [send, recv](algos::PeerTransport& t, const algos::OpSignature& s) {
        return algos::RingReduceScatter(t, s, send, recv);
      };
    case PLEXUS_COLL_ALLTOALL:
      return [send, recv](algos::PeerTransport& t, const algos::OpSignature& s) {
        return algos::PairwiseAlltoall(t, s, send, recv);
      };
    default:  // barrier
      return [](algos::PeerTransport& t, const algos::OpSignature& s) {
        return algos::DisseminationBarrier(t, s);
      };
  }
}

struct TcpBackend {
  static constexpr const char* kName = "tcp";
  static constexpr uint32_t kCollectives = (1u << PLEXUS_COLL_COUNT_V1) - 1;  // all of v1
  static const char* Version() { return PLEXUS_VERSION_STRING; }
  using Requests = kit::QueuedRequests;

  static int32_t Init(const plexus_host_v1& host, plexus_backend_ctx** ctx_out) {
    *ctx_out = new plexus_backend_ctx{host};
    return PLEXUS_OK;
  }
  static void Finalize(plexus_backend_ctx* ctx) { delete ctx; }

  static void Capabilities(plexus_backend_ctx&, plexus_capabilities& caps) {
    caps.collectives = kCollectives;
    caps.memory_types = 1u << PLEXUS_MEMORY_HOST;
    caps.dtypes = kAllDtypes;
    for (uint32_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op) {
      caps.reduce_dtypes[op] = kAllDtypes;
    }
    caps.flags = PLEXUS_CAP_IN_PLACE | PLEXUS_CAP_ABORT;
    caps.thread_level = PLEXUS_THREAD_MULTIPLE;
  }

  static int32_t CommCreate(plexus_backend_ctx& ctx, const plexus_comm_config_v1& config,
                            plexus_comm** comm_out, std::string* error) {
    // Settings first: a bad one fails before any connection is made.
    int64_t spin_us = config.size <= std::thread::hardware_concurrency() ? kDefaultSpinUs : 0;
    if (const std::string v = algos::CommSetting(ctx.host, config, "PLEXUS_TCP_SPIN_US");
        !v.empty() && !ParseSetting(v, 0, 1000000, &spin_us)) {
      *error = "tcp: PLEXUS_TCP_SPIN_US='" + v + "' is not a number of microseconds (0-1000000)";
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    // PLEXUS_TCP_PIPELINE_DEPTH: ring segments in flight (default: 2 on one
    // host, 16 when a peer is on another; socket_transport.cpp says why).
    int64_t depth = 0;
    if (const std::string v = algos::CommSetting(ctx.host, config, "PLEXUS_TCP_PIPELINE_DEPTH");
        !v.empty() && !ParseSetting(v, 1, 16, &depth)) {
      *error = "tcp: PLEXUS_TCP_PIPELINE_DEPTH='" + v + "' is not a number of segments (1-16)";
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
    kit::OpQueueOptions o;
    o.backend = kName;
    o.rank = config.rank;
    o.size = config.size;
    o.timeout_ms = config.timeout_ms;
    o.name = config.name;
    o.inline_max_bytes = 64 << 10;
    comm->queue = std::make_unique<kit::OpQueue>(ctx.host, *comm->transport, std::move(o));
    *comm_out = comm.release();
    return PLEXUS_OK;
  }

  static void CommDestroy(plexus_comm* comm) { delete comm; }
  static void CommAbort(plexus_comm& comm) { comm.queue->Abort(); }
  static kit::ErrorSlot& Errors(plexus_comm& comm) { return comm.queue->errors(); }
  static kit::CommShape Shape(const plexus_comm& comm) {
    return {comm.queue->rank(), comm.queue->size()};
  }
  static uint32_t MemoryTypes(const plexus_comm&) { return kit::kHostMemoryOnly; }

  static int32_t Post(plexus_comm& comm, const kit::Call& call, plexus_request** req_out) {
    if (call.coll == PLEXUS_COLL_SEND || call.coll == PLEXUS_COLL_RECV) {
      const bool is_send = call.coll == PLEXUS_COLL_SEND;
      void* buf = is_send ? const_cast<void*>(call.sendbuf) : call.recvbuf;
      return comm.queue->PostMessage(is_send, call.root, buf, call.count, call.dtype, req_out);
    }
    const algos::OpSignature sig{0, call.coll, call.dtype, call.op, call.count, call.root};
    // count 0 completes in its place without the peers (the ABI allows it);
    // a barrier always has count 0 and must synchronise.
    const bool empty = call.count == 0 && call.coll != PLEXUS_COLL_BARRIER;
    return comm.queue->Post(sig, empty ? kit::OpBody() : BodyOf(comm, call), req_out);
  }
};

}  // namespace
}  // namespace plexus::tcp

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** table_out) {
  return plexus::kit::HandOutTable<plexus::tcp::TcpBackend>(host_abi_minor, table_out);
}
