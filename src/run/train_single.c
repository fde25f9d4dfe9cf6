/*
 * train_single.c - training in one process.
 *
 * The single-process loop is the reference the distributed one is tested
 * against: pipeline batch -> normalise -> forward/backward -> optimizer on
 * the trainable ranges of the slab, new batch-norm statistics copied into
 * the non-trainable ranges.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/blas.h"
#include "pstrain/ckpt.h"
#include "pstrain/signals.h"
#include "pstrain/h5ds.h"
#include "pstrain/metrics.h"
#include "pstrain/model.h"
#include "pstrain/run_common.h"
#include "pstrain/train.h"

/* Evaluates with the moving averages in place of the variables when
 * `averages` is not NULL (as the Inception example's evaluation restores
 * them), the variables restored afterwards. */
static int evaluate_with(nn_model *m, const float *averages, h5ds *ds, const pipe_cfg *input,
                         const char *split, int batch, eval_stats *ev, pst_err *e)
{
    float *params = nn_model_params(m), *keep = NULL;
    const size_t n = nn_model_size(m);
    if (averages) {
        keep = pst_aligned_alloc(sizeof(float) * (n ? n : 1));
        memcpy(keep, params, sizeof(float) * n);
        memcpy(params, averages, sizeof(float) * n);
    }
    int rc = train_evaluate(m, ds, input, split, batch, ev, NULL, e);
    if (keep) {
        memcpy(params, keep, sizeof(float) * n);
        free(keep);
    }
    return rc;
}

/* Maximal runs of consecutive trainable (or non-trainable) variables, so
 * the optimizer touches each contiguous range with one call. */
typedef struct slab_range {
    size_t begin, end;
    bool trainable;
} slab_range;

static int slab_ranges(const nn_model *m, slab_range *out)
{
    int n = 0;
    for (int i = 0; i < nn_model_nvars(m); i++) {
        const nn_var *v = nn_model_var(m, i);
        if (n && out[n - 1].trainable == v->trainable && out[n - 1].end == v->offset)
            out[n - 1].end = v->offset + v->size;
        else
            out[n++] = (slab_range){v->offset, v->offset + v->size, v->trainable};
    }
    return n;
}

/* The accounting record of `epoch`, created on first use (a resumed run
 * has records only for the epochs it saw). */
static epoch_stats *stats_for_epoch(train_result *r, int epoch, int nworkers)
{
    for (int i = r->nepochs_stats - 1; i >= 0; i--)
        if (r->epoch_stats[i].epoch == epoch) return &r->epoch_stats[i];
    r->epoch_stats =
        pst_realloc(r->epoch_stats, sizeof *r->epoch_stats * (size_t)(r->nepochs_stats + 1));
    epoch_stats *s = &r->epoch_stats[r->nepochs_stats++];
    *s = (epoch_stats){.epoch = epoch, .nworkers = nworkers};
    s->per_worker = pst_calloc((size_t)nworkers, sizeof(int64_t));
    return s;
}

/* Counts a batch in its epoch's accounting and the bitmap of seen ids. */
static void account_batch(train_result *r, const pipe_batch *b, uint8_t *seen, int64_t n)
{
    epoch_stats *es = stats_for_epoch(r, b->epoch, 1);
    es->examples += b->count;
    es->per_worker[0] += b->count;
    for (int i = 0; i < b->count; i++)
        if (b->ids[i] >= 0 && b->ids[i] < n && seen[b->ids[i]] < 255) seen[b->ids[i]]++;
}

/* Closes an epoch's accounting from the bitmap of ids seen in it. */
static void stats_close(epoch_stats *s, const uint8_t *seen, int64_t n)
{
    int64_t unique = 0;
    for (int64_t i = 0; i < n; i++) unique += seen[i] != 0;
    s->unique = unique;
    s->duplicates = s->examples - unique;
    s->missing = n - unique;
}

/* The checkpoint attributes of a single-process run after `step` steps,
 * `epoch_batch` batches into `epoch`: the data cursor is the next batch of
 * this epoch, or the first of the next. */
