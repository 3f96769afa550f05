// libplexus-mpi.so: the ABI v1 table of the MPI backend.
//
// This file is the glue between the C ABI and MPI: it checks every argument
// (NULL pointers, unknown dtype/op codes, roots and peers out of range,
// overlapping buffers that are not the documented in-place form) and records
// a message naming the collective, hands valid calls to mpi_collectives.cpp,
// and makes sure no C++ exception leaves through the ABI.
//
// Launch. The backend runs only under an MPI launcher (mpirun, or srun and
// the like with PMI/PMIx): init() fails cleanly, without touching MPI, when
// none of OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK is set, because a
// singleton MPI_Init may hang or spawn daemons. When PLEXUS_BACKEND names a
// backend, every rank loads it at the same point, so init() initialises MPI
// at once (and the capabilities show the thread level MPI granted). When it
// is unset, the host's automatic choice loads the backend on rank 0 alone
// first, and MPI_Init_thread, which waits for every rank, would deadlock:
// then MPI is initialised by the first comm_create, which every rank calls,
// and the capabilities report the level asked for (MPI_THREAD_MULTIPLE; if
// MPI grants less, the backend serialises its MPI calls itself).
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>

#include "mpi_backend.hpp"
#include "mpi_collectives.hpp"
#include "mpi_types.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/backend.h"

namespace plexus::mpi {
namespace {

constexpr uint32_t kAllDtypes = 0x1ffeu;  // bits 1..12
constexpr uint32_t kAllCollectives = (1u << PLEXUS_COLL_COUNT_V1) - 1;

#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
constexpr bool kBuiltCudaAware = true;
#else
constexpr bool kBuiltCudaAware = false;
#endif

// How long finalize() waits for operations abandoned by an abort.
constexpr auto kAbandonedGrace = std::chrono::seconds(2);

// The environment variables of the launchers MPI can be initialised under.
constexpr const char* kLauncherVars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"};

bool LaunchedByMpi() {
  for (const char* v : kLauncherVars) {
    if (std::getenv(v)) return true;
  }
  return false;
}

std::string Config(const plexus_host_v1& host, const char* key) {
  if (!host.get_config) return "";
  char buf[256] = "";
  const int64_t n = host.get_config(host.ctx, key, buf, sizeof buf);
  if (n < 0) return "";
  return std::string(buf, size_t(std::min<int64_t>(n, int64_t(sizeof buf) - 1)));
}

// "Open MPI v4.1.4" from MPI_Get_library_version, which MPI allows before
// MPI_Init: the first line, up to its first comma.
std::string LibraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING + 1] = "";
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS || len <= 0) return "MPI";
  std::string s(text, size_t(std::min(len, MPI_MAX_LIBRARY_VERSION_STRING)));
  s = s.substr(0, s.find_first_of("\n,"));
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s.empty() ? "MPI" : s;
}

void WriteError(char* buf, size_t len, const std::string& message) {
  if (!buf || len == 0) return;
  const size_t n = std::min(len - 1, message.size());
  message.copy(buf, n);
  buf[n] = '\0';
}

// Runs fn, turning any escaping exception into an ABI status.
template <typename Fn>
int32_t Guarded(plexus_comm* comm, const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    if (comm) comm->SetError(std::string("mpi ") + what + ": out of memory");
    return PLEXUS_ERR_SYSTEM;
  } catch (const std::exception& e) {
    if (comm) comm->SetError(std::string("mpi ") + what + ": internal error: " + e.what());
    return PLEXUS_ERR_INTERNAL;
  } catch (...) {
    return PLEXUS_ERR_INTERNAL;
  }
}

int32_t Reject(plexus_comm* comm, int32_t code, const char* what, const std::string& message) {
  comm->SetError(std::string("mpi ") + what + ": " + message);
  return code;
}

