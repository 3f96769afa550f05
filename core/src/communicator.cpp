#include "plexus/communicator.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <unistd.h>

#include "comm_state.hpp"
#include "fingerprint_check.hpp"
#include "plexus/algos/dtype.hpp"
#include "plexus/abi/call.hpp"
#include "plexus/abi/collectives.hpp"
#include "plexus/log.hpp"
#include "plexus/settings/environment.hpp"
#include "plugins/plugin_loader.hpp"
#include "slurm_step_end.hpp"
#include "store/job_token.hpp"
#include "store/private_dir.hpp"
#include "store/store_protocol.hpp"

namespace plexus {
namespace detail {

void CommState::FreeFinished(plexus_request* req, const PostedOp& posted, int32_t status) {
  if (posted.trace_slot && recorder) recorder->Finished(posted, status);
  backend->FreeRequest(req);
}

void CommState::AdoptOrphan(plexus_request* req, const PostedOp& posted) {
  std::lock_guard<std::mutex> lock(orphans_mutex);
  // Free the ones that finished meanwhile so the list stays short.
  std::erase_if(orphans, [&](const Orphan& o) {
    const int32_t status = backend->Test(o.request);
    if (status == PLEXUS_IN_PROGRESS) return false;
    FreeFinished(o.request, o.posted, status);
    return true;
  });
  orphans.push_back({req, posted});
}

int64_t CommState::ConfigGetter(void* ctx, const char* key, char* buf, size_t len) {
  const auto* self = static_cast<const CommState*>(ctx);
  return self ? store::GetConfig(self->config, key, buf, len) : -1;
}

CommState::~CommState() {
  if (!backend) return;  // from_env failed before a backend was opened
  bool aborted = false;
  // After a failure the job is going down: an operation still running is
  // waited for briefly, then aborted (a full timeout here would double the
  // time a failed rank takes to exit).
  const auto limit = failed ? std::min(timeout, std::chrono::milliseconds(2000)) : timeout;
  for (const Orphan& o : orphans) {
    plexus_request* r = o.request;
    if (!aborted && backend->Wait(r, limit.count()) == PLEXUS_ERR_TIMEOUT &&
        backend->Test(r) == PLEXUS_IN_PROGRESS) {
      LogLine(PLEXUS_LOG_WARN, "plexus",
              name + ": an operation whose Work was dropped did " +
                  "not finish in time; aborting the communicator");
      backend->AbortComm(comm);
      aborted = true;
    }
    // After an abort every request completes promptly; a backend that breaks
    // that promise costs a leaked request, not a hung process.
    if (backend->Wait(r, 10000) == PLEXUS_ERR_TIMEOUT && backend->Test(r) == PLEXUS_IN_PROGRESS) {
      LogLine(PLEXUS_LOG_ERROR, "plexus",
              name + ": backend '" + backend->name() +
                  "' did not complete a request after abort; leaking it");
      continue;
    }
    FreeFinished(r, o.posted, backend->Test(r));
  }
  backend->DestroyComm(comm);
}

}  // namespace detail

namespace {

[[noreturn]] void Throw(const Status& st, const std::string& backend = "plexus") {
  throw Error(st.code(), backend, st.message());
}

std::chrono::milliseconds TimeoutFromEnv() {
  // The table's range starts at 1 ms (shorter rounds to 0 ms, which would
  // time every operation out at once) and ends at 10^7 s (beyond, the
  // milliseconds stop being exact in a double).
  double seconds = 300;
  if (std::string why; !settings::ReadNumber(settings::Id::kTimeout, &seconds, &why)) {
    Throw(Status::InvalidArgument(why));
  }
  return std::chrono::milliseconds(int64_t(seconds * 1000));
}

// Loaded backends, shared by the communicators that use them and kept until
// the process exits: some libraries (MPI) cannot be initialised twice, so a
// backend is finalised once, at exit, not whenever its last communicator goes.
std::mutex g_backends_mutex;
std::map<std::string, std::shared_ptr<Backend>> g_backends;

// The backend's host services see the environment only: a backend is
// shared by every communicator of the process, and each communicator's own
// settings reach comm_create through plexus_comm_config_v1.get_config.
Status OpenBackend(const std::string& spec, const Job& job, std::shared_ptr<Backend>* out) {
  std::unique_ptr<LoadedLibrary> lib;
  Status st = ResolveBackend(spec, &lib);
  if (!st.ok()) return st;
  std::lock_guard<std::mutex> lock(g_backends_mutex);
  if (auto cached = g_backends[lib->path()]) {
    *out = cached;  // lib's extra dlopen reference is dropped here
    return Status::Ok();
  }
  const std::string path = lib->path();
  auto host = std::make_unique<HostServices>(PrintableText(lib->table().name), job.local_address,
                                             std::map<std::string, std::string>{});
  st = Backend::Open(std::move(lib), std::move(host), out);
  if (st.ok()) g_backends[path] = *out;
  return st;
}

// A backend the user did not name: each candidate file of name is first
// probed in a child process (a plugin that crashes in its entry or init must
// not take the application down with it), then the first that survives is
// opened here.
Status OpenAutomatic(const std::string& name, const Job& job, std::chrono::milliseconds timeout,
                     std::shared_ptr<Backend>* out) {
  std::string reasons;
  for (const std::string& path : CandidatePaths(name)) {
    if (access(path.c_str(), F_OK) != 0) continue;
    {
      std::lock_guard<std::mutex> lock(g_backends_mutex);
      if (auto cached = g_backends[path]) {
        *out = cached;
        return Status::Ok();
      }
    }
    // A plugin that hangs in its entry function or init is given up on after
    // the job's timeout (at most 20 s), like every other wait.
    Status st =
        ProbeInChild(path, std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(20)));
    if (st.ok()) st = OpenBackend(path, job, out);
    if (st.ok()) return st;
    reasons += (reasons.empty() ? "" : "; ") + path + ": " + st.message();
  }
  if (reasons.empty()) return Status::InvalidArgument("no libplexus-" + name + ".so found");
  return Status(PLEXUS_ERR_UNSUPPORTED, reasons);
}

}  // namespace

