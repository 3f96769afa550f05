#include "traced_calls.hpp"

#include <cstdio>

#include "data.hpp"
#include "plexus/abi/collectives.hpp"
#include "rank_record.hpp"

namespace plexus::conformance {
namespace {

std::string Pointer(const void* p) {
  if (!p) return "NULL";
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

std::string Dtype(plexus_dtype_t dtype) {
  if (ElementSize(dtype) != 0) return DtypeName(dtype);
  return "dtype " + std::to_string(dtype);
}

std::string Op(plexus_reduce_op_t op) {
  if (op >= PLEXUS_OP_SUM && op <= PLEXUS_OP_MAX_V1) return OpName(op);
  return "op " + std::to_string(op);
}

std::string Placement(const plexus_placement* p) {
  if (!p) return "placement NULL (host)";
  std::string s = "placement ";
  switch (p->memory_type) {
    case PLEXUS_MEMORY_HOST:
      s += "host";
      break;
    case PLEXUS_MEMORY_CUDA:
      s += "cuda device " + std::to_string(p->device);
      break;
    default:
      s +=
          "memory type " + std::to_string(p->memory_type) + ", device " + std::to_string(p->device);
  }
  if (p->stream) s += ", stream " + Pointer(p->stream);
  return s;
}

// "sendbuf=0x..., recvbuf=0x..." with an in-place call said so.
std::string Buffers(const void* sendbuf, const void* recvbuf) {
  if (sendbuf && sendbuf == recvbuf) return "sendbuf=recvbuf=" + Pointer(sendbuf) + " (in place)";
  return "sendbuf=" + Pointer(sendbuf) + ", recvbuf=" + Pointer(recvbuf);
}

}  // namespace

std::string TracedCalls::CommName(plexus_comm* comm) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = comm_names_.find(comm);
  if (it == comm_names_.end()) return "comm " + Pointer(comm);
  return "comm '" + it->second + "'";
}

std::string TracedCalls::CommSuffix(plexus_comm* comm) const {
  const std::string name = CommName(comm);
  // Session names the communicator most checks share "conformance/shared/N";
  // naming it on every line would only hide the arguments.
  if (name.rfind("comm 'conformance/shared/", 0) == 0) return {};
  return " on " + name;
}

std::string TracedCalls::RequestText(plexus_request* req) const {
  if (!req) return "req=NULL";
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = request_names_.find(req);
  if (it == request_names_.end()) return "req " + Pointer(req) + " (not one a post returned)";
  return "req of " + it->second;
}

void TracedCalls::NamePosted(int32_t rc, plexus_request** req_out, const char* collective,
                             const std::string& details) const {
  if (rc != PLEXUS_OK || !req_out || !*req_out) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (posts_generation_ != CheckGeneration()) {
    posts_generation_ = CheckGeneration();
    posts_.clear();
  }
  const int n = ++posts_[collective];
  request_names_[*req_out] = std::string(collective) + " #" + std::to_string(n) +
                             (details.empty() ? "" : " (" + details + ")");
}

int32_t TracedCalls::init(const plexus_host_v1* host, plexus_backend_ctx** ctx_out) const {
  CallInFlight call("init(host services, ctx_out)");
  return table_->init(host, ctx_out);
}

void TracedCalls::finalize(plexus_backend_ctx* ctx) const {
  CallInFlight call("finalize(ctx)");
  table_->finalize(ctx);
}

int32_t TracedCalls::get_capabilities(plexus_backend_ctx* ctx, plexus_capabilities* caps) const {
  CallInFlight call("get_capabilities(ctx, caps)");
  return table_->get_capabilities(ctx, caps);
}

int32_t TracedCalls::comm_create(plexus_backend_ctx* ctx, const plexus_comm_config_v1* config,
                                 plexus_comm** comm_out, char* err, size_t err_len) const {
  const std::string name = config->name ? config->name : "";
  const std::string text = "comm_create(rank " + std::to_string(config->rank) + " of " +
                           std::to_string(config->size) + ", name '" + name + "', timeout " +
                           std::to_string(config->timeout_ms) + " ms)";
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->comm_create(ctx, config, comm_out, err, err_len);
  }
  if (rc == PLEXUS_OK && *comm_out) NameComm(*comm_out, config);
  return rc;
}

