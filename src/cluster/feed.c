/*
 * feed.c - the batch ring in the root's RMA window (protocol in feed.h).
 *
 * Window layout (bytes, disp_unit 1), every part 64-byte aligned:
 *   [0, 64)                header: int64 head, step, finished, total, limit,
 *                          lhead (local counters: this feeder's counter)
 *   [64, 64 + R*128)       report records: FEED_REPORT_WORDS doubles per rank
 *   then K slots of slot_bytes:
 *     ctl int64[8]: seq (ticket+1 once filled), release (ticket+1 once read),
 *                   epoch, count
 *     ids int64[B] | labels int32[B] (padded to 8) | pixels uint8[B*px]
 * Feeders 1..F-1 allocate the same layout (of the header only lhead used;
 * reports unused).
 */
#include "pstrain/feed.h"

#include <stdlib.h>
#include <string.h>

#include "dist_internal.h"
#include "pstrain/timeline.h"

enum { HDR_HEAD = 0, HDR_STEP = 1, HDR_FINISHED = 2, HDR_TOTAL = 3, HDR_LIMIT = 4, HDR_LHEAD = 5 };
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
    int F, findex;       /* feeders; this rank's feeder index (-1: none) */
    int *franks;         /* the F feeder ranks, [0] = root */
    int64_t src_pos;     /* feeder: the ticket of the source's next batch */
    int64_t limit;       /* feeder: data only below it (F = 1: no limit) */
    int64_t src_end;     /* feeder: the ticket at which its source ended (-1) */
    bool local;          /* local counters (feed.h); prod is then a local ticket */
    int *wf, *cf;        /* local: W_f and c_f of each feeder */
    int att;             /* local: the feeder this rank takes from (-1: none) */
    bool move_on;        /* local: workers move on to other feeders (feed.h) */
    int home;            /* local: the feeder this rank is attached to */
};

/* Local counters: feeder fi's local ticket j as a global ticket. */
static int64_t global_of(const feed *f, int fi, int64_t j)
{
    const int64_t w = f->wf[fi];
    return f->g.first_ticket + j / w * f->g.nworkers + f->cf[fi] + j % w;
}

/* Local counters: feeder fi's first local ticket whose global ticket is at
 * or after t (the map is monotone). */
static int64_t local_at(const feed *f, int fi, int64_t t)
{
    if (t <= f->g.first_ticket) return 0;
    const int64_t d = t - f->g.first_ticket, W = f->g.nworkers, w = f->wf[fi];
    return d / W * w + PST_MIN(PST_MAX(d % W - f->cf[fi], (int64_t)0), w);
}

/* Local counters: W_f and c_f from the geometry's attachments, checked. */
static int local_setup(feed *f, pst_err *e)
{
    f->local = true;
    f->wf = pst_calloc((size_t)f->F, sizeof *f->wf);
    f->cf = pst_calloc((size_t)f->F, sizeof *f->cf);
    f->att = f->home = f->g.attach[f->rank];
    f->move_on = f->g.move_on;
    int n = 0, bad = -1;
    for (int r = 0; r < f->nranks; r++) {
        const int a = f->g.attach[r];
        if (a >= f->F || a < -1) bad = r;
        if (a >= 0 && a < f->F) f->wf[a]++, n++;
    }
    for (int i = 1; i < f->F; i++) f->cf[i] = f->cf[i - 1] + f->wf[i - 1];
    if (bad < 0 && n == f->g.nworkers) return 0;
    free(f->wf), free(f->cf);
    if (bad >= 0)
        return pst_fail(e, "feed: rank %d attached to feeder %d, expected -1 .. %d", bad,
                        f->g.attach[bad], f->F - 1);
    return pst_fail(e, "feed: %d ranks attached to feeders, expected the %d workers", n,
                    f->g.nworkers);
}

