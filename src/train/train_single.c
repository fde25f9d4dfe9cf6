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
#include <unistd.h>

#include "pstrain/blas.h"
#include "pstrain/ckpt.h"
#include "pstrain/signals.h"
#include "pstrain/h5ds.h"
#include "pstrain/metrics.h"
#include "pstrain/model.h"
#include "pstrain/run_common.h"
#include "pstrain/timeline.h"
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

/* ---- the run ---- */

/* The state of a single-process run, from the data set to the last step:
 * what it owns (freed by run_free) and where it stands. */
typedef struct single_run {
    train_cfg cfg; /* with the pipeline's output size resolved */
    train_result *res;

    /* the data set and the model (run_open) */
    h5ds ds;
    nn_model *m;
    nn_model_cfg mc;
    int64_t epoch_n; /* examples per epoch: the split, or --limit */
    int max_batch;   /* the largest batch an epoch can give */

    /* the optimizer's state (run_alloc_state) */
    size_t nparam;
    int nslots;
    float *slots, *averages; /* averages: --moving-average-decay, else NULL */
    slab_range *ranges;
    int nranges;
    char *mtext; /* the model's description, for checkpoints */

    /* the data, the outputs and the schedule (run_start) */
    pipeline *p;
    metrics *mx;
    FILE *trace; /* --trace-examples */
    float *x;    /* the normalised batch */
    uint8_t *seen;
    int64_t per_epoch; /* pipe_examples_per_epoch */
    int64_t steps_per_epoch, total_steps;
    int total_epochs;
    lr_schedule sched;
    const char *esplit; /* the evaluation split, or NULL */

    /* where the run stands; *0: where this process started (resumed: mid-way) */
    int64_t step, examples, examples0, epoch_batch, skip_batches;
    int start_epoch, epoch;
    double t_train, t_train0; /* training seconds, the whole run's */
    char resumed_from[4096];  /* the checkpoint resumed, or "" */
    bool averages_from_vars;  /* resumed from a checkpoint without averages */

    /* progress and timing (run_loop) */
    worker_timing tm;
    log_window win;
    float last_losses[FINAL_LOSS_STEPS], lr;
    double t_log, t_seg, t_ckpt; /* the last log line, training segment, checkpoint */
} single_run;

/* Opens the data set's training split and builds the model (or, with
 * --dry-run, prints it). 0 to go on, 1 when the run is done (dry run), -1
 * on error. */
static int run_open(single_run *r, pst_err *e)
{
    const train_cfg *cfg = &r->cfg;
    if (train_resolve_input(&r->cfg, &r->ds, e) < 0) return -1;
    /* a resumed run may take the checkpoint's instead (run_resume) */
    if (pipe_norm_apply(&cfg->pipe.norm, &r->ds, "--normalize", e) < 0) return -1;
    const h5ds_split *tsp = h5ds_find_split(&r->ds, cfg->pipe.split ? cfg->pipe.split : "train");
    if (!tsp) return pst_fail(e, "%s: no /train split to train on", cfg->data_path);
    /* Batches never straddle epochs, so none is larger than an epoch: size
     * the activations (and evaluation batches) for that, not for a --batch
     * far larger than the data (1048576 tried to allocate 74 GB for lenet5). */
    r->epoch_n = cfg->pipe.limit > 0 ? PST_MIN(cfg->pipe.limit, tsp->count) : tsp->count;
    r->max_batch = (int)PST_MAX((int64_t)1, PST_MIN((int64_t)cfg->batch, r->epoch_n));

    r->mc = (nn_model_cfg){.name = cfg->model,
                           .height = cfg->pipe.out_h,
                           .width = cfg->pipe.out_w,
                           .channels = r->ds.channels,
                           .num_classes = r->ds.num_classes,
                           .max_batch = r->max_batch,
                           .seed = cfg->seed,
                           .weight_decay = cfg->weight_decay,
                           .label_smoothing = cfg->label_smoothing,
                           .threads = pst_threads_resolve(cfg->threads)};
    nn_switches_from_env(&r->mc.sw);
    if (nn_model_new(&r->m, &r->mc, e) < 0) return -1;
    if (cfg->dry_run) {
        nn_model_describe(r->m, stdout);
        nn_model_print_memory(r->m, opt_nslots(cfg->opt.kind), opt_name(cfg->opt.kind), stdout);
        return 1;
    }
    return 0;
}

/* The optimizer's slots, the slab's ranges, the moving averages and the
 * model's text; checks --checkpoint-dir first. 0, or -1 on error. */
