/* STUB — being written now; the status codes below are final. */
#ifndef PLEXUS_BACKEND_H
#define PLEXUS_BACKEND_H
#include <stddef.h>
#include <stdint.h>
#define PLEXUS_OK 0
#define PLEXUS_IN_PROGRESS 1
#define PLEXUS_ERR_INVALID_ARGUMENT (-1)
#define PLEXUS_ERR_INVALID_USAGE (-2)
#define PLEXUS_ERR_UNSUPPORTED (-3)
#define PLEXUS_ERR_SYSTEM (-4)
#define PLEXUS_ERR_INTERNAL (-5)
#define PLEXUS_ERR_REMOTE (-6)
#define PLEXUS_ERR_TIMEOUT (-7)
#define PLEXUS_ERR_ABORTED (-8)
#endif
