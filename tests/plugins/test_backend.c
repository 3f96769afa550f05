/* A deliberately minimal backend in plain C, built in several broken
 * variants to test the loader. It is a test double for our own seam (the
 * plugin loader), never a stand-in for a real library. Exactly one VARIANT_*
 * macro is defined per build:
 *   VARIANT_GOOD         valid 1.0 table, supports nothing but barrier
 *   VARIANT_NEW_MAJOR    exports only plexus_backend_get_v2
 *   VARIANT_OLD_MINOR    table truncated before the collective slots (an
 *                        older, smaller 1.x table); slots past struct_size
 *                        hold garbage that the host must never read
 *   VARIANT_NULL_SLOT    the required `wait` slot is NULL
 *   VARIANT_NO_ENTRY     exports no entry symbol at all
 *   VARIANT_REFUSES      the entry function refuses the host
 *   VARIANT_WRONG_MAJOR  the v1 entry returns a table claiming major 2
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "plexus/backend.h"

#define EXPORT __attribute__((visibility("default")))

struct plexus_backend_ctx {
  int unused;
};
struct plexus_request {
  int unused;
};

static struct plexus_backend_ctx g_ctx;
static struct plexus_request g_req;

static int32_t Init(const plexus_host_v1* host, plexus_backend_ctx** out) {
  (void)host;
  *out = &g_ctx;
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
#if defined(VARIANT_GOOD)
  caps->collectives = 1u << PLEXUS_COLL_BARRIER;
#endif
  caps->memory_types = 1u << PLEXUS_MEMORY_HOST;
  caps->thread_level = PLEXUS_THREAD_SERIALIZED;
  return PLEXUS_OK;
}
static int32_t CommCreate(plexus_backend_ctx* ctx, const plexus_comm_config_v1* c,
                          plexus_comm** out, char* err, size_t len) {
  (void)ctx;
  (void)c;
  *out = (plexus_comm*)&g_ctx; /* never dereferenced */
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
static int32_t Barrier(plexus_comm* comm, plexus_request** req) {
  (void)comm;
  *req = &g_req;
  return PLEXUS_OK;
}

static plexus_backend_v1 g_table = {
    .struct_size = sizeof(plexus_backend_v1),
    .abi_major = 1,
    .abi_minor = PLEXUS_ABI_MINOR,
    .name = "test",
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
};

static const plexus_backend_v1* Table(void) {
  g_table.barrier = Barrier;
#if defined(VARIANT_OLD_MINOR)
  g_table.struct_size = (uint32_t)offsetof(plexus_backend_v1, allreduce);
  g_table.abi_minor = 0;
  g_table.name = "oldminor";
  /* Garbage past struct_size: a host that read it would call address 0x0101... */
  memset((char*)&g_table + offsetof(plexus_backend_v1, allreduce), 0x01,
         sizeof g_table - offsetof(plexus_backend_v1, allreduce));
#elif defined(VARIANT_NULL_SLOT)
  g_table.wait = NULL;
#elif defined(VARIANT_WRONG_MAJOR)
  g_table.abi_major = 2;
#endif
  return &g_table;
}

#if defined(VARIANT_NEW_MAJOR)
EXPORT int32_t plexus_backend_get_v2(uint32_t host_abi_minor, const void** out) {
  (void)host_abi_minor;
  *out = Table();
  return PLEXUS_OK;
}
#elif defined(VARIANT_NO_ENTRY)
EXPORT int plexus_not_a_backend(void) {
  return Table() != NULL;
}
#else
EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor, const plexus_backend_v1** out) {
  (void)host_abi_minor;
#if defined(VARIANT_REFUSES)
  *out = NULL;
  (void)Table;
  return PLEXUS_ERR_UNSUPPORTED;
#else
  *out = Table();
  return PLEXUS_OK;
#endif
}
#endif
