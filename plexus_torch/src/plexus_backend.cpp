// PlexusBackend's life: creation (through the c10d store, or the world
// communicator from Plexus's launch discovery), the registries of the world
// communicator and of the live backends, release at exit, and what every
// operation's work starts from. The operations are in collectives_*.cpp.
#include "plexus_backend.hpp"

#include <c10/util/Exception.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "c10d_store.hpp"
#include "plexus/error.hpp"
#include "plexus/settings/environment.hpp"

namespace plexus_torch {

using detail::BackendError;
using detail::C10dStore;

namespace {

// The world communicator plexus_torch.init_process_group() made, waiting
// for the creator call of the default group.
std::mutex g_world_mutex;
std::optional<plexus::Communicator> g_world;

// Every live backend, for ReleaseAll.
std::mutex g_live_mutex;
std::vector<PlexusBackend*> g_live;

std::chrono::milliseconds TimeoutFor(std::chrono::milliseconds torch_timeout) {
  // PLEXUS_TIMEOUT, when set, is what the user asked of Plexus; otherwise
  // the group's timeout from torch (init_process_group(timeout=...)).
  const char* v = plexus::settings::Raw(plexus::settings::Id::kTimeout);
  if (v && *v) return std::chrono::milliseconds(0);  // from_store/from_env read it
  return torch_timeout;
}

}  // namespace

c10::intrusive_ptr<PlexusBackend> PlexusBackend::Create(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout) {
  plexus::CommunicatorOptions options;
  options.timeout = TimeoutFor(timeout);
  {
    std::lock_guard<std::mutex> lock(g_world_mutex);
    if (g_world && int(g_world->rank()) == rank && int(g_world->size()) == size) {
      plexus::Communicator world = std::move(*g_world);
      g_world.reset();
      const auto t = world.timeout();
      return c10::make_intrusive<PlexusBackend>(std::move(world), t);
    }
  }
  TORCH_CHECK(store, "plexus: no store to meet the other ranks through");
  try {
    plexus::Communicator comm = plexus::Communicator::from_store(
        std::make_shared<C10dStore>(store), uint32_t(rank), uint32_t(size), options);
    const auto t = comm.timeout();
    return c10::make_intrusive<PlexusBackend>(std::move(comm), t);
  } catch (const plexus::Error& e) {
    std::rethrow_exception(BackendError(e.what()));
  }
}

std::tuple<int, int, int> PlexusBackend::PrepareWorldFromEnv() {
  std::lock_guard<std::mutex> lock(g_world_mutex);
  if (!g_world) {
    try {
      g_world.emplace(plexus::Communicator::from_env());
    } catch (const plexus::Error& e) {
      std::rethrow_exception(BackendError(e.what()));
    }
  }
  return {int(g_world->rank()), int(g_world->size()), int(g_world->local_rank())};
}

std::string PlexusBackend::BroadcastFromRankZero(const std::string& bytes) {
  std::lock_guard<std::mutex> lock(g_world_mutex);
  TORCH_CHECK(g_world, "plexus: no world communicator (call plexus_torch.init_process_group)");
  try {
    uint64_t n = bytes.size();
    g_world->broadcast(&n, 1, plexus::DType::UInt64, 0).wait();
    std::string out = g_world->rank() == 0 ? bytes : std::string(n, '\0');
    g_world->broadcast(out.data(), n, plexus::DType::UInt8, 0).wait();
    return out;
  } catch (const plexus::Error& e) {
    std::rethrow_exception(BackendError(e.what()));
  }
}

PlexusBackend::PlexusBackend(plexus::Communicator comm, std::chrono::milliseconds timeout)
    : c10d::Backend(int(comm.rank()), int(comm.size())),
      comm_(std::move(comm)),
      timeout_(timeout),
      completer_(std::make_shared<CompletionThread>(timeout)) {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  g_live.push_back(this);
}

PlexusBackend::~PlexusBackend() {
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    std::erase(g_live, this);
  }
  completer_->Stop();
}

void PlexusBackend::ReleaseAll() {
  // First every completion thread finishes what it holds (the works keep
  // their communicators alive, so releasing those first would not end them
  // sooner), with nothing posting through a communicator being moved out
  // from under it; a future's callbacks may post.
  std::chrono::milliseconds bound{0};
  if (int running = CompletionThread::StopAllAndWait(&bound); running > 0) {
    std::fprintf(stderr,
                 "plexus_torch: at exit, %d completion thread(s) still running a future's "
                 "callback after %lld ms; Python may end them in the middle\n",
                 running, static_cast<long long>(bound.count()));
  }
  std::vector<plexus::Communicator> released;
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    for (PlexusBackend* b : g_live) released.push_back(std::move(b->comm_));
  }
  {
    std::lock_guard<std::mutex> lock(g_world_mutex);
    if (g_world) released.push_back(std::move(*g_world));
    g_world.reset();
  }
  released.clear();  // each waits (bounded) for what it still runs
}

void PlexusBackend::Absorb(PlexusWork& work, const c10::intrusive_ptr<c10d::Work>& part) {
  auto& one = static_cast<PlexusWork&>(*part);
  --seq_;  // the parts are one operation of the sequence
  for (auto& p : one.posted) work.posted.push_back(std::move(p));
  for (auto& f : one.finishers) work.finishers.push_back(std::move(f));
  for (auto& k : one.keep) work.keep.push_back(std::move(k));
  one.posted.clear();
  one.finishers.clear();
}

c10::intrusive_ptr<PlexusWork> PlexusBackend::NewWork(c10d::OpType type, OpLabel what,
                                                      std::vector<at::Tensor> outputs) {
  ++seq_;
  return c10::make_intrusive<PlexusWork>(getRank(), type, what, std::move(outputs),
                                         completer_, timeout_);
}

void PlexusBackend::abort() {
  comm_.abort();
}

void PlexusBackend::shutdown() {
  completer_->Stop();
}

}  // namespace plexus_torch
