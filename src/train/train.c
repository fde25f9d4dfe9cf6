/*
 * train.c - what the single-process trainer (train_single.c) and the
 * distributed one (src/cluster/dist.c) share: the default configuration,
 * evaluation on a split (also `pstrain eval`'s), the choice of the
 * evaluation split, the parameter dump and the checks of output paths
 * before any work.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pstrain/augment.h"
#include "pstrain/h5ds.h"
#include "pstrain/model.h"
#include "pstrain/run_common.h"
#include "pstrain/tboard.h"
#include "pstrain/train.h"

train_cfg train_cfg_defaults(void)
{
    train_cfg c;
    memset(&c, 0, sizeof c);
    c.model = "lenet5";
    c.epochs = 1;
    c.batch = 64;
    c.opt = opt_defaults(OPT_MOMENTUM);
    c.lr = 0.01f;
    c.lr_decay = 1.0f;
    c.seed = 1234;
    c.pipe = pipe_cfg_defaults();
    c.placement = PLACE_ROUND_ROBIN;
    c.partition_bytes = 256 * 1024;
    c.mode = TRAIN_SYNC;
    c.max_staleness = -1;
    c.log_every = 1.0;
    c.keep_checkpoints = 3;
    c.threads = 1;
    c.ps_threads = 1;
    return c;
}

int train_evaluate(nn_model *m, h5ds *ds, const pipe_cfg *input, const char *split, int batch,
                   eval_stats *ev, int64_t *confusion, pst_err *e)
{
    return train_evaluate_logits(m, ds, input, split, batch, ev, confusion, NULL, NULL, e);
}

int64_t train_topk_correct(const float *logits, const int32_t *labels, int n, int K, int k)
{
    int64_t hits = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * (size_t)K;
        const int y = labels[i];
        const float zy = z[y];
        if (isnan(zy)) continue;
        int above = 0; /* classes ranked above y */
        for (int j = 0; j < K && above < k; j++) above += z[j] > zy || (z[j] == zy && j < y);
        hits += above < k;
    }
    return hits;
}

/* Accumulates one evaluated batch. */
typedef struct eval_acc {
    double loss_sum;
    int64_t correct, correct5, n;
} eval_acc;

static int eval_batch(nn_model *m, const h5ds *ds, int C, const uint8_t *img, const int32_t *lab,
                      int nb, int64_t px, float *x, int32_t *pred, eval_acc *a, int64_t *confusion,
                      train_logits_fn fn, void *ctx, pst_err *e)
{
    pipe_normalize(img, nb * px / C, C, ds->mean, ds->std, x);
    int nc = 0;
    float l = nn_model_eval(m, x, lab, nb, &nc, pred);
    a->loss_sum += (double)l * nb;
    a->correct += nc;
    a->correct5 += train_topk_correct(nn_model_logits(m), lab, nb, ds->num_classes, 5);
    a->n += nb;
    if (confusion)
        for (int i = 0; i < nb; i++) confusion[(int64_t)lab[i] * ds->num_classes + pred[i]]++;
    if (fn && fn(ctx, nn_model_logits(m), nb, ds->num_classes, e) != 0) return -1;
    return 0;
}

/* Whether evaluation must read through the pipeline (the recipe's
 * evaluation transform or a resize) rather than the stored pixels. */
static bool eval_needs_pipeline(const h5ds *ds, const pipe_cfg *in)
{
    if (ds->storage == H5DS_STORE_ENCODED) return true;
    if (!in) return false;
    return in->recipe != AUG_RESIZE ||
           (in->out_h && (in->out_h != ds->height || in->out_w != ds->width));
}

int train_evaluate_logits(nn_model *m, h5ds *ds, const pipe_cfg *input, const char *split,
                          int batch, eval_stats *ev, int64_t *confusion, train_logits_fn fn,
                          void *ctx, pst_err *e)
{
    const h5ds_split *sp = h5ds_find_split(ds, split);
    if (!sp) return h5ds_no_split(ds, split, e);
    eval_acc a = {0};
    int rc = 0;
    int32_t *pred = pst_malloc(sizeof(int32_t) * (size_t)batch);
    if (eval_needs_pipeline(ds, input)) {
        /* the recipe's evaluation transform, in file order, on the
         * pipeline's prep threads (encoded data: the only way to read it) */
        if (!input || input->out_h < 1) {
            free(pred);
            return pst_fail(e, "%s: evaluating encoded images needs an image size", ds->path);
        }
        pipe_cfg pc = *input;
        pc.split = split;
        pc.batch = batch;
        pc.epochs = 1;
        pc.first_epoch = 0;
        pc.shuffle = false;
        pc.eval_transform = true;
        pc.limit = 0;
        pc.preload_bytes = 0; /* read once: nothing to gain from a copy */
        pipeline *p = NULL;
        const int64_t px = (int64_t)pc.out_h * pc.out_w * ds->channels;
        float *x = pst_aligned_alloc(sizeof(float) * (size_t)(batch * px));
        rc = pipe_new(&p, ds, &pc, e);
        pipe_batch b;
        int got;
        while (rc == 0 && (got = pipe_next(p, &b, e)) != 0) {
            if (got < 0 || eval_batch(m, ds, ds->channels, b.pixels, b.labels, b.count, px, x, pred,
                                      &a, confusion, fn, ctx, e) < 0)
                rc = -1;
        }
        pipe_free(p);
        free(x);
    } else {
        const int64_t n = sp->count, px = (int64_t)ds->height * ds->width * ds->channels;
        /* Read in whole chunks (the fast path of h5ds_read), evaluate in batches. */
        int64_t chunk = sp->chunk_images > 0 ? sp->chunk_images : batch;
        int64_t block = PST_MAX(chunk, (int64_t)batch);
        block = (block + chunk - 1) / chunk * chunk;
        uint8_t *img = pst_malloc((size_t)(block * px));
        int32_t *lab = pst_malloc(sizeof(int32_t) * (size_t)block);
        float *x = pst_aligned_alloc(sizeof(float) * (size_t)(batch * px));
        for (int64_t first = 0; first < n && rc == 0; first += block) {
            int64_t cnt = PST_MIN(block, n - first);
            if (h5ds_read(ds, split, first, cnt, img, lab, e) < 0) {
                rc = -1;
                break;
            }
            for (int64_t b = 0; b < cnt && rc == 0; b += batch) {
                int nb = (int)PST_MIN((int64_t)batch, cnt - b);
                rc = eval_batch(m, ds, ds->channels, img + b * px, lab + b, nb, px, x, pred, &a,
                                confusion, fn, ctx, e);
            }
        }
        free(img), free(lab), free(x);
    }
    free(pred);
    if (rc < 0) return rc;
    const int64_t n = a.n;
    ev->accuracy = n ? (double)a.correct / (double)n : 0;
    ev->top5_accuracy = n ? (double)a.correct5 / (double)n : 0;
    ev->loss = n ? a.loss_sum / (double)n : 0;
    ev->examples = n;
    return 0;
}

