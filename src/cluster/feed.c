/*
 * feed.c - the batch ring in the root's RMA window (protocol in feed.h).
 *
 * Window layout (bytes, disp_unit 1), every part 64-byte aligned:
 *   [0, 64)                header: int64 head, step, finished
 *   [64, 64 + R*128)       report records: FEED_REPORT_WORDS doubles per rank
 *   then K slots of slot_bytes:
 *     ctl int64[8]: seq (ticket+1 once filled), release (ticket+1 once read),
 *                   epoch, count
 *     ids int64[B] | labels int32[B] (padded to 8) | pixels uint8[B*px]
 */
#include "pstrain/feed.h"

#include <stdlib.h>
#include <string.h>

#include "dist_internal.h"
#include "pstrain/timeline.h"

enum { HDR_HEAD = 0, HDR_STEP = 1, HDR_FINISHED = 2 };
enum { CTL_SEQ = 0, CTL_RELEASE = 1, CTL_EPOCH = 2, CTL_COUNT = 3 };
#define CTL_BYTES 64

struct feed {
    MPI_Comm comm;
    MPI_Win win;
    int root, rank, nranks;
    feed_geom g;
    unsigned char *base; /* window memory (root: the ring; others: none) */
    MPI_Aint reports_off, slots_off, slot_bytes, ids_off, labels_off, pixels_off;
    unsigned char *buf;  /* worker: one slot's copy */
    int64_t prod, total; /* root: next ticket to publish; tickets with data (-1: all) */
};

static MPI_Aint align64(MPI_Aint n)
{
    return (n + 63) / 64 * 64;
}

int feed_new(feed **out, MPI_Comm comm, int root, const feed_geom *g, pst_err *e)
{
    *out = NULL;
    if (g->batch < 1 || g->nslots < 1 || g->example_bytes < 1 || g->nworkers < 1)
        return pst_fail(e,
                        "feed: bad geometry (batch %d, slots %d, example bytes %lld, "
                        "workers %d)",
                        g->batch, g->nslots, (long long)g->example_bytes, g->nworkers);
    feed *f = pst_calloc(1, sizeof *f);
    f->comm = comm;
    f->root = root;
    f->g = *g;
    MPI_Comm_rank(comm, &f->rank);
    MPI_Comm_size(comm, &f->nranks);
    f->reports_off = 64;
    f->slots_off = align64(f->reports_off +
                           (MPI_Aint)f->nranks * FEED_REPORT_WORDS * (MPI_Aint)sizeof(double));
    f->ids_off = CTL_BYTES;
    f->labels_off = f->ids_off + (MPI_Aint)g->batch * 8;
    f->pixels_off = f->labels_off + align64((MPI_Aint)g->batch * 4);
    f->slot_bytes = align64(f->pixels_off + (MPI_Aint)g->batch * g->example_bytes);
    MPI_Aint size = f->rank == root ? f->slots_off + (MPI_Aint)g->nslots * f->slot_bytes : 0;

    /* Each word sees one accumulate op only (head and finished MPI_SUM,
     * release MPI_REPLACE), as the default accumulate_ops=same_op_no_op asks. */
    int rc = MPI_Win_allocate(size, 1, MPI_INFO_NULL, comm, &f->base, &f->win);
    if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int n = 0;
        MPI_Error_string(rc, s, &n);
        free(f);
        return pst_fail(e, "feed: MPI_Win_allocate of %lld bytes failed: %s", (long long)size, s);
    }
    MPI_Win_set_errhandler(f->win, MPI_ERRORS_RETURN);
    /* (on failure the caller aborts the job: freeing the window is collective) */
    if (dist_check_unified(f->win, "feed", e) < 0) return -1;
    if (f->rank == root) {
        memset(f->base, 0, (size_t)size);
        ((int64_t *)f->base)[HDR_HEAD] = g->first_ticket;
        ((int64_t *)f->base)[HDR_STEP] = g->first_step;
    }
    f->prod = g->first_ticket;
    f->buf = pst_aligned_alloc((size_t)f->slot_bytes);
    MPI_OK(MPI_Win_lock_all(MPI_MODE_NOCHECK, f->win));
    MPI_OK(MPI_Win_sync(f->win));
    MPI_OK(MPI_Barrier(comm));
    *out = f;
    return 0;
}

