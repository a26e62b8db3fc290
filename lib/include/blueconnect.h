/*
 * BlueConnect: hierarchical all-reduce for heterogeneous networks.
 *
 * The C API. Every function returns a bc_status_t; on failure bc_last_error()
 * gives a readable message with the trail of where it came from. No C++
 * exception ever crosses this boundary.
 *
 * In-place convention (as MPI, with BC_IN_PLACE in place of MPI_IN_PLACE):
 *   bc_allreduce       sendbuf == BC_IN_PLACE or sendbuf == recvbuf:
 *                      recvbuf holds the input and receives the result.
 *   bc_reduce_scatter  sendbuf == BC_IN_PLACE: recvbuf holds the full input
 *                      (p * recvcount elements); the result is written to
 *                      its first recvcount elements.
 *   bc_allgather       sendbuf == BC_IN_PLACE: this rank's contribution is
 *                      already at recvbuf + rank * count elements.
 *
 * Memory type: buffers are host memory unless the library was built with
 * CUDA and the pointer is a device pointer (detected per call), or the _mem
 * variants declare it.
 *
 * Threads: after MPI_Init_thread(MPI_THREAD_MULTIPLE), threads may call the
 * library at the same time on different communicators: create, all-reduce
 * (blocking or not) and destroy. One communicator's calls come from one
 * thread at a time and in the same order on every rank, as MPI asks of its
 * collectives. Call bc_init and bc_finalize from one thread, before and
 * after the others' calls.
 */
#ifndef BLUECONNECT_H
#define BLUECONNECT_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What libblueconnect.so exports: the library is built with hidden
 * visibility, so only declarations marked BC_API (these, and the preload's
 * door in blueconnect_preload.h, which is not installed) are visible. */
#ifndef BC_API
#define BC_API __attribute__((visibility("default")))
#endif

#define BC_VERSION_MAJOR 0
#define BC_VERSION_MINOR 1
#define BC_VERSION_PATCH 0

/* In C++ the enums get int as their fixed underlying type, so any int a C
 * caller passes is a valid value there and is checked, not undefined. */
#ifdef __cplusplus
#define BC_ENUM_BASE : int
#else
#define BC_ENUM_BASE
#endif

typedef enum BC_ENUM_BASE {
  BC_OK = 0,
  BC_ERR_INVALID_ARG = 1,     /* a bad argument: null buffer, negative count, ... */
  BC_ERR_NOT_SUPPORTED = 2,   /* valid, but not supported (e.g. avg on integers) */
  BC_ERR_NO_MEMORY = 3,
  BC_ERR_NOT_INITIALIZED = 4, /* bc_init not called, or after bc_finalize */
  BC_ERR_INVALID_COMM = 5,    /* null, destroyed or broken communicator */
  BC_ERR_TOPOLOGY = 6,        /* BC_TOPO / topology file syntax or mismatch */
  BC_ERR_PARAM = 7,           /* a BC_* parameter has an invalid value */
  BC_ERR_TRANSPORT = 8,       /* a transport failed (UCX, shm, MPI p2p) */
  BC_ERR_TIMEOUT = 9,         /* a peer did not answer within BC_TIMEOUT */
  BC_ERR_MPI = 10,            /* an MPI call failed */
  BC_ERR_INTERNAL = 11,       /* a bug: please report with BC_DEBUG=INFO output */
  BC_ERR_IN_PROGRESS = 12,    /* bc_test: the operation has not completed yet */
  BC_ERR_PEER_DEAD = 13,      /* a peer's process died (or its host is gone); the
                                 message names it; the communicator is broken */
  BC_ERR_MISMATCH = 14,       /* ranks passed different count, dtype, op or collective
                                 (BC_CHECK_ARGS=1): returned on every rank, nothing was
                                 sent, the communicator stays usable */
  BC_STATUS_COUNT
} bc_status_t;

typedef enum BC_ENUM_BASE {
  BC_FLOAT32 = 0,
  BC_FLOAT64,
  BC_FLOAT16,  /* IEEE binary16 */
  BC_BFLOAT16, /* bfloat16 */
  BC_INT8,
  BC_UINT8,
  BC_INT32,
  BC_UINT32,
  BC_INT64,
  BC_UINT64,
  BC_DTYPE_COUNT
} bc_dtype_t;

typedef enum BC_ENUM_BASE {
  BC_SUM = 0,
  BC_PROD,
  BC_MIN,
  BC_MAX,
  BC_AVG,  /* sum, then divide by the communicator size; floating types only */
  BC_BAND, /* bitwise and; integer types only */
  BC_BOR,  /* bitwise or; integer types only */
  BC_BXOR, /* bitwise xor; integer types only */
  BC_OP_COUNT
} bc_op_t;

