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
 * epoch = step / steps_per_epoch (the Inception example: 0.94 every 2). */
typedef struct lr_schedule {
    float base;
    float decay;        /* 1 or 0 = constant */
    float decay_epochs; /* > 0 when decaying */
    int64_t steps_per_epoch;
} lr_schedule;

float lr_at(const lr_schedule *s, int64_t step);

#endif
