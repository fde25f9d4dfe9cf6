/* run_common.c - what single-process and distributed training share
 * (pstrain/run_common.h). */
#include "pstrain/run_common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/augment.h"

#include "pstrain/metrics.h"

int train_check_cfg(const train_cfg *cfg, pst_err *e)
{
    if (cfg->batch < 1) return pst_fail(e, "--batch: expected a positive integer");
    if (!(cfg->lr >= 0)) return pst_fail(e, "--lr: expected a non-negative number");
    if (cfg->epochs < 0 || cfg->steps < 0)
        return pst_fail(e, "--epochs/--steps: expected non-negative values");
    if (cfg->epochs == 0 && cfg->steps == 0)
        return pst_fail(e, "nothing to do: give --epochs E or --steps S");
    if (!(cfg->ema_decay >= 0 && cfg->ema_decay < 1))
        return pst_fail(e, "--moving-average-decay: expected a decay in (0, 1)");
    if (!(cfg->warmup_epochs >= 0 && cfg->warmup_epochs <= 1e9))
        return pst_fail(e, "--warmup-epochs: expected a number of epochs >= 0");
    if (cfg->max_staleness >= 0 && cfg->mode != TRAIN_ASYNC)
        return pst_fail(e, "--max-staleness bounds async training: give --mode async");
    return 0;
}

int train_check_resume(const char *path, const ckpt_meta *m, const train_cfg *cfg, pst_err *e)
{
    if (m->batch != cfg->batch)
        return pst_fail(e,
                        "%s: attribute batch is %d but this run uses --batch %d: the data "
                        "cursor would not match",
                        path, m->batch, cfg->batch);
    if (m->seed != cfg->seed)
        return pst_fail(e, "%s: attribute seed is %llu but this run uses --seed %llu", path,
                        (unsigned long long)m->seed, (unsigned long long)cfg->seed);
    /* the examples a resumed run sees must be those it would have seen */
    const char *aug = train_augment_name(&cfg->pipe);
    if (m->augment[0] && strcmp(m->augment, aug) != 0)
        return pst_fail(e, "%s: attribute augment is '%s' but this run uses --augment %s", path,
                        m->augment, aug);
    return 0;
}

int train_resolve_norm(const pipe_norm *given, const ckpt_meta *m, const char *path,
                       bool must_match, pipe_norm *out, pst_err *e)
{
    pipe_norm ck = {.kind = PIPE_NORM_DATASET};
    if (m && m->normalize[0] && pipe_norm_parse(m->normalize, &ck) < 0)
        return pst_fail(e,
                        "%s: attribute normalize is '%s', expected dataset, imagenet or "
                        "M1,M2,M3/S1,S2,S3",
                        path, m->normalize);
    if (given->kind == PIPE_NORM_UNSET) {
        *out = m ? ck : (pipe_norm){.kind = PIPE_NORM_DATASET};
        return 0;
    }
    char a[PIPE_NORM_NAME_LEN], b[PIPE_NORM_NAME_LEN];
    if (m && must_match && strcmp(pipe_norm_name(given, a), pipe_norm_name(&ck, b)) != 0)
        return pst_fail(e,
                        "%s: attribute normalize is '%s' but this run uses --normalize %s: a "
                        "resumed run continues on the inputs it was trained on: resume without "
                        "--normalize or with --normalize %s",
                        path, b, a, b);
    *out = *given;
    return 0;
}

const char *train_augment_name(const pipe_cfg *p)
{
    if (p->recipe == AUG_INCEPTION) return "inception";
    if (p->recipe == AUG_RESNET) return "resnet";
    if (p->aug_crop && p->aug_flip) return "crop,flip";
    if (p->aug_crop) return "crop";
    if (p->aug_flip) return "flip";
    return "none";
}

int train_parse_augment(const char *s, pipe_cfg *p)
{
    p->recipe = AUG_RESIZE;
    p->aug_crop = p->aug_flip = false;
    if (!strcmp(s, "inception")) {
        p->recipe = AUG_INCEPTION;
        return 0;
    }
    if (!strcmp(s, "resnet")) {
        p->recipe = AUG_RESNET;
        return 0;
    }
    char buf[128];
    if (!*s || strlen(s) >= sizeof buf) return -1;
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "crop"))
            p->aug_crop = true;
        else if (!strcmp(t, "flip"))
            p->aug_flip = true;
        else if (strcmp(t, "none") != 0)
            return -1;
    }
    return 0;
}

