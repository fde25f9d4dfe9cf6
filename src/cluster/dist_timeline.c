/*
 * dist_timeline.c - --timeline in a distributed run (timeline.h): every
 * rank measures its clock's offset from the root's at the start, records
 * its own events, and at the end of the run the root gathers them and
 * writes one trace, every event on the root's clock.
 *
 * Offsets: a few ping-pong rounds with the root; in the round with the
 * shortest round trip, the root's reading t_r fell between the rank's
 * readings t0 and t1, so offset = t_r - (t0 + t1) / 2, within half that
 * round trip. Ranks on one host share CLOCK_MONOTONIC and measure about 0.
 * For tests of the correction, PSTRAIN_TIMELINE_TEST_SKEW=S makes rank k's
 * clock, as the timeline sees it, read k * S seconds more than it does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_internal.h"
#include "pstrain/timeline.h"
#include "trainer.h"

enum { TL_ROUNDS = 8, TL_NAME = 160 };

/* PSTRAIN_TIMELINE_TEST_SKEW for this rank (0 without it). */
static double test_skew(const dist_run *r)
{
    const char *env = getenv("PSTRAIN_TIMELINE_TEST_SKEW");
    return env ? atof(env) * (r->rank - r->root_rank) : 0;
}

/* Collective over comm: this rank's clock offset from the root's (0 on the
 * root). The root serves the other ranks one after the other. */
static double measure_offset(const dist_run *r, MPI_Comm comm)
{
    const double skew = test_skew(r);
    char c = 0;
    if (r->rank == r->root_rank) {
        for (int k = 0; k < r->size; k++)
            for (int i = 0; k != r->root_rank && i < TL_ROUNDS; i++) {
                MPI_OK(MPI_Recv(&c, 1, MPI_CHAR, k, 0, comm, MPI_STATUS_IGNORE));
                double t = pst_now();
                MPI_OK(MPI_Send(&t, 1, MPI_DOUBLE, k, 0, comm));
            }
        return 0;
    }
    double best = INFINITY, offset = 0;
    for (int i = 0; i < TL_ROUNDS; i++) {
        double t0 = pst_now() + skew, tr = 0;
        MPI_OK(MPI_Send(&c, 1, MPI_CHAR, r->root_rank, 0, comm));
        MPI_OK(MPI_Recv(&tr, 1, MPI_DOUBLE, r->root_rank, 0, comm, MPI_STATUS_IGNORE));
        double t1 = pst_now() + skew;
        if (t1 - t0 < best) best = t1 - t0, offset = tr - 0.5 * (t0 + t1);
    }
    return offset;
}

void dist_timeline_begin(dist_run *r)
{
    if (!r->cfg->timeline_path) return;
    MPI_Comm comm;
    MPI_OK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
    r->tl_origin = pst_now();
    r->tl_offset = measure_offset(r, comm);
    MPI_OK(MPI_Comm_free(&comm));
    tl_start(0);
}

/* What every rank sends the root besides its events. */
typedef struct tl_head {
    char name[TL_NAME];
    double offset;
    int64_t n, dropped;
} tl_head;

/* "rank R worker W @host", "rank R ps P @host", "rank 0 root @host". */
static void proc_name(const dist_run *r, char *out, size_t n)
{
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int len = 0;
    MPI_OK(MPI_Get_processor_name(host, &len));
    snprintf(out, n, "rank %d %s @%s", r->rank, dist_role(), host);
}

/* The lanes of a process in the trace, by role. */
static void proc_lanes(tl_proc *p, const char *name)
{
    if (strstr(name, " root @")) {
        p->nlanes = 3;
        p->lane_names[0] = "ring", p->lane_names[1] = "checkpoints";
        p->lane_names[2] = "evaluations";
    } else {
        p->nlanes = 1;
        p->lane_names[0] = strstr(name, " ps ") ? "service" : "steps";
    }
}