bool Overlap(const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes) {
  if (!a || !b || a_bytes == 0 || b_bytes == 0) return false;
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

struct Op {
  bool reduces = false;
  plexus_reduce_op_t op = 0;
};

// Checks what every data-carrying collective shares: the communicator, req_out,
// dtype (and op), placement, and that blocks * count elements fit in memory.
int32_t CheckCommon(plexus_comm* comm, const char* what, plexus_request** req_out, uint64_t count,
                    uint64_t blocks, plexus_dtype_t dtype, Op op,
                    const plexus_placement* placement) {
  if (!req_out) return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, what, "req_out is NULL");
  *req_out = nullptr;
  if (const int32_t rc = comm->Usable(what); rc != PLEXUS_OK) return rc;
  const size_t es = algos::DtypeSize(dtype);
  if (es == 0) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, what,
                  "unknown dtype code " + std::to_string(dtype));
  }
  if (op.reduces && !algos::CanReduce(dtype, op.op)) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, what,
                  "unknown reduce op code " + std::to_string(op.op));
  }
  const uint32_t memory = placement ? placement->memory_type : PLEXUS_MEMORY_HOST;
  if (memory == PLEXUS_MEMORY_CUDA) {
    if (!comm->ctx->cuda_aware.load()) {
      return Reject(comm, PLEXUS_ERR_UNSUPPORTED, what,
                    "CUDA memory needs a CUDA-aware MPI, and " + comm->ctx->library_version +
                        " is not (host memory only)");
    }
    // The backend itself touches the data for these, on the host.
    if (op.reduces && (IsHalf(dtype) || op.op == PLEXUS_OP_AVG)) {
      return Reject(comm, PLEXUS_ERR_UNSUPPORTED, what,
                    std::string("float16/bfloat16 and avg reductions run on the host; ") +
                        algos::DtypeName(dtype) + " " + algos::ReduceOpName(op.op) +
                        " is not supported on CUDA memory");
    }
  } else if (memory != PLEXUS_MEMORY_HOST) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, what,
                  "unknown memory type " + std::to_string(memory));
  }
  if (count > (uint64_t(1) << 62) / es / blocks) {
    return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, what,
                  "count " + std::to_string(count) + " is too large");
  }
  return PLEXUS_OK;
}

int32_t CheckRank(plexus_comm* comm, const char* what, const char* role, uint32_t rank) {
  if (rank < comm->size) return PLEXUS_OK;
  return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, what,
                std::string(role) + " " + std::to_string(rank) + " is not a rank (size " +
                    std::to_string(comm->size) + ")");
}

// ---------------------------------------------------------------------------
// Backend and communicator lifetime

