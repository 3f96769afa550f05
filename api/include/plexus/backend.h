/*
 * plexus/backend.h — the Plexus collective-backend ABI, major version 1.
 *
 * This is the only file a backend vendor reads. A backend is a shared library
 * (conventionally libplexus-<name>.so) that exports ONE function per ABI major
 * it implements:
 *
 *     int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
 *                                   const plexus_backend_v1** table_out);
 *
 * The host (libplexus) dlopen()s the library with RTLD_NOW | RTLD_LOCAL,
 * probes the newest major it knows first, calls the entry function with its
 * own minor version, and then only ever talks to the backend through the
 * returned table. Build the library with -fvisibility=hidden and export only
 * the entry function: two backends loaded into one process must never see each
 * other's symbols.
 *
 * Rules of the road
 *  - C11, no other includes than <stddef.h> and <stdint.h>. No C++ exception,
 *    longjmp or abort() may leave a backend through any function below.
 *  - Every struct starts with its size (struct_size) so that both sides can
 *    tell which fields the other one knows. Within major 1 structs only grow
 *    at the end, under an "added in 1.N" marker. A reader must check
 *    struct_size (and, for tables, abi_minor) before touching a later field.
 *  - A NULL optional function slot means "not supported". Required slots are
 *    marked REQUIRED; a table with a NULL required slot is rejected.
 *  - Counts are element counts, uint64_t. Ranks are uint32_t.
 *  - All enumerations are uint32_t codes with explicit values of our own. They
 *    never reuse NCCL or MPI values; a backend maps them to its library's.
 *  - Each function's comment states four facts: whether it BLOCKS, who OWNS
 *    each pointer, what STATE is left on failure, and which THREADS may call it.
 */
#ifndef PLEXUS_BACKEND_H
#define PLEXUS_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------- */
/* Versions                                                                  */
/* ------------------------------------------------------------------------- */

/* The ABI this header describes. The major changes only when a struct or a
 * function signature changes incompatibly; each major has its own entry symbol
 * and its own header section. The minor grows when fields are appended. */
#define PLEXUS_ABI_MAJOR 1
#define PLEXUS_ABI_MINOR 5

/* Name of the entry function of ABI major 1, for dlsym(). */
#define PLEXUS_BACKEND_ENTRY_V1 "plexus_backend_get_v1"

/* Put in front of the definition of the entry function (and of nothing else):
 * it exports the function even under -fvisibility=hidden. The prototype at the
 * end of this header then lets the compiler check its signature. */
#if defined(__GNUC__) || defined(__clang__)
#define PLEXUS_BACKEND_EXPORT __attribute__((visibility("default")))
#else
#define PLEXUS_BACKEND_EXPORT
#endif

/* History of major 1:
 *  1.0  the first table.
 *  1.1  plexus_comm_config_v1.get_config/config_ctx (each communicator's own
 *       configuration) and plexus_backend_v1.request_error (an error string
 *       per request). A 1.1 backend works with a 1.0 host and the reverse:
 *       each side reads a 1.1 field only when struct_size says it is there.
 *  1.2  groups and uneven collectives: plexus_backend_v1.gather, scatter,
 *       allgatherv, alltoallv, allreduce_coalesced and comm_split, with
 *       collective codes 9-13. A host without a comm_split slot makes a
 *       group with comm_create over the group's ranks. 1.0 and 1.1 backends
 *       keep working under a 1.2 host (the new collectives are refused as
 *       UNSUPPORTED, groups are made with comm_create).
 *  1.3  shared buffers: plexus_backend_v1.mem_alloc and mem_free (host
 *       memory a backend runs collectives on without copies; DDP's
 *       buckets). A host without them, or a backend without them, uses
 *       memory of its own; nothing else changes.
 *  1.4  plexus_backend_v1.reduce_scatterv (reduce_scatter of uneven blocks,
 *       collective code 14). An older backend has none: the host refuses
 *       it as UNSUPPORTED.
 *  1.5  plexus_backend_v1.request_notify (a function the backend calls
 *       when a request completes, so that the host need not keep a thread
 *       waiting on it). Without it the host waits on a thread of its own. */

/* ------------------------------------------------------------------------- */
/* Status codes                                                              */
/* ------------------------------------------------------------------------- */
/* Every function that can fail returns an int32_t status: 0 is success, a
 * positive value means "not finished yet", a negative value is an error class.
 * Only test() may return a positive value (PLEXUS_IN_PROGRESS); a positive
 * value from any other function is a backend bug, and the host treats it as
 * "not finished" (wait) or as PLEXUS_ERR_INTERNAL (everything else), never as
 * success. The detail of an error is in request_error() (1.1) or else the
 * communicator's last-error string. */
