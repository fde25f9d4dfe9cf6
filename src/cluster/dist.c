/*
 * dist.c - distributed training: roles, start-up checks, the worker loop,
 * the root's duties during the run (metrics, checkpoints, evaluations, stop
 * signals) and the end of a run (final variables, evaluation, accounting).
 *
 * Roles (docs/design.md §1): rank 0 root (input pipeline -> batch ring, metrics,
 * summary), ranks 1..P parameter servers (ps.c), ranks P+1..N-1 workers.
 * Every rank builds the same model from the same seed (so initial
 * variables agree without a broadcast; a resumed run broadcasts the
 * checkpoint's), the same placement plan, and joins two windows: the root's
 * batch ring (feed.c) and the PS shards (ps.c).
 *
 * Termination: the root knows the ticket limit T in advance (epochs x
 * batches per epoch, capped by --steps), publishes end-of-data markers from
 * T on and serves until every worker has called feed_finish. A lockstep PS
 * (sync, R = W) stops after the version that consumes ticket T-1; other PS
 * serve until every worker has put its end stamp (sync with backup workers
 * and --steps: the PS raise `done` after S updates). Afterwards every PS
 * sends its final shard (variables and optimizer slots) to the root, and all
 * ranks meet in collectives: the root gathers the example logs and timings,
 * writes the final checkpoint, evaluates and fills the result.
 *
 * Checkpoints (--checkpoint-dir): a checkpoint is the PS snapshots of one
 * version, assembled on the root (ckpt.h layout, independent of P and the
 * placement). Lockstep PS snapshot every --checkpoint-every versions on
 * their own, and at a version the root names for --checkpoint-secs (one
 * whose tickets it has not published yet, so every PS takes the same). The
 * data cursor of version v is ticket t0 + (v - v0) W (t0, v0: where this run
 * started); at the end it is t0 + the batches the workers took. SIGTERM/SIGUSR1/SIGINT
 * (the root's flag decides): the root lowers T to the end of the version in
 * flight, the run ends there with a final checkpoint and exit 0. --resume:
 * the root reads the checkpoint, everybody starts at its version and data
 * cursor (the pipeline replays the epoch and skips the consumed batches), so
 * a sync run resumed ends bitwise equal to an uninterrupted one, for any PS
 * count. Another worker count resumes too (the cursor counts batches):
 * lockstep then groups W' batches a version from the cursor on, so the run
 * is deterministic for any PS count but differs from the W-worker one. Async and backup-worker runs
 * checkpoint at the end and on a signal.
 *
 * --eval-every E: lockstep runs evaluate the snapshot of the version that
 * ends epoch E, 2E, ... (the same numbers for any PS count); other modes the
 * variables as they are once the ring has passed the epoch's last batch.
 *
 * --trace-examples FILE: one JSON object per batch, in worker order:
 * {"worker": w, "step": the version (sync) or global step (async) it was
 * computed at, "ticket": t, "epoch": e, "ids": [...]}.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "dist_internal.h"
#include "pstrain/blas.h"
#include "pstrain/ckpt.h"
#include "pstrain/feed.h"
#include "pstrain/h5ds.h"
#include "pstrain/metrics.h"
#include "pstrain/model.h"
#include "pstrain/pipeline.h"
#include "pstrain/placement.h"
#include "pstrain/ps.h"
#include "pstrain/signals.h"
#include "pstrain/train.h"

/* Worker report record in the root's window (doubles). */
enum {
    WR_STEPS,
    WR_EXAMPLES,
    WR_LOSS,
    WR_CORRECT,
    WR_WAIT_DATA,
    WR_PULL,
    WR_COMPUTE,
    WR_PUSH,
    WR_WAIT_VERSION,
    WR_LAST_STEP,
    WR_EPOCH,
    WR_N
};
/* PS report record: version, applied, dropped, apply, idle, cpu */
enum { PR_VERSION, PR_APPLIED, PR_DROPPED, PR_APPLY, PR_IDLE, PR_CPU, PR_N };

/* What the root tells everybody before any window exists. */
typedef struct start_info {
    int ok;
    int height, width, channels, classes;
    float mean[H5DS_MAX_CHANNELS], std[H5DS_MAX_CHANNELS];
    int64_t per_epoch; /* examples per epoch */
    int64_t bpe;       /* batches per epoch */
    int64_t total;     /* absolute ticket limit: batches to publish, -1 = until stopped */
    int64_t max_versions;
    /* resume (all 0 for a fresh run) */
    int resumed;
    int64_t first_version; /* sync: updates already applied (global step) */
    int64_t first_ticket;  /* batches already consumed (the data cursor) */
    int64_t prior_examples;
    double prior_seconds;
    char msg[PST_ERR_LEN];
} start_info;

static void die_hook(int status)
{
    MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
}

/* Checks that do not need the data: identical on every rank, so every rank
 * refuses a bad configuration the same way, before any window exists. */
static int check_config(const train_cfg *c, int size, pst_err *e)
{
    const int P = c->ps, W = size - 1 - c->ps;
    if (P < 1)
        return pst_fail(e,
                        "--ps %d: distributed training needs at least one parameter server "
                        "(run with --ps 1 or more, and at least 3 ranks: root, PS, worker)",
                        P);
    if (W < 1)
        return pst_fail(e,
                        "--ps %d with %d MPI ranks leaves no worker: %d ranks are needed at "
                        "least (1 root + %d PS + 1 or more workers), e.g. mpirun -np %d",
                        P, size, P + 2, P, P + 2);
    if (c->replicas_to_aggregate < 0 || c->replicas_to_aggregate > W)
        return pst_fail(e,
                        "--replicas-to-aggregate %d with %d workers: expected 1..%d (more "
                        "replicas than workers needs at least %d ranks with --ps %d)",
                        c->replicas_to_aggregate, W, W, 1 + P + c->replicas_to_aggregate, P);
    if (c->batch < 1) return pst_fail(e, "--batch: expected a positive integer");
    if (!(c->lr >= 0)) return pst_fail(e, "--lr: expected a non-negative number");
    if (c->epochs < 0 || c->steps < 0)
        return pst_fail(e, "--epochs/--steps: expected non-negative values");
    if (c->epochs == 0 && c->steps == 0)
        return pst_fail(e, "nothing to do: give --epochs E or --steps S");
    if (c->placement == PLACE_PARTITION && c->partition_bytes <= 0)
        return pst_fail(e, "--partition-bytes: expected a positive number of bytes");
    return 0;
}

/* ---- root: metrics ticks -------------------------------------------------- */

