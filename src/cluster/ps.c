/*
 * ps.c - parameter-server shards and the sync/async update protocols
 * (protocol in ps.h).
 *
 * Window layout of PS p (bytes, disp_unit 1, parts 64-byte aligned), the
 * same formula on every rank so that origins compute displacements locally:
 *   [0, 64)                      ctl: int64 lockseq, done
 *   [64, 64 + 64*W)              stamps: int64 seq, version, ticket, count,
 *                                step, ack (per worker)
 *   params_off                   n_p floats (the master variables)
 *   copy_off                     --comm-dtype bf16: the copy of the params
 *                                that workers pull, in the wire layout, else
 *                                empty
 *   grads_off(w)                 worker w's gradient slot (n_p floats, or
 *                                the wire layout under --comm-dtype bf16)
 * The wire layout (bf16): the shard's ranges back to back at wire_off,
 * trainable ones as bf16, non-trainable ones (batch-norm moving statistics,
 * whose 1% steps would round away in bf16) as float32, each range 4-byte
 * aligned.
 *   avg_off                      the moving averages (n_p floats), after the
 *                                gradient slots (--moving-average-decay)
 */
#include "pstrain/ps.h"

#include <stdlib.h>
#include <string.h>

#include "dist_internal.h"
#include "pstrain/bf16.h"
#include "pstrain/pool.h"
#include "pstrain/timeline.h"

enum { CTL_LOCKSEQ = 0, CTL_DONE = 1, CTL_STOP_T = 2, CTL_CKPT_AT = 3, CTL_EVAL_AT = 4 };
enum { TAG_SNAP_VERSION = 7101, TAG_SNAP_DATA = 7102 };
enum { ST_SEQ = 0, ST_VERSION = 1, ST_TICKET = 2, ST_COUNT = 3, ST_STEP = 4, ST_ACK = 5 };
#define STAMP_BYTES 64

struct ps_shard {
    MPI_Comm comm;
    MPI_Win win;
    const place_plan *plan;
    ps_layout lay;
    int rank, me;  /* me: this rank's PS index, or -1 */
    int *ps_ranks; /* rank of PS p in comm */
    unsigned char *base;
    MPI_Aint params_off;
    MPI_Aint *slot_bytes; /* [nps] one shard rounded up to 64 bytes */
    MPI_Aint *wire_bytes; /* [nps] one shard in the wire layout rounded up, 0 without bf16 */
    MPI_Aint *wire_off;   /* [nranges] bf16: a range's byte offset in the wire layout */
    uint16_t *wire;       /* worker: the bf16 slab being pulled or pushed (bf16 only) */
    int64_t my_seq;       /* worker: pushes so far */
    int64_t seq_buf;      /* the seq being put, alive until flushed */
    int64_t *stamp_buf;   /* worker: 4 stamp words per PS, alive until flushed */
    int nslots;           /* optimizer slots per parameter */
    int navg;             /* 1 with moving averages, else 0 */
    float *slots;         /* PS: nslots arrays of the shard size */
    float *snap;          /* PS: params + slots snapshot in flight to the root */
    int64_t snap_version;
    MPI_Request *snap_req; /* the version, then the data's pieces */
    int nsnap_req;
    int64_t *req_buf; /* root: words being put by ps_request_* */
};

static MPI_Aint align64(MPI_Aint n)
{
    return (n + 63) / 64 * 64;
}

/* The bf16 copy of the params (--comm-dtype bf16; empty otherwise). */
static MPI_Aint copy_off(const ps_shard *s, int p)
{
    return s->params_off + s->slot_bytes[p];
}

/* A gradient slot: bf16 or float32 as the workers push them. */
static MPI_Aint gslot_bytes(const ps_shard *s, int p)
{
    return s->lay.bf16 ? s->wire_bytes[p] : s->slot_bytes[p];
}

static MPI_Aint grads_off(const ps_shard *s, int p, int w)
{
    return copy_off(s, p) + s->wire_bytes[p] + gslot_bytes(s, p) * w;
}

static MPI_Aint avg_off(const ps_shard *s, int p)
{
    return grads_off(s, p, s->lay.grad_slots ? s->lay.nworkers : 0);
}

static MPI_Aint stamp_off(int w, int word)
{
    return 64 + (MPI_Aint)w * STAMP_BYTES + word * 8;
}

int ps_count(const ps_shard *s)
{
    return s->plan->nps;
}

/* The full slab's floats: the shards' sizes add up to it. */
static size_t plan_floats(const place_plan *plan)
{
    size_t n = 0;
    for (int p = 0; p < plan->nps; p++) n += plan->ps_floats[p];
    return n;
}

/* --comm-dtype bf16: the copy of this PS's params [lo, hi) (shard floats)
 * in the wire layout. */
static void refresh_copy(const ps_shard *s, size_t lo, size_t hi)
{
    const place_plan *pl = s->plan;
    const float *params = (const float *)(s->base + s->params_off);
    unsigned char *copy = s->base + copy_off(s, s->me);
    for (int r = pl->ps_first[s->me]; r < pl->ps_first[s->me] + pl->ps_nranges[s->me]; r++) {
        const place_range *q = &pl->ranges[r];
        size_t a = PST_MAX(q->ps_offset, lo), e = PST_MIN(q->ps_offset + q->count, hi);
        if (a >= e) continue;
        if (q->trainable)
            pst_f32_to_bf16_n((uint16_t *)(copy + s->wire_off[r]) + (a - q->ps_offset), params + a,
                              e - a);
        else
            memcpy((float *)(copy + s->wire_off[r]) + (a - q->ps_offset), params + a,
                   sizeof(float) * (e - a));
    }
}