void TracedCalls::NameComm(plexus_comm* comm, const plexus_comm_config_v1* config) const {
  std::lock_guard<std::mutex> lock(mutex_);
  comm_names_[comm] = config->name ? config->name : "";
  comm_sizes_[comm] = config->size;
}

uint32_t TracedCalls::CommSize(plexus_comm* comm) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = comm_sizes_.find(comm);
  return it == comm_sizes_.end() ? 0 : it->second;
}

std::string TracedCalls::Array(const uint64_t* a, uint32_t n) const {
  if (!a) return "NULL";
  if (n == 0) return Pointer(a);
  std::string s = "[";
  for (uint32_t i = 0; i < n && i < 8; ++i) s += (i ? ", " : "") + std::to_string(a[i]);
  return s + (n > 8 ? ", ...]" : "]");
}

void TracedCalls::comm_destroy(plexus_comm* comm) const {
  {
    CallInFlight call(("comm_destroy(" + CommName(comm) + ")").c_str());
    table_->comm_destroy(comm);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  comm_names_.erase(comm);
  comm_sizes_.erase(comm);
}

int32_t TracedCalls::comm_abort(plexus_comm* comm) const {
  CallInFlight call(("comm_abort(" + CommName(comm) + ")").c_str());
  return table_->comm_abort(comm);
}

size_t TracedCalls::comm_last_error(plexus_comm* comm, char* buf, size_t len) const {
  CallInFlight call(
      ("comm_last_error(" + CommName(comm) + ", buf, " + std::to_string(len) + ")").c_str());
  return table_->comm_last_error(comm, buf, len);
}

int32_t TracedCalls::post(plexus_comm* comm, const abi::Call& call,
                          plexus_request** req_out) const {
  const abi::Traits traits = abi::TraitsOf(call.coll);
  const char* name = abi::CollectiveName(call.coll);
  // details: what the request is named with ("allreduce #3 (details)");
  // the text adds the buffers before it and any displacements after it.
  std::string buffers, details, displs;
  switch (traits.layout) {
    case abi::Layout::kCount:
      if (!traits.typed) break;  // barrier: no arguments
      if (traits.needs_send != traits.needs_recv) {
        // One buffer: broadcast's and recv's recvbuf, send's sendbuf.
        buffers = "buf=" + Pointer(traits.needs_send ? call.sendbuf : call.recvbuf);
      } else {
        buffers = Buffers(call.sendbuf, call.recvbuf);
      }
      details = "count " + std::to_string(call.count) +
                (traits.send_per_rank || traits.recv_per_rank ? " per rank" : "") + ", " +
                Dtype(call.dtype);
      break;
    case abi::Layout::kPerRankCounts: {
      const uint32_t n = CommSize(comm);
      buffers = Buffers(call.sendbuf, call.recvbuf);
      if (call.coll == PLEXUS_COLL_ALLTOALLV) {
        details = "sendcounts " + Array(call.sendcounts, n) + ", recvcounts " +
                  Array(call.recvcounts, n) + ", " + Dtype(call.dtype);
        displs = ", sdispls " + Array(call.sdispls, n) + ", rdispls " + Array(call.rdispls, n);
      } else {  // allgatherv: count is the sendcount, rdispls its displs
        details = "sendcount " + std::to_string(call.count) + ", " + Dtype(call.dtype);
        displs = ", recvcounts " + Array(call.recvcounts, n) + ", displs " + Array(call.rdispls, n);
      }
      break;
    }
    case abi::Layout::kBufferList:
      buffers = "sendbufs=" + Pointer(call.sendbufs) + ", recvbufs=" + Pointer(call.recvbufs);
      details = std::to_string(call.nbuffers) + " buffers, counts " +
                Array(call.counts, call.nbuffers) + ", " + Dtype(call.dtype);
      break;
  }
  if (traits.reduces) details += ", " + Op(call.op);
  if (traits.root == abi::Root::kRoot) details += ", root " + std::to_string(call.root);
  if (traits.root == abi::Root::kPeer) details += ", peer " + std::to_string(call.root);

  std::string text = std::string(name) + "(";
  if (traits.typed) {
    text += buffers + ", " + details + displs + ", " + Placement(call.placement);
  }
  text += ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight in_flight(text.c_str());
    rc = abi::Invoke(*table_, comm, call, req_out);
  }
  NamePosted(rc, req_out, name, details);
  return rc;
}

