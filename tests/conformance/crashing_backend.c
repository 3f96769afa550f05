/* A backend that ends the process on three calls, for plexus-conformance's
 * own tests: the suite must name the call in flight (collective and
 * arguments) in its report, start the ranks again, and go on to the later
 * checks. It forwards everything to the real TCP plugin (PLEXUS_T_INNER
 * names its file) but claims only allreduce, broadcast and barrier, on int32
 * and float32, and, in the order the suite meets them:
 *
 *  - on rank 1, an in-place float32 sum allreduce of 13 elements sends itself
 *    SIGKILL, which no handler sees (in the "collectives" group);
 *  - on rank 0, a float32 broadcast of 1 element from the last rank calls
 *    abort() (SIGABRT, in the "collectives" group);
 *  - on the last rank, a broadcast of a NULL buf writes through the NULL
 *    pointer instead of refusing it (SIGSEGV, in the "arguments" group).
 *
 * Like UCX, init installs a SIGSEGV handler of its own, which writes a line
 * and hands the signal back to the handler it replaced: the suite's report
 * must still come out, and the two handlers must not pass the signal back and
 * forth for ever. With PLEXUS_T_SEGV_HANDLER=exit the handler ends the
 * process itself (_exit) instead, so the suite's report comes out only if
 * the suite put its own handler back in front after init.
 *
 * A test double for the suite's crash handling, never a stand-in for a
 * library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plexus/backend.h"

struct plexus_backend_ctx {
  plexus_backend_ctx* inner;
};
struct plexus_comm {
  plexus_comm* inner;
  uint32_t rank;
  uint32_t size;
  char error[128]; /* this layer's own refusal, else "" (the inner error applies) */
};
struct plexus_request {
  plexus_request* inner;
};

static const plexus_backend_v1* g_inner;
static struct plexus_backend_ctx g_ctx;

static struct sigaction g_replaced; /* what SIGSEGV did before init */
static int g_handler_exits;         /* PLEXUS_T_SEGV_HANDLER=exit */

static void OwnSegvHandler(int sig, siginfo_t* info, void* context) {
  static const char kLine[] = "crashing: the backend's own SIGSEGV handler ran\n";
  (void)info;
  (void)context;
  (void)!write(STDERR_FILENO, kLine, sizeof kLine - 1);
  if (g_handler_exits) _exit(128 + sig);
  sigaction(sig, &g_replaced, NULL);
  raise(sig);
}

static const uint32_t kDtypes = (1u << PLEXUS_DTYPE_INT32) | (1u << PLEXUS_DTYPE_FLOAT32);

static int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** out) {
  char path[4096] = "";
  if (!host->get_config || host->get_config(host->ctx, "PLEXUS_T_INNER", path, sizeof path) <= 0)
    return PLEXUS_ERR_INVALID_ARGUMENT;
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  plexus_backend_get_v1_fn entry =
      lib ? (plexus_backend_get_v1_fn)dlsym(lib, PLEXUS_BACKEND_ENTRY_V1) : NULL;
  if (!entry || entry(PLEXUS_ABI_MINOR, &g_inner) != PLEXUS_OK) return PLEXUS_ERR_SYSTEM;
  int32_t rc = g_inner->init(host, &g_ctx.inner);
  if (rc == PLEXUS_OK) *out = &g_ctx;
  char mode[16] = "";
  if (host->get_config(host->ctx, "PLEXUS_T_SEGV_HANDLER", mode, sizeof mode) > 0)
    g_handler_exits = strcmp(mode, "exit") == 0;
  struct sigaction own;
  memset(&own, 0, sizeof own);
  own.sa_sigaction = OwnSegvHandler;
  own.sa_flags = SA_SIGINFO;
  sigemptyset(&own.sa_mask);
  sigaction(SIGSEGV, &own, &g_replaced);
  return rc;
}
static void Finalize(plexus_backend_ctx* ctx) {
  g_inner->finalize(ctx->inner);
}
static int32_t Caps(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
  int32_t rc = g_inner->get_capabilities(ctx->inner, caps);
  uint32_t size = caps->struct_size;
  uint32_t flags = caps->flags, thread_level = caps->thread_level;
  if (rc != PLEXUS_OK) return rc;
  memset(caps, 0, size);
  caps->struct_size = size;
  caps->collectives =
      (1u << PLEXUS_COLL_ALLREDUCE) | (1u << PLEXUS_COLL_BROADCAST) | (1u << PLEXUS_COLL_BARRIER);
  caps->memory_types = 1u << PLEXUS_MEMORY_HOST;
  caps->dtypes = kDtypes;
  for (uint32_t op = PLEXUS_OP_SUM; op <= PLEXUS_OP_MAX_V1; ++op) caps->reduce_dtypes[op] = kDtypes;
  caps->flags = flags;
  caps->thread_level = thread_level;
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
  comm->size = c->size;
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
  const size_t n = strlen(comm->error);
  if (n == 0) return g_inner->comm_last_error(comm->inner, buf, len);
  if (buf && len) {
    const size_t m = n < len - 1 ? n : len - 1;
    memcpy(buf, comm->error, m);
    buf[m] = '\0';
  }
  return n;
}
/* What the inner backend would accept but this one does not claim is
 * refused here, so that the suite's "unclaimed" checks pass. */