static ckpt_meta run_meta(const train_cfg *cfg, const h5ds *ds, const char *model_text,
                          int64_t step, int epoch, int64_t epoch_batch, int64_t steps_per_epoch,
                          int64_t examples, double train_seconds, const lr_schedule *sched,
                          const float *averages)
{
    if (epoch_batch >= steps_per_epoch) epoch++, epoch_batch = 0;
    ckpt_meta m = train_ckpt_meta(cfg, model_text, cfg->pipe.out_h, cfg->pipe.out_w, ds->channels,
                                  ds->num_classes, sched);
    m.global_step = step;
    m.epoch = epoch;
    m.epoch_batch = epoch_batch;
    m.next_batch = step;
    m.examples = examples;
    m.train_seconds = train_seconds;
    m.workers = 1, m.ps = 0;
    m.averages = averages;
    return m;
}

/* The model's text description, for checkpoints. Caller frees. */
static char *model_text(const nn_model *m)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    nn_model_describe(m, f);
    fclose(f);
    return buf;
}

/* Checks that a checkpoint continues this run: same batch size, seed and
 * epoch length (`batches_per_epoch`, which --limit changes), so that the
 * data cursor and the random streams mean the same thing. */
static int check_resume_meta(const char *path, const ckpt_meta *m, const train_cfg *cfg,
                             int64_t batches_per_epoch, pst_err *e)
{
    if (train_check_resume(path, m, cfg, e) < 0) return -1;
    /* a single process's schedule counts its batches per epoch (a
     * distributed run's counts steps of several workers) */
    const bool single = m->workers == 1 && m->ps == 0;
    if ((single && m->lr.steps_per_epoch != batches_per_epoch) ||
        m->epoch_batch >= batches_per_epoch)
        return pst_fail(e,
                        "%s: data cursor at batch %lld of epoch %d, of %lld batches per epoch%s; "
                        "this run has %lld batches per epoch (another --limit or train split?)",
                        path, (long long)m->epoch_batch, m->epoch + 1,
                        (long long)m->lr.steps_per_epoch, single ? "" : " (steps)",
                        (long long)batches_per_epoch);
    return 0;
}

/* What is logged every --log-every seconds: means over the interval. */
typedef struct log_window {
    int64_t examples, correct;
    double loss;
    int steps;
} log_window;

/* `epoch` is 1-based, the epoch of `step` */
static void log_step(metrics *mx, log_window *w, int64_t step, int64_t start_step,
                     int64_t total_steps, int epoch, int total_epochs, float lr, double rate,
                     const worker_timing *tm)
{
    if (!w->steps) return;
    metrics_step_rec rec = {.step = step,
                            .total_steps = total_steps,
                            .start_step = start_step,
                            .epoch = epoch,
                            .total_epochs = total_epochs,
                            .loss = w->loss / w->steps,
                            .accuracy = (double)w->correct / (double)w->examples,
                            .lr = lr,
                            .images_per_sec = rate,
                            .worker = tm};
    metrics_step(mx, &rec);
    *w = (log_window){0};
}