int32_t TracedCalls::comm_split(plexus_comm* comm, uint32_t color, uint32_t key,
                                const plexus_comm_config_v1* config, plexus_comm** comm_out,
                                char* err, size_t err_len) const {
  std::string text =
      "comm_split(" + CommName(comm) + ", color " +
      (color == PLEXUS_SPLIT_NO_COLOR ? std::string("NO_COLOR") : std::to_string(color)) +
      ", key " + std::to_string(key) + ", ";
  if (config) {
    text += "config rank " + std::to_string(config->rank) + " of " + std::to_string(config->size) +
            ", name '" + (config->name ? config->name : "") + "', timeout " +
            std::to_string(config->timeout_ms) + " ms)";
  } else {
    text += "config NULL)";
  }
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->comm_split(comm, color, key, config, comm_out, err, err_len);
  }
  if (rc == PLEXUS_OK && config && comm_out && *comm_out) NameComm(*comm_out, config);
  return rc;
}

int32_t TracedCalls::mem_alloc(plexus_comm* comm, uint64_t bytes, void** ptr_out) const {
  CallInFlight call(("mem_alloc(" + CommName(comm) + ", " + std::to_string(bytes) + " bytes" +
                     (ptr_out ? "" : ", ptr_out NULL") + ")")
                        .c_str());
  return table_->mem_alloc(comm, bytes, ptr_out);
}

int32_t TracedCalls::mem_free(plexus_comm* comm, void* ptr) const {
  char where[32];
  std::snprintf(where, sizeof where, "%p", ptr);
  CallInFlight call(("mem_free(" + CommName(comm) + ", " + where + ")").c_str());
  return table_->mem_free(comm, ptr);
}

int32_t TracedCalls::test(plexus_request* req) const {
  CallInFlight call(("test(" + RequestText(req) + ")").c_str());
  return table_->test(req);
}

int32_t TracedCalls::wait(plexus_request* req, int64_t timeout_ms) const {
  CallInFlight call(
      ("wait(" + RequestText(req) + ", timeout " + std::to_string(timeout_ms) + " ms)").c_str());
  return table_->wait(req, timeout_ms);
}

int32_t TracedCalls::request_free(plexus_request* req) const {
  int32_t rc;
  {
    CallInFlight call(("request_free(" + RequestText(req) + ")").c_str());
    rc = table_->request_free(req);
  }
  if (rc == PLEXUS_OK) {
    std::lock_guard<std::mutex> lock(mutex_);
    request_names_.erase(req);
  }
  return rc;
}

int32_t TracedCalls::request_notify(plexus_request* req, void (*done)(void*, int32_t),
                                    void* arg) const {
  CallInFlight call(("request_notify(" + RequestText(req) + ", done, arg)").c_str());
  return table_->request_notify(req, done, arg);
}

size_t TracedCalls::request_error(plexus_request* req, char* buf, size_t len) const {
  CallInFlight call(
      ("request_error(" + RequestText(req) + ", buf, " + std::to_string(len) + ")").c_str());
  return table_->request_error(req, buf, len);
}

}  // namespace plexus::conformance