Status detail::OpenNamedBackend(const std::string& spec, const Job& job,
                                std::shared_ptr<Backend>* out) {
  return OpenBackend(spec, job, out);
}

Status AutoBackendChoice(const Bytes& chosen, std::string* name) {
  const std::string text(chosen.begin(), chosen.end());
  // Nothing read from the store is loaded as it stands: only a name rank 0
  // could have chosen, which this rank resolves on its own search path.
  const bool known = std::find(kAutoBackendOrder.begin(), kAutoBackendOrder.end(), text) !=
                     kAutoBackendOrder.end();
  if (!known) {
    std::string names;
    for (const std::string& n : kAutoBackendOrder) names += (names.empty() ? "" : ", ") + n;
    return Status::InvalidUsage(
        "PLEXUS_BACKEND is not set, and the choice read from the rendezvous store, " +
        store::QuoteKey(text) + ", is not one of the backends Plexus picks by itself (" + names +
        "): refusing to load it (a backend chosen through the store must be a plain name, "
        "resolved on this rank's own search path); set PLEXUS_BACKEND on every rank");
  }
  *name = text;
  return Status::Ok();
}

namespace {

// PLEXUS_BACKEND unset: rank 0 takes the first backend of kAutoBackendOrder
// that loads and initialises, and tells the others, so all ranks agree.
Status ChooseBackend(const Job& job, const std::string& comm_name,
                     std::chrono::milliseconds timeout, std::shared_ptr<Backend>* out) {
  // Rank 0's own key: the store takes it from rank 0's connection only.
  const std::string key = store::RankKey(0, comm_name + "/auto-backend");
  if (!job.has_rendezvous) {
    // No store to agree through: every rank takes the first backend that
    // works here. Under mpirun that is the same one on every rank.
    std::string reasons;
    for (const std::string& name : kAutoBackendOrder) {
      Status st = OpenAutomatic(name, job, timeout, out);
      if (st.ok()) return st;
      reasons += "\n  " + name + ": " + st.message();
    }
    return Status::Unsupported("PLEXUS_BACKEND is not set and no backend could be used:" + reasons);
  }
  if (job.launch.rank == 0) {
    std::string reasons;
    for (const std::string& name : kAutoBackendOrder) {
      Status st = OpenAutomatic(name, job, timeout, out);
      if (st.ok()) {
        LogLine(PLEXUS_LOG_INFO, "plexus",
                "PLEXUS_BACKEND is not set; using '" + name + "' (" + (*out)->path() + ")");
        st = job.store->Set(key, Bytes(name.begin(), name.end()), timeout);
        return st;
      }
      reasons += "\n  " + name + ": " + st.message();
    }
    (void)job.store->Set(key, Bytes(), timeout);
    return Status::Unsupported("PLEXUS_BACKEND is not set and no backend could be used:" + reasons);
  }
  Bytes chosen;
  Status st = job.store->Get(key, &chosen, timeout);
  if (!st.ok()) return st.WithContext("waiting for rank 0 to choose a backend");
  if (chosen.empty()) return Status::Unsupported("rank 0 found no usable backend");
  std::string name;
  st = AutoBackendChoice(chosen, &name);
  if (!st.ok()) return st;
  st = OpenAutomatic(name, job, timeout, out);
  if (!st.ok()) return st.WithContext("rank 0 chose '" + name + "' but this rank cannot use it");
  return st;
}

}  // namespace