typedef struct root_ctx {
    const train_cfg *cfg;
    const start_info *info;
    feed *f;
    ps_shard *sh;
    metrics *mx;
    pipeline *pl;
    int P, W, R;
    bool lockstep;
    lr_schedule sched;
    int64_t total_steps;
    double t0;
    double prev[64][WR_N]; /* previous worker records (first 64 workers) */
    double last_loss;
    bool have_loss;
    /* checkpoints and stop (root's poll hook) */
    const nn_var *vars;
    int nvars;
    const char *model_text;
    const h5ds *ds;
    size_t nparam;
    int nslots;
    float *ck_params, *ck_slots; /* a snapshot being assembled */
    int *ck_got;
    int *final_got; /* PS whose final state arrived (in ck_params/ck_slots) */
    int64_t ck_version;
    bool ck_requested;
    double t_ckpt;
    bool stopping;
    int stop_signal;
    int64_t told_total;     /* the ticket limit the PS know */
    int64_t ck_req_version; /* the time-based checkpoint asked for */
    /* --eval-every: the next epoch count to evaluate after, and (lockstep)
     * the version whose snapshot serves it (-1: not asked yet) */
    nn_model *m;
    h5ds *ds_rw;
    int nring;
    int next_eval_epoch;
    int64_t eval_version;
    const char *eval_split; /* --eval-split or its default; NULL: none */
    train_result *res;
} root_ctx;

static void root_tick(void *vctx)
{
    root_ctx *c = vctx;
    double steps = 0, dsteps = 0, ex = 0, dex = 0, dloss = 0, dcorrect = 0;
    double last_step = 0;
    int epoch = 0;
    worker_timing wt = {0};
    int nw = PST_MIN(c->W, 64);
    for (int w = 0; w < c->W; w++) {
        const double *r = feed_report_of(c->f, 1 + c->P + w);
        steps += r[WR_STEPS];
        ex += r[WR_EXAMPLES];
        last_step = PST_MAX(last_step, r[WR_LAST_STEP]);
        epoch = PST_MAX(epoch, (int)r[WR_EPOCH]);
        if (w < nw) {
            double *p = c->prev[w];
            double ds = r[WR_STEPS] - p[WR_STEPS];
            dsteps += ds;
            dex += r[WR_EXAMPLES] - p[WR_EXAMPLES];
            dloss += r[WR_LOSS] - p[WR_LOSS];
            dcorrect += r[WR_CORRECT] - p[WR_CORRECT];
            if (r[WR_STEPS] > 0) {
                wt.wait_data += r[WR_WAIT_DATA] / r[WR_STEPS] / nw;
                wt.pull += r[WR_PULL] / r[WR_STEPS] / nw;
                wt.compute += r[WR_COMPUTE] / r[WR_STEPS] / nw;
                wt.push += r[WR_PUSH] / r[WR_STEPS] / nw;
                wt.wait_version += r[WR_WAIT_VERSION] / r[WR_STEPS] / nw;
            }
            memcpy(p, r, sizeof(double) * WR_N);
        }
    }
    ps_timing pt = {0};
    double version = 0;
    for (int p = 0; p < c->P; p++) {
        const double *r = feed_report_of(c->f, 1 + p);
        version = PST_MAX(version, r[PR_VERSION]);
        pt.apply += r[PR_APPLY] / c->P;
        pt.idle += r[PR_IDLE] / c->P;
        pt.cpu += r[PR_CPU] / c->P;
    }
    if (dsteps <= 0) return;
    int64_t step = c->cfg->mode == TRAIN_SYNC ? (int64_t)version : (int64_t)steps;
    double el = pst_now() - c->t0;
    c->last_loss = dloss / dsteps;
    c->have_loss = true;
    metrics_step_rec rec = {.step = step,
                            .total_steps = c->total_steps,
                            .epoch = epoch,
                            .loss = c->last_loss,
                            .accuracy = dex > 0 ? dcorrect / dex : 0,
                            .lr = lr_at(&c->sched, step),
                            .images_per_sec = el > 0 ? ex / el : 0,
                            .worker = &wt,
                            .ps = &pt};
    (void)last_step;
    metrics_step(c->mx, &rec);
}

static int pipe_source(void *ctx, pipe_batch *b, pst_err *e)
{
    return pipe_next(((root_ctx *)ctx)->pl, b, e);
}

/* The checkpoint attributes of the state after sync version `version`, or
 * (async, and at the end) after `next_batch` batches and `step` steps. */
static ckpt_meta run_meta(const root_ctx *c, int64_t step, int64_t next_batch)
{
    const start_info *in = c->info;
    const train_cfg *cfg = c->cfg;
    ckpt_meta m;
    memset(&m, 0, sizeof m);
    m.model_name = cfg->model;
    m.model_text = c->model_text;
    m.height = in->height, m.width = in->width, m.channels = in->channels;
    m.num_classes = in->classes;
    m.global_step = step;
    const int64_t bpe = PST_MAX(in->bpe, 1);
    m.epoch = (int)(next_batch / bpe);
    m.epoch_batch = next_batch % bpe;
    m.next_batch = next_batch;
    /* every batch but an epoch's last is full */
    m.examples = (int64_t)m.epoch * in->per_epoch + m.epoch_batch * cfg->batch;
    m.seed = cfg->seed;
    m.train_seconds = in->prior_seconds + (pst_now() - c->t0);
    m.mode = cfg->mode == TRAIN_ASYNC ? "async" : "sync";
    m.workers = c->W, m.ps = c->P, m.batch = cfg->batch;
    m.opt = cfg->opt;
    m.lr = c->sched;
    m.weight_decay = cfg->weight_decay;
    m.label_smoothing = cfg->label_smoothing;
    return m;
}

static int save_checkpoint(root_ctx *c, int64_t step, int64_t next_batch, const float *params,
                           const float *slots, pst_err *e)
{
    ckpt_meta cm = run_meta(c, step, next_batch);
    if (ckpt_save(c->cfg->checkpoint_dir, c->cfg->keep_checkpoints, &cm, c->vars, c->nvars, params,
                  c->nslots ? slots : NULL, c->nparam, c->res->last_checkpoint,
                  sizeof c->res->last_checkpoint, e) < 0)
        return -1;
    if (!c->cfg->quiet)
        fprintf(stderr, "\ncheckpoint %s (step %lld)\n", c->res->last_checkpoint, (long long)step);
    return 0;
}

/* The root's poll hook: assembles PS snapshots into checkpoints, asks for
 * time-based ones, and turns a stop signal into a stop at the next version
 * boundary (sync) or after the batches already published (async). */
/* Evaluates the root's copy of the model (params already in it) on the test
 * split, sharing the data set with the pipeline's reader. */
static int root_eval(root_ctx *c, int64_t step, int epoch, pst_err *e)
{
    if (!c->eval_split) return 0;
    double acc, loss;
    int64_t n;
    int r = train_evaluate(c->m, c->ds_rw, c->eval_split, c->cfg->batch, &acc, &loss, &n, NULL, e);
    if (r < 0) return -1;
    metrics_eval(c->mx, step, epoch, c->eval_split, acc, loss, n);
    return 0;
}

/* The root's poll hook: assembles PS snapshots into checkpoints and
 * evaluations, asks for time-based checkpoints and epoch-end evaluations,
 * and turns a stop signal into a stop at the next version boundary (sync)
 * or after the batches already published (async). */