static int run_alloc_state(single_run *r, pst_err *e)
{
    const train_cfg *cfg = &r->cfg;
    /* an unusable --checkpoint-dir fails now, not after training to the first checkpoint */
    if (cfg->checkpoint_dir && ckpt_prepare_dir(cfg->checkpoint_dir, e) < 0) return -1;

    r->nparam = nn_model_size(r->m);
    r->nslots = opt_nslots(cfg->opt.kind);
    r->slots = pst_aligned_alloc(sizeof(float) * (size_t)PST_MAX(r->nslots, 1) * r->nparam);
    opt_init_slots(&cfg->opt, r->slots, r->nparam, r->nparam);
    r->ranges = pst_malloc(sizeof *r->ranges * (size_t)nn_model_nvars(r->m));
    r->nranges = slab_ranges(r->m, r->ranges);
    r->mtext = model_text(r->m);
    /* --moving-average-decay: the averages start as the initial variables */
    if (cfg->ema_decay > 0) {
        r->averages = pst_aligned_alloc(sizeof(float) * (r->nparam ? r->nparam : 1));
        memcpy(r->averages, nn_model_params(r->m), sizeof(float) * r->nparam);
    }
    return 0;
}

/* --resume: variables, slots, averages, step and data cursor from a
 * checkpoint (none yet: from scratch). 0 to go on, 1 when the run had
 * already finished (a requeued job), -1 on error. */
static int run_resume(single_run *r, pst_err *e)
{
    const train_cfg *cfg = &r->cfg;
    train_result *res = r->res;
    char path[4096];
    const char *arg = cfg->resume_path ? cfg->resume_path : cfg->checkpoint_dir;
    int found = ckpt_resolve(arg, path, sizeof path, e);
    if (found < 0) return -1;
    if (found == 0) {
        if (!cfg->quiet)
            fprintf(stderr, "%s: no checkpoint in %s yet: starting from scratch\n", pst_progname(),
                    arg);
        return 0;
    }
    ckpt_expect want = ckpt_expect_model(r->m, &cfg->opt);
    want.averages = r->averages;
    ckpt_meta cm;
    memset(&cm, 0, sizeof cm);
    if (ckpt_read(path, &want, nn_model_params(r->m), r->nslots ? r->slots : NULL, r->nparam, &cm,
                  e) < 0 ||
        check_resume_meta(path, &cm, cfg, (r->epoch_n + cfg->batch - 1) / cfg->batch, e) < 0 ||
        train_resolve_norm(&cfg->pipe.norm, &cm, path, true, &r->cfg.pipe.norm, e) < 0 ||
        pipe_norm_apply(&cfg->pipe.norm, &r->ds, "attribute normalize", e) < 0) {
        ckpt_meta_free(&cm);
        return -1;
    }
    if (r->averages && !cm.has_averages) {
        memcpy(r->averages, nn_model_params(r->m), sizeof(float) * r->nparam);
        r->averages_from_vars = true;
    } else if (!r->averages && cm.has_averages && !cfg->quiet) {
        pst_warn("%s has moving averages; this run has no --moving-average-decay and "
                 "does not keep them",
                 path);
    }
    r->step = cm.global_step;
    r->start_epoch = cm.epoch;
    r->skip_batches = cm.epoch_batch;
    r->examples = cm.examples;
    r->t_train = cm.train_seconds;
    ckpt_meta_free(&cm);
    res->start_step = r->step;
    if (cfg->steps && r->step >= cfg->steps) {
        /* a requeued job whose run had finished: nothing is left */
        res->nothing_to_do = true;
        res->steps = r->step;
        snprintf(res->last_checkpoint, sizeof res->last_checkpoint, "%s", path);
        return 1;
    }
    snprintf(r->resumed_from, sizeof r->resumed_from, "%s", path);
    return 0;
}

/* Starts the pipeline at the run's epoch, the schedule, the metrics log
 * (its first notes) and the example trace; chooses the evaluation split and
 * installs the stop signals. 0, or -1 on error. */