int ps_new(ps_shard **out, MPI_Comm comm, const place_plan *plan, const ps_layout *lay,
           const float *init, pst_err *e)
{
    *out = NULL;
    ps_shard *s = pst_calloc(1, sizeof *s);
    s->comm = comm;
    s->plan = plan;
    s->lay = *lay;
    MPI_Comm_rank(comm, &s->rank);
    s->ps_ranks = pst_malloc(sizeof *s->ps_ranks * (size_t)plan->nps);
    memcpy(s->ps_ranks, lay->ps_ranks, sizeof *s->ps_ranks * (size_t)plan->nps);
    s->lay.ps_ranks = s->ps_ranks;
    s->me = -1;
    for (int p = 0; p < plan->nps; p++)
        if (s->ps_ranks[p] == s->rank) s->me = p;
    s->params_off = align64(64 + (MPI_Aint)STAMP_BYTES * lay->nworkers);
    s->slot_bytes = pst_malloc(sizeof *s->slot_bytes * (size_t)plan->nps);
    s->wire_bytes = pst_malloc(sizeof *s->wire_bytes * (size_t)plan->nps);
    s->wire_off = pst_calloc((size_t)PST_MAX(plan->nranges, 1), sizeof *s->wire_off);
    s->stamp_buf = pst_malloc(sizeof *s->stamp_buf * 4 * (size_t)plan->nps);
    s->req_buf = pst_calloc((size_t)plan->nps, sizeof *s->req_buf);
    s->nslots = opt_nslots(lay->opt.kind);
    s->navg = lay->ema_decay > 0;
    for (int p = 0; p < plan->nps; p++) {
        s->slot_bytes[p] = align64((MPI_Aint)(plan->ps_floats[p] * sizeof(float)));
        MPI_Aint off = 0;
        for (int r = plan->ps_first[p]; lay->bf16 && r < plan->ps_first[p] + plan->ps_nranges[p];
             r++) {
            s->wire_off[r] = off;
            off += (MPI_Aint)(plan->ranges[r].count * (plan->ranges[r].trainable ? 2 : 4));
            off = (off + 3) / 4 * 4;
        }
        s->wire_bytes[p] = align64(off);
    }
    if (lay->bf16 && s->me < 0)
        s->wire = pst_aligned_alloc(sizeof *s->wire * (size_t)PST_MAX(plan_floats(plan), 1));
    MPI_Aint size = 0;
    if (s->me >= 0) size = avg_off(s, s->me) + s->slot_bytes[s->me] * s->navg;
    int rc = MPI_Win_allocate(size, 1, MPI_INFO_NULL, comm, &s->base, &s->win);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int n = 0;
        MPI_Error_string(rc, msg, &n);
        free(s->slot_bytes);
        free(s->wire_bytes);
        free(s->wire_off);
        free(s->wire);
        free(s->stamp_buf);
        free(s->req_buf);
        free(s->ps_ranks);
        free(s);
        return pst_fail(e, "ps: MPI_Win_allocate of %lld bytes failed: %s", (long long)size, msg);
    }
    MPI_Win_set_errhandler(s->win, MPI_ERRORS_RETURN);
    /* (on failure the caller aborts the job: freeing the window is collective) */
    if (dist_check_unified(s->win, "ps", e) < 0) return -1;
    if (s->me >= 0) {
        memset(s->base, 0, (size_t)size);
        float *params = (float *)(s->base + s->params_off);
        float *avg = (float *)(s->base + avg_off(s, s->me));
        const float *init_avg = lay->init_averages ? lay->init_averages : init;
        for (int r = plan->ps_first[s->me]; r < plan->ps_first[s->me] + plan->ps_nranges[s->me];
             r++) {
            const place_range *q = &plan->ranges[r];
            memcpy(params + q->ps_offset, init + q->offset, sizeof(float) * q->count);
            if (s->navg) memcpy(avg + q->ps_offset, init_avg + q->offset, sizeof(float) * q->count);
        }
        /* optimizer slots: from a checkpoint, or their initial values */
        const size_t n = plan->ps_floats[s->me];
        s->slots = pst_aligned_alloc(sizeof(float) * (size_t)PST_MAX(s->nslots, 1) * (n ? n : 1));
        opt_init_slots(&lay->opt, s->slots, n, n);
        if (lay->init_slots)
            for (int k = 0; k < s->nslots; k++)
                for (int r = plan->ps_first[s->me];
                     r < plan->ps_first[s->me] + plan->ps_nranges[s->me]; r++) {
                    const place_range *q = &plan->ranges[r];
                    memcpy(s->slots + (size_t)k * n + q->ps_offset,
                           lay->init_slots + (size_t)k * lay->init_slot_stride + q->offset,
                           sizeof(float) * q->count);
                }
        const size_t nsnap = n * (size_t)(1 + s->nslots + s->navg);
        s->snap = pst_aligned_alloc(sizeof(float) * (nsnap ? nsnap : 1));
        s->nsnap_req = 1 + dist_nchunks(nsnap, sizeof(float));
        s->snap_req = pst_malloc(sizeof *s->snap_req * (size_t)s->nsnap_req);
        for (int i = 0; i < s->nsnap_req; i++) s->snap_req[i] = MPI_REQUEST_NULL;
        if (lay->bf16) refresh_copy(s, 0, n);
        ((int64_t *)s->base)[CTL_LOCKSEQ] = 2 * lay->first_version;
        ((int64_t *)s->base)[CTL_STOP_T] = -1;  /* no request (a stop may lower T to 0) */
        ((int64_t *)s->base)[CTL_CKPT_AT] = -1; /* no request */
        ((int64_t *)s->base)[CTL_EVAL_AT] = -1;
    }
    MPI_OK(MPI_Win_lock_all(MPI_MODE_NOCHECK, s->win));
    MPI_OK(MPI_Win_sync(s->win));
    MPI_OK(MPI_Barrier(comm));
    *out = s;
    return 0;
}

