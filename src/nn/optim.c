/*
 * optim.c - TensorFlow-compatible optimizers over a contiguous range of the
 * parameter slab, the learning-rate schedule (decay, warm-up) and the
 * exponential moving average of the variables.
 *
 * Shapes: n elements of param/grad; slots is S arrays of slot_stride floats
 * (S = opt_nslots), the caller passing the address of slot 0 of its first
 * element, so a sub-range [off, off+n) of a model is updated with
 * (param+off, grad+off, slots+off, stride = model size, n).
 *
 * Each kernel is one pass over restrict-qualified arrays with no branches so
 * that the compiler vectorises it (the project builds with -fno-math-errno,
 * without which GCC keeps a scalar sqrtf call path for errno).
 */
#include "pstrain/optim.h"

#include <assert.h>
#include <math.h>
#include <string.h>

static const char *const opt_names[] = {"sgd", "momentum", "rmsprop", "adam"};

opt_cfg opt_defaults(opt_kind kind)
{
    opt_cfg c = {
        .kind = kind,
        .momentum = 0.9f,
        .nesterov = false,
        .rms_decay = 0.9f,
        .rms_eps = 1.0f,
        .beta1 = 0.9f,
        .beta2 = 0.999f,
        .adam_eps = 1e-8f,
    };
    return c;
}

int opt_parse(const char *name, opt_kind *kind)
{
    for (size_t i = 0; i < sizeof opt_names / sizeof opt_names[0]; i++)
        if (name && strcmp(name, opt_names[i]) == 0) {
            *kind = (opt_kind)i;
            return 0;
        }
    return -1;
}

const char *opt_name(opt_kind kind)
{
    assert(kind >= OPT_SGD && kind <= OPT_ADAM);
    return opt_names[kind];
}

int opt_nslots(opt_kind kind)
{
    switch (kind) {
    case OPT_SGD:
        return 0;
    case OPT_MOMENTUM:
        return 1;
    case OPT_RMSPROP:
        return 2;
    case OPT_ADAM:
        return 2;
    }
    assert(!"unknown optimizer kind");
    return 0;
}

void opt_init_slots(const opt_cfg *c, float *slots, size_t slot_stride, size_t n)
{
    int ns = opt_nslots(c->kind);
    assert(ns <= 1 || slot_stride >= n);
    for (int s = 0; s < ns; s++) {
        float v = (c->kind == OPT_RMSPROP && s == 0) ? 1.0f : 0.0f;
        float *a = slots + (size_t)s * slot_stride;
        for (size_t j = 0; j < n; j++) a[j] = v;
    }
}

/* w -= lr*g */
static void apply_sgd(float lr, float *restrict w, const float *restrict g, size_t n)
{
    for (size_t j = 0; j < n; j++) w[j] -= lr * g[j];
}

/* a = m*a + g; w -= lr*a (TF ApplyMomentum) */
static void apply_momentum(float lr, float m, float *restrict w, const float *restrict g,
                           float *restrict a, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        float acc = m * a[j] + g[j];
        a[j] = acc;
        w[j] -= lr * acc;
    }
}

/* a = m*a + g; w -= lr*(g + m*a) (TF ApplyMomentum with use_nesterov) */
static void apply_nesterov(float lr, float m, float *restrict w, const float *restrict g,
                           float *restrict a, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        float acc = m * a[j] + g[j];
        a[j] = acc;
        w[j] -= lr * (g[j] + m * acc);
    }
}

/* ms += (g^2 - ms)*(1-d); mom = m*mom + lr*g/sqrt(ms+eps); w -= mom
 * (TF ApplyRMSProp) */
static void apply_rmsprop(float lr, float d, float m, float eps, float *restrict w,
                          const float *restrict g, float *restrict ms, float *restrict mom,
                          size_t n)
{
    const float one_d = 1.0f - d;
    for (size_t j = 0; j < n; j++) {
        float gj = g[j];
        float s = ms[j] + (gj * gj - ms[j]) * one_d;
        ms[j] = s;
        float v = m * mom[j] + lr * gj / sqrtf(s + eps);
        mom[j] = v;
        w[j] -= v;
    }
}

