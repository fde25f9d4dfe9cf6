/*
 * root.c - the root's duties: at the start the data set, the pipeline and
 * the checkpoint to resume from; during the run the batch ring's hooks:
 * metrics ticks, checkpoints assembled from PS snapshots, evaluations, and
 * stop signals (the protocol: dist.c, ps.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist_internal.h"
#include "pstrain/signals.h"
#include "pstrain/run_common.h"
#include "trainer.h"

void root_report(root_ctx *c, const double *const *wrec, const ps_timing *pt)
{
    double ex = 0, dsteps = 0, dex = 0, dloss = 0, dcorrect = 0;
    double last_step = -1;
    int epoch = 0;
    worker_timing wt = {0};
    const int nw = c->W;
    for (int w = 0; w < c->W; w++) {
        const double *r = wrec[w], *p = c->prev + (size_t)w * WR_N;
        ex += r[WR_EXAMPLES];
        dsteps += r[WR_STEPS] - p[WR_STEPS];
        dex += r[WR_EXAMPLES] - p[WR_EXAMPLES];
        dloss += r[WR_LOSS] - p[WR_LOSS];
        dcorrect += r[WR_CORRECT] - p[WR_CORRECT];
        /* the newest batch computed: its step (the version or global step
         * it was computed at, + 1) and its epoch */
        if (r[WR_STEPS] > 0 && r[WR_LAST_STEP] > last_step)
            last_step = r[WR_LAST_STEP], epoch = (int)r[WR_EPOCH] + 1;
        if (r[WR_STEPS] > 0) {
            wt.wait_data += r[WR_WAIT_DATA] / r[WR_STEPS] / nw;
            wt.pull += r[WR_PULL] / r[WR_STEPS] / nw;
            wt.compute += r[WR_COMPUTE] / r[WR_STEPS] / nw;
            wt.push += r[WR_PUSH] / r[WR_STEPS] / nw;
            wt.wait_version += r[WR_WAIT_VERSION] / r[WR_STEPS] / nw;
        }
    }
    /* The step the losses belong to, reported once: the PS version lagged
     * them (a 2-worker sync run logged step 95 twice with different
     * losses). Losses of a step not newer than the last line wait in the
     * deltas (prev is kept) for the next one. */
    const int64_t step = (int64_t)last_step + 1;
    if (dsteps <= 0 || step <= c->last_reported) return;
    for (int w = 0; w < c->W; w++)
        memcpy(c->prev + (size_t)w * WR_N, wrec[w], sizeof(double) * WR_N);
    c->last_reported = step;
    double el = pst_now() - c->t0;
    c->last_loss = dloss / dsteps;
    c->have_loss = true;
    metrics_step_rec rec = {.step = step,
                            .total_steps = c->total_steps,
                            .start_step = c->info->first_version,
                            .epoch = epoch,
                            .total_epochs = c->total_epochs,
                            .loss = c->last_loss,
                            .accuracy = dex > 0 ? dcorrect / dex : 0,
                            .lr = lr_at(&c->sched, step - 1),
                            .images_per_sec = el > 0 ? ex / el : 0,
                            .worker = &wt,
                            .ps = pt};
    metrics_step(c->mx, &rec);
}

void root_tick(void *vctx)
{
    root_ctx *c = vctx;
    const double **wrec = pst_malloc(sizeof *wrec * (size_t)c->W);
    for (int w = 0; w < c->W; w++) wrec[w] = feed_report_of(c->f, c->worker_ranks[w]);
    ps_timing pt = {0};
    for (int p = 0; p < c->P; p++) {
        const double *r = feed_report_of(c->f, c->ps_ranks[p]);
        pt.apply += r[PR_APPLY] / c->P;
        pt.idle += r[PR_IDLE] / c->P;
        pt.cpu += r[PR_CPU] / c->P;
    }
    c->last_pt = pt;
    root_report(c, wrec, &pt);
    free(wrec);
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
    ckpt_meta m = train_ckpt_meta(cfg, c->model_text, in->height, in->width, in->channels,
                                  in->classes, &c->sched);
    snprintf(m.normalize, sizeof m.normalize, "%s", in->normalize);
    m.global_step = step;
    const int64_t bpe = PST_MAX(in->bpe, 1);
    m.epoch = (int)(next_batch / bpe);
    m.epoch_batch = next_batch % bpe;
    m.next_batch = next_batch;
    /* every batch but an epoch's last is full */
    m.examples = (int64_t)m.epoch * in->per_epoch + m.epoch_batch * cfg->batch;
    m.train_seconds = in->prior_seconds + (pst_now() - c->t0);
    m.workers = c->W, m.ps = c->P;
    return m;
}

