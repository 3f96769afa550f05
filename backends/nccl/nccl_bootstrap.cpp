#include "nccl_bootstrap.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <vector>

namespace plexus::nccl {
namespace {

// Rank 0's message to all: its unique id, or why it has none.
struct IdMessage {
  int32_t status;  // PLEXUS_OK or the error rank 0 failed with
  uint32_t reserved;
  ncclUniqueId id;
  char reason[248];
};

// Every rank's report to all, so that one rank's bad device is every rank's
// clear error instead of NCCL's wait for it.
struct RankReport {
  int32_t status;  // PLEXUS_OK or this rank's error
  int32_t device;
  char host[64];
  char bus_id[32];  // PCI bus id of the device: the same GPU under any CUDA_VISIBLE_DEVICES
  char reason[152];
};

void Copy(char* dst, size_t len, const std::string& src) {
  const size_t n = std::min(len - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

std::string Text(const char* s, size_t len) {
  return std::string(s, strnlen(s, len));
}

std::string CudaError(const CudaApi& api, const char* call, cudaError_t e) {
  api.GetLastError();
  return std::string(call) + ": " + api.GetErrorName(e) + ": " + api.GetErrorString(e);
}

std::string NcclError(const CudaApi& api, const char* call, ncclResult_t r, ncclComm_t comm) {
  const char* last = api.GetNcclLastError(comm);
  return std::string(call) + ": " + api.GetNcclErrorString(r) +
         (last && *last ? std::string(" (") + last + ")" : std::string());
}

std::string VisibleDevices() {
  // Only to explain a count in a message; never changes behaviour.
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? std::string(" (CUDA_VISIBLE_DEVICES=") + v + ")" : std::string();
}

}  // namespace

int32_t StatusOfNccl(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return PLEXUS_OK;
    case ncclInvalidArgument:
      return PLEXUS_ERR_INVALID_ARGUMENT;
    case ncclInvalidUsage:
      return PLEXUS_ERR_INVALID_USAGE;
    case ncclRemoteError:
      return PLEXUS_ERR_REMOTE;
    case ncclSystemError:
    case ncclUnhandledCudaError:
      return PLEXUS_ERR_SYSTEM;
    default:
      return PLEXUS_ERR_INTERNAL;
  }
}

namespace {

// Waits until NCCL has made comm in the background (a non-blocking
// communicator; r is what `call`, ncclCommInitRankConfig or ncclCommSplit,
// returned), until deadline. On failure comm is aborted and *error, which
// starts with me, says why; waiting_for explains a timeout.
int32_t WaitUntilReady(const CudaApi& api, ncclComm_t comm, ncclResult_t r, const char* call,
                       int64_t deadline, int64_t timeout_ms, const std::string& me,
                       const std::string& waiting_for, std::string* error) {
  for (;;) {
    if (r != ncclSuccess && r != ncclInProgress) {
      *error = me + ": " + NcclError(api, call, r, comm);
      if (comm) api.CommAbort(comm);
      return StatusOfNccl(r);
    }
    if (!comm) {
      *error = me + ": " + call + " returned no communicator";
      return PLEXUS_ERR_INTERNAL;
    }
    ncclResult_t async = ncclInProgress;
    r = api.CommGetAsyncError(comm, &async);
    if (r == ncclSuccess) r = async;
    if (r == ncclSuccess) return PLEXUS_OK;
    if (r == ncclInProgress && NowNs() >= deadline) {
      api.CommAbort(comm);
      *error = me + ": NCCL did not finish connecting within " + std::to_string(timeout_ms) +
               " ms: " + waiting_for;
      return PLEXUS_ERR_TIMEOUT;
    }
    if (r == ncclInProgress) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// Gives core the ready NCCL communicator comm with what it needs beside it:
// its own stream (a blocking one: ordered after work on the legacy default
// stream, for callers that pass no stream), the barrier's scratch word, and a
// few events to start the pool with. Runs with core's device current. On
// failure comm is aborted and *error (starting with me) says why.
int32_t AdoptReady(const CudaApi& api, CommCore& core, ncclComm_t comm, const std::string& me,
                   std::string* error) {
  cudaStream_t stream = nullptr;
  cudaError_t e = api.StreamCreateWithFlags(&stream, cudaStreamDefault);
  if (e != cudaSuccess) {
    *error = me + ": " + CudaError(api, "cudaStreamCreateWithFlags", e);
    api.CommAbort(comm);
    return PLEXUS_ERR_SYSTEM;
  }
  void* scratch = nullptr;
  e = api.Malloc(&scratch, sizeof(int32_t));
  if (e == cudaSuccess) e = api.Memset(scratch, 0, sizeof(int32_t));
  if (e != cudaSuccess) {
    *error = me + ": " + CudaError(api, "cudaMalloc of the barrier word", e);
    if (scratch) api.Free(scratch);
    api.StreamDestroy(stream);
    api.CommAbort(comm);
    return PLEXUS_ERR_SYSTEM;
  }
  core.Adopt(comm, stream, scratch);  // owned by core from here on
  cudaEvent_t events[8] = {};
  std::string why;
  for (auto& ev : events) {
    if (!core.AcquireEvent(&ev, &why)) ev = nullptr;
  }
  for (auto& ev : events) core.ReleaseEvent(ev);
  return PLEXUS_OK;
}

}  // namespace

int32_t CreateCommunicator(const CudaApi& api, const plexus_host_v1& host,
                           const plexus_comm_config_v1& config, std::shared_ptr<CommCore>* out,
                           std::string* error) {
  // One deadline for the whole of comm_create (the ABI's TIMEOUT "after
  // config->timeout_ms"): each step below gets what is left of it, not the
  // full timeout again. Clamped: a huge timeout ("for ever") must not wrap.
  const auto start = std::chrono::steady_clock::now();
  const int64_t deadline = DeadlineAfterMs(NowNs(), config.timeout_ms);
  const std::string name = config.name ? config.name : "";
  const std::string me =
      "rank " + std::to_string(config.rank) + " of " + std::to_string(config.size) + " of " + name;

  // 1. A device at all: fails at once, before talking to anybody, where the
  // process sees no GPU (every rank of such a job fails the same way).
  int count = 0;
  const cudaError_t ce = api.GetDeviceCount(&count);
  if (ce != cudaSuccess || count <= 0) {
    *error = "no CUDA device (" +
             (ce != cudaSuccess ? CudaError(api, "cudaGetDeviceCount", ce)
                                : std::string("cudaGetDeviceCount found 0")) +
             ")" + VisibleDevices() + "; the NCCL backend needs one GPU per rank";
    return PLEXUS_ERR_UNSUPPORTED;
  }

  // 2. This rank's device: the host's choice (options.device, else the local
  // rank: the launch convention of DESIGN.md), checked; the result is
  // shared below, so it is each rank's own fault that gets named.
  int device = config.device >= 0 ? config.device : int(config.local_rank);
  // The host passes the local rank as the device by default. Where each
  // process sees fewer GPUs than there are processes on the host (the
  // per-rank CUDA_VISIBLE_DEVICES convention: one GPU each), that ordinal
  // does not exist; the device then is local_rank % count (0 with one GPU).
  // Said at INFO, since it silently differs from the host's choice.
  if (device >= count && device == int(config.local_rank) &&
      (count == 1 || uint32_t(count) < config.local_size)) {
    const int chosen = int(config.local_rank % uint32_t(count));
    if (host.log) {
      host.log(host.ctx, PLEXUS_LOG_INFO,
               ("nccl " + me + ": local rank " + std::to_string(config.local_rank) + " of " +
                std::to_string(config.local_size) + " sees " + std::to_string(count) +
                " CUDA device(s)" + VisibleDevices() + "; using device " + std::to_string(chosen) +
                " (local rank % device count)")
                   .c_str());
    }
    device = chosen;
  }
  RankReport mine{};
  mine.status = PLEXUS_OK;
  mine.device = device;
  if (gethostname(mine.host, sizeof mine.host - 1) != 0) Copy(mine.host, sizeof mine.host, "?");
  std::string local_failure;
  if (device >= count) {
    mine.status = PLEXUS_ERR_INVALID_ARGUMENT;
    local_failure = "CUDA device " + std::to_string(device) + " (local rank " +
                    std::to_string(config.local_rank) +
                    ") does not exist: " + std::to_string(count) + " visible" + VisibleDevices();
  }
  // Our device for the rest of comm_create (NCCL's init, the stream, the
  // events); the calling thread gets its own back where it had one.
  std::optional<DeviceGuard> scope;
  if (device < count) scope.emplace(api, device);
  if (mine.status == PLEXUS_OK && scope && scope->result() != cudaSuccess) {
    mine.status = PLEXUS_ERR_SYSTEM;
    local_failure = CudaError(api, "cudaSetDevice", scope->result());
  }
  if (mine.status == PLEXUS_OK) {
    const cudaError_t be = api.DeviceGetPCIBusId(mine.bus_id, sizeof mine.bus_id, device);
    if (be != cudaSuccess) Copy(mine.bus_id, sizeof mine.bus_id, "?");
  }
  Copy(mine.reason, sizeof mine.reason, local_failure);

  // 3. Rank 0's unique id, through the host's out-of-band broadcast.
  IdMessage idm{};
  idm.status = PLEXUS_OK;
  if (config.rank == 0) {
    if (mine.status != PLEXUS_OK) {
      idm.status = mine.status;
      Copy(idm.reason, sizeof idm.reason, local_failure);
    } else if (const ncclResult_t r = api.GetUniqueId(&idm.id); r != ncclSuccess) {
      idm.status = StatusOfNccl(r);
      Copy(idm.reason, sizeof idm.reason, NcclError(api, "ncclGetUniqueId", r, nullptr));
    }
  }
  int32_t rc = host.oob_broadcast(host.ctx, config.oob, &idm, sizeof idm, 0, RemainingMs(deadline));
  if (rc != PLEXUS_OK) {
    *error =
        me + ": waiting for rank 0's NCCL unique id (out-of-band broadcast) failed with status " +
        std::to_string(rc) + (rc == PLEXUS_ERR_TIMEOUT ? " (timeout: rank 0 did not send it)" : "");
    return rc < 0 ? rc : PLEXUS_ERR_INTERNAL;
  }

  // 4. Everybody's device report: a bad device or two ranks on one GPU is
  // named here, on every rank, rather than found by NCCL.
  std::vector<RankReport> all(config.size);
  rc = host.oob_allgather(host.ctx, config.oob, &mine, all.data(), sizeof mine,
                          RemainingMs(deadline));
  if (rc != PLEXUS_OK) {
    *error = me + ": exchanging device reports (out-of-band allgather) failed with status " +
             std::to_string(rc);
    return rc < 0 ? rc : PLEXUS_ERR_INTERNAL;
  }
  if (mine.status != PLEXUS_OK) {
    *error = me + ": " + local_failure;
    return mine.status;
  }
  for (uint32_t r = 0; r < config.size; ++r) {
    if (all[r].status != PLEXUS_OK) {
      *error = me + ": rank " + std::to_string(r) +
               " cannot take part: " + Text(all[r].reason, sizeof all[r].reason);
      return PLEXUS_ERR_REMOTE;
    }
  }
  if (idm.status != PLEXUS_OK) {
    *error = me + ": rank 0 has no NCCL unique id: " + Text(idm.reason, sizeof idm.reason);
    return PLEXUS_ERR_REMOTE;
  }
  std::map<std::string, uint32_t> gpu_owner;
  for (uint32_t r = 0; r < config.size; ++r) {
    const std::string key =
        Text(all[r].host, sizeof all[r].host) + "/" + Text(all[r].bus_id, sizeof all[r].bus_id);
    auto [it, fresh] = gpu_owner.emplace(key, r);
    if (!fresh && Text(all[r].bus_id, sizeof all[r].bus_id) != "?") {
      *error = me + ": ranks " + std::to_string(it->second) + " and " + std::to_string(r) +
               " both use the GPU at " + Text(all[r].bus_id, sizeof all[r].bus_id) + " on " +
               Text(all[r].host, sizeof all[r].host) +
               "; NCCL needs a GPU of its own for every rank (set the device per rank, or "
               "CUDA_VISIBLE_DEVICES)";
      return PLEXUS_ERR_INVALID_USAGE;
    }
  }

  // 5. The communicator, non-blocking: NCCL connects in the background and
  // we poll, so the deadline holds even when a peer never shows up.
  // The core first: once NCCL's communicator exists, nothing may throw
  // before the core owns it.
  auto core = std::make_shared<CommCore>(&api, host, config.rank, config.size, device,
                                         config.timeout_ms, name);
  ncclConfig_t nc_config = NCCL_CONFIG_INITIALIZER;
  nc_config.blocking = 0;
  // NCCL keeps this pointer (no copy) for the communicator's life: the
  // core's own name, which lives as long as the core that owns the comm.
  nc_config.commName = core->name().c_str();
  // NCCL_COMM_BLOCKING in the environment overrides config.blocking. Then
  // every NCCL call blocks: comm_create's deadline no longer holds inside
  // NCCL's init, and a comm_abort cannot interrupt a post stuck in NCCL
  // (it waits for the post mutex). Warned, not refused: the user set it on
  // purpose (debugging), and a healthy job still runs correctly.
  if (const char* b = std::getenv("NCCL_COMM_BLOCKING"); b && *b && std::strcmp(b, "0") != 0) {
    core->Log(PLEXUS_LOG_WARN,
              "nccl " + me + ": NCCL_COMM_BLOCKING=" + b +
                  " overrides this backend's non-blocking NCCL communicator: NCCL calls may "
                  "block without a timeout, and comm_abort is not prompt while one does "
                  "(unset it for bounded waits)");
  }
  ncclComm_t comm = nullptr;
  const ncclResult_t r =
      api.CommInitRankConfig(&comm, int(config.size), idm.id, int(config.rank), &nc_config);
  rc = WaitUntilReady(api, comm, r, "ncclCommInitRankConfig", deadline, config.timeout_ms, me,
                      "ncclCommInitRankConfig waits until all " + std::to_string(config.size) +
                          " ranks have joined through rank 0's NCCL bootstrap and connected to "
                          "each other; a rank that stopped, froze or cannot reach the others "
                          "keeps the rest waiting",
                      error);
  if (rc != PLEXUS_OK) return rc;

  // 6. What the communicator needs beside NCCL's.
  rc = AdoptReady(api, *core, comm, me, error);
  if (rc != PLEXUS_OK) return rc;

  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  core->Log(PLEXUS_LOG_INFO, "nccl " + me + ": CUDA device " + std::to_string(device) + " (" +
                                 Text(mine.bus_id, sizeof mine.bus_id) + ") on " +
                                 Text(mine.host, sizeof mine.host) + ", connected in " +
                                 std::to_string(ms) + " ms");
  *out = std::move(core);
  return PLEXUS_OK;
}

// Colors and keys. The ABI's color is any uint32_t but PLEXUS_SPLIT_NO_COLOR;
// NCCL's a non-negative int. Each group's ranks therefore agree on a color
// of their own over the group's out-of-band channel (config->oob, which
// only they share): the smallest parent rank among them, unique to the group
// and an int. That exchange also bounds by the timeout the wait for a group
// member that never comes. The key maps onto int keeping its order (k -
// 2^31): NCCL, like MPI, orders a group by (key, parent rank), as the host
// did, so the rank and size NCCL gives are checked against the host's.
//
// Order: ncclCommSplit is a call on parent's communicator like a
// collective: it is made under parent's post mutex, after the sends/recvs
// queued before it are launched and a call NCCL still enqueues has settled
// (as a post does). NCCL then runs the split in the background as a job of
// parent's (non-blocking communicator): parent reports ncclInProgress until
// the split, which makes the new communicator and connects it, is done. It
// is polled under the deadline; parent's comm_abort ends the wait. GPU work
// already on parent's streams is unaffected and completes on its own.
int32_t SplitCommunicator(const CudaApi& api, CommCore& parent, uint32_t color, uint32_t key,
                          const plexus_comm_config_v1* config, std::shared_ptr<CommCore>* out,
                          std::string* error) {
#if !PLEXUS_NCCL_HAS_SPLIT
  (void)api, (void)parent, (void)color, (void)key, (void)config, (void)out;
  *error = "comm_split: built against NCCL headers older than 2.18 (no ncclCommSplit)";
  return PLEXUS_ERR_UNSUPPORTED;
#else
  const bool joins = config != nullptr;
  const std::string name = joins && config->name ? config->name : "";
  const std::string me = "comm_split of " + parent.name() + " (rank " +
                         std::to_string(parent.rank()) + " of " + std::to_string(parent.size()) +
                         ", " + (joins ? "color " + std::to_string(color) : "no color") + ", key " +
                         std::to_string(key) + ")";
  const int64_t timeout_ms = joins ? config->timeout_ms : parent.timeout_ms();
  const int64_t deadline = DeadlineAfterMs(NowNs(), timeout_ms);
  const plexus_host_v1& host = parent.host();
  DeviceGuard on_device(api, parent.device());

  // 1. The group's color (see above). A rank that cannot join (its device,
  // the exchange) still takes part in ncclCommSplit, with no color, so that
  // the parent's other ranks are not left waiting inside NCCL: their new
  // communicator then lacks this rank, and its size says so.
  std::string local_failure;
  int32_t local_code = PLEXUS_OK;
  int nccl_color = NCCL_SPLIT_NOCOLOR;
  if (joins) {
    std::vector<uint32_t> members(config->size);
    const uint32_t mine = parent.rank();
    const int32_t rc = host.oob_allgather(host.ctx, config->oob, &mine, members.data(), sizeof mine,
                                          RemainingMs(deadline));
    if (rc != PLEXUS_OK) {
      local_code = rc < 0 ? rc : PLEXUS_ERR_INTERNAL;
      local_failure = "exchanging parent ranks within the new group " + name +
                      " (out-of-band allgather) failed with status " + std::to_string(rc) +
                      (rc == PLEXUS_ERR_TIMEOUT ? " (timeout: a member did not come)" : "");
    } else {
      nccl_color = int(*std::min_element(members.begin(), members.end()));
    }
    if (on_device.result() != cudaSuccess) {
      local_code = PLEXUS_ERR_SYSTEM;
      local_failure = CudaError(api, "cudaSetDevice", on_device.result());
    } else if (config->device >= 0 && config->device != parent.device()) {
      local_code = PLEXUS_ERR_INVALID_ARGUMENT;
      local_failure = "the new communicator is to use CUDA device " +
                      std::to_string(config->device) + ", but ncclCommSplit keeps the parent's (" +
                      std::to_string(parent.device()) + ")";
    }
  }
  const bool makes = joins && local_failure.empty();
  const int nccl_key = int(int32_t(key ^ 0x80000000u));

  // 2. ncclCommSplit on parent, and its settling.
  std::unique_lock<std::mutex> lock(parent.post_mutex());
  std::string why;
  if (const int32_t f = parent.Failure(&why)) {
    *error = me + ": the communicator has failed: " + why;
    return f;
  }
  const ncclComm_t nc = parent.nccl_locked();
  if (!nc) {
    *error = me + ": the communicator was aborted";
    return PLEXUS_ERR_ABORTED;
  }
  int32_t rc = parent.LaunchQueuedLocked(true, &why);
  if (rc == PLEXUS_OK) rc = parent.SettleLocked(true, &why);
  if (rc != PLEXUS_OK) {
    *error = me + ": " + (rc == PLEXUS_ERR_ABORTED ? std::string("aborted") : why);
    return rc;
  }
  // The core first: NCCL keeps the name's pointer (the core's) for the new
  // communicator's life.
  std::shared_ptr<CommCore> core;
  if (makes) {
    core = std::make_shared<CommCore>(&api, host, config->rank, config->size, parent.device(),
                                      config->timeout_ms, name);
  }
  ncclConfig_t nc_config = NCCL_CONFIG_INITIALIZER;
  nc_config.blocking = 0;
  if (core) nc_config.commName = core->name().c_str();
  // NCCL's own thread writes the new handle here when the split is done.
  auto slot = std::make_unique<ncclComm_t>(nullptr);
  ncclResult_t r = api.CommSplit(nc, makes ? nccl_color : NCCL_SPLIT_NOCOLOR, nccl_key, slot.get(),
                                 makes ? &nc_config : nullptr);
  int32_t code = PLEXUS_OK;
  for (;;) {
    if (r != ncclSuccess && r != ncclInProgress) {
      why = NcclError(api, "ncclCommSplit", r, nc);
      code = StatusOfNccl(r);
      if (code == PLEXUS_ERR_INVALID_ARGUMENT || code == PLEXUS_ERR_INVALID_USAGE) {
        code = PLEXUS_ERR_INTERNAL;  // the arguments were ours
      }
      break;
    }
    ncclResult_t async = ncclInProgress;
    r = api.CommGetAsyncError(nc, &async);
    if (r == ncclSuccess) r = async;
    if (r == ncclSuccess) break;
    if (r != ncclInProgress) continue;  // failed: said above
    if (parent.abort_requested()) {
      why = "the communicator was aborted";
      code = PLEXUS_ERR_ABORTED;
      break;
    }
    if (NowNs() >= deadline) {
      why = "ncclCommSplit did not finish within " + std::to_string(timeout_ms) +
            " ms: it waits until every rank of " + parent.name() +
            " has called comm_split and each new group has connected; a rank that stopped, "
            "froze or posted something else keeps the rest waiting";
      code = PLEXUS_ERR_TIMEOUT;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (code != PLEXUS_OK) {
    // The parent's ranks are out of step: abort it (which also stops the
    // split's job). NCCL's thread may still have written into the slot or
    // read the name: both are kept for the life of the process.
    *error = me + ": " + why;
    parent.AbortLocked(code, *error);
    static_cast<void>(slot.release());
    if (core) static_cast<void>(new std::shared_ptr<CommCore>(std::move(core)));
    return code;
  }
  lock.unlock();  // parent is free again; the new communicator is ours alone
  const ncclComm_t child = *slot;

  // 3. The new communicator: ready, the host's rank and size, adopted.
  if (!makes) {
    if (child) api.CommAbort(child);  // (NCCL gives none without a color)
    if (!local_failure.empty()) {
      *error = me + ": " + local_failure;
      return local_code;
    }
    return PLEXUS_OK;
  }
  rc = WaitUntilReady(api, child, ncclInProgress, "ncclCommSplit", deadline, timeout_ms, me,
                      "the new communicator " + name + " waits for all of its " +
                          std::to_string(config->size) + " ranks to connect",
                      error);
  if (rc != PLEXUS_OK) return rc;
  int nranks = -1, myrank = -1;
  const ncclResult_t rc1 = api.CommCount(child, &nranks);
  const ncclResult_t rc2 = api.CommUserRank(child, &myrank);
  if (rc1 != ncclSuccess || rc2 != ncclSuccess || myrank != int64_t(config->rank) ||
      nranks != int64_t(config->size)) {
    *error = me + ": the host made this rank " + std::to_string(config->rank) + " of " +
             std::to_string(config->size) + " of the new communicator " + name +
             ", but ncclCommSplit made it rank " + std::to_string(myrank) + " of " +
             std::to_string(nranks);
    api.CommAbort(child);
    return PLEXUS_ERR_INTERNAL;
  }
  rc = AdoptReady(api, *core, child, me, error);
  if (rc != PLEXUS_OK) return rc;
  core->Log(PLEXUS_LOG_INFO, "nccl " + me + ": rank " + std::to_string(config->rank) + " of " +
                                 std::to_string(config->size) + " of " + name + " on CUDA device " +
                                 std::to_string(parent.device()));
  *out = std::move(core);
  return PLEXUS_OK;
#endif
}

}  // namespace plexus::nccl
