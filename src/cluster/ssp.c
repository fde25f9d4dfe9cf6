/* ssp.c - bounded staleness counters in the root's window (ssp.h). */
#include "ssp.h"

#include <stdlib.h>
#include <string.h>

#include "dist_internal.h"

struct ssp {
    MPI_Win win;
    int root, nworkers;
    int64_t bound;
    int64_t *base;    /* window memory (root: the counters; others: none) */
    int64_t *counts;  /* worker: the last counters read */
    int64_t seen_min; /* worker: their minimum (counters only grow) */
};

int ssp_new(ssp **out, MPI_Comm comm, int root, int nworkers, int64_t bound, pst_err *e)
{
    *out = NULL;
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    ssp *s = pst_calloc(1, sizeof *s);
    s->root = root, s->nworkers = nworkers, s->bound = bound;
    const MPI_Aint size = rank == root ? (MPI_Aint)nworkers * 8 : 0;
    int rc = MPI_Win_allocate(size, 8, MPI_INFO_NULL, comm, &s->base, &s->win);
    if (rc != MPI_SUCCESS) {
        free(s);
        return pst_fail(e, "ssp: MPI_Win_allocate of %lld bytes failed", (long long)size);
    }
    MPI_Win_set_errhandler(s->win, MPI_ERRORS_RETURN);
    if (rank == root) memset(s->base, 0, (size_t)size);
    s->counts = pst_calloc((size_t)nworkers, sizeof *s->counts);
    MPI_OK(MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win));
    MPI_OK(MPI_Win_sync(s->win));
    MPI_OK(MPI_Barrier(comm));
    *out = s;
    return 0;
}

void ssp_free(ssp *s)
{
    if (!s) return;
    MPI_OK(MPI_Win_unlock_all(s->win));
    MPI_OK(MPI_Win_free(&s->win));
    free(s->counts);
    free(s);
}

/* Reads the W counters atomically and returns their minimum. */
static int64_t read_min(ssp *s)
{
    const int W = s->nworkers;
    MPI_OK(MPI_Get_accumulate(NULL, 0, MPI_INT64_T, s->counts, W, MPI_INT64_T, s->root, 0, W,
                              MPI_INT64_T, MPI_NO_OP, s->win));
    MPI_OK(MPI_Win_flush(s->root, s->win));
    int64_t m = SSP_FINISHED;
    for (int w = 0; w < W; w++) m = PST_MIN(m, s->counts[w]);
    return m;
}

void ssp_wait(ssp *s, int64_t done, double *wait)
{
    /* the minimum only grows: no read while the last one allows the step */
    if (done - s->seen_min <= s->bound) return;
    dist_backoff bo;
    dist_backoff_init(&bo, 2, 200);
    const double t0 = pst_now();
    while (done - (s->seen_min = read_min(s)) > s->bound) dist_backoff_wait(&bo);
    if (wait) *wait += pst_now() - t0;
}

static void put_count(ssp *s, int w, int64_t v)
{
    MPI_OK(MPI_Accumulate(&v, 1, MPI_INT64_T, s->root, w, 1, MPI_INT64_T, MPI_REPLACE, s->win));
    MPI_OK(MPI_Win_flush(s->root, s->win));
}

void ssp_publish(ssp *s, int w, int64_t done)
{
    put_count(s, w, done);
}

void ssp_finish(ssp *s, int w)
{
    put_count(s, w, SSP_FINISHED);
}
