/* A backend that is right on rank 0 and wrong everywhere else: it forwards
 * to the real TCP plugin (PLEXUS_T_INNER names its file) but claims only
 * float32 allreduce and barrier, and on ranks >= 1 flips a bit of the last
 * element of every allreduce result. The vendor trial's backend looked like
 * this to plexus-bench, which then summed #wrong through it (it has no uint64
 * sum, so rank 0 counted only itself) and printed "0 OK". A test double for
 * plexus-bench's checker, never a stand-in for a library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "plexus/backend.h"

struct plexus_backend_ctx {
  plexus_backend_ctx* inner;
};
struct plexus_comm {
  plexus_comm* inner;
  uint32_t rank;
};
struct plexus_request {
  plexus_request* inner;
  float* last; /* element to spoil on completion, or NULL */
};

static const plexus_backend_v1* g_inner;
static struct plexus_backend_ctx g_ctx;

static int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** out) {
  char path[4096] = "";
  if (!host->get_config || host->get_config(host->ctx, "PLEXUS_T_INNER", path, sizeof path) <= 0)
    return PLEXUS_ERR_INVALID_ARGUMENT;
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  plexus_backend_get_v1_fn entry = lib ? (plexus_backend_get_v1_fn)dlsym(lib, PLEXUS_BACKEND_ENTRY_V1) : NULL;
  if (!entry || entry(PLEXUS_ABI_MINOR, &g_inner) != PLEXUS_OK) return PLEXUS_ERR_SYSTEM;
  int32_t rc = g_inner->init(host, &g_ctx.inner);
  if (rc == PLEXUS_OK) *out = &g_ctx;
  return rc;
}
static void Finalize(plexus_backend_ctx* ctx) {
  g_inner->finalize(ctx->inner);
}
static int32_t Caps(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
  (void)ctx;
  uint32_t size = caps->struct_size;
  memset(caps, 0, size);
  caps->struct_size = size;
  caps->collectives = (1u << PLEXUS_COLL_ALLREDUCE) | (1u << PLEXUS_COLL_BARRIER);
  caps->memory_types = 1u << PLEXUS_MEMORY_HOST;
  caps->dtypes = 1u << PLEXUS_DTYPE_FLOAT32;
  caps->reduce_dtypes[PLEXUS_OP_SUM] = 1u << PLEXUS_DTYPE_FLOAT32;
  caps->thread_level = PLEXUS_THREAD_SERIALIZED;
  return PLEXUS_OK;
}
static int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* c,
                          plexus_comm** out, char* err, size_t len) {
  struct plexus_comm* comm = calloc(1, sizeof *comm);
  if (!comm) return PLEXUS_ERR_SYSTEM;
  int32_t rc = g_inner->comm_create(ctx->inner, c, &comm->inner, err, len);
  if (rc != PLEXUS_OK) {
    free(comm);
    *out = NULL;
    return rc;
  }
  comm->rank = c->rank;
  *out = comm;
  return PLEXUS_OK;
}
static void CommDestroy(plexus_comm* comm) {
  g_inner->comm_destroy(comm->inner);
  free(comm);
}
static int32_t CommAbort(plexus_comm* comm) {
  return g_inner->comm_abort(comm->inner);
}
static size_t LastError(plexus_comm* comm, char* buf, size_t len) {
  return g_inner->comm_last_error(comm->inner, buf, len);
}
static int32_t Done(plexus_request* r, int32_t rc) {
  if (rc == PLEXUS_OK && r->last) {
    uint32_t bits;
    memcpy(&bits, r->last, sizeof bits);
    bits ^= 1u;
    memcpy(r->last, &bits, sizeof bits);
    r->last = NULL;
  }
  return rc;
}
static int32_t Test(plexus_request* r) {
  return Done(r, g_inner->test(r->inner));
}
static int32_t Wait(plexus_request* r, int64_t t) {
  return Done(r, g_inner->wait(r->inner, t));
}
static int32_t Free(plexus_request* r) {
  if (!r) return PLEXUS_OK;
  int32_t rc = g_inner->request_free(r->inner);
  if (rc == PLEXUS_OK) free(r);
  return rc;
}
static int32_t Wrap(int32_t rc, plexus_request* inner, float* last, plexus_request** req) {
  if (rc != PLEXUS_OK) {
    *req = NULL;
    return rc;
  }
  struct plexus_request* r = calloc(1, sizeof *r);
  r->inner = inner;
  r->last = last;
  *req = r;
  return PLEXUS_OK;
}
static int32_t Allreduce(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                         plexus_dtype_t dtype, plexus_reduce_op_t op,
                         const plexus_placement* where, plexus_request** req) {
  plexus_request* inner = NULL;
  int32_t rc =
      g_inner->allreduce(comm->inner, send, recv, count, dtype, op, where, &inner);
  float* last = comm->rank > 0 && count > 0 ? (float*)recv + (count - 1) : NULL;
  return Wrap(rc, inner, last, req);
}
static int32_t Barrier(plexus_comm* comm, plexus_request** req) {
  plexus_request* inner = NULL;
  int32_t rc = g_inner->barrier(comm->inner, &inner); /* before reading inner */
  return Wrap(rc, inner, NULL, req);
}

static const plexus_backend_v1 g_table = {
    .struct_size = sizeof(plexus_backend_v1),
    .abi_major = 1,
    .abi_minor = PLEXUS_ABI_MINOR,
    .name = "partlywrong",
    .version = "0.0-test",
    .init = Init,
    .finalize = Finalize,
    .get_capabilities = Caps,
    .comm_create = CommCreate,
    .comm_destroy = CommDestroy,
    .comm_abort = CommAbort,
    .comm_last_error = LastError,
    .test = Test,
    .wait = Wait,
    .request_free = Free,
    .allreduce = Allreduce,
    .barrier = Barrier,
};

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** out) {
  (void)host_abi_minor;
  *out = &g_table;
  return PLEXUS_OK;
}