Communicator Communicator::from_env(const CommunicatorOptions& options) {
  const auto timeout = options.timeout.count() > 0 ? options.timeout : TimeoutFromEnv();
  std::shared_ptr<Job> job;
  Status st = GetJob(timeout, &job);
  if (!st.ok() && st.code() != PLEXUS_ERR_INVALID_ARGUMENT &&
      st.code() != PLEXUS_ERR_INVALID_USAGE) {
    // The others would wait for this rank (or for rank 0's store) until they
    // time out. (A wrong setting is every rank's, and all fail at once.)
    EndSlurmStepAfterExit("could not join the job");
  }
  if (!st.ok()) Throw(st);
  const uint64_t n = job->next_comm++;
  std::string name = "plexus/" + std::to_string(n);
  // A rank plexus-run --elastic started again: its first communicator is
  // its part of the others' grow().
  const char* join = plexus::settings::Raw(plexus::settings::Id::kElasticJoin);
  if (n == 0 && join && *join && job->has_rendezvous) {
    char* end = nullptr;
    const uint64_t generation = std::strtoull(join, &end, 10);
    if (*end != '\0' || generation == 0) {
      Throw(Status::InvalidArgument("PLEXUS_ELASTIC_JOIN='" + std::string(join) +
                                    "' is not a generation (plexus-run sets it)"));
    }
    return JoinElastic(std::move(job), std::move(name), generation, options, timeout);
  }
  return Join(std::move(job), std::move(name), options, timeout);
}

namespace {

// The caller's store, shared with the caller (a Job owns its store).
class SharedStore final : public RendezvousStore {
 public:
  explicit SharedStore(std::shared_ptr<RendezvousStore> store) : store_(std::move(store)) {}
  Status Set(const std::string& k, const Bytes& v, std::chrono::milliseconds t) override {
    return store_->Set(k, v, t);
  }
  Status Get(const std::string& k, Bytes* v, std::chrono::milliseconds t) override {
    return store_->Get(k, v, t);
  }
  Status Add(const std::string& k, int64_t d, int64_t* n, std::chrono::milliseconds t) override {
    return store_->Add(k, d, n, t);
  }
  Status Wait(const std::vector<std::string>& k, std::chrono::milliseconds t) override {
    return store_->Wait(k, t);
  }

 private:
  std::shared_ptr<RendezvousStore> store_;
};

}  // namespace

Communicator Communicator::from_store(std::shared_ptr<RendezvousStore> store, uint32_t rank,
                                      uint32_t size, const CommunicatorOptions& options) {
  const auto timeout = options.timeout.count() > 0 ? options.timeout : TimeoutFromEnv();
  if (!store) Throw(Status::InvalidArgument("from_store: the store is null"));
  if (size == 0 || rank >= size) {
    Throw(Status::InvalidArgument("from_store: rank " + std::to_string(rank) +
                                  " is not a rank of size " + std::to_string(size)));
  }
  // Calls on one store are numbered by a counter of this rank's own, so
  // ranks that make communicators in the same order agree on each's name.
  int64_t n = 0;
  Status st = store->Add(store::RankKey(rank, "plexus/store-comms"), 1, &n, timeout);
  if (!st.ok()) Throw(st.WithContext("from_store: rank " + std::to_string(rank)));
  std::string name = "plexus/store/" + std::to_string(n - 1);
  std::shared_ptr<Job> job;
  std::string token, secret_file;
  st = MakeStoreJob(std::make_unique<SharedStore>(std::move(store)), rank, size, name, timeout,
                    &job, &token, &secret_file);
  if (!st.ok()) Throw(st);
  CommunicatorOptions with_secret = options;
  if (!token.empty()) with_secret.config["PLEXUS_TOKEN"] = token;
  Communicator comm = [&] {
    try {
      return Join(job, name, with_secret, timeout);
    } catch (...) {
      if (!secret_file.empty()) store::RemovePrivate(secret_file);
      throw;
    }
  }();
  // Every rank has read the secret once every rank is past comm_create.
  if (!secret_file.empty()) {
    std::vector<std::string> keys;
    for (uint32_t r = 0; r < size; ++r) keys.push_back(store::RankKey(r, name + "/created"));
    (void)job->store->Wait(keys, timeout);
    store::RemovePrivate(secret_file);
  }
  return comm;
}