#define PLEXUS_OK 0
#define PLEXUS_IN_PROGRESS 1             /* request not complete; ask again */
#define PLEXUS_ERR_INVALID_ARGUMENT (-1) /* a bad pointer, count, dtype, op, rank, ... */
#define PLEXUS_ERR_INVALID_USAGE (-2)    /* valid arguments at the wrong time (e.g. after abort) */
#define PLEXUS_ERR_UNSUPPORTED (-3)      /* valid, but this backend cannot do it */
#define PLEXUS_ERR_SYSTEM (-4)           /* the OS or the vendor library failed (errno, MPI, ...) */
#define PLEXUS_ERR_INTERNAL (-5)         /* a bug in the backend */
#define PLEXUS_ERR_REMOTE (-6)           /* a peer failed, vanished or disagreed (mismatch) */
#define PLEXUS_ERR_TIMEOUT (-7)          /* the deadline passed; see each function */
#define PLEXUS_ERR_ABORTED (-8)          /* the communicator was aborted */

/* ------------------------------------------------------------------------- */
/* Data types, reduction operators, memory types                             */
/* ------------------------------------------------------------------------- */

typedef uint32_t plexus_dtype_t;
#define PLEXUS_DTYPE_INT8 1u
#define PLEXUS_DTYPE_UINT8 2u
#define PLEXUS_DTYPE_INT16 3u
#define PLEXUS_DTYPE_UINT16 4u
#define PLEXUS_DTYPE_INT32 5u
#define PLEXUS_DTYPE_UINT32 6u
#define PLEXUS_DTYPE_INT64 7u
#define PLEXUS_DTYPE_UINT64 8u
#define PLEXUS_DTYPE_FLOAT16 9u   /* IEEE 754 binary16 */
#define PLEXUS_DTYPE_BFLOAT16 10u /* upper 16 bits of an IEEE binary32 */
#define PLEXUS_DTYPE_FLOAT32 11u
#define PLEXUS_DTYPE_FLOAT64 12u
#define PLEXUS_DTYPE_MAX_V1 12u /* largest dtype code defined in 1.0 */

typedef uint32_t plexus_reduce_op_t;
#define PLEXUS_OP_SUM 1u
#define PLEXUS_OP_PROD 2u
#define PLEXUS_OP_MIN 3u
#define PLEXUS_OP_MAX 4u
/* Sum, then divide by the communicator size. Integers divide with C
 * truncation toward zero; floats are divided once, after the full sum. */
#define PLEXUS_OP_AVG 5u
#define PLEXUS_OP_MAX_V1 5u

typedef uint32_t plexus_memory_type_t;
#define PLEXUS_MEMORY_HOST 1u /* ordinary pageable host memory */
#define PLEXUS_MEMORY_CUDA 2u /* CUDA device memory of plexus_placement.device */

/* Where an operation's buffers live and what orders it. Passed by pointer to
 * every collective; a NULL pointer means host memory and no stream. */
typedef struct plexus_placement {
  uint32_t struct_size;             /* sizeof(plexus_placement) as the caller knows it */
  plexus_memory_type_t memory_type; /* PLEXUS_MEMORY_* of every buffer of the call */
  int32_t device;                   /* device ordinal for PLEXUS_MEMORY_CUDA, else -1 */
  uint32_t reserved;                /* must be 0 */
  /* cudaStream_t (or the vendor's stream) the operation is ordered on, or
   * NULL. Only meaningful when the backend has PLEXUS_CAP_STREAM_ORDERED;
   * then "complete" means "enqueued on the stream". Not owned. */
  void* stream;
} plexus_placement;

/* ------------------------------------------------------------------------- */
/* Capabilities                                                              */
/* ------------------------------------------------------------------------- */

/* Collective codes; also bit positions in plexus_capabilities.collectives
 * (bit = 1u << code) and the "collective" field of error messages. */
typedef uint32_t plexus_collective_t;
#define PLEXUS_COLL_ALLREDUCE 0u
#define PLEXUS_COLL_BROADCAST 1u
#define PLEXUS_COLL_REDUCE 2u
#define PLEXUS_COLL_ALLGATHER 3u
#define PLEXUS_COLL_REDUCE_SCATTER 4u
#define PLEXUS_COLL_ALLTOALL 5u
#define PLEXUS_COLL_BARRIER 6u
#define PLEXUS_COLL_SEND 7u
#define PLEXUS_COLL_RECV 8u
#define PLEXUS_COLL_COUNT_V1 9u /* codes 0-8: ABI 1.0 */
/* added in 1.2 */
#define PLEXUS_COLL_GATHER 9u
#define PLEXUS_COLL_SCATTER 10u
#define PLEXUS_COLL_ALLGATHERV 11u
#define PLEXUS_COLL_ALLTOALLV 12u
#define PLEXUS_COLL_ALLREDUCE_COALESCED 13u
#define PLEXUS_COLL_COUNT_V1_2 14u /* codes 0-13: ABI 1.2 */
/* added in 1.4 */
#define PLEXUS_COLL_REDUCE_SCATTERV 14u

