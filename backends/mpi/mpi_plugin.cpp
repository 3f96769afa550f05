// libplexus-mpi.so: the ABI v1 table of the MPI backend.
//
// Like tcp and ucx, the backend is a transport (mpi_transport.hpp: MPI
// point-to-point messages) under plexus-kit's operation queue, and its
// collectives are plexus-algos algorithms, or the kit's one-host shared
// memory when every rank is on this host. What is MPI's own lives here: MPI's
// initialisation, one MPI communicator per communicator (MPI_Comm_idup of
// MPI_COMM_WORLD, MPI_Comm_create_group for a subset, MPI_Comm_split for
// comm_split), and MPI_Iallreduce when PLEXUS_MPI_ALLREDUCE=mpi asks for it.
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

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mpi_context.hpp"
#include "mpi_transport.hpp"
#include "plexus/backend.h"
#include "plexus/kit/collective_algorithms.hpp"
#include "plexus/kit/op_queue.hpp"
#include "plexus/kit/settings.hpp"
#include "plexus/kit/table.hpp"
#include "plexus/settings/table.hpp"

struct plexus_comm : plexus::kit::QueuedComm<plexus::mpi::MpiTransport> {
  plexus_backend_ctx* ctx = nullptr;
  plexus::mpi::AllreduceChoice allreduce = plexus::mpi::AllreduceChoice::kAuto;
  uint32_t rank = 0, size = 0;
  int64_t timeout_ms = 0;
  std::string name;
  std::atomic<bool> aborted{false};  // comm_abort ran (comm_split's waits end)
};

