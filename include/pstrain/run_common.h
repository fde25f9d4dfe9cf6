/*
 * pstrain/run_common.h - what single-process training
 * (src/train/train_single.c) and distributed training (src/cluster) share,
 * written once: the configuration checks every run makes, the checks a
 * checkpoint must pass to continue a run, the checkpoint attributes that
 * describe the run, and the final-loss window.
 */
#ifndef PSTRAIN_RUN_COMMON_H
#define PSTRAIN_RUN_COMMON_H

#include "pstrain/ckpt.h"
#include "pstrain/common.h"
#include "pstrain/train.h"

/* final_loss (train.h) is the mean training loss of the last this many
 * steps (sync: versions), so it never depends on the logging interval. */
#define FINAL_LOSS_STEPS 100

/* --batch, --lr, --epochs/--steps: 0, or -1 with a message. */
int train_check_cfg(const train_cfg *cfg, pst_err *e);

/* A checkpoint continues this run only with the same batch size (the data
 * cursor) and seed (the random streams): 0, or -1 with a message naming the
 * attribute. */
int train_check_resume(const char *path, const ckpt_meta *m, const train_cfg *cfg, pst_err *e);

/* The normalisation a run or an evaluation uses (*out is never UNSET):
 * `given` (--normalize) when set; else the checkpoint's (m: the checkpoint
 * resumed or evaluated at `path`, or NULL), "dataset" for one that records
 * none; else the data set's. A `given` that differs from the checkpoint's
 * is refused when `must_match` (a resumed run continues on the inputs it
 * was trained on). 0, or -1 with a message naming the attribute. */
int train_resolve_norm(const pipe_norm *given, const ckpt_meta *m, const char *path,
                       bool must_match, pipe_norm *out, pst_err *e);

/* The learning rate a run starts from: --lr, times (workers x batch)/256
 * under --lr-scale linear (one process: workers = 1). */
float train_base_lr(const train_cfg *cfg, int workers);
/* The schedule of a run whose epoch has `steps_per_epoch` steps. */
lr_schedule train_schedule(const train_cfg *cfg, int workers, int64_t steps_per_epoch);
/* The start-up line of the recipe flags (effective lr, warm-up, moving
 * averages), through metrics_note; nothing when none is given. */
void train_recipe_note(metrics *mx, const train_cfg *cfg, int workers, int64_t steps_per_epoch);

/* --augment's spelling of a pipeline's transform: "inception", "resnet",
 * "crop,flip", "crop", "flip" or "none" (what checkpoints record). */
const char *train_augment_name(const pipe_cfg *p);
/* Parses --augment LIST (inception | resnet | a list of crop, flip | none)
 * into p->recipe, aug_crop, aug_flip. 0, or -1 when malformed. */
int train_parse_augment(const char *s, pipe_cfg *p);
/* Parses --image-size HxW ("299x299"; "299" is square), sides 1..4096.
 * 0, or -1 when malformed. */
int train_parse_image_size(const char *s, int *h, int *w);
/* The size the model sees, the pipeline's output (sets cfg->pipe.out_h,
 * out_w): --image-size; else the stored size of a pixels data set; else
 * (encoded images vary in size) the model's natural size, 299x299 for
 * inception-v3 and 224x224 for resnet-50; other models on encoded data need
 * --image-size (an error naming the model). */
int train_resolve_input(train_cfg *cfg, const h5ds *ds, pst_err *e);
/* The natural input size of a model (0 when it has none). */
void train_natural_size(const char *model, int *h, int *w);

/* The attributes that describe the run (model, shape, seed, mode, batch,
 * optimizer, schedule, regularisation); the caller fills the step, data
 * cursor, examples, seconds and the worker and PS counts. */
ckpt_meta train_ckpt_meta(const train_cfg *cfg, const char *model_text, int height, int width,
                          int channels, int num_classes, const lr_schedule *sched);

#endif