std::shared_ptr<detail::CommState> Communicator::NewState(std::shared_ptr<Job> job,
                                                          std::string name,
                                                          const CommunicatorOptions& options,
                                                          std::chrono::milliseconds timeout) {
  const LaunchInfo& l = job->launch;
  auto state = std::make_shared<detail::CommState>();
  state->job = job;
  state->rank = l.rank;
  state->size = l.size;
  state->local_rank = l.local_rank;
  state->local_size = l.local_size;
  state->device = options.device >= 0 ? options.device : int32_t(l.local_rank);
  state->job_ranks.resize(l.size);
  for (uint32_t r = 0; r < l.size; ++r) state->job_ranks[r] = r;
  state->timeout = timeout;
  state->name = std::move(name);
  state->debug_detail = detail::DetailDebugEnabled();

  std::string spec = options.backend;
  if (spec.empty()) {
    if (const char* env = plexus::settings::Raw(plexus::settings::Id::kBackend)) spec = env;
  }
  state->config = options.config;
  const Status st = spec.empty() ? ChooseBackend(*job, state->name, timeout, &state->backend)
                                 : OpenBackend(spec, *job, &state->backend);
  if (!st.ok()) Throw(st);
  return state;
}

Communicator Communicator::Join(std::shared_ptr<Job> job, std::string name,
                                const CommunicatorOptions& options,
                                std::chrono::milliseconds timeout) {
  const LaunchInfo& l = job->launch;
  std::shared_ptr<detail::CommState> state = NewState(job, std::move(name), options, timeout);
  Status st;

  plexus_oob oob{job->store.get(), state->name + "/oob", l.rank, l.size, 0, {}};
  plexus_comm_config_v1 config{};
  config.struct_size = sizeof config;
  config.rank = l.rank;
  config.size = l.size;
  config.local_rank = l.local_rank;
  config.local_size = l.local_size;
  config.device = state->device;
  config.timeout_ms = timeout.count();
  config.name = state->name.c_str();
  config.oob = &oob;
  config.get_config = &detail::CommState::ConfigGetter;
  config.config_ctx = state.get();
  st = state->backend->CreateComm(config, &state->comm);
  if (!st.ok()) Throw(st, state->backend->name());

  // The rank hosting the store keeps it up until every rank is past its
  // out-of-band exchange: each marks itself done, the host waits for all.
  auto done = [&](uint32_t r) { return store::RankKey(r, state->name + "/created"); };
  if (job->has_rendezvous) st = job->store->Set(done(l.rank), Bytes{1}, timeout);
  if (st.ok() && job->server) {
    std::vector<std::string> keys;
    for (uint32_t r = 0; r < l.size; ++r) keys.push_back(done(r));
    st = job->store->Wait(keys, timeout);
  }
  if (!st.ok()) {
    state->backend->DestroyComm(std::exchange(state->comm, nullptr));
    Throw(st.WithContext("creating " + state->name));
  }
  Communicator comm(state);
  // Two levels across hosts where the layout calls for it (PLEXUS_HIERARCHY).
  // Its exchange and groups are not the user's collectives: PLEXUS_DEBUG's
  // checks and the stall reports' count start with the user's first (and
  // the groups, whose operations the host posts alike everywhere, go
  // unchecked).
  const bool debug_detail = std::exchange(state->debug_detail, false);
  st =
      detail::MakeTwoLevel(comm, job->local_address, l.local_rank, l.local_size, &state->two_level);
  state->debug_detail = debug_detail;
  if (!st.ok()) Throw(st.WithContext("creating " + state->name), state->backend->name());
  state->collectives_posted = 0;
  return comm;
}