/* The next evaluation's epoch boundary (absolute ticket), or -1 if none
 * comes before the end (which has its own evaluation). */
static int64_t next_eval_ticket(const root_ctx *c)
{
    if (c->cfg->eval_every <= 0 || c->stopping) return -1;
    const start_info *in = c->info;
    int64_t L = (int64_t)c->next_eval_epoch * PST_MAX(in->bpe, 1);
    int64_t ft = feed_root_total(c->f);
    int64_t end = ft >= 0 ? ft : (in->total >= 0 ? in->total : INT64_MAX);
    return L < end ? L : -1;
}

static int root_poll(void *vctx, pst_err *e)
{
    root_ctx *c = vctx;
    const train_cfg *cfg = c->cfg;
    const start_info *in = c->info;
    int did = 0;
    /* the input ended early (or a stop lowered the limit): the PS must not
     * wait for versions that will never come */
    const int64_t ft = feed_root_total(c->f);
    if (c->lockstep && ft >= 0 && ft < c->told_total) {
        ps_request_stop(c->sh, ft);
        c->told_total = ft;
    }
    const int64_t prod = feed_root_next_ticket(c->f);
    if (c->lockstep) {
        int ngot = 0;
        for (int p = 0; p < c->P; p++) {
            int64_t v;
            if (!c->ck_got[p] && !c->final_got[p] &&
                ps_snapshot_recv(c->sh, p, false, &v, c->ck_params, c->ck_slots, c->nparam)) {
                did = 1;
                if (v < 0) { /* this PS is done: its final state, kept for the end */
                    c->final_got[p] = 1;
                    continue;
                }
                if (p > 0 && c->ck_got[0] && v != c->ck_version)
                    dist_fatal("PS %d snapshot at version %lld, PS 1 at %lld", p + 1, (long long)v,
                               (long long)c->ck_version);
                c->ck_version = v;
                c->ck_got[p] = 1;
            }
            ngot += c->ck_got[p];
        }
        if (ngot == c->P) {
            const int64_t v = c->ck_version;
            const int64_t next = in->first_ticket + (v - in->first_version) * c->W;
            const bool is_ckpt = cfg->checkpoint_dir &&
                                 ((cfg->checkpoint_every > 0 && v % cfg->checkpoint_every == 0) ||
                                  (c->ck_requested && v == c->ck_req_version));
            if (is_ckpt) {
                if (save_checkpoint(c, v, next, c->ck_params, c->ck_slots, e) < 0) return -1;
                c->ck_requested = false;
                c->t_ckpt = pst_now();
            }
            if (v == c->eval_version) {
                memcpy(nn_model_params(c->m), c->ck_params, sizeof(float) * c->nparam);
                if (root_eval(c, v, c->next_eval_epoch, e) < 0) return -1;
                c->eval_version = -1;
                c->next_eval_epoch += cfg->eval_every;
            }
            memset(c->ck_got, 0, sizeof *c->ck_got * (size_t)c->P);
        }
        /* Requests name a version no PS can have reached yet (its tickets
         * are not all published), so every PS snapshots the same one. */
        const int64_t v_safe = in->first_version + (prod - in->first_ticket) / c->W + 1;
        if (cfg->checkpoint_dir && cfg->checkpoint_secs > 0 && !c->ck_requested && !c->stopping &&
            pst_now() - c->t_ckpt >= cfg->checkpoint_secs) {
            ps_request_snapshot(c->sh, v_safe);
            c->ck_requested = true;
            c->ck_req_version = v_safe;
            c->t_ckpt = pst_now();
        }
        const int64_t eval_ticket = next_eval_ticket(c);
        if (eval_ticket >= 0 && c->eval_version < 0) {
            /* the first version after the epoch's last batch (or later, if
             * the root already published past it) */
            int64_t v_end = in->first_version + (eval_ticket - in->first_ticket + c->W - 1) / c->W;
            c->eval_version = PST_MAX(v_end, v_safe);
            ps_request_eval(c->sh, c->eval_version);
        }
    } else if (next_eval_ticket(c) >= 0 && prod >= next_eval_ticket(c) + c->nring) {
        /* async / backup workers: once the ring has cycled past the epoch's
         * last batch, evaluate the variables as they are, at about the step
         * the workers report */
        ps_pull(c->sh, nn_model_params(c->m), c->cfg->mode == TRAIN_SYNC, NULL);
        double step = 0;
        for (int w = 0; w < c->W; w++)
            step = PST_MAX(step, feed_report_of(c->f, 1 + c->P + w)[WR_LAST_STEP] + 1);
        if (root_eval(c, (int64_t)step, c->next_eval_epoch, e) < 0) return -1;
        c->next_eval_epoch += cfg->eval_every;
        did = 1;
    }
    int sig = cfg->checkpoint_dir ? pst_stop_requested() : 0;
    if (sig && !c->stopping) {
        c->stopping = true;
        c->stop_signal = sig;
        if (c->lockstep) {
            /* finish the version whose tickets are partly published */
            int64_t k = (prod - in->first_ticket + c->W - 1) / c->W;
            int64_t t = in->first_ticket + k * c->W;
            if (in->total >= 0) t = PST_MIN(t, in->total);
            feed_root_set_total(c->f, t);
            ps_request_stop(c->sh, t);
            c->told_total = PST_MIN(c->told_total, t);
        } else {
            feed_root_set_total(c->f, prod);
        }
        if (!cfg->quiet)
            fprintf(stderr, "\npstrain: signal %d: stopping after the batches in flight\n", sig);
        did = 1;
    }
    return did;
}

typedef struct ps_report_ctx {
    feed *f;
} ps_report_ctx;

static void ps_report(void *ctx, const double *vals, int n)
{
    feed *f = ((ps_report_ctx *)ctx)->f;
    feed_report(f, vals, n);
    feed_flush(f);
}

/* ---- worker --------------------------------------------------------------- */

typedef struct i64vec {
    int64_t *a;
    size_t n, cap;
} i64vec;

static void vec_push(i64vec *v, int64_t x)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 4096;
        v->a = pst_realloc(v->a, sizeof *v->a * v->cap);
    }
    v->a[v->n++] = x;
}

