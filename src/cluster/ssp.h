/*
 * ssp.h - bounded staleness for async training (--max-staleness S; stale
 * synchronous parallel, ps-lite's bounded delay): docs/design.md §3.
 *
 * The root's RMA window holds one int64 per worker: the steps it has
 * completed (an update pushed), or SSP_FINISHED once it takes no more
 * steps. A worker about to start step n+1 (n completed) waits while
 * n - min(counts) > S, reading the W words with one atomic
 * MPI_Get_accumulate(MPI_NO_OP); a finished worker counts as infinitely far
 * ahead, so it never holds the others back. The slowest unfinished worker
 * never waits, so the run always progresses: every other wait (data,
 * acknowledgements, stops) is one the slowest worker would pass too.
 * Every word sees MPI_REPLACE only (accumulate_ops=same_op_no_op).
 */
#ifndef PSTRAIN_CLUSTER_SSP_H
#define PSTRAIN_CLUSTER_SSP_H

#include <mpi.h>
#include <stdint.h>

#include "pstrain/common.h"

#define SSP_FINISHED INT64_MAX

typedef struct ssp ssp;

/* Collective over comm; the counters live on `root`. bound: S >= 0.
 * Returns 0, or -1 with a message. */
int ssp_new(ssp **out, MPI_Comm comm, int root, int nworkers, int64_t bound, pst_err *e);
/* Collective; NULL-safe only when every rank passes NULL. */
void ssp_free(ssp *s);

/* Worker: blocks until `done` (its completed steps) is at most the bound
 * ahead of every unfinished worker. `wait` accumulates seconds. */
void ssp_wait(ssp *s, int64_t done, double *wait);
/* Worker w has completed `done` steps (flushed: visible to the others). */
void ssp_publish(ssp *s, int w, int64_t done);
/* Worker w takes no more steps. */
void ssp_finish(ssp *s, int w);

#endif