static int run_start(single_run *r, pst_err *e)
{
    const train_cfg *cfg = &r->cfg;
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
    pc.first_epoch = r->start_epoch;
    if (pipe_new(&r->p, &r->ds, &pc, e) < 0) return -1;
    const int64_t spe = pipe_batches_per_epoch(r->p);
    r->steps_per_epoch = spe;
    r->total_steps = cfg->steps ? cfg->steps : spe * cfg->epochs;
    r->total_epochs = (int)((r->total_steps + PST_MAX(spe, 1) - 1) / PST_MAX(spe, 1));
    r->sched = train_schedule(cfg, 1, spe);
    if ((r->res->start_step > 0 ? metrics_open_append : metrics_open)(&r->mx, cfg->metrics_path,
                                                                      !cfg->quiet, e) < 0)
        return -1;
    if (metrics_tensorboard(r->mx, cfg->tensorboard_dir, r->res->start_step, e) < 0) return -1;
    if (r->resumed_from[0]) /* a log line with its time, like what follows */
        metrics_note(r->mx, "resumed from %s at step %lld (epoch %d, batch %lld)", r->resumed_from,
                     (long long)r->step, r->start_epoch + 1, (long long)r->skip_batches);
    if (r->averages_from_vars)
        metrics_note(r->mx, "%s has no moving averages: they start from its variables",
                     r->resumed_from);
    char pin[96] = ""; /* "; compute pinned to CPUs 0,1" (at most 8 named) */
    int cpu[8], np = nn_model_pinned_cpus(r->m, cpu, 8);
    for (int i = 0, len = 0; i < np && i < 8 && len < (int)sizeof pin; i++)
        len +=
            snprintf(pin + len, sizeof pin - (size_t)len, "%s%d%s",
                     i ? "," : "; compute pinned to CPUs ", cpu[i], i == 7 && np > 8 ? ",..." : "");
    metrics_note(r->mx, "threads: %d compute, %d prep%s", r->mc.threads, cfg->pipe.prep_threads,
                 pin);
    train_recipe_note(r->mx, cfg, 1, spe);
    /* --trace-examples: the format of the distributed trace (dist.c), worker 0 */
    if (cfg->trace_path && !(r->trace = fopen(cfg->trace_path, "w")))
        return pst_fail(e, "%s: cannot write the example trace: %s", cfg->trace_path,
                        strerror(errno));

    const int64_t px = (int64_t)cfg->pipe.out_h * cfg->pipe.out_w * r->ds.channels;
    r->x = pst_aligned_alloc(sizeof(float) * (size_t)(r->max_batch * px));
    if (train_eval_split(cfg, &r->ds, !cfg->quiet, &r->esplit, e) < 0) return -1;
    r->epoch_batch = r->skip_batches;
    r->epoch = r->start_epoch;
    r->lr = r->sched.base;
    /* this process's share, for its images/s (a resumed run started mid-way) */
    r->examples0 = r->examples;
    r->t_train0 = r->t_train;
    if (cfg->checkpoint_dir && pst_stop_signals_install(e) < 0) return -1;
    r->per_epoch = pipe_examples_per_epoch(r->p);
    r->seen = pst_calloc((size_t)r->per_epoch, 1);
    return 0;
}

/* Skips what the checkpoint had consumed of its epoch: the pipeline
 * replays the epoch's batches exactly, so the cursor lands on the same next
 * batch an uninterrupted run would take. */
static int run_skip_consumed(single_run *r, pst_err *e)
{
    for (int64_t i = 0; i < r->skip_batches; i++) {
        pipe_batch b;
        int got = pipe_next(r->p, &b, e);
        if (got < 0) return -1;
        if (got == 0) break;
        account_batch(r->res, &b, r->seen, r->per_epoch); /* consumed by the run that wrote it */
    }
    return 0;
}

/* The previous epoch ended at a batch of epoch `next`: closes its
 * accounting and evaluates if --eval-every asks. */
static int run_epoch_end(single_run *r, int next, double t_now, pst_err *e)
{
    const train_cfg *cfg = &r->cfg;
    r->t_train += t_now - r->t_seg;
    stats_close(stats_for_epoch(r->res, r->epoch, 1), r->seen, r->per_epoch);
    memset(r->seen, 0, (size_t)r->per_epoch);
    if (cfg->eval_every > 0 && r->esplit && next % cfg->eval_every == 0) {
        eval_stats ev;
        const double te = tl_now();
        /* the pipeline's reader shares the file: h5ds takes the HDF5 lock */
        if (evaluate_with(r->m, r->averages, &r->ds, &cfg->pipe, r->esplit, r->max_batch, &ev, e) <
            0)
            return -1;
        tl_add(TL_EVAL, te, pst_now(), r->step);
        metrics_eval(r->mx, r->step, next, r->esplit, &ev);
    }
    r->epoch = next;
    r->epoch_batch = 0;
    r->t_seg = pst_now();
    return 0;
}