typedef enum BC_ENUM_BASE {
  BC_MEM_AUTO = 0, /* detect per call (host unless a CUDA pointer) */
  BC_MEM_HOST,
  BC_MEM_CUDA,
  BC_MEM_COUNT
} bc_memtype_t;

/* Marks an in-place call; see the convention above. */
#define BC_IN_PLACE ((const void *)(intptr_t)-1)

typedef struct bc_comm *bc_comm_t;
typedef struct bc_request *bc_request_t;

/* Library lifecycle. bc_init reads every BC_* parameter once; an invalid value
 * fails here with BC_ERR_PARAM. MPI must be initialised first. Calls nest:
 * each bc_init needs one bc_finalize. */
BC_API bc_status_t bc_init(void);
BC_API bc_status_t bc_finalize(void);

/* Communicators. Collective over `comm`. The library duplicates `comm`, so
 * its traffic never mixes with the caller's. */
BC_API bc_status_t bc_comm_create(MPI_Comm comm, bc_comm_t *out);
/* As bc_comm_create, with per-communicator parameter overrides:
 * "BC_TOPO=2x2;BC_TRANSPORT=mpi". Keys are the BC_* parameter names; "!KEY"
 * ("!BC_PLAN") restores KEY's default, as if the environment had not set it.
 * NULL or "" means none. Every rank must pass the same string. */
BC_API bc_status_t bc_comm_create_with(MPI_Comm comm, const char *options, bc_comm_t *out);
/* Collective. Sets *comm to NULL. Across nodes (UCX) every rank returns only
 * once every rank has reached it, so that none stops serving a peer's last
 * flush; a late rank is waited for up to BC_TIMEOUT, a dead one is not. */
BC_API bc_status_t bc_comm_destroy(bc_comm_t *comm);
/* Shrink and go on: after a call returned BC_ERR_PEER_DEAD, every surviving
 * rank calls this on the broken communicator. The survivors agree on who is
 * dead without MPI (over the communicator's own shm and ucx connections, with
 * the liveness checks), and *newcomm becomes a communicator of the survivors,
 * in their old rank order, that works as any other. Collective over the
 * survivors: one that does not come is waited for up to BC_TIMEOUT. On a
 * communicator without a death it returns one of every rank. Afterwards
 * `comm` only accepts bc_comm_destroy (which does not wait for the dead).
 * Once per communicator; complete its non-blocking calls (bc_wait) first.
 * BC_ERR_NOT_SUPPORTED where a peer is reached through the mpi transport or
 * is not watched (BC_LIVENESS=off). docs/FAILURES.md, "Shrink and go on". */
BC_API bc_status_t bc_comm_shrink(bc_comm_t comm, bc_comm_t *newcomm);
BC_API bc_status_t bc_comm_rank(bc_comm_t comm, int *rank);
BC_API bc_status_t bc_comm_size(bc_comm_t comm, int *size);

/* Collectives. Counts are in elements; a negative count is an error. */
BC_API bc_status_t bc_allreduce(const void *sendbuf, void *recvbuf, int64_t count,
                         bc_dtype_t dtype, bc_op_t op, bc_comm_t comm);
/* Equal blocks: the input has p * recvcount elements, rank r receives block r. */
BC_API bc_status_t bc_reduce_scatter(const void *sendbuf, void *recvbuf, int64_t recvcount,
                              bc_dtype_t dtype, bc_op_t op, bc_comm_t comm);
/* Each rank gives `count` elements; recvbuf gets p * count, in rank order. */
BC_API bc_status_t bc_allgather(const void *sendbuf, void *recvbuf, int64_t count,
                         bc_dtype_t dtype, bc_comm_t comm);

/* The same, with the memory type of the buffers declared. */
BC_API bc_status_t bc_allreduce_mem(const void *sendbuf, void *recvbuf, int64_t count,
                             bc_dtype_t dtype, bc_op_t op, bc_memtype_t mem,
                             bc_comm_t comm);

/* Non-blocking all-reduce. The buffers must stay untouched until bc_test
 * reports completion or bc_wait returns. Calls on one communicator must be
 * issued in the same order on every rank, as in MPI.
 * By default progress happens inside bc_test and bc_wait; call bc_test now
 * and then while computing. With BC_PROGRESS_THREAD=1 (environment, or
 * bc_comm_create_with options) the communicator has its own thread that
 * advances the operation while the caller computes; with the mpi transport
 * that needs MPI_Init_thread(MPI_THREAD_MULTIPLE), else the creation fails.
 * With BC_CHECK_ARGS=1 the ranks' argument agreement is the request's first
 * phase: this call returns at once, and a mismatch or refused argument is
 * returned by bc_test/bc_wait on every rank (docs/FAILURES.md). */