typedef struct worker_args {
    const train_cfg *cfg;
    const start_info *info;
    nn_model *m;
    feed *f;
    ps_shard *s;
    int w, P, W, R;
    lr_schedule sched;
} worker_args;

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
    const bool accumulate = !sync && cfg->opt.kind == OPT_SGD;
    const bool lockstep = sync && a->R == a->W;
    float *scratch = accumulate ? pst_aligned_alloc(sizeof(float) * nparam) : NULL;
    int64_t *versions = pst_calloc((size_t)a->P, sizeof *versions);
    int64_t *now = pst_calloc((size_t)a->P, sizeof *now);
    worker_timing tm = {0};
    memset(rec, 0, sizeof(double) * WR_N);
    bool pushed = false;
    for (;;) {
        rec[WR_WAIT_DATA] = tm.wait_data, rec[WR_PULL] = tm.pull, rec[WR_COMPUTE] = tm.compute;
        rec[WR_PUSH] = tm.push, rec[WR_WAIT_VERSION] = tm.wait_version;
        feed_report(a->f, rec, WR_N); /* completes with feed_take's flush */
        feed_batch b;
        if (!feed_take(a->f, &b, &tm.wait_data)) break;

        if (lockstep) {
            /* ticket t belongs to version V0 + (t - t0)/W, counted from
             * the version and data cursor the run started at (a resumed
             * run may have another W than the run that wrote the
             * checkpoint): wait for it on every PS */
            const int64_t v = in->first_version + (b.ticket - in->first_ticket) / a->W;
            for (int p = 0; p < a->P; p++) versions[p] = v - 1;
            ps_wait_newer(a->s, versions, now, &tm.wait_version);
            for (int p = 0; p < a->P; p++)
                if (now[p] != v)
                    dist_fatal("ticket %lld expects version %lld, PS %d is at %lld",
                               (long long)b.ticket, (long long)v, p + 1, (long long)now[p]);
            memcpy(versions, now, sizeof *now * (size_t)a->P);
        }
        double t0 = pst_now();
        if (sync && !lockstep)
            ps_pull(a->s, params, true, versions);
        else
            ps_pull(a->s, params, false, NULL);
        double t1 = pst_now();
        pipe_normalize(b.pixels, (int64_t)b.count * px / in->channels, in->channels, in->mean,
                       in->std, x);
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
        int64_t loss_bits = 0;
        memcpy(&loss_bits, &loss, sizeof loss);
        vec_push(log, b.ticket);
        vec_push(log, step);
        vec_push(log, b.epoch);
        vec_push(log, b.count);
        vec_push(log, loss_bits);
        for (int i = 0; i < b.count; i++) vec_push(log, b.ids[i]);
        if (sync && !lockstep) {
            bool done = ps_wait_newer(a->s, versions, now, &tm.wait_version);
            memcpy(versions, now, sizeof *now * (size_t)a->P);
            if (done) break;
        }
    }
    /* an async gradient still unread would be lost under the end stamp */
    if (pushed) ps_wait_acked(a->s, a->w, &tm.push);
    ps_push_end(a->s, a->w);
    rec[WR_WAIT_DATA] = tm.wait_data, rec[WR_PULL] = tm.pull, rec[WR_COMPUTE] = tm.compute;
    rec[WR_PUSH] = tm.push, rec[WR_WAIT_VERSION] = tm.wait_version;
    feed_report(a->f, rec, WR_N);
    feed_finish(a->f);
    free(x), free(scratch), free(versions), free(now);
}

/* ---- end of the run on the root ------------------------------------------------ */

/* A worker's log: per batch LOG_HDR words {ticket, step, epoch, count, loss
 * (float bits)} then its `count` example ids. */
enum { LOG_TICKET, LOG_STEP, LOG_EPOCH, LOG_COUNT, LOG_LOSS, LOG_HDR };

typedef struct batch_loss {
    int64_t ticket, step;
    float loss;
} batch_loss;

static int cmp_batch_ticket(const void *a, const void *b)
{
    const batch_loss *x = a, *y = b;
    return (x->ticket > y->ticket) - (x->ticket < y->ticket);
}

/* final_loss (train.h): the mean training loss of the last FINAL_LOSS_STEPS
 * steps, summed in ticket order, so that it does not depend on timing. Sync:
 * every batch computed at one of the last 100 versions; async: the last 100
 * batches (a step is a batch). */
#define FINAL_LOSS_STEPS 100
static float final_loss(batch_loss *bl, size_t n, bool sync)
{
    if (!n) return NAN;
    qsort(bl, n, sizeof *bl, cmp_batch_ticket);
    int64_t max_step = 0;
    for (size_t i = 0; i < n; i++) max_step = PST_MAX(max_step, bl[i].step);
    /* newest first, as train_single sums its last steps */
    double sum = 0;
    int64_t k = 0;
    for (size_t j = n; j-- > 0;) {
        if (sync ? bl[j].step <= max_step - FINAL_LOSS_STEPS : k >= FINAL_LOSS_STEPS) break;
        sum += bl[j].loss;
        k++;
    }
    return k ? (float)(sum / (double)k) : NAN;
}

/* Per-epoch accounting from the gathered logs (epochs that saw examples
 * only), final_loss, and the trace file. *data_end: the data cursor after
 * this run, first_ticket + the batches the workers took. Workers take
 * tickets with one atomic counter and log every data batch they take, so
 * the taken tickets are [first_ticket, *data_end) (checked); batches the
 * root published but nobody took (backup workers stopping at --steps) are
 * not consumed and come first in a resumed run. */
