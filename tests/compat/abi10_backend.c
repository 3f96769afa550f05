/* A backend built from the ABI 1.0 header (tests/compat/abi-1.0/plexus/
 * backend.h, the header as it was released, kept verbatim): its table is a
 * 1.0 table, struct_size 176 and abi_minor 0, with no request_error and none
 * of the 1.2 slots. The functions in it are the real TCP plugin's
 * (PLEXUS_T_INNER names its file), whose 1.0 slots have the same signatures:
 * so the host meets exactly what a 1.0 plugin shows it, and the TCP code
 * behind does the work. The 1.2 host must load it, run its 1.0 collectives,
 * refuse the 1.2 ones as unsupported (even if the TCP code's capabilities
 * claim them) and make groups with comm_create.
 *
 * A test double of our own seam (the loader's version handling), never a
 * stand-in for a library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "plexus/backend.h" /* the 1.0 header: -I tests/compat/abi-1.0 */

#if PLEXUS_ABI_MINOR != 0
#error "abi10_backend.c must be built against the ABI 1.0 header"
#endif

static plexus_backend_v1 g_table;

__attribute__((visibility("default"))) int32_t plexus_backend_get_v1(
    uint32_t host_abi_minor, const plexus_backend_v1** table_out) {
  if (!table_out) return PLEXUS_ERR_INVALID_ARGUMENT;
  *table_out = NULL;
  const char* path = getenv("PLEXUS_T_INNER");
  void* lib = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  plexus_backend_get_v1_fn entry =
      lib ? (plexus_backend_get_v1_fn)dlsym(lib, PLEXUS_BACKEND_ENTRY_V1) : NULL;
  const plexus_backend_v1* inner = NULL;
  if (!entry || entry(host_abi_minor, &inner) != PLEXUS_OK || !inner) {
    return PLEXUS_ERR_UNSUPPORTED; /* PLEXUS_T_INNER unset or not a plugin */
  }
  /* The 1.0 part of the inner table: every later table starts with it. */
  memcpy(&g_table, inner, sizeof g_table);
  g_table.struct_size = sizeof g_table;
  g_table.abi_minor = PLEXUS_ABI_MINOR;
  g_table.name = "tcp-abi-1.0";
  g_table.version = "the TCP plugin behind a table built from the ABI 1.0 header";
  *table_out = &g_table;
  return PLEXUS_OK;
}
