#include "traced_calls.hpp"

#include <cstdio>

#include "data.hpp"
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

int32_t TracedCalls::allreduce(plexus_comm* comm, const void* sendbuf, void* recvbuf,
                               uint64_t count, plexus_dtype_t dtype, plexus_reduce_op_t op,
                               const plexus_placement* placement, plexus_request** req_out) const {
  const std::string details =
      "count " + std::to_string(count) + ", " + Dtype(dtype) + ", " + Op(op);
  const std::string text = "allreduce(" + Buffers(sendbuf, recvbuf) + ", " + details + ", " +
                           Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->allreduce(comm, sendbuf, recvbuf, count, dtype, op, placement, req_out);
  }
  NamePosted(rc, req_out, "allreduce", details);
  return rc;
}

int32_t TracedCalls::broadcast(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype,
                               uint32_t root, const plexus_placement* placement,
                               plexus_request** req_out) const {
  const std::string details =
      "count " + std::to_string(count) + ", " + Dtype(dtype) + ", root " + std::to_string(root);
  const std::string text = "broadcast(buf=" + Pointer(buf) + ", " + details + ", " +
                           Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->broadcast(comm, buf, count, dtype, root, placement, req_out);
  }
  NamePosted(rc, req_out, "broadcast", details);
  return rc;
}

int32_t TracedCalls::reduce(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                            plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t root,
                            const plexus_placement* placement, plexus_request** req_out) const {
  const std::string details = "count " + std::to_string(count) + ", " + Dtype(dtype) + ", " +
                              Op(op) + ", root " + std::to_string(root);
  const std::string text = "reduce(" + Buffers(sendbuf, recvbuf) + ", " + details + ", " +
                           Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->reduce(comm, sendbuf, recvbuf, count, dtype, op, root, placement, req_out);
  }
  NamePosted(rc, req_out, "reduce", details);
  return rc;
}

int32_t TracedCalls::allgather(plexus_comm* comm, const void* sendbuf, void* recvbuf,
                               uint64_t count, plexus_dtype_t dtype,
                               const plexus_placement* placement, plexus_request** req_out) const {
  const std::string details = "count " + std::to_string(count) + " per rank, " + Dtype(dtype);
  const std::string text = "allgather(" + Buffers(sendbuf, recvbuf) + ", " + details + ", " +
                           Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->allgather(comm, sendbuf, recvbuf, count, dtype, placement, req_out);
  }
  NamePosted(rc, req_out, "allgather", details);
  return rc;
}

int32_t TracedCalls::reduce_scatter(plexus_comm* comm, const void* sendbuf, void* recvbuf,
                                    uint64_t count, plexus_dtype_t dtype, plexus_reduce_op_t op,
                                    const plexus_placement* placement,
                                    plexus_request** req_out) const {
  const std::string details =
      "count " + std::to_string(count) + " per rank, " + Dtype(dtype) + ", " + Op(op);
  const std::string text = "reduce_scatter(" + Buffers(sendbuf, recvbuf) + ", " + details + ", " +
                           Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->reduce_scatter(comm, sendbuf, recvbuf, count, dtype, op, placement, req_out);
  }
  NamePosted(rc, req_out, "reduce_scatter", details);
  return rc;
}

int32_t TracedCalls::alltoall(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                              plexus_dtype_t dtype, const plexus_placement* placement,
                              plexus_request** req_out) const {
  const std::string details = "count " + std::to_string(count) + " per rank, " + Dtype(dtype);
  const std::string text = "alltoall(" + Buffers(sendbuf, recvbuf) + ", " + details + ", " +
                           Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->alltoall(comm, sendbuf, recvbuf, count, dtype, placement, req_out);
  }
  NamePosted(rc, req_out, "alltoall", details);
  return rc;
}

int32_t TracedCalls::barrier(plexus_comm* comm, plexus_request** req_out) const {
  const std::string text = "barrier()" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->barrier(comm, req_out);
  }
  NamePosted(rc, req_out, "barrier", "");
  return rc;
}

int32_t TracedCalls::send(plexus_comm* comm, const void* buf, uint64_t count, plexus_dtype_t dtype,
                          uint32_t peer, const plexus_placement* placement,
                          plexus_request** req_out) const {
  const std::string details =
      "count " + std::to_string(count) + ", " + Dtype(dtype) + ", peer " + std::to_string(peer);
  const std::string text = "send(buf=" + Pointer(buf) + ", " + details + ", " +
                           Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->send(comm, buf, count, dtype, peer, placement, req_out);
  }
  NamePosted(rc, req_out, "send", details);
  return rc;
}

