/* run_common.c - what single-process and distributed training share
 * (pstrain/run_common.h). */
#include "pstrain/run_common.h"

#include <string.h>

int train_check_cfg(const train_cfg *cfg, pst_err *e)
{
    if (cfg->batch < 1) return pst_fail(e, "--batch: expected a positive integer");
    if (!(cfg->lr >= 0)) return pst_fail(e, "--lr: expected a non-negative number");
    if (cfg->epochs < 0 || cfg->steps < 0)
        return pst_fail(e, "--epochs/--steps: expected non-negative values");
    if (cfg->epochs == 0 && cfg->steps == 0)
        return pst_fail(e, "nothing to do: give --epochs E or --steps S");
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
    return m;
}