void ps_free(ps_shard *s)
{
    if (!s) return;
    MPI_OK(MPI_Win_unlock_all(s->win));
    MPI_OK(MPI_Win_free(&s->win));
    free(s->slot_bytes);
    free(s->wire_bytes);
    free(s->wire_off);
    free(s->wire);
    free(s->stamp_buf);
    free(s->req_buf);
    free(s->slots);
    free(s->ps_ranks);
    free(s->snap);
    free(s->snap_req);
    free(s);
}

static int ps_rank_of(const ps_shard *s, int p)
{
    return s->ps_ranks[p];
}

/* ---- PS side ---------------------------------------------------------- */

typedef struct fresh {
    int w;
    int64_t ticket;
} fresh;

static int cmp_ticket(const void *a, const void *b)
{
    const fresh *x = a, *y = b;
    return (x->ticket > y->ticket) - (x->ticket < y->ticket);
}

/* Optimizer on the trainable ranges, copy on the non-trainable ones; then
 * the moving averages of every range, for global step ema_t (the step this
 * update makes). The shard goes by blocks of PS_BLOCK floats on the PS's
 * pool (--ps-threads): every update is elementwise, so the blocks give the
 * same bits on any number of threads. */
#define PS_BLOCK 16384

typedef struct apply_job {
    const ps_shard *s;
    const ps_serve_cfg *c;
    float lr, d;
    int64_t t;
    float *params, *slots, *avg;
    const float *g;
    size_t n;
} apply_job;

static void apply_block(void *varg, int b, int tid)
{
    const apply_job *j = varg;
    const place_plan *pl = j->s->plan;
    const int me = j->s->me;
    const size_t lo = (size_t)b * PS_BLOCK, hi = PST_MIN(lo + PS_BLOCK, j->n);
    for (int r = pl->ps_first[me]; r < pl->ps_first[me] + pl->ps_nranges[me]; r++) {
        const place_range *q = &pl->ranges[r];
        size_t a = PST_MAX(q->ps_offset, lo), e = PST_MIN(q->ps_offset + q->count, hi);
        if (a >= e) continue;
        if (q->trainable)
            opt_apply(&j->c->opt, j->lr, j->t, j->params + a, j->g + a, j->slots + a, j->n, e - a);
        else
            memcpy(j->params + a, j->g + a, sizeof(float) * (e - a));
        if (j->s->navg) ema_apply(j->d, j->avg + a, j->params + a, e - a);
    }
    /* --comm-dtype bf16: the copy the workers pull, of the block's new values */
    if (j->s->lay.bf16) refresh_copy(j->s, lo, hi);
}

static void apply_shard(ps_shard *s, nn_pool *pool, const ps_serve_cfg *c, float lr, int64_t t,
                        int64_t ema_t, float *params, const float *g, float *slots, size_t n)
{
    apply_job j = {s, c,      lr,    s->navg ? ema_decay_at(s->lay.ema_decay, ema_t) : 0,
                   t, params, slots, (float *)(s->base + avg_off(s, s->me)),
                   g, n};
    nn_pool_for(pool, (int)((n + PS_BLOCK - 1) / PS_BLOCK), apply_block, &j);
}

/* ---- the service loop ------------------------------------------------------------ */

/* One PS's service: the shard, the configuration, the statistics it fills,
 * and what the loop keeps between passes. */
typedef struct serve_state {
    ps_shard *s;
    const ps_serve_cfg *c;
    ps_serve_stats *st;
    nn_pool *pool; /* --ps-threads */
    int W, R;
    size_t n; /* shard floats */
    bool sync, lockstep;
    volatile int64_t *ctl;
    float *params, *acc;
    int64_t *seen; /* [W] the last seq read from each worker's stamp */
    bool *ended;   /* [W] end stamp seen */
    bool *have;    /* [W] sync: a fresh gradient of this version in the slot */
    fresh *order;  /* [nhave] the fresh gradients, by arrival */
    int nhave, nended;
    /* lockstep (sync, R == W): version V0+k is exactly tickets
     * [tk0+kW, tk0+kW+W) of the T published, in slots (ticket-tk0) mod W;
     * the PS stops after last_version. A stop request lowers T (CTL_STOP_T). */
    int64_t V0, tk0, version, T, last_version;
    double t0, cpu0, t_report;
    double t_free; /* --timeline: the end of the last apply (an idle stretch starts) */
    dist_backoff bo;
} serve_state;

static int serve_init(serve_state *ss, ps_shard *s, const ps_serve_cfg *c, ps_serve_stats *st,
                      pst_err *e)
{
    memset(ss, 0, sizeof *ss);
    if (c->threads > 1 && nn_pool_new(&ss->pool, c->threads, e) < 0) return -1;
    ss->s = s, ss->c = c, ss->st = st;
    const int W = ss->W = s->lay.nworkers;
    ss->R = c->replicas > 0 ? PST_MIN(c->replicas, W) : W;
    const size_t n = ss->n = s->plan->ps_floats[s->me];
    ss->sync = c->mode == TRAIN_SYNC;
    ss->ctl = (volatile int64_t *)s->base;
    ss->params = (float *)(s->base + s->params_off);
    ss->acc = pst_aligned_alloc(sizeof(float) * (n ? n : 1));
    ss->seen = pst_calloc((size_t)W, sizeof *ss->seen);
    ss->ended = pst_calloc((size_t)W, sizeof *ss->ended);
    ss->have = pst_calloc((size_t)W, sizeof *ss->have);
    ss->order = pst_malloc(sizeof *ss->order * (size_t)W);
    memset(st, 0, sizeof *st);
    /* the PS's wake-up latency adds to every sync step (and to an async
     * gradient's turnaround); without slots (async SGD) it only serves
     * progress and end stamps, and sleeps longer */
    dist_backoff_init(&ss->bo, 10, s->lay.grad_slots ? 250 : 1000);
    ss->t0 = pst_now(), ss->cpu0 = dist_cpu_seconds();
    ss->t_report = ss->t0;
    ss->t_free = ss->t0;
    ss->V0 = s->lay.first_version, ss->tk0 = s->lay.first_ticket;
    ss->version = ss->V0;
    ss->lockstep = s->lay.lockstep;
    ss->T = c->total_tickets;
    ss->last_version = ss->lockstep ? ss->V0 + (ss->T - ss->tk0 + W - 1) / W : 0;
    return 0;
}