namespace plexus::mpi {
namespace {

// How long finalize() waits for what aborts and failures left in MPI.
constexpr auto kAbandonedGrace = std::chrono::seconds(2);
// With two ranks, up to this many bytes the pair exchange beats both
// others; below the second, recursive doubling beats the ring (as tcp's,
// whose choice this is; docs/benchmarks.md).
constexpr uint64_t kPairMaxBytes = 512 << 10;
constexpr uint64_t kRecursiveDoublingMaxBytes = 64 << 10;
// Drive()'s back-to-back tests after the last progress (mpi_transport.hpp);
// none when there are more ranks than CPUs (the peer may need this one).
constexpr int64_t kSpinUs = 250;

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

int64_t SpinUs(uint32_t size) {
  return size <= std::thread::hardware_concurrency() ? kSpinUs : 0;
}

// ---------------------------------------------------------------------------
// Backend

int32_t Init(const plexus_host_v1& host, plexus_backend_ctx** ctx_out) {
  const bool explicit_choice = !Config(host, "PLEXUS_BACKEND").empty();
  using settings::Id;
  uint64_t max_count = INT_MAX;
  if (const std::string v = Config(host, settings::Name(Id::kDebugMpiMaxCount)); !v.empty()) {
    int64_t n = 0;
    if (std::string why; !settings::ParseInt(settings::Get(Id::kDebugMpiMaxCount), v, &n, &why)) {
      Log(host, PLEXUS_LOG_ERROR, why);
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    max_count = uint64_t(n);
  }
  AllreduceChoice allreduce = AllreduceChoice::kAuto;
  if (const std::string v = Config(host, settings::Name(Id::kMpiAllreduce)); !v.empty()) {
    if (v == "ring") {
      allreduce = AllreduceChoice::kRing;
    } else if (v == "rd") {
      allreduce = AllreduceChoice::kRecursiveDoubling;
    } else if (v == "pair") {
      allreduce = AllreduceChoice::kPair;
    } else if (v == "mpi") {
      allreduce = AllreduceChoice::kMpi;
    } else if (v != "auto") {
      Log(host, PLEXUS_LOG_ERROR,
          "PLEXUS_MPI_ALLREDUCE='" + v + "' is not one of auto, ring, rd, pair, mpi");
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
  }
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    Log(host, PLEXUS_LOG_ERROR,
        "MPI was already finalised in this process and cannot be initialised again");
    return PLEXUS_ERR_INVALID_USAGE;
  }
  if (!initialized && !LaunchedByMpi()) {
    // Before any MPI call: a singleton MPI_Init may hang or start daemons.
    const bool srun_step = std::getenv("SLURM_STEP_ID") || std::getenv("SLURM_STEPID");
    Log(host, explicit_choice ? PLEXUS_LOG_ERROR : PLEXUS_LOG_INFO,
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
    Log(host, PLEXUS_LOG_WARN,
        "srun started this step with PMI-2 (PMI_RANK set, no PMIX_RANK); Open MPI needs PMIx "
        "here unless it was built with PMI-2 support. If MPI_Init fails below, run `srun "
        "--mpi=pmix prog`");
  }
#endif
  auto ctx = std::make_unique<plexus_backend_ctx>(host);
  ctx->max_count = max_count;
  ctx->allreduce = allreduce;
  ctx->library_version = LibraryVersion();
  if (explicit_choice || initialized) {
    std::lock_guard<std::mutex> lock(ctx->state_mutex);
    std::string error;
    if (const int32_t rc = ctx->EnsureMpi(&error); rc != PLEXUS_OK) {
      Log(host, PLEXUS_LOG_ERROR, error);
      return rc;
    }
  }
  *ctx_out = ctx.release();
  return PLEXUS_OK;
}

void Finalize(plexus_backend_ctx* ctx) {
  std::unique_ptr<plexus_backend_ctx> owned(ctx);
  std::lock_guard<std::mutex> lock(ctx->state_mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!ctx->mpi_ready.load() || finalized) return;
  // What aborts and failures left in MPI finishes if the peers post their
  // side too; give it a moment, progressing MPI.
  size_t left = ctx->ReapAbandoned();
  const auto give_up = std::chrono::steady_clock::now() + kAbandonedGrace;
  while (left > 0 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    left = ctx->ReapAbandoned();
  }
  if (ctx->lost_peer.load()) {
    // MPI_Finalize would wait for the peer (a SIGSTOPped rank: forever).
    Log(ctx->host, PLEXUS_LOG_WARN,
        "an operation failed for want of a peer; not calling MPI_Finalize, which would wait "
        "for it");
  } else if (left > 0) {
    Log(ctx->host, PLEXUS_LOG_WARN,
        std::to_string(left) + " operation(s) that failed or were aborted are still pending " +
            "in MPI; not calling MPI_Finalize, which would wait for them");
  } else if (ctx->we_initialised) {
    ctx->FreeRetired();
    if (const int rc = MPI_Finalize(); rc != MPI_SUCCESS) {
      Log(ctx->host, PLEXUS_LOG_WARN, "MPI_Finalize failed: " + MpiErrorText(rc));
    }
  }
}

// ---------------------------------------------------------------------------
// Communicators

// The one-host segment's set-up exchange (kit::OneHostShm::Create) over the
// new MPI communicator, so that a host without an out-of-band channel (one
// driving the table itself under mpirun) gets it too. Passed as the
// config's oob; MPI gets buffers of its own, which the context keeps when a
// step times out.
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
  uint8_t* all = buf.get();
  uint8_t* mine = all + bytes * ch->size;
  std::memcpy(mine, in, bytes);
  MPI_Request req = MPI_REQUEST_NULL;
  int mrc;
  {
    MpiLock lock(*ch->ctx);
    mrc = MPI_Iallgather(mine, int(bytes), MPI_BYTE, all, int(bytes), MPI_BYTE, ch->comm, &req);
  }
  if (mrc != MPI_SUCCESS) return PLEXUS_ERR_SYSTEM;
  const int32_t rc = ch->ctx->WaitRequest(ch->comm, req, timeout_ms, nullptr, &buf, &mrc);
  if (rc == PLEXUS_OK) std::memcpy(out, all, bytes * ch->size);
  return rc;
}

int32_t SetupBroadcast(void*, plexus_oob* oob, void* data, uint64_t bytes, uint32_t root,
                       int64_t timeout_ms) {
  auto* ch = reinterpret_cast<MpiSetupChannel*>(oob);
  if (bytes > uint64_t(INT_MAX) || root >= ch->size) return PLEXUS_ERR_INVALID_ARGUMENT;
  auto buf = std::make_unique<uint8_t[]>(bytes);
  uint8_t* got = buf.get();
  std::memcpy(got, data, bytes);
  MPI_Request req = MPI_REQUEST_NULL;
  int mrc;
  {
    MpiLock lock(*ch->ctx);
    mrc = MPI_Ibcast(got, int(bytes), MPI_BYTE, int(root), ch->comm, &req);
  }
  if (mrc != MPI_SUCCESS) return PLEXUS_ERR_SYSTEM;
  const int32_t rc = ch->ctx->WaitRequest(ch->comm, req, timeout_ms, nullptr, &buf, &mrc);
  if (rc == PLEXUS_OK) std::memcpy(data, got, bytes);
  return rc;
}

// The communicator around mpi (an MPI communicator of exactly config's
// ranks, owned from now on): its transport, the one-host segment when every
// rank is on this host, its queue. Where comm_create and comm_split end.
// state_mutex held.
int32_t Adopt(plexus_backend_ctx& ctx, MPI_Comm mpi, const plexus_comm_config_v1& config,
              plexus_comm** comm_out, std::string* error) {
  auto comm = std::make_unique<plexus_comm>();
  comm->ctx = &ctx;
  comm->allreduce = ctx.allreduce;
  comm->rank = config.rank;
  comm->size = config.size;
  comm->timeout_ms = config.timeout_ms;
  comm->name = config.name ? config.name : "";
  {
    MpiLock lock(ctx);
    MPI_Comm_set_errhandler(mpi, MPI_ERRORS_RETURN);
    std::string mpi_name = "plexus " + comm->name;
    mpi_name.resize(std::min<size_t>(mpi_name.size(), MPI_MAX_OBJECT_NAME - 1));
    MPI_Comm_set_name(mpi, mpi_name.c_str());
  }
  const int64_t spin_us = SpinUs(config.size);
  comm->transport = std::make_unique<MpiTransport>(ctx, mpi, config.rank, config.size,
                                                   config.timeout_ms, spin_us, comm->name);
  std::unique_ptr<kit::OneHostShm> one_host;
  if (config.size > 1) {
    MpiSetupChannel channel{&ctx, mpi, config.size};
    plexus_host_v1 host = ctx.host;
    host.oob_allgather = SetupAllgather;
    host.oob_broadcast = SetupBroadcast;
    plexus_comm_config_v1 setup = config;
    setup.oob = reinterpret_cast<plexus_oob*>(&channel);
    kit::OneHostShmOptions options;
    options.backend = "mpi";
    options.spin_us = spin_us > 0 ? 50 : 0;
    std::string shm;
    if (algos::Status st = kit::MakeOneHostShm(host, setup, options, &one_host, &shm); !st.ok()) {
      *error = "mpi comm_create " + comm->name + ": " + st.message;
      return st.code;
    }
    Log(ctx.host, PLEXUS_LOG_INFO,
        comm->name + " rank " + std::to_string(config.rank) + ": " + shm);
  }
  comm->queue = std::make_unique<kit::OpQueue>(ctx.host, *comm->transport,
                                               kit::OpQueueOptions::For("mpi", config, 64 << 10),
                                               std::move(one_host));
  *comm_out = comm.release();
  return PLEXUS_OK;
}

// An MPI communicator of config's ranks when they are not MPI_COMM_WORLD's
// (a subset, or the world in another order: a torch.distributed new_group
// made through its store, which only the members call). Every member tells
// the others its MPI_COMM_WORLD rank over the host's out-of-band channel
// (bounded by timeout_ms, so a member that never comes is a TIMEOUT, not a
// hang); then MPI_Comm_create_group, which is collective over the members
// only and returns promptly once all have arrived.
int32_t SubsetComm(plexus_backend_ctx& ctx, const plexus_comm_config_v1& config, int world_rank,
                   int world_size, MPI_Comm* out, std::string* error) {
  const std::string where = "mpi comm_create " + std::string(config.name ? config.name : "") +
                            " (rank " + std::to_string(config.rank) + " of " +
                            std::to_string(config.size) + ", MPI_COMM_WORLD rank " +
                            std::to_string(world_rank) + ")";
  std::vector<int32_t> ranks(config.size, -1);
  const int32_t mine = world_rank;
  const int32_t rc = ctx.host.oob_allgather(ctx.host.ctx, config.oob, &mine, ranks.data(),
                                            sizeof mine, config.timeout_ms);
  if (rc != PLEXUS_OK) {
    *error = where + ": exchanging MPI_COMM_WORLD ranks failed (status " + std::to_string(rc) + ")";
    return rc;
  }
  std::vector<bool> seen(size_t(world_size), false);
  for (uint32_t r = 0; r < config.size; ++r) {
    const int32_t w = ranks[r];
    if (w < 0 || w >= world_size || seen[size_t(w)] || (r == config.rank && w != world_rank)) {
      *error = where + ": rank " + std::to_string(r) + " of the new communicator says it is " +
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
    MpiLock lock(ctx);
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, int(config.size), ranks.data(), &group);
    mrc = MPI_Comm_create_group(MPI_COMM_WORLD, group, int(h % 32000u), &made);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
  }
  if (mrc != MPI_SUCCESS || made == MPI_COMM_NULL) {
    *error = where + ": MPI_Comm_create_group failed: " + MpiErrorText(mrc);
    return mrc == MPI_SUCCESS ? PLEXUS_ERR_SYSTEM : StatusOfMpiError(mrc);
  }
  *out = made;
  return PLEXUS_OK;
}

int32_t CommCreate(plexus_backend_ctx& ctx, const plexus_comm_config_v1& config,
                   plexus_comm** comm_out, std::string* error) {
  const std::string name = config.name ? config.name : "";
  std::lock_guard<std::mutex> lock(ctx.state_mutex);
  std::string why;
  if (const int32_t rc = ctx.EnsureMpi(&why); rc != PLEXUS_OK) {
    *error = "mpi comm_create " + name + ": " + why;
    return rc;
  }
  ctx.ReapAbandoned();
  int world_rank = -1, world_size = -1;
  {
    MpiLock mpi_lock(ctx);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  }
  MPI_Comm mpi = MPI_COMM_NULL;
  if (world_rank != int64_t(config.rank) || world_size != int64_t(config.size)) {
    if (config.size > uint32_t(world_size) || !config.oob || !ctx.host.oob_allgather) {
      *error = "mpi comm_create " + name + ": Plexus discovered rank " +
               std::to_string(config.rank) + " of " + std::to_string(config.size) +
               " from the launch environment, but MPI_COMM_WORLD has this process as rank " +
               std::to_string(world_rank) + " of " + std::to_string(world_size) +
               "; with the mpi backend launch every rank with one mpirun and do not override "
               "PLEXUS_RANK/PLEXUS_WORLD_SIZE (or RANK/WORLD_SIZE)";
      return PLEXUS_ERR_INVALID_USAGE;
    }
    if (const int32_t rc = SubsetComm(ctx, config, world_rank, world_size, &mpi, error);
        rc != PLEXUS_OK) {
      return rc;
    }
  } else {
    // MPI_Comm_idup, so that a rank that never comes is a timeout, not a hang.
    MPI_Request req = MPI_REQUEST_NULL;
    int mrc;
    {
      MpiLock mpi_lock(ctx);
      mrc = MPI_Comm_idup(MPI_COMM_WORLD, &mpi, &req);
    }
    const int32_t rc = mrc == MPI_SUCCESS ? ctx.WaitRequest(MPI_COMM_NULL, req, config.timeout_ms,
                                                            nullptr, nullptr, &mrc)
                                          : StatusOfMpiError(mrc);
    if (rc == PLEXUS_ERR_TIMEOUT) {
      *error = "mpi comm_create " + name + ": MPI_Comm_idup(MPI_COMM_WORLD) did not " +
               "complete within " + std::to_string(config.timeout_ms) +
               " ms (does every rank create the communicator?)";
      return rc;
    }
    if (rc != PLEXUS_OK) {
      *error = "mpi comm_create " + name + ": MPI_Comm_idup failed: " + MpiErrorText(mrc);
      return rc;
    }
  }
  return Adopt(ctx, mpi, config, comm_out, error);
}

// comm_split (ABI 1.2): MPI_Comm_split of the parent's MPI communicator.
//
// MPI_Comm_split is a blocking collective with no timeout, so the split
// first runs an MPI_Iallgather of every rank's (color, key) and then an
// MPI_Ibarrier on the parent, each waited for under the parent's timeout_ms
// and ended by its comm_abort: a rank that never calls comm_split, or comes
// after the others gave up, is a TIMEOUT, not a hang. Once both completed
// every rank has arrived, and MPI_Comm_split returns promptly on all. These
// are MPI collectives on the parent's MPI communicator, which the parent's
// operations (point-to-point messages) never match.
//
// The allgather also turns the colors into what MPI takes: the ABI's are any
// uint32_t but PLEXUS_SPLIT_NO_COLOR, MPI's a non-negative int, so each
// color becomes its index among the distinct colors given (the same on every
// rank); the key maps onto int keeping its order (k - 2^31), so that MPI
// orders by (key, parent rank) as the host did, and the rank and size MPI
// gives can be checked against the host's config.
int32_t CommSplit(plexus_comm& parent, uint32_t color, uint32_t key,
                  const plexus_comm_config_v1* config, plexus_comm** comm_out,
                  std::string* error) {
  plexus_backend_ctx& ctx = *parent.ctx;
  const bool joins = color != PLEXUS_SPLIT_NO_COLOR;
  const std::string where = "mpi comm_split of " + parent.name + " (rank " +
                            std::to_string(parent.rank) + " of " + std::to_string(parent.size) +
                            ", " + (joins ? "color " + std::to_string(color) : "no color") +
                            ", key " + std::to_string(key) + ")";
  if (parent.aborted.load()) {
    *error = where + ": the communicator " + parent.name + " was aborted";
    return PLEXUS_ERR_ABORTED;
  }
  std::lock_guard<std::mutex> lock(ctx.state_mutex);
  const MPI_Comm on = parent.transport->comm();
  const uint32_t n = parent.size;
  // [n x (color, key) received | this rank's (color, key)]: MPI may use both
  // until the allgather completes, so they live together.
  auto buf = std::make_unique<uint8_t[]>(size_t(n + 1) * 2 * sizeof(uint32_t));
  auto* all = reinterpret_cast<uint32_t*>(buf.get());
  uint32_t* mine = all + size_t(2) * n;
  mine[0] = color;
  mine[1] = key;
  MPI_Request req = MPI_REQUEST_NULL;
  int mrc;
  {
    MpiLock mpi_lock(ctx);
    mrc = MPI_Iallgather(mine, 2, MPI_UINT32_T, all, 2, MPI_UINT32_T, on, &req);
  }
  int32_t rc = mrc == MPI_SUCCESS
                   ? ctx.WaitRequest(on, req, parent.timeout_ms, &parent.aborted, &buf, &mrc)
                   : StatusOfMpiError(mrc);
  const char* step = "MPI_Iallgather of the colors and keys";
  if (rc == PLEXUS_OK) {
    // A rank that completed the allgather knows that every rank posted it,
    // not that every rank is still there to call MPI_Comm_split (one may
    // have timed out waiting, if this rank came that late): hence a barrier.
    step = "MPI_Ibarrier before MPI_Comm_split";
    {
      MpiLock mpi_lock(ctx);
      mrc = MPI_Ibarrier(on, &req);
    }
    rc = mrc == MPI_SUCCESS
             ? ctx.WaitRequest(on, req, parent.timeout_ms, &parent.aborted, nullptr, &mrc)
             : StatusOfMpiError(mrc);
  }
  if (rc != PLEXUS_OK) {
    std::string why;
    if (rc == PLEXUS_ERR_TIMEOUT) {
      why = std::string(step) + ": no progress for " + std::to_string(parent.timeout_ms) +
            " ms (timeout_ms): some rank of the " + std::to_string(n) +
            " has not called comm_split, is slow or dead, gave up on it already, or posted "
            "another collective (MPI does not say which rank it waits for)";
    } else if (rc == PLEXUS_ERR_ABORTED) {
      why = "the communicator " + parent.name + " was aborted";
    } else {
      why = std::string(step) + " failed: " + MpiErrorText(mrc);
    }
    *error = where + ": " + why;
    parent.queue->errors().Set(*error);
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
    MpiLock mpi_lock(ctx);
    mrc = MPI_Comm_split(on, mpi_color, mpi_key, &child);
  }
  if (mrc != MPI_SUCCESS) {
    *error = where + ": MPI_Comm_split failed: " + MpiErrorText(mrc);
    parent.queue->errors().Set(*error);
    return StatusOfMpiError(mrc);
  }
  if (!joins) {
    if (child != MPI_COMM_NULL) {
      MpiLock mpi_lock(ctx);
      MPI_Comm_free(&child);
    }
    *comm_out = nullptr;
    return PLEXUS_OK;
  }
  int child_rank = -1, child_size = -1;
  if (child != MPI_COMM_NULL) {
    MpiLock mpi_lock(ctx);
    MPI_Comm_rank(child, &child_rank);
    MPI_Comm_size(child, &child_size);
  }
  if (child_rank != int64_t(config->rank) || child_size != int64_t(config->size)) {
    *error = where + ": the host made this rank " + std::to_string(config->rank) + " of " +
             std::to_string(config->size) + " of the new communicator " +
             (config->name ? config->name : "") + ", but MPI_Comm_split made it rank " +
             std::to_string(child_rank) + " of " + std::to_string(child_size);
    if (child != MPI_COMM_NULL) {
      MpiLock mpi_lock(ctx);
      MPI_Comm_free(&child);
    }
    return PLEXUS_ERR_INTERNAL;
  }
  return Adopt(ctx, child, *config, comm_out, error);
}

// ---------------------------------------------------------------------------
// Collectives

kit::AllreduceAlgo AlgoFor(AllreduceChoice choice, uint32_t size, uint64_t bytes) {
  switch (choice) {
    case AllreduceChoice::kRing:
      return kit::AllreduceAlgo::kRing;
    case AllreduceChoice::kRecursiveDoubling:
      return kit::AllreduceAlgo::kRecursiveDoubling;
    case AllreduceChoice::kPair:
      return kit::AllreduceAlgo::kPairExchange;  // (the ring on other than 2 ranks)
    default:
      if (size == 2 && bytes <= kPairMaxBytes) return kit::AllreduceAlgo::kPairExchange;
      return bytes > kRecursiveDoublingMaxBytes ? kit::AllreduceAlgo::kRing
                                                : kit::AllreduceAlgo::kRecursiveDoubling;
  }
}

// MPI's own type and op for an allreduce MPI_Iallreduce can run, else false
// (float16, bfloat16 and avg have none: plexus-algos runs them).
bool NativeAllreduce(const kit::Call& c, MPI_Datatype* type, MPI_Op* op) {
  switch (c.dtype) {
    case PLEXUS_DTYPE_INT8: *type = MPI_INT8_T; break;
    case PLEXUS_DTYPE_UINT8: *type = MPI_UINT8_T; break;
    case PLEXUS_DTYPE_INT16: *type = MPI_INT16_T; break;
    case PLEXUS_DTYPE_UINT16: *type = MPI_UINT16_T; break;
    case PLEXUS_DTYPE_INT32: *type = MPI_INT32_T; break;
    case PLEXUS_DTYPE_UINT32: *type = MPI_UINT32_T; break;
    case PLEXUS_DTYPE_INT64: *type = MPI_INT64_T; break;
    case PLEXUS_DTYPE_UINT64: *type = MPI_UINT64_T; break;
    case PLEXUS_DTYPE_FLOAT32: *type = MPI_FLOAT; break;
    case PLEXUS_DTYPE_FLOAT64: *type = MPI_DOUBLE; break;
    default: return false;
  }
  switch (c.op) {
    case PLEXUS_OP_SUM: *op = MPI_SUM; break;
    case PLEXUS_OP_PROD: *op = MPI_PROD; break;
    case PLEXUS_OP_MIN: *op = MPI_MIN; break;
    case PLEXUS_OP_MAX: *op = MPI_MAX; break;
    default: return false;
  }
  return c.count > 0 && c.count <= uint64_t(INT_MAX);
}

struct MpiBackend : kit::QueuedBackend<plexus_comm> {
  static constexpr const char* kName = "mpi";
  static constexpr uint32_t kCollectives = abi::kAllCollectives;

  // "0.1.0 (Open MPI v4.1.4)": the MPI library actually loaded.
  static const char* Version() {
    static const std::string version =
        std::string(PLEXUS_VERSION_STRING) + " (" + LibraryVersion() + ")";
    return version.c_str();
  }
  static int32_t Init(const plexus_host_v1& host, plexus_backend_ctx** ctx_out) {
    return mpi::Init(host, ctx_out);
  }
  static void Finalize(plexus_backend_ctx* ctx) { mpi::Finalize(ctx); }
  static void Capabilities(plexus_backend_ctx& ctx, plexus_capabilities& caps) {
    kit::SetAlgosHostCapabilities(caps, kCollectives);
    // No PLEXUS_CAP_ABORT: MPI cannot cancel a send or a matched receive.
    caps.flags = PLEXUS_CAP_IN_PLACE;
    // Before MPI is initialised (automatic selection), the level asked for.
    caps.thread_level = !ctx.mpi_ready.load() || ctx.provided.load() >= MPI_THREAD_MULTIPLE
                            ? PLEXUS_THREAD_MULTIPLE
                            : PLEXUS_THREAD_SERIALIZED;
  }
  static int32_t CommCreate(plexus_backend_ctx& ctx, const plexus_comm_config_v1& config,
                            plexus_comm** comm_out, std::string* error) {
    return mpi::CommCreate(ctx, config, comm_out, error);
  }
  static int32_t CommSplit(plexus_comm& comm, uint32_t color, uint32_t key,
                           const plexus_comm_config_v1* config, plexus_comm** comm_out,
                           std::string* error) {
    return mpi::CommSplit(comm, color, key, config, comm_out, error);
  }
  static void CommAbort(plexus_comm& comm) {
    comm.aborted.store(true);
    comm.queue->Abort();
  }

  static int32_t Post(plexus_comm& comm, const kit::Call& c, plexus_request** req_out) {
    MPI_Datatype type;
    MPI_Op op;
    if (comm.allreduce == AllreduceChoice::kMpi && c.coll == PLEXUS_COLL_ALLREDUCE &&
        !comm.queue->one_host_shm() && NativeAllreduce(c, &type, &op)) {
      MpiTransport* t = comm.transport.get();
      const void* send = c.sendbuf == c.recvbuf ? MPI_IN_PLACE : c.sendbuf;
      void* recv = c.recvbuf;
      const int count = int(c.count);
      return comm.queue->Post(
          {0, c.coll, c.dtype, c.op, c.count, 0},
          [=](const kit::OpProviders&, const algos::OpSignature& sig) {
            return t->RunNative(sig, "MPI_Iallreduce", [&](MPI_Comm on, MPI_Request* r) {
              return MPI_Iallreduce(send, recv, count, type, op, on, r);
            });
          },
          req_out);
    }
    return kit::PostAlgos(*comm.queue, c, AlgoFor(comm.allreduce, comm.size, kit::CallBytes(c)),
                          req_out);
  }
};

}  // namespace
}  // namespace plexus::mpi

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** table_out) {
  return plexus::kit::HandOutTable<plexus::mpi::MpiBackend>(host_abi_minor, table_out);
}
