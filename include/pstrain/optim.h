/*
 * pstrain/optim.h - optimizers and learning-rate schedules.
 *
 * An optimizer updates any contiguous range of a parameter slab from the
 * matching range of a gradient slab, with its per-element state ("slots")
 * in a separate array: slot s of element j is slots[s * slot_stride + j].
 * Whole model: slot_stride = nn_model_size(); a parameter server's shard
 * uses its own slot array with slot_stride = shard size. So the same code
 * serves single-process training and every PS.
 *
 * Semantics follow TensorFlow's (tf.train.*Optimizer), the reference for the
 * Inception example:
 *   sgd:      w -= lr*g
 *   momentum: a = m*a + g; w -= lr*a            (nesterov: w -= lr*(g + m*a))
 *   rmsprop:  ms = d*ms + (1-d)*g^2; mom = m*mom + lr*g/sqrt(ms + eps); w -= mom
 *             (ms starts at 1.0 as in TF; slots: ms, mom)
 *   adam:     TF's form with bias-corrected lr_t = lr*sqrt(1-b2^t)/(1-b1^t);
 *             m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; w -= lr_t*m/(sqrt(v)+eps)
 */
#ifndef PSTRAIN_OPTIM_H
#define PSTRAIN_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum opt_kind { OPT_SGD, OPT_MOMENTUM, OPT_RMSPROP, OPT_ADAM } opt_kind;

typedef struct opt_cfg {
    opt_kind kind;
    float momentum; /* momentum and rmsprop; default 0.9 */
    bool nesterov;
    float rms_decay, rms_eps;     /* default 0.9, 1.0 (Inception example) */
    float beta1, beta2, adam_eps; /* default 0.9, 0.999, 1e-8 */
} opt_cfg;

/* Defaults for `kind` as documented above. */
opt_cfg opt_defaults(opt_kind kind);
/* "sgd", "momentum", "rmsprop", "adam" -> kind; -1 if unknown. */
int opt_parse(const char *name, opt_kind *kind);
const char *opt_name(opt_kind kind);
/* Number of slots per parameter: 0, 1, 2, 2. */
int opt_nslots(opt_kind kind);
/* Initial values of the slots (rmsprop's ms starts at 1.0, others 0). */
void opt_init_slots(const opt_cfg *c, float *slots, size_t slot_stride, size_t n);

/* One update of n elements. t = 1-based count of updates applied so far
 * including this one (Adam's bias correction). */
void opt_apply(const opt_cfg *c, float lr, int64_t t, float *param, const float *grad, float *slots,
               size_t slot_stride, size_t n);

/* Learning rate schedule: constant, or exponential staircase decay
 * lr = base * decay^floor(epoch / decay_epochs), with
 * epoch = step / steps_per_epoch (the Inception example: 0.94 every 2);
 * then, with warmup_epochs E > 0, Goyal et al. 2017's gradual warm-up over
 * the first N = E * steps_per_epoch steps (a real number of steps):
 *   lr(step) = sched(step) * (0.1 + 0.9 * step / N)   for step < N
 *   lr(step) = sched(step)                             for step >= N
 * so step 0 runs at a tenth of the scheduled lr, which rises linearly to
 * the full lr at step N; the decay keeps counting epochs from step 0.
 * `step` is the 0-based index of the update (the first update is step 0).
 * Computed in double, rounded to float once: bitwise the same on resume. */
typedef struct lr_schedule {
    float base;
    float decay;        /* 1 or 0 = constant */
    float decay_epochs; /* > 0 when decaying */
    int64_t steps_per_epoch;
    float warmup_epochs; /* 0 = no warm-up */
} lr_schedule;

float lr_at(const lr_schedule *s, int64_t step);

/* --lr-scale linear (Goyal et al. 2017): lr * (workers * batch) / 256. */
float lr_scale_linear(float lr, int workers, int batch);

/* Exponential moving average of the variables, as TensorFlow's
 * ExponentialMovingAverage(decay, num_updates=global_step) in the Inception
 * example: after the update that makes the global step t (t >= 1),
 *   d = min(decay, (1 + t) / (10 + t))          (float, as TF computes it)
 *   avg -= (avg - value) * (1 - d)              (TF's assign_moving_average)
 * The averages start as the variables' initial values. */
float ema_decay_at(float decay, int64_t t);
void ema_apply(float decay_t, float *avg, const float *value, size_t n);

#endif