BC_API bc_status_t bc_iallreduce(const void *sendbuf, void *recvbuf, int64_t count,
                          bc_dtype_t dtype, bc_op_t op, bc_comm_t comm,
                          bc_request_t *request);
/* *done becomes 1 when the operation has completed; the request is then freed
 * and *request set to NULL. A failure also frees it. With the progress thread
 * bc_test only looks at the request (it never blocks and moves no data); a
 * failure found by the thread is returned here (or by bc_wait), with its
 * message in bc_last_error(). bc_wait then sleeps until the thread is done. */
BC_API bc_status_t bc_test(bc_request_t *request, int *done);
/* Waits for completion (at most BC_TIMEOUT without progress; a peer that
 * died fails it with BC_ERR_PEER_DEAD within about a second), frees the
 * request and sets *request to NULL. */
BC_API bc_status_t bc_wait(bc_request_t *request);

/* Errors and names. The strings are static or thread-local; never free them. */
BC_API const char *bc_strerror(bc_status_t status);
/* The last error on this thread, with its trail; "" when none. */
BC_API const char *bc_last_error(void);
BC_API const char *bc_dtype_name(bc_dtype_t dtype);
BC_API const char *bc_op_name(bc_op_t op);
/* Bytes per element, 0 for an unknown dtype. */
BC_API size_t bc_dtype_size(bc_dtype_t dtype);

/* A printable description of the communicator's topology and of the plan it
 * uses for `count` elements of `dtype`. Writes at most `len` bytes including
 * the terminating NUL into `buf`; *needed gets the full length + 1. */
BC_API bc_status_t bc_comm_describe(bc_comm_t comm, int64_t count, bc_dtype_t dtype,
                             char *buf, size_t len, size_t *needed);

/* Writes the communicator's levels above the host to `path` in BC_TOPO_FILE
 * format (one line 'HOSTNAME GROUP [GROUP2 ...]' per host, groups named after
 * the level and unit: rack0, rack1, ...), so that a later job can load them
 * with BC_TOPO_FILE=path. Collective over the communicator (it gathers every
 * rank's host name), with no request in flight; rank 0 writes, and every rank
 * returns the same status. BC_ERR_TOPOLOGY when a level other than numa or
 * package splits a host (virtual levels from BC_TOPO, or BC_TOPO_ADDR giving
 * the ranks of one host different switches): a host file cannot hold it. */
BC_API bc_status_t bc_comm_write_topology(bc_comm_t comm, const char *path);

/* Seconds each hierarchy stage took (its reduce-scatter plus all-gather steps)
 * in this rank's last collective that moved data (count > 0), in stage order.
 * Copies at most `max` values into `seconds` (may be NULL when max is 0) and
 * sets *nstages to the number of stages: 0 before the first such collective and
 * when the plan has no stages (one rank). For bc_bench --stages. */
BC_API bc_status_t bc_comm_stage_times(bc_comm_t comm, double *seconds, int max, int *nstages);

/* The plan the communicator chooses for an all-reduce of `bytes` bytes, as
 * BC_PLAN-style settings ("shape=split,algo=rhd/ring,top=split,chunk=1048576,
 * depth=4"), and the cost model's predicted seconds (-1 when the model is off:
 * BC_MODEL). Writes at most `len` bytes including the NUL into `plan` (may be
 * NULL when len is 0). For bc_bench --plan and bc_info --plan. */
BC_API bc_status_t bc_comm_plan_for(bc_comm_t comm, int64_t bytes, char *plan, size_t len,
                             double *predicted_seconds);

/* How many more blocking all-reduces of `bytes` bytes the communicator will
 * spend learning its plan for that size (BC_PLAN_LEARN: the cost model's best
 * plans take turns on the first calls of each size; docs/PLANS.md, Learning):
 * 0 once the size has its verdict, or where nothing is learned. A benchmark
 * that warms up with this many calls times the plan a long-running program
 * gets (bc_bench does). */
BC_API bc_status_t bc_comm_learning_calls(bc_comm_t comm, int64_t bytes, int *calls);

/* Prints every BC_* parameter with its value, default and documentation. */
BC_API bc_status_t bc_print_params(FILE *out);

#ifdef __cplusplus
}
#endif
#endif /* BLUECONNECT_H */