/* The slot of ticket t in its feeder's ring (the global counter). */
static int slot_of(const feed *f, int64_t t)
{
    return (int)((t / f->F) % f->g.nslots);
}

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
    f->F = g->nfeeders > 1 ? g->nfeeders : 1;
    f->franks = pst_calloc((size_t)f->F, sizeof *f->franks);
    f->franks[0] = root;
    f->findex = f->rank == root ? 0 : -1;
    for (int i = 1; i < f->F; i++) {
        f->franks[i] = g->feeder_ranks[i];
        if (f->franks[i] == f->rank) f->findex = i;
    }
    if (f->F > 1 && g->feeder_ranks[0] != root) {
        free(f->franks), free(f);
        return pst_fail(e, "feed: feeder 0 is rank %d, expected the root (rank %d)",
                        g->feeder_ranks[0], root);
    }
    if (f->F > 1 && g->attach && local_setup(f, e) < 0) {
        free(f->franks), free(f);
        return -1;
    }
    f->reports_off = 64;
    f->slots_off = align64(f->reports_off +
                           (MPI_Aint)f->nranks * FEED_REPORT_WORDS * (MPI_Aint)sizeof(double));
    f->ids_off = CTL_BYTES;
    f->labels_off = f->ids_off + (MPI_Aint)g->batch * 8;
    f->pixels_off = f->labels_off + align64((MPI_Aint)g->batch * 4);
    f->slot_bytes = align64(f->pixels_off + (MPI_Aint)g->batch * g->example_bytes);
    MPI_Aint size = f->findex >= 0 ? f->slots_off + (MPI_Aint)g->nslots * f->slot_bytes : 0;

    /* Each word sees one accumulate op only (head, lhead and finished MPI_SUM,
     * release MPI_REPLACE), as the default accumulate_ops=same_op_no_op asks. */
    int rc = MPI_Win_allocate(size, 1, MPI_INFO_NULL, comm, &f->base, &f->win);
    if (rc != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int n = 0;
        MPI_Error_string(rc, s, &n);
        free(f->franks), free(f);
        return pst_fail(e, "feed: MPI_Win_allocate of %lld bytes failed: %s", (long long)size, s);
    }
    MPI_Win_set_errhandler(f->win, MPI_ERRORS_RETURN);
    /* (on failure the caller aborts the job: freeing the window is collective) */
    if (dist_check_unified(f->win, "feed", e) < 0) return -1;
    if (f->findex >= 0) memset(f->base, 0, (size_t)size);
    if (f->rank == root) {
        ((int64_t *)f->base)[HDR_HEAD] = g->first_ticket;
        ((int64_t *)f->base)[HDR_STEP] = g->first_step;
        ((int64_t *)f->base)[HDR_TOTAL] = -1;
        ((int64_t *)f->base)[HDR_LIMIT] = g->first_ticket; /* nothing granted yet */
    }
    /* a feeder's first ticket: the first at or after first_ticket of its
     * stride (local counters: local ticket 0) */
    f->prod = f->local ? 0 : g->first_ticket;
    if (!f->local && f->findex >= 0)
        f->prod += ((f->findex - g->first_ticket) % f->F + f->F) % f->F;
    f->src_pos = g->first_ticket;
    f->limit = f->F > 1 ? g->first_ticket : INT64_MAX;
    f->src_end = -1;
    f->total = -1;
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
    free(f->franks);
    free(f->wf), free(f->cf);
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
    if (!f->local) return f->prod;
    return f->wf[0] > 0 ? global_of(f, 0, f->prod) : f->limit;
}

int64_t feed_root_total(const feed *f)
{
    return f->total;
}

int64_t feed_root_published_end(const feed *f)
{
    const int64_t next = feed_root_next_ticket(f);
    return f->F > 1 ? PST_MAX(next, f->limit) : next;
}

/* A header word of rank `owner`'s part of the window, read atomically from
 * any rank. */
static int64_t header_word(feed *f, int owner, int idx)
{
    if (f->rank == owner) return dist_load64(&((volatile int64_t *)f->base)[idx]);
    int64_t v = 0;
    MPI_OK(MPI_Fetch_and_op(NULL, &v, MPI_INT64_T, owner, idx * 8, MPI_NO_OP, f->win));
    MPI_OK(MPI_Win_flush(owner, f->win));
    return v;
}

static int64_t root_word(feed *f, int idx)
{
    return header_word(f, f->root, idx);
}

static void root_store(feed *f, int idx, int64_t v)
{
    dist_store64(&((volatile int64_t *)f->base)[idx], v);
    MPI_OK(MPI_Win_sync(f->win));
}

void feed_root_set_total(feed *f, int64_t total)
{
    if (f->total >= 0 && total >= f->total) return;
    /* never below what this rank or (F > 1) any feeder may have published */
    f->total = PST_MAX(total, feed_root_published_end(f));
    if (f->F > 1) root_store(f, HDR_TOTAL, f->total); /* before any new limit */
}

/* Local counters: the first ticket not yet taken (all below it are, as
 * below head with the global counter): the least of the feeders' next
 * global tickets, from their counters. */
static int64_t local_head(feed *f)
{
    int64_t head = INT64_MAX;
    for (int i = 0; i < f->F; i++)
        if (f->wf[i])
            head = PST_MIN(head, global_of(f, i, header_word(f, f->franks[i], HDR_LHEAD)));
    return head;
}

/* Moving on: the greatest of the feeders' next global tickets (every
 * ticket any worker has taken is below it). */