/* The color of comm_split (1.2) for a rank that joins no group. */
#define PLEXUS_SPLIT_NO_COLOR 0xFFFFFFFFu

/* Bits of plexus_capabilities.flags. */
#define PLEXUS_CAP_IN_PLACE 0x1u       /* sendbuf == recvbuf accepted where documented */
#define PLEXUS_CAP_STREAM_ORDERED 0x2u /* honours plexus_placement.stream */
/* comm_abort interrupts pending operations: once an aborted request has
 * completed, the backend no longer touches its buffers. Without this flag
 * (e.g. MPI, which cannot interrupt a collective) abort still completes every
 * pending request promptly with PLEXUS_ERR_ABORTED, but the library underneath
 * may go on using those buffers until the operation ends on its own or the
 * process exits: the caller must keep them alive. */
#define PLEXUS_CAP_ABORT 0x4u

/* Thread levels, as in MPI, for plexus_capabilities.thread_level. */
#define PLEXUS_THREAD_SERIALIZED 1u /* one thread at a time per communicator */
#define PLEXUS_THREAD_MULTIPLE 2u   /* any thread, any time */

/* What a backend can do. Filled by get_capabilities(); the host refuses any
 * call outside it with PLEXUS_ERR_UNSUPPORTED naming backend, collective,
 * dtype and memory type, before the backend sees the call. */
typedef struct plexus_capabilities {
  uint32_t struct_size;  /* set by the HOST to sizeof as it knows it; backend fills up to that */
  uint32_t collectives;  /* bit (1u << PLEXUS_COLL_*) per supported collective */
  uint32_t memory_types; /* bit (1u << PLEXUS_MEMORY_*) per supported memory type */
  uint32_t dtypes;       /* bit (1u << PLEXUS_DTYPE_*) per dtype movable by data-only collectives */
  /* reduce_dtypes[op] = bit (1u << PLEXUS_DTYPE_*) per dtype that reduction op
   * supports, for allreduce, reduce, reduce_scatter and (1.2) allreduce_coalesced.
   * Index 0 is unused. */
  uint32_t reduce_dtypes[8];
  uint32_t flags;           /* PLEXUS_CAP_* bits */
  uint32_t thread_level;    /* PLEXUS_THREAD_* */
  uint32_t max_outstanding; /* requests a communicator can have posted at once; 0 = no limit */
  uint32_t reserved;        /* 0 */
} plexus_capabilities;

/* ------------------------------------------------------------------------- */
/* Host services                                                             */
/* ------------------------------------------------------------------------- */

#define PLEXUS_LOG_ERROR 1
#define PLEXUS_LOG_WARN 2
#define PLEXUS_LOG_INFO 3
#define PLEXUS_LOG_DEBUG 4
#define PLEXUS_LOG_TRACE 5

/* Opaque handle of one communicator's out-of-band channel; see oob_allgather. */
typedef struct plexus_oob plexus_oob;

/* What the host offers a backend. Given to init(); it and everything it points
 * to stay valid until finalize() returns. A backend must reach the host only
 * through this table: never through globals or symbols of the executable. */
typedef struct plexus_host_v1 {
  uint32_t struct_size; /* sizeof(plexus_host_v1) as the host knows it */
  uint16_t abi_major;   /* PLEXUS_ABI_MAJOR of the host */
  uint16_t abi_minor;   /* PLEXUS_ABI_MINOR of the host */
  void* ctx;            /* first argument of every function below; opaque */

  /* Writes one log line. level is PLEXUS_LOG_*; message is NUL-terminated,
   * without trailing newline, borrowed for the call. Never blocks for long;
   * thread-safe. May be NULL: a backend must then stay silent. */
  void (*log)(void* ctx, int32_t level, const char* message);

  /* Looks up a PROCESS-wide configuration value (the environment), e.g. for
   * init(). Copies it NUL-terminated into buf[0..len) and returns its length
   * (without NUL); returns -1 if the key is not set. A return >= len means it
   * was truncated. Non-blocking; thread-safe. May be NULL: then nothing is
   * configured. Inside comm_create, read a communicator's settings with
   * plexus_comm_config_v1.get_config (1.1) instead: it also sees the values
   * the application gave that one communicator. */
  int64_t (*get_config)(void* ctx, const char* key, char* buf, size_t len);

  /* Out-of-band allgather among the ranks of the communicator that owns oob:
   * every rank contributes bytes_per_rank bytes from in; out receives
   * size * bytes_per_rank bytes ordered by rank. Collective: every rank must
   * call it the same number of times in the same order with the same
   * bytes_per_rank. BLOCKS until done or timeout_ms (returns
   * PLEXUS_ERR_TIMEOUT). in/out are owned by the caller. Only to be called
   * from inside comm_create (on the calling thread). */
  int32_t (*oob_allgather)(void* ctx, plexus_oob* oob, const void* in, void* out,
                           uint64_t bytes_per_rank, int64_t timeout_ms);

  /* Out-of-band broadcast of bytes from rank root's buf into every other
   * rank's buf. Same rules as oob_allgather. */
  int32_t (*oob_broadcast)(void* ctx, plexus_oob* oob, void* buf, uint64_t bytes, uint32_t root,
                           int64_t timeout_ms);

  /* Numeric IP address (NUL-terminated) of this host's interface that reaches
   * the job's rendezvous point; a backend that opens sockets binds there
   * unless configured otherwise. "" when unknown (single process). */
  const char* local_address;
} plexus_host_v1;