static int account(const train_cfg *cfg, train_result *res, const int64_t *all, const int *counts,
                   const int *displs, int first_worker, int W, int64_t per_epoch,
                   const i64vec *prior, int prior_epoch, int64_t first_ticket, int64_t *data_end,
                   pst_err *e)
{
    FILE *trace = NULL;
    if (cfg->trace_path) {
        trace = fopen(cfg->trace_path, "w");
        if (!trace) return pst_fail(e, "%s: cannot write the example trace", cfg->trace_path);
    }
    int nep = prior->n ? prior_epoch + 1 : 0;
    for (int w = 0; w < W; w++) {
        const int64_t *p = all + displs[first_worker + w], *end = p + counts[first_worker + w];
        while (p < end) {
            nep = PST_MAX(nep, (int)p[LOG_EPOCH] + 1);
            p += LOG_HDR + p[LOG_COUNT];
        }
    }
    res->nepochs_stats = nep;
    res->epoch_stats = pst_calloc((size_t)(nep ? nep : 1), sizeof *res->epoch_stats);
    uint8_t *seen = pst_calloc((size_t)(nep ? nep : 1) * (size_t)per_epoch, 1);
    for (int i = 0; i < nep; i++) {
        res->epoch_stats[i].epoch = i;
        res->epoch_stats[i].nworkers = W;
        res->epoch_stats[i].per_worker = pst_calloc((size_t)W, sizeof(int64_t));
    }
    int64_t bad_ids = 0;
    size_t nbatches = 0;
    batch_loss *bl = NULL;
    for (int w = 0; w < W; w++)
        for (const int64_t *p = all + displs[first_worker + w], *end = p + counts[first_worker + w];
             p < end; p += LOG_HDR + p[LOG_COUNT])
            nbatches++;
    bl = pst_malloc(sizeof *bl * (nbatches ? nbatches : 1));
    nbatches = 0;
    /* resumed: the batches of the epoch that the interrupted run consumed */
    for (size_t i = 0; i < prior->n; i++) {
        res->epoch_stats[prior_epoch].examples++;
        int64_t id = prior->a[i];
        uint8_t *sp = seen + (size_t)prior_epoch * (size_t)per_epoch;
        if (id < 0 || id >= per_epoch)
            bad_ids++;
        else if (sp[id] < 255)
            sp[id]++;
    }
    for (int w = 0; w < W; w++) {
        const int64_t *p = all + displs[first_worker + w], *end = p + counts[first_worker + w];
        while (p < end) {
            int64_t ticket = p[LOG_TICKET], step = p[LOG_STEP], count = p[LOG_COUNT];
            int ep = (int)p[LOG_EPOCH];
            batch_loss *b = &bl[nbatches++];
            b->ticket = ticket, b->step = step;
            memcpy(&b->loss, &p[LOG_LOSS], sizeof b->loss);
            epoch_stats *es = &res->epoch_stats[ep];
            es->examples += count;
            es->per_worker[w] += count;
            uint8_t *s = seen + (size_t)ep * (size_t)per_epoch;
            for (int64_t i = 0; i < count; i++) {
                int64_t id = p[LOG_HDR + i];
                if (id < 0 || id >= per_epoch)
                    bad_ids++;
                else if (s[id] < 255)
                    s[id]++;
            }
            if (trace) {
                fprintf(trace,
                        "{\"worker\":%d,\"step\":%lld,\"ticket\":%lld,\"epoch\":%d,\"ids\":[", w,
                        (long long)step, (long long)ticket, ep);
                for (int64_t i = 0; i < count; i++)
                    fprintf(trace, "%s%lld", i ? "," : "", (long long)p[LOG_HDR + i]);
                fputs("]}\n", trace);
            }
            p += LOG_HDR + count;
        }
    }
    res->final_loss = final_loss(bl, nbatches, cfg->mode == TRAIN_SYNC);
    int64_t max_ticket = first_ticket - 1;
    for (size_t i = 0; i < nbatches; i++) max_ticket = PST_MAX(max_ticket, bl[i].ticket);
    *data_end = first_ticket + (int64_t)nbatches;
    free(bl);
    int kept = 0;
    for (int i = 0; i < nep; i++) {
        epoch_stats *es = &res->epoch_stats[i];
        if (es->examples == 0) { /* before a resumed run's first epoch */
            free(es->per_worker);
            continue;
        }
        const uint8_t *s = seen + (size_t)i * (size_t)per_epoch;
        int64_t unique = 0;
        for (int64_t j = 0; j < per_epoch; j++) unique += s[j] != 0;
        es->unique = unique;
        es->duplicates = es->examples - unique;
        es->missing = per_epoch - unique;
        res->epoch_stats[kept++] = *es;
    }
    res->nepochs_stats = kept;
    free(seen);
    int rc = 0;
    if (trace && fclose(trace) != 0)
        rc = pst_fail(e, "%s: write error on the example trace", cfg->trace_path);
    if (bad_ids) rc = pst_fail(e, "%lld example ids outside the data set", (long long)bad_ids);
    if (max_ticket + 1 != *data_end)
        rc = pst_fail(e, "the workers took %lld batches from ticket %lld but the last was %lld",
                      (long long)(*data_end - first_ticket), (long long)first_ticket,
                      (long long)max_ticket);
    return rc;
}

/* ---- dist_train ------------------------------------------------------------------ */

static const char *mode_name(train_mode mode)
{
    return mode == TRAIN_ASYNC ? "async" : "sync";
}

/* Resume on the root: reads the checkpoint's attributes into info (the
 * tensors follow once the model exists). Returns 1 with `path` filled, 0 for
 * a fresh start, -1 on error. */
static int root_resume_meta(const train_cfg *cfg, int W, start_info *info, char *path, size_t n,
                            pst_err *e)
{
    const char *arg = cfg->resume_path ? cfg->resume_path : cfg->checkpoint_dir;
    if (!arg) return pst_fail(e, "--resume: give a checkpoint or --checkpoint-dir");
    int r = ckpt_resolve(arg, path, n, e);
    if (r <= 0) {
        if (r == 0 && !cfg->quiet)
            fprintf(stderr, "pstrain: no checkpoint in %s yet: starting from scratch\n", arg);
        return r;
    }
    ckpt_meta cm;
    memset(&cm, 0, sizeof cm);
    if (ckpt_read_meta(path, &cm, e) < 0) return -1;
    int rc = 1;
    if (cm.batch != cfg->batch)
        rc = pst_fail(e,
                      "%s: attribute batch is %d but this run uses --batch %d: the data cursor "
                      "would not match",
                      path, cm.batch, cfg->batch);
    else if (cm.seed != cfg->seed)
        rc = pst_fail(e, "%s: attribute seed is %llu but this run uses --seed %llu", path,
                      (unsigned long long)cm.seed, (unsigned long long)cfg->seed);
    else if (cm.mode && cm.mode[0] && strcmp(cm.mode, mode_name(cfg->mode)) != 0)
        /* A sync step applies the mean of W gradients (one version), an
         * async step one batch's gradient: the global step, the schedule's
         * steps per epoch and the optimizer slots (momentum built from
         * averaged gradients, Adam's bias correction) would change meaning
         * mid-run, and the resumed run's step would lag its data cursor. */
        rc = pst_fail(e,
                      "%s: attribute mode is %s but this run uses --mode %s: sync and async steps "
                      "mean different things (global step, learning-rate schedule, optimizer "
                      "slots); resume with --mode %s, or start a new run",
                      path, cm.mode, mode_name(cfg->mode), cm.mode);
    else if (cm.workers != W && !cfg->quiet)
        /* the data cursor counts batches and a version starts wherever the
         * checkpoint's ended, so another worker count continues the run
         * (deterministically in lockstep, from here on in groups of W) */
        fprintf(stderr, "pstrain: %s was written by %d workers; continuing with %d\n", path,
                cm.workers, W);
    info->resumed = 1;
    info->first_version = cm.global_step;
    info->first_ticket = cm.next_batch;
    info->prior_examples = cm.examples;
    info->prior_seconds = cm.train_seconds;
    ckpt_meta_free(&cm);
    return rc;
}