/* --timeline: an apply [ta, tb) and the idle stretch before it; adds the
 * apply's time to the statistics. */
static void note_apply(serve_state *ss, double ta, int64_t arg)
{
    const double tb = pst_now();
    ss->st->apply += tb - ta;
    tl_add(TL_IDLE, ss->t_free, ta, 0);
    tl_add(TL_APPLY, ta, tb, arg);
    ss->t_free = tb;
}

static void serve_free(serve_state *ss)
{
    free(ss->acc), free(ss->seen), free(ss->ended), free(ss->have), free(ss->order);
    nn_pool_free(ss->pool);
}

/* Lockstep: applies a stop request (a lower T), then ends the service once
 * this PS has reached the last version. Returns true if it ended it. */
static bool lockstep_check_end(serve_state *ss)
{
    int64_t stop_t = dist_load64(&ss->ctl[CTL_STOP_T]); /* -1: no request */
    if (stop_t >= 0 && stop_t < ss->T) {
        ss->T = stop_t;
        ss->last_version = ss->V0 + (ss->T - ss->tk0 + ss->W - 1) / ss->W;
    }
    /* Finished? Checked on every pass, not only after an update: a stop
     * request may name a version this PS has already applied. The root
     * computes the stop from the tickets it had published when its poll
     * began; if it is slow before the request leaves (a checkpoint
     * written in the same poll, a descheduled process), the workers
     * drain the ring meanwhile and the PS reaches that version with the
     * old T. It then gets no more gradients: had it waited for one more
     * update to notice, it would never end (docs/design.md §3.9). */
    if (ss->version >= ss->last_version && ss->nended < ss->W) {
        dist_store64(&ss->ctl[CTL_DONE], 1);
        ss->nended = ss->W;
        return true;
    }
    return false;
}

/* --comm-dtype bf16: worker w's slot (wire layout) widened exactly to
 * float32 into the shard-sized `acc`: stored (add false) or added
 * element by element (add true). */
static void slot_add(const ps_shard *s, int w, float *acc, bool add)
{
    const place_plan *pl = s->plan;
    const unsigned char *slot = s->base + grads_off(s, s->me, w);
    for (int r = pl->ps_first[s->me]; r < pl->ps_first[s->me] + pl->ps_nranges[s->me]; r++) {
        const place_range *q = &pl->ranges[r];
        float *x = acc + q->ps_offset;
        if (q->trainable) {
            const uint16_t *g = (const uint16_t *)(slot + s->wire_off[r]);
            if (add)
                for (size_t i = 0; i < q->count; i++) x[i] += pst_bf16_to_f32(g[i]);
            else
                pst_bf16_to_f32_n(x, g, q->count);
        } else {
            const float *g = (const float *)(slot + s->wire_off[r]);
            if (add)
                for (size_t i = 0; i < q->count; i++) x[i] += g[i];
            else
                memcpy(x, g, sizeof(float) * q->count);
        }
    }
}

/* Worker w's gradient slot as float32: the slot itself, or (bf16) its
 * values converted into ss->acc. */
static const float *slot_f32(serve_state *ss, int w)
{
    ps_shard *s = ss->s;
    const unsigned char *slot = s->base + grads_off(s, s->me, w);
    if (!s->lay.bf16) return (const float *)slot;
    slot_add(s, w, ss->acc, false);
    return ss->acc;
}

/* Async with slots: applies worker w's gradient now, with lr and moving
 * averages from the global step it drew, then acknowledges push `seq`. */
static void apply_async(serve_state *ss, int w, volatile int64_t *stp, int64_t seq)
{
    ps_shard *s = ss->s;
    double ta = pst_now();
    const float *g = slot_f32(ss, w);
    float lr = lr_at(&ss->c->sched, stp[ST_STEP]);
    ss->st->applied++;
    apply_shard(s, ss->pool, ss->c, lr, ss->st->applied, stp[ST_STEP] + 1, ss->params, g, s->slots,
                ss->n);
    MPI_OK(MPI_Win_sync(s->win));
    dist_store64(&stp[ST_ACK], seq);
    MPI_OK(MPI_Win_sync(s->win));
    note_apply(ss, ta, ss->st->applied);
}

/* Reads every worker's stamp once: end stamps, and new pushes (sync: noted
 * as fresh when stamped with this version, else dropped as stale; async:
 * applied). Returns true if any stamp changed. */
static bool poll_stamps(serve_state *ss)
{
    ps_shard *s = ss->s;
    bool did = false;
    for (int w = 0; w < ss->W; w++) {
        volatile int64_t *stp = (volatile int64_t *)(s->base + stamp_off(w, 0));
        int64_t seq = dist_load64(&stp[ST_SEQ]);
        if (seq == ss->seen[w]) continue;
        did = true;
        /* pushes overwritten before we looked were stale (a worker
         * pushes again only after a newer version) */
        if (!ss->lockstep) ss->st->dropped_stale += seq - ss->seen[w] - 1;
        ss->seen[w] = seq;
        /* the stamp and the gradient were written before the seq: order
         * our reads of them after the read of seq (unified model) */
        MPI_OK(MPI_Win_sync(s->win));
        int64_t count = stp[ST_COUNT];
        if (count < 0) {
            if (!ss->ended[w]) ss->ended[w] = true, ss->nended++;
            continue;
        }
        if (!ss->sync) {
            apply_async(ss, w, stp, seq);
        } else if (stp[ST_VERSION] == ss->version && !ss->have[w]) {
            ss->have[w] = true;
            ss->order[ss->nhave++] = (fresh){w, stp[ST_TICKET]};
        } else {
            ss->st->dropped_stale++;
        }
    }
    return did;
}