/* Forward and backward on batch `b`, into the loss and *ncorrect; -1 with a
 * message when the loss is not finite. */
static int run_forward_backward(single_run *r, const pipe_batch *b, float *loss, int *ncorrect,
                                pst_err *e)
{
    const h5ds *ds = &r->ds;
    const int64_t px = (int64_t)r->cfg.pipe.out_h * r->cfg.pipe.out_w * ds->channels;
    pipe_normalize(b->pixels, (int64_t)b->count * px / ds->channels, ds->channels, ds->mean,
                   ds->std, r->x);
    *ncorrect = 0;
    *loss = nn_model_train_step(r->m, r->x, b->labels, b->count, r->step, ncorrect);
    if (!isfinite(*loss))
        return pst_fail(e, "loss is %s at step %lld (epoch %d): training diverged; lower --lr",
                        isnan(*loss) ? "NaN" : "Inf", (long long)r->step + 1, b->epoch + 1);
    if (r->trace) {
        fprintf(r->trace, "{\"worker\":0,\"step\":%lld,\"ticket\":%lld,\"epoch\":%d,\"ids\":[",
                (long long)r->step, (long long)r->step, b->epoch);
        for (int i = 0; i < b->count; i++)
            fprintf(r->trace, "%s%lld", i ? "," : "", (long long)b->ids[i]);
        fputs("]}\n", r->trace);
    }
    return 0;
}

/* Global step r->step + 1: the optimizer on the trainable ranges of the
 * slab, the new batch-norm statistics into the others, then the moving
 * averages. */
static void run_update(single_run *r)
{
    float *params = nn_model_params(r->m), *grads = nn_model_grads(r->m);
    r->step++;
    const int64_t step = r->step;
    r->lr = lr_at(&r->sched, step - 1);
    for (int i = 0; i < r->nranges; i++) {
        size_t o = r->ranges[i].begin, n = r->ranges[i].end - r->ranges[i].begin;
        if (r->ranges[i].trainable)
            nn_model_opt_apply(r->m, &r->cfg.opt, r->lr, step, params + o, grads + o, r->slots + o,
                               r->nparam, n);
        else
            nn_model_apply_state(r->m, params, grads, r->ranges[i].begin, r->ranges[i].end);
    }
    /* after the update that made global step `step`, over the whole
     * slab: trainable variables and batch-norm statistics */
    if (r->averages)
        ema_apply(ema_decay_at(r->cfg.ema_decay, step), r->averages, params, r->nparam);
    r->epoch_batch++;
}

/* Writes a checkpoint of the run as it stands, `train_seconds` into it. */
static int run_save(single_run *r, double train_seconds, pst_err *e)
{
    const train_cfg *cfg = &r->cfg;
    train_result *res = r->res;
    const double tc = tl_now();
    ckpt_meta cm = run_meta(cfg, &r->ds, r->mtext, r->step, r->epoch, r->epoch_batch,
                            r->steps_per_epoch, r->examples, train_seconds, &r->sched, r->averages);
    if (ckpt_save(cfg->checkpoint_dir, cfg->keep_checkpoints, &cm, nn_model_vars(r->m),
                  nn_model_nvars(r->m), nn_model_params(r->m), r->nslots ? r->slots : NULL,
                  r->nparam, res->last_checkpoint, sizeof res->last_checkpoint, e) < 0)
        return -1;
    tl_add(TL_CHECKPOINT, tc, pst_now(), r->step);
    return 0;
}

/* After a step at time `t_now`: a checkpoint when --checkpoint-every or
 * --checkpoint-secs says it is due or a stop signal came. 1 when a signal
 * stops the run, 0 to go on, -1 on error. */
static int run_checkpoint_hook(single_run *r, double t_now, pst_err *e)
{
    const train_cfg *cfg = &r->cfg;
    int sig = pst_stop_requested();
    bool due = (cfg->checkpoint_every && r->step % cfg->checkpoint_every == 0) ||
               (cfg->checkpoint_secs > 0 && t_now - r->t_ckpt >= cfg->checkpoint_secs) || sig;
    if (due) {
        if (run_save(r, r->t_train + (t_now - r->t_seg), e) < 0) return -1;
        r->t_ckpt = pst_now();
        metrics_note(r->mx, "checkpoint %s (step %lld)", r->res->last_checkpoint,
                     (long long)r->step);
    }
    if (sig) {
        r->res->stop_signal = sig; /* main reports it, for both paths */
        return 1;
    }
    return 0;
}

