/* Compiles plexus/backend.h as strict C11 and pins the layout of every ABI
 * struct on LP64: a change here is an ABI break and needs a new major (or an
 * append plus a minor bump). Built with -std=c11 -pedantic -Werror. */
#include <stddef.h>
#include <stdio.h>

#include "plexus/backend.h"

#define PIN_SIZE(T, n) _Static_assert(sizeof(T) == (n), "size of " #T " changed")
#define PIN_AT(T, f, n) _Static_assert(offsetof(T, f) == (n), "offset of " #T "." #f " changed")

PIN_SIZE(plexus_placement, 24);
PIN_AT(plexus_placement, memory_type, 4);
PIN_AT(plexus_placement, device, 8);
PIN_AT(plexus_placement, stream, 16);

PIN_SIZE(plexus_capabilities, 64);
PIN_AT(plexus_capabilities, collectives, 4);
PIN_AT(plexus_capabilities, memory_types, 8);
PIN_AT(plexus_capabilities, dtypes, 12);
PIN_AT(plexus_capabilities, reduce_dtypes, 16);
PIN_AT(plexus_capabilities, flags, 48);
PIN_AT(plexus_capabilities, thread_level, 52);
PIN_AT(plexus_capabilities, max_outstanding, 56);

PIN_SIZE(plexus_host_v1, 56);
PIN_AT(plexus_host_v1, abi_major, 4);
PIN_AT(plexus_host_v1, abi_minor, 6);
PIN_AT(plexus_host_v1, ctx, 8);
PIN_AT(plexus_host_v1, log, 16);
PIN_AT(plexus_host_v1, get_config, 24);
PIN_AT(plexus_host_v1, oob_allgather, 32);
PIN_AT(plexus_host_v1, oob_broadcast, 40);
PIN_AT(plexus_host_v1, local_address, 48);

PIN_SIZE(plexus_comm_config_v1, 64); /* 48 in 1.0 */
PIN_AT(plexus_comm_config_v1, rank, 4);
PIN_AT(plexus_comm_config_v1, size, 8);
PIN_AT(plexus_comm_config_v1, local_rank, 12);
PIN_AT(plexus_comm_config_v1, local_size, 16);
PIN_AT(plexus_comm_config_v1, device, 20);
PIN_AT(plexus_comm_config_v1, timeout_ms, 24);
PIN_AT(plexus_comm_config_v1, name, 32);
PIN_AT(plexus_comm_config_v1, oob, 40);
PIN_AT(plexus_comm_config_v1, get_config, 48); /* 1.1 */
PIN_AT(plexus_comm_config_v1, config_ctx, 56); /* 1.1 */

PIN_SIZE(plexus_backend_v1, 264); /* 176 in 1.0, 184 in 1.1, 232 in 1.2, 248 in 1.3, 256 in 1.4 */
PIN_AT(plexus_backend_v1, abi_major, 4);
PIN_AT(plexus_backend_v1, abi_minor, 6);
PIN_AT(plexus_backend_v1, name, 8);
PIN_AT(plexus_backend_v1, version, 16);
PIN_AT(plexus_backend_v1, init, 24);
PIN_AT(plexus_backend_v1, finalize, 32);
PIN_AT(plexus_backend_v1, get_capabilities, 40);
PIN_AT(plexus_backend_v1, comm_create, 48);
PIN_AT(plexus_backend_v1, comm_destroy, 56);
PIN_AT(plexus_backend_v1, comm_abort, 64);
PIN_AT(plexus_backend_v1, comm_last_error, 72);
PIN_AT(plexus_backend_v1, test, 80);
PIN_AT(plexus_backend_v1, wait, 88);
PIN_AT(plexus_backend_v1, request_free, 96);
PIN_AT(plexus_backend_v1, allreduce, 104);
PIN_AT(plexus_backend_v1, broadcast, 112);
PIN_AT(plexus_backend_v1, reduce, 120);
PIN_AT(plexus_backend_v1, allgather, 128);
PIN_AT(plexus_backend_v1, reduce_scatter, 136);
PIN_AT(plexus_backend_v1, alltoall, 144);
PIN_AT(plexus_backend_v1, barrier, 152);
PIN_AT(plexus_backend_v1, send, 160);
PIN_AT(plexus_backend_v1, recv, 168);
PIN_AT(plexus_backend_v1, request_error, 176); /* 1.1 */
PIN_AT(plexus_backend_v1, gather, 184);        /* 1.2 */
PIN_AT(plexus_backend_v1, scatter, 192);
PIN_AT(plexus_backend_v1, allgatherv, 200);
PIN_AT(plexus_backend_v1, alltoallv, 208);
PIN_AT(plexus_backend_v1, allreduce_coalesced, 216);
PIN_AT(plexus_backend_v1, comm_split, 224);
PIN_AT(plexus_backend_v1, mem_alloc, 232);
PIN_AT(plexus_backend_v1, mem_free, 240);
PIN_AT(plexus_backend_v1, reduce_scatterv, 248); /* 1.4 */
PIN_AT(plexus_backend_v1, request_notify, 256);  /* 1.5 */

/* Codes are our own and stable. */
_Static_assert(PLEXUS_DTYPE_FLOAT64 == 12u && PLEXUS_OP_AVG == 5u, "codes changed");
_Static_assert(PLEXUS_COLL_COUNT_V1 == 9u && PLEXUS_COLL_GATHER == 9u, "codes changed");
_Static_assert(PLEXUS_COLL_ALLREDUCE_COALESCED == 13u, "codes changed");
_Static_assert(PLEXUS_COLL_REDUCE_SCATTERV == 14u, "codes changed");
_Static_assert(PLEXUS_COLL_REDUCE_SCATTERV < 32u, "collective bitmask overflow");

int main(void) {
  plexus_backend_get_v1_fn entry = 0;
  (void)entry;
  printf("plexus/backend.h compiles as C11; ABI %d.%d layout pinned\n", PLEXUS_ABI_MAJOR,
         PLEXUS_ABI_MINOR);
  return 0;
}
