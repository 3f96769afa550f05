/* Backends that break the ABI's promises in one way each, built once per
 * VARIANT_* macro, to test that the host catches what a vendor's first plugin
 * gets wrong (issue: the vendor trial). Test doubles for our own seam, the
 * host's plugin wrapper; single-process only (size 1).
 *   VARIANT_WAIT0_IN_PROGRESS  allreduce finishes 300 ms after posting; wait(req, 0)
 *                              wrongly returns PLEXUS_IN_PROGRESS while pending
 *   VARIANT_HUGE_TABLE         table struct_size 0xFFFFFFFF
 *   VARIANT_NO_TABLE           entry returns PLEXUS_OK without a table
 *   VARIANT_NULL_CTX           init returns PLEXUS_OK with a NULL context
 *   VARIANT_NULL_REQUEST       allreduce returns PLEXUS_OK with a NULL request
 *   VARIANT_SILENT_ERROR       allreduce fails with PLEXUS_ERR_SYSTEM, no message
 *   VARIANT_CLAIMS_NULL_SLOT   claims allreduce but its slot is NULL
 *   VARIANT_CONTROL_NAME       name and version hold terminal control characters
 *   VARIANT_CONFIG_ECHO        allreduce fails with the message "echo:<value>", value
 *                              being the communicator's PLEXUS_T_ECHO setting
 *   VARIANT_CRASH_ENTRY        the entry function dereferences NULL
 *   VARIANT_CRASH_INIT         init dereferences NULL
 *   VARIANT_HANG_INIT          init never returns
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "plexus/backend.h"

struct plexus_backend_ctx {
  const plexus_host_v1* host;
};
struct plexus_comm {
  char echo[64];
  char error[128];
};
struct plexus_request {
  struct timespec done_at;
  float* out;
  int finished;
};

static struct plexus_backend_ctx g_ctx;
static struct plexus_comm g_comm;
/* Unused in the variants that never make a request. */
static struct plexus_request g_req __attribute__((unused));