static int64_t local_front(feed *f)
{
    int64_t front = f->g.first_ticket;
    for (int i = 0; i < f->F; i++)
        if (f->wf[i])
            front = PST_MAX(front, global_of(f, i, header_word(f, f->franks[i], HDR_LHEAD)));
    return front;
}

int64_t feed_root_taken_end(feed *f)
{
    return f->local ? local_head(f) : feed_root_next_ticket(f);
}

/* Root, F > 1: grants feeders the tickets below head + F*K (their rings'
 * reach), never at or past the total. With local counters head is
 * local_head: every ticket below it is taken, and the feeder that serves
 * it can publish it, so no worker waits forever; a feeder's next ticket is
 * less than 3 versions (3W tickets) past it, as a worker's consecutive
 * tickets are at most a version apart, so with pstrain's K >= 2W + 2 no
 * taken ticket waits for the grant. Moving on, the groups do not wait for
 * the slowest: the tickets below local_front + K*W, which covers every
 * taken ticket and every feeder's full ring. The limit only grows. */
static void root_grant(feed *f)
{
    int64_t lim;
    if (f->move_on)
        lim = local_front(f) + (int64_t)f->g.nworkers * f->g.nslots;
    else
        lim = (f->local ? local_head(f) : root_word(f, HDR_HEAD)) + (int64_t)f->F * f->g.nslots;
    if (f->total >= 0) lim = PST_MIN(lim, f->total);
    if (lim > f->limit) {
        f->limit = lim;
        root_store(f, HDR_LIMIT, lim);
    }
}

/* Feeders: the root's limit, then its total (written in the other order,
 * so a limit read is never newer than the total read after it). */
static void feeder_read_grant(feed *f)
{
    f->limit = root_word(f, HDR_LIMIT);
    f->total = root_word(f, HDR_TOTAL);
}

/* The source's batch of ticket t (this feeder's): the batches of other
 * feeders' tickets before it are dropped. */
static int source_at(feed *f, const feed_hooks *h, int64_t t, pipe_batch *b, pst_err *e)
{
    for (;;) {
        int got = h->source(h->ctx, b, e);
        if (got <= 0) return got;
        if (f->src_pos++ == t) return 1;
    }
}

/* The tickets this feeder publishes data for end here (-1: not known). */
static int64_t data_end(const feed *f)
{
    if (f->src_end < 0) return f->total;
    return f->total < 0 ? f->src_end : PST_MIN(f->total, f->src_end);
}

/* Fills every free slot of this feeder in ticket order: data below the end
 * and the limit, end markers from the end on (one per worker that takes
 * from this feeder: W, or W_f with local counters, W again when workers
 * move on, and none on a feeder without workers). Returns 1 if it
 * published, 0 if not, -1 when the source fails. */
static int publish(feed *f, const feed_hooks *h, int64_t *filled, feed_serve_stats *st, pst_err *e)
{
    const int W = !f->local           ? f->g.nworkers
                  : !f->wf[f->findex] ? 0
                  : f->move_on        ? f->g.nworkers
                                      : f->wf[f->findex];
    int did = 0;
    for (;;) {
        /* the root grants before each of its own (possibly slow) batches */
        if (f->F > 1 && f->rank == f->root) root_grant(f);
        if (W == 0) break; /* no worker takes from this feeder */
        const int64_t end = data_end(f);
        const int64_t t = f->local ? global_of(f, f->findex, f->prod) : f->prod;
        if (end >= 0 && f->prod >= (f->local ? local_at(f, f->findex, end) : end) + W) break;
        const int k = f->local ? (int)(f->prod % f->g.nslots) : slot_of(f, f->prod);
        if (filled[k] >= 0 && dist_load64(&slot_ctl(f, k)[CTL_RELEASE]) != filled[k] + 1) break;
        if (end < 0 || t < end) {
            if (t >= f->limit) break; /* not granted yet */
            pipe_batch b;
            const double ts = pst_now();
            int got = source_at(f, h, t, &b, e);
            const double tb = pst_now();
            st->source_wait += tb - ts;
            if (got < 0) return -1;
            if (got > 0) {
                fill_slot(f, k, t, &b);
                tl_add(TL_WAIT_INPUT, ts, tb, 0);
                tl_add(TL_PUBLISH, tb, tl_now(), t);
                st->batches++;
            } else { /* the source ended: the rest are end markers */
                /* no data anywhere from here (every feeder's source is the
                 * same sequence): the root lowers the total below its limit */
                f->src_end = t;
                if (f->rank == f->root && (f->total < 0 || t < f->total)) {
                    f->total = t;
                    if (f->F > 1) root_store(f, HDR_TOTAL, f->total);
                }
                continue;
            }
        } else {
            fill_slot(f, k, t, NULL);
            st->end_markers++;
        }
        filled[k] = t;
        f->prod += f->local ? 1 : f->F;
        did = 1;
        dist_progress();
    }
    return did;
}