Communicator::Communicator(std::shared_ptr<detail::CommState> state) : state_(std::move(state)) {
  if (state_ && !state_->recorder) state_->recorder = detail::NewRecorder(*state_);
}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

detail::CommState& Communicator::state() const {
  if (!state_) {
    throw Error(PLEXUS_ERR_INVALID_USAGE, "plexus", "use of a moved-from Communicator");
  }
  return *state_;
}

uint32_t Communicator::rank() const {
  return state().rank;
}
uint32_t Communicator::size() const {
  return state().size;
}
uint32_t Communicator::local_rank() const {
  return state().local_rank;
}
uint32_t Communicator::local_size() const {
  return state().local_size;
}
const std::string& Communicator::backend_name() const {
  return state().backend->name();
}
const std::string& Communicator::backend_version() const {
  return state().backend->version();
}
const std::string& Communicator::backend_path() const {
  return state().backend->path();
}
const plexus_capabilities& Communicator::capabilities() const {
  return state().backend->capabilities();
}
std::chrono::milliseconds Communicator::timeout() const {
  return state().timeout;
}
bool Communicator::supports(plexus_collective_t coll) const {
  return coll < 32 && (capabilities().collectives >> coll & 1u);
}

const char* Communicator::allreduce_scheme(uint64_t count, DType dtype) const {
  const auto& s = state();
  const bool two =
      s.two_level && s.two_level->Takes(PLEXUS_COLL_ALLREDUCE, count * ElementSize(dtype));
  return two ? "two-level" : "flat";
}

std::string Communicator::hierarchy() const {
  const auto& s = state();
  return s.two_level ? s.two_level->description() : "";
}

void Communicator::CheckSpan(bool ok, const char* what) {
  if (!ok) throw Error(PLEXUS_ERR_INVALID_ARGUMENT, "plexus", what);
}

Work Communicator::Start(const Status& posted, plexus_request* req, const char* what,
                         detail::PostedOp* collective) {
  auto& s = state();
  if (!posted.ok()) {
    if (collective && s.recorder) {
      // What this rank tried to post there (a mismatch shows in the dumps).
      collective->seq = s.collectives_posted + 1;
      s.recorder->Posted(collective, collective->seq, posted.code());
      s.recorder->Note(*collective, posted.code(), std::string(what) + ": " + posted.message());
      detail::DumpTraces("failure");
    }
    throw Error(posted.code(), s.backend->name(), posted.message());
  }
  detail::PostedOp op{};
  if (collective) {
    collective->seq = ++s.collectives_posted;
    if (s.recorder) s.recorder->Posted(collective, collective->seq, PLEXUS_OK);
    op = *collective;
  }
  Work work(state_, req, what, op);
  // Completion in posting order: not before a two-level operation posted earlier.
  if (s.last_host_op && s.last_host_op->Test() == PLEXUS_IN_PROGRESS) {
    work.after_ = s.last_host_op;
  } else {
    s.last_host_op.reset();
  }
  return work;
}