int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** ctx_out) {
  if (!ctx_out) return PLEXUS_ERR_INVALID_ARGUMENT;
  *ctx_out = nullptr;
  if (!host || host->struct_size < sizeof(plexus_host_v1)) return PLEXUS_ERR_INVALID_ARGUMENT;
  try {
    const bool explicit_choice = !Config(*host, "PLEXUS_BACKEND").empty();
    uint64_t max_count = INT_MAX;
    if (const std::string v = Config(*host, "PLEXUS_MPI_MAX_COUNT"); !v.empty()) {
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), max_count);
      if (ec != std::errc() || end != v.data() + v.size() || max_count == 0 ||
          max_count > uint64_t(INT_MAX)) {
        Log(*host, PLEXUS_LOG_ERROR,
            "PLEXUS_MPI_MAX_COUNT='" + v + "' is not a whole number from 1 to " +
                std::to_string(INT_MAX));
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
    }
    auto algorithm = plexus::mpi::AllreduceAlgorithm::kAuto;
    if (const std::string v = Config(*host, "PLEXUS_MPI_ALLREDUCE"); !v.empty()) {
      if (v == "ring") {
        algorithm = plexus::mpi::AllreduceAlgorithm::kRing;
      } else if (v == "rd") {
        algorithm = plexus::mpi::AllreduceAlgorithm::kRecursiveDoubling;
      } else if (v == "mpi") {
        algorithm = plexus::mpi::AllreduceAlgorithm::kMpi;
      } else if (v != "auto") {
        Log(*host, PLEXUS_LOG_ERROR,
            "PLEXUS_MPI_ALLREDUCE='" + v + "' is not one of auto, ring, rd, mpi");
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
    }
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) {
      Log(*host, PLEXUS_LOG_ERROR,
          "MPI was already finalised in this process and cannot be initialised again");
      return PLEXUS_ERR_INVALID_USAGE;
    }
    if (!initialized && !LaunchedByMpi()) {
      // Before any MPI call: a singleton MPI_Init may hang or start daemons.
      Log(*host, explicit_choice ? PLEXUS_LOG_ERROR : PLEXUS_LOG_INFO,
          "the mpi backend needs to be launched by mpirun (e.g. `mpirun -np 4 prog`, or srun "
          "with PMI/PMIx): none of OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK is set. Without "
          "an MPI launcher use another backend, e.g. PLEXUS_BACKEND=tcp with plexus-run");
      return PLEXUS_ERR_UNSUPPORTED;
    }
    auto* ctx = new plexus_backend_ctx(*host);
    ctx->max_count = max_count;
    ctx->allreduce_algorithm = algorithm;
    ctx->library_version = LibraryVersion();
    if (explicit_choice || initialized) {
      std::lock_guard<std::mutex> lock(ctx->state_mutex);
      std::string error;
      const int32_t rc = ctx->EnsureMpi(&error);
      if (rc != PLEXUS_OK) {
        Log(*host, PLEXUS_LOG_ERROR, error);
        delete ctx;
        return rc;
      }
    }
    *ctx_out = ctx;
    return PLEXUS_OK;
  } catch (const std::exception& e) {
    Log(*host, PLEXUS_LOG_ERROR, std::string("init: ") + e.what());
    return PLEXUS_ERR_INTERNAL;
  } catch (...) {
    return PLEXUS_ERR_INTERNAL;
  }
}

void Finalize(plexus_backend_ctx* ctx) {
  if (!ctx) return;
  try {
    std::lock_guard<std::mutex> lock(ctx->state_mutex);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (ctx->mpi_ready.load() && !finalized) {
      // Operations abandoned by an abort finish if the peers post their side
      // too; give them a moment, progressing MPI.
      size_t left = ctx->ReapAbandoned();
      const auto give_up = std::chrono::steady_clock::now() + kAbandonedGrace;
      while (left > 0 && std::chrono::steady_clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        left = ctx->ReapAbandoned();
      }
      if (left > 0) {
        // MPI_Finalize would wait for them (and for the peers they wait on).
        Log(ctx->host, PLEXUS_LOG_WARN,
            std::to_string(left) + " operation(s) of aborted communicators are still " +
                "pending in MPI; not calling MPI_Finalize, which would wait for them");
      } else {
        ctx->half_ops.Free();
        if (ctx->we_initialised) {
          const int rc = MPI_Finalize();
          if (rc != MPI_SUCCESS) {
            Log(ctx->host, PLEXUS_LOG_WARN, "MPI_Finalize failed: " + MpiErrorText(rc));
          }
        }
      }
    }
  } catch (...) {
  }
  delete ctx;
}