void dist_timeline_gather(dist_run *r)
{
    if (!r->cfg->timeline_path) return;
    const bool root = r->rank == r->root_rank;
    size_t n = 0;
    int64_t dropped = 0;
    const tl_event *ev = tl_events(&n, &dropped);
    tl_head mine;
    memset(&mine, 0, sizeof mine);
    proc_name(r, mine.name, sizeof mine.name);
    /* (a skewed clock would have read every event `skew` later) */
    mine.offset = r->tl_offset + test_skew(r), mine.n = root ? 0 : (int64_t)n,
    mine.dropped = dropped;
    if (mine.n > INT32_MAX) dist_fatal("timeline too large to gather");
    tl_head *heads = root ? pst_calloc((size_t)r->size, sizeof *heads) : NULL;
    MPI_OK(MPI_Gather(&mine, (int)sizeof mine, MPI_BYTE, heads, (int)sizeof mine, MPI_BYTE,
                      r->root_rank, MPI_COMM_WORLD));
    MPI_Datatype rec;
    MPI_OK(MPI_Type_contiguous((int)sizeof(tl_event), MPI_BYTE, &rec));
    MPI_OK(MPI_Type_commit(&rec));
    int *counts = NULL, *displs = NULL;
    tl_event *all = NULL;
    if (root) {
        counts = pst_calloc((size_t)r->size, sizeof *counts);
        displs = pst_calloc((size_t)r->size, sizeof *displs);
        int64_t tot = 0;
        for (int k = 0; k < r->size; k++) {
            if (tot + heads[k].n > INT32_MAX) dist_fatal("timeline too large to gather");
            counts[k] = (int)heads[k].n, displs[k] = (int)tot, tot += heads[k].n;
        }
        all = pst_malloc(sizeof *all * (size_t)(tot ? tot : 1));
    }
    MPI_OK(
        MPI_Gatherv(ev, (int)mine.n, rec, all, counts, displs, rec, r->root_rank, MPI_COMM_WORLD));
    MPI_OK(MPI_Type_free(&rec));
    free(counts);
    if (!root) {
        tl_stop();
        return;
    }
    r->tl_procs = pst_calloc((size_t)r->size, sizeof *r->tl_procs);
    for (int k = 0; k < r->size; k++) {
        tl_proc *p = &r->tl_procs[k];
        snprintf(p->name, sizeof p->name, "%.*s", TL_NAME - 1, heads[k].name);
        p->pid = k;
        proc_lanes(p, p->name);
        p->ev = all + displs[k], p->n = (size_t)heads[k].n;
        p->dropped = heads[k].dropped, p->offset = heads[k].offset;
    }
    r->tl_all = all;
    free(displs), free(heads);
}

int dist_timeline_write(dist_run *r, pst_err *e)
{
    if (!r->cfg->timeline_path || !r->tl_procs) return 0;
    /* the root's own events, to the end of the run (its final checkpoint and
     * evaluation come after the gather) */
    tl_proc *me = &r->tl_procs[r->rank];
    me->ev = tl_events(&me->n, &me->dropped);
    double origin = r->tl_origin;
    int64_t dropped = 0;
    for (int k = 0; k < r->size; k++) {
        const tl_proc *p = &r->tl_procs[k];
        for (size_t i = 0; i < p->n; i++) origin = fmin(origin, p->ev[i].t0 + p->offset);
        dropped += p->dropped;
    }
    if (dropped && !r->cfg->quiet)
        pst_warn("--timeline: %lld events did not fit in the ranks' buffers and are missing "
                 "(otherData.dropped_events; PSTRAIN_TIMELINE_MAX_EVENTS raises the cap)",
                 (long long)dropped);
    return tl_write(r->cfg->timeline_path, r->tl_procs, r->size, origin, e);
}

void dist_timeline_free(dist_run *r)
{
    free(r->tl_procs), r->tl_procs = NULL;
    free(r->tl_all), r->tl_all = NULL;
    if (r->cfg && r->cfg->timeline_path) tl_stop();
}
