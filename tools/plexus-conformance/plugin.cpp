#include "plugin.hpp"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "data.hpp"
#include "plexus/abi/collectives.hpp"
#include "plexus/settings/environment.hpp"
#include "rank_record.hpp"

namespace plexus::conformance {
namespace {

// The log the services table had (HostServices' own), and whether to call it.
std::atomic<void (*)(void*, int32_t, const char*)> g_host_log{nullptr};
std::atomic<bool> g_forward_log{false};
std::mutex g_last_log_mutex;
std::string g_last_log;  // the backend's last error/warning line, for a failed init

// The 1.1 per-communicator configuration getter: the environment, like the
// host's when the application set nothing for the communicator.
int64_t EnvConfig(void*, const char* key, char* buf, size_t len) {
  const char* value = key ? plexus::settings::RawByName(key) : nullptr;
  if (!value) return -1;
  const size_t n = std::strlen(value);
  if (buf && len > 0) {
    const size_t m = n < len - 1 ? n : len - 1;
    std::memcpy(buf, value, m);
    buf[m] = '\0';
  }
  return int64_t(n);
}

}  // namespace

void Plugin::FilteredLog(void* ctx, int32_t level, const char* message) {
  if (message && level <= PLEXUS_LOG_WARN) {
    std::lock_guard<std::mutex> lock(g_last_log_mutex);
    g_last_log = message;
  }
  if (g_forward_log.load()) {
    if (auto log = g_host_log.load()) log(ctx, level, message);
  }
}

Status Plugin::Open(const std::string& spec, const std::string& local_address, bool verbose,
                    std::unique_ptr<Plugin>* out) {
  std::unique_ptr<Plugin> p(new Plugin);
  Status st;
  {
    // dlopen runs the plugin's constructors, then the entry function runs.
    CallInFlight call("dlopen and " PLEXUS_BACKEND_ENTRY_V1 "() (the host's loader)");
    st = ResolveBackend(spec, &p->lib_);
  }
  if (!st.ok()) return st;
  p->calls_ = std::make_unique<TracedCalls>(&p->lib_->table());
  p->services_ =
      std::make_unique<HostServices>(p->lib_->table().name ? p->lib_->table().name : "?",
                                     local_address, std::map<std::string, std::string>{});
  p->host_ = *p->services_->table();
  g_host_log = p->host_.log;
  g_forward_log = verbose;
  p->host_.log = &Plugin::FilteredLog;

  plexus_backend_ctx* ctx = nullptr;
  const int32_t rc = p->calls().init(&p->host_, &ctx);
  if (rc != PLEXUS_OK || !ctx) {
    std::string why;
    {
      std::lock_guard<std::mutex> lock(g_last_log_mutex);
      why = g_last_log;
    }
    return Status(rc != PLEXUS_OK ? rc : PLEXUS_ERR_INTERNAL,
                  "init() of " + p->path() + " returned " + StatusName(rc) +
                      (ctx               ? ""
                       : rc == PLEXUS_OK ? " with a NULL context"
                                         : "") +
                      (why.empty() ? std::string(" (the backend logged nothing)") : ": " + why));
  }
  p->ctx_ = ctx;
  p->caps_.struct_size = sizeof p->caps_;
  p->caps_status_ = p->calls().get_capabilities(ctx, &p->caps_);
  p->raw_caps_ = p->caps_;
  // The bits of collectives newer than the table's minor (no slot for them).
  for (plexus_collective_t coll = 0; coll < abi::kCollectiveCount; ++coll) {
    if (abi::MinorOf(coll) > p->table().abi_minor) p->caps_.collectives &= ~(1u << coll);
  }
  *out = std::move(p);
  return Status::Ok();
}

Plugin::~Plugin() {
  if (ctx_ && !leaked_) calls().finalize(ctx_);
  // A leaked request may still be written by a backend thread: keep the
  // library mapped, so that thread does not run unmapped code at exit.
  // Its host services stay too: a backend thread may still log.
  if (leaked_) {
    (void)lib_.release();
    (void)services_.release();
  }
}

bool Plugin::has_request_notify() const {
  return table().abi_minor >= 5 &&
         plugin_struct_size() >= PLEXUS_CONFORMANCE_SLOT_END(request_notify) &&
         table().request_notify != nullptr;
}

bool Plugin::has_request_error() const {
  return table().abi_minor >= 1 &&
         plugin_struct_size() >= PLEXUS_CONFORMANCE_SLOT_END(request_error) &&
         table().request_error != nullptr;
}

namespace {

// A slot added in 1.minor is the plugin's only if its table says 1.minor or
// later and is long enough; the loader's copy has NULL past a short table,
// but an older table may be longer than its own slots and hold anything there.
std::string MissingSlot(const Plugin& p, const char* slot, uint32_t minor, size_t end) {
  const auto& t = p.table();
  if (t.abi_minor < minor) {
    return "backend is ABI " + std::to_string(t.abi_major) + "." + std::to_string(t.abi_minor) +
           ": no " + slot;
  }
  if (p.plugin_struct_size() < end) {
    return "backend's table (struct_size " + std::to_string(p.plugin_struct_size()) +
           ") ends before the 1." + std::to_string(minor) + " slot " + slot;
  }
  return {};
}

}  // namespace

std::string Plugin::NoSlotReason(plexus_collective_t coll) const {
  const char* name = CollectiveName(coll);
  if (coll >= abi::kCollectiveCount) return "unknown collective code " + std::to_string(coll);
  if (std::string why = MissingSlot(*this, name, abi::MinorOf(coll), abi::SlotEnd(coll));
      !why.empty()) {
    return why;
  }
  if (!abi::SlotOf(table(), coll)) return std::string("the ") + name + " slot is NULL";
  return {};
}

bool Plugin::HasCollective(plexus_collective_t coll) const {
  return NoSlotReason(coll).empty();
}

std::string Plugin::NoCommSplitReason() const {
  if (std::string why = MissingSlot(*this, "comm_split", 2, PLEXUS_CONFORMANCE_SLOT_END(comm_split));
      !why.empty()) {
    return why;
  }
  if (!table().comm_split) return "the comm_split slot is NULL (optional)";
  return {};
}

bool Plugin::has_comm_split() const {
  return NoCommSplitReason().empty();
}

std::string Plugin::NoMemAllocReason() const {
  const auto& t = table();
  if (t.abi_minor < 3) {
    return "backend is ABI " + std::to_string(t.abi_major) + "." + std::to_string(t.abi_minor) +
           ": no mem_alloc";
  }
  if (plugin_struct_size() < PLEXUS_CONFORMANCE_SLOT_END(mem_free)) {
    return "backend's table (struct_size " + std::to_string(plugin_struct_size()) +
           ") ends before the 1.3 slots mem_alloc and mem_free";
  }
  if (!t.mem_alloc && !t.mem_free) return "the mem_alloc and mem_free slots are NULL (optional)";
  if (!t.mem_alloc || !t.mem_free) {
    return std::string("only ") + (t.mem_alloc ? "mem_alloc" : "mem_free") +
           " is set: the ABI wants both or neither";
  }
  return {};
}

std::string Plugin::LastError(plexus_comm* comm) const {
  char buf[2048] = "";
  calls().comm_last_error(comm, buf, sizeof buf);
  buf[sizeof buf - 1] = '\0';
  return buf;
}

std::string Plugin::RequestError(plexus_request* req) const {
  if (!has_request_error()) return {};
  char buf[2048] = "";
  calls().request_error(req, buf, sizeof buf);
  buf[sizeof buf - 1] = '\0';
  return buf;
}

namespace {

// A communicator's configuration as the host builds it (Communicator::from_env).
plexus_comm_config_v1 ConfigOf(const GroupShape& shape, const std::string& name, int64_t timeout_ms,
                               plexus_oob* oob) {
  plexus_comm_config_v1 config{};
  config.struct_size = sizeof config;
  config.rank = shape.rank;
  config.size = shape.size;
  config.local_rank = shape.local_rank;
  config.local_size = shape.local_size;
  config.device = shape.device;
  config.timeout_ms = timeout_ms;
  config.name = name.c_str();
  config.oob = oob;
  config.get_config = &EnvConfig;
  config.config_ctx = nullptr;
  return config;
}

}  // namespace

int32_t Plugin::CreateComm(const LaunchInfo& launch, RendezvousStore* store,
                           const std::string& name, int64_t timeout_ms, plexus_comm** comm,
                           std::string* error) {
  GroupShape whole;
  whole.rank = launch.rank;
  whole.size = launch.size;
  whole.local_rank = launch.local_rank;
  whole.local_size = launch.local_size;
  whole.device = int32_t(launch.local_rank);
  plexus_oob oob{store, name + "/oob", launch.rank, launch.size, 0, {}};
  const plexus_comm_config_v1 config = ConfigOf(whole, name, timeout_ms, &oob);
  char buf[2048] = "";
  *comm = nullptr;
  SetPhase("backend comm_create()");
  const int32_t rc = calls().comm_create(ctx_, &config, comm, buf, sizeof buf);
  buf[sizeof buf - 1] = '\0';
  *error = buf;
  return rc;
}

int32_t Plugin::CreateGroupComm(const GroupShape& shape, RendezvousStore* store,
                                const std::string& name, int64_t timeout_ms, plexus_comm** comm,
                                std::string* error) {
  plexus_oob oob{store, name + "/oob", shape.rank, shape.size, 0, shape.members};
  const plexus_comm_config_v1 config = ConfigOf(shape, name, timeout_ms, &oob);
  char buf[2048] = "";
  *comm = nullptr;
  SetPhase("backend comm_create() of a group");
  const int32_t rc = calls().comm_create(ctx_, &config, comm, buf, sizeof buf);
  buf[sizeof buf - 1] = '\0';
  *error = buf;
  return rc;
}

int32_t Plugin::SplitComm(plexus_comm* parent, uint32_t color, uint32_t key,
                          const GroupShape* shape, RendezvousStore* store, const std::string& name,
                          int64_t timeout_ms, plexus_comm** comm, std::string* error) {
  char buf[2048] = "";
  *comm = nullptr;
  SetPhase("backend comm_split()");
  int32_t rc;
  if (shape) {
    plexus_oob oob{store, name + "/oob", shape->rank, shape->size, 0, shape->members};
    const plexus_comm_config_v1 config = ConfigOf(*shape, name, timeout_ms, &oob);
    rc = calls().comm_split(parent, color, key, &config, comm, buf, sizeof buf);
  } else {
    rc = calls().comm_split(parent, color, key, nullptr, comm, buf, sizeof buf);
  }
  buf[sizeof buf - 1] = '\0';
  *error = buf;
  return rc;
}

}  // namespace plexus::conformance
