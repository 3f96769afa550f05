// A plugin with every ABI 1.2 slot, for plexus-conformance's own tests: the
// suite's checks of gather, scatter, allgatherv, alltoallv,
// allreduce_coalesced and comm_split must pass a backend that does them
// right, before any real backend has them. It forwards the 1.0/1.1 slots to
// the real TCP plugin (PLEXUS_T_INNER names its file) and builds the new
// ones from the TCP plugin's send, recv and allreduce:
//
//  - gather/scatter: the root receives/sends one message per other rank
//    (scatter: acknowledged by an empty message back, so that a root
//    mismatch is a TIMEOUT);
//  - allgatherv/alltoallv: one send and one recv per other rank, at the
//    displacements (a count that disagrees with the peer's fails the recv,
//    as the TCP plugin reports it);
//  - allreduce_coalesced: the buffers packed into one allreduce, unpacked
//    when it completes;
//  - comm_split: comm_create of the new group with the config the host
//    computed (config->oob is the group's channel); NULL for NO_COLOR.
//
// Arguments go through the backend kit's CheckCall, as a real backend's do.
// A test double for the suite, never a stand-in for a backend: it favours
// being obviously right over being fast.
//
// PLEXUS_T_CREATE=whole-job makes comm_create refuse (INVALID_USAGE) any
// communicator that is not the whole job (PLEXUS_WORLD_SIZE ranks), as a
// backend over a library whose communicators all derive from one world may:
// with comm_split there, the host never needs more, and the suite must not
// fail it for that.
//
// PLEXUS_T_BUG=split-order makes the communicators of comm_split count
// broadcast roots from the other end (group rank g is, for the data, the
// process the host ranked size-1-g), so that the suite must find the wrong
// ranks.
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plexus/algos/dtype.hpp"
#include "plexus/backend.h"
#include "plexus/kit/call.hpp"

struct plexus_backend_ctx {
  plexus_backend_ctx* inner = nullptr;
};

struct plexus_comm {
  plexus_comm* inner = nullptr;
  uint32_t rank = 0, size = 1;
  bool reversed = false;  // PLEXUS_T_BUG=split-order: roots counted from the other end
  std::mutex mutex;
  std::string error;  // this layer's last refusal, else "" (the inner error applies)
};

// One operation: the inner requests it posted, and what to do once they all
// completed (unpack a coalesced result).
struct plexus_request {
  plexus_comm* comm = nullptr;
  std::vector<plexus_request*> inner;
  std::vector<uint8_t> scratch;
  struct Unpack {
    void* to;
    size_t offset, bytes;
  };
  std::vector<Unpack> unpack;
  std::mutex mutex;
  int32_t status = PLEXUS_IN_PROGRESS;
  std::string error;
};

namespace {

const plexus_backend_v1* g_inner = nullptr;
plexus_backend_ctx g_ctx;
bool g_bug_split_order = false;
int64_t g_whole_job_only = 0;  // PLEXUS_T_CREATE=whole-job: the job's size, else 0

constexpr uint32_t kNew = (1u << PLEXUS_COLL_GATHER) | (1u << PLEXUS_COLL_SCATTER) |
                          (1u << PLEXUS_COLL_ALLGATHERV) | (1u << PLEXUS_COLL_ALLTOALLV) |
                          (1u << PLEXUS_COLL_ALLREDUCE_COALESCED);

size_t CopyOut(const std::string& text, char* buf, size_t len) {
  if (buf && len) {
    const size_t m = std::min(text.size(), len - 1);
    std::memcpy(buf, text.data(), m);
    buf[m] = '\0';
  }
  return text.size();
}

void SetError(plexus_comm* comm, const std::string& text) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  comm->error = text;
}