/* Sync: whether the version may be applied now: the fresh gradients are
 * complete (lockstep: every ticket of the version; backup workers: R of
 * them, or all that the workers still running can give) and the step
 * limit is not reached. */
static bool version_complete(const serve_state *ss)
{
    const int nhave = ss->nhave;
    bool complete =
        ss->lockstep
            ? nhave > 0 &&
                  nhave == PST_MIN((int64_t)ss->W, ss->T - ss->tk0 - (ss->version - ss->V0) * ss->W)
            : nhave > 0 && (nhave >= ss->R || nhave + ss->nended >= ss->W);
    return complete && (ss->c->max_versions <= 0 || ss->version < ss->c->max_versions);
}

/* --comm-dtype bf16: the sum of the first `take` slots of ss->order, each
 * value widened exactly to float32 and added in that order (the same float
 * operations as the float32 path on the widened values). */
static void sum_bf16_slots(serve_state *ss, int take)
{
    for (int j = 0; j < take; j++) slot_add(ss->s, ss->order[j].w, ss->acc, j > 0);
}

/* Sync: averages the first R fresh gradients in ticket order and applies
 * them under the seqlock (lockseq odd while the parameters change), bumps
 * the version, raises `done` at the step limit or the last version, and
 * (lockstep) sends a snapshot the root asked for or that ckpt_every calls. */
static void apply_version(serve_state *ss)
{
    ps_shard *s = ss->s;
    const ps_serve_cfg *c = ss->c;
    ps_serve_stats *st = ss->st;
    const size_t n = ss->n;
    float *acc = ss->acc;
    double ta = pst_now();
    int take = PST_MIN(ss->nhave, ss->R); /* the first R by arrival */
    st->dropped_stale += ss->nhave - take;
    qsort(ss->order, (size_t)take, sizeof *ss->order, cmp_ticket);
    /* sum in ticket order, then average: the same float operations
     * for every element whatever the sharding */
    if (s->lay.bf16)
        sum_bf16_slots(ss, take);
    else {
        memcpy(acc, s->base + grads_off(s, s->me, ss->order[0].w), sizeof(float) * n);
        for (int j = 1; j < take; j++) {
            const float *g = (const float *)(s->base + grads_off(s, s->me, ss->order[j].w));
            for (size_t i = 0; i < n; i++) acc[i] += g[i];
        }
    }
    if (take > 1) {
        const float div = (float)take;
        for (size_t i = 0; i < n; i++) acc[i] /= div;
    }
    int64_t version = ss->version;
    dist_store64(&ss->ctl[CTL_LOCKSEQ], 2 * version + 1);
    MPI_OK(MPI_Win_sync(s->win));
    apply_shard(s, ss->pool, c, lr_at(&c->sched, version), version + 1, version + 1, ss->params,
                acc, s->slots, n);
    ss->version = ++version;
    st->applied += take;
    for (int w = 0; w < ss->W; w++) ss->have[w] = false;
    ss->nhave = 0;
    const bool last = ss->lockstep && version >= ss->last_version;
    if ((c->max_versions > 0 && version >= c->max_versions) || last)
        dist_store64(&ss->ctl[CTL_DONE], 1);
    if (last) ss->nended = ss->W;
    /* checkpoints: every ckpt_every versions, or the version the root
     * asked for (never the last one: the final state follows) */
    if (ss->lockstep && version < ss->last_version &&
        ((c->ckpt_every > 0 && version % c->ckpt_every == 0) ||
         version == dist_load64(&ss->ctl[CTL_CKPT_AT]) ||
         version == dist_load64(&ss->ctl[CTL_EVAL_AT])))
        ps_snapshot_send(s, version);
    MPI_OK(MPI_Win_sync(s->win));
    dist_store64(&ss->ctl[CTL_LOCKSEQ], 2 * version);
    MPI_OK(MPI_Win_sync(s->win));
    note_apply(ss, ta, version);
}

/* Whether the service is over: every worker ended (lockstep: or the last
 * version is applied) with no gradient pending, or (sync) at the step
 * limit. */
static bool serve_over(const serve_state *ss)
{
    if (ss->nended == ss->W && ss->nhave == 0) return true;
    return ss->nended == ss->W && ss->sync && ss->c->max_versions > 0 &&
           ss->version >= ss->c->max_versions;
}

/* The PS report record, to c->report. */
static void serve_report(serve_state *ss, double cpu)
{
    const ps_serve_stats *st = ss->st;
    double vals[PR_N] = {[PR_VERSION] = (double)ss->version,
                         [PR_APPLIED] = (double)st->applied,
                         [PR_DROPPED] = (double)st->dropped_stale,
                         [PR_APPLY] = st->apply,
                         [PR_IDLE] = st->idle,
                         [PR_CPU] = cpu};
    ss->c->report(ss->c->report_ctx, vals, PR_N);
}

/* The end of a pass: MPI progress, a report every report_secs, and a
 * back-off sleep (counted as idle) when the pass did nothing. */
static void serve_pause(serve_state *ss, bool did)
{
    dist_progress();
    double now = pst_now();
    if (ss->c->report && now - ss->t_report >= ss->c->report_secs) {
        serve_report(ss, dist_cpu_seconds() - ss->cpu0);
        ss->t_report = now;
    }
    if (did) {
        dist_backoff_reset(&ss->bo);
    } else {
        double tw = pst_now();
        dist_backoff_wait(&ss->bo);
        ss->st->idle += pst_now() - tw;
    }
}