namespace {
plexus_dtype_t Code(DType t) {
  return static_cast<plexus_dtype_t>(t);
}
plexus_reduce_op_t Code(ReduceOp op) {
  return static_cast<plexus_reduce_op_t>(op);
}

// The byte size of count elements (per rank, for blocks ranks) must be the
// size an object can have: a backend that multiplied without checking would
// wrap around and then read or write far past the buffers (seen: alltoall of
// 2^62 int8 on 4 ranks accepted, then SIGSEGV).
Status CheckBytes(const char* what, uint64_t count, plexus_dtype_t dtype, uint64_t blocks) {
  const uint64_t es = algos::DtypeSize(dtype);
  if (es == 0) return Status::Ok();  // an unknown dtype: the backend call says so
  uint64_t bytes = 0;
  if (!__builtin_mul_overflow(count, es, &bytes) &&
      !__builtin_mul_overflow(bytes, blocks, &bytes) && bytes <= uint64_t(PTRDIFF_MAX)) {
    return Status::Ok();
  }
  return Status::InvalidArgument(
      std::string(what) + ": count " + std::to_string(count) + " x " + std::to_string(es) +
      " bytes (" + algos::DtypeName(dtype) + ")" +
      (blocks > 1 ? " x " + std::to_string(blocks) + " ranks" : std::string()) +
      " is more memory than a process can address (2^63 bytes or more)");
}

// What every collective checks before its backend sees it: the byte size
// (blocks ranks' worth), and in PLEXUS_DEBUG=detail mode the fingerprints of
// all ranks. guard must be held for the whole post.
Status Prepare(detail::CommState& s, const detail::PostingGuard& guard, const char* what,
               plexus_collective_t coll, uint64_t count, plexus_dtype_t dtype,
               plexus_reduce_op_t op, uint32_t root, uint64_t blocks, detail::PostedOp* posted) {
  *posted = detail::PostedOp{0, count, coll, dtype, op, root};
  if (s.recorder) posted->posted_ticks = detail::TraceTicks();
  Status st = guard.status();
  if (st.ok()) st = CheckBytes(what, count, dtype, blocks);
  if (st.ok() && s.debug_detail) {
    detail::Fingerprint f;
    f.count = count;
    f.coll = coll;
    f.dtype = dtype;
    f.op = op;
    f.root = root;
    st = detail::CheckFingerprints(s, f);
  }
  return st;
}

// Whether a collective whose largest buffer is bytes goes in two levels
// (host memory only).
bool GoesTwoLevel(const detail::CommState& s, plexus_collective_t coll, uint64_t bytes,
                  const plexus_placement* where) {
  return s.two_level && (!where || where->memory_type == PLEXUS_MEMORY_HOST) &&
         s.two_level->Takes(coll, bytes);
}

// Posts call in two levels: first what the backend would have checked had
// it gone flat (its capabilities, then the ABI's rules for the arguments,
// the kit's CheckCall, which every backend built on the kit applies); the
// groups' own checks would come too late, on the two-level thread.
Status PostTwoLevel(detail::CommState& s, const abi::Call& call, detail::PostedOp* posted,
                    std::shared_ptr<detail::HostOp>* op) {
  Status st = s.backend->CheckSupported(call.coll, call.dtype, call.op, call.placement);
  if (!st.ok()) return st;
  const abi::Status rules = abi::CheckCall(call, abi::CommShape{s.rank, s.size});
  if (!rules.ok()) return Status(rules.code, rules.message);
  // Completion in posting order: the backend completes its operations in
  // order, so an empty allreduce posted there now completes after every flat
  // one posted before this (a backend built on the kit does it locally).
  plexus_request* earlier = nullptr;
  st = s.backend->Post(
      s.comm, {PLEXUS_COLL_ALLREDUCE, nullptr, nullptr, 0, PLEXUS_DTYPE_FLOAT32, PLEXUS_OP_SUM},
      &earlier);
  if (!st.ok()) return st;
  posted->seq = ++s.collectives_posted;
  if (s.recorder) s.recorder->Posted(posted, posted->seq, PLEXUS_OK);
  *op = s.two_level->Post(call, *posted, earlier);
  return Status::Ok();
}

Status CheckRank(uint32_t rank, uint32_t size, const char* what) {
  if (rank < size) return Status::Ok();
  return Status::InvalidArgument(std::string(what) + " " + std::to_string(rank) +
                                 " is not a rank of a communicator of size " +
                                 std::to_string(size));
}
}  // namespace

namespace {

// What Communicator::Post checks before the backend sees call: its root or
// peer, its byte size (blocks ranks' worth) and, for the collectives of the
// communicator's sequence, the ranks' fingerprints (Prepare).
Status CheckPost(detail::CommState& s, const detail::PostingGuard& guard, const abi::Call& call,
                 const abi::Traits& traits, const char* what, uint64_t blocks,
                 detail::PostedOp* posted) {
  if (traits.root != abi::Root::kNone) {
    Status st = CheckRank(
        call.root, s.size,
        (std::string(what) + (traits.root == abi::Root::kPeer ? " peer" : " root")).c_str());
    if (!st.ok()) return st;
  }
  if (traits.sequenced) {
    // A v-collective's count differs between ranks by design: 0 in the fingerprint.
    const uint64_t count = traits.layout == abi::Layout::kPerRankCounts ? 0 : call.count;
    return Prepare(s, guard, what, call.coll, count, call.dtype, call.op, call.root, blocks,
                   posted);
  }
  Status st = guard.status();
  if (!st.ok()) return st;
  return CheckBytes(what, call.count, call.dtype, blocks);
}

}  // namespace

