// The backend under test, loaded and initialised the way the host does it.
//
// The suite uses the host's own loader (ResolveBackend: the same search path
// and table validation as PLEXUS_BACKEND) and the host's own services
// (HostServices: log, configuration, out-of-band exchange over the
// rendezvous store), so a plugin is tested in the environment it will run
// in. What it does NOT use is the host's wrapper of the table
// (core/src/plugins/backend_calls.*): every check calls the plugin's function
// pointers itself; see main.cpp for why.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "plexus/backend.h"
#include "plexus/launch_env.hpp"
#include "plexus/rendezvous_store.hpp"
#include "plexus/status.hpp"
#include "plugins/host_services.hpp"
#include "plugins/plugin_loader.hpp"
#include "traced_calls.hpp"

namespace plexus::conformance {

// One rank's view of a group: its rank and size in the group, the group's
// ranks in the job (members[rank] is this process), and how many of them
// share this host (local_rank counts those before it in group order).
struct GroupShape {
  uint32_t rank = 0;
  uint32_t size = 1;
  uint32_t local_rank = 0;
  uint32_t local_size = 1;
  int32_t device = -1;  // the process's device, whatever the communicator
  std::vector<uint32_t> members;
};

class Plugin {
 public:
  // Resolves spec (a name or a path), loads it and calls init(). With
  // verbose false the backend's log lines are kept from stderr (the failure
  // checks provoke errors on purpose); the last one still explains a failed
  // init.
  static Status Open(const std::string& spec, const std::string& local_address, bool verbose,
                     std::unique_ptr<Plugin>* out);
  // finalize(), unless something the backend may still use was leaked.
  ~Plugin();
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  // The table as the host loader copied it (slots past the plugin's
  // struct_size read NULL), and the plugin's own struct_size. Read its
  // fields here; call its functions through calls().
  const plexus_backend_v1& table() const { return lib_->table(); }
  // The table's functions, each call recorded while in flight.
  const TracedCalls& calls() const { return *calls_; }
  uint32_t plugin_struct_size() const { return lib_->plugin_struct_size(); }
  const std::string& path() const { return lib_->path(); }
  plexus_backend_ctx* ctx() const { return ctx_; }

  // get_capabilities() as called once after init: caps() as the host reads
  // them (the collective bits of 1.2 dropped for a table older than 1.2,
  // which has no slots for them), raw_caps() as the plugin filled them.
  int32_t caps_status() const { return caps_status_; }
  const plexus_capabilities& caps() const { return caps_; }
  const plexus_capabilities& raw_caps() const { return raw_caps_; }

  // The 1.1 slot, read only when abi_minor and struct_size say it is there.
  bool has_request_error() const;
  // The 1.5 slot request_notify, likewise.
  bool has_request_notify() const;

  // The 1.2 slots, read only when abi_minor >= 2 and the plugin's
  // struct_size covers the slot (a 1.0 or 1.1 table may hold anything
  // there). HasCollective: the slot of any collective code (0-13) is there
  // and non-NULL. NoSlotReason: "" when HasCollective, else why not, e.g.
  // "backend is ABI 1.1: no gather" or "the gather slot is NULL".
  bool HasCollective(plexus_collective_t coll) const;
  std::string NoSlotReason(plexus_collective_t coll) const;
  bool has_comm_split() const;
  std::string NoCommSplitReason() const;  // "" when has_comm_split()
  // The 1.3 slots mem_alloc and mem_free (both or neither): "" when both are
  // there, else why not ("backend is ABI 1.2: no mem_alloc", "the mem_alloc
  // and mem_free slots are NULL (optional)", or a table with only one).
  std::string NoMemAllocReason() const;

  // comm_last_error / request_error as strings ("" when the slot is absent).
  std::string LastError(plexus_comm* comm) const;
  std::string RequestError(plexus_request* req) const;

  // comm_create with a configuration built like the host's
  // (Communicator::from_env): the launch's rank and size, an out-of-band
  // channel over store keyed by name, and a 1.1 config getter reading the
  // environment. Returns the plugin's status; *error holds its reason.
  int32_t CreateComm(const LaunchInfo& launch, RendezvousStore* store, const std::string& name,
                     int64_t timeout_ms, plexus_comm** comm, std::string* error);

  // A group: comm_create over shape.members (group rank -> job rank), with
  // an out-of-band channel over those ranks only (plexus_oob.members), as
  // the host makes a group for a backend without comm_split.
  int32_t CreateGroupComm(const GroupShape& shape, RendezvousStore* store, const std::string& name,
                          int64_t timeout_ms, plexus_comm** comm, std::string* error);
  // comm_split (1.2) of parent: shape is this rank's new communicator as the
  // host computed it, or nullptr for PLEXUS_SPLIT_NO_COLOR (then config is
  // NULL). Only when has_comm_split().
  int32_t SplitComm(plexus_comm* parent, uint32_t color, uint32_t key, const GroupShape* shape,
                    RendezvousStore* store, const std::string& name, int64_t timeout_ms,
                    plexus_comm** comm, std::string* error);

  // Something the backend may still touch (a request that never completed,
  // the communicator it belongs to) is being kept alive on purpose: do not
  // finalize at exit, which would free what the backend still uses.
  void MarkLeaked() { leaked_ = true; }
  bool leaked() const { return leaked_; }

 private:
  Plugin() = default;
  static void FilteredLog(void* ctx, int32_t level, const char* message);

  std::unique_ptr<LoadedLibrary> lib_;
  std::unique_ptr<TracedCalls> calls_;
  std::unique_ptr<HostServices> services_;
  plexus_host_v1 host_{};  // the services' table with FilteredLog as log
  plexus_backend_ctx* ctx_ = nullptr;
  int32_t caps_status_ = PLEXUS_ERR_INTERNAL;
  plexus_capabilities caps_{};
  plexus_capabilities raw_caps_{};
  bool leaked_ = false;
};

// Offset just past a table slot: the struct_size a table needs to have it.
#define PLEXUS_CONFORMANCE_SLOT_END(slot) \
  (offsetof(plexus_backend_v1, slot) + sizeof(static_cast<plexus_backend_v1*>(nullptr)->slot))

}  // namespace plexus::conformance
