/* Must NOT compile: the entry function's signature is wrong (an int host
 * minor and a non-const table pointer), and the prototype in plexus/backend.h
 * lets the compiler say so instead of the host calling it wrongly. */
#include "plexus/backend.h"

PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(int host_abi_minor, plexus_backend_v1** out) {
  (void)host_abi_minor;
  *out = 0;
  return PLEXUS_OK;
}