/* Sync, R == W: versions of exactly W tickets until the last version. */
static void serve_lockstep(serve_state *ss)
{
    for (;;) {
        MPI_OK(MPI_Win_sync(ss->s->win));
        bool did = lockstep_check_end(ss);
        if (poll_stamps(ss)) did = true;
        if (version_complete(ss)) {
            apply_version(ss);
            did = true;
        }
        if (serve_over(ss)) break;
        serve_pause(ss, did);
    }
}

/* Sync, R < W (backup workers): versions of the first R fresh gradients,
 * until every worker has ended. */
static void serve_backup(serve_state *ss)
{
    for (;;) {
        MPI_OK(MPI_Win_sync(ss->s->win));
        bool did = poll_stamps(ss);
        if (version_complete(ss)) {
            apply_version(ss);
            did = true;
        }
        if (serve_over(ss)) break;
        serve_pause(ss, did);
    }
}

/* Async: each gradient applied as it arrives (async SGD: the workers
 * accumulate themselves, the PS serves end stamps only). */
static void serve_async(serve_state *ss)
{
    for (;;) {
        MPI_OK(MPI_Win_sync(ss->s->win));
        bool did = poll_stamps(ss);
        if (serve_over(ss)) break;
        serve_pause(ss, did);
    }
}

int ps_serve(ps_shard *s, const ps_serve_cfg *c, ps_serve_stats *st, pst_err *e)
{
    serve_state ss;
    if (serve_init(&ss, s, c, st, e) < 0) return -1;
    if (ss.lockstep)
        serve_lockstep(&ss);
    else if (ss.sync)
        serve_backup(&ss);
    else
        serve_async(&ss);
    st->version = ss.version;
    st->wall = pst_now() - ss.t0;
    tl_add(TL_IDLE, ss.t_free, ss.t0 + st->wall, 0);
    st->cpu = dist_cpu_seconds() - ss.cpu0;
    if (c->report) serve_report(&ss, st->cpu);
    ps_snapshot_wait(s);
    serve_free(&ss);
    return 0;
}

/* ---- snapshots: PS -> root by two-sided messages ---------------------------------- */

void ps_snapshot_send(ps_shard *s, int64_t version)
{
    const size_t n = s->plan->ps_floats[s->me];
    /* the previous snapshot must have left before its buffer is reused */
    ps_snapshot_wait(s);
    memcpy(s->snap, s->base + s->params_off, sizeof(float) * n);
    memcpy(s->snap + n, s->slots, sizeof(float) * n * (size_t)s->nslots);
    if (s->navg)
        memcpy(s->snap + n * (size_t)(1 + s->nslots), s->base + avg_off(s, s->me),
               sizeof(float) * n);
    s->snap_version = version;
    MPI_OK(MPI_Isend(&s->snap_version, 1, MPI_INT64_T, s->lay.root_rank, TAG_SNAP_VERSION, s->comm,
                     &s->snap_req[0]));
    dist_isend(s->snap, n * (size_t)(1 + s->nslots + s->navg), MPI_FLOAT, sizeof(float),
               s->lay.root_rank, TAG_SNAP_DATA, s->comm, &s->snap_req[1]);
}

/* One request at a time, not MPI_Waitall: GCC 12 takes MPICH's
 * MPI_STATUSES_IGNORE ((MPI_Status *)1) for an array of size 0 that
 * MPI_Waitall writes n statuses to (-Wstringop-overflow). */
void ps_snapshot_wait(ps_shard *s)
{
    for (int i = 0; i < s->nsnap_req; i++) MPI_OK(MPI_Wait(&s->snap_req[i], MPI_STATUS_IGNORE));
}

int ps_snapshot_recv(ps_shard *s, int p, bool block, int64_t *version, float *params, float *slots,
                     size_t slot_stride, float *averages)
{
    const int src = ps_rank_of(s, p);
    if (!block) {
        int flag = 0;
        MPI_OK(MPI_Iprobe(src, TAG_SNAP_VERSION, s->comm, &flag, MPI_STATUS_IGNORE));
        if (!flag) return 0;
    }
    const place_plan *pl = s->plan;
    const size_t n = pl->ps_floats[p];
    const size_t nsnap = n * (size_t)(1 + s->nslots + s->navg);
    float *buf = pst_aligned_alloc(sizeof(float) * (nsnap ? nsnap : 1));
    MPI_OK(MPI_Recv(version, 1, MPI_INT64_T, src, TAG_SNAP_VERSION, s->comm, MPI_STATUS_IGNORE));
    dist_recv(buf, nsnap, MPI_FLOAT, sizeof(float), src, TAG_SNAP_DATA, s->comm);
    for (int r = pl->ps_first[p]; r < pl->ps_first[p] + pl->ps_nranges[p]; r++) {
        const place_range *q = &pl->ranges[r];
        memcpy(params + q->offset, buf + q->ps_offset, sizeof(float) * q->count);
        for (int k = 0; k < s->nslots; k++)
            memcpy(slots + (size_t)k * slot_stride + q->offset,
                   buf + n + (size_t)k * n + q->ps_offset, sizeof(float) * q->count);
        if (s->navg)
            memcpy(averages + q->offset, buf + n * (size_t)(1 + s->nslots) + q->ps_offset,
                   sizeof(float) * q->count);
    }
    free(buf);
    return 1;
}

/* Completes this rank's operations on every PS: one MPI_Win_flush per PS,
 * not MPI_Win_flush_all, which under MPICH 4.0.2 (ch4:ucx) can return
 * before a pull's MPI_Gets have landed (docs/platform.md, "MPICH 4.0.2"):
 * a sync worker would compute on the previous version's parameters. */