/* The service loop of the root (hooks poll and tick) and of feeders. */
static int serve(feed *f, const feed_hooks *h, feed_serve_stats *st, pst_err *e)
{
    const int K = f->g.nslots, W = f->g.nworkers;
    const bool root = f->rank == f->root;
    int64_t *filled = pst_malloc(sizeof *filled * (size_t)K);
    for (int k = 0; k < K; k++) filled[k] = -1;
    memset(st, 0, sizeof *st);
    dist_backoff bo;
    dist_backoff_init(&bo, 10, 1000);
    const double t0 = pst_now(), cpu0 = dist_thread_cpu_seconds();
    double t_tick = t0;
    int rc = 0;
    for (;;) {
        MPI_OK(MPI_Win_sync(f->win));
        if (root_word(f, HDR_FINISHED) >= W) break;
        bool did = false;
        if (h->poll) {
            int r = h->poll(h->ctx, e);
            if (r < 0) {
                rc = -1;
                break;
            }
            did = r > 0;
        }
        if (f->F > 1 && !root) feeder_read_grant(f);
        int r = publish(f, h, filled, st, e);
        if (r < 0) {
            rc = -1;
            break;
        }
        did = did || r > 0;
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
    st->wall = pst_now() - t0;
    st->cpu = dist_thread_cpu_seconds() - cpu0;
    free(filled);
    return rc;
}

int feed_root_serve(feed *f, int64_t total, const feed_hooks *h, feed_serve_stats *st, pst_err *e)
{
    f->total = total;
    if (f->F > 1) root_store(f, HDR_TOTAL, total);
    return serve(f, h, st, e);
}

int feed_feeder_serve(feed *f, const feed_hooks *h, feed_serve_stats *st, pst_err *e)
{
    if (f->findex < 1) return pst_fail(e, "feed: rank %d is not a feeder", f->rank);
    return serve(f, h, st, e);
}

/* ---- workers ------------------------------------------------------------- */

/* Takes one ticket (local counters: from feeder f->att) and waits for its
 * batch in f->buf. */
static void take_one(feed *f, feed_batch *b, double *wait)
{
    const int64_t one = 1;
    int64_t t = 0, seq = 0;
    int k, src;
    if (f->local) { /* local ticket j from feeder att */
        int64_t j = 0;
        src = f->franks[f->att];
        MPI_OK(MPI_Fetch_and_op(&one, &j, MPI_INT64_T, src, HDR_LHEAD * 8, MPI_SUM, f->win));
        MPI_OK(MPI_Win_flush(src, f->win));
        t = global_of(f, f->att, j);
        k = (int)(j % f->g.nslots);
    } else {
        MPI_OK(MPI_Fetch_and_op(&one, &t, MPI_INT64_T, f->root, HDR_HEAD * 8, MPI_SUM, f->win));
        MPI_OK(MPI_Win_flush(f->root, f->win));
        k = slot_of(f, t), src = f->franks[t % f->F];
    }
    const MPI_Aint slot = f->slots_off + (MPI_Aint)k * f->slot_bytes;
    dist_backoff bo;
    dist_backoff_init(&bo, 2, 200);
    double t0 = pst_now();
    for (;;) {
        /* an atomic read: the root stores seq with a local store meanwhile,
         * and a plain MPI_Get of it would be a conflicting access */
        MPI_OK(
            MPI_Fetch_and_op(NULL, &seq, MPI_INT64_T, src, slot + CTL_SEQ * 8, MPI_NO_OP, f->win));
        MPI_OK(MPI_Win_flush(src, f->win));
        if (seq == t + 1) break;
        dist_backoff_wait(&bo);
    }
    dist_get(f->buf, (size_t)f->slot_bytes, MPI_BYTE, 1, src, slot, f->win);
    MPI_OK(MPI_Win_flush(src, f->win));
    const int64_t *ctl = (const int64_t *)f->buf;
    const int64_t rel = t + 1;
    MPI_OK(MPI_Accumulate(&rel, 1, MPI_INT64_T, src, slot + CTL_RELEASE * 8, 1, MPI_INT64_T,
                          MPI_REPLACE, f->win));
    MPI_OK(MPI_Win_flush(src, f->win));
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
}

int feed_take(feed *f, feed_batch *b, double *wait)
{
    for (;;) {
        take_one(f, b, wait);
        if (b->count > 0 || !f->move_on) return b->count > 0;
        /* this feeder's data are all taken: the next one with workers,
         * until every one has given this worker its end marker */
        int n = f->att;
        do n = (n + 1) % f->F;
        while (!f->wf[n]);
        if (n == f->home) return 0;
        f->att = n;
    }
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