int32_t GetCapabilities(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
  if (!ctx || !caps || caps->struct_size < sizeof(plexus_capabilities)) {
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  const uint32_t size = caps->struct_size;
  std::memset(caps, 0, sizeof *caps);
  caps->struct_size = size;
  caps->collectives = kAllCollectives;
  // Before MPI is initialised (automatic selection), predict from the build.
  const bool ready = ctx->mpi_ready.load();
  const bool cuda = ready ? ctx->cuda_aware.load() : kBuiltCudaAware;
  caps->memory_types = (1u << PLEXUS_MEMORY_HOST) | (cuda ? 1u << PLEXUS_MEMORY_CUDA : 0u);
  caps->dtypes = kAllDtypes;
  for (uint32_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op)
    caps->reduce_dtypes[op] = kAllDtypes;
  caps->flags = PLEXUS_CAP_IN_PLACE;  // no PLEXUS_CAP_ABORT: MPI cannot interrupt a collective
  caps->thread_level = !ready || ctx->provided.load() >= MPI_THREAD_MULTIPLE
                           ? PLEXUS_THREAD_MULTIPLE
                           : PLEXUS_THREAD_SERIALIZED;
  caps->max_outstanding = 0;
  return PLEXUS_OK;
}

int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* config,
                   plexus_comm** comm_out, char* error_buf, size_t error_len) {
  try {
    if (!ctx || !config || !comm_out ||
        config->struct_size < offsetof(plexus_comm_config_v1, oob) + sizeof(void*) ||
        config->size == 0 || config->rank >= config->size || config->timeout_ms <= 0) {
      WriteError(error_buf, error_len, "mpi comm_create: invalid configuration");
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    *comm_out = nullptr;
    const std::string name = config->name ? config->name : "";
    std::lock_guard<std::mutex> lock(ctx->state_mutex);
    std::string error;
    int32_t rc = ctx->EnsureMpi(&error);
    if (rc != PLEXUS_OK) {
      WriteError(error_buf, error_len, "mpi comm_create " + name + ": " + error);
      return rc;
    }
    int world_rank = -1, world_size = -1;
    {
      MpiLock mpi_lock(*ctx);
      MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
      MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    }
    if (world_rank != int64_t(config->rank) || world_size != int64_t(config->size)) {
      WriteError(error_buf, error_len,
                 "mpi comm_create " + name + ": Plexus discovered rank " +
                     std::to_string(config->rank) + " of " + std::to_string(config->size) +
                     " from the launch environment, but MPI_COMM_WORLD has this process as "
                     "rank " +
                     std::to_string(world_rank) + " of " + std::to_string(world_size) +
                     "; with the mpi backend launch every rank with one mpirun and do not "
                     "override PLEXUS_RANK/PLEXUS_WORLD_SIZE (or RANK/WORLD_SIZE)");
      return PLEXUS_ERR_INVALID_USAGE;
    }
    ctx->ReapAbandoned();

    // MPI_Comm_idup, so that a rank that never comes is a timeout, not a hang.
    MPI_Comm dup = MPI_COMM_NULL;
    MPI_Request req = MPI_REQUEST_NULL;
    int mrc;
    {
      MpiLock mpi_lock(*ctx);
      mrc = MPI_Comm_idup(MPI_COMM_WORLD, &dup, &req);
    }
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(config->timeout_ms);
    int done = 0;
    auto nap = std::chrono::microseconds(20);
    while (mrc == MPI_SUCCESS) {
      {
        MpiLock mpi_lock(*ctx);
        mrc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      }
      if (mrc != MPI_SUCCESS || done) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        Abandoned a;
        a.requests.push_back(req);
        ctx->Abandon(std::move(a));
        WriteError(error_buf, error_len,
                   "mpi comm_create " + name + ": MPI_Comm_idup(MPI_COMM_WORLD) did not " +
                       "complete within " + std::to_string(config->timeout_ms) +
                       " ms (does every rank create the communicator?)");
        return PLEXUS_ERR_TIMEOUT;
      }
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
    if (mrc != MPI_SUCCESS) {
      WriteError(error_buf, error_len,
                 "mpi comm_create " + name + ": MPI_Comm_idup failed: " + MpiErrorText(mrc));
      return StatusOfMpiError(mrc) == PLEXUS_OK ? PLEXUS_ERR_SYSTEM : StatusOfMpiError(mrc);
    }
    {
      MpiLock mpi_lock(*ctx);
      MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
      std::string mpi_name = "plexus " + name;
      mpi_name.resize(std::min<size_t>(mpi_name.size(), MPI_MAX_OBJECT_NAME - 1));
      MPI_Comm_set_name(dup, mpi_name.c_str());
    }
    auto* comm = new plexus_comm;
    comm->ctx = ctx;
    comm->mpi = dup;
    comm->rank = config->rank;
    comm->size = config->size;
    comm->timeout_ms = config->timeout_ms;
    comm->name = name;
    comm->unmatched.resize(comm->size);
    {
      std::lock_guard<std::mutex> lock(ctx->comms_mutex);
      ctx->comms.push_back(comm);
    }
    *comm_out = comm;
    return PLEXUS_OK;
  } catch (const std::exception& e) {
    WriteError(error_buf, error_len, std::string("mpi comm_create: ") + e.what());
    return PLEXUS_ERR_INTERNAL;
  } catch (...) {
    WriteError(error_buf, error_len, "mpi comm_create: unknown exception");
    return PLEXUS_ERR_INTERNAL;
  }
}

void CommDestroy(plexus_comm* comm) {
  if (!comm) return;
  try {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // Requests left over (the ABI wants them freed first) stop here.
    comm->ctx->DropSchedules(comm);
    {
      std::lock_guard<std::mutex> comms_lock(comm->ctx->comms_mutex);
      std::erase(comm->ctx->comms, comm);
      std::lock_guard<std::mutex> lock(comm->match_mutex);
      for (auto& queue : comm->unmatched) {
        for (plexus_request* req : queue) req->queued = false;
        comm->ctx->queued_recvs.fetch_sub(queue.size());
      }
      comm->unmatched.clear();
    }
    if (!finalized && comm->mpi != MPI_COMM_NULL) {
      // Freed at once, or after operations an abort left in MPI finish.
      comm->ctx->ReleaseComm(comm->mpi);
      comm->mpi = MPI_COMM_NULL;
    }
  } catch (...) {
  }
  delete comm;
}

int32_t CommAbort(plexus_comm* comm) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  try {
    if (!comm->aborted.exchange(true)) {
      comm->SetError("mpi: the communicator " + comm->name + " was aborted");
    }
    return PLEXUS_OK;
  } catch (...) {
    return PLEXUS_ERR_INTERNAL;
  }
}