static void flush_ps(ps_shard *s)
{
    for (int p = 0; p < s->plan->nps; p++) MPI_OK(MPI_Win_flush(s->ps_ranks[p], s->win));
}

static void put_ctl_all(ps_shard *s, int word, int64_t value)
{
    for (int p = 0; p < s->plan->nps; p++) {
        s->req_buf[p] = value;
        MPI_OK(MPI_Put(&s->req_buf[p], 1, MPI_INT64_T, ps_rank_of(s, p), word * 8, 1, MPI_INT64_T,
                       s->win));
    }
    flush_ps(s);
}

void ps_request_snapshot(ps_shard *s, int64_t version)
{
    put_ctl_all(s, CTL_CKPT_AT, version);
}

void ps_request_eval(ps_shard *s, int64_t version)
{
    put_ctl_all(s, CTL_EVAL_AT, version);
}

void ps_request_stop(ps_shard *s, int64_t total_tickets)
{
    put_ctl_all(s, CTL_STOP_T, total_tickets);
}

/* ---- worker side --------------------------------------------------------- */

static int ps_rank(const ps_shard *s, int p)
{
    return s->ps_ranks[p];
}

/* PS p's ranges of the full slab `out` from its window at byte `base`
 * (params_off: the parameters; avg_off: the moving averages). */
static void get_ranges(ps_shard *s, int p, float *out, MPI_Aint base)
{
    const place_plan *pl = s->plan;
    for (int r = pl->ps_first[p]; r < pl->ps_first[p] + pl->ps_nranges[p]; r++) {
        const place_range *q = &pl->ranges[r];
        dist_get(out + q->offset, q->count, MPI_FLOAT, sizeof(float), ps_rank(s, p),
                 base + (MPI_Aint)(q->ps_offset * sizeof(float)), s->win);
    }
}

/* --comm-dtype bf16: PS p's ranges of its copy: the trainable ones (bf16)
 * into the slab s->wire, the others (float32) into `out`. */
static void get_ranges_bf16(ps_shard *s, int p, float *out)
{
    const place_plan *pl = s->plan;
    for (int r = pl->ps_first[p]; r < pl->ps_first[p] + pl->ps_nranges[p]; r++) {
        const place_range *q = &pl->ranges[r];
        const MPI_Aint disp = copy_off(s, p) + s->wire_off[r];
        if (q->trainable)
            dist_get(s->wire + q->offset, q->count, MPI_UINT16_T, 2, ps_rank(s, p), disp, s->win);
        else
            dist_get(out + q->offset, q->count, MPI_FLOAT, sizeof(float), ps_rank(s, p), disp,
                     s->win);
    }
}

/* What pull_from reads: the params, the moving averages, or (workers under
 * --comm-dtype bf16) the bf16 copy of the params. */
typedef enum pull_what { PULL_PARAMS, PULL_AVG, PULL_BF16 } pull_what;

static void get_what(ps_shard *s, int p, float *out, pull_what what)
{
    if (what == PULL_BF16)
        get_ranges_bf16(s, p, out);
    else
        get_ranges(s, p, out, what == PULL_AVG ? avg_off(s, p) : s->params_off);
}

/* lockseq and done, read atomically (element-wise): the PS stores them with
 * local stores meanwhile, and a plain MPI_Get would be a conflicting access. */
static void get_ctl(ps_shard *s, int p, int64_t ctl[2])
{
    MPI_OK(MPI_Get_accumulate(NULL, 0, MPI_INT64_T, ctl, 2, MPI_INT64_T, ps_rank(s, p), 0, 2,
                              MPI_INT64_T, MPI_NO_OP, s->win));
    MPI_OK(MPI_Win_flush(ps_rank(s, p), s->win));
}

static void pull_from(ps_shard *s, float *out, pull_what what, bool consistent, int64_t *versions)
{
    const int P = s->plan->nps;
    if (!consistent) {
        for (int p = 0; p < P; p++) get_what(s, p, out, what);
        flush_ps(s);
        return;
    }
    dist_backoff bo;
    dist_backoff_init(&bo, 2, 200);
    for (int p = 0; p < P; p++) {
        for (;;) {
            int64_t a[2], b[2];
            get_ctl(s, p, a);
            if (a[CTL_LOCKSEQ] & 1) {
                dist_backoff_wait(&bo);
                continue;
            }
            get_what(s, p, out, what);
            MPI_OK(MPI_Win_flush(ps_rank(s, p), s->win));
            get_ctl(s, p, b);
            if (a[CTL_LOCKSEQ] == b[CTL_LOCKSEQ]) {
                if (versions) versions[p] = a[CTL_LOCKSEQ] / 2;
                break;
            }
        }
    }
}

void ps_pull(ps_shard *s, float *params, bool consistent, int64_t *versions)
{
    pull_from(s, params, PULL_PARAMS, consistent, versions);
}

void ps_pull_wire(ps_shard *s, float *params, bool consistent, int64_t *versions)
{
    if (!s->lay.bf16) {
        ps_pull(s, params, consistent, versions);
        return;
    }
    pull_from(s, params, PULL_BF16, consistent, versions);
    const place_plan *pl = s->plan;
    for (int r = 0; r < pl->nranges; r++) {
        const place_range *q = &pl->ranges[r];
        if (q->trainable) pst_bf16_to_f32_n(params + q->offset, s->wire + q->offset, q->count);
    }
}

void ps_comm_bytes(const ps_shard *s, int64_t *pull, int64_t *push)
{
    const place_plan *pl = s->plan;
    int64_t n = 0;
    for (int r = 0; r < pl->nranges; r++)
        n += (int64_t)pl->ranges[r].count * (s->lay.bf16 && pl->ranges[r].trainable ? 2 : 4);
    *pull = n;
    *push = n;
}