/* ------------------------------------------------------------------------- */
/* Communicators and requests                                                */
/* ------------------------------------------------------------------------- */

/* Opaque objects, defined by each backend. */
typedef struct plexus_backend_ctx plexus_backend_ctx; /* one per loaded backend */
typedef struct plexus_comm plexus_comm;               /* one per communicator */
typedef struct plexus_request plexus_request;         /* one per posted operation */

/* Everything comm_create needs. Owned by the host; borrowed for the call. */
typedef struct plexus_comm_config_v1 {
  uint32_t struct_size; /* sizeof(plexus_comm_config_v1) as the host knows it */
  uint32_t rank;        /* this process's rank, 0 <= rank < size */
  uint32_t size;        /* number of ranks, >= 1 */
  uint32_t local_rank;  /* rank among the processes on this host */
  uint32_t local_size;  /* processes on this host */
  int32_t device;       /* device ordinal this rank should use, or -1 for none */
  /* Default deadline for blocking work of this communicator, in ms (> 0).
   * Pending operations that make no progress for this long fail with
   * PLEXUS_ERR_TIMEOUT or PLEXUS_ERR_REMOTE naming the peer. */
  int64_t timeout_ms;
  /* Job-unique, rank-independent name of this communicator (e.g. "plexus/0"),
   * NUL-terminated. Useful in log lines and error messages. */
  const char* name;
  plexus_oob* oob; /* this communicator's out-of-band channel; valid during comm_create only */

  /* --- added in 1.1: read only if struct_size covers them --- */

  /* This communicator's configuration: the values the application set for it
   * (plexus::CommunicatorOptions::config), else the environment. Same
   * contract as plexus_host_v1.get_config. Both pointers are owned by the
   * host and stay valid until comm_destroy() of this communicator returns, so
   * the backend may keep them. Non-blocking; thread-safe. May be NULL. */
  int64_t (*get_config)(void* config_ctx, const char* key, char* buf, size_t len);
  void* config_ctx; /* first argument of get_config; opaque */
} plexus_comm_config_v1;

/* ------------------------------------------------------------------------- */
/* The backend table, ABI major 1                                            */
/* ------------------------------------------------------------------------- */
/*
 * Request protocol, for every collective below:
 *  - A collective POSTS the operation and returns at once with *req_out set
 *    (PLEXUS_OK), or fails with *req_out set to NULL and nothing posted.
 *  - Operations of one communicator run in the order they were posted; every
 *    rank must post the same collectives in the same order (send/recv pair up
 *    per peer in posting order). A backend may keep any number of requests in
 *    flight (capabilities.max_outstanding limits it) and completes them in
 *    posting order.
 *  - Buffers stay owned by the caller and must stay valid and untouched
 *    (recvbuf unread) until the request completes. Once a request has
 *    completed successfully the backend never touches its buffers again; the
 *    same holds after an error or ABORTED if PLEXUS_CAP_ABORT is set (see
 *    there for backends that cannot interrupt an operation).
 *  - count == 0 is a real operation: it takes its place in the posting order
 *    and completes, but a backend may complete it without talking to peers.
 *    So every rank must post it with count 0 (a zero-count send pairs only
 *    with a zero-count recv), and it never synchronises (it is no barrier).
 *  - In-place: passing sendbuf == recvbuf is allowed where documented if
 *    PLEXUS_CAP_IN_PLACE is set.
 *  - placement may be NULL (host memory, no stream).
 *
 * Request states:
 *
 *     post --OK--> PENDING --(completes)--> DONE(OK | error) --request_free--> gone
 *                     |   test: IN_PROGRESS       test/wait: the same status every time
 *                     |   wait: TIMEOUT (still PENDING)
 *                     +--comm_abort--> DONE(ABORTED), promptly
 *
 * Two deadlines, not to be confused:
 *  - plexus_comm_config_v1.timeout_ms is the OPERATION's: a pending
 *    operation that makes no progress for that long completes (DONE) with
 *    PLEXUS_ERR_TIMEOUT, or PLEXUS_ERR_REMOTE naming the peer it waited for,
 *    whether or not anybody is waiting on it.
 *  - wait(req, timeout_ms) bounds only the WAIT: when it expires, wait
 *    returns PLEXUS_ERR_TIMEOUT and the request stays PENDING. test() tells
 *    the two TIMEOUTs apart (IN_PROGRESS vs the final TIMEOUT).
 *
 * After a failure:
 *  - A post that fails with INVALID_ARGUMENT or UNSUPPORTED posted nothing;
 *    the communicator stays usable.
 *  - After any other failure (a posted operation completed with REMOTE,
 *    TIMEOUT, SYSTEM or INTERNAL; or ABORTED) the communicator is BROKEN:
 *    later posts may fail (with the same class) and pending requests may
 *    fail too. Only test, wait, request_free, request_error,
 *    comm_last_error, comm_abort and comm_destroy remain meaningful; the
 *    application makes a new communicator. (As in NCCL and MPI: a collective
 *    that failed on one rank has left the others somewhere unknown.)
 */
