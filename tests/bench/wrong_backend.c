/* A single-rank backend whose allreduce is deliberately wrong: it copies the
 * input to the output and then flips one bit of the last element. It exists
 * so that the plexus-bench tests can see #wrong > 0 make plexus-bench fail.
 * A test double for plexus-bench's checker, never a stand-in for a library.
 * Supports allreduce (every dtype and op, host memory) and barrier; requests
 * complete when posted. */
#include <string.h>

#include "plexus/backend.h"

#define EXPORT __attribute__((visibility("default")))

struct plexus_backend_ctx {
  int unused;
};
struct plexus_comm {
  int unused;
};
struct plexus_request {
  int unused;
};

static struct plexus_backend_ctx g_ctx;
static struct plexus_comm g_comm;
static struct plexus_request g_req;

static const uint32_t kAllDtypes = ((1u << (PLEXUS_DTYPE_MAX_V1 + 1)) - 1) & ~1u;

static size_t DtypeSize(plexus_dtype_t t) {
  switch (t) {
    case PLEXUS_DTYPE_INT8:
    case PLEXUS_DTYPE_UINT8:
      return 1;
    case PLEXUS_DTYPE_INT16:
    case PLEXUS_DTYPE_UINT16:
    case PLEXUS_DTYPE_FLOAT16:
    case PLEXUS_DTYPE_BFLOAT16:
      return 2;
    case PLEXUS_DTYPE_INT32:
    case PLEXUS_DTYPE_UINT32:
    case PLEXUS_DTYPE_FLOAT32:
      return 4;
    default:
      return 8;
  }
}

static int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** out) {
  (void)host;
  *out = &g_ctx;
  return PLEXUS_OK;
}
static void Finalize(plexus_backend_ctx* ctx) {
  (void)ctx;
}
static int32_t Caps(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
  uint32_t size = caps->struct_size;
  uint32_t op;
  (void)ctx;
  memset(caps, 0, size);
  caps->struct_size = size;
  caps->collectives = (1u << PLEXUS_COLL_ALLREDUCE) | (1u << PLEXUS_COLL_BARRIER);
  caps->memory_types = 1u << PLEXUS_MEMORY_HOST;
  caps->dtypes = kAllDtypes;
  for (op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op) caps->reduce_dtypes[op] = kAllDtypes;
  caps->flags = PLEXUS_CAP_IN_PLACE;
  caps->thread_level = PLEXUS_THREAD_SERIALIZED;
  return PLEXUS_OK;
}
static int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* c,
                          plexus_comm** out, char* err, size_t len) {
  static const char kOneRank[] = "wrong backend: single rank only";
  (void)ctx;
  if (c->size != 1) {
    if (err && len >= sizeof kOneRank) memcpy(err, kOneRank, sizeof kOneRank);
    *out = NULL;
    return PLEXUS_ERR_UNSUPPORTED;
  }
  *out = &g_comm;
  if (err && len) err[0] = '\0';
  return PLEXUS_OK;
}
static void CommDestroy(plexus_comm* comm) {
  (void)comm;
}
static int32_t CommAbort(plexus_comm* comm) {
  (void)comm;
  return PLEXUS_OK;
}
static size_t LastError(plexus_comm* comm, char* buf, size_t len) {
  (void)comm;
  if (buf && len) buf[0] = '\0';
  return 0;
}
static int32_t Test(plexus_request* r) {
  (void)r;
  return PLEXUS_OK;
}
static int32_t Wait(plexus_request* r, int64_t t) {
  (void)r;
  (void)t;
  return PLEXUS_OK;
}
static int32_t Free(plexus_request* r) {
  (void)r;
  return PLEXUS_OK;
}
static int32_t Allreduce(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                         plexus_dtype_t dtype, plexus_reduce_op_t op,
                         const plexus_placement* placement, plexus_request** req) {
  const size_t bytes = (size_t)count * DtypeSize(dtype);
  (void)comm;
  (void)op;
  (void)placement;
  if (sendbuf != recvbuf) memmove(recvbuf, sendbuf, bytes);
  if (count > 0) ((unsigned char*)recvbuf)[bytes - DtypeSize(dtype)] ^= 0x10;
  *req = &g_req;
  return PLEXUS_OK;
}
static int32_t Barrier(plexus_comm* comm, plexus_request** req) {
  (void)comm;
  *req = &g_req;
  return PLEXUS_OK;
}

static const plexus_backend_v1 g_table = {
    .struct_size = sizeof(plexus_backend_v1),
    .abi_major = 1,
    .abi_minor = PLEXUS_ABI_MINOR,
    .name = "wrong",
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

EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor, const plexus_backend_v1** out) {
  (void)host_abi_minor;
  *out = &g_table;
  return PLEXUS_OK;
}