int32_t TracedCalls::recv(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype,
                          uint32_t peer, const plexus_placement* placement,
                          plexus_request** req_out) const {
  const std::string details =
      "count " + std::to_string(count) + ", " + Dtype(dtype) + ", peer " + std::to_string(peer);
  const std::string text = "recv(buf=" + Pointer(buf) + ", " + details + ", " +
                           Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->recv(comm, buf, count, dtype, peer, placement, req_out);
  }
  NamePosted(rc, req_out, "recv", details);
  return rc;
}

int32_t TracedCalls::gather(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                            plexus_dtype_t dtype, uint32_t root, const plexus_placement* placement,
                            plexus_request** req_out) const {
  const std::string details = "count " + std::to_string(count) + " per rank, " + Dtype(dtype) +
                              ", root " + std::to_string(root);
  const std::string text = "gather(" + Buffers(sendbuf, recvbuf) + ", " + details + ", " +
                           Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->gather(comm, sendbuf, recvbuf, count, dtype, root, placement, req_out);
  }
  NamePosted(rc, req_out, "gather", details);
  return rc;
}

int32_t TracedCalls::scatter(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                             plexus_dtype_t dtype, uint32_t root, const plexus_placement* placement,
                             plexus_request** req_out) const {
  const std::string details = "count " + std::to_string(count) + " per rank, " + Dtype(dtype) +
                              ", root " + std::to_string(root);
  const std::string text = "scatter(" + Buffers(sendbuf, recvbuf) + ", " + details + ", " +
                           Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->scatter(comm, sendbuf, recvbuf, count, dtype, root, placement, req_out);
  }
  NamePosted(rc, req_out, "scatter", details);
  return rc;
}

int32_t TracedCalls::allgatherv(plexus_comm* comm, const void* sendbuf, uint64_t sendcount,
                                void* recvbuf, const uint64_t* recvcounts, const uint64_t* displs,
                                plexus_dtype_t dtype, const plexus_placement* placement,
                                plexus_request** req_out) const {
  const uint32_t n = CommSize(comm);
  const std::string details = "sendcount " + std::to_string(sendcount) + ", " + Dtype(dtype);
  const std::string text = "allgatherv(" + Buffers(sendbuf, recvbuf) + ", " + details +
                           ", recvcounts " + Array(recvcounts, n) + ", displs " + Array(displs, n) +
                           ", " + Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->allgatherv(comm, sendbuf, sendcount, recvbuf, recvcounts, displs, dtype, placement,
                            req_out);
  }
  NamePosted(rc, req_out, "allgatherv", details);
  return rc;
}

int32_t TracedCalls::alltoallv(plexus_comm* comm, const void* sendbuf, const uint64_t* sendcounts,
                               const uint64_t* sdispls, void* recvbuf, const uint64_t* recvcounts,
                               const uint64_t* rdispls, plexus_dtype_t dtype,
                               const plexus_placement* placement, plexus_request** req_out) const {
  const uint32_t n = CommSize(comm);
  const std::string details = "sendcounts " + Array(sendcounts, n) + ", recvcounts " +
                              Array(recvcounts, n) + ", " + Dtype(dtype);
  const std::string text = "alltoallv(" + Buffers(sendbuf, recvbuf) + ", " + details +
                           ", sdispls " + Array(sdispls, n) + ", rdispls " + Array(rdispls, n) +
                           ", " + Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->alltoallv(comm, sendbuf, sendcounts, sdispls, recvbuf, recvcounts, rdispls, dtype,
                           placement, req_out);
  }
  NamePosted(rc, req_out, "alltoallv", details);
  return rc;
}

int32_t TracedCalls::allreduce_coalesced(plexus_comm* comm, const void* const* sendbufs,
                                         void* const* recvbufs, const uint64_t* counts,
                                         uint32_t nbuffers, plexus_dtype_t dtype,
                                         plexus_reduce_op_t op, const plexus_placement* placement,
                                         plexus_request** req_out) const {
  const std::string details = std::to_string(nbuffers) + " buffers, counts " +
                              Array(counts, nbuffers) + ", " + Dtype(dtype) + ", " + Op(op);
  const std::string text = "allreduce_coalesced(sendbufs=" + Pointer(sendbufs) +
                           ", recvbufs=" + Pointer(recvbufs) + ", " + details + ", " +
                           Placement(placement) + ")" + CommSuffix(comm);
  int32_t rc;
  {
    CallInFlight call(text.c_str());
    rc = table_->allreduce_coalesced(comm, sendbufs, recvbufs, counts, nbuffers, dtype, op,
                                     placement, req_out);
  }
  NamePosted(rc, req_out, "allreduce_coalesced", details);
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

size_t TracedCalls::request_error(plexus_request* req, char* buf, size_t len) const {
  CallInFlight call(
      ("request_error(" + RequestText(req) + ", buf, " + std::to_string(len) + ")").c_str());
  return table_->request_error(req, buf, len);
}

}  // namespace plexus::conformance
