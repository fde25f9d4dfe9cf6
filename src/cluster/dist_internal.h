/*
 * dist_internal.h - helpers shared by the distributed-training sources
 * (feed.c, ps.c, dist.c): the rank's role for fatal messages, the MPI check
 * macro, and the polling back-off.
 *
 * Fatal errors in MPI code end the whole job: "rank R (role): message" on
 * stderr, then MPI_Abort, so that no peer waits forever on a dead rank.
 */
#ifndef PSTRAIN_DIST_INTERNAL_H
#define PSTRAIN_DIST_INTERNAL_H

#include <mpi.h>
#include <stdint.h>

#include "pstrain/common.h"

/* Records this rank's role ("root", "ps 1", "worker 0") for dist_fatal. */
void dist_set_role(const char *role);
const char *dist_role(void);

/* Prints "rank R (role): message" and aborts the job. */
void dist_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* MPI calls on windows and communicators set to MPI_ERRORS_RETURN: a failure
 * is fatal, with the call text, source line and MPI's error string. */
void dist_mpi_failed(int rc, const char *call, const char *file, int line)
    __attribute__((noreturn));
#define MPI_OK(call)                                                                               \
    do {                                                                                           \
        int mpi_rc_ = (call);                                                                      \
        if (mpi_rc_ != MPI_SUCCESS) dist_mpi_failed(mpi_rc_, #call, __FILE__, __LINE__);           \
    } while (0)

/* Polling back-off: the first few waits only yield the core, then sleeps
 * double from min_us up to max_us. Reset after progress. */
typedef struct dist_backoff {
    int n;
    double min_us, max_us, cur_us;
} dist_backoff;

void dist_backoff_init(dist_backoff *b, double min_us, double max_us);
void dist_backoff_reset(dist_backoff *b);
void dist_backoff_wait(dist_backoff *b);

/* Fails (message naming `what`) unless the window has the unified memory
 * model, which the ring and PS protocols rely on: local loads and stores
 * see RMA updates after MPI_Win_sync. */
int dist_check_unified(MPI_Win win, const char *what, pst_err *e);

/* Large transfers. MPI counts are int, and some transports mishandle single
 * messages above 2 GiB, so every data transfer goes in pieces of at most
 * dist_chunk_elems(element size) elements (1 GiB; the environment variable
 * PSTRAIN_MPI_CHUNK_BYTES lowers it, so that tests run the split paths on
 * small data). Two-sided pieces of one message travel in order (MPI's
 * non-overtaking rule) under one tag. */
size_t dist_chunk_elems(size_t elem_size);
void dist_get(void *dst, size_t n, MPI_Datatype t, size_t tsize, int rank, MPI_Aint disp,
              MPI_Win win);
void dist_put(const void *src, size_t n, MPI_Datatype t, size_t tsize, int rank, MPI_Aint disp,
              MPI_Win win);
void dist_accumulate(const void *src, size_t n, MPI_Datatype t, size_t tsize, int rank,
                     MPI_Aint disp, MPI_Op op, MPI_Win win);
void dist_bcast(void *buf, size_t n, MPI_Datatype t, size_t tsize, int root, MPI_Comm comm);
/* The number of requests dist_isend needs for n elements. */
int dist_nchunks(size_t n, size_t tsize);
void dist_isend(const void *buf, size_t n, MPI_Datatype t, size_t tsize, int dest, int tag,
                MPI_Comm comm, MPI_Request *reqs);
void dist_recv(void *buf, size_t n, MPI_Datatype t, size_t tsize, int src, int tag, MPI_Comm comm);

/* Lets MPI progress passive-target operations aimed at this rank (MPICH,
 * Open MPI's pt2pt and ucx, MPI_Win_create windows: the target must enter
 * MPI), by probing for DIST_TAG_NEVER, a tag no rank ever sends: a probe
 * that matches a pending message makes no progress (docs/platform.md, "MPICH 4.0.2"). */
enum { DIST_TAG_NEVER = 7199 };
void dist_progress(void);

/* CPU seconds used so far by this process (all threads) / by the calling
 * thread only (the root's service loop, without the pipeline's threads). */
double dist_cpu_seconds(void);
double dist_thread_cpu_seconds(void);

/* Atomic load of a word that remote ranks write by RMA. */
static inline int64_t dist_load64(const volatile int64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline void dist_store64(volatile int64_t *p, int64_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

#endif
