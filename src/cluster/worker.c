/*
 * worker.c - the worker loop: take a batch from the root's ring, pull the
 * variables, compute the gradient, push it (sync and async protocols:
 * ps.h), and log the batch for the end-of-run accounting.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist_internal.h"
#include "ssp.h"
#include "trainer.h"

typedef struct worker_args {
    const train_cfg *cfg;
    const start_info *info;
    nn_model *m;
    feed *f;
    ps_shard *s;
    int w, P, W, R;
    lr_schedule sched;
    ssp *ssp;      /* --max-staleness, else NULL */
    long slow_us;  /* test-only slowdown per step (test_slow_us) */
    int64_t *hist; /* async: staleness histogram, TRAIN_STALE_BINS */
    int64_t *stale_max;
} worker_args;

/* PSTRAIN_TEST_SLOW_WORKER=W:MS (test-only, docs/contributing.md): worker W
 * sleeps MS milliseconds in every step, so that tests can make one worker
 * the slowest. Returns this worker's microseconds (0: not slowed). */
static long test_slow_us(int w)
{
    const char *v = getenv("PSTRAIN_TEST_SLOW_WORKER");
    int sw = -1;
    long ms = 0;
    if (!v || sscanf(v, "%d:%ld", &sw, &ms) != 2 || sw != w || ms <= 0) return 0;
    return ms * 1000;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Async: an update applied `stale` global steps after the step its worker
 * pulled at. */
static void count_staleness(const worker_args *a, int64_t stale)
{
    a->hist[PST_MIN(PST_MAX(stale, 0), TRAIN_STALE_BINS - 1)]++;
    *a->stale_max = PST_MAX(*a->stale_max, stale);
}

/* Lockstep: ticket t belongs to version V0 + (t - t0)/W, counted from the
 * version and data cursor the run started at (a resumed run may have
 * another W than the run that wrote the checkpoint): waits for it on every
 * PS and sets versions[] to it. now: P words of scratch. */
static void wait_version_of(const worker_args *a, int64_t ticket, int64_t *versions, int64_t *now,
                            double *wait)
{
    const start_info *in = a->info;
    const int64_t v = in->first_version + (ticket - in->first_ticket) / a->W;
    for (int p = 0; p < a->P; p++) versions[p] = v - 1;
    ps_wait_newer(a->s, versions, now, wait);
    for (int p = 0; p < a->P; p++)
        if (now[p] != v)
            dist_fatal("ticket %lld expects version %lld, PS %d is at %lld", (long long)ticket,
                       (long long)v, p + 1, (long long)now[p]);
    memcpy(versions, now, sizeof *now * (size_t)a->P);
}

/* The timing words of the report record. */
static void put_timing(double rec[WR_N], const worker_timing *tm)
{
    rec[WR_WAIT_DATA] = tm->wait_data, rec[WR_PULL] = tm->pull, rec[WR_COMPUTE] = tm->compute;
    rec[WR_PUSH] = tm->push, rec[WR_WAIT_VERSION] = tm->wait_version;
}

/* Appends batch b to the example log: ticket, step, epoch, count, the
 * loss's bits, then the example ids. */
static void log_batch(i64vec *log, const feed_batch *b, int64_t step, float loss)
{
    int64_t loss_bits = 0;
    memcpy(&loss_bits, &loss, sizeof loss);
    vec_push(log, b->ticket);
    vec_push(log, step);
    vec_push(log, b->epoch);
    vec_push(log, b->count);
    vec_push(log, loss_bits);
    for (int i = 0; i < b->count; i++) vec_push(log, b->ids[i]);
}

/* --timeline: one step's phases, on contiguous stamps: t[0] take begins,
 * t[1] batch taken, t[2] pull begins (lockstep: after waiting for its
 * version), t[3] pull done, t[4] compute done, t[5] push done, t[6] the
 * next version seen (sync with backup workers; else unused). */
static void timeline_step(int64_t ticket, bool sync, bool lockstep, const double t[7])
{
    tl_add(TL_WAIT_DATA, t[0], t[1], ticket);
    if (lockstep) tl_add(TL_WAIT_VERSION, t[1], t[2], ticket);
    tl_add(TL_PULL, t[2], t[3], ticket);
    tl_add(TL_COMPUTE, t[3], t[4], ticket);
    tl_add(TL_PUSH, t[4], t[5], ticket);
    if (sync && !lockstep) tl_add(TL_WAIT_VERSION, t[5], t[6], ticket);
}

/* The worker loop. Fills the example log (ticket, step, epoch, count, ids...)
 * and its report record. */
static void worker_run(const worker_args *a, i64vec *log, double rec[WR_N])
{
    const train_cfg *cfg = a->cfg;
    const start_info *in = a->info;
    const int64_t px = (int64_t)in->height * in->width * in->channels;
    float *x = pst_aligned_alloc(sizeof(float) * (size_t)(cfg->batch * px));
    float *params = nn_model_params(a->m), *grads = nn_model_grads(a->m);
    const size_t nparam = nn_model_size(a->m);
    const bool sync = cfg->mode == TRAIN_SYNC;
    /* (with moving averages the PS applies every update: dist.c; bf16
     * pushes go to slots, as MPI_Accumulate cannot sum bf16) */
    const bool accumulate =
        !sync && cfg->opt.kind == OPT_SGD && !(cfg->ema_decay > 0) && !cfg->comm_bf16;
    const bool lockstep = sync && a->R == a->W;
    float *scratch = accumulate ? pst_aligned_alloc(sizeof(float) * nparam) : NULL;
    int64_t *versions = pst_calloc((size_t)a->P, sizeof *versions);
    int64_t *now = pst_calloc((size_t)a->P, sizeof *now);
    worker_timing tm = {0};
    memset(rec, 0, sizeof(double) * WR_N);
    bool pushed = false;
    int64_t ndone = 0, pulled = 0; /* steps completed; the global step at the pull */
    for (;;) {
        put_timing(rec, &tm);
        feed_report(a->f, rec, WR_N); /* completes with feed_take's flush */
        if (a->ssp) ssp_wait(a->ssp, ndone, &tm.wait_version);
        feed_batch b;
        double tt[7];
        tt[0] = tl_now();
        if (!feed_take(a->f, &b, &tm.wait_data)) break;
        tt[1] = tl_now();

        if (lockstep) wait_version_of(a, b.ticket, versions, now, &tm.wait_version);
        double t0 = pst_now();
        if (a->ssp) pulled = feed_global_step(a->f); /* --max-staleness: measured */
        if (sync && !lockstep)
            ps_pull_wire(a->s, params, true, versions);
        else
            ps_pull_wire(a->s, params, false, NULL);
        double t1 = pst_now();
        pipe_normalize(b.pixels, (int64_t)b.count * px / in->channels, in->channels, in->mean,
                       in->std, x);
        if (a->slow_us) sleep_us(a->slow_us);
        int ncorrect = 0;
        /* the ticket seeds dropout: results do not depend on which worker
         * computed which batch */
        float loss = nn_model_train_step(a->m, x, b.labels, b.count, b.ticket, &ncorrect);
        if (!isfinite(loss))
            dist_fatal("loss is %s at batch %lld (epoch %d): training diverged; lower --lr",
                       isnan(loss) ? "NaN" : "Inf", (long long)b.ticket, b.epoch + 1);
        double t2 = pst_now();
        int64_t step;
        if (sync) {
            step = versions[0];
            ps_push(a->s, a->w, grads, b.ticket, versions, step, b.count);
        } else if (accumulate) {
            step = feed_next_step(a->f);
            ps_accumulate(a->s, grads, lr_at(&a->sched, step), scratch);
        } else {
            if (pushed) ps_wait_acked(a->s, a->w, &tm.push);
            step = feed_next_step(a->f);
            ps_push(a->s, a->w, grads, b.ticket, NULL, step, b.count);
            pushed = true;
        }
        if (a->ssp) count_staleness(a, step - pulled);
        if (a->ssp) ssp_publish(a->ssp, a->w, ++ndone);
        double t3 = pst_now();
        tm.pull += t1 - t0;
        tm.compute += t2 - t1;
        tm.push += t3 - t2;
        rec[WR_STEPS] += 1;
        rec[WR_EXAMPLES] += b.count;
        rec[WR_LOSS] += loss;
        rec[WR_CORRECT] += ncorrect;
        rec[WR_LAST_STEP] = (double)step;
        rec[WR_EPOCH] = b.epoch;
        log_batch(log, &b, step, loss);
        bool done = false;
        if (sync && !lockstep) {
            done = ps_wait_newer(a->s, versions, now, &tm.wait_version);
            memcpy(versions, now, sizeof *now * (size_t)a->P);
        }
        if (tl_recording) {
            tt[2] = t0, tt[3] = t1, tt[4] = t2, tt[5] = t3, tt[6] = pst_now();
            timeline_step(b.ticket, sync, lockstep, tt);
        }
        if (done) break;
    }
    /* a finished worker never holds the others back */
    if (a->ssp) ssp_finish(a->ssp, a->w);
    /* an async gradient still unread would be lost under the end stamp */
    if (pushed) ps_wait_acked(a->s, a->w, &tm.push);
    ps_push_end(a->s, a->w);
    put_timing(rec, &tm);
    feed_report(a->f, rec, WR_N);
    feed_finish(a->f);
    free(x), free(scratch), free(versions), free(now);
}

void worker_role(dist_run *r)
{
    worker_args wa = {.cfg = r->cfg,
                      .info = &r->info,
                      .m = r->m,
                      .f = r->f,
                      .s = r->sh,
                      .w = r->worker_id,
                      .P = r->P,
                      .W = r->W,
                      .R = r->R,
                      .sched = r->sched,
                      .ssp = r->ssp,
                      .slow_us = test_slow_us(r->worker_id),
                      .hist = r->stale_hist,
                      .stale_max = &r->stale_max};
    worker_run(&wa, &r->log, r->my_rec);
}