size_t CommLastError(plexus_comm* comm, char* buf, size_t len) {
  if (!comm) {
    if (buf && len) buf[0] = '\0';
    return 0;
  }
  try {
    return comm->LastError(buf, len);
  } catch (...) {
    return 0;
  }
}

int32_t Test(plexus_request* req) {
  if (!req) return PLEXUS_ERR_INVALID_ARGUMENT;
  return Guarded(req->comm, "test", [&] { return Progress(req); });
}

int32_t Wait(plexus_request* req, int64_t timeout_ms) {
  if (!req) return PLEXUS_ERR_INVALID_ARGUMENT;
  return Guarded(req->comm, "wait", [&] { return WaitFor(req, timeout_ms); });
}

int32_t RequestFree(plexus_request* req) {
  if (!req) return PLEXUS_OK;
  try {
    {
      std::lock_guard<std::mutex> lock(req->mutex);
      if (req->status == PLEXUS_IN_PROGRESS) return PLEXUS_ERR_INVALID_USAGE;
    }
    if (req->coll == PLEXUS_COLL_RECV) Unqueue(req);  // failed before all its messages came
    delete req;
    return PLEXUS_OK;
  } catch (...) {
    return PLEXUS_ERR_INTERNAL;
  }
}

// ---------------------------------------------------------------------------
// Collectives: check, then post

int32_t Allreduce(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                  plexus_dtype_t dtype, plexus_reduce_op_t op, const plexus_placement* placement,
                  plexus_request** req_out) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  constexpr const char* kWhat = "allreduce";
  return Guarded(comm, kWhat, [&] {
    int32_t rc = CheckCommon(comm, kWhat, req_out, count, 1, dtype, {true, op}, placement);
    if (rc != PLEXUS_OK) return rc;
    const uint64_t bytes = count * algos::DtypeSize(dtype);
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat, "NULL buffer");
    }
    if (sendbuf != recvbuf && Overlap(sendbuf, bytes, recvbuf, bytes)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat,
                    "sendbuf and recvbuf overlap without being equal (in place is sendbuf == "
                    "recvbuf)");
    }
    const bool host = !placement || placement->memory_type == PLEXUS_MEMORY_HOST;
    return PostAllreduce(comm, sendbuf, recvbuf, count, dtype, op, host, req_out);
  });
}