int train_eval_split(const train_cfg *cfg, const h5ds *ds, bool warn, const char **split,
                     pst_err *e)
{
    *split = NULL;
    if (cfg->eval_split) {
        if (!h5ds_find_split(ds, cfg->eval_split)) {
            h5ds_no_split(ds, cfg->eval_split, e);
            return pst_err_prefix(e, "--eval-split %s", cfg->eval_split);
        }
        *split = cfg->eval_split;
    } else if (h5ds_find_split(ds, "val")) {
        *split = "val";
    } else if (h5ds_find_split(ds, "test")) {
        *split = "test";
    } else if (warn && cfg->eval_every > 0) {
        pst_warn("--eval-every %d: %s has no val or test split to evaluate on; no evaluation "
                 "(--eval-split train evaluates on the training split)",
                 cfg->eval_every, ds->path);
    }
    return 0;
}

void train_set_eval(train_result *r, const char *split, const eval_stats *ev)
{
    r->has_eval = true;
    snprintf(r->eval_split, sizeof r->eval_split, "%s", split);
    r->eval_accuracy = ev->accuracy, r->eval_top5_accuracy = ev->top5_accuracy;
    r->eval_loss = ev->loss, r->eval_examples = ev->examples;
    if (!strcmp(split, "test")) {
        r->has_test = true;
        r->test_accuracy = ev->accuracy, r->test_top5_accuracy = ev->top5_accuracy;
        r->test_loss = ev->loss, r->test_examples = ev->examples;
    }
}

void train_result_free(train_result *r)
{
    if (!r) return;
    for (int i = 0; i < r->nepochs_stats; i++) free(r->epoch_stats[i].per_worker);
    free(r->epoch_stats);
    free(r->per_ps_bytes);
    free(r->fstats);
    free(r->wtiming);
    free(r->pstiming);
    memset(r, 0, sizeof *r);
}

int train_dump_params(const char *path, const float *p, size_t n, pst_err *e)
{
    /* through a temporary and a rename: a full disk leaves the previous
     * dump as it was, never truncated */
    char tmp[4200];
    int renamed;
    FILE *f = pst_out_fopen(path, "wb", tmp, sizeof tmp, &renamed);
    if (!f) return pst_fail(e, "%s: cannot write the parameter dump: %s", path, strerror(errno));
    errno = 0;
    bool bad = fwrite(p, sizeof(float), n, f) != n || fflush(f) != 0;
    int err = errno;
    if (!bad && renamed && fsync(fileno(f)) < 0) bad = true, err = errno;
    if (fclose(f) != 0 && !bad) bad = true, err = errno;
    if (!bad && renamed && rename(tmp, path) != 0) bad = true, err = errno;
    if (bad) {
        if (renamed) unlink(tmp);
        return pst_fail(e, "%s: write error on the parameter dump: %s%s", path,
                        err ? strerror(err) : "short write",
                        renamed ? " (any previous file is unchanged)" : "");
    }
    return 0;
}

/* Output paths are checked before any work, so that a run never trains for
 * hours to fail at its summary (the directory of --summary-json, a FIFO
 * given as --metrics). */
int train_check_outputs(const train_cfg *cfg, pst_err *e)
{
    const struct {
        const char *flag, *path;
        bool whole_file; /* replaced by a rename when done */
    } outs[] = {{"--summary-json", cfg->summary_path, true},
                {"--metrics", cfg->metrics_path, false},
                {"--dump-params", cfg->dump_params_path, true},
                {"--trace-examples", cfg->trace_path, false},
                {"--timeline", cfg->timeline_path, true}};
    for (size_t i = 0; i < PST_ARRAY_LEN(outs); i++)
        if (outs[i].path && pst_out_check(outs[i].path, outs[i].whole_file, e) < 0)
            return pst_err_prefix(e, "%s", outs[i].flag);
    if (cfg->tensorboard_dir && tb_check_dir(cfg->tensorboard_dir, e) < 0)
        return pst_err_prefix(e, "--tensorboard");
    return 0;
}