void ps_pull_averages(ps_shard *s, float *averages, bool consistent)
{
    if (!s->navg) dist_fatal("ps_pull_averages: this run keeps no moving averages");
    pull_from(s, averages, PULL_AVG, consistent, NULL);
}

bool ps_wait_newer(ps_shard *s, const int64_t *after, int64_t *now, double *wait)
{
    const int P = s->plan->nps;
    dist_backoff bo;
    dist_backoff_init(&bo, 2, 200);
    double t0 = pst_now();
    bool done = false;
    for (int p = 0; p < P; p++) {
        for (;;) {
            int64_t c[2];
            get_ctl(s, p, c);
            if (c[CTL_DONE]) done = true;
            if (c[CTL_DONE] || (!(c[CTL_LOCKSEQ] & 1) && c[CTL_LOCKSEQ] >= 2 * after[p] + 2)) {
                if (now) now[p] = c[CTL_LOCKSEQ] / 2;
                break;
            }
            dist_backoff_wait(&bo);
        }
    }
    if (wait) *wait += pst_now() - t0;
    return done;
}

static void put_stamp(ps_shard *s, int slot, int64_t ticket, const int64_t *versions, int64_t step,
                      int64_t count)
{
    const int P = s->plan->nps;
    /* stamp fields (with the data, if any, still in flight), then, after
     * both completed, the seq that publishes them */
    for (int p = 0; p < P; p++) {
        int64_t *f = s->stamp_buf + 4 * p;
        f[0] = versions ? versions[p] : 0;
        f[1] = ticket;
        f[2] = count;
        f[3] = step;
        MPI_OK(MPI_Put(f, 4, MPI_INT64_T, ps_rank(s, p), stamp_off(slot, ST_VERSION), 4,
                       MPI_INT64_T, s->win));
    }
    flush_ps(s);
    /* lockstep slots are shared by workers over time: the ticket makes the
     * seq unique; a worker's own slot counts its pushes */
    s->my_seq++;
    s->seq_buf = s->lay.lockstep ? ticket + 1 : s->my_seq;
    for (int p = 0; p < P; p++)
        MPI_OK(MPI_Put(&s->seq_buf, 1, MPI_INT64_T, ps_rank(s, p), stamp_off(slot, ST_SEQ), 1,
                       MPI_INT64_T, s->win));
    flush_ps(s);
}

void ps_push(ps_shard *s, int w, const float *grads, int64_t ticket, const int64_t *versions,
             int64_t step, int count)
{
    const place_plan *pl = s->plan;
    const int slot = s->lay.lockstep ? (int)((ticket - s->lay.first_ticket) % s->lay.nworkers) : w;
    if (s->lay.bf16) {
        for (int r = 0; r < pl->nranges; r++) {
            const place_range *q = &pl->ranges[r];
            const MPI_Aint disp = grads_off(s, q->ps, slot) + s->wire_off[r];
            if (!q->trainable) {
                dist_put(grads + q->offset, q->count, MPI_FLOAT, sizeof(float), ps_rank(s, q->ps),
                         disp, s->win);
                continue;
            }
            pst_f32_to_bf16_n(s->wire + q->offset, grads + q->offset, q->count);
            dist_put(s->wire + q->offset, q->count, MPI_UINT16_T, 2, ps_rank(s, q->ps), disp,
                     s->win);
        }
        put_stamp(s, slot, ticket, versions, step, count);
        return;
    }
    for (int r = 0; r < pl->nranges; r++) {
        const place_range *q = &pl->ranges[r];
        dist_put(grads + q->offset, q->count, MPI_FLOAT, sizeof(float), ps_rank(s, q->ps),
                 grads_off(s, q->ps, slot) + (MPI_Aint)(q->ps_offset * sizeof(float)), s->win);
    }
    put_stamp(s, slot, ticket, versions, step, count); /* its first flush completes the data */
}

void ps_push_end(ps_shard *s, int w)
{
    if (s->lay.lockstep) return; /* the PS counts versions instead */
    put_stamp(s, w, -1, NULL, -1, -1);
}

void ps_wait_acked(ps_shard *s, int w, double *wait)
{
    const int P = s->plan->nps;
    dist_backoff bo;
    dist_backoff_init(&bo, 2, 200);
    double t0 = pst_now();
    for (int p = 0; p < P; p++) {
        for (;;) {
            int64_t ack = 0;
            MPI_OK(MPI_Fetch_and_op(NULL, &ack, MPI_INT64_T, ps_rank(s, p), stamp_off(w, ST_ACK),
                                    MPI_NO_OP, s->win));
            MPI_OK(MPI_Win_flush(ps_rank(s, p), s->win));
            if (ack >= s->my_seq) break;
            dist_backoff_wait(&bo);
        }
    }
    if (wait) *wait += pst_now() - t0;
}

void ps_accumulate(ps_shard *s, const float *grads, float lr, float *scratch)
{
    const place_plan *pl = s->plan;
    for (int r = 0; r < pl->nranges; r++) {
        const place_range *q = &pl->ranges[r];
        const MPI_Aint disp = s->params_off + (MPI_Aint)(q->ps_offset * sizeof(float));
        if (q->trainable) {
            float *x = scratch + q->offset;
            const float *g = grads + q->offset;
            for (size_t i = 0; i < q->count; i++) x[i] = -lr * g[i];
            dist_accumulate(x, q->count, MPI_FLOAT, sizeof(float), ps_rank(s, q->ps), disp, MPI_SUM,
                            s->win);
        } else {
            dist_accumulate(grads + q->offset, q->count, MPI_FLOAT, sizeof(float),
                            ps_rank(s, q->ps), disp, MPI_REPLACE, s->win);
        }
    }
    flush_ps(s);
}