int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** out) {
  char path[4096] = "";
  if (!host || !host->get_config ||
      host->get_config(host->ctx, "PLEXUS_T_INNER", path, sizeof path) <= 0) {
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  auto entry = lib ? reinterpret_cast<plexus_backend_get_v1_fn>(dlsym(lib, PLEXUS_BACKEND_ENTRY_V1))
                   : nullptr;
  if (!entry || entry(PLEXUS_ABI_MINOR, &g_inner) != PLEXUS_OK) return PLEXUS_ERR_SYSTEM;
  char bug[64] = "";
  if (host->get_config(host->ctx, "PLEXUS_T_BUG", bug, sizeof bug) > 0) {
    g_bug_split_order = std::strcmp(bug, "split-order") == 0;
  }
  char create[64] = "", world[32] = "";
  if (host->get_config(host->ctx, "PLEXUS_T_CREATE", create, sizeof create) > 0 &&
      std::strcmp(create, "whole-job") == 0 &&
      host->get_config(host->ctx, "PLEXUS_WORLD_SIZE", world, sizeof world) > 0) {
    g_whole_job_only = std::atoll(world);
  }
  const int32_t rc = g_inner->init(host, &g_ctx.inner);
  if (rc == PLEXUS_OK) *out = &g_ctx;
  return rc;
}

void Finalize(plexus_backend_ctx* ctx) {
  g_inner->finalize(ctx->inner);
}

int32_t Caps(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
  const int32_t rc = g_inner->get_capabilities(ctx->inner, caps);
  // The collectives of 1.2, whatever the inner backend claims beyond them.
  if (rc == PLEXUS_OK)
    caps->collectives = (caps->collectives | kNew) & ((1u << PLEXUS_COLL_COUNT_V1_2) - 1);
  return rc;
}

int32_t Wrap(plexus_comm* inner, uint32_t rank, uint32_t size, plexus_comm** out) {
  auto* comm = new plexus_comm;
  comm->inner = inner;
  comm->rank = rank;
  comm->size = size;
  *out = comm;
  return PLEXUS_OK;
}

int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* c, plexus_comm** out,
                   char* err, size_t len) {
  plexus_comm* inner = nullptr;
  *out = nullptr;
  if (g_whole_job_only && c->size != uint64_t(g_whole_job_only)) {
    CopyOut("reference12 comm_create: " + std::to_string(c->size) + " ranks, but this backend " +
                "makes communicators of the whole job (" + std::to_string(g_whole_job_only) +
                ") only; groups come from comm_split",
            err, len);
    return PLEXUS_ERR_INVALID_USAGE;
  }
  const int32_t rc = g_inner->comm_create(ctx->inner, c, &inner, err, len);
  if (rc != PLEXUS_OK) return rc;
  return Wrap(inner, c->rank, c->size, out);
}