int root_save_checkpoint(root_ctx *c, int64_t step, int64_t next_batch, const float *params,
                         const float *slots, const float *averages, pst_err *e)
{
    const double tc = tl_now();
    ckpt_meta cm = run_meta(c, step, next_batch);
    cm.averages = averages;
    if (ckpt_save(c->cfg->checkpoint_dir, c->cfg->keep_checkpoints, &cm, c->vars, c->nvars, params,
                  c->nslots ? slots : NULL, c->nparam, c->res->last_checkpoint,
                  sizeof c->res->last_checkpoint, e) < 0)
        return -1;
    tl_add(TL_CHECKPOINT, tc, pst_now(), step);
    metrics_note(c->mx, "checkpoint %s (step %lld)", c->res->last_checkpoint, (long long)step);
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
    eval_stats ev;
    const double te = tl_now();
    if (train_evaluate(c->m, c->ds_rw, c->input, c->eval_split, c->cfg->batch, &ev, NULL, e) < 0)
        return -1;
    tl_add(TL_EVAL, te, pst_now(), step);
    metrics_eval(c->mx, step, epoch, c->eval_split, &ev);
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

/* Lockstep: takes the PS snapshots that have arrived (a negative version is
 * a PS's final state, kept for the end); once every PS sent the same
 * version, writes the checkpoint and runs the evaluation it was taken for.
 * Returns 1 if a snapshot arrived, 0 if none, -1 (e set) on failure. */
static int take_snapshots(root_ctx *c, pst_err *e)
{
    const train_cfg *cfg = c->cfg;
    const start_info *in = c->info;
    int did = 0, ngot = 0;
    for (int p = 0; p < c->P; p++) {
        int64_t v;
        if (!c->ck_got[p] && !c->final_got[p] &&
            ps_snapshot_recv(c->sh, p, false, &v, c->ck_params, c->ck_slots, c->nparam,
                             c->ck_avg)) {
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
    if (ngot < c->P) return did;
    const int64_t v = c->ck_version;
    const int64_t next = in->first_ticket + (v - in->first_version) * c->W;
    const bool is_ckpt =
        cfg->checkpoint_dir && ((cfg->checkpoint_every > 0 && v % cfg->checkpoint_every == 0) ||
                                (c->ck_requested && v == c->ck_req_version));
    if (is_ckpt) {
        if (root_save_checkpoint(c, v, next, c->ck_params, c->ck_slots, c->ck_avg, e) < 0)
            return -1;
        c->ck_requested = false;
        c->t_ckpt = pst_now();
    }
    if (v == c->eval_version) {
        /* the moving averages when the run keeps them (docs/training.md, "Training
         * recipes") */
        memcpy(nn_model_params(c->m), c->ck_avg ? c->ck_avg : c->ck_params,
               sizeof(float) * c->nparam);
        if (root_eval(c, v, c->next_eval_epoch, e) < 0) return -1;
        c->eval_version = -1;
        c->next_eval_epoch += cfg->eval_every;
    }
    memset(c->ck_got, 0, sizeof *c->ck_got * (size_t)c->P);
    return did;
}

int root_drain_snapshots(root_ctx *c, pst_err *e)
{
    dist_backoff bo;
    dist_backoff_init(&bo, 2, 200);
    for (;;) {
        int nfinal = 0;
        for (int p = 0; p < c->P; p++) nfinal += c->final_got[p];
        if (nfinal == c->P) return 0;
        const int did = take_snapshots(c, e);
        if (did < 0) return -1;
        if (did) {
            dist_backoff_reset(&bo);
        } else {
            dist_progress();
            dist_backoff_wait(&bo);
        }
    }
}

/* Lockstep: asks the PS for a --checkpoint-secs snapshot when it is due,
 * and for the snapshot of the next epoch-end evaluation. Requests name a
 * version no PS can have reached yet (its tickets are not all published;
 * prod: the next ticket to publish), so every PS snapshots the same one. */
static void request_snapshots(root_ctx *c, int64_t prod)
{
    const train_cfg *cfg = c->cfg;
    const start_info *in = c->info;
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
}

/* Async / backup workers, once the ring has cycled past the epoch's last
 * batch: evaluates the variables as they are, at about the step the
 * workers report. Returns 0 or -1 (e set). */
static int eval_current(root_ctx *c, pst_err *e)
{
    if (c->ck_avg)
        ps_pull_averages(c->sh, nn_model_params(c->m), c->cfg->mode == TRAIN_SYNC);
    else
        ps_pull(c->sh, nn_model_params(c->m), c->cfg->mode == TRAIN_SYNC, NULL);
    double step = 0;
    for (int w = 0; w < c->W; w++)
        step = PST_MAX(step, feed_report_of(c->f, c->worker_ranks[w])[WR_LAST_STEP] + 1);
    if (root_eval(c, (int64_t)step, c->next_eval_epoch, e) < 0) return -1;
    c->next_eval_epoch += c->cfg->eval_every;
    return 0;
}

/* A stop signal (sig): lowers the ticket limit to the end of the version
 * whose tickets are partly published (lockstep) or to the batches already
 * published (prod: the next ticket), and tells the PS. */
static void begin_stop(root_ctx *c, int sig, int64_t prod)
{
    const start_info *in = c->info;
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
    metrics_note(c->mx, "signal %d: stopping after the batches in flight", sig);
}

static int root_poll(void *vctx, pst_err *e)
{
    root_ctx *c = vctx;
    const train_cfg *cfg = c->cfg;
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
        did = take_snapshots(c, e);
        if (did < 0) return -1;
        request_snapshots(c, prod);
    } else if (next_eval_ticket(c) >= 0 &&
               feed_root_taken_end(c->f) >= next_eval_ticket(c) + c->nring) {
        if (eval_current(c, e) < 0) return -1;
        did = 1;
    }
    int sig = cfg->checkpoint_dir ? pst_stop_requested() : 0;
    if (sig && !c->stopping) {
        /* past every ticket any feeder may have published */
        begin_stop(c, sig, feed_root_published_end(c->f));
        did = 1;
    }
    return did;
}

static const char *mode_name(train_mode mode)
{
    return mode == TRAIN_ASYNC ? "async" : "sync";
}

/* Resume on the root: reads the checkpoint's attributes into info (the
 * tensors follow once the model exists). Returns 1 with `path` filled, 0 for
 * a fresh start, -1 on error. */
static int root_resume_meta(const train_cfg *cfg, int W, start_info *info, char *path, size_t n,
                            pipe_norm *norm, pst_err *e)
{
    const char *arg = cfg->resume_path ? cfg->resume_path : cfg->checkpoint_dir;
    if (!arg) return pst_fail(e, "--resume: give a checkpoint or --checkpoint-dir");
    int r = ckpt_resolve(arg, path, n, e);
    if (r <= 0) {
        if (r == 0 && !cfg->quiet)
            fprintf(stderr, "pstrain train: no checkpoint in %s yet: starting from scratch\n", arg);
        return r;
    }
    ckpt_meta cm;
    memset(&cm, 0, sizeof cm);
    if (ckpt_read_meta(path, &cm, e) < 0) return -1;
    int rc = 1;
    if (train_check_resume(path, &cm, cfg, e) < 0 ||
        train_resolve_norm(&cfg->pipe.norm, &cm, path, true, norm, e) < 0)
        rc = -1;
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
    else if (cm.has_averages && !(cfg->ema_decay > 0) && !cfg->quiet)
        pst_warn("%s has moving averages; this run has no --moving-average-decay and does not "
                 "keep them",
                 path);
    if (rc > 0 && cm.workers != W && !cfg->quiet)
        /* the data cursor counts batches and a version starts wherever the
         * checkpoint's ended, so another worker count continues the run
         * (deterministically in lockstep, from here on in groups of W) */
        fprintf(stderr, "pstrain train: %s was written by %d workers; continuing with %d\n", path,
                cm.workers, W);
    info->resumed = 1;
    info->first_version = cm.global_step;
    info->first_ticket = cm.next_batch;
    info->prior_examples = cm.examples;
    info->prior_seconds = cm.train_seconds;
    ckpt_meta_free(&cm);
    return rc;
}

void root_prepare(dist_run *r, pst_err *e)
{
    const train_cfg *cfg = r->cfg;
    const int W = r->W, R = r->R;
    r->info.ok = 1;
    if (h5ds_open(&r->ds, cfg->data_path, e) < 0) {
        r->info.ok = 0;
    } else {
        r->ds_open = true;
        const char *split = cfg->pipe.split ? cfg->pipe.split : "train";
        if (!h5ds_find_split(&r->ds, split)) {
            pst_fail(e, "%s: no /%s split to train on", cfg->data_path, split);
            r->info.ok = 0;
        } else if (train_eval_split(cfg, &r->ds, !cfg->quiet && !cfg->dry_run, &r->esplit, e) < 0) {
            r->info.ok = 0;
        } else {
            /* the size the model sees: the pipeline's output */
            train_cfg resolved = *cfg;
            if (train_resolve_input(&resolved, &r->ds, e) < 0) r->info.ok = 0;
            r->input = resolved.pipe;
        }
    }
    pipe_norm norm = cfg->pipe.norm; /* --normalize, or the checkpoint's */
    if (r->info.ok && cfg->resume &&
        root_resume_meta(cfg, W, &r->info, r->ckpt_file, sizeof r->ckpt_file, &norm, e) < 0)
        r->info.ok = 0;
    if (r->info.ok && pipe_norm_apply(&norm, &r->ds, "--normalize", e) < 0) r->info.ok = 0;
    r->input.norm = norm;
    pipe_norm_name(&norm, r->info.normalize);
    /* a requeued job whose run had finished: nothing is left */
    if (r->info.ok && r->info.resumed && cfg->steps && r->info.first_version >= cfg->steps) {
        r->info.done_already = 1;
        return;
    }
    if (r->info.ok) {
        r->info.height = r->input.out_h, r->info.width = r->input.out_w,
        r->info.channels = r->ds.channels;
        r->info.classes = r->ds.num_classes;
        memcpy(r->info.mean, r->ds.mean, sizeof r->info.mean);
        memcpy(r->info.std, r->ds.std, sizeof r->info.std);
    }
    if (r->info.ok && !cfg->dry_run) {
        r->info.per_epoch = pipe_split_examples(&r->ds, &r->input);
        r->info.bpe = (r->info.per_epoch + cfg->batch - 1) / cfg->batch;
        r->prior_epoch = (int)(r->info.first_ticket / PST_MAX(r->info.bpe, 1));
    }
    if (r->info.ok && r->info.per_epoch > 0 && cfg->batch > r->info.per_epoch) {
        /* every worker's activations and every ring slot are sized by
         * the batch: refuse one larger than the data */
        pst_fail(e, "--batch %d: expected at most the %lld training examples of an epoch",
                 cfg->batch, (long long)r->info.per_epoch);
        r->info.ok = 0;
    }
    /* the pipeline of the root's tickets from the data cursor (the ids the
     * interrupted epoch had consumed noted) */
    if (r->info.ok && !cfg->dry_run &&
        feeder_pipe_new(r, &r->input, 0, r->info.first_ticket, r->info.resumed ? &r->prior : NULL,
                        e) < 0)
        r->info.ok = 0;
    if (r->info.ok && cfg->checkpoint_dir && !cfg->dry_run &&
        ckpt_prepare_dir(cfg->checkpoint_dir, e) < 0)
        r->info.ok = 0; /* an unusable --checkpoint-dir, found before training */
    if (r->info.ok && !cfg->dry_run) {
        const int64_t t0 = r->info.first_ticket, v0 = r->info.first_version;
        int64_t by_epochs = cfg->epochs ? cfg->epochs * r->info.bpe : -1;
        int64_t by_steps = -1;
        if (cfg->steps) {
            if (cfg->mode == TRAIN_ASYNC)
                by_steps = t0 + PST_MAX(cfg->steps - v0, 0);
            else if (R == W)
                by_steps = t0 + PST_MAX(cfg->steps - v0, 0) * W; /* W tickets a version */
            r->info.max_versions = cfg->mode == TRAIN_SYNC ? cfg->steps : 0;
        }
        r->info.total = by_epochs < 0  ? by_steps
                        : by_steps < 0 ? by_epochs
                                       : PST_MIN(by_epochs, by_steps);
        if (r->info.total >= 0) r->info.total = PST_MAX(r->info.total, t0);
    }
    if (!r->info.ok) snprintf(r->info.msg, sizeof r->info.msg, "%s", e->msg);
}

/* The set-up into the metrics log, as lines with their time like what
 * follows: ranks and roles, hosts, threads, the recipe, the placement, and
 * where a resumed run starts. */
static void note_setup(const dist_run *r)
{
    const train_cfg *cfg = r->cfg;
    const int P = r->P, W = r->W, R = r->R;
    metrics_note(r->mx, "%d ranks: root, %d PS, %d workers; mode %s, R = %d", r->size, P, W,
                 cfg->mode == TRAIN_SYNC ? "sync" : "async", R);
    if (r->F > 1 && r->attach)
        metrics_note(r->mx,
                     "%d feeders: the root and %d feeder ranks; each worker draws from one "
                     "(the one on its node, else in turn; the map below)%s",
                     r->F, r->F - 1,
                     cfg->mode == TRAIN_ASYNC ? ", then from the others once it is exhausted" : "");
    else if (r->F > 1)
        metrics_note(r->mx,
                     "%d feeders: the root and %d feeder ranks (ticket t from feeder t mod %d)",
                     r->F, r->F - 1, r->F);
    if (cfg->ps_per_node) {
        const int nodes = P / cfg->ps_per_node;
        metrics_note(r->mx, "layout: %d PS per node on %d node%s (--ps-per-node)", cfg->ps_per_node,
                     nodes, nodes == 1 ? "" : "s");
    }
    for (const char *h = r->host_map; h && *h;) { /* one line per host */
        const int len = (int)strcspn(h, "\n");
        metrics_note(r->mx, "%.*s", len, h);
        h += len + (h[len] == '\n');
    }
    char wt[16] = "its cores", pt[16] = "its cores"; /* --threads 0: each rank's mask */
    if (cfg->threads) snprintf(wt, sizeof wt, "%d", cfg->threads);
    if (cfg->ps_threads) snprintf(pt, sizeof pt, "%d", cfg->ps_threads);
    metrics_note(r->mx, "threads: root %d prep, each worker %s compute, each PS %s optimizer",
                 cfg->pipe.prep_threads, wt, pt);
    train_recipe_note(r->mx, cfg, W, r->sched.steps_per_epoch);
    if (cfg->verbose && !cfg->quiet) {
        place_plan_print(r->plan, stderr);
    } else {
        char *line = NULL;
        size_t len = 0;
        FILE *mf = open_memstream(&line, &len);
        if (mf) {
            place_plan_summary(r->plan, mf);
            fclose(mf);
            if (len && line[len - 1] == '\n') line[len - 1] = 0;
            metrics_note(r->mx, "%s", line);
        }
        free(line);
    }
    if (r->info.resumed)
        metrics_note(r->mx, "resumed from %s at step %lld (batch %lld)", r->ckpt_file,
                     (long long)r->info.first_version, (long long)r->info.first_ticket);
    if (r->averages_from_vars)
        metrics_note(r->mx, "%s has no moving averages: they start from its variables",
                     r->ckpt_file);
}

void root_run(dist_run *r, pst_err *e)
{
    const train_cfg *cfg = r->cfg;
    train_result *res = r->res;
    const int P = r->P, W = r->W, R = r->R;
    const bool lockstep = r->lockstep;
    nn_model *m = r->m;
    const size_t nparam = r->nparam;
    const int nslots = r->nslots;
    /* a resumed run continues its metrics r->log */
    if ((r->info.resumed ? metrics_open_append : metrics_open)(&r->mx, cfg->metrics_path,
                                                               !cfg->quiet, e) < 0)
        dist_fatal("%s", e->msg);
    if (metrics_tensorboard(r->mx, cfg->tensorboard_dir, r->info.first_version, e) < 0)
        dist_fatal("%s", e->msg);
    r->rctx = pst_calloc(1, sizeof *r->rctx);
    r->rctx->ps_ranks = r->ps_ranks, r->rctx->worker_ranks = r->worker_ranks;
    r->rctx->prev = pst_calloc((size_t)W * WR_N, sizeof *r->rctx->prev);
    r->rctx->cfg = cfg, r->rctx->info = &r->info, r->rctx->f = r->f, r->rctx->sh = r->sh,
    r->rctx->mx = r->mx;
    r->rctx->pl = r->pl, r->rctx->P = P, r->rctx->W = W, r->rctx->R = R,
    r->rctx->lockstep = lockstep;
    r->rctx->sched = r->sched;
    r->rctx->total_steps =
        cfg->mode == TRAIN_SYNC
            ? (r->info.max_versions
                   ? r->info.max_versions
                   : r->info.first_version + (r->info.total - r->info.first_ticket + W - 1) / W)
            : r->info.total;
    r->rctx->total_epochs =
        r->info.total >= 0
            ? (int)((r->info.total + PST_MAX(r->info.bpe, 1) - 1) / PST_MAX(r->info.bpe, 1))
            : 0;
    r->rctx->last_reported = r->info.first_version;
    r->rctx->t0 = pst_now();
    note_setup(r);
    r->rctx->vars = r->vars, r->rctx->nvars = r->nv, r->rctx->ds = &r->ds;
    r->mtext = NULL;
    {
        size_t len = 0;
        FILE *mf = open_memstream(&r->mtext, &len);
        if (mf) {
            nn_model_describe(m, mf);
            fclose(mf);
        }
    }
    r->rctx->model_text = r->mtext;
    r->rctx->nparam = nparam, r->rctx->nslots = nslots;
    r->rctx->ck_params = pst_aligned_alloc(sizeof(float) * (nparam ? nparam : 1));
    r->rctx->ck_slots =
        pst_aligned_alloc(sizeof(float) * (size_t)PST_MAX(nslots, 1) * (nparam ? nparam : 1));
    if (r->averages) r->rctx->ck_avg = pst_aligned_alloc(sizeof(float) * (nparam ? nparam : 1));
    r->rctx->ck_got = pst_calloc((size_t)P, sizeof *r->rctx->ck_got);
    r->rctx->final_got = pst_calloc((size_t)P, sizeof *r->rctx->final_got);
    r->rctx->t_ckpt = pst_now();
    r->rctx->res = res;
    r->rctx->told_total = r->info.total >= 0 ? r->info.total : INT64_MAX;
    r->rctx->m = m, r->rctx->ds_rw = &r->ds, r->rctx->nring = r->nring;
    r->rctx->eval_version = -1;
    r->rctx->eval_split = r->esplit;
    r->rctx->input = &r->input;
    /* the first epoch count to evaluate after: the next multiple */
    if (cfg->eval_every > 0) {
        int done = (int)(r->info.first_ticket / PST_MAX(r->info.bpe, 1));
        r->rctx->next_eval_epoch = (done / cfg->eval_every + 1) * cfg->eval_every;
    }
    feed_hooks hooks = {.source = pipe_source,
                        .poll = root_poll,
                        .tick = root_tick,
                        .ctx = r->rctx,
                        .tick_secs = cfg->log_every > 0 ? cfg->log_every : 1.0};
    if (feed_root_serve(r->f, r->info.total, &hooks, &r->fst, e) < 0) dist_fatal("%s", e->msg);
    root_tick(r->rctx); /* the final interval */
    r->my_rec[FR_BATCHES] = (double)r->fst.batches;
    r->my_rec[FR_PREPARED] = r->pl ? (double)pipe_examples_prepared(r->pl) : 0;
    r->my_rec[FR_SOURCE_WAIT] = r->fst.source_wait;
    r->t_train = r->fst.wall;
}

void root_ctx_free(root_ctx *c)
{
    if (!c) return;
    free(c->ck_params), free(c->ck_slots), free(c->ck_avg), free(c->ck_got), free(c->final_got),
        free(c->prev);
    free(c);
}
