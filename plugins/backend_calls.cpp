#include "backend_calls.hpp"

#include "plexus/algos/dtype.hpp"
#include "plexus/log.hpp"

namespace plexus {
namespace {

// The table slot of each collective, to check caps against slots.
const void* SlotOf(const plexus_backend_v1& t, plexus_collective_t coll) {
  switch (coll) {
    case PLEXUS_COLL_ALLREDUCE:
      return reinterpret_cast<const void*>(t.allreduce);
    case PLEXUS_COLL_BROADCAST:
      return reinterpret_cast<const void*>(t.broadcast);
    case PLEXUS_COLL_REDUCE:
      return reinterpret_cast<const void*>(t.reduce);
    case PLEXUS_COLL_ALLGATHER:
      return reinterpret_cast<const void*>(t.allgather);
    case PLEXUS_COLL_REDUCE_SCATTER:
      return reinterpret_cast<const void*>(t.reduce_scatter);
    case PLEXUS_COLL_ALLTOALL:
      return reinterpret_cast<const void*>(t.alltoall);
    case PLEXUS_COLL_BARRIER:
      return reinterpret_cast<const void*>(t.barrier);
    case PLEXUS_COLL_SEND:
      return reinterpret_cast<const void*>(t.send);
    case PLEXUS_COLL_RECV:
      return reinterpret_cast<const void*>(t.recv);
    default:
      return nullptr;
  }
}

const char* MemoryName(const plexus_placement* where) {
  if (!where || where->memory_type == PLEXUS_MEMORY_HOST) return "host memory";
  if (where->memory_type == PLEXUS_MEMORY_CUDA) return "CUDA memory";
  return "unknown memory type";
}

void Trace(const std::string& backend, const std::string& call) {
  if (LogEnabled(PLEXUS_LOG_TRACE)) LogLine(PLEXUS_LOG_TRACE, backend, call);
}

}  // namespace

Status Backend::Open(std::unique_ptr<LoadedLibrary> lib, std::unique_ptr<HostServices> host,
                     std::shared_ptr<Backend>* out) {
  std::shared_ptr<Backend> b(new Backend);
  b->lib_ = std::move(lib);
  b->host_ = std::move(host);
  b->t_ = &b->lib_->table();
  b->name_ = b->t_->name;
  b->version_ = b->t_->version;
  int32_t rc = b->t_->init(b->host_->table(), &b->ctx_);
  if (rc != PLEXUS_OK || !b->ctx_) {
    b->ctx_ = nullptr;
    const std::string why = b->host_->LastProblem();
    return Status(rc != PLEXUS_OK ? rc : PLEXUS_ERR_INTERNAL,
                  "backend '" + b->name_ + "' (" + b->path() + ") failed to initialise: " +
                      StatusName(rc) + (why.empty() ? "" : ": " + why));
  }
  b->caps_.struct_size = sizeof(plexus_capabilities);
  rc = b->t_->get_capabilities(b->ctx_, &b->caps_);
  if (rc != PLEXUS_OK) {
    return Status(rc, "backend '" + b->name_ + "' could not report its capabilities");
  }
  for (plexus_collective_t c = 0; c < PLEXUS_COLL_COUNT_V1; ++c) {
    if ((b->caps_.collectives >> c & 1u) && !SlotOf(*b->t_, c)) {
      return Status::InvalidArgument("backend '" + b->name_ + "' claims " +
                                     algos::CollectiveName(c) + " but its slot is NULL");
    }
  }
  *out = std::move(b);
  return Status::Ok();
}

Backend::~Backend() {
  if (ctx_) t_->finalize(ctx_);
}

Status Backend::CreateComm(const plexus_comm_config_v1& config, plexus_comm** comm) {
  char reason[1024] = "";
  Trace(name_, "comm_create " + std::string(config.name));
  const int32_t rc = t_->comm_create(ctx_, &config, comm, reason, sizeof reason);
  if (rc == PLEXUS_OK && *comm) return Status::Ok();
  *comm = nullptr;
  std::string text = reason[0] ? reason : "comm_create failed without a reason";
  const std::string host_side = host_->LastProblem();
  if (!host_side.empty() && text.find(host_side) == std::string::npos) {
    text += " (" + host_side + ")";
  }
  return Status(rc != PLEXUS_OK ? rc : PLEXUS_ERR_INTERNAL, text);
}

void Backend::DestroyComm(plexus_comm* comm) {
  if (comm) t_->comm_destroy(comm);
}

Status Backend::AbortComm(plexus_comm* comm) {
  return Describe(comm, t_->comm_abort(comm), "abort");
}

int32_t Backend::Test(plexus_request* req) {
  return t_->test(req);
}
int32_t Backend::Wait(plexus_request* req, int64_t timeout_ms) {
  return t_->wait(req, timeout_ms);
}
int32_t Backend::FreeRequest(plexus_request* req) {
  return t_->request_free(req);
}

Status Backend::Describe(plexus_comm* comm, int32_t code, const std::string& what) {
  if (code == PLEXUS_OK) return Status::Ok();
  std::string text;
  if (comm) {
    char buf[2048] = "";
    t_->comm_last_error(comm, buf, sizeof buf);
    text = buf;
  }
  if (text.empty()) text = StatusName(code);
  return Status(code, what + ": " + text);
}

Status Backend::CheckSupported(plexus_collective_t coll, plexus_dtype_t dtype,
                               plexus_reduce_op_t op, const plexus_placement* where) const {
  const uint32_t mem = where ? where->memory_type : PLEXUS_MEMORY_HOST;
  auto refuse = [&](const std::string& why) {
    std::string what = "backend '" + name_ + "' does not support " + algos::CollectiveName(coll);
    if (dtype) what += std::string(" on ") + algos::DtypeName(dtype);
    if (op) what += std::string(" with ") + algos::ReduceOpName(op);
    what += std::string(" in ") + MemoryName(where);
    return Status::Unsupported(what + " (" + why + ")");
  };
  if (!(caps_.collectives >> coll & 1u) || !SlotOf(*t_, coll)) {
    return refuse("collective not implemented");
  }
  if (mem >= 32 || !(caps_.memory_types >> mem & 1u)) return refuse("memory type");
  if (dtype) {
    if (algos::DtypeSize(dtype) == 0) {
      return Status::InvalidArgument("unknown dtype code " + std::to_string(dtype));
    }
    if (op) {
      if (op > PLEXUS_OP_MAX_V1 || op == 0) {
        return Status::InvalidArgument("unknown reduce op code " + std::to_string(op));
      }
      if (!(caps_.reduce_dtypes[op] >> dtype & 1u)) return refuse("dtype x op");
    } else if (!(caps_.dtypes >> dtype & 1u)) {
      return refuse("dtype");
    }
  }
  return Status::Ok();
}

Status Backend::Finish(plexus_comm* comm, int32_t code, plexus_collective_t coll) {
  if (code == PLEXUS_OK) return Status::Ok();  // (no strings built on the fast path)
  return Describe(comm, code, std::string(algos::CollectiveName(coll)) + " on " + name_);
}

#define PLEXUS_CHECKED_CALL(coll, dtype, op, where, call) \
  do {                                                    \
    Status st_ = CheckSupported(coll, dtype, op, where);  \
    if (!st_.ok()) return st_;                            \
    Trace(name_, algos::CollectiveName(coll));            \
    return Finish(comm, t_->call, coll);                  \
  } while (0)

Status Backend::Allreduce(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                          plexus_dtype_t dtype, plexus_reduce_op_t op,
                          const plexus_placement* where, plexus_request** req) {
  PLEXUS_CHECKED_CALL(PLEXUS_COLL_ALLREDUCE, dtype, op, where,
                      allreduce(comm, send, recv, count, dtype, op, where, req));
}

Status Backend::Broadcast(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype,
                          uint32_t root, const plexus_placement* where, plexus_request** req) {
  PLEXUS_CHECKED_CALL(PLEXUS_COLL_BROADCAST, dtype, 0, where,
                      broadcast(comm, buf, count, dtype, root, where, req));
}

Status Backend::Reduce(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                       plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t root,
                       const plexus_placement* where, plexus_request** req) {
  PLEXUS_CHECKED_CALL(PLEXUS_COLL_REDUCE, dtype, op, where,
                      reduce(comm, send, recv, count, dtype, op, root, where, req));
}

Status Backend::Allgather(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                          plexus_dtype_t dtype, const plexus_placement* where,
                          plexus_request** req) {
  PLEXUS_CHECKED_CALL(PLEXUS_COLL_ALLGATHER, dtype, 0, where,
                      allgather(comm, send, recv, count, dtype, where, req));
}

Status Backend::ReduceScatter(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                              plexus_dtype_t dtype, plexus_reduce_op_t op,
                              const plexus_placement* where, plexus_request** req) {
  PLEXUS_CHECKED_CALL(PLEXUS_COLL_REDUCE_SCATTER, dtype, op, where,
                      reduce_scatter(comm, send, recv, count, dtype, op, where, req));
}

Status Backend::Alltoall(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                         plexus_dtype_t dtype, const plexus_placement* where,
                         plexus_request** req) {
  PLEXUS_CHECKED_CALL(PLEXUS_COLL_ALLTOALL, dtype, 0, where,
                      alltoall(comm, send, recv, count, dtype, where, req));
}

Status Backend::Barrier(plexus_comm* comm, plexus_request** req) {
  PLEXUS_CHECKED_CALL(PLEXUS_COLL_BARRIER, 0, 0, nullptr, barrier(comm, req));
}

Status Backend::Send(plexus_comm* comm, const void* buf, uint64_t count, plexus_dtype_t dtype,
                     uint32_t peer, const plexus_placement* where, plexus_request** req) {
  PLEXUS_CHECKED_CALL(PLEXUS_COLL_SEND, dtype, 0, where,
                      send(comm, buf, count, dtype, peer, where, req));
}

Status Backend::Recv(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype,
                     uint32_t peer, const plexus_placement* where, plexus_request** req) {
  PLEXUS_CHECKED_CALL(PLEXUS_COLL_RECV, dtype, 0, where,
                      recv(comm, buf, count, dtype, peer, where, req));
}

#undef PLEXUS_CHECKED_CALL

}  // namespace plexus