/* The epoch/step loop: until --steps, the pipeline's last epoch or a stop
 * signal. 0, or -1 on error. */
static int run_loop(single_run *r, pst_err *e)
{
    const train_cfg *cfg = &r->cfg;
    r->t_log = pst_now(), r->t_seg = pst_now(), r->t_ckpt = pst_now();
    for (;;) {
        if (cfg->steps && r->step >= cfg->steps) break;
        double t0 = pst_now();
        pipe_batch b;
        int got = pipe_next(r->p, &b, e);
        if (got < 0) return -1;
        if (got == 0) break;
        double t1 = pst_now();
        if (b.epoch != r->epoch && run_epoch_end(r, b.epoch, t1, e) < 0) return -1;
        account_batch(r->res, &b, r->seen, r->per_epoch);
        const double tc = tl_now(); /* after an epoch end's evaluation */

        float loss;
        int ncorrect;
        if (run_forward_backward(r, &b, &loss, &ncorrect, e) < 0) return -1;
        double t2 = pst_now();
        run_update(r);
        double t3 = pst_now();
        if (tl_recording) {
            tl_add(TL_WAIT_DATA, t0, t1, r->step - 1);
            tl_add(TL_COMPUTE, tc, t2, r->step - 1);
            tl_add(TL_APPLY, t2, t3, r->step);
        }
        r->tm.wait_data += t1 - t0;
        r->tm.compute += t2 - t1;
        r->tm.push += t3 - t2;
        r->examples += b.count;
        r->win.examples += b.count;
        r->win.correct += ncorrect;
        r->win.loss += loss;
        r->win.steps++;
        r->last_losses[(r->step - 1) % FINAL_LOSS_STEPS] = loss;
        if (t3 - r->t_log >= cfg->log_every) {
            double el = r->t_train + (t3 - r->t_seg) - r->t_train0;
            log_step(r->mx, &r->win, r->step, r->res->start_step, r->total_steps, b.epoch + 1,
                     r->total_epochs, r->lr, el > 0 ? (double)(r->examples - r->examples0) / el : 0,
                     &r->tm);
            r->t_log = t3;
        }
        if (cfg->checkpoint_dir) {
            int stop = run_checkpoint_hook(r, t3, e);
            if (stop < 0) return -1;
            if (stop) break;
        }
    }
    r->t_train += pst_now() - r->t_seg;
    return 0;
}

/* After the loop: the final checkpoint, the last epoch's accounting, the
 * last log line, the result, the parameter dump and the evaluation at the
 * end. 0, or -1 on error. */
static int run_finish(single_run *r, pst_err *e)
{
    const train_cfg *cfg = &r->cfg;
    train_result *res = r->res;
    if (cfg->checkpoint_dir && !res->stop_signal) {
        /* The final checkpoint (unless this step was just saved). */
        char want[4096];
        ckpt_path(want, sizeof want, cfg->checkpoint_dir, r->step);
        if (strcmp(want, res->last_checkpoint) != 0) {
            if (run_save(r, r->t_train, e) < 0) return -1;
            metrics_note(r->mx, "checkpoint %s (step %lld)", res->last_checkpoint,
                         (long long)r->step);
        }
    }
    if (res->nepochs_stats) stats_close(stats_for_epoch(res, r->epoch, 1), r->seen, r->per_epoch);
    if (r->t_train > r->t_train0) /* the last, partial interval */
        log_step(r->mx, &r->win, r->step, res->start_step, r->total_steps, r->epoch + 1,
                 r->total_epochs, r->lr,
                 (double)(r->examples - r->examples0) / (r->t_train - r->t_train0), &r->tm);
    const int64_t step = r->step;
    {
        int64_t n = PST_MIN(step - res->start_step, (int64_t)FINAL_LOSS_STEPS);
        double sum = 0;
        for (int64_t i = 1; i <= n; i++) sum += r->last_losses[(step - i) % FINAL_LOSS_STEPS];
        res->final_loss = n ? (float)(sum / (double)n) : NAN;
    }

    res->ranks = 1, res->ps = 0, res->workers = 1;
    res->steps = step;
    res->examples = r->examples;
    res->epochs = (int)(step / PST_MAX(r->steps_per_epoch, 1));
    res->epoch = r->epoch + 1;
    res->total_epochs = r->total_epochs;
    res->total_steps = r->total_steps;
    res->train_seconds = r->t_train;
    res->run_steps = step - res->start_step;
    res->run_examples = r->examples - r->examples0;
    res->run_seconds = r->t_train - r->t_train0;
    res->images_per_sec = res->run_seconds > 0 ? (double)res->run_examples / res->run_seconds : 0;
    if (cfg->dump_params_path &&
        train_dump_params(cfg->dump_params_path, nn_model_params(r->m), r->nparam, e) < 0)
        return -1;
    res->nworker_timing = 1;
    res->wtiming = pst_malloc(sizeof *res->wtiming);
    res->wtiming[0] = r->tm;
    if (r->esplit) {
        eval_stats ev;
        const double te = tl_now();
        if (evaluate_with(r->m, r->averages, &r->ds, &cfg->pipe, r->esplit, r->max_batch, &ev, e) <
            0)
            return -1;
        tl_add(TL_EVAL, te, pst_now(), step);
        train_set_eval(res, r->esplit, &ev);
        metrics_eval(r->mx, step, res->epoch, r->esplit, &ev);
    }
    return metrics_finish(r->mx, e);
}

