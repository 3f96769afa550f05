// Backend: a loaded and initialised plugin. This is the ONE place in the host
// that calls through a plugin's function pointers (like SQLite's os.c): it
// checks that a slot exists and that the capabilities allow the call, turns
// every returned status into a Status carrying the backend's error text,
// refuses statuses the ABI does not allow (a positive value from anything but
// test() is never taken as success), and is where tracing hooks in
// (PLEXUS_LOG_LEVEL=trace logs every call with its arguments and result).
//
// Thread safety: the collective, request and abort methods may be called from
// any thread the backend's thread_level allows; Open and the destructor from
// one thread.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "host_services.hpp"
#include "plexus/abi/call.hpp"
#include "plexus/backend.h"
#include "plexus/status.hpp"
#include "plugin_loader.hpp"

namespace plexus {

class Backend {
 public:
  // Initialises lib's backend with the given host services; checks that the
  // capabilities agree with the table's slots.
  static Status Open(std::unique_ptr<LoadedLibrary> lib, std::unique_ptr<HostServices> host,
                     std::shared_ptr<Backend>* out);
  ~Backend();  // finalize, then dlclose

  // The table's name and version with control characters escaped.
  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::string& path() const { return lib_->path(); }
  const plexus_capabilities& capabilities() const { return caps_; }
  uint16_t abi_minor() const { return lib_->table().abi_minor; }

  // comm_create; on failure the status carries the backend's reason.
  Status CreateComm(const plexus_comm_config_v1& config, plexus_comm** comm);
  void DestroyComm(plexus_comm* comm);
  Status AbortComm(plexus_comm* comm);

  // Request calls return the ABI status, normalised: Test() returns
  // PLEXUS_OK, PLEXUS_IN_PROGRESS or a negative error; Wait() returns
  // PLEXUS_OK, a negative error, or PLEXUS_ERR_TIMEOUT while still pending (a
  // positive value from the backend's wait() counts as still pending).
  int32_t Test(plexus_request* req);
  int32_t Wait(plexus_request* req, int64_t timeout_ms);
  int32_t FreeRequest(plexus_request* req);
  // Turns a failed status into a Status with the backend's message: the
  // request's own (request_error, ABI 1.1) when req is given and the backend
  // has it, else the communicator's last error.
  Status Describe(plexus_comm* comm, int32_t code, const std::string& what,
                  plexus_request* req = nullptr);

  // Posts call (any collective of the list, abi/collectives.def) through
  // the plugin's slot. Refused with UNSUPPORTED, naming backend, collective,
  // dtype and memory type, when the slot is missing or the capabilities say
  // no. The call's arrays are borrowed for the post only. *req is set only
  // on success.
  Status Post(plexus_comm* comm, const abi::Call& call, plexus_request** req);

  // Whether the backend splits natively (comm_split, ABI 1.2).
  bool HasCommSplit() const { return t_->comm_split != nullptr; }
  // comm_split; config is NULL for PLEXUS_SPLIT_NO_COLOR. On failure the
  // status carries the backend's reason.
  Status SplitComm(plexus_comm* parent, uint32_t color, uint32_t key,
                   const plexus_comm_config_v1* config, plexus_comm** comm);

  // Shared buffers (mem_alloc and mem_free, ABI 1.3): whether the backend
  // has both, and the calls. On failure the status carries the backend's
  // reason; *p is set only on success.
  bool HasMemAlloc() const;
  // request_notify (ABI 1.5): whether the backend has it, and the call
  // (UNSUPPORTED without it).
  bool HasNotify() const;
  int32_t Notify(plexus_request* req, void (*done)(void* arg, int32_t status), void* arg);
  Status MemAlloc(plexus_comm* comm, uint64_t bytes, void** p);
  Status MemFree(plexus_comm* comm, void* p);

  // Whether the capabilities allow coll on dtype (with op, 0 for none) in memory.
  Status CheckSupported(plexus_collective_t coll, plexus_dtype_t dtype, plexus_reduce_op_t op,
                        const plexus_placement* where) const;

 private:
  Backend() = default;
  Status Posted(plexus_comm* comm, int32_t code, plexus_collective_t coll, plexus_request** req);
  // Logs once per backend that it broke the ABI's status rules.
  void ComplainOnce(const std::string& what);

  std::unique_ptr<LoadedLibrary> lib_;
  std::unique_ptr<HostServices> host_;
  const plexus_backend_v1* t_ = nullptr;  // == &lib_->table()
  plexus_backend_ctx* ctx_ = nullptr;
  plexus_capabilities caps_{};
  std::string name_;
  std::string version_;
  std::atomic<bool> complained_{false};
};

// Loads the plugin at path in a CHILD process and runs its entry function,
// init, get_capabilities and finalize there, so that a plugin that crashes
// or hangs in them takes down the child, not the caller. Ok when the child
// got through; otherwise a status naming the plugin, the stage (entry, init,
// ...) and the signal, or what the in-child load reported. For plexus-info
// and automatic selection, which try plugins the user did not name. BLOCKS up
// to timeout (then kills the child and says it hung).
Status ProbeInChild(const std::string& path, std::chrono::milliseconds timeout);

// text with control characters shown as \xNN and cut after max_chars, for
// names and strings that come from a plugin and go to a terminal or log.
std::string PrintableText(const char* text, size_t max_chars = 128);

}  // namespace plexus