int32_t CommSplit(plexus_comm* comm, uint32_t color, uint32_t, const plexus_comm_config_v1* c,
                  plexus_comm** out, char* err, size_t len) {
  if (!comm || !out) return PLEXUS_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  if (color == PLEXUS_SPLIT_NO_COLOR) return PLEXUS_OK;
  if (!c) {
    CopyOut("reference12 comm_split: NULL config for a color", err, len);
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  plexus_comm* inner = nullptr;
  const int32_t rc = g_inner->comm_create(g_ctx.inner, c, &inner, err, len);
  if (rc != PLEXUS_OK) return rc;
  Wrap(inner, c->rank, c->size, out);
  // The bug: group rank g is the process the host calls size-1-g (as if
  // the keys were ignored); a broadcast's root shows it.
  (*out)->reversed = g_bug_split_order;
  return PLEXUS_OK;
}

void CommDestroy(plexus_comm* comm) {
  g_inner->comm_destroy(comm->inner);
  delete comm;
}

int32_t CommAbort(plexus_comm* comm) {
  return g_inner->comm_abort(comm->inner);
}

size_t LastError(plexus_comm* comm, char* buf, size_t len) {
  {
    std::lock_guard<std::mutex> lock(comm->mutex);
    if (!comm->error.empty()) return CopyOut(comm->error, buf, len);
  }
  return g_inner->comm_last_error(comm->inner, buf, len);
}

// --- requests -------------------------------------------------------------

// Completes req if every inner request has (its lock held).
void Advance(plexus_request* req) {
  if (req->status != PLEXUS_IN_PROGRESS) return;
  for (plexus_request* in : req->inner) {
    const int32_t rc = g_inner->test(in);
    if (rc == PLEXUS_IN_PROGRESS) return;
    if (rc != PLEXUS_OK) {
      char text[1024] = "";
      if (g_inner->request_error) g_inner->request_error(in, text, sizeof text);
      if (!text[0]) g_inner->comm_last_error(req->comm->inner, text, sizeof text);
      req->error = text[0] ? text : "reference12: an inner operation failed";
      req->status = rc;
      break;
    }
  }
  if (req->status == PLEXUS_IN_PROGRESS) {
    for (const auto& u : req->unpack) {
      std::memcpy(u.to, req->scratch.data() + u.offset, u.bytes);
    }
    req->status = PLEXUS_OK;
  }
  // Every inner request has completed (or one failed: wait for the rest).
  bool all_done = true;
  for (plexus_request* in : req->inner) {
    if (g_inner->test(in) == PLEXUS_IN_PROGRESS) all_done = false;
  }
  if (req->status != PLEXUS_OK && !all_done) {
    req->status = PLEXUS_IN_PROGRESS;  // not before the others are done with the buffers
    return;
  }
  for (plexus_request* in : req->inner) g_inner->request_free(in);
  req->inner.clear();
}

int32_t Test(plexus_request* req) {
  if (!req) return PLEXUS_ERR_INVALID_ARGUMENT;
  std::lock_guard<std::mutex> lock(req->mutex);
  Advance(req);
  return req->status;
}

int32_t Wait(plexus_request* req, int64_t timeout_ms) {
  if (!req) return PLEXUS_ERR_INVALID_ARGUMENT;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(timeout_ms < 0 ? int64_t(1) << 40 : timeout_ms);
  for (;;) {
    const int32_t rc = Test(req);
    if (rc != PLEXUS_IN_PROGRESS) return rc;
    if (std::chrono::steady_clock::now() >= deadline) return PLEXUS_ERR_TIMEOUT;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

int32_t Free(plexus_request* req) {
  if (!req) return PLEXUS_OK;
  {
    std::lock_guard<std::mutex> lock(req->mutex);
    Advance(req);
    if (req->status == PLEXUS_IN_PROGRESS) return PLEXUS_ERR_INVALID_USAGE;
  }
  delete req;
  return PLEXUS_OK;
}

size_t RequestError(plexus_request* req, char* buf, size_t len) {
  if (!req) return CopyOut("", buf, len);
  std::lock_guard<std::mutex> lock(req->mutex);
  return CopyOut(req->status == PLEXUS_OK || req->status == PLEXUS_IN_PROGRESS ? "" : req->error,
                 buf, len);
}

// --- posting ----------------------------------------------------------------

// Collects the inner posts of one operation; on a failed post, nothing is
// left posted only if it was the first (the suite's valid calls never fail
// after the first post).
struct Posting {
  plexus_comm* comm;
  plexus_request* req;
  int32_t status = PLEXUS_OK;

  explicit Posting(plexus_comm* c) : comm(c), req(new plexus_request) { req->comm = c; }
  ~Posting() { delete req; }

  void Add(int32_t rc, plexus_request* in) {  // (in read only after the post set it)
    if (status != PLEXUS_OK) return;
    if (rc != PLEXUS_OK) {
      status = rc;
      return;
    }
    req->inner.push_back(in);
  }
  void Send(const void* buf, uint64_t count, plexus_dtype_t dt, uint32_t peer) {
    if (status != PLEXUS_OK) return;
    plexus_request* in = nullptr;
    const int32_t rc = g_inner->send(comm->inner, buf, count, dt, peer, nullptr, &in);
    Add(rc, in);
  }
  void Recv(void* buf, uint64_t count, plexus_dtype_t dt, uint32_t peer) {
    if (status != PLEXUS_OK) return;
    plexus_request* in = nullptr;
    const int32_t rc = g_inner->recv(comm->inner, buf, count, dt, peer, nullptr, &in);
    Add(rc, in);
  }
  int32_t Finish(plexus_request** out) {
    if (status != PLEXUS_OK) {
      // (A partly posted operation cannot be taken back: wait it out.)
      for (plexus_request* in : req->inner) {
        g_inner->wait(in, -1);
        g_inner->request_free(in);
      }
      req->inner.clear();
      return status;
    }
    *out = req;
    req = nullptr;
    return PLEXUS_OK;
  }
};

int32_t Check(plexus_comm* comm, const plexus::kit::Call& call, plexus_request** req_out) {
  if (!comm || !req_out) return PLEXUS_ERR_INVALID_ARGUMENT;
  *req_out = nullptr;
  SetError(comm, "");
  const plexus::abi::Status st =
      plexus::kit::CheckCall(call, {comm->rank, comm->size}, plexus::kit::kHostMemoryOnly);
  if (!st.ok()) SetError(comm, "reference12 " + st.message);
  return st.code;
}

// A 1.0 collective: one inner request (rc and in from its post, made before).
int32_t One(plexus_comm* comm, int32_t rc, plexus_request* in, plexus_request** out) {
  if (rc != PLEXUS_OK) {
    *out = nullptr;
    return rc;
  }
  auto* req = new plexus_request;
  req->comm = comm;
  req->inner.push_back(in);
  *out = req;
  return PLEXUS_OK;
}

int32_t Allreduce(plexus_comm* comm, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
                  plexus_reduce_op_t op, const plexus_placement* p, plexus_request** out) {
  SetError(comm, "");
  plexus_request* in = nullptr;
  const int32_t rc = g_inner->allreduce(comm->inner, s, r, n, dt, op, p, &in);
  return One(comm, rc, in, out);
}
int32_t Broadcast(plexus_comm* comm, void* b, uint64_t n, plexus_dtype_t dt, uint32_t root,
                  const plexus_placement* p, plexus_request** out) {
  SetError(comm, "");
  plexus_request* in = nullptr;
  if (comm->reversed && root < comm->size) root = comm->size - 1 - root;
  const int32_t rc = g_inner->broadcast(comm->inner, b, n, dt, root, p, &in);
  return One(comm, rc, in, out);
}
int32_t Reduce(plexus_comm* comm, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
               plexus_reduce_op_t op, uint32_t root, const plexus_placement* p,
               plexus_request** out) {
  SetError(comm, "");
  plexus_request* in = nullptr;
  const int32_t rc = g_inner->reduce(comm->inner, s, r, n, dt, op, root, p, &in);
  return One(comm, rc, in, out);
}
int32_t Allgather(plexus_comm* comm, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
                  const plexus_placement* p, plexus_request** out) {
  SetError(comm, "");
  plexus_request* in = nullptr;
  const int32_t rc = g_inner->allgather(comm->inner, s, r, n, dt, p, &in);
  return One(comm, rc, in, out);
}
int32_t ReduceScatter(plexus_comm* comm, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
                      plexus_reduce_op_t op, const plexus_placement* p, plexus_request** out) {
  SetError(comm, "");
  plexus_request* in = nullptr;
  const int32_t rc = g_inner->reduce_scatter(comm->inner, s, r, n, dt, op, p, &in);
  return One(comm, rc, in, out);
}
int32_t Alltoall(plexus_comm* comm, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
                 const plexus_placement* p, plexus_request** out) {
  SetError(comm, "");
  plexus_request* in = nullptr;
  const int32_t rc = g_inner->alltoall(comm->inner, s, r, n, dt, p, &in);
  return One(comm, rc, in, out);
}
int32_t Barrier(plexus_comm* comm, plexus_request** out) {
  SetError(comm, "");
  plexus_request* in = nullptr;
  const int32_t rc = g_inner->barrier(comm->inner, &in);
  return One(comm, rc, in, out);
}
int32_t Send(plexus_comm* comm, const void* b, uint64_t n, plexus_dtype_t dt, uint32_t peer,
             const plexus_placement* p, plexus_request** out) {
  SetError(comm, "");
  plexus_request* in = nullptr;
  const int32_t rc = g_inner->send(comm->inner, b, n, dt, peer, p, &in);
  return One(comm, rc, in, out);
}
int32_t Recv(plexus_comm* comm, void* b, uint64_t n, plexus_dtype_t dt, uint32_t peer,
             const plexus_placement* p, plexus_request** out) {
  SetError(comm, "");
  plexus_request* in = nullptr;
  const int32_t rc = g_inner->recv(comm->inner, b, n, dt, peer, p, &in);
  return One(comm, rc, in, out);
}

int32_t Gather(plexus_comm* comm, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
               uint32_t root, const plexus_placement* p, plexus_request** out) {
  plexus::kit::Call call{PLEXUS_COLL_GATHER, s, r, n, dt, 0, root, p};
  if (const int32_t rc = Check(comm, call, out); rc != PLEXUS_OK) return rc;
  const size_t es = plexus::algos::DtypeSize(dt);
  Posting post(comm);
  if (comm->rank != root) {
    post.Send(s, n, dt, root);
  } else {
    auto* recv = static_cast<uint8_t*>(r);
    for (uint32_t j = 0; j < comm->size; ++j) {
      if (j != root) post.Recv(recv + j * n * es, n, dt, j);
    }
    if (n && s != recv + root * n * es) std::memcpy(recv + root * n * es, s, n * es);
  }
  return post.Finish(out);
}

int32_t Scatter(plexus_comm* comm, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
                uint32_t root, const plexus_placement* p, plexus_request** out) {
  plexus::kit::Call call{PLEXUS_COLL_SCATTER, s, r, n, dt, 0, root, p};
  if (const int32_t rc = Check(comm, call, out); rc != PLEXUS_OK) return rc;
  const size_t es = plexus::algos::DtypeSize(dt);
  Posting post(comm);
  // Every non-root acknowledges its block with an empty message, so that
  // ranks that disagree on the root wait for acknowledgements that never
  // come (TIMEOUT) instead of completing with sends nobody received.
  if (comm->rank != root) {
    post.Recv(r, n, dt, root);
    post.Send(nullptr, 0, dt, root);
  } else {
    const auto* send = static_cast<const uint8_t*>(s);
    for (uint32_t j = 0; j < comm->size; ++j) {
      if (j == root) continue;
      post.Send(send + j * n * es, n, dt, j);
      post.Recv(nullptr, 0, dt, j);
    }
    if (n && r != send + root * n * es) std::memcpy(r, send + root * n * es, n * es);
  }
  return post.Finish(out);
}

int32_t Allgatherv(plexus_comm* comm, const void* s, uint64_t sendcount, void* r,
                   const uint64_t* recvcounts, const uint64_t* displs, plexus_dtype_t dt,
                   const plexus_placement* p, plexus_request** out) {
  plexus::kit::Call call{PLEXUS_COLL_ALLGATHERV, s, r, sendcount, dt, 0, 0, p};
  call.recvcounts = recvcounts;
  call.rdispls = displs;
  if (const int32_t rc = Check(comm, call, out); rc != PLEXUS_OK) return rc;
  const size_t es = plexus::algos::DtypeSize(dt);
  auto* recv = static_cast<uint8_t*>(r);
  Posting post(comm);
  for (uint32_t j = 0; j < comm->size; ++j) {
    if (j == comm->rank) continue;
    post.Send(s, sendcount, dt, j);
    post.Recv(recv + displs[j] * es, recvcounts[j], dt, j);
  }
  uint8_t* mine = recv + displs[comm->rank] * es;
  if (sendcount && s != mine) std::memcpy(mine, s, sendcount * es);
  return post.Finish(out);
}

int32_t Alltoallv(plexus_comm* comm, const void* s, const uint64_t* sendcounts,
                  const uint64_t* sdispls, void* r, const uint64_t* recvcounts,
                  const uint64_t* rdispls, plexus_dtype_t dt, const plexus_placement* p,
                  plexus_request** out) {
  plexus::kit::Call call{PLEXUS_COLL_ALLTOALLV, s, r, 0, dt, 0, 0, p};
  call.sendcounts = sendcounts;
  call.sdispls = sdispls;
  call.recvcounts = recvcounts;
  call.rdispls = rdispls;
  if (const int32_t rc = Check(comm, call, out); rc != PLEXUS_OK) return rc;
  const uint32_t me = comm->rank;
  if (sendcounts[me] != recvcounts[me]) {
    SetError(comm, "reference12 alltoallv: sendcounts[rank] " + std::to_string(sendcounts[me]) +
                       " differs from recvcounts[rank] " + std::to_string(recvcounts[me]));
    return PLEXUS_ERR_INVALID_ARGUMENT;
  }
  const size_t es = plexus::algos::DtypeSize(dt);
  const auto* send = static_cast<const uint8_t*>(s);
  auto* recv = static_cast<uint8_t*>(r);
  Posting post(comm);
  for (uint32_t j = 0; j < comm->size; ++j) {
    if (j == me) continue;
    post.Send(send + sdispls[j] * es, sendcounts[j], dt, j);
    post.Recv(recv + rdispls[j] * es, recvcounts[j], dt, j);
  }
  if (sendcounts[me]) {
    std::memcpy(recv + rdispls[me] * es, send + sdispls[me] * es, sendcounts[me] * es);
  }
  return post.Finish(out);
}

int32_t Coalesced(plexus_comm* comm, const void* const* sends, void* const* recvs,
                  const uint64_t* counts, uint32_t nbuffers, plexus_dtype_t dt,
                  plexus_reduce_op_t op, const plexus_placement* p, plexus_request** out) {
  plexus::kit::Call call{PLEXUS_COLL_ALLREDUCE_COALESCED, nullptr, nullptr, 0, dt, op, 0, p};
  call.sendbufs = sends;
  call.recvbufs = recvs;
  call.counts = counts;
  call.nbuffers = nbuffers;
  if (counts) {
    for (uint32_t i = 0; i < nbuffers; ++i) call.count += counts[i];
  }
  if (const int32_t rc = Check(comm, call, out); rc != PLEXUS_OK) return rc;
  const size_t es = plexus::algos::DtypeSize(dt);
  Posting post(comm);
  post.req->scratch.resize(call.count * es);
  size_t at = 0;
  for (uint32_t i = 0; i < nbuffers; ++i) {
    const size_t bytes = counts[i] * es;
    if (bytes) std::memcpy(post.req->scratch.data() + at, sends[i], bytes);
    post.req->unpack.push_back({recvs[i], at, bytes});
    at += bytes;
  }
  plexus_request* in = nullptr;
  uint8_t* data = post.req->scratch.data();
  const int32_t rc = g_inner->allreduce(comm->inner, data, data, call.count, dt, op, p, &in);
  post.Add(rc, in);
  return post.Finish(out);
}

plexus_backend_v1 MakeTable() {
  plexus_backend_v1 t{};
  t.struct_size = sizeof t;
  t.abi_major = 1;
  t.abi_minor = PLEXUS_ABI_MINOR;
  t.name = "reference12";
  t.version = "0.0-test";
  t.init = Init;
  t.finalize = Finalize;
  t.get_capabilities = Caps;
  t.comm_create = CommCreate;
  t.comm_destroy = CommDestroy;
  t.comm_abort = CommAbort;
  t.comm_last_error = LastError;
  t.test = Test;
  t.wait = Wait;
  t.request_free = Free;
  t.allreduce = Allreduce;
  t.broadcast = Broadcast;
  t.reduce = Reduce;
  t.allgather = Allgather;
  t.reduce_scatter = ReduceScatter;
  t.alltoall = Alltoall;
  t.barrier = Barrier;
  t.send = Send;
  t.recv = Recv;
  t.request_error = RequestError;
  t.gather = Gather;
  t.scatter = Scatter;
  t.allgatherv = Allgatherv;
  t.alltoallv = Alltoallv;
  t.allreduce_coalesced = Coalesced;
  t.comm_split = CommSplit;
  return t;
}

const plexus_backend_v1 g_table = MakeTable();

}  // namespace

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t, const plexus_backend_v1** out) {
  if (!out) return PLEXUS_ERR_INVALID_ARGUMENT;
  *out = &g_table;
  return PLEXUS_OK;
}