void feed_free(feed *f)
{
    if (!f) return;
    MPI_OK(MPI_Win_unlock_all(f->win));
    MPI_OK(MPI_Win_free(&f->win));
    free(f->buf);
    free(f);
}

int64_t feed_slot_bytes(const feed *f)
{
    return (int64_t)f->slot_bytes;
}

const double *feed_report_of(const feed *f, int rank)
{
    return (const double *)(f->base + f->reports_off +
                            (MPI_Aint)rank * FEED_REPORT_WORDS * (MPI_Aint)sizeof(double));
}

/* ---- root ---------------------------------------------------------------- */

static volatile int64_t *slot_ctl(feed *f, int k)
{
    return (volatile int64_t *)(f->base + f->slots_off + (MPI_Aint)k * f->slot_bytes);
}

static void fill_slot(feed *f, int k, int64_t ticket, const pipe_batch *b)
{
    unsigned char *s = f->base + f->slots_off + (MPI_Aint)k * f->slot_bytes;
    volatile int64_t *ctl = (volatile int64_t *)s;
    int count = b ? b->count : 0;
    if (count) {
        memcpy(s + f->ids_off, b->ids, sizeof(int64_t) * (size_t)count);
        memcpy(s + f->labels_off, b->labels, sizeof(int32_t) * (size_t)count);
        memcpy(s + f->pixels_off, b->pixels, (size_t)(count * f->g.example_bytes));
    }
    ctl[CTL_EPOCH] = b ? b->epoch : -1;
    ctl[CTL_COUNT] = count;
    /* data before seq: a worker that reads the new seq reads this batch */
    MPI_OK(MPI_Win_sync(f->win));
    dist_store64(&ctl[CTL_SEQ], ticket + 1);
    MPI_OK(MPI_Win_sync(f->win));
}

int64_t feed_root_next_ticket(const feed *f)
{
    return f->prod;
}

int64_t feed_root_total(const feed *f)
{
    return f->total;
}

void feed_root_set_total(feed *f, int64_t total)
{
    if (f->total < 0 || total < f->total) f->total = PST_MAX(total, f->prod);
}

int feed_root_serve(feed *f, int64_t total, const feed_hooks *h, feed_serve_stats *st, pst_err *e)
{
    const int K = f->g.nslots, W = f->g.nworkers;
    int64_t *filled = pst_malloc(sizeof *filled * (size_t)K);
    for (int k = 0; k < K; k++) filled[k] = -1;
    volatile int64_t *hdr = (volatile int64_t *)f->base;
    memset(st, 0, sizeof *st);
    f->total = total;
    bool src_done = false;
    dist_backoff bo;
    dist_backoff_init(&bo, 10, 1000);
    const double t0 = pst_now(), cpu0 = dist_thread_cpu_seconds();
    double t_tick = t0;
    int rc = 0;
    for (;;) {
        MPI_OK(MPI_Win_sync(f->win));
        if (dist_load64(&hdr[HDR_FINISHED]) >= W) break;
        bool did = false;
        if (h->poll) {
            int r = h->poll(h->ctx, e);
            if (r < 0) {
                rc = -1;
                goto out;
            }
            did = r > 0;
        }
        /* fill every free slot in ticket order; W end markers are enough */
        while (!(src_done && f->prod >= f->total + W)) {
            const int k = (int)(f->prod % K);
            if (filled[k] >= 0 && dist_load64(&slot_ctl(f, k)[CTL_RELEASE]) != filled[k] + 1) break;
            if (!src_done && (f->total < 0 || f->prod < f->total)) {
                pipe_batch b;
                const double ts = pst_now();
                int got = h->source(h->ctx, &b, e);
                const double tb = pst_now();
                st->source_wait += tb - ts;
                if (got < 0) {
                    rc = -1;
                    goto out;
                }
                if (got > 0) {
                    fill_slot(f, k, f->prod, &b);
                    tl_add(TL_WAIT_INPUT, ts, tb, 0);
                    tl_add(TL_PUBLISH, tb, tl_now(), f->prod);
                    st->batches++;
                    filled[k] = f->prod++;
                    did = true;
                    dist_progress();
                    continue;
                }
                f->total = f->prod;
            }
            src_done = true;
            fill_slot(f, k, f->prod, NULL);
            st->end_markers++;
            filled[k] = f->prod++;
            did = true;
        }
        dist_progress();
        if (h->tick) {
            double now = pst_now();
            if (now - t_tick >= h->tick_secs) {
                h->tick(h->ctx);
                t_tick = now;
            }
        }
        if (did)
            dist_backoff_reset(&bo);
        else
            dist_backoff_wait(&bo);
    }
out:
    st->wall = pst_now() - t0;
    st->cpu = dist_thread_cpu_seconds() - cpu0;
    free(filled);
    return rc;
}