#if defined(VARIANT_CRASH_ENTRY) || defined(VARIANT_CRASH_INIT)
static volatile int* g_null;
#endif

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** out) {
#if defined(VARIANT_CRASH_INIT)
  *g_null = 1;
#endif
#if defined(VARIANT_HANG_INIT)
  for (;;) {
    struct timespec nap = {1, 0};
    nanosleep(&nap, NULL);
  }
#endif
  g_ctx.host = host;
#if defined(VARIANT_NULL_CTX)
  *out = NULL;
#else
  *out = &g_ctx;
#endif
  return PLEXUS_OK;
}
static void Finalize(plexus_backend_ctx* ctx) {
  (void)ctx;
}
static int32_t Caps(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
  (void)ctx;
  uint32_t size = caps->struct_size;
  memset(caps, 0, size);
  caps->struct_size = size;
  caps->collectives = 1u << PLEXUS_COLL_ALLREDUCE;
  caps->memory_types = 1u << PLEXUS_MEMORY_HOST;
  caps->dtypes = 1u << PLEXUS_DTYPE_FLOAT32;
  caps->reduce_dtypes[PLEXUS_OP_SUM] = 1u << PLEXUS_DTYPE_FLOAT32;
  caps->thread_level = PLEXUS_THREAD_SERIALIZED;
  return PLEXUS_OK;
}
static int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* c,
                          plexus_comm** out, char* err, size_t len) {
  (void)ctx;
  memset(&g_comm, 0, sizeof g_comm);
#if defined(VARIANT_CONFIG_ECHO)
  if (c->struct_size >= offsetof(plexus_comm_config_v1, config_ctx) + sizeof(void*) &&
      c->get_config) {
    c->get_config(c->config_ctx, "PLEXUS_T_ECHO", g_comm.echo, sizeof g_comm.echo);
  } else if (g_ctx.host->get_config) {
    g_ctx.host->get_config(g_ctx.host->ctx, "PLEXUS_T_ECHO", g_comm.echo, sizeof g_comm.echo);
  }
#else
  (void)c;
#endif
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
  size_t n = strlen(comm->error);
  if (buf && len) snprintf(buf, len, "%s", comm->error);
  return n;
}
/* Completes the request once its time has come: writes the result then. */
static int32_t Test(plexus_request* r) {
  if (!r->finished) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec < r->done_at.tv_sec ||
        (t.tv_sec == r->done_at.tv_sec && t.tv_nsec < r->done_at.tv_nsec)) {
      return PLEXUS_IN_PROGRESS;
    }
    if (r->out) r->out[0] = 2.0f;
    r->finished = 1;
  }
  return PLEXUS_OK;
}
static int32_t Wait(plexus_request* r, int64_t timeout_ms) {
  double deadline = Now() + (timeout_ms < 0 ? 3600.0 : (double)timeout_ms / 1000.0);
  for (;;) {
    int32_t rc = Test(r);
#if defined(VARIANT_WAIT0_IN_PROGRESS)
    if (rc == PLEXUS_IN_PROGRESS && timeout_ms == 0) return PLEXUS_IN_PROGRESS; /* the bug */
#endif
    if (rc != PLEXUS_IN_PROGRESS) return rc;
    if (Now() >= deadline) return PLEXUS_ERR_TIMEOUT;
    struct timespec nap = {0, 1000000};
    nanosleep(&nap, NULL);
  }
}
static int32_t Free(plexus_request* r) {
  (void)r;
  return PLEXUS_OK;
}
#if !defined(VARIANT_CLAIMS_NULL_SLOT)
static int32_t Allreduce(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                         plexus_dtype_t dtype, plexus_reduce_op_t op, const plexus_placement* where,
                         plexus_request** req) {
  (void)comm, (void)send, (void)recv, (void)count, (void)dtype, (void)op, (void)where;
#if defined(VARIANT_NULL_REQUEST)
  *req = NULL;
  return PLEXUS_OK;
#elif defined(VARIANT_SILENT_ERROR)
  (void)comm, (void)recv;
  *req = NULL;
  return PLEXUS_ERR_SYSTEM;
#elif defined(VARIANT_CONFIG_ECHO)
  (void)recv;
  snprintf(comm->error, sizeof comm->error, "echo:%s", comm->echo);
  *req = NULL;
  return PLEXUS_ERR_INVALID_USAGE;
#else
  (void)comm;
  memset(&g_req, 0, sizeof g_req);
  clock_gettime(CLOCK_MONOTONIC, &g_req.done_at);
  g_req.done_at.tv_nsec += 300000000L;
  if (g_req.done_at.tv_nsec >= 1000000000L) {
    g_req.done_at.tv_sec += 1;
    g_req.done_at.tv_nsec -= 1000000000L;
  }
  g_req.out = (float*)recv;
  *req = &g_req;
  return PLEXUS_OK;
#endif
}
#endif

static plexus_backend_v1 g_table = {
    .struct_size = sizeof(plexus_backend_v1),
    .abi_major = 1,
    .abi_minor = PLEXUS_ABI_MINOR,
#if defined(VARIANT_CONTROL_NAME)
    .name = "evil\x1b[2J\nname",
    .version = "1.0\r\x07",
#else
    .name = "faulty",
    .version = "0.0-faulty",
#endif
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
#if !defined(VARIANT_CLAIMS_NULL_SLOT)
    .allreduce = Allreduce,
#endif
};

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** out) {
  (void)host_abi_minor;
#if defined(VARIANT_CRASH_ENTRY)
  *g_null = 1;
#endif
#if defined(VARIANT_HUGE_TABLE)
  g_table.struct_size = 0xFFFFFFFFu;
#endif
#if defined(VARIANT_NO_TABLE)
  (void)g_table;
  *out = NULL;
#else
  *out = &g_table;
#endif
  return PLEXUS_OK;
}