/* Closes the trace (a write error fails a run that had succeeded: `rc`
 * becomes -1) and frees everything the run owns. Returns the final rc. */
static int run_free(single_run *r, int rc, pst_err *e)
{
    if (r->trace) {
        bool bad = ferror(r->trace) != 0;
        if (fclose(r->trace) != 0 || bad) {
            if (rc == 0)
                rc = pst_fail(e, "%s: write error on the example trace", r->cfg.trace_path);
        }
    }
    metrics_close(r->mx);
    pipe_free(r->p);
    free(r->x);
    free(r->slots);
    free(r->averages);
    free(r->ranges);
    free(r->seen);
    free(r->mtext);
    nn_model_free(r->m);
    h5ds_close(&r->ds);
    return rc;
}

/* --timeline: the trace of this one process, its first event at 0. */
static int write_timeline(const char *path, bool quiet, pst_err *e)
{
    tl_proc p = {.pid = 0, .nlanes = 3, .lane_names = {"steps", "checkpoints", "evaluations"}};
    char host[128] = "";
    gethostname(host, sizeof host - 1);
    snprintf(p.name, sizeof p.name, "single process @%s", host);
    p.ev = tl_events(&p.n, &p.dropped);
    double origin = p.n ? p.ev[0].t0 : 0;
    for (size_t i = 0; i < p.n; i++) origin = PST_MIN(origin, p.ev[i].t0);
    if (p.dropped && !quiet)
        pst_warn("--timeline: %lld events did not fit in the buffer and are missing "
                 "(PSTRAIN_TIMELINE_MAX_EVENTS raises the cap)",
                 (long long)p.dropped);
    return tl_write(path, &p, 1, origin, e);
}

int train_single(const train_cfg *cfg_in, train_result *res, pst_err *e)
{
    memset(res, 0, sizeof *res);
    single_run *r = pst_calloc(1, sizeof *r);
    r->cfg = *cfg_in;
    r->res = res;
    const train_cfg *cfg = &r->cfg;
    if (train_check_cfg(cfg, e) < 0) {
        free(r);
        return -1;
    }
    if (cfg->ps > 0 && !cfg->quiet)
        pst_warn("--ps %d: one process (no mpirun) has no parameter servers; --ps, --placement, "
                 "--mode and --replicas-to-aggregate apply under mpirun -np N",
                 cfg->ps);
    if (cfg->ps_per_node > 0 && !cfg->quiet)
        pst_warn("--ps-per-node %d: one process (no mpirun) has no parameter servers; it applies "
                 "under mpirun -np N",
                 cfg->ps_per_node);
    nn_blis_init();
    if (h5ds_open(&r->ds, cfg->data_path, e) < 0) {
        free(r);
        return -1;
    }
    /* each phase: -1 error, 1 the run is done (dry run, nothing left to do) */
    int rc = run_open(r, e);
    if (rc == 0) rc = run_alloc_state(r, e);
    if (rc == 0 && cfg->resume) rc = run_resume(r, e);
    if (rc == 0 && cfg->timeline_path) tl_start(0);
    if (rc == 0) rc = run_start(r, e);
    if (rc == 0) rc = run_skip_consumed(r, e);
    if (rc == 0) rc = run_loop(r, e);
    if (rc == 0) rc = run_finish(r, e);
    if (rc == 0 && cfg->timeline_path) rc = write_timeline(cfg->timeline_path, cfg->quiet, e);
    rc = run_free(r, rc < 0 ? -1 : 0, e);
    tl_stop();
    free(r);
    return rc;
}
