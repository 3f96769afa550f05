// libplexus-mpi.so: the ABI v1 table of the MPI backend.
//
// The C glue comes from plexus-kit (kit::MakeTable: every argument checked
// against the ABI's rules, errors recorded naming the collective, no C++
// exception through the ABI); this file adds the checks that are MPI's own
// (CUDA-aware or not, what it can do on the device) and hands valid calls to
// mpi_collectives.cpp.
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
#include <atomic>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "mpi_requests.hpp"
#include "mpi_collectives.hpp"
#include "mpi_types.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/backend.h"
#include "plexus/kit/table.hpp"
#include "plexus/settings/table.hpp"

namespace plexus::mpi {
namespace {

constexpr uint32_t kAllDtypes = 0x1ffeu;                                  // bits 1..12
constexpr uint32_t kAllCollectives = (1u << PLEXUS_COLL_COUNT_V1_2) - 1;  // all of 1.2

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

// ---------------------------------------------------------------------------
// Backend and communicator lifetime

int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** ctx_out) {
  try {
    const bool explicit_choice = !Config(*host, "PLEXUS_BACKEND").empty();
    uint64_t max_count = INT_MAX;
    using plexus::settings::Id;
    if (const std::string v = Config(*host, plexus::settings::Name(Id::kDebugMpiMaxCount));
        !v.empty()) {
      int64_t n = 0;
      if (std::string why; !plexus::settings::ParseInt(plexus::settings::Get(Id::kDebugMpiMaxCount),
                                                       v, &n, &why)) {
        Log(*host, PLEXUS_LOG_ERROR, why);
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
      max_count = uint64_t(n);
    }
    auto algorithm = plexus::mpi::AllreduceAlgorithm::kAuto;
    if (const std::string v = Config(*host, plexus::settings::Name(Id::kMpiAllreduce));
        !v.empty()) {
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
      const bool srun_step = std::getenv("SLURM_STEP_ID") || std::getenv("SLURM_STEPID");
      Log(*host, explicit_choice ? PLEXUS_LOG_ERROR : PLEXUS_LOG_INFO,
          srun_step
              ? "the mpi backend needs srun to start MPI: `srun --mpi=pmix prog` (this step "
                "was started without PMIx: none of OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK "
                "is set; MpiDefault=pmix in slurm.conf makes it the default). Without it use "
                "another backend, e.g. PLEXUS_BACKEND=tcp, which needs nothing from srun"
              : "the mpi backend needs to be launched by mpirun (e.g. `mpirun -np 4 prog`, or "
                "`srun --mpi=pmix prog`): none of OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_RANK is "
                "set. Without an MPI launcher use another backend, e.g. PLEXUS_BACKEND=tcp "
                "with plexus-run");
      return PLEXUS_ERR_UNSUPPORTED;
    }
#ifdef OPEN_MPI
    if (!initialized && !std::getenv("PMIX_RANK") && !std::getenv("OMPI_COMM_WORLD_SIZE") &&
        std::getenv("PMI_RANK") && (std::getenv("SLURM_STEP_ID") || std::getenv("SLURM_STEPID"))) {
      // srun --mpi=pmi2: Open MPI talks PMI-2 only when built with it (Debian's
      // is not), and then dies inside MPI_Init without a word from us.
      Log(*host, PLEXUS_LOG_WARN,
          "srun started this step with PMI-2 (PMI_RANK set, no PMIX_RANK); Open MPI needs PMIx "
          "here unless it was built with PMI-2 support. If MPI_Init fails below, run `srun "
          "--mpi=pmix prog`");
    }
#endif
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
      if (ctx->one_host_lost_peer.load()) {
        // MPI_Finalize would wait for the peer (a SIGSTOPped rank: forever).
        Log(ctx->host, PLEXUS_LOG_WARN,
            "an allreduce over shared memory failed for want of a peer; not calling "
            "MPI_Finalize, which would wait for it");
      } else if (left > 0) {
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

void Capabilities(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
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
}

// Waits for req, one step of making a communicator (comm_create's
// MPI_Comm_idup, comm_split's allgather over the parent), for up to
// timeout_ms: a rank that never comes is a TIMEOUT, not a hang. Meanwhile it
// moves on what the process has pending, as every test/wait does (queued
// recvs, own allreduce schedules): a peer may need one of this rank's
// operations to advance before it gets to this step. On a timeout, or when
// *aborted (if given) is raised, req goes to the context with *keep (the
// memory MPI may still use), and the result is PLEXUS_ERR_TIMEOUT or
// PLEXUS_ERR_ABORTED; on an MPI error *mpi_rc holds it and the result is its
// status. state_mutex held.
int32_t WaitSetupStep(plexus_backend_ctx* ctx, MPI_Comm on, MPI_Request req, int64_t timeout_ms,
                      const std::atomic<bool>* aborted, std::unique_ptr<uint8_t[]>* keep,
                      int* mpi_rc) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    int done = 0;
    {
      MpiLock mpi_lock(*ctx);
      *mpi_rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    }
    if (*mpi_rc != MPI_SUCCESS) {
      const int32_t code = StatusOfMpiError(*mpi_rc);
      return code == PLEXUS_OK ? PLEXUS_ERR_SYSTEM : code;
    }
    if (done) return PLEXUS_OK;
    const bool abort = aborted && aborted->load();
    if (abort || std::chrono::steady_clock::now() >= deadline) {
      Abandoned a;
      a.comm = on;
      a.requests.push_back(req);
      if (keep) a.scratch = std::move(*keep);
      ctx->Abandon(std::move(a));
      return abort ? PLEXUS_ERR_ABORTED : PLEXUS_ERR_TIMEOUT;
    }
    if (ctx->queued_recvs.load(std::memory_order_acquire) > 0) ctx->MatchAllRecvs();
    ctx->AdvanceSchedules();
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}

// The backend's communicator around mpi, which it owns from now on: MPI
// errors come back as codes, the MPI communicator carries the name, and it
// has request state of its own (recv queues, allreduce tags, scratch cache,
// last error, abort flag), known to the context (MatchAllRecvs). Where
// comm_create and comm_split both end.
plexus_comm* AdoptComm(plexus_backend_ctx* ctx, MPI_Comm mpi, const plexus_comm_config_v1& config) {
  const std::string name = config.name ? config.name : "";
  {
    MpiLock mpi_lock(*ctx);
    MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    std::string mpi_name = "plexus " + name;
    mpi_name.resize(std::min<size_t>(mpi_name.size(), MPI_MAX_OBJECT_NAME - 1));
    MPI_Comm_set_name(mpi, mpi_name.c_str());
  }
  auto* comm = new plexus_comm;
  comm->ctx = ctx;
  comm->mpi = mpi;
  comm->rank = config.rank;
  comm->size = config.size;
  comm->timeout_ms = config.timeout_ms;
  comm->name = name;
  comm->unmatched.resize(comm->size);
  {
    std::lock_guard<std::mutex> lock(ctx->comms_mutex);
    ctx->comms.push_back(comm);
  }
  return comm;
}

// comm_create of a communicator whose ranks are not MPI_COMM_WORLD's (a
// subset, or the world in another order: a torch.distributed new_group made
// through its store, which only the members call). Every member tells the
// others its MPI_COMM_WORLD rank over the host's out-of-band channel (bounded
// by timeout_ms, so a member that never comes is a TIMEOUT, not a hang);
// then MPI_Comm_create_group, which is collective over the members only and
// returns promptly once all have arrived.
int32_t CreateFromSubset(plexus_backend_ctx* ctx, const plexus_comm_config_v1& config,
                         int world_rank, int world_size, plexus_comm** comm_out,
                         std::string* error_out) {
  const std::string where = "mpi comm_create " + std::string(config.name ? config.name : "") +
                            " (rank " + std::to_string(config.rank) + " of " +
                            std::to_string(config.size) + ", MPI_COMM_WORLD rank " +
                            std::to_string(world_rank) + ")";
  std::vector<int32_t> ranks(config.size, -1);
  const int32_t mine = world_rank;
  int32_t rc = ctx->host.oob_allgather(ctx->host.ctx, config.oob, &mine, ranks.data(),
                                       sizeof mine, config.timeout_ms);
  if (rc != PLEXUS_OK) {
    *error_out = where + ": exchanging MPI_COMM_WORLD ranks failed (status " +
                 std::to_string(rc) + ")";
    return rc;
  }
  std::vector<bool> seen(size_t(world_size), false);
  for (uint32_t r = 0; r < config.size; ++r) {
    const int32_t w = ranks[r];
    if (w < 0 || w >= world_size || seen[size_t(w)] || (r == config.rank && w != world_rank)) {
      *error_out = where + ": rank " + std::to_string(r) + " of the new communicator says it is " +
                   "MPI_COMM_WORLD rank " + std::to_string(w) + ", which is " +
                   (w < 0 || w >= world_size ? "not a rank of MPI_COMM_WORLD" : "taken") +
                   " (are its processes all of one mpirun?)";
      return PLEXUS_ERR_INVALID_USAGE;
    }
    seen[size_t(w)] = true;
  }
  // A tag of the communicator's name: groups made at once from other threads
  // over overlapping ranks must not match each other's internal messages.
  uint32_t h = 2166136261u;
  for (const char* c = config.name ? config.name : ""; *c; ++c) h = (h ^ uint8_t(*c)) * 16777619u;
  MPI_Comm made = MPI_COMM_NULL;
  int mrc;
  {
    MpiLock mpi_lock(*ctx);
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, int(config.size), ranks.data(), &group);
    mrc = MPI_Comm_create_group(MPI_COMM_WORLD, group, int(h % 32000u), &made);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
  }
  if (mrc != MPI_SUCCESS || made == MPI_COMM_NULL) {
    *error_out = where + ": MPI_Comm_create_group failed: " + MpiErrorText(mrc);
    return StatusOfMpiError(mrc) == PLEXUS_OK ? PLEXUS_ERR_SYSTEM : StatusOfMpiError(mrc);
  }
  *comm_out = AdoptComm(ctx, made, config);
  return PLEXUS_OK;
}

void CommDestroy(plexus_comm* comm);

// The one-host segment's set-up exchange (kit::OneHostShm::Create) over the
// new MPI communicator: under mpirun the host has no store, so no
// out-of-band channel of its own. Passed as the config's oob; MPI gets
// buffers of its own, which the context keeps when a step times out.
struct MpiSetupChannel {
  plexus_backend_ctx* ctx;
  MPI_Comm comm;
  uint32_t size;
};

int32_t SetupAllgather(void*, plexus_oob* oob, const void* in, void* out, uint64_t bytes,
                       int64_t timeout_ms) {
  auto* ch = reinterpret_cast<MpiSetupChannel*>(oob);
  if (bytes > uint64_t(INT_MAX) / (ch->size + 1)) return PLEXUS_ERR_INVALID_ARGUMENT;
  auto buf = std::make_unique<uint8_t[]>(bytes * (ch->size + 1));  // theirs, then mine
  uint8_t* mine = buf.get() + bytes * ch->size;
  std::memcpy(mine, in, bytes);
  MPI_Request req = MPI_REQUEST_NULL;
  int mrc;
  {
    MpiLock mpi_lock(*ch->ctx);
    mrc = MPI_Iallgather(mine, int(bytes), MPI_BYTE, buf.get(), int(bytes), MPI_BYTE, ch->comm,
                         &req);
  }
  if (mrc != MPI_SUCCESS) return PLEXUS_ERR_SYSTEM;
  uint8_t* all = buf.get();
  const int32_t rc = WaitSetupStep(ch->ctx, ch->comm, req, timeout_ms, nullptr, &buf, &mrc);
  if (rc == PLEXUS_OK) std::memcpy(out, all, bytes * ch->size);
  return rc;
}

int32_t SetupBroadcast(void*, plexus_oob* oob, void* data, uint64_t bytes, uint32_t root,
                       int64_t timeout_ms) {
  auto* ch = reinterpret_cast<MpiSetupChannel*>(oob);
  if (bytes > uint64_t(INT_MAX) || root >= ch->size) return PLEXUS_ERR_INVALID_ARGUMENT;
  auto buf = std::make_unique<uint8_t[]>(bytes);
  std::memcpy(buf.get(), data, bytes);
  MPI_Request req = MPI_REQUEST_NULL;
  int mrc;
  {
    MpiLock mpi_lock(*ch->ctx);
    mrc = MPI_Ibcast(buf.get(), int(bytes), MPI_BYTE, int(root), ch->comm, &req);
  }
  if (mrc != MPI_SUCCESS) return PLEXUS_ERR_SYSTEM;
  uint8_t* got = buf.get();
  const int32_t rc = WaitSetupStep(ch->ctx, ch->comm, req, timeout_ms, nullptr, &buf, &mrc);
  if (rc == PLEXUS_OK) std::memcpy(data, got, bytes);
  return rc;
}

// Every rank of comm on this host: its allreduces go through the kit's
// shared memory (mpi_one_host.hpp). Collective over comm; every rank
// decides alike. Logs which at INFO. state_mutex held.
int32_t AttachOneHost(plexus_backend_ctx* ctx, plexus_comm* comm,
                      const plexus_comm_config_v1& config, std::string* error_out) {
  MpiSetupChannel channel{ctx, comm->mpi, config.size};
  plexus_host_v1 host = ctx->host;
  host.oob_allgather = SetupAllgather;
  host.oob_broadcast = SetupBroadcast;
  plexus_comm_config_v1 setup = config;
  setup.oob = reinterpret_cast<plexus_oob*>(&channel);
  try {
    std::unique_ptr<OneHostRunner> one_host;
    std::string why_not;
    if (algos::Status st = OneHostRunner::Create(host, setup, &one_host, &why_not); !st.ok()) {
      *error_out = "mpi comm_create " + comm->name + ": " + st.message;
      return st.code;
    }
    Log(ctx->host, PLEXUS_LOG_INFO,
        comm->name + " rank " + std::to_string(config.rank) + ": " +
            (one_host ? "allreduce, reduce_scatter and allgather over shared memory (" +
                            one_host->Describe() + ")"
                      : "no shared memory: " + why_not));
    comm->one_host = std::move(one_host);
    return PLEXUS_OK;
  } catch (const std::exception& e) {  // its thread, its strings: the caller destroys comm
    *error_out = "mpi comm_create " + comm->name + ": setting up the shared memory: " + e.what();
    return PLEXUS_ERR_INTERNAL;
  }
}

// The kit has checked config; *error is what comm_create reports on failure.
int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* config,
                   plexus_comm** comm_out, std::string* error_out) {
  const std::string name = config->name ? config->name : "";
  std::lock_guard<std::mutex> lock(ctx->state_mutex);
  std::string error;
  int32_t rc = ctx->EnsureMpi(&error);
  if (rc != PLEXUS_OK) {
    *error_out = "mpi comm_create " + name + ": " + error;
    return rc;
  }
  int world_rank = -1, world_size = -1;
  {
    MpiLock mpi_lock(*ctx);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  }
  if ((world_rank != int64_t(config->rank) || world_size != int64_t(config->size)) &&
      config->size <= uint32_t(world_size) && config->oob && ctx->host.oob_allgather) {
    ctx->ReapAbandoned();
    return CreateFromSubset(ctx, *config, world_rank, world_size, comm_out, error_out);
  }
  if (world_rank != int64_t(config->rank) || world_size != int64_t(config->size)) {
    *error_out = "mpi comm_create " + name + ": Plexus discovered rank " +
                 std::to_string(config->rank) + " of " + std::to_string(config->size) +
                 " from the launch environment, but MPI_COMM_WORLD has this process as "
                 "rank " +
                 std::to_string(world_rank) + " of " + std::to_string(world_size) +
                 "; with the mpi backend launch every rank with one mpirun and do not "
                 "override PLEXUS_RANK/PLEXUS_WORLD_SIZE (or RANK/WORLD_SIZE)";
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
  rc = mrc == MPI_SUCCESS
           ? WaitSetupStep(ctx, MPI_COMM_NULL, req, config->timeout_ms, nullptr, nullptr, &mrc)
           : PLEXUS_ERR_SYSTEM;
  if (rc == PLEXUS_ERR_TIMEOUT) {
    *error_out = "mpi comm_create " + name + ": MPI_Comm_idup(MPI_COMM_WORLD) did not " +
                 "complete within " + std::to_string(config->timeout_ms) +
                 " ms (does every rank create the communicator?)";
    return PLEXUS_ERR_TIMEOUT;
  }
  if (rc != PLEXUS_OK) {
    *error_out = "mpi comm_create " + name + ": MPI_Comm_idup failed: " + MpiErrorText(mrc);
    return StatusOfMpiError(mrc) == PLEXUS_OK ? PLEXUS_ERR_SYSTEM : StatusOfMpiError(mrc);
  }
  plexus_comm* comm = AdoptComm(ctx, dup, *config);
  if (rc = AttachOneHost(ctx, comm, *config, error_out); rc != PLEXUS_OK) {
    CommDestroy(comm);
    return rc;
  }
  *comm_out = comm;
  return PLEXUS_OK;
}

// comm_split (ABI 1.2): MPI_Comm_split of the parent's MPI communicator, the
// new communicator made by AdoptComm like comm_create's.
//
// Order and threads. MPI_Comm_split is a blocking collective on the
// parent's MPI communicator, and the ABI calls comm_split like a collective
// posted on the parent: every rank at the same point of its posting order.
// The backend has no worker thread: what was posted before is in MPI already
// (non-blocking collectives, which MPI orders before this one by posting
// order on every rank, and progresses inside any MPI call, this one
// included) or in the backend's own allreduce schedules and recv queues,
// which advance only from test/wait. So the split first runs an
// MPI_Iallgather of every rank's (color, key) on the parent, then an
// MPI_Ibarrier (see there why) -- non-blocking collectives, each waited for
// like comm_create's MPI_Comm_idup:
// under the parent's timeout_ms (a rank that never calls comm_split is a
// TIMEOUT naming the parent, not a hang), ended by the parent's comm_abort,
// and advancing every pending schedule and recv of the process meanwhile,
// so that a peer still finishing an operation that needs this rank's part
// gets it. Once they have completed every rank has arrived, and the blocking
// MPI_Comm_split that follows returns promptly on all of them; operations
// still pending on the parent then resume from the next test/wait. Nothing
// waits for the parent's operations to drain, so a split with requests
// still pending (another thread's) cannot deadlock on them either.
//
// The allgather also turns the colors into what MPI takes: the ABI's are any
// uint32_t but PLEXUS_SPLIT_NO_COLOR, MPI's a non-negative int, so each
// color becomes its index among the distinct colors given (the same on every
// rank); the key maps onto int keeping its order (k - 2^31), so that MPI
// orders by (key, parent rank) as the host did, and the rank and size MPI
// gives can be checked against the host's config.
int32_t CommSplit(plexus_comm* parent, uint32_t color, uint32_t key,
                  const plexus_comm_config_v1* config, plexus_comm** comm_out,
                  std::string* error_out) {
  plexus_backend_ctx* ctx = parent->ctx;
  const bool joins = color != PLEXUS_SPLIT_NO_COLOR;
  const std::string where = "mpi comm_split of " + parent->name + " (rank " +
                            std::to_string(parent->rank) + " of " + std::to_string(parent->size) +
                            ", " +
                            (joins ? "color " + std::to_string(color) : std::string("no color")) +
                            ", key " + std::to_string(key) + ")";
  if (const int32_t rc = parent->Usable("comm_split"); rc != PLEXUS_OK) {
    char text[1024] = "";
    parent->errors.Copy(text, sizeof text);
    *error_out = where + ": " + text;
    return rc;
  }
  std::lock_guard<std::mutex> lock(ctx->state_mutex);  // one at a time per ctx, as comm_create
  const uint32_t n = parent->size;
  // [n x (color, key) received | this rank's (color, key)]: MPI may use both
  // until the allgather completes, so they live together (and go to the
  // context with the request if it is abandoned).
  auto buf = std::make_unique<uint8_t[]>(size_t(n + 1) * 2 * sizeof(uint32_t));
  auto* all = reinterpret_cast<uint32_t*>(buf.get());
  uint32_t* mine = all + size_t(2) * n;
  mine[0] = color;
  mine[1] = key;
  MPI_Request req = MPI_REQUEST_NULL;
  int mrc;
  {
    MpiLock mpi_lock(*ctx);
    mrc = MPI_Iallgather(mine, 2, MPI_UINT32_T, all, 2, MPI_UINT32_T, parent->mpi, &req);
  }
  int32_t rc = mrc == MPI_SUCCESS ? WaitSetupStep(ctx, parent->mpi, req, parent->timeout_ms,
                                                  &parent->aborted, &buf, &mrc)
                                  : StatusOfMpiError(mrc);
  const char* step = "MPI_Iallgather of the colors and keys";
  if (rc == PLEXUS_OK) {
    // Round 2, an MPI_Ibarrier: a rank that completes the allgather knows
    // that every rank has posted it, not that every rank is still there to
    // call MPI_Comm_split (one may have timed out waiting for it, if this
    // rank came that late). After the barrier a rank calls MPI_Comm_split at
    // once, so the blocking call can only wait for a rank that stalled for a
    // whole timeout_ms between two MPI calls; a rank that arrived after the
    // others gave up times out here instead, cleanly.
    step = "MPI_Ibarrier before MPI_Comm_split";
    {
      MpiLock mpi_lock(*ctx);
      mrc = MPI_Ibarrier(parent->mpi, &req);
    }
    rc = mrc == MPI_SUCCESS ? WaitSetupStep(ctx, parent->mpi, req, parent->timeout_ms,
                                            &parent->aborted, nullptr, &mrc)
                            : StatusOfMpiError(mrc);
  }
  if (rc != PLEXUS_OK) {
    std::string why;
    if (rc == PLEXUS_ERR_TIMEOUT) {
      why = std::string(step) + ": no progress for " + std::to_string(parent->timeout_ms) +
            " ms (timeout_ms): some rank of the " + std::to_string(n) +
            " has not called comm_split, is slow or dead, gave up on it already, or posted "
            "another collective (MPI does not say which rank it waits for)";
    } else if (rc == PLEXUS_ERR_ABORTED) {
      why = "the communicator " + parent->name + " was aborted";
    } else {
      if (rc == PLEXUS_OK || rc == PLEXUS_ERR_INVALID_ARGUMENT) rc = PLEXUS_ERR_SYSTEM;
      why = std::string(step) + " failed: " + MpiErrorText(mrc);
    }
    // The parent's ranks are out of step now (some may have gone on).
    *error_out = where + ": " + why;
    parent->Break(rc, *error_out);
    return rc;
  }
  std::vector<uint32_t> colors;
  for (uint32_t j = 0; j < n; ++j) {
    if (all[2 * j] != PLEXUS_SPLIT_NO_COLOR) colors.push_back(all[2 * j]);
  }
  std::sort(colors.begin(), colors.end());
  colors.erase(std::unique(colors.begin(), colors.end()), colors.end());
  const int mpi_color =
      joins ? int(std::lower_bound(colors.begin(), colors.end(), color) - colors.begin())
            : MPI_UNDEFINED;
  const int mpi_key = int(int32_t(key ^ 0x80000000u));
  MPI_Comm child = MPI_COMM_NULL;
  {
    MpiLock mpi_lock(*ctx);
    mrc = MPI_Comm_split(parent->mpi, mpi_color, mpi_key, &child);
  }
  if (mrc != MPI_SUCCESS) {
    rc = StatusOfMpiError(mrc);
    if (rc == PLEXUS_OK || rc == PLEXUS_ERR_INVALID_ARGUMENT) rc = PLEXUS_ERR_SYSTEM;
    *error_out = where + ": MPI_Comm_split failed: " + MpiErrorText(mrc);
    parent->Break(rc, *error_out);
    return rc;
  }
  if (!joins) {
    if (child != MPI_COMM_NULL) {
      MpiLock mpi_lock(*ctx);
      MPI_Comm_free(&child);
    }
    *comm_out = nullptr;
    return PLEXUS_OK;
  }
  int child_rank = -1, child_size = -1;
  if (child != MPI_COMM_NULL) {
    MpiLock mpi_lock(*ctx);
    MPI_Comm_rank(child, &child_rank);
    MPI_Comm_size(child, &child_size);
  }
  if (child_rank != int64_t(config->rank) || child_size != int64_t(config->size)) {
    *error_out = where + ": the host made this rank " + std::to_string(config->rank) + " of " +
                 std::to_string(config->size) + " of the new communicator " +
                 (config->name ? config->name : "") + ", but MPI_Comm_split made it rank " +
                 std::to_string(child_rank) + " of " + std::to_string(child_size);
    if (child != MPI_COMM_NULL) {
      MpiLock mpi_lock(*ctx);
      MPI_Comm_free(&child);
    }
    return PLEXUS_ERR_INTERNAL;
  }
  *comm_out = AdoptComm(ctx, child, *config);
  return PLEXUS_OK;
}

void CommDestroy(plexus_comm* comm) {
  if (!comm) return;
  try {
    comm->one_host.reset();  // ends its thread (what still waits in the segment is aborted)
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

// The checks that are MPI's own, after the kit's (kit::CheckCall): the
// communicator still usable, CUDA memory only with a CUDA-aware MPI and
// only for what MPI does on the device.
int32_t CheckMpiCall(plexus_comm& comm, const kit::Call& call) {
  const char* what = algos::CollectiveName(call.coll);
  if (const int32_t rc = comm.Usable(what); rc != PLEXUS_OK) return rc;
  if (!call.placement || call.placement->memory_type != PLEXUS_MEMORY_CUDA) return PLEXUS_OK;
  auto reject = [&](int32_t code, const std::string& why) {
    comm.SetError(std::string("mpi ") + what + ": " + why);
    return code;
  };
  if (!comm.ctx->cuda_aware.load()) {
    return reject(PLEXUS_ERR_UNSUPPORTED, "CUDA memory needs a CUDA-aware MPI, and " +
                                              comm.ctx->library_version +
                                              " is not (host memory only)");
  }
  const bool reduces = kit::IsReduction(call.coll);
  // The backend itself touches the data for these, on the host.
  if (reduces && (IsHalf(call.dtype) || call.op == PLEXUS_OP_AVG)) {
    return reject(PLEXUS_ERR_UNSUPPORTED,
                  std::string("float16/bfloat16 and avg reductions run on the host; ") +
                      algos::DtypeName(call.dtype) + " " + algos::ReduceOpName(call.op) +
                      " is not supported on CUDA memory");
  }
  const uint64_t block = kit::CallBytes(call);
  if (call.coll == PLEXUS_COLL_REDUCE_SCATTER && call.count > 0 &&
      call.recvbuf == static_cast<const uint8_t*>(call.sendbuf) + comm.rank * block &&
      call.count <= comm.ctx->max_count) {
    return reject(PLEXUS_ERR_UNSUPPORTED,
                  "in place on CUDA memory is not supported (it goes through a host buffer)");
  }
  return PLEXUS_OK;
}

// The segment's signature of a checked collective call (not send or
// recv), in place seq; as the kit's: allgatherv's count is the sum of
// recvcounts (the same on every rank), alltoallv's 0.
algos::OpSignature OneHostSignature(const plexus_comm& comm, const kit::Call& c, uint64_t seq) {
  algos::OpSignature sig{seq, c.coll, c.dtype, c.op, c.count, c.root};
  if (c.coll == PLEXUS_COLL_ALLGATHERV) {
    sig.count = std::accumulate(c.recvcounts, c.recvcounts + comm.size, uint64_t{0});
  }
  return sig;
}

// An allreduce, reduce_scatter or allgather on host memory through
// comm.one_host: a request its thread completes.
int32_t PostOneHost(plexus_comm& comm, const kit::Call& c, plexus_request** req_out) {
  auto req = std::make_unique<plexus_request>();
  req->comm = &comm;
  req->coll = c.coll;
  req->dtype = c.dtype;
  req->type = ToMpiType(c.dtype);
  // (Its largest buffer: size blocks of count for reduce_scatter's send
  // and allgather's receive.)
  req->bytes =
      c.count * algos::DtypeSize(c.dtype) * (c.coll == PLEXUS_COLL_ALLREDUCE ? 1 : comm.size);
  req->progress_at = std::chrono::steady_clock::now();
  req->on_one_host = true;
  // The sequence number last, once nothing can fail: it must stay the same
  // on every rank.
  comm.one_host->Post(req.get(), OneHostSignature(comm, c, comm.collectives_posted++), c.sendbuf,
                      c.recvbuf);
  *req_out = req.release();
  return PLEXUS_OK;
}

// No Error: the table's request_error stays NULL and the host reads the
// communicator's last error.
struct MpiRequests {
  static int32_t Test(plexus_request& req) { return Progress(&req); }
  static int32_t Wait(plexus_request& req, int64_t timeout_ms) { return WaitFor(&req, timeout_ms); }
  static int32_t Free(plexus_request* req) {
    {
      std::lock_guard<std::mutex> lock(req->mutex);
      if (req->status == PLEXUS_IN_PROGRESS) return PLEXUS_ERR_INVALID_USAGE;
    }
    if (req->coll == PLEXUS_COLL_RECV) Unqueue(req);  // failed before all its messages came
    delete req;
    return PLEXUS_OK;
  }
};

struct MpiBackend {
  static constexpr const char* kName = "mpi";
  static constexpr uint32_t kCollectives = kAllCollectives;
  using Requests = MpiRequests;

  // "0.1.0 (Open MPI v4.1.4)": built on first use (thread-safe); the version
  // names the MPI library actually loaded, which MPI_Get_library_version may
  // tell before MPI_Init.
  static const char* Version() {
    static const std::string version =
        std::string(PLEXUS_VERSION_STRING) + " (" + LibraryVersion() + ")";
    return version.c_str();
  }
  static int32_t Init(const plexus_host_v1& host, plexus_backend_ctx** ctx_out) {
    return mpi::Init(&host, ctx_out);
  }
  static void Finalize(plexus_backend_ctx* ctx) { mpi::Finalize(ctx); }
  static void Capabilities(plexus_backend_ctx& ctx, plexus_capabilities& caps) {
    mpi::Capabilities(&ctx, &caps);
  }
  static int32_t CommCreate(plexus_backend_ctx& ctx, const plexus_comm_config_v1& config,
                            plexus_comm** comm_out, std::string* error) {
    return mpi::CommCreate(&ctx, &config, comm_out, error);
  }
  static int32_t CommSplit(plexus_comm& comm, uint32_t color, uint32_t key,
                           const plexus_comm_config_v1* config, plexus_comm** comm_out,
                           std::string* error) {
    return mpi::CommSplit(&comm, color, key, config, comm_out, error);
  }
  static void CommDestroy(plexus_comm* comm) { mpi::CommDestroy(comm); }
  static void CommAbort(plexus_comm& comm) {
    if (!comm.aborted.exchange(true)) {
      comm.SetError("mpi: the communicator " + comm.name + " was aborted");
    }
    if (comm.one_host) comm.one_host->Abort();
  }
  static kit::ErrorSlot& Errors(plexus_comm& comm) { return comm.errors; }
  // Shared buffers on the one-host segment (allreduce on them skips copies).
  static int32_t MemAlloc(plexus_comm& comm, uint64_t bytes, void** ptr_out) {
    algos::Status st =
        comm.one_host
            ? comm.one_host->MemAlloc(bytes, ptr_out)
            : algos::Status{PLEXUS_ERR_UNSUPPORTED,
                            "mpi mem_alloc: no shared memory on " + comm.name +
                                " (its ranks are not all on this host, or PLEXUS_SHM=off)"};
    if (!st.ok()) comm.SetError(st.message);
    return st.code;
  }
  static int32_t MemFree(plexus_comm& comm, void* ptr) {
    algos::Status st =
        comm.one_host ? comm.one_host->MemFree(ptr)
                      : algos::Status{PLEXUS_ERR_INVALID_ARGUMENT,
                                      "mpi mem_free: " + comm.name + " has no shared memory"};
    if (!st.ok()) comm.SetError(st.message);
    return st.code;
  }
  static kit::CommShape Shape(const plexus_comm& comm) { return {comm.rank, comm.size}; }
  // CUDA as well: CheckMpiCall says when this MPI cannot take it, and why.
  static uint32_t MemoryTypes(const plexus_comm&) {
    return (1u << PLEXUS_MEMORY_HOST) | (1u << PLEXUS_MEMORY_CUDA);
  }

  static int32_t Post(plexus_comm& comm, const kit::Call& c, plexus_request** req_out) {
    if (const int32_t rc = CheckMpiCall(comm, c); rc != PLEXUS_OK) return rc;
    const bool host = !c.placement || c.placement->memory_type == PLEXUS_MEMORY_HOST;
    if (comm.one_host && c.coll != PLEXUS_COLL_SEND && c.coll != PLEXUS_COLL_RECV) {
      if (kit::OneHostShm::Runs(c.coll) && host && c.count > 0) {
        return PostOneHost(comm, c, req_out);
      }
      comm.one_host->Announce(OneHostSignature(comm, c, comm.collectives_posted++));
    }
    switch (c.coll) {
      case PLEXUS_COLL_ALLREDUCE:
        return PostAllreduce(&comm, c.sendbuf, c.recvbuf, c.count, c.dtype, c.op, host, req_out);
      case PLEXUS_COLL_BROADCAST:
        return PostBroadcast(&comm, c.recvbuf, c.count, c.dtype, c.root, req_out);
      case PLEXUS_COLL_REDUCE:
        return PostReduce(&comm, c.sendbuf, c.recvbuf, c.count, c.dtype, c.op, c.root, req_out);
      case PLEXUS_COLL_ALLGATHER:
        return PostAllgather(&comm, c.sendbuf, c.recvbuf, c.count, c.dtype, req_out);
      case PLEXUS_COLL_REDUCE_SCATTER:
        return PostReduceScatter(&comm, c.sendbuf, c.recvbuf, c.count, c.dtype, c.op, req_out);
      case PLEXUS_COLL_ALLTOALL:
        return PostAlltoall(&comm, c.sendbuf, c.recvbuf, c.count, c.dtype, req_out);
      case PLEXUS_COLL_SEND:
        return PostSend(&comm, c.sendbuf, c.count, c.dtype, c.root, req_out);
      case PLEXUS_COLL_RECV:
        return PostRecv(&comm, c.recvbuf, c.count, c.dtype, c.root, req_out);
      case PLEXUS_COLL_GATHER:
        return PostGather(&comm, c.sendbuf, c.recvbuf, c.count, c.dtype, c.root, req_out);
      case PLEXUS_COLL_SCATTER:
        return PostScatter(&comm, c.sendbuf, c.recvbuf, c.count, c.dtype, c.root, req_out);
      case PLEXUS_COLL_ALLGATHERV:
        return PostAllgatherv(&comm, c.sendbuf, c.count, c.recvbuf, c.recvcounts, c.rdispls,
                              c.dtype, req_out);
      case PLEXUS_COLL_ALLTOALLV:
        return PostAlltoallv(&comm, c.sendbuf, c.sendcounts, c.sdispls, c.recvbuf, c.recvcounts,
                             c.rdispls, c.dtype, req_out);
      case PLEXUS_COLL_ALLREDUCE_COALESCED:
        return PostAllreduceCoalesced(&comm, c.sendbufs, c.recvbufs, c.counts, c.nbuffers, c.count,
                                      c.dtype, c.op, host, req_out);
      default:
        return PostBarrier(&comm, req_out);
    }
  }
};

}  // namespace
}  // namespace plexus::mpi

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** table_out) {
  return plexus::kit::HandOutTable<plexus::mpi::MpiBackend>(host_abi_minor, table_out);
}
