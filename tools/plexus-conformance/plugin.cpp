#include "plugin.hpp"

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <mutex>

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
  const char* value = key ? std::getenv(key) : nullptr;
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

bool Plugin::has_request_error() const {
  return table().abi_minor >= 1 &&
         plugin_struct_size() >= PLEXUS_CONFORMANCE_SLOT_END(request_error) &&
         table().request_error != nullptr;
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

int32_t Plugin::CreateComm(const LaunchInfo& launch, RendezvousStore* store,
                           const std::string& name, int64_t timeout_ms, plexus_comm** comm,
                           std::string* error) {
  plexus_oob oob{store, name + "/oob", launch.rank, launch.size, 0, {}};
  plexus_comm_config_v1 config{};
  config.struct_size = sizeof config;
  config.rank = launch.rank;
  config.size = launch.size;
  config.local_rank = launch.local_rank;
  config.local_size = launch.local_size;
  config.device = int32_t(launch.local_rank);
  config.timeout_ms = timeout_ms;
  config.name = name.c_str();
  config.oob = &oob;
  config.get_config = &EnvConfig;
  config.config_ctx = nullptr;
  char buf[2048] = "";
  *comm = nullptr;
  SetPhase("backend comm_create()");
  const int32_t rc = calls().comm_create(ctx_, &config, comm, buf, sizeof buf);
  buf[sizeof buf - 1] = '\0';
  *error = buf;
  return rc;
}

}  // namespace plexus::conformance