int train_parse_image_size(const char *s, int *h, int *w)
{
    char *end;
    long a = strtol(s, &end, 10), b = a;
    if (end == s || a < 1 || a > 4096) return -1;
    if (*end == 'x' || *end == 'X') {
        const char *t = end + 1;
        b = strtol(t, &end, 10);
        if (end == t || b < 1 || b > 4096) return -1;
    }
    if (*end) return -1;
    *h = (int)a;
    *w = (int)b;
    return 0;
}

void train_natural_size(const char *model, int *h, int *w)
{
    static const struct {
        const char *name;
        int side;
    } sizes[] = {{"inception-v3", 299}, {"resnet-50", 224}};
    *h = *w = 0;
    for (size_t i = 0; i < PST_ARRAY_LEN(sizes); i++)
        if (model && !strcmp(model, sizes[i].name)) *h = *w = sizes[i].side;
}

int train_resolve_input(train_cfg *cfg, const h5ds *ds, pst_err *e)
{
    pipe_cfg *p = &cfg->pipe;
    if (p->out_h > 0) return 0;
    if (ds->storage != H5DS_STORE_ENCODED) {
        p->out_h = ds->height;
        p->out_w = ds->width;
        return 0;
    }
    train_natural_size(cfg->model, &p->out_h, &p->out_w);
    if (p->out_h > 0) return 0;
    return pst_fail(e,
                    "%s: encoded images vary in size and --model %s has no natural input size: "
                    "give --image-size HxW (e.g. --image-size 28x28)",
                    ds->path, cfg->model);
}

float train_base_lr(const train_cfg *cfg, int workers)
{
    return cfg->lr_scale_linear ? lr_scale_linear(cfg->lr, workers, cfg->batch) : cfg->lr;
}

lr_schedule train_schedule(const train_cfg *cfg, int workers, int64_t steps_per_epoch)
{
    return (lr_schedule){.base = train_base_lr(cfg, workers),
                         .decay = cfg->lr_decay,
                         .decay_epochs = cfg->lr_decay_epochs,
                         .steps_per_epoch = steps_per_epoch,
                         .warmup_epochs = cfg->warmup_epochs};
}

void train_recipe_note(metrics *mx, const train_cfg *cfg, int workers, int64_t steps_per_epoch)
{
    if (!cfg->lr_scale_linear && !(cfg->warmup_epochs > 0) && !(cfg->ema_decay > 0)) return;
    char buf[512];
    size_t k = 0;
    const float lr = train_base_lr(cfg, workers);
    if (cfg->lr_scale_linear)
        k += (size_t)snprintf(buf + k, sizeof buf - k,
                              "learning rate %g (--lr %g x %d workers x batch %d / 256)",
                              (double)lr, (double)cfg->lr, workers, cfg->batch);
    else
        k += (size_t)snprintf(buf + k, sizeof buf - k, "learning rate %g", (double)lr);
    if (cfg->warmup_epochs > 0 && k < sizeof buf)
        k += (size_t)snprintf(buf + k, sizeof buf - k,
                              "; warm-up from %g over %g epochs (%.0f steps)", (double)lr / 10,
                              (double)cfg->warmup_epochs,
                              ceil((double)cfg->warmup_epochs * (double)steps_per_epoch));
    if (cfg->ema_decay > 0 && k < sizeof buf)
        snprintf(buf + k, sizeof buf - k, "; moving averages, decay %g", (double)cfg->ema_decay);
    metrics_note(mx, "%s", buf);
}

ckpt_meta train_ckpt_meta(const train_cfg *cfg, const char *model_text, int height, int width,
                          int channels, int num_classes, const lr_schedule *sched)
{
    ckpt_meta m;
    memset(&m, 0, sizeof m);
    m.model_name = cfg->model;
    m.model_text = model_text;
    m.height = height, m.width = width, m.channels = channels;
    m.num_classes = num_classes;
    m.seed = cfg->seed;
    m.mode = cfg->mode == TRAIN_ASYNC ? "async" : "sync";
    m.batch = cfg->batch;
    m.opt = cfg->opt;
    m.lr = *sched;
    m.weight_decay = cfg->weight_decay;
    m.label_smoothing = cfg->label_smoothing;
    m.ema_decay = cfg->ema_decay;
    snprintf(m.augment, sizeof m.augment, "%s", train_augment_name(&cfg->pipe));
    pipe_norm_name(&cfg->pipe.norm, m.normalize);
    return m;
}