/* m += (g-m)*(1-b1); v += (g^2-v)*(1-b2); w -= lr_t*m/(sqrt(v)+eps)
 * (TF ApplyAdam, lr_t already bias-corrected) */
static void apply_adam(float lr_t, float b1, float b2, float eps, float *restrict w,
                       const float *restrict g, float *restrict m, float *restrict v, size_t n)
{
    const float one_b1 = 1.0f - b1, one_b2 = 1.0f - b2;
    for (size_t j = 0; j < n; j++) {
        float gj = g[j];
        float mj = m[j] + (gj - m[j]) * one_b1;
        float vj = v[j] + (gj * gj - v[j]) * one_b2;
        m[j] = mj;
        v[j] = vj;
        w[j] -= lr_t * mj / (sqrtf(vj) + eps);
    }
}

void opt_apply(const opt_cfg *c, float lr, int64_t t, float *param, const float *grad, float *slots,
               size_t slot_stride, size_t n)
{
    assert(opt_nslots(c->kind) <= 1 || slot_stride >= n);
    switch (c->kind) {
    case OPT_SGD:
        apply_sgd(lr, param, grad, n);
        break;
    case OPT_MOMENTUM:
        if (c->nesterov)
            apply_nesterov(lr, c->momentum, param, grad, slots, n);
        else
            apply_momentum(lr, c->momentum, param, grad, slots, n);
        break;
    case OPT_RMSPROP:
        apply_rmsprop(lr, c->rms_decay, c->momentum, c->rms_eps, param, grad, slots,
                      slots + slot_stride, n);
        break;
    case OPT_ADAM: {
        assert(t >= 1);
        /* TF computes beta^t with pow in the graph; double here so a long
         * run's bias correction is exact to float precision */
        double b1t = pow((double)c->beta1, (double)t), b2t = pow((double)c->beta2, (double)t);
        float lr_t = (float)((double)lr * sqrt(1.0 - b2t) / (1.0 - b1t));
        apply_adam(lr_t, c->beta1, c->beta2, c->adam_eps, param, grad, slots, slots + slot_stride,
                   n);
        break;
    }
    }
}

float lr_at(const lr_schedule *s, int64_t step)
{
    if (step < 0) step = 0;
    double lr = s->base;
    if (!(s->decay == 1.0f || s->decay == 0.0f || !(s->decay_epochs > 0) ||
          s->steps_per_epoch <= 0)) {
        /* tf.train.exponential_decay(staircase=True) with
         * decay_steps = steps_per_epoch * decay_epochs */
        double decay_steps = (double)s->steps_per_epoch * (double)s->decay_epochs;
        double k = floor((double)step / decay_steps);
        lr = (double)s->base * pow((double)s->decay, k);
    }
    if (s->warmup_epochs > 0 && s->steps_per_epoch > 0) {
        /* gradual warm-up from lr/10 (Goyal et al. 2017, section 2.2) */
        double n = (double)s->warmup_epochs * (double)s->steps_per_epoch;
        if ((double)step < n) lr *= 0.1 + 0.9 * ((double)step / n);
    }
    return (float)lr;
}

float lr_scale_linear(float lr, int workers, int batch)
{
    return (float)((double)lr * ((double)workers * (double)batch) / 256.0);
}

float ema_decay_at(float decay, int64_t t)
{
    /* TF: min(decay, (1.0 + num_updates) / (10.0 + num_updates)) with
     * num_updates cast to float32 */
    float n = (float)t;
    float d = (1.0f + n) / (10.0f + n);
    return d < decay ? d : decay;
}

void ema_apply(float decay_t, float *restrict avg, const float *restrict value, size_t n)
{
    const float one_d = 1.0f - decay_t;
    for (size_t j = 0; j < n; j++) avg[j] -= (avg[j] - value[j]) * one_d;
}