static int32_t Refuse(plexus_comm* comm, const char* why, plexus_request** req) {
  strncpy(comm->error, why, sizeof comm->error - 1);
  *req = NULL;
  return PLEXUS_ERR_UNSUPPORTED;
}
static int Unclaimed(plexus_dtype_t dtype) {
  return dtype <= PLEXUS_DTYPE_MAX_V1 && !(kDtypes & (1u << dtype));
}
static int32_t Test(plexus_request* r) {
  return g_inner->test(r->inner);
}
static int32_t Wait(plexus_request* r, int64_t t) {
  return g_inner->wait(r->inner, t);
}
static int32_t Free(plexus_request* r) {
  if (!r) return PLEXUS_OK;
  int32_t rc = g_inner->request_free(r->inner);
  if (rc == PLEXUS_OK) free(r);
  return rc;
}
static size_t RequestError(plexus_request* r, char* buf, size_t len) {
  if (g_inner->abi_minor >= 1 && g_inner->request_error)
    return g_inner->request_error(r->inner, buf, len);
  if (buf && len) buf[0] = '\0';
  return 0;
}
static int32_t Wrap(int32_t rc, plexus_request* inner, plexus_request** req) {
  if (rc != PLEXUS_OK) {
    *req = NULL;
    return rc;
  }
  struct plexus_request* r = calloc(1, sizeof *r);
  r->inner = inner;
  *req = r;
  return PLEXUS_OK;
}
static int32_t Allreduce(plexus_comm* comm, const void* send, void* recv, uint64_t count,
                         plexus_dtype_t dtype, plexus_reduce_op_t op, const plexus_placement* where,
                         plexus_request** req) {
  plexus_request* inner = NULL;
  comm->error[0] = '\0';
  if (Unclaimed(dtype))
    return Refuse(comm, "crashing: allreduce supports int32 and float32 only", req);
  if (comm->rank == 1 && send == recv && count == 13 && dtype == PLEXUS_DTYPE_FLOAT32 &&
      op == PLEXUS_OP_SUM)
    raise(SIGKILL);
  int32_t rc = g_inner->allreduce(comm->inner, send, recv, count, dtype, op, where, &inner);
  return Wrap(rc, inner, req);
}
static int32_t Broadcast(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype,
                         uint32_t root, const plexus_placement* where, plexus_request** req) {
  plexus_request* inner = NULL;
  const uint32_t last = comm->size - 1;
  comm->error[0] = '\0';
  if (comm->rank == 0 && comm->size > 1 && root == last && count == 1 &&
      dtype == PLEXUS_DTYPE_FLOAT32)
    abort();
  if (comm->rank == last && buf == NULL && count > 0) {
    /* The bug: no NULL check before touching the buffer. */
    volatile unsigned char* p = (volatile unsigned char*)buf;
    p[0] = 1;
  }
  if (Unclaimed(dtype))
    return Refuse(comm, "crashing: broadcast supports int32 and float32 only", req);
  int32_t rc = g_inner->broadcast(comm->inner, buf, count, dtype, root, where, &inner);
  return Wrap(rc, inner, req);
}
static int32_t Barrier(plexus_comm* comm, plexus_request** req) {
  plexus_request* inner = NULL;
  comm->error[0] = '\0';
  int32_t rc = g_inner->barrier(comm->inner, &inner); /* before reading inner */
  return Wrap(rc, inner, req);
}

static const plexus_backend_v1 g_table = {
    .struct_size = sizeof(plexus_backend_v1),
    .abi_major = 1,
    .abi_minor = PLEXUS_ABI_MINOR,
    .name = "crashing",
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
    .broadcast = Broadcast,
    .barrier = Barrier,
    .request_error = RequestError,
};

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** out) {
  (void)host_abi_minor;
  *out = &g_table;
  return PLEXUS_OK;
}
