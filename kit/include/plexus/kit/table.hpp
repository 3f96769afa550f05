// plexus::kit::MakeTable — the ABI table of a backend, built from one C++
// class that describes it, so that no backend writes the C glue again.
//
// A backend describes itself in a class B with static members (no objects):
//
//   struct TcpBackend {
//     static constexpr const char* kName = "tcp";   // the table's name, and every message's prefix
//     static const char* Version();                 // static storage: "0.1.0 (UCX 1.13.1)"
//     static constexpr uint32_t kCollectives = ...; // bits (1u << PLEXUS_COLL_*) with a slot
//
//     // Backend and communicators. May throw (the kit catches), must not
//     // leave anything allocated when they fail. Init gets a host table the
//     // kit has checked for NULL and size; what else it needs (the
//     // out-of-band functions, say) it checks itself.
//     static int32_t Init(const plexus_host_v1& host, plexus_backend_ctx** ctx_out);
//     static void Finalize(plexus_backend_ctx* ctx);
//     static void Capabilities(plexus_backend_ctx& ctx, plexus_capabilities& caps);
//     static int32_t CommCreate(plexus_backend_ctx& ctx, const plexus_comm_config_v1& config,
//                               plexus_comm** comm_out, std::string* error);
//     static void CommDestroy(plexus_comm* comm);
//     static void CommAbort(plexus_comm& comm);
//     static ErrorSlot& Errors(plexus_comm& comm);     // its comm_last_error
//     static CommShape Shape(const plexus_comm& comm);  // rank and size
//     static uint32_t MemoryTypes(const plexus_comm& comm);  // kHostMemoryOnly, or more
//
//     // Posts a call that CheckCall accepted (req_out non-NULL, *req_out NULL).
//     static int32_t Post(plexus_comm& comm, const Call& call, plexus_request** req_out);
//
//     // Optional (ABI 1.2 comm_split): a native split. config is NULL for
//     // PLEXUS_SPLIT_NO_COLOR. Without it the slot stays NULL.
//     static int32_t CommSplit(plexus_comm& comm, uint32_t color, uint32_t key,
//                              const plexus_comm_config_v1* config, plexus_comm** comm_out,
//                              std::string* error);
//
//     // Optional (ABI 1.3 mem_alloc, mem_free; both or neither): shared
//     // buffers (kit::OneHostShm::MemAlloc gives them on one host).
//     static int32_t MemAlloc(plexus_comm& comm, uint64_t bytes, void** ptr_out);
//     static int32_t MemFree(plexus_comm& comm, void* ptr);
//
//     // Requests: test, wait, request_free and (optional) request_error and
//     // request_notify, as the ABI words them.
//     using Requests = kit::QueuedRequests;  // (op_queue.hpp) or the backend's own
//   };
//
// Then the library's one exported function is
//
//   PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
//                                                       const plexus_backend_v1** table_out) {
//     return plexus::kit::HandOutTable<TcpBackend>(host_abi_minor, table_out);
//   }
//
// What the kit does at every entry point: NULL handles are INVALID_ARGUMENT;
// a post's arguments go through CheckCall (call.hpp) and a refusal is
// recorded in Errors(comm) as "<name> <collective>: <why>"; *req_out is NULL
// unless the post succeeded; and no exception leaves (Guarded, errors.hpp).
#pragma once

#include <algorithm>
#include <cstring>
#include <string>

#include "plexus/backend.h"
#include "plexus/kit/call.hpp"
#include "plexus/kit/errors.hpp"

