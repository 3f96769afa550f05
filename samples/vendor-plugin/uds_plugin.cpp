// libplexus-uds.so: the ABI table of an example backend that runs Plexus
// collectives over Unix-domain sockets between the ranks of one host.
//
// What a vendor writes is the transport: uds_connect.cpp makes one socket
// per pair of ranks, uds_transport.cpp moves framed bytes over them and says
// clearly when that fails. Everything else comes from the installed SDK:
//  - plexus-algos runs every collective over the transport's Exchange();
//  - plexus-kit's OpQueue runs the posted operations of a communicator in
//    order on a worker thread (or on the thread that waits, for small ones),
//    keeps send/recv in flight together, and completes every request once;
//  - plexus-kit's MakeTable builds the C table from UdsBackend below: it
//    checks every argument (a backend cannot trust its caller more than the
//    host trusts the backend), implements test/wait/request_free, records
//    errors, and lets no C++ exception cross the ABI.
// So this file only says how a communicator is made and which algorithm
// runs each collective.
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "plexus/algos/comm_setting.hpp"
#include "plexus/backend.h"
#include "plexus/kit/collective_algorithms.hpp"
#include "plexus/kit/op_queue.hpp"
#include "plexus/kit/settings.hpp"
#include "plexus/kit/table.hpp"
#include "uds_transport.hpp"

struct plexus_backend_ctx {
  plexus_host_v1 host;  // a copy of the table; what it points to outlives us
};

// The transport and the queue that drives it (kit::QueuedComm says in
// which order they go).
struct plexus_comm : plexus::kit::QueuedComm<uds::UdsTransport> {};

namespace uds {
namespace kit = plexus::kit;
namespace {

// Recursive doubling (log2 n steps) beats the ring (2(n-1) steps) below this.
constexpr uint64_t kSmallAllreduceBytes = 64 << 10;

struct UdsBackend : kit::AlgosBackend<plexus_comm, plexus_backend_ctx> {
  static constexpr const char* kName = "uds";
  static const char* Version() { return "0.1.0 (example: Unix-domain sockets, one host)"; }

  static int32_t CommCreate(plexus_backend_ctx& ctx, const plexus_comm_config_v1& config,
                            plexus_comm** comm_out, std::string* error) {
    // Where the sockets live: PLEXUS_UDS_DIR, else the abstract namespace.
    const std::string dir = plexus::algos::CommSetting(ctx.host, config, "PLEXUS_UDS_DIR");
    std::vector<int> fds(config.size, -1);
    Status st = ConnectMesh(ctx.host, config, dir, &fds);
    if (!st.ok()) {
      for (int fd : fds) {
        if (fd >= 0) close(fd);
      }
      *error = "uds comm_create: rank " + std::to_string(config.rank) + ": " + st.message;
      return st.code;
    }
    auto comm = std::make_unique<plexus_comm>();
    comm->transport =  // owns the sockets from here
        std::make_unique<UdsTransport>(config.rank, std::exchange(fds, {}), config.timeout_ms);
    comm->queue = std::make_unique<kit::OpQueue>(ctx.host, *comm->transport,
                                                 kit::OpQueueOptions::For(kName, config, 64 << 10));
    *comm_out = comm.release();
    return PLEXUS_OK;
  }

  // Every collective and send/recv, once the kit has checked its arguments.
  static int32_t Post(plexus_comm& comm, const kit::Call& call, plexus_request** req_out) {
    const bool small = kit::CallBytes(call) <= kSmallAllreduceBytes;
    return kit::PostAlgos(
        *comm.queue, call,
        small ? kit::AllreduceAlgo::kRecursiveDoubling : kit::AllreduceAlgo::kRing, req_out);
  }
};

}  // namespace
}  // namespace uds

// The one exported symbol. Any 1.x host can drive this table: a 1.0 host
// copies it only up to its own sizeof and never sees the later slots.
PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** table_out) {
  return plexus::kit::HandOutTable<uds::UdsBackend>(host_abi_minor, table_out);
}