int32_t Broadcast(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t root,
                  const plexus_placement* placement, plexus_request** req_out) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  constexpr const char* kWhat = "broadcast";
  return Guarded(comm, kWhat, [&] {
    int32_t rc = CheckCommon(comm, kWhat, req_out, count, 1, dtype, {}, placement);
    if (rc == PLEXUS_OK) rc = CheckRank(comm, kWhat, "root", root);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && !buf) return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat, "NULL buffer");
    return PostBroadcast(comm, buf, count, dtype, root, req_out);
  });
}

int32_t Reduce(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
               plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t root,
               const plexus_placement* placement, plexus_request** req_out) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  constexpr const char* kWhat = "reduce";
  return Guarded(comm, kWhat, [&] {
    int32_t rc = CheckCommon(comm, kWhat, req_out, count, 1, dtype, {true, op}, placement);
    if (rc == PLEXUS_OK) rc = CheckRank(comm, kWhat, "root", root);
    if (rc != PLEXUS_OK) return rc;
    const bool is_root = comm->rank == root;
    const uint64_t bytes = count * algos::DtypeSize(dtype);
    if (count > 0 && (!sendbuf || (is_root && !recvbuf))) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat,
                    !sendbuf ? "NULL sendbuf" : "NULL recvbuf on the root");
    }
    if (is_root && sendbuf != recvbuf && Overlap(sendbuf, bytes, recvbuf, bytes)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat,
                    "sendbuf and recvbuf overlap without being equal (in place on the root is "
                    "sendbuf == recvbuf)");
    }
    return PostReduce(comm, sendbuf, recvbuf, count, dtype, op, root, req_out);
  });
}

int32_t Allgather(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                  plexus_dtype_t dtype, const plexus_placement* placement,
                  plexus_request** req_out) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  constexpr const char* kWhat = "allgather";
  return Guarded(comm, kWhat, [&] {
    int32_t rc = CheckCommon(comm, kWhat, req_out, count, comm->size, dtype, {}, placement);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat, "NULL buffer");
    }
    const uint64_t bytes = count * algos::DtypeSize(dtype);
    const void* own = count ? static_cast<const uint8_t*>(recvbuf) + comm->rank * bytes : nullptr;
    if (sendbuf != own && Overlap(sendbuf, bytes, recvbuf, bytes * comm->size)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat,
                    "sendbuf overlaps recvbuf but is not the in-place position recvbuf + rank * "
                    "count");
    }
    return PostAllgather(comm, sendbuf, recvbuf, count, dtype, req_out);
  });
}

int32_t ReduceScatter(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                      plexus_dtype_t dtype, plexus_reduce_op_t op,
                      const plexus_placement* placement, plexus_request** req_out) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  constexpr const char* kWhat = "reduce_scatter";
  return Guarded(comm, kWhat, [&] {
    int32_t rc = CheckCommon(comm, kWhat, req_out, count, comm->size, dtype, {true, op}, placement);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat, "NULL buffer");
    }
    const uint64_t bytes = count * algos::DtypeSize(dtype);
    const void* own = count ? static_cast<const uint8_t*>(sendbuf) + comm->rank * bytes : nullptr;
    if (placement && placement->memory_type == PLEXUS_MEMORY_CUDA && count > 0 && recvbuf == own &&
        count <= comm->ctx->max_count) {
      return Reject(comm, PLEXUS_ERR_UNSUPPORTED, kWhat,
                    "in place on CUDA memory is not supported (it goes through a host buffer)");
    }
    if (recvbuf != own && Overlap(recvbuf, bytes, sendbuf, bytes * comm->size)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat,
                    "recvbuf overlaps sendbuf but is not the in-place position sendbuf + rank * "
                    "count");
    }
    return PostReduceScatter(comm, sendbuf, recvbuf, count, dtype, op, req_out);
  });
}