Work Communicator::Post(const abi::Call& call) {
  auto& s = state();
  const abi::Traits traits = abi::TraitsOf(call.coll);
  const char* what = abi::CollectiveName(call.coll);
  plexus_request* req = nullptr;
  detail::PostedOp posted;
  detail::PostingGuard guard(s);
  const uint64_t blocks = traits.send_per_rank || traits.recv_per_rank ? s.size : 1;
  detail::PostedOp* sequenced = traits.sequenced ? &posted : nullptr;
  const Status checked = CheckPost(s, guard, call, traits, what, blocks, &posted);
  if (!checked.ok()) return Start(checked, nullptr, what, sequenced);
  if (traits.two_level &&
      GoesTwoLevel(s, call.coll, call.count * blocks * algos::DtypeSize(call.dtype),
                   call.placement)) {
    std::shared_ptr<detail::HostOp> two;
    const Status st = PostTwoLevel(s, call, &posted, &two);
    if (!st.ok()) throw Error(st.code(), s.backend->name(), st.message());
    s.last_host_op = two;
    return Work(state_, std::move(two), what, posted);
  }
  const Status st = s.backend->Post(s.comm, call, &req);
  return Start(st, req, what, sequenced);
}

Work Communicator::allreduce(const void* send, void* recv, uint64_t count, DType dtype, ReduceOp op,
                             const plexus_placement* where) {
  return Post({PLEXUS_COLL_ALLREDUCE, send, recv, count, Code(dtype), Code(op), 0, where});
}

Work Communicator::broadcast(void* buf, uint64_t count, DType dtype, uint32_t root,
                             const plexus_placement* where) {
  return Post({PLEXUS_COLL_BROADCAST, nullptr, buf, count, Code(dtype), 0, root, where});
}

Work Communicator::reduce(const void* send, void* recv, uint64_t count, DType dtype, ReduceOp op,
                          uint32_t root, const plexus_placement* where) {
  return Post({PLEXUS_COLL_REDUCE, send, recv, count, Code(dtype), Code(op), root, where});
}

Work Communicator::allgather(const void* send, void* recv, uint64_t count, DType dtype,
                             const plexus_placement* where) {
  return Post({PLEXUS_COLL_ALLGATHER, send, recv, count, Code(dtype), 0, 0, where});
}

Work Communicator::reduce_scatter(const void* send, void* recv, uint64_t count, DType dtype,
                                  ReduceOp op, const plexus_placement* where) {
  return Post({PLEXUS_COLL_REDUCE_SCATTER, send, recv, count, Code(dtype), Code(op), 0, where});
}

Work Communicator::alltoall(const void* send, void* recv, uint64_t count, DType dtype,
                            const plexus_placement* where) {
  return Post({PLEXUS_COLL_ALLTOALL, send, recv, count, Code(dtype), 0, 0, where});
}

Work Communicator::send(const void* buf, uint64_t count, DType dtype, uint32_t peer,
                        const plexus_placement* where) {
  return Post({PLEXUS_COLL_SEND, buf, nullptr, count, Code(dtype), 0, peer, where});
}

Work Communicator::recv(void* buf, uint64_t count, DType dtype, uint32_t peer,
                        const plexus_placement* where) {
  return Post({PLEXUS_COLL_RECV, nullptr, buf, count, Code(dtype), 0, peer, where});
}

Work Communicator::barrier() {
  return Post({PLEXUS_COLL_BARRIER});
}

Work Communicator::gather(const void* send, void* recv, uint64_t count, DType dtype, uint32_t root,
                          const plexus_placement* where) {
  return Post({PLEXUS_COLL_GATHER, send, recv, count, Code(dtype), 0, root, where});
}

Work Communicator::scatter(const void* send, void* recv, uint64_t count, DType dtype, uint32_t root,
                           const plexus_placement* where) {
  return Post({PLEXUS_COLL_SCATTER, send, recv, count, Code(dtype), 0, root, where});
}

namespace {
// A per-rank array of a v-collective must have one entry per rank.
Status CheckPerRank(std::span<const uint64_t> a, uint32_t size, const char* what) {
  if (a.size() == size) return Status::Ok();
  return Status::InvalidArgument(std::string(what) + " has " + std::to_string(a.size()) +
                                 " entries; the communicator has " + std::to_string(size) +
                                 " ranks");
}
}  // namespace