int dist_train(const train_cfg *cfg, train_result *res, pst_err *e)
{
    memset(res, 0, sizeof *res);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (check_config(cfg, size, e) < 0) return -1;
    int thread_level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&thread_level);
    if (thread_level < MPI_THREAD_FUNNELED)
        return pst_fail(e, "MPI was initialised without MPI_THREAD_FUNNELED (the input "
                           "pipeline's threads run beside MPI on the root)");
    const int P = cfg->ps, W = size - 1 - P;
    const int R = cfg->replicas_to_aggregate ? cfg->replicas_to_aggregate : W;
    const bool is_root = rank == 0, is_ps = rank >= 1 && rank <= P; /* else a worker */
    const bool lockstep = cfg->mode == TRAIN_SYNC && R == W;
    const int worker_id = rank - 1 - P;

    static char progname[64]; /* pst_set_progname keeps the pointer */
    char role[32];
    if (is_root)
        snprintf(role, sizeof role, "root");
    else if (is_ps)
        snprintf(role, sizeof role, "ps %d", rank);
    else
        snprintf(role, sizeof role, "worker %d", worker_id);
    dist_set_role(role);
    const char *old_progname = pst_progname();
    snprintf(progname, sizeof progname, "rank %d (%s)", rank, role);
    pst_set_progname(progname);
    pst_set_die_hook(die_hook);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); /* 1 us: short back-off sleeps stay short */
    nn_blis_init();

    int rc = -1;
    h5ds ds;
    memset(&ds, 0, sizeof ds);
    bool ds_open = false;
    nn_model *m = NULL;
    place_plan *plan = NULL;
    pipeline *pl = NULL;
    feed *f = NULL;
    ps_shard *sh = NULL;
    metrics *mx = NULL;
    i64vec log = {0}, prior = {0};
    int64_t *all = NULL;
    int *counts = NULL, *displs = NULL;
    double *recs = NULL;
    const nn_var *vars = NULL;
    float *slots = NULL;
    char *mtext = NULL;
    root_ctx *rctx = NULL;
    start_info info;
    const char *esplit = NULL; /* the root's evaluation split */
    memset(&info, 0, sizeof info);
    static char ckpt_file[4096];
    int prior_epoch = 0;

    /* 1. the root opens the data (and a checkpoint to resume from) and starts
     * the pipeline; everybody learns the geometry and the number of batches */
    if (is_root) {
        info.ok = 1;
        if (h5ds_open(&ds, cfg->data_path, e) < 0) {
            info.ok = 0;
        } else {
            ds_open = true;
            const char *split = cfg->pipe.split ? cfg->pipe.split : "train";
            if (!h5ds_find_split(&ds, split)) {
                pst_fail(e, "%s: no /%s split to train on", cfg->data_path, split);
                info.ok = 0;
            } else if (train_eval_split(cfg, &ds, !cfg->quiet && !cfg->dry_run, &esplit, e) < 0) {
                info.ok = 0;
            }
        }
        if (info.ok && cfg->resume &&
            root_resume_meta(cfg, W, &info, ckpt_file, sizeof ckpt_file, e) < 0)
            info.ok = 0;
        if (info.ok) {
            info.height = ds.height, info.width = ds.width, info.channels = ds.channels;
            info.classes = ds.num_classes;
            memcpy(info.mean, ds.mean, sizeof info.mean);
            memcpy(info.std, ds.std, sizeof info.std);
        }
        if (info.ok && !cfg->dry_run) {
            pipe_cfg pc = cfg->pipe;
            pc.batch = cfg->batch;
            pc.seed = cfg->seed;
            pc.epochs = cfg->epochs;
            if (pipe_new(&pl, &ds, &pc, e) < 0) info.ok = 0;
        }
        if (info.ok && !cfg->dry_run) {
            info.bpe = pipe_batches_per_epoch(pl);
            info.per_epoch = pipe_examples_per_epoch(pl);
            if (info.resumed) {
                /* the pipeline replays epochs exactly: start at the
                 * checkpoint's epoch and skip what it had consumed of it */
                pipe_free(pl), pl = NULL;
                pipe_cfg pc = cfg->pipe;
                pc.batch = cfg->batch;
                pc.seed = cfg->seed;
                pc.epochs = cfg->epochs;
                prior_epoch = (int)(info.first_ticket / PST_MAX(info.bpe, 1));
                pc.first_epoch = prior_epoch;
                if (cfg->epochs && prior_epoch >= cfg->epochs) pc.first_epoch = cfg->epochs;
                if (pipe_new(&pl, &ds, &pc, e) < 0) info.ok = 0;
                for (int64_t i = 0; info.ok && i < info.first_ticket % PST_MAX(info.bpe, 1); i++) {
                    pipe_batch b;
                    int got = pipe_next(pl, &b, e);
                    if (got < 0) info.ok = 0;
                    if (got <= 0) break;
                    for (int j = 0; j < b.count; j++) vec_push(&prior, b.ids[j]);
                }
            }
        }
        if (info.ok && info.per_epoch > 0 && cfg->batch > info.per_epoch) {
            /* every worker's activations and every ring slot are sized by
             * the batch: refuse one larger than the data */
            pst_fail(e, "--batch %d: expected at most the %lld training examples of an epoch",
                     cfg->batch, (long long)info.per_epoch);
            info.ok = 0;
        }
        if (info.ok && cfg->checkpoint_dir && !cfg->dry_run &&
            ckpt_prepare_dir(cfg->checkpoint_dir, e) < 0)
            info.ok = 0; /* an unusable --checkpoint-dir, found before training */
        if (info.ok && !cfg->dry_run) {
            const int64_t t0 = info.first_ticket, v0 = info.first_version;
            int64_t by_epochs = cfg->epochs ? cfg->epochs * info.bpe : -1;
            int64_t by_steps = -1;
            if (cfg->steps) {
                if (cfg->mode == TRAIN_ASYNC)
                    by_steps = t0 + PST_MAX(cfg->steps - v0, 0);
                else if (R == W)
                    by_steps = t0 + PST_MAX(cfg->steps - v0, 0) * W; /* W tickets a version */
                info.max_versions = cfg->mode == TRAIN_SYNC ? cfg->steps : 0;
            }
            info.total = by_epochs < 0  ? by_steps
                         : by_steps < 0 ? by_epochs
                                        : PST_MIN(by_epochs, by_steps);
            if (info.total >= 0) info.total = PST_MAX(info.total, t0);
        }
        if (!info.ok) snprintf(info.msg, sizeof info.msg, "%s", e->msg);
    }
    MPI_OK(MPI_Bcast(&info, (int)sizeof info, MPI_BYTE, 0, MPI_COMM_WORLD));
    if (!info.ok) {
        if (!is_root) snprintf(e->msg, sizeof e->msg, "%s", info.msg);
        goto out;
    }

    /* 2. the same model (same seed: same initial variables) and plan everywhere */
    nn_model_cfg mc = {.name = cfg->model,
                       .height = info.height,
                       .width = info.width,
                       .channels = info.channels,
                       .num_classes = info.classes,
                       .max_batch = is_ps ? 1 : cfg->batch,
                       .seed = cfg->seed,
                       .weight_decay = cfg->weight_decay,
                       .label_smoothing = cfg->label_smoothing};
    int ok = nn_model_new(&m, &mc, e) == 0;
    int nv = 0;
    if (ok) {
        nv = nn_model_nvars(m);
        vars = nn_model_vars(m);
        ok = place_plan_new(&plan, vars, nv, P, cfg->placement, cfg->partition_bytes, e) == 0;
    }
    const size_t nparam = ok ? nn_model_size(m) : 0;
    const int nslots = opt_nslots(cfg->opt.kind);
    if (ok) {
        slots =
            pst_aligned_alloc(sizeof(float) * (size_t)PST_MAX(nslots, 1) * (nparam ? nparam : 1));
        opt_init_slots(&cfg->opt, slots, nparam, nparam);
    }
    /* resume: the root reads the variables and slots, everybody gets them */
    if (ok && is_root && info.resumed) {
        ckpt_expect want = ckpt_expect_model(m, &cfg->opt);
        ok = ckpt_read(ckpt_file, &want, nn_model_params(m), nslots ? slots : NULL, nparam, NULL,
                       e) == 0;
    }
    int all_ok = 0;
    MPI_OK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (!all_ok) {
        if (ok) pst_fail(e, "model, placement or checkpoint set-up failed on another rank");
        goto out;
    }
    if (info.resumed) {
        MPI_OK(MPI_Bcast(nn_model_params(m), (int)nparam, MPI_FLOAT, 0, MPI_COMM_WORLD));
        if (nslots)
            MPI_OK(MPI_Bcast(slots, (int)(nparam * (size_t)nslots), MPI_FLOAT, 0, MPI_COMM_WORLD));
        res->start_step = cfg->mode == TRAIN_SYNC ? info.first_version : info.first_ticket;
        if (is_root && !cfg->quiet)
            fprintf(stderr, "pstrain: resumed from %s at step %lld (batch %lld)\n", ckpt_file,
                    (long long)info.first_version, (long long)info.first_ticket);
    }
    if (is_root && !cfg->quiet && !cfg->dry_run) {
        fprintf(stderr, "%d ranks: root, %d PS, %d workers; mode %s, R = %d\n", size, P, W,
                cfg->mode == TRAIN_SYNC ? "sync" : "async", R);
        (cfg->verbose ? place_plan_print : place_plan_summary)(plan, stderr);
    }
    if (cfg->dry_run) {
        if (is_root) {
            nn_model_describe(m, stdout);
            place_plan_print(plan, stdout);
        }
        rc = 0;
        goto out;
    }
    if (cfg->checkpoint_dir) {
        if (pst_stop_signals_install(e) < 0) dist_fatal("%s", e->msg);
        if (is_root && !lockstep && (cfg->checkpoint_every || cfg->checkpoint_secs > 0) &&
            !cfg->quiet)
            fprintf(stderr, "pstrain: periodic checkpoints need --mode sync without backup "
                            "workers; this run checkpoints at the end and on a signal only\n");
    }

    /* 3. windows. The ring holds up to 8 batches per worker (at least 2,
     * within about 32 MiB): slack for a root that waits for a core. */
    const int64_t slot_bytes =
        (int64_t)cfg->batch * ((int64_t)info.height * info.width * info.channels + 12);
    const int nring = (int)PST_MAX(2 * W + 2, PST_MIN(8 * W + 8, (32LL << 20) / slot_bytes));
    feed_geom fg = {.batch = cfg->batch,
                    .example_bytes = (int64_t)info.height * info.width * info.channels,
                    .nslots = nring,
                    .nworkers = W,
                    .first_ticket = info.first_ticket,
                    .first_step = cfg->mode == TRAIN_ASYNC ? info.first_version : 0};
    if (feed_new(&f, MPI_COMM_WORLD, 0, &fg, e) < 0) dist_fatal("%s", e->msg);
    ps_layout lay = {.ps_rank0 = 1,
                     .worker_rank0 = 1 + P,
                     .nworkers = W,
                     .grad_slots = cfg->mode == TRAIN_SYNC || cfg->opt.kind != OPT_SGD,
                     .lockstep = lockstep,
                     .root_rank = 0,
                     .opt = cfg->opt,
                     .init_slots = info.resumed && nslots ? slots : NULL,
                     .init_slot_stride = nparam,
                     .first_version = cfg->mode == TRAIN_SYNC ? info.first_version : 0,
                     .first_ticket = info.first_ticket};
    if (ps_new(&sh, MPI_COMM_WORLD, plan, &lay, nn_model_params(m), e) < 0)
        dist_fatal("%s", e->msg);

    lr_schedule sched = {.base = cfg->lr,
                         .decay = cfg->lr_decay,
                         .decay_epochs = cfg->lr_decay_epochs,
                         .steps_per_epoch = cfg->mode == TRAIN_SYNC
                                                ? PST_MAX((info.bpe + R - 1) / R, 1)
                                                : PST_MAX(info.bpe, 1)};

    /* 4. the roles */
    double my_rec[FEED_REPORT_WORDS] = {0};
    double t_train = 0;
    feed_serve_stats fst = {0};
    if (is_root) {
        /* a resumed run continues its metrics log */
        if ((info.resumed ? metrics_open_append : metrics_open)(&mx, cfg->metrics_path, !cfg->quiet,
                                                                e) < 0)
            dist_fatal("%s", e->msg);
        rctx = pst_calloc(1, sizeof *rctx);
        rctx->cfg = cfg, rctx->info = &info, rctx->f = f, rctx->sh = sh, rctx->mx = mx;
        rctx->pl = pl, rctx->P = P, rctx->W = W, rctx->R = R, rctx->lockstep = lockstep;
        rctx->sched = sched;
        rctx->total_steps =
            cfg->mode == TRAIN_SYNC
                ? (info.max_versions
                       ? info.max_versions
                       : info.first_version + (info.total - info.first_ticket + W - 1) / W)
                : info.total;
        rctx->t0 = pst_now();
        rctx->vars = vars, rctx->nvars = nv, rctx->ds = &ds;
        mtext = NULL;
        {
            size_t len = 0;
            FILE *mf = open_memstream(&mtext, &len);
            if (mf) {
                nn_model_describe(m, mf);
                fclose(mf);
            }
        }
        rctx->model_text = mtext;
        rctx->nparam = nparam, rctx->nslots = nslots;
        rctx->ck_params = pst_aligned_alloc(sizeof(float) * (nparam ? nparam : 1));
        rctx->ck_slots =
            pst_aligned_alloc(sizeof(float) * (size_t)PST_MAX(nslots, 1) * (nparam ? nparam : 1));
        rctx->ck_got = pst_calloc((size_t)P, sizeof *rctx->ck_got);
        rctx->final_got = pst_calloc((size_t)P, sizeof *rctx->final_got);
        rctx->t_ckpt = pst_now();
        rctx->res = res;
        rctx->told_total = info.total >= 0 ? info.total : INT64_MAX;
        rctx->m = m, rctx->ds_rw = &ds, rctx->nring = nring;
        rctx->eval_version = -1;
        rctx->eval_split = esplit;
        /* the first epoch count to evaluate after: the next multiple */
        if (cfg->eval_every > 0) {
            int done = (int)(info.first_ticket / PST_MAX(info.bpe, 1));
            rctx->next_eval_epoch = (done / cfg->eval_every + 1) * cfg->eval_every;
        }
        feed_hooks hooks = {.source = pipe_source,
                            .poll = root_poll,
                            .tick = root_tick,
                            .ctx = rctx,
                            .tick_secs = cfg->log_every > 0 ? cfg->log_every : 1.0};
        if (feed_root_serve(f, info.total, &hooks, &fst, e) < 0) dist_fatal("%s", e->msg);
        root_tick(rctx); /* the final interval */
        t_train = fst.wall;
    } else if (is_ps) {
        ps_report_ctx rc_ctx = {f};
        ps_serve_cfg sc = {.mode = cfg->mode,
                           .replicas = R,
                           .opt = cfg->opt,
                           .sched = sched,
                           .max_versions = info.max_versions,
                           .total_tickets = info.total,
                           .ckpt_every = cfg->checkpoint_dir ? cfg->checkpoint_every : 0,
                           .report = ps_report,
                           .report_ctx = &rc_ctx,
                           .report_secs = 0.25};
        ps_serve_stats pst;
        if (ps_serve(sh, &sc, &pst, e) < 0) dist_fatal("%s", e->msg);
        my_rec[0] = (double)pst.version, my_rec[1] = (double)pst.applied;
        my_rec[2] = (double)pst.dropped_stale, my_rec[3] = pst.apply, my_rec[4] = pst.idle;
        my_rec[5] = pst.cpu, my_rec[6] = pst.wall;
        /* the final state of the shard (marked final by a negative version) */
        ps_snapshot_send(sh, -1 - pst.version);
        ps_snapshot_wait(sh);
    } else {
        worker_args wa = {.cfg = cfg,
                          .info = &info,
                          .m = m,
                          .f = f,
                          .s = sh,
                          .w = worker_id,
                          .P = P,
                          .W = W,
                          .R = R,
                          .sched = sched};
        worker_run(&wa, &log, my_rec);
    }

    /* 5. the final variables and slots: every PS's last snapshot (earlier
     * ones still in flight are superseded) */
    if (is_root) {
        for (int p = 0; p < P; p++) {
            int64_t v = -1;
            if (!rctx->final_got[p]) {
                do ps_snapshot_recv(sh, p, true, &v, rctx->ck_params, rctx->ck_slots, nparam);
                while (v >= 0);
            }
        }
        memcpy(nn_model_params(m), rctx->ck_params, sizeof(float) * nparam);
        memcpy(slots, rctx->ck_slots, sizeof(float) * nparam * (size_t)nslots);
    }
    MPI_OK(MPI_Barrier(MPI_COMM_WORLD));

    /* example logs and report records to the root */
    int mine = (int)log.n;
    if (log.n > (size_t)INT32_MAX) dist_fatal("example log too large to gather");
    if (is_root) {
        counts = pst_calloc((size_t)size, sizeof *counts);
        displs = pst_calloc((size_t)size, sizeof *displs);
        recs = pst_calloc((size_t)size * FEED_REPORT_WORDS, sizeof *recs);
    }
    MPI_OK(MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD));
    MPI_OK(MPI_Gather(my_rec, FEED_REPORT_WORDS, MPI_DOUBLE, recs, FEED_REPORT_WORDS, MPI_DOUBLE, 0,
                      MPI_COMM_WORLD));
    int64_t tot = 0;
    if (is_root) {
        for (int r = 0; r < size; r++) {
            if (tot + counts[r] > INT32_MAX) dist_fatal("example logs too large to gather");
            displs[r] = (int)tot, tot += counts[r];
        }
        all = pst_malloc(sizeof *all * (size_t)(tot ? tot : 1));
    }
    MPI_OK(
        MPI_Gatherv(log.a, mine, MPI_INT64_T, all, counts, displs, MPI_INT64_T, 0, MPI_COMM_WORLD));
    ps_free(sh), sh = NULL;
    feed_free(f), f = NULL;

    /* 6. the result, on the root */
    if (is_root) {
        pipe_free(pl), pl = NULL; /* the data set is ours again */
        res->ranks = size, res->ps = P, res->workers = W;
        res->root_cpu = fst.cpu;
        res->nworker_timing = W;
        res->wtiming = pst_calloc((size_t)W, sizeof *res->wtiming);
        int64_t async_steps = 0;
        for (int w = 0; w < W; w++) {
            const double *r = recs + (size_t)(1 + P + w) * FEED_REPORT_WORDS;
            res->wtiming[w] = (worker_timing){r[WR_WAIT_DATA], r[WR_PULL], r[WR_COMPUTE],
                                              r[WR_PUSH], r[WR_WAIT_VERSION]};
            res->examples += (int64_t)r[WR_EXAMPLES];
            async_steps += (int64_t)r[WR_STEPS];
        }
        if (cfg->mode == TRAIN_ASYNC) res->steps = info.first_version + async_steps;
        res->nps = P;
        res->pstiming = pst_calloc((size_t)P, sizeof *res->pstiming);
        res->per_ps_bytes = pst_calloc((size_t)P, sizeof *res->per_ps_bytes);
        for (int p = 0; p < P; p++) {
            const double *r = recs + (size_t)(1 + p) * FEED_REPORT_WORDS;
            res->pstiming[p] = (ps_timing){r[3], r[4], r[5]};
            res->per_ps_bytes[p] = plan->ps_bytes[p];
            res->dropped_stale = PST_MAX(res->dropped_stale, (int64_t)r[2]);
            if (cfg->mode == TRAIN_SYNC) res->steps = PST_MAX(res->steps, (int64_t)r[0]);
        }
        res->imbalance = plan->imbalance;
        res->train_seconds = t_train;
        res->images_per_sec = t_train > 0 ? (double)res->examples / t_train : 0;
        int64_t data_end = info.first_ticket;
        res->examples += info.prior_examples;
        res->epochs = info.per_epoch ? (int)(res->examples / info.per_epoch) : 0;
        res->stop_signal = rctx->stop_signal;
        if (account(cfg, res, all, counts, displs, 1 + P, W, info.per_epoch, &prior, prior_epoch,
                    info.first_ticket, &data_end, e) < 0)
            goto out;
        if (cfg->checkpoint_dir &&
            save_checkpoint(rctx, res->steps, data_end, nn_model_params(m), slots, e) < 0)
            goto out;
        if (cfg->dump_params_path &&
            train_dump_params(cfg->dump_params_path, nn_model_params(m), nparam, e) < 0)
            goto out;
        if (esplit && !res->stop_signal) {
            double acc, loss;
            int64_t n;
            if (train_evaluate(m, &ds, esplit, cfg->batch, &acc, &loss, &n, NULL, e) < 0) goto out;
            train_set_eval(res, esplit, acc, loss, n);
            metrics_eval(mx, res->steps, res->epochs, esplit, acc, loss, n);
        }
    }
    rc = 0;
out:
    if (rctx) {
        free(rctx->ck_params), free(rctx->ck_slots), free(rctx->ck_got), free(rctx->final_got);
        free(rctx);
    }
    metrics_close(mx);
    pipe_free(pl);
    free(log.a), free(prior.a), free(all), free(counts), free(displs), free(recs);
    free(slots), free(mtext);
    place_plan_free(plan);
    nn_model_free(m);
    if (ds_open) h5ds_close(&ds);
    pst_set_die_hook(NULL);
    pst_set_progname(old_progname);
    return rc;
}