typedef struct plexus_backend_v1 {
  uint32_t struct_size; /* sizeof(plexus_backend_v1) as the backend was built */
  uint16_t abi_major;   /* must be 1 */
  uint16_t abi_minor;   /* PLEXUS_ABI_MINOR the backend was built with */
  const char* name;     /* short backend name, e.g. "tcp"; static storage */
  const char* version;  /* implementation version, e.g. "0.1.0 (Open MPI 4.1.4)"; static storage */

  /* REQUIRED. Initialises the backend for this process. BLOCKS (may start
   * threads or initialise the vendor library). host is owned by the host and
   * outlives the backend context. On success *ctx_out is owned by the host
   * and released with finalize(). On failure nothing is left to clean up and
   * a message has been logged through host->log if it is non-NULL.
   * Called once per loaded library, from one thread. */
  int32_t (*init)(const plexus_host_v1* host, plexus_backend_ctx** ctx_out);

  /* REQUIRED. Releases ctx after every communicator was destroyed. BLOCKS.
   * ctx is invalid afterwards. Called from one thread. */
  void (*finalize)(plexus_backend_ctx* ctx);

  /* REQUIRED. Fills caps, whose struct_size the host has set, with what this
   * backend supports in this process. Non-blocking. caps is owned by the
   * caller. On failure caps is unspecified. Thread-safe. */
  int32_t (*get_capabilities)(plexus_backend_ctx* ctx, plexus_capabilities* caps);

  /* REQUIRED. Creates a communicator. COLLECTIVE and BLOCKING: every rank of
   * config calls it, and it may use the out-of-band channel of config->oob
   * for bootstrap; returns PLEXUS_ERR_TIMEOUT after config->timeout_ms. config
   * is borrowed; on success *comm_out is owned by the host (comm_destroy). On
   * failure *comm_out is NULL, nothing needs cleaning up, and error_buf (owned
   * by the caller, error_len bytes, may be NULL) holds a NUL-terminated reason.
   * Threads: one at a time per ctx. */
  int32_t (*comm_create)(plexus_backend_ctx* ctx, const plexus_comm_config_v1* config,
                         plexus_comm** comm_out, char* error_buf, size_t error_len);

  /* REQUIRED. Destroys comm. Precondition: every request of comm has
   * completed and been freed (the host guarantees it: it aborts and drains
   * pending requests first). A backend should still not hang if a buggy
   * caller breaks this: it may abort what is left, but must not free
   * requests the caller still holds. Does not talk to peers (a peer may be
   * dead). BLOCKS until the backend's threads for comm have stopped, bounded.
   * comm is invalid afterwards. Never fails. Not concurrently with any other
   * call on comm. */
  void (*comm_destroy)(plexus_comm* comm);

  /* REQUIRED. Aborts comm: every pending request completes promptly with
   * PLEXUS_ERR_ABORTED, later posts fail with PLEXUS_ERR_ABORTED, and the
   * communicator is BROKEN. With PLEXUS_CAP_ABORT, once a request has
   * completed so its buffers are the caller's again (the backend has stopped
   * reading and writing them); without it, see PLEXUS_CAP_ABORT.
   * LOCAL: it neither waits for nor tells peers; they learn through their own
   * failure detection (a closed connection, or their timeout_ms), and may
   * report PLEXUS_ERR_REMOTE naming this rank. Non-blocking (or bounded).
   * Callable from ANY thread, also while another thread is inside wait() on
   * a request of comm. Idempotent; returns PLEXUS_OK. */
  int32_t (*comm_abort)(plexus_comm* comm);

  /* REQUIRED. Copies the most recent error message of comm, NUL-terminated,
   * into buf (owned by the caller, len bytes) and returns its full length
   * (without NUL); returns 0 and writes "" if there was none. Non-blocking.
   * Thread-safe. The message names the operation and, for remote failures,
   * the peer rank. Every failing call must leave a message: the host says
   * "the backend gave no message" otherwise. With several requests failing
   * it is only the latest; request_error (1.1) is per request. */
  size_t (*comm_last_error)(plexus_comm* comm, char* buf, size_t len);

  /* REQUIRED. Non-blocking progress check (it may drive progress, but it
   * never waits): PLEXUS_OK when req completed successfully,
   * PLEXUS_IN_PROGRESS when not yet, or the error it failed with (the same
   * error on every later call). Any thread; not concurrently with
   * request_free(req). */
  int32_t (*test)(plexus_request* req);

  /* REQUIRED. BLOCKS until req completes or timeout_ms elapses (0 = do not
   * block; negative = the communicator's timeout_ms). Returns exactly one of:
   * PLEXUS_OK (completed successfully), the negative status the request
   * completed with, or PLEXUS_ERR_TIMEOUT while it is still pending -- never
   * PLEXUS_IN_PROGRESS or another positive value, also not for timeout_ms 0.
   * After a TIMEOUT the request stays valid and pending (ask test() to tell
   * it from a request that completed with TIMEOUT). Any thread; several
   * threads may wait on different requests of one communicator at once. */
  int32_t (*wait)(plexus_request* req, int64_t timeout_ms);

  /* REQUIRED. Releases a completed request (test/wait returned anything but
   * PLEXUS_IN_PROGRESS/PLEXUS_ERR_TIMEOUT). Freeing a pending request returns
   * PLEXUS_ERR_INVALID_USAGE and changes nothing. NULL is a no-op returning
   * PLEXUS_OK. Non-blocking. Any thread, once per request. */
  int32_t (*request_free)(plexus_request* req);

  /* --- collectives: optional, NULL = unsupported. Each one is non-blocking,
   * posts the operation and follows the request protocol above. On failure
   * nothing was posted and comm_last_error() says why. Callable under the
   * backend's thread_level. --- */

  /* recvbuf[i] = op over ranks of sendbuf[i], i < count, on every rank.
   * In place: sendbuf == recvbuf. */
  int32_t (*allreduce)(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                       plexus_dtype_t dtype, plexus_reduce_op_t op,
                       const plexus_placement* placement, plexus_request** req_out);

  /* buf of root is copied into buf of every other rank (count elements). */
  int32_t (*broadcast)(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype,
                       uint32_t root, const plexus_placement* placement, plexus_request** req_out);

  /* Like allreduce, but only root's recvbuf receives the result; recvbuf of
   * other ranks is not touched and may be NULL. In place on root:
   * sendbuf == recvbuf. */
  int32_t (*reduce)(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                    plexus_dtype_t dtype, plexus_reduce_op_t op, uint32_t root,
                    const plexus_placement* placement, plexus_request** req_out);

  /* recvbuf (size * count elements) receives every rank's sendbuf (count
   * elements) in rank order. In place: sendbuf == recvbuf + rank * count. */
  int32_t (*allgather)(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                       plexus_dtype_t dtype, const plexus_placement* placement,
                       plexus_request** req_out);

  /* sendbuf holds size * count elements; rank r's recvbuf (count elements)
   * receives block r reduced over all ranks. In place:
   * recvbuf == sendbuf + rank * count. */
  int32_t (*reduce_scatter)(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                            plexus_dtype_t dtype, plexus_reduce_op_t op,
                            const plexus_placement* placement, plexus_request** req_out);

  /* Block j (count elements) of sendbuf goes to rank j, landing as block
   * `rank` of its recvbuf. Both buffers hold size * count elements. Not in
   * place. */
  int32_t (*alltoall)(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                      plexus_dtype_t dtype, const plexus_placement* placement,
                      plexus_request** req_out);

  /* Completes on a rank only after every rank has posted its barrier. */
  int32_t (*barrier)(plexus_comm* comm, plexus_request** req_out);

  /* Point-to-point: count elements to/from peer. Messages between two ranks
   * match in posting order, per direction. */
  int32_t (*send)(plexus_comm* comm, const void* buf, uint64_t count, plexus_dtype_t dtype,
                  uint32_t peer, const plexus_placement* placement, plexus_request** req_out);
  int32_t (*recv)(plexus_comm* comm, void* buf, uint64_t count, plexus_dtype_t dtype, uint32_t peer,
                  const plexus_placement* placement, plexus_request** req_out);

  /* --- added in 1.1 --- */

  /* Optional. Copies the error message req completed with (NUL-terminated,
   * into buf of len bytes, owned by the caller) and returns its full length;
   * returns 0 and writes "" if req succeeded or is pending. Per request, so
   * two failures on two threads do not overwrite each other's text (as the
   * one comm_last_error string may). Non-blocking; any thread; not
   * concurrently with request_free(req). NULL = the host uses
   * comm_last_error. */
  size_t (*request_error)(plexus_request* req, char* buf, size_t len);

  /* --- added in 1.2 --- */

  /* Every rank's sendbuf (count elements) lands in root's recvbuf (size *
   * count elements) in rank order. recvbuf of the other ranks is not touched
   * and may be NULL. In place on root: sendbuf == recvbuf + root * count. */
  int32_t (*gather)(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                    plexus_dtype_t dtype, uint32_t root, const plexus_placement* placement,
                    plexus_request** req_out);

  /* Block r (count elements) of root's sendbuf (size * count elements) lands
   * in rank r's recvbuf (count elements). sendbuf of the other ranks is not
   * read and may be NULL. In place on root: recvbuf == sendbuf + root * count
   * (root's own block stays where it is). */
  int32_t (*scatter)(plexus_comm* comm, const void* sendbuf, void* recvbuf, uint64_t count,
                     plexus_dtype_t dtype, uint32_t root, const plexus_placement* placement,
                     plexus_request** req_out);

  /* Allgather of uneven blocks: rank r's sendbuf (sendcount elements, which
   * must equal recvcounts[r] on every rank) lands at recvbuf + displs[r]
   * elements on every rank. recvcounts and displs have size entries, in
   * elements, and must be the same on every rank; the blocks they describe
   * must not overlap. The arrays are BORROWED FOR THE CALL ONLY: the backend
   * copies what it needs before the post returns. In place:
   * sendbuf == recvbuf + displs[rank] elements. A rank whose sendcount
   * differs from what another rank's recvcounts says fails the operation
   * with PLEXUS_ERR_REMOTE (or, on a backend that cannot tell, it is the
   * caller's bug, as in MPI). */
  int32_t (*allgatherv)(plexus_comm* comm, const void* sendbuf, uint64_t sendcount, void* recvbuf,
                        const uint64_t* recvcounts, const uint64_t* displs, plexus_dtype_t dtype,
                        const plexus_placement* placement, plexus_request** req_out);

  /* All-to-all of uneven blocks: sendcounts[j] elements at sendbuf +
   * sdispls[j] go to rank j, landing there at recvbuf + rdispls[i] (i this
   * rank), where rank j's recvcounts[i] must equal this rank's sendcounts[j].
   * The four arrays have size entries, in elements, BORROWED FOR THE CALL
   * ONLY. Receive blocks must not overlap each other or the send blocks (not
   * in place); send blocks may overlap each other. A count that disagrees
   * with the peer's fails as in allgatherv. */
  int32_t (*alltoallv)(plexus_comm* comm, const void* sendbuf, const uint64_t* sendcounts,
                       const uint64_t* sdispls, void* recvbuf, const uint64_t* recvcounts,
                       const uint64_t* rdispls, plexus_dtype_t dtype,
                       const plexus_placement* placement, plexus_request** req_out);

  /* nbuffers allreduces of one dtype and op posted as one operation, so the
   * backend may fuse them (DDP's bucket of gradients): recvbufs[i] receives
   * op over ranks of sendbufs[i], counts[i] elements. The three arrays have
   * nbuffers entries (>= 1), BORROWED FOR THE CALL ONLY; the buffers they
   * point to follow the request protocol. In place per buffer:
   * sendbufs[i] == recvbufs[i]. Buffers of different i must not overlap.
   * Every rank posts the same nbuffers and counts. The result equals
   * nbuffers separate allreduces. */
  int32_t (*allreduce_coalesced)(plexus_comm* comm, const void* const* sendbufs,
                                 void* const* recvbufs, const uint64_t* counts, uint32_t nbuffers,
                                 plexus_dtype_t dtype, plexus_reduce_op_t op,
                                 const plexus_placement* placement, plexus_request** req_out);

  /* Optional. Splits comm into groups natively (MPI_Comm_split,
   * ncclCommSplit). COLLECTIVE and BLOCKING over every rank of comm, called
   * like a collective posted on comm: every rank at the same point of
   * comm's posting order, with no request of comm pending on this thread's
   * account. Ranks that give the same color form one new communicator, its
   * ranks ordered by (key, rank in comm); color PLEXUS_SPLIT_NO_COLOR joins
   * none. The host has already computed the result: config describes the
   * new communicator of this rank (rank and size as above, name, timeout,
   * device; config->oob is the new group's channel), or is NULL for
   * PLEXUS_SPLIT_NO_COLOR. The backend must reach the same rank and size or
   * fail (PLEXUS_ERR_INTERNAL). On success *comm_out is owned by the host
   * (comm_destroy), NULL for PLEXUS_SPLIT_NO_COLOR; comm stays usable and
   * independent of the new one. On failure as comm_create. Threads: one at
   * a time per ctx. NULL: the host makes each group with comm_create over
   * the group's ranks. */
  int32_t (*comm_split)(plexus_comm* comm, uint32_t color, uint32_t key,
                        const plexus_comm_config_v1* config, plexus_comm** comm_out,
                        char* error_buf, size_t error_len);

  /* --- added in 1.3 --- */

  /* Optional (both or neither). Host memory that collectives on comm may
   * run on without copying it (on one host: a shared mapping the peers map
   * too; cf. NCCL's ncclMemAlloc with window registration). COLLECTIVE IN
   * ORDER, NOT IN TIME: every rank of comm calls it with the same bytes, in
   * the same order among its mem_alloc calls; it need not talk to a peer,
   * and a rank may post on the memory only once every rank's mem_alloc has
   * returned (the host runs a collective in between). On success *ptr_out
   * is `bytes` (>= 1) zero-filled bytes, 64-byte aligned, owned by the
   * caller until mem_free. On failure *ptr_out is untouched and
   * comm_last_error says why; PLEXUS_ERR_UNSUPPORTED: none here (ranks on
   * several hosts, say). Collectives take this memory as any other; which
   * ones skip copies is the backend's (an in-place allreduce of a range at
   * the same offset of the same allocation on every rank, for one). A rank
   * posting on it where another posts on memory of its own may fail the
   * operation with PLEXUS_ERR_REMOTE. BLOCKS (bounded: a file and a
   * mapping). Not concurrently with mem_free on comm. */
  int32_t (*mem_alloc)(plexus_comm* comm, uint64_t bytes, void** ptr_out);

  /* Releases ptr from mem_alloc on comm. No request of this rank may be
   * pending on it. LOCAL, non-blocking; PLEXUS_ERR_INVALID_ARGUMENT for a
   * pointer mem_alloc did not return on comm. Before comm_destroy. */
  int32_t (*mem_free)(plexus_comm* comm, void* ptr);

  /* --- added in 1.4 --- */

  /* Reduce-scatter of uneven blocks (MPI_Reduce_scatter with
   * displacements): rank r's recvbuf (recvcount elements, which must equal
   * sendcounts[r] on every rank) receives op over ranks of the block of
   * sendcounts[r] elements at sendbuf + sdispls[r]. sendcounts and sdispls
   * have size entries, in elements, and must be the same on every rank; the
   * blocks they describe must not overlap. The arrays are BORROWED FOR THE
   * CALL ONLY. In place: recvbuf == sendbuf + sdispls[rank] elements.
   * Counts that disagree between ranks fail the operation with
   * PLEXUS_ERR_REMOTE (or, on a backend that cannot tell, it is the
   * caller's bug, as in MPI). */
  int32_t (*reduce_scatterv)(plexus_comm* comm, const void* sendbuf, const uint64_t* sendcounts,
                             const uint64_t* sdispls, void* recvbuf, uint64_t recvcount,
                             plexus_dtype_t dtype, plexus_reduce_op_t op,
                             const plexus_placement* placement, plexus_request** req_out);

  /* --- added in 1.5 --- */

  /* Optional. Asks for done(arg, status) to be called once, when req
   * completes, with the status test(req) then returns (PLEXUS_OK or the
   * error; never PLEXUS_IN_PROGRESS). If req has completed already, done
   * runs before request_notify returns, on the caller's thread. Otherwise it
   * runs on the thread that completes req (a backend thread, or one inside
   * test or wait), once req is complete and that thread no longer runs an
   * operation: done may call test, wait, request_error and request_free on
   * req, and post and wait on any communicator, but it holds up the thread
   * that runs it, so it should be short. arg is the caller's, passed
   * through. Returns PLEXUS_OK; PLEXUS_ERR_INVALID_ARGUMENT for a NULL req
   * or done; PLEXUS_ERR_INVALID_USAGE for a second request_notify on req
   * (nothing changes). Non-blocking (but for running done); any thread; not
   * concurrently with request_free(req). NULL = the host waits for requests
   * on a thread of its own where it must be told of their completion. */
  int32_t (*request_notify)(plexus_request* req, void (*done)(void* arg, int32_t status),
                            void* arg);

  /* New slots of major 1 are appended here, each under an "added in 1.N"
   * comment; the host reads one only if abi_minor >= N, the slot lies inside
   * struct_size, and it is non-NULL. */
} plexus_backend_v1;

/* The entry function of ABI major 1, exported by every backend with default
 * visibility. host_abi_minor is PLEXUS_ABI_MINOR of the calling host. Returns
 * PLEXUS_OK and a pointer to a table with static storage duration, or an
 * error (e.g. PLEXUS_ERR_UNSUPPORTED when the backend needs a newer host) and
 * *table_out = NULL. Non-blocking, no side effects; any thread.
 *
 * A backend defines it as
 *     PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
 *                                                         const plexus_backend_v1** table_out)
 * and the prototype below makes the compiler check that signature. Under
 * -fvisibility=hidden a C++ backend still exports libstdc++'s template
 * instances (weak symbols with default visibility); link with the version
 * script that `pkg-config --libs plexus-backend` adds (it exports the entry
 * function alone), or write one like it. */
typedef int32_t (*plexus_backend_get_v1_fn)(uint32_t host_abi_minor,
                                            const plexus_backend_v1** table_out);
PLEXUS_BACKEND_EXPORT int32_t plexus_backend_get_v1(uint32_t host_abi_minor,
                                                    const plexus_backend_v1** table_out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLEXUS_BACKEND_H */
