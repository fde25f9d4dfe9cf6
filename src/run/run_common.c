/* run_common.c - what single-process and distributed training share
 * (pstrain/run_common.h). */
#include "pstrain/run_common.h"

#include <math.h>
#include <string.h>

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
    return 0;
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
    return m;
}