Work Communicator::Refused(const Status& st, plexus_collective_t coll) {
  detail::PostedOp attempted;
  attempted.coll = coll;
  return Start(st, nullptr, abi::CollectiveName(coll), &attempted);
}

Work Communicator::allgatherv(const void* send, uint64_t send_count, void* recv,
                              std::span<const uint64_t> recv_counts,
                              std::span<const uint64_t> displs, DType dtype,
                              const plexus_placement* where) {
  Status st = CheckPerRank(recv_counts, size(), "allgatherv recv_counts");
  if (st.ok()) st = CheckPerRank(displs, size(), "allgatherv displs");
  if (!st.ok()) return Refused(st, PLEXUS_COLL_ALLGATHERV);
  abi::Call call{PLEXUS_COLL_ALLGATHERV, send, recv, send_count, Code(dtype), 0, 0, where};
  call.recvcounts = recv_counts.data();
  call.rdispls = displs.data();
  return Post(call);
}

Work Communicator::alltoallv(const void* send, std::span<const uint64_t> send_counts,
                             std::span<const uint64_t> send_displs, void* recv,
                             std::span<const uint64_t> recv_counts,
                             std::span<const uint64_t> recv_displs, DType dtype,
                             const plexus_placement* where) {
  Status st = CheckPerRank(send_counts, size(), "alltoallv send_counts");
  if (st.ok()) st = CheckPerRank(send_displs, size(), "alltoallv send_displs");
  if (st.ok()) st = CheckPerRank(recv_counts, size(), "alltoallv recv_counts");
  if (st.ok()) st = CheckPerRank(recv_displs, size(), "alltoallv recv_displs");
  if (!st.ok()) return Refused(st, PLEXUS_COLL_ALLTOALLV);
  abi::Call call{PLEXUS_COLL_ALLTOALLV, send, recv, 0, Code(dtype), 0, 0, where};
  call.sendcounts = send_counts.data();
  call.sdispls = send_displs.data();
  call.recvcounts = recv_counts.data();
  call.rdispls = recv_displs.data();
  return Post(call);
}

Work Communicator::allreduce_coalesced(std::span<const void* const> sends,
                                       std::span<void* const> recvs,
                                       std::span<const uint64_t> counts, DType dtype, ReduceOp op,
                                       const plexus_placement* where) {
  Status st;
  if (sends.size() != recvs.size() || sends.size() != counts.size()) {
    st = Status::InvalidArgument("allreduce_coalesced: " + std::to_string(sends.size()) +
                                 " send buffers, " + std::to_string(recvs.size()) +
                                 " recv buffers and " + std::to_string(counts.size()) +
                                 " counts (they must be as many)");
  } else if (sends.empty() || sends.size() > UINT32_MAX) {
    st = Status::InvalidArgument("allreduce_coalesced: " + std::to_string(sends.size()) +
                                 " buffers (give 1 to 2^32 - 1)");
  }
  if (!st.ok()) return Refused(st, PLEXUS_COLL_ALLREDUCE_COALESCED);
  abi::Call call{PLEXUS_COLL_ALLREDUCE_COALESCED, nullptr, nullptr, 0, Code(dtype), Code(op), 0,
                 where};
  call.sendbufs = sends.data();
  call.recvbufs = recvs.data();
  call.counts = counts.data();
  call.nbuffers = uint32_t(sends.size());
  for (uint64_t c : counts) call.count += c;  // (the backend checks it against overflow)
  return Post(call);
}

std::vector<uint64_t> Communicator::PackedDispls(std::span<const uint64_t> counts, uint64_t total,
                                                 const char* what) const {
  Status st = CheckPerRank(counts, size(), what);
  if (!st.ok()) throw Error(st.code(), "plexus", st.message());
  std::vector<uint64_t> displs(counts.size());
  uint64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = at;
    if (__builtin_add_overflow(at, counts[i], &at)) at = UINT64_MAX;
  }
  if (at != total) {
    throw Error(PLEXUS_ERR_INVALID_ARGUMENT, "plexus",
                std::string(what) + ": the counts add up to " + std::to_string(at) +
                    " elements but the buffer holds " + std::to_string(total));
  }
  return displs;
}

void Communicator::abort() {
  auto& s = state();
  if (s.two_level) s.two_level->Abort();
  Status st = s.backend->AbortComm(s.comm);
  if (!st.ok()) throw Error(st.code(), s.backend->name(), st.message());
}

}  // namespace plexus