int32_t Alltoall(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                 plexus_dtype_t dtype, const plexus_placement* placement,
                 plexus_request** req_out) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  constexpr const char* kWhat = "alltoall";
  return Guarded(comm, kWhat, [&] {
    int32_t rc = CheckCommon(comm, kWhat, req_out, count, comm->size, dtype, {}, placement);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && (!sendbuf || !recvbuf)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat, "NULL buffer");
    }
    const uint64_t bytes = count * algos::DtypeSize(dtype) * comm->size;
    if (Overlap(sendbuf, bytes, recvbuf, bytes)) {
      return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat,
                    "sendbuf and recvbuf overlap (alltoall is not in place)");
    }
    return PostAlltoall(comm, sendbuf, recvbuf, count, dtype, req_out);
  });
}

int32_t Barrier(plexus_comm* comm, plexus_request** req_out) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  constexpr const char* kWhat = "barrier";
  return Guarded(comm, kWhat, [&] {
    if (!req_out) return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat, "req_out is NULL");
    *req_out = nullptr;
    if (const int32_t rc = comm->Usable(kWhat); rc != PLEXUS_OK) return rc;
    return PostBarrier(comm, req_out);
  });
}

int32_t Send(plexus_comm* comm, const void* buf, uint64_t count, plexus_dtype_t dtype,
             uint32_t peer, const plexus_placement* placement, plexus_request** req_out) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  constexpr const char* kWhat = "send";
  return Guarded(comm, kWhat, [&] {
    int32_t rc = CheckCommon(comm, kWhat, req_out, count, 1, dtype, {}, placement);
    if (rc == PLEXUS_OK) rc = CheckRank(comm, kWhat, "peer", peer);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && !buf) return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat, "NULL buffer");
    return PostSend(comm, buf, count, dtype, peer, req_out);
  });
}

int32_t Recv(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t peer,
             const plexus_placement* placement, plexus_request** req_out) {
  if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
  constexpr const char* kWhat = "recv";
  return Guarded(comm, kWhat, [&] {
    int32_t rc = CheckCommon(comm, kWhat, req_out, count, 1, dtype, {}, placement);
    if (rc == PLEXUS_OK) rc = CheckRank(comm, kWhat, "peer", peer);
    if (rc != PLEXUS_OK) return rc;
    if (count > 0 && !buf) return Reject(comm, PLEXUS_ERR_INVALID_ARGUMENT, kWhat, "NULL buffer");
    return PostRecv(comm, buf, count, dtype, peer, req_out);
  });
}

plexus_backend_v1 MakeTable(const char* version) {
  plexus_backend_v1 t{};
  t.struct_size = sizeof(plexus_backend_v1);
  t.abi_major = PLEXUS_ABI_MAJOR;
  t.abi_minor = PLEXUS_ABI_MINOR;
  t.name = "mpi";
  t.version = version;
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

}  // namespace
}  // namespace plexus::mpi

extern "C" __attribute__((visibility("default"))) int32_t plexus_backend_get_v1(
    uint32_t host_abi_minor, const plexus_backend_v1** table_out) {
  (void)host_abi_minor;  // every 1.x host can drive this 1.0 table
  if (!table_out) return PLEXUS_ERR_INVALID_ARGUMENT;
  try {
    // Built on first use (thread-safe): the version names the MPI library
    // actually loaded, which MPI_Get_library_version may tell before MPI_Init.
    static const std::string version =
        std::string(PLEXUS_VERSION_STRING) + " (" + plexus::mpi::LibraryVersion() + ")";
    static const plexus_backend_v1 table = plexus::mpi::MakeTable(version.c_str());
    *table_out = &table;
    return PLEXUS_OK;
  } catch (...) {
    *table_out = nullptr;
    return PLEXUS_ERR_INTERNAL;
  }
}