/* ---- workers ------------------------------------------------------------- */

int feed_take(feed *f, feed_batch *b, double *wait)
{
    const int64_t one = 1;
    int64_t t = 0, seq = 0;
    MPI_OK(MPI_Fetch_and_op(&one, &t, MPI_INT64_T, f->root, HDR_HEAD * 8, MPI_SUM, f->win));
    MPI_OK(MPI_Win_flush(f->root, f->win));
    const int k = (int)(t % f->g.nslots);
    const MPI_Aint slot = f->slots_off + (MPI_Aint)k * f->slot_bytes;
    dist_backoff bo;
    dist_backoff_init(&bo, 2, 200);
    double t0 = pst_now();
    for (;;) {
        /* an atomic read: the root stores seq with a local store meanwhile,
         * and a plain MPI_Get of it would be a conflicting access */
        MPI_OK(MPI_Fetch_and_op(NULL, &seq, MPI_INT64_T, f->root, slot + CTL_SEQ * 8, MPI_NO_OP,
                                f->win));
        MPI_OK(MPI_Win_flush(f->root, f->win));
        if (seq == t + 1) break;
        dist_backoff_wait(&bo);
    }
    dist_get(f->buf, (size_t)f->slot_bytes, MPI_BYTE, 1, f->root, slot, f->win);
    MPI_OK(MPI_Win_flush(f->root, f->win));
    const int64_t *ctl = (const int64_t *)f->buf;
    const int64_t rel = t + 1;
    MPI_OK(MPI_Accumulate(&rel, 1, MPI_INT64_T, f->root, slot + CTL_RELEASE * 8, 1, MPI_INT64_T,
                          MPI_REPLACE, f->win));
    MPI_OK(MPI_Win_flush(f->root, f->win));
    if (wait) *wait += pst_now() - t0;
    if (ctl[CTL_SEQ] != t + 1)
        dist_fatal("feed: slot %d changed while read (seq %lld, ticket %lld)", k,
                   (long long)ctl[CTL_SEQ], (long long)t);
    b->ticket = t;
    b->epoch = (int)ctl[CTL_EPOCH];
    b->count = (int)ctl[CTL_COUNT];
    b->ids = (const int64_t *)(f->buf + f->ids_off);
    b->labels = (const int32_t *)(f->buf + f->labels_off);
    b->pixels = f->buf + f->pixels_off;
    return b->count > 0;
}

void feed_finish(feed *f)
{
    const int64_t one = 1;
    MPI_OK(MPI_Accumulate(&one, 1, MPI_INT64_T, f->root, HDR_FINISHED * 8, 1, MPI_INT64_T, MPI_SUM,
                          f->win));
    MPI_OK(MPI_Win_flush(f->root, f->win));
}

int64_t feed_next_step(feed *f)
{
    const int64_t one = 1;
    int64_t s = 0;
    MPI_OK(MPI_Fetch_and_op(&one, &s, MPI_INT64_T, f->root, HDR_STEP * 8, MPI_SUM, f->win));
    MPI_OK(MPI_Win_flush(f->root, f->win));
    return s;
}

int64_t feed_global_step(feed *f)
{
    int64_t s = 0;
    MPI_OK(MPI_Fetch_and_op(NULL, &s, MPI_INT64_T, f->root, HDR_STEP * 8, MPI_NO_OP, f->win));
    MPI_OK(MPI_Win_flush(f->root, f->win));
    return s;
}

void feed_report(feed *f, const double *vals, int n)
{
    if (n > FEED_REPORT_WORDS) n = FEED_REPORT_WORDS;
    MPI_Aint disp =
        f->reports_off + (MPI_Aint)f->rank * FEED_REPORT_WORDS * (MPI_Aint)sizeof(double);
    MPI_OK(MPI_Put(vals, n, MPI_DOUBLE, f->root, disp, n, MPI_DOUBLE, f->win));
}

void feed_flush(feed *f)
{
    MPI_OK(MPI_Win_flush(f->root, f->win));
}