int train_single(const train_cfg *cfg_in, train_result *res, pst_err *e)
{
    memset(res, 0, sizeof *res);
    train_cfg cfg_resolved = *cfg_in; /* with the pipeline's output size */
    train_cfg *cfg = &cfg_resolved;
    if (train_check_cfg(cfg, e) < 0) return -1;
    if (cfg->ps > 0 && !cfg->quiet)
        pst_warn("--ps %d: one process (no mpirun) has no parameter servers; --ps, --placement, "
                 "--mode and --replicas-to-aggregate apply under mpirun -np N",
                 cfg->ps);
    nn_blis_init();

    h5ds ds;
    nn_model *m = NULL;
    pipeline *p = NULL;
    metrics *mx = NULL;
    float *slots = NULL, *x = NULL, *averages = NULL;
    slab_range *ranges = NULL;
    uint8_t *seen = NULL;
    char *mtext = NULL;
    FILE *trace = NULL;
    int rc = -1;
    if (h5ds_open(&ds, cfg->data_path, e) < 0) return -1;
    if (train_resolve_input(cfg, &ds, e) < 0) goto out;
    const h5ds_split *tsp = h5ds_find_split(&ds, cfg->pipe.split ? cfg->pipe.split : "train");
    if (!tsp) {
        pst_fail(e, "%s: no /train split to train on", cfg->data_path);
        goto out;
    }
    /* Batches never straddle epochs, so none is larger than an epoch: size
     * the activations (and evaluation batches) for that, not for a --batch
     * far larger than the data (1048576 tried to allocate 74 GB for lenet5). */
    const int64_t epoch_n = cfg->pipe.limit > 0 ? PST_MIN(cfg->pipe.limit, tsp->count) : tsp->count;
    const int max_batch = (int)PST_MAX((int64_t)1, PST_MIN((int64_t)cfg->batch, epoch_n));

    nn_model_cfg mc = {.name = cfg->model,
                       .height = cfg->pipe.out_h,
                       .width = cfg->pipe.out_w,
                       .channels = ds.channels,
                       .num_classes = ds.num_classes,
                       .max_batch = max_batch,
                       .seed = cfg->seed,
                       .weight_decay = cfg->weight_decay,
                       .label_smoothing = cfg->label_smoothing,
                       .threads = pst_threads_resolve(cfg->threads)};
    if (nn_model_new(&m, &mc, e) < 0) goto out;
    if (cfg->dry_run) {
        nn_model_describe(m, stdout);
        nn_model_print_memory(m, opt_nslots(cfg->opt.kind), opt_name(cfg->opt.kind), stdout);
        rc = 0;
        goto out;
    }
    /* an unusable --checkpoint-dir fails now, not after training to the first checkpoint */
    if (cfg->checkpoint_dir && ckpt_prepare_dir(cfg->checkpoint_dir, e) < 0) goto out;

    const size_t nparam = nn_model_size(m);
    const int nslots = opt_nslots(cfg->opt.kind);
    slots = pst_aligned_alloc(sizeof(float) * (size_t)PST_MAX(nslots, 1) * nparam);
    opt_init_slots(&cfg->opt, slots, nparam, nparam);
    ranges = pst_malloc(sizeof *ranges * (size_t)nn_model_nvars(m));
    const int nranges = slab_ranges(m, ranges);

    const nn_var *vars = nn_model_vars(m);
    const int nvars = nn_model_nvars(m);
    mtext = model_text(m);
    /* --moving-average-decay: the averages start as the initial variables */
    if (cfg->ema_decay > 0) {
        averages = pst_aligned_alloc(sizeof(float) * (nparam ? nparam : 1));
        memcpy(averages, nn_model_params(m), sizeof(float) * nparam);
    }
    bool averages_from_vars = false; /* resumed from a checkpoint without averages */

    /* Resume: variables, slots, step and data cursor from a checkpoint. */
    int64_t step = 0, examples = 0, skip_batches = 0;
    char resumed_from[4096] = "";
    int start_epoch = 0;
    double t_train = 0;
    if (cfg->resume) {
        char path[4096];
        const char *arg = cfg->resume_path ? cfg->resume_path : cfg->checkpoint_dir;
        int r = ckpt_resolve(arg, path, sizeof path, e);
        if (r < 0) goto out;
        if (r == 0) {
            if (!cfg->quiet)
                fprintf(stderr, "%s: no checkpoint in %s yet: starting from scratch\n",
                        pst_progname(), arg);
        } else {
            ckpt_expect want = ckpt_expect_model(m, &cfg->opt);
            want.averages = averages;
            ckpt_meta cm;
            memset(&cm, 0, sizeof cm);
            if (ckpt_read(path, &want, nn_model_params(m), nslots ? slots : NULL, nparam, &cm, e) <
                    0 ||
                check_resume_meta(path, &cm, cfg, (epoch_n + cfg->batch - 1) / cfg->batch, e) < 0) {
                ckpt_meta_free(&cm);
                goto out;
            }
            if (averages && !cm.has_averages) {
                memcpy(averages, nn_model_params(m), sizeof(float) * nparam);
                averages_from_vars = true;
            } else if (!averages && cm.has_averages && !cfg->quiet) {
                pst_warn("%s has moving averages; this run has no --moving-average-decay and "
                         "does not keep them",
                         path);
            }
            step = cm.global_step;
            start_epoch = cm.epoch;
            skip_batches = cm.epoch_batch;
            examples = cm.examples;
            t_train = cm.train_seconds;
            ckpt_meta_free(&cm);
            res->start_step = step;
            if (cfg->steps && step >= cfg->steps) {
                /* a requeued job whose run had finished: nothing is left */
                res->nothing_to_do = true;
                res->steps = step;
                snprintf(res->last_checkpoint, sizeof res->last_checkpoint, "%s", path);
                rc = 0;
                goto out;
            }
            snprintf(resumed_from, sizeof resumed_from, "%s", path);
        }
    }

    if (!cfg->resume && cfg->checkpoint_dir) {
        /* Mixing two runs in one directory would make a later --resume pick
         * whichever has the higher step. */
        char prev[4096];
        if (ckpt_find_latest(cfg->checkpoint_dir, prev, sizeof prev, NULL) == 1)
            pst_warn("%s already holds checkpoints (newest %s); this run starts from scratch and "
                     "writes its own there - pass --resume to continue that run instead",
                     cfg->checkpoint_dir, prev);
    }

    pipe_cfg pc = cfg->pipe;
    pc.batch = cfg->batch;
    pc.seed = cfg->seed;
    pc.epochs = cfg->epochs ? cfg->epochs : 0;
    pc.first_epoch = start_epoch;
    if (pipe_new(&p, &ds, &pc, e) < 0) goto out;
    const int64_t steps_per_epoch = pipe_batches_per_epoch(p);
    const int64_t total_steps = cfg->steps ? cfg->steps : steps_per_epoch * cfg->epochs;
    const int total_epochs =
        (int)((total_steps + PST_MAX(steps_per_epoch, 1) - 1) / PST_MAX(steps_per_epoch, 1));
    lr_schedule sched = train_schedule(cfg, 1, steps_per_epoch);
    if ((res->start_step > 0 ? metrics_open_append : metrics_open)(&mx, cfg->metrics_path,
                                                                   !cfg->quiet, e) < 0)
        goto out;
    if (resumed_from[0]) /* a log line with its time, like what follows */
        metrics_note(mx, "resumed from %s at step %lld (epoch %d, batch %lld)", resumed_from,
                     (long long)step, start_epoch + 1, (long long)skip_batches);
    if (averages_from_vars)
        metrics_note(mx, "%s has no moving averages: they start from its variables", resumed_from);
    metrics_note(mx, "threads: %d compute, %d prep", mc.threads, cfg->pipe.prep_threads);
    train_recipe_note(mx, cfg, 1, steps_per_epoch);
    /* --trace-examples: the format of the distributed trace (dist.c), worker 0 */
    if (cfg->trace_path && !(trace = fopen(cfg->trace_path, "w"))) {
        pst_fail(e, "%s: cannot write the example trace: %s", cfg->trace_path, strerror(errno));
        goto out;
    }

    const int64_t px = (int64_t)cfg->pipe.out_h * cfg->pipe.out_w * ds.channels;
    x = pst_aligned_alloc(sizeof(float) * (size_t)(max_batch * px));
    float *params = nn_model_params(m), *grads = nn_model_grads(m);
    worker_timing tm = {0};
    const char *esplit = NULL;
    if (train_eval_split(cfg, &ds, !cfg->quiet, &esplit, e) < 0) goto out;
    int64_t epoch_batch = skip_batches;
    int epoch = start_epoch;
    log_window win = {0};
    float last_losses[FINAL_LOSS_STEPS], lr = sched.base;
    /* this process's share, for its images/s (a resumed run started mid-way) */
    const int64_t examples0 = examples;
    const double t_train0 = t_train;
    if (cfg->checkpoint_dir && pst_stop_signals_install(e) < 0) goto out;
    const int64_t per_epoch = pipe_examples_per_epoch(p);
    seen = pst_calloc((size_t)per_epoch, 1);
    /* Skip what the checkpoint had consumed of its epoch: the pipeline
     * replays the epoch's batches exactly, so the cursor lands on the same
     * next batch an uninterrupted run would take. */
    for (int64_t i = 0; i < skip_batches; i++) {
        pipe_batch b;
        int got = pipe_next(p, &b, e);
        if (got < 0) goto out;
        if (got == 0) break;
        account_batch(res, &b, seen, per_epoch); /* consumed by the run that wrote it */
    }
    double t_log = pst_now(), t_seg = pst_now(), t_ckpt = pst_now();
    for (;;) {
        if (cfg->steps && step >= cfg->steps) break;
        double t0 = pst_now();
        pipe_batch b;
        int got = pipe_next(p, &b, e);
        if (got < 0) goto out;
        if (got == 0) break;
        double t1 = pst_now();
        if (b.epoch != epoch) {
            /* The previous epoch ended: evaluate if asked. */
            t_train += t1 - t_seg;
            stats_close(stats_for_epoch(res, epoch, 1), seen, per_epoch);
            memset(seen, 0, (size_t)per_epoch);
            if (cfg->eval_every > 0 && esplit && b.epoch % cfg->eval_every == 0) {
                eval_stats ev;
                /* the pipeline's reader shares the file: h5ds takes the HDF5 lock */
                int er = evaluate_with(m, averages, &ds, &cfg->pipe, esplit, max_batch, &ev, e);
                if (er < 0) goto out;
                metrics_eval(mx, step, b.epoch, esplit, &ev);
            }
            epoch = b.epoch;
            epoch_batch = 0;
            t_seg = pst_now();
        }
        account_batch(res, &b, seen, per_epoch);

        pipe_normalize(b.pixels, (int64_t)b.count * px / ds.channels, ds.channels, ds.mean, ds.std,
                       x);
        int ncorrect = 0;
        float loss = nn_model_train_step(m, x, b.labels, b.count, step, &ncorrect);
        if (!isfinite(loss)) {
            pst_fail(e, "loss is %s at step %lld (epoch %d): training diverged; lower --lr",
                     isnan(loss) ? "NaN" : "Inf", (long long)step + 1, b.epoch + 1);
            goto out;
        }
        if (trace) {
            fprintf(trace, "{\"worker\":0,\"step\":%lld,\"ticket\":%lld,\"epoch\":%d,\"ids\":[",
                    (long long)step, (long long)step, b.epoch);
            for (int i = 0; i < b.count; i++)
                fprintf(trace, "%s%lld", i ? "," : "", (long long)b.ids[i]);
            fputs("]}\n", trace);
        }
        double t2 = pst_now();
        step++;
        lr = lr_at(&sched, step - 1);
        for (int r = 0; r < nranges; r++) {
            size_t o = ranges[r].begin, n = ranges[r].end - ranges[r].begin;
            if (ranges[r].trainable)
                opt_apply(&cfg->opt, lr, step, params + o, grads + o, slots + o, nparam, n);
            else
                nn_model_apply_state(m, params, grads, ranges[r].begin, ranges[r].end);
        }
        /* after the update that made global step `step`, over the whole
         * slab: trainable variables and batch-norm statistics */
        if (averages) ema_apply(ema_decay_at(cfg->ema_decay, step), averages, params, nparam);
        epoch_batch++;
        double t3 = pst_now();
        tm.wait_data += t1 - t0;
        tm.compute += t2 - t1;
        tm.push += t3 - t2;
        examples += b.count;
        win.examples += b.count;
        win.correct += ncorrect;
        win.loss += loss;
        win.steps++;
        last_losses[(step - 1) % FINAL_LOSS_STEPS] = loss;
        if (t3 - t_log >= cfg->log_every) {
            double el = t_train + (t3 - t_seg) - t_train0;
            log_step(mx, &win, step, res->start_step, total_steps, b.epoch + 1, total_epochs, lr,
                     el > 0 ? (double)(examples - examples0) / el : 0, &tm);
            t_log = t3;
        }
        if (cfg->checkpoint_dir) {
            int sig = pst_stop_requested();
            bool due = (cfg->checkpoint_every && step % cfg->checkpoint_every == 0) ||
                       (cfg->checkpoint_secs > 0 && t3 - t_ckpt >= cfg->checkpoint_secs) || sig;
            if (due) {
                ckpt_meta cm = run_meta(cfg, &ds, mtext, step, epoch, epoch_batch, steps_per_epoch,
                                        examples, t_train + (t3 - t_seg), &sched, averages);
                if (ckpt_save(cfg->checkpoint_dir, cfg->keep_checkpoints, &cm, vars, nvars, params,
                              nslots ? slots : NULL, nparam, res->last_checkpoint,
                              sizeof res->last_checkpoint, e) < 0)
                    goto out;
                t_ckpt = pst_now();
                metrics_note(mx, "checkpoint %s (step %lld)", res->last_checkpoint,
                             (long long)step);
            }
            if (sig) {
                res->stop_signal = sig; /* main reports it, for both paths */
                break;
            }
        }
    }
    t_train += pst_now() - t_seg;
    if (cfg->checkpoint_dir && !res->stop_signal) {
        /* The final checkpoint (unless this step was just saved). */
        char want[4096];
        ckpt_path(want, sizeof want, cfg->checkpoint_dir, step);
        if (strcmp(want, res->last_checkpoint) != 0) {
            ckpt_meta cm = run_meta(cfg, &ds, mtext, step, epoch, epoch_batch, steps_per_epoch,
                                    examples, t_train, &sched, averages);
            if (ckpt_save(cfg->checkpoint_dir, cfg->keep_checkpoints, &cm, vars, nvars, params,
                          nslots ? slots : NULL, nparam, res->last_checkpoint,
                          sizeof res->last_checkpoint, e) < 0)
                goto out;
            metrics_note(mx, "checkpoint %s (step %lld)", res->last_checkpoint, (long long)step);
        }
    }
    if (res->nepochs_stats) stats_close(stats_for_epoch(res, epoch, 1), seen, per_epoch);
    if (t_train > t_train0) /* the last, partial interval */
        log_step(mx, &win, step, res->start_step, total_steps, epoch + 1, total_epochs, lr,
                 (double)(examples - examples0) / (t_train - t_train0), &tm);
    {
        int64_t n = PST_MIN(step - res->start_step, (int64_t)FINAL_LOSS_STEPS);
        double sum = 0;
        for (int64_t i = 1; i <= n; i++) sum += last_losses[(step - i) % FINAL_LOSS_STEPS];
        res->final_loss = n ? (float)(sum / (double)n) : NAN;
    }

    res->ranks = 1, res->ps = 0, res->workers = 1;
    res->steps = step;
    res->examples = examples;
    res->epochs = (int)(step / PST_MAX(steps_per_epoch, 1));
    res->epoch = epoch + 1;
    res->total_epochs = total_epochs;
    res->total_steps = total_steps;
    res->train_seconds = t_train;
    res->run_steps = step - res->start_step;
    res->run_examples = examples - examples0;
    res->run_seconds = t_train - t_train0;
    res->images_per_sec = res->run_seconds > 0 ? (double)res->run_examples / res->run_seconds : 0;
    if (cfg->dump_params_path && train_dump_params(cfg->dump_params_path, params, nparam, e) < 0)
        goto out;
    res->nworker_timing = 1;
    res->wtiming = pst_malloc(sizeof *res->wtiming);
    res->wtiming[0] = tm;
    if (esplit) {
        eval_stats ev;
        int er = evaluate_with(m, averages, &ds, &cfg->pipe, esplit, max_batch, &ev, e);
        if (er < 0) goto out;
        train_set_eval(res, esplit, &ev);
        metrics_eval(mx, step, res->epoch, esplit, &ev);
    }
    if (metrics_finish(mx, e) < 0) goto out;
    rc = 0;
out:
    if (trace) {
        bool bad = ferror(trace) != 0;
        if (fclose(trace) != 0 || bad) {
            if (rc == 0) rc = pst_fail(e, "%s: write error on the example trace", cfg->trace_path);
        }
    }
    metrics_close(mx);
    pipe_free(p);
    free(x);
    free(slots);
    free(averages);
    free(ranges);
    free(seen);
    free(mtext);
    nn_model_free(m);
    h5ds_close(&ds);
    return rc;
}
