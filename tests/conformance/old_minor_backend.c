/* An older plugin under a 1.2 host, for plexus-conformance's own tests: the
 * suite must read a slot added in 1.N only when the table's abi_minor >= N
 * and its struct_size covers the slot, and must still pass such a plugin.
 * It forwards every 1.0 slot to the real TCP plugin (PLEXUS_T_INNER names
 * its file; the opaque pointers pass through unchanged) and claims only the
 * collectives of 1.0. Two builds:
 *
 *  - default: abi_minor 0 and a 1.0-size table (struct_size =
 *    offsetof(plexus_backend_v1, request_error)); the bytes past it hold
 *    garbage, which no reader may take for slots;
 *  - VARIANT_11_LONG: abi_minor 1 with a table as long as a 1.2 one, whose
 *    1.2 slots hold garbage: their place is inside struct_size, but a 1.1
 *    table has no such slots, so abi_minor alone must keep them unread; and
 *    its capabilities also claim the five 1.2 collective codes, which a
 *    reader of a 1.1 table must ignore as well.
 *
 * A test double for the suite, never a stand-in for a backend. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#include "plexus/backend.h"

static const plexus_backend_v1* g_inner;

static int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** out) {
  char path[4096] = "";
  if (!host->get_config || host->get_config(host->ctx, "PLEXUS_T_INNER", path, sizeof path) <= 0)
    return PLEXUS_ERR_INVALID_ARGUMENT;
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  plexus_backend_get_v1_fn entry =
      lib ? (plexus_backend_get_v1_fn)dlsym(lib, PLEXUS_BACKEND_ENTRY_V1) : NULL;
  if (!entry || entry(PLEXUS_ABI_MINOR, &g_inner) != PLEXUS_OK) return PLEXUS_ERR_SYSTEM;
  return g_inner->init(host, out);
}
static void Finalize(plexus_backend_ctx* ctx) {
  g_inner->finalize(ctx);
}
static int32_t Caps(plexus_backend_ctx* ctx, plexus_capabilities* caps) {
  int32_t rc = g_inner->get_capabilities(ctx, caps);
  if (rc != PLEXUS_OK) return rc;
  caps->collectives &= (1u << PLEXUS_COLL_COUNT_V1) - 1; /* 1.0's only */
#if defined(VARIANT_11_LONG)
  /* Also the bits of the five 1.2 collectives, as a plugin that passes on
   * another's capabilities may: no reader may take them for collectives of
   * a 1.1 table, which has no slots for them. */
  caps->collectives |= 0x3e00u;
#endif
  return rc;
}
static int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* c,
                          plexus_comm** out, char* err, size_t len) {
  return g_inner->comm_create(ctx, c, out, err, len);
}
static void CommDestroy(plexus_comm* comm) {
  g_inner->comm_destroy(comm);
}
static int32_t CommAbort(plexus_comm* comm) {
  return g_inner->comm_abort(comm);
}
static size_t LastError(plexus_comm* comm, char* buf, size_t len) {
  return g_inner->comm_last_error(comm, buf, len);
}
static int32_t Test(plexus_request* r) {
  return g_inner->test(r);
}
static int32_t Wait(plexus_request* r, int64_t t) {
  return g_inner->wait(r, t);
}
static int32_t Free(plexus_request* r) {
  return g_inner->request_free(r);
}
static int32_t Allreduce(plexus_comm* c, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
                         plexus_reduce_op_t op, const plexus_placement* p, plexus_request** q) {
  return g_inner->allreduce(c, s, r, n, dt, op, p, q);
}
static int32_t Broadcast(plexus_comm* c, void* b, uint64_t n, plexus_dtype_t dt, uint32_t root,
                         const plexus_placement* p, plexus_request** q) {
  return g_inner->broadcast(c, b, n, dt, root, p, q);
}
static int32_t Reduce(plexus_comm* c, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
                      plexus_reduce_op_t op, uint32_t root, const plexus_placement* p,
                      plexus_request** q) {
  return g_inner->reduce(c, s, r, n, dt, op, root, p, q);
}
static int32_t Allgather(plexus_comm* c, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
                         const plexus_placement* p, plexus_request** q) {
  return g_inner->allgather(c, s, r, n, dt, p, q);
}
static int32_t ReduceScatter(plexus_comm* c, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
                             plexus_reduce_op_t op, const plexus_placement* p, plexus_request** q) {
  return g_inner->reduce_scatter(c, s, r, n, dt, op, p, q);
}
static int32_t Alltoall(plexus_comm* c, const void* s, void* r, uint64_t n, plexus_dtype_t dt,
                        const plexus_placement* p, plexus_request** q) {
  return g_inner->alltoall(c, s, r, n, dt, p, q);
}
static int32_t Barrier(plexus_comm* c, plexus_request** q) {
  return g_inner->barrier(c, q);
}
static int32_t Send(plexus_comm* c, const void* b, uint64_t n, plexus_dtype_t dt, uint32_t peer,
                    const plexus_placement* p, plexus_request** q) {
  return g_inner->send(c, b, n, dt, peer, p, q);
}
static int32_t Recv(plexus_comm* c, void* b, uint64_t n, plexus_dtype_t dt, uint32_t peer,
                    const plexus_placement* p, plexus_request** q) {
  return g_inner->recv(c, b, n, dt, peer, p, q);
}

/* Writable: the entry function fills the garbage in. */
static plexus_backend_v1 g_table = {
    .struct_size = sizeof(plexus_backend_v1),
    .abi_major = 1,
    .abi_minor = 0,
    .name = "oldminor",
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
    .reduce = Reduce,
    .allgather = Allgather,
    .reduce_scatter = ReduceScatter,
    .alltoall = Alltoall,
    .barrier = Barrier,
    .send = Send,
    .recv = Recv,
};

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** out) {
  (void)host_abi_minor;
#if defined(VARIANT_11_LONG)
  const size_t garbage = offsetof(plexus_backend_v1, gather);
  g_table.abi_minor = 1;
  g_table.name = "oldminor11";
  g_table.request_error = NULL;
#else
  const size_t garbage = offsetof(plexus_backend_v1, request_error);
  g_table.struct_size = (uint32_t)garbage;
#endif
  /* A reader that took these bytes for slots would call address 0x0101... */
  memset((char*)&g_table + garbage, 0x01, sizeof g_table - garbage);
  *out = &g_table;
  return PLEXUS_OK;
}