namespace plexus::kit {

template <class B>
struct Glue {
  static int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** ctx_out) {
    if (!host || !ctx_out || host->struct_size < sizeof(plexus_host_v1)) {
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    *ctx_out = nullptr;
    return Guarded(nullptr, B::kName, [&] { return B::Init(*host, ctx_out); });
  }

  static void Finalize(plexus_backend_ctx* ctx) {
    if (ctx) Guarded(nullptr, B::kName, [&] { return B::Finalize(ctx), PLEXUS_OK; });
  }

  static int32_t GetCapabilities(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
    if (!ctx || !caps || caps->struct_size < sizeof(plexus_capabilities)) {
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    const uint32_t size = caps->struct_size;
    std::memset(caps, 0, sizeof *caps);
    caps->struct_size = size;
    return Guarded(nullptr, B::kName, [&] { return B::Capabilities(*ctx, *caps), PLEXUS_OK; });
  }

  static int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* config,
                            plexus_comm** comm_out, char* error_buf, size_t error_len) noexcept {
    const std::string prefix = std::string(B::kName) + " comm_create";  // (once per communicator)
    if (!ctx || !config || !comm_out ||
        config->struct_size < offsetof(plexus_comm_config_v1, oob) + sizeof(void*) ||
        config->size == 0 || config->rank >= config->size || config->timeout_ms <= 0) {
      CopyOut(prefix + ": invalid configuration", error_buf, error_len);
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    *comm_out = nullptr;
    std::string error;
    ErrorSlot slot;
    const int32_t rc = Guarded(&slot, prefix.c_str(),
                               [&] { return B::CommCreate(*ctx, *config, comm_out, &error); });
    if (rc != PLEXUS_OK) {
      if (error.empty()) error = std::string(B::kName) + ": " + LastOf(slot);
      CopyOut(error, error_buf, error_len);
      *comm_out = nullptr;
    }
    return rc;
  }

  static void CommDestroy(plexus_comm* comm) {
    if (comm) Guarded(nullptr, B::kName, [&] { return B::CommDestroy(comm), PLEXUS_OK; });
  }

  static int32_t CommAbort(plexus_comm* comm) {
    if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
    return Guarded(&B::Errors(*comm), B::kName, [&] { return B::CommAbort(*comm), PLEXUS_OK; });
  }

  static size_t CommLastError(plexus_comm* comm, char* buf, size_t len) {
    if (!comm) {
      CopyOut("", buf, len);
      return 0;
    }
    return B::Errors(*comm).Copy(buf, len);
  }

  static int32_t Test(plexus_request* req) {
    if (!req) return PLEXUS_ERR_INVALID_ARGUMENT;
    return Guarded(nullptr, B::kName, [&] { return B::Requests::Test(*req); });
  }
  static int32_t Wait(plexus_request* req, int64_t timeout_ms) {
    if (!req) return PLEXUS_ERR_INVALID_ARGUMENT;
    return Guarded(nullptr, B::kName, [&] { return B::Requests::Wait(*req, timeout_ms); });
  }
  static int32_t RequestFree(plexus_request* req) {
    if (!req) return PLEXUS_OK;
    return Guarded(nullptr, B::kName, [&] { return B::Requests::Free(req); });
  }
  static int32_t RequestNotify(plexus_request* req, void (*done)(void*, int32_t), void* arg) {
    if (!req) return PLEXUS_ERR_INVALID_ARGUMENT;
    return Guarded(nullptr, B::kName, [&] { return B::Requests::Notify(*req, done, arg); });
  }
  static size_t RequestError(plexus_request* req, char* buf, size_t len) {
    if (!req) {
      CopyOut("", buf, len);
      return 0;
    }
    try {
      return B::Requests::Error(*req, buf, len);
    } catch (...) {
      CopyOut("", buf, len);
      return 0;
    }
  }

  // Every collective: its arguments as a Call (each slot's C function is
  // abi::Collective::Entry, from the list), checked, then B::Post.
  static int32_t Post(plexus_comm* comm, const Call& call, plexus_request** req_out) {
    if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
    ErrorSlot& errors = B::Errors(*comm);
    return Guarded(&errors, B::kName, [&] {
      if (!req_out) return Reject(errors, PLEXUS_ERR_INVALID_ARGUMENT, call, "req_out is NULL");
      *req_out = nullptr;
      abi::Status st = CheckCall(call, B::Shape(*comm), B::MemoryTypes(*comm));
      if (!st.ok()) {
        errors.Set(std::string(B::kName) + " " + st.message);
        return st.code;
      }
      const int32_t rc = B::Post(*comm, call, req_out);
      if (rc != PLEXUS_OK) *req_out = nullptr;
      return rc;
    });
  }

  // comm_split, for a backend with B::CommSplit (the kit checks the
  // arguments, B gets a config only for a color).
  static int32_t CommSplit(plexus_comm* comm, uint32_t color, uint32_t key,
                           const plexus_comm_config_v1* config, plexus_comm** comm_out,
                           char* error_buf, size_t error_len) noexcept {
    const std::string prefix = std::string(B::kName) + " comm_split";
    const bool joins = color != PLEXUS_SPLIT_NO_COLOR;
    if (!comm || !comm_out ||
        (joins &&
         (!config || config->struct_size < offsetof(plexus_comm_config_v1, oob) + sizeof(void*) ||
          config->size == 0 || config->rank >= config->size || config->timeout_ms <= 0))) {
      CopyOut(prefix + ": invalid arguments (NULL comm or comm_out, or a bad config)", error_buf,
              error_len);
      return PLEXUS_ERR_INVALID_ARGUMENT;
    }
    *comm_out = nullptr;
    std::string error;
    ErrorSlot slot;
    const int32_t rc = Guarded(&slot, prefix.c_str(), [&] {
      return B::CommSplit(*comm, color, key, joins ? config : nullptr, comm_out, &error);
    });
    if (rc != PLEXUS_OK) {
      if (error.empty()) error = std::string(B::kName) + ": " + LastOf(slot);
      CopyOut(error, error_buf, error_len);
      *comm_out = nullptr;
    }
    return rc;
  }

  // mem_alloc and mem_free, for a backend with B::MemAlloc and B::MemFree.
  static int32_t MemAlloc(plexus_comm* comm, uint64_t bytes, void** ptr_out) noexcept {
    if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
    ErrorSlot& errors = B::Errors(*comm);
    void* p = nullptr;
    const int32_t rc = Guarded(&errors, "mem_alloc", [&]() -> int32_t {
      if (!ptr_out || bytes == 0) {
        errors.Set(std::string(B::kName) + " mem_alloc: NULL ptr_out or 0 bytes");
        return PLEXUS_ERR_INVALID_ARGUMENT;
      }
      return B::MemAlloc(*comm, bytes, &p);
    });
    if (rc == PLEXUS_OK) *ptr_out = p;
    return rc;
  }
  static int32_t MemFree(plexus_comm* comm, void* ptr) noexcept {
    if (!comm) return PLEXUS_ERR_INVALID_ARGUMENT;
    return Guarded(&B::Errors(*comm), "mem_free", [&] { return B::MemFree(*comm, ptr); });
  }

 private:
  static int32_t Reject(ErrorSlot& errors, int32_t code, const Call& call, const char* why) {
    errors.Set(std::string(B::kName) + " " + DescribeCall(call) + ": " + why);
    return code;
  }
  static std::string LastOf(const ErrorSlot& slot) {
    char text[1024];
    slot.Copy(text, sizeof text);
    return text;
  }
};

// The ABI table of backend B (see the top of this file).
template <class B>
plexus_backend_v1 MakeTable() {
  using G = Glue<B>;
  auto has = [](plexus_collective_t c) { return (B::kCollectives & (1u << c)) != 0; };
  plexus_backend_v1 t{};
  t.struct_size = sizeof(plexus_backend_v1);
  t.abi_major = PLEXUS_ABI_MAJOR;
  t.abi_minor = PLEXUS_ABI_MINOR;
  t.name = B::kName;
  t.version = B::Version();
  t.init = G::Init;
  t.finalize = G::Finalize;
  t.get_capabilities = G::GetCapabilities;
  t.comm_create = G::CommCreate;
  t.comm_destroy = G::CommDestroy;
  t.comm_abort = G::CommAbort;
  t.comm_last_error = G::CommLastError;
  t.test = G::Test;
  t.wait = G::Wait;
  t.request_free = G::RequestFree;
  // Optional: without B::Requests::Error the slot stays NULL and the host
  // reads the communicator's last error instead.
  if constexpr (requires(plexus_request & r, char* buf, size_t len) {
                  B::Requests::Error(r, buf, len);
                }) {
    t.request_error = G::RequestError;
  }
  // Optional (ABI 1.5): without B::Requests::Notify the host waits itself.
  if constexpr (requires(plexus_request & r, void (*done)(void*, int32_t), void* arg) {
                  B::Requests::Notify(r, done, arg);
                }) {
    t.request_notify = G::RequestNotify;
  }
  abi::ForEachCollective([&](auto c) {
    if (has(c.kCode)) c.template Install<G>(t);
  });
  // Optional: a backend that splits natively (MPI_Comm_split, ncclCommSplit)
  // defines B::CommSplit(comm, color, key, config or NULL, comm_out, error).
  if constexpr (requires(plexus_comm & c, const plexus_comm_config_v1* cfg, plexus_comm** out,
                         std::string* e) { B::CommSplit(c, 0u, 0u, cfg, out, e); }) {
    t.comm_split = G::CommSplit;
  }
  // Optional: shared buffers (ABI 1.3).
  if constexpr (requires(plexus_comm & c, void** out, void* p) {
                  B::MemAlloc(c, uint64_t{1}, out);
                  B::MemFree(c, p);
                }) {
    t.mem_alloc = G::MemAlloc;
    t.mem_free = G::MemFree;
  }
  return t;
}

// The body of a backend's plexus_backend_get_v1: the table of B, built once
// (thread-safe), or INTERNAL if building it threw. Every 1.x host can drive
// it: newer slots are read by hosts that know them, older hosts stop at
// their own struct_size.
template <class B>
int32_t HandOutTable(uint32_t host_abi_minor, const plexus_backend_v1** table_out) noexcept {
  (void)host_abi_minor;
  if (!table_out) return PLEXUS_ERR_INVALID_ARGUMENT;
  try {
    static const plexus_backend_v1 table = MakeTable<B>();
    *table_out = &table;
    return PLEXUS_OK;
  } catch (...) {
    *table_out = nullptr;
    return PLEXUS_ERR_INTERNAL;
  }
}

}  // namespace plexus::kit
