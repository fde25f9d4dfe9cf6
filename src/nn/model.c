/*
 * model.c - the model graph: builders, one slab per parameters and
 * gradients, seeded initialization, train/eval steps, description.
 *
 * Layers run in list order forward and in reverse backward. A layer reads
 * its producers' outputs (or the caller's batch) and writes its own y; in
 * backward it writes (first consumer) or adds (later consumers) into its
 * producers' dy, so a tensor that feeds several towers sums their gradients
 * without an extra pass.
 */
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph.h"

#define BN_MOMENTUM 0.99f
#define BN_EPS 1e-3f
#define ARENA_ALIGN 16 /* floats: 64-byte aligned buffers */
#define ARENA_SLACK 16 /* floats after each buffer */

/* ---- accessors used by the layer ops ------------------------------------------ */

static float *P(nn_model *m, const nn_layer *l, int k)
{
    return m->params + m->vars[l->var0 + k].offset;
}
static float *G(nn_model *m, const nn_layer *l, int k)
{
    return m->grads + m->vars[l->var0 + k].offset;
}
static const float *in_y(nn_model *m, const nn_layer *l, int j)
{
    return l->in[j] == NN_INPUT ? m->x : m->layers[l->in[j]].y;
}
/* Producer j's gradient buffer (NULL for the model input) and whether this
 * consumer adds to it; marks it written. */
static float *in_dy(nn_model *m, const nn_layer *l, int j, bool *acc)
{
    *acc = false;
    if (l->in[j] == NN_INPUT) return NULL;
    nn_layer *p = &m->layers[l->in[j]];
    *acc = p->dy_written;
    p->dy_written = true;
    return p->dy;
}
static void in_shape(const nn_model *m, int in, int *h, int *w, int *c)
{
    if (in == NN_INPUT) {
        *h = m->cfg.height, *w = m->cfg.width, *c = m->cfg.channels;
    } else {
        const nn_layer *p = &m->layers[in];
        *h = p->h, *w = p->w, *c = p->c;
    }
}

/* ---- layer ops --------------------------------------------------------------- */

static void dense_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    int I = m->vars[l->var0].shape[0];
    nn_dense_forward(l->y, in_y(m, l, 0), P(m, l, 0), P(m, l, 1), n, I, l->c, l->relu);
}
static void dense_bwd(nn_model *m, nn_layer *l, int n)
{
    int I = m->vars[l->var0].shape[0];
    bool acc;
    float *din = in_dy(m, l, 0, &acc);
    nn_dense_backward(din, acc, G(m, l, 0), G(m, l, 1), l->dy, l->y, in_y(m, l, 0), P(m, l, 0), n,
                      I, l->c, l->relu);
}

static void conv_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    nn_conv_dims d = l->u.conv;
    d.N = n;
    nn_conv2d_forward(l->y, in_y(m, l, 0), P(m, l, 0), l->nvar > 1 ? P(m, l, 1) : NULL, &d, l->relu,
                      m->scratch);
}
static void conv_bwd(nn_model *m, nn_layer *l, int n)
{
    nn_conv_dims d = l->u.conv;
    d.N = n;
    bool acc;
    float *din = in_dy(m, l, 0, &acc);
    nn_conv2d_backward(din, acc, G(m, l, 0), l->nvar > 1 ? G(m, l, 1) : NULL, l->dy, l->y,
                       in_y(m, l, 0), P(m, l, 0), &d, l->relu, m->scratch);
}

static void bn_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    int M = n * l->h * l->w;
    if (train)
        nn_bn_forward_train(l->y, l->u.bn.mean, l->u.bn.invstd, G(m, l, 2), G(m, l, 3),
                            in_y(m, l, 0), P(m, l, 0), P(m, l, 1), P(m, l, 2), P(m, l, 3), M, l->c,
                            BN_MOMENTUM, BN_EPS, l->relu);
    else
        nn_bn_forward_infer(l->y, in_y(m, l, 0), P(m, l, 0), P(m, l, 1), P(m, l, 2), P(m, l, 3), M,
                            l->c, BN_EPS, l->relu);
}
static void bn_bwd(nn_model *m, nn_layer *l, int n)
{
    bool acc;
    float *din = in_dy(m, l, 0, &acc);
    nn_bn_backward(din, acc, G(m, l, 0), G(m, l, 1), l->dy, l->y, in_y(m, l, 0), P(m, l, 0),
                   l->u.bn.mean, l->u.bn.invstd, n * l->h * l->w, l->c, l->relu);
}

static void maxpool_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    nn_pool_dims d = l->u.pool.d;
    d.N = n;
    nn_maxpool_forward(l->y, l->u.pool.argmax, in_y(m, l, 0), &d);
}
static void maxpool_bwd(nn_model *m, nn_layer *l, int n)
{
    nn_pool_dims d = l->u.pool.d;
    d.N = n;
    bool acc;
    float *din = in_dy(m, l, 0, &acc);
    if (din) nn_maxpool_backward(din, acc, l->dy, l->u.pool.argmax, &d);
}

static void avgpool_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    nn_pool_dims d = l->u.pool.d;
    d.N = n;
    nn_avgpool_forward(l->y, in_y(m, l, 0), &d);
}
static void avgpool_bwd(nn_model *m, nn_layer *l, int n)
{
    nn_pool_dims d = l->u.pool.d;
    d.N = n;
    bool acc;
    float *din = in_dy(m, l, 0, &acc);
    if (din) nn_avgpool_backward(din, acc, l->dy, &d);
}

static void dropout_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    size_t cnt = (size_t)n * l->h * l->w * l->c;
    if (!train) {
        memcpy(l->y, in_y(m, l, 0), sizeof(float) * cnt);
        return;
    }
    /* the mask depends on (seed, step, layer) only */
    uint64_t seed = nn_seed_mix(m->cfg.seed, (uint64_t)m->step, (uint64_t)(l - m->layers));
    nn_dropout_mask(l->u.drop.mask, cnt, l->u.drop.rate, seed);
    nn_dropout_forward(l->y, in_y(m, l, 0), l->u.drop.mask, cnt);
}
static void dropout_bwd(nn_model *m, nn_layer *l, int n)
{
    bool acc;
    float *din = in_dy(m, l, 0, &acc);
    if (din) nn_dropout_backward(din, acc, l->dy, l->u.drop.mask, (size_t)n * l->h * l->w * l->c);
}

static void concat_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    const float *ins[NN_MAX_IN];
    int cs[NN_MAX_IN];
    for (int j = 0; j < l->nin; j++) {
        int h, w;
        ins[j] = in_y(m, l, j);
        in_shape(m, l->in[j], &h, &w, &cs[j]);
    }
    nn_concat_forward(l->y, ins, cs, l->nin, n * l->h * l->w);
}
static void concat_bwd(nn_model *m, nn_layer *l, int n)
{
    float *dins[NN_MAX_IN];
    bool acc[NN_MAX_IN];
    int cs[NN_MAX_IN];
    for (int j = 0; j < l->nin; j++) {
        int h, w;
        dins[j] = in_dy(m, l, j, &acc[j]);
        in_shape(m, l->in[j], &h, &w, &cs[j]);
    }
    nn_concat_backward(dins, acc, l->dy, cs, l->nin, n * l->h * l->w);
}

static const nn_layer_ops dense_ops = {"dense", dense_fwd, dense_bwd};
static const nn_layer_ops conv_ops = {"conv2d", conv_fwd, conv_bwd};
static const nn_layer_ops bn_ops = {"batchnorm", bn_fwd, bn_bwd};
static const nn_layer_ops maxpool_ops = {"maxpool", maxpool_fwd, maxpool_bwd};
static const nn_layer_ops avgpool_ops = {"avgpool", avgpool_fwd, avgpool_bwd};
static const nn_layer_ops dropout_ops = {"dropout", dropout_fwd, dropout_bwd};
static const nn_layer_ops concat_ops = {"concat", concat_fwd, concat_bwd};

/* ---- builders --------------------------------------------------------------------- */

static int fail(nn_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(nn_model *m, const char *fmt, ...)
{
    char msg[PST_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!m->failed) pst_fail(m->err, "%s", msg);
    m->failed = true;
    return NN_FAILED;
}

static nn_layer *new_layer(nn_model *m, const nn_layer_ops *ops, const char *name, int in)
{
    if (m->nlayers == m->cap_layers) {
        m->cap_layers = m->cap_layers ? 2 * m->cap_layers : 16;
        m->layers = pst_realloc(m->layers, sizeof(nn_layer) * m->cap_layers);
    }
    nn_layer *l = &m->layers[m->nlayers++];
    memset(l, 0, sizeof *l);
    l->ops = ops;
    snprintf(l->name, sizeof l->name, "%s", name);
    l->in[0] = in;
    l->nin = 1;
    l->var0 = m->nvars;
    return l;
}

static void add_var(nn_model *m, nn_layer *l, const char *suffix, int ndim, const int *shape,
                    bool trainable, nn_init init, int fan_in, int fan_out, bool decay)
{
    if (m->nvars == m->cap_vars) {
        m->cap_vars = m->cap_vars ? 2 * m->cap_vars : 32;
        m->vars = pst_realloc(m->vars, sizeof(nn_var) * m->cap_vars);
        m->info = pst_realloc(m->info, sizeof(nn_var_info) * m->cap_vars);
    }
    nn_var *v = &m->vars[m->nvars];
    memset(v, 0, sizeof *v);
    snprintf(v->name, sizeof v->name, "%s/%s", l->name, suffix);
    v->ndim = ndim;
    v->size = 1;
    for (int i = 0; i < ndim; i++) v->shape[i] = shape[i], v->size *= (size_t)shape[i];
    v->offset = m->size;
    v->trainable = trainable;
    m->size += v->size;
    m->info[m->nvars] = (nn_var_info){init, fan_in, fan_out, decay};
    m->nvars++;
    l->nvar++;
}

static const char *in_name(const nn_model *m, int in)
{
    return in == NN_INPUT ? "input" : m->layers[in].name;
}

int nn_add_conv(nn_model *m, const char *name, int in, int K, int KH, int KW, int stride, int pad,
                bool bias, bool relu, nn_init init)
{
    if (m->failed || in == NN_FAILED) return NN_FAILED;
    nn_conv_dims d = {0};
    in_shape(m, in, &d.H, &d.W, &d.C);
    d.KH = KH, d.KW = KW, d.SH = d.SW = stride, d.PH = d.PW = pad, d.K = K;
    nn_conv_dims_finish(&d);
    if (d.OH <= 0 || d.OW <= 0)
        return fail(m,
                    "model %s does not fit a %dx%dx%d image: layer %s (%dx%d kernel, stride %d, "
                    "padding %d) gets a %dx%d input from %s",
                    m->name, m->cfg.height, m->cfg.width, m->cfg.channels, name, KH, KW, stride,
                    pad, d.H, d.W, in_name(m, in));
    nn_layer *l = new_layer(m, &conv_ops, name, in);
    l->u.conv = d;
    l->h = d.OH, l->w = d.OW, l->c = K, l->relu = relu;
    int ks[4] = {KH, KW, d.C, K};
    add_var(m, l, "kernel", 4, ks, true, init, KH * KW * d.C, KH * KW * K, true);
    if (bias) add_var(m, l, "bias", 1, &K, true, NN_INIT_ZERO, 0, 0, false);
    return m->nlayers - 1;
}

int nn_add_bn(nn_model *m, const char *name, int in, bool relu)
{
    if (m->failed || in == NN_FAILED) return NN_FAILED;
    nn_layer *l = new_layer(m, &bn_ops, name, in);
    in_shape(m, in, &l->h, &l->w, &l->c);
    l->relu = relu;
    add_var(m, l, "gamma", 1, &l->c, true, NN_INIT_ONE, 0, 0, false);
    add_var(m, l, "beta", 1, &l->c, true, NN_INIT_ZERO, 0, 0, false);
    add_var(m, l, "moving_mean", 1, &l->c, false, NN_INIT_ZERO, 0, 0, false);
    add_var(m, l, "moving_variance", 1, &l->c, false, NN_INIT_ONE, 0, 0, false);
    return m->nlayers - 1;
}

int nn_add_conv_bn(nn_model *m, const char *name, int in, int K, int KH, int KW, int stride,
                   int pad)
{
    int c = nn_add_conv(m, name, in, K, KH, KW, stride, pad, false, false, NN_INIT_HE);
    char bn[NN_LAYER_NAME_LEN];
    snprintf(bn, sizeof bn, "%s/bn", name);
    return nn_add_bn(m, bn, c, true);
}

int nn_add_pool(nn_model *m, const char *name, int in, bool max, int KH, int KW, int stride,
                int pad)
{
    if (m->failed || in == NN_FAILED) return NN_FAILED;
    nn_pool_dims d = {0};
    in_shape(m, in, &d.H, &d.W, &d.C);
    if (KH == 0 && KW == 0) KH = d.H, KW = d.W, stride = 1, pad = 0; /* global */
    d.KH = KH, d.KW = KW, d.SH = d.SW = stride, d.PH = d.PW = pad;
    nn_pool_dims_finish(&d);
    if (d.OH <= 0 || d.OW <= 0)
        return fail(m,
                    "model %s does not fit a %dx%dx%d image: layer %s (%dx%d pool, stride %d, "
                    "padding %d) gets a %dx%d input from %s",
                    m->name, m->cfg.height, m->cfg.width, m->cfg.channels, name, KH, KW, stride,
                    pad, d.H, d.W, in_name(m, in));
    assert(pad < KH && pad < KW);
    nn_layer *l = new_layer(m, max ? &maxpool_ops : &avgpool_ops, name, in);
    l->u.pool.d = d;
    l->h = d.OH, l->w = d.OW, l->c = d.C;
    return m->nlayers - 1;
}

int nn_add_dense(nn_model *m, const char *name, int in, int O, bool relu)
{
    if (m->failed || in == NN_FAILED) return NN_FAILED;
    int h, w, c;
    in_shape(m, in, &h, &w, &c);
    if ((int64_t)h * w * c > INT_MAX) /* the kernels index with int */
        return fail(m,
                    "model %s does not fit a %dx%dx%d image: layer %s would have %lld inputs, "
                    "expected at most %d",
                    m->name, m->cfg.height, m->cfg.width, m->cfg.channels, name,
                    (long long)h * w * c, INT_MAX);
    nn_layer *l = new_layer(m, &dense_ops, name, in);
    l->h = l->w = 1, l->c = O, l->relu = relu;
    int I = h * w * c, ks[2] = {I, O};
    add_var(m, l, "kernel", 2, ks, true, relu ? NN_INIT_HE : NN_INIT_GLOROT, I, O, true);
    add_var(m, l, "bias", 1, &O, true, NN_INIT_ZERO, 0, 0, false);
    return m->nlayers - 1;
}

int nn_add_dropout(nn_model *m, const char *name, int in, float rate)
{
    if (m->failed || in == NN_FAILED) return NN_FAILED;
    assert(rate >= 0.0f && rate < 1.0f);
    nn_layer *l = new_layer(m, &dropout_ops, name, in);
    in_shape(m, in, &l->h, &l->w, &l->c);
    l->u.drop.rate = rate;
    return m->nlayers - 1;
}

int nn_add_concat(nn_model *m, const char *name, const int *ins, int nin)
{
    if (m->failed) return NN_FAILED;
    assert(nin >= 1 && nin <= NN_MAX_IN);
    int h0, w0, ctot = 0;
    for (int j = 0; j < nin; j++) {
        if (ins[j] == NN_FAILED) return NN_FAILED;
        int h, w, c;
        in_shape(m, ins[j], &h, &w, &c);
        if (j == 0) h0 = h, w0 = w;
        if (h != h0 || w != w0)
            return fail(m, "model %s: concat %s joins %dx%d and %dx%d outputs", m->name, name, h0,
                        w0, h, w);
        ctot += c;
    }
    nn_layer *l = new_layer(m, &concat_ops, name, ins[0]);
    for (int j = 0; j < nin; j++) l->in[j] = ins[j];
    l->nin = nin;
    l->h = h0, l->w = w0, l->c = ctot;
    return m->nlayers - 1;
}

/* ---- construction ------------------------------------------------------------ */

static void init_vars(nn_model *m)
{
    nn_rng r;
    nn_rng_seed(&r, nn_seed_mix(m->cfg.seed, 0x696e6974 /* "init" */, 0));
    for (int i = 0; i < m->nvars; i++) {
        const nn_var *v = &m->vars[i];
        const nn_var_info *in = &m->info[i];
        float *p = m->params + v->offset;
        switch (in->init) {
        case NN_INIT_ZERO:
            memset(p, 0, sizeof(float) * v->size);
            break;
        case NN_INIT_ONE:
            for (size_t j = 0; j < v->size; j++) p[j] = 1.0f;
            break;
        case NN_INIT_HE: {
            /* truncated normal (|z| <= 2) scaled to variance 2/fan_in, as TF's
             * VarianceScaling(2.0, fan_in, truncated_normal) */
            double sd = sqrt(2.0 / in->fan_in) / 0.87962566103423978;
            for (size_t j = 0; j < v->size; j++) {
                double z;
                do z = nn_rng_normal(&r);
                while (fabs(z) > 2.0);
                p[j] = (float)(z * sd);
            }
            break;
        }
        case NN_INIT_GLOROT: {
            float lim = (float)sqrt(6.0 / (in->fan_in + in->fan_out));
            for (size_t j = 0; j < v->size; j++) p[j] = (2.0f * nn_rng_uniform(&r) - 1.0f) * lim;
            break;
        }
        }
    }
}

static size_t round_up(size_t n)
{
    return (n + ARENA_SLACK + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
}

/* Lays out activations, gradients, masks and indices in one arena. */
static void alloc_arena(nn_model *m)
{
    const size_t B = (size_t)m->cfg.max_batch;
    size_t total = 0, scratch = 0;
    for (int pass = 0; pass < 2; pass++) {
        size_t off = 0;
        for (int i = 0; i < m->nlayers; i++) {
            nn_layer *l = &m->layers[i];
            size_t act = round_up(B * l->h * l->w * l->c);
            if (pass) l->y = m->arena + off, l->dy = m->arena + off + act;
            off += 2 * act;
            if (l->ops == &bn_ops) {
                if (pass) l->u.bn.mean = m->arena + off, l->u.bn.invstd = m->arena + off + l->c;
                off += round_up(2 * (size_t)l->c);
            } else if (l->ops == &maxpool_ops) {
                if (pass) l->u.pool.argmax = (int32_t *)(void *)(m->arena + off);
                off += act; /* int32 and float have the same size */
            } else if (l->ops == &dropout_ops) {
                if (pass) l->u.drop.mask = m->arena + off;
                off += act;
            } else if (l->ops == &conv_ops && !pass) {
                nn_conv_dims d = l->u.conv;
                d.N = (int)B;
                size_t s = nn_conv_scratch(&d);
                if (s > scratch) scratch = s;
            }
        }
        if (!pass) {
            total = off;
            m->arena = pst_aligned_alloc(sizeof(float) * (total + scratch));
            memset(m->arena, 0, sizeof(float) * (total + scratch));
            m->scratch = m->arena + total;
        }
    }
}

int nn_model_new(nn_model **out, const nn_model_cfg *cfg, pst_err *e)
{
    *out = NULL;
    const char *name = cfg->name ? cfg->name : "(null)";
    if (cfg->height <= 0 || cfg->width <= 0 || cfg->channels <= 0)
        return pst_fail(e,
                        "model %s: image size %dx%dx%d: expected positive height, width, channels",
                        name, cfg->height, cfg->width, cfg->channels);
    if (cfg->num_classes < 2)
        return pst_fail(e, "model %s: %d classes: expected at least 2", name, cfg->num_classes);
    if (cfg->max_batch <= 0)
        return pst_fail(e, "model %s: max batch %d: expected at least 1", name, cfg->max_batch);
    if (!(cfg->weight_decay >= 0.0f) || !(cfg->label_smoothing >= 0.0f) ||
        !(cfg->label_smoothing < 1.0f))
        return pst_fail(e,
                        "model %s: weight decay %g / label smoothing %g: expected >= 0 / in [0, 1)",
                        name, cfg->weight_decay, cfg->label_smoothing);
    nn_model *m = pst_calloc(1, sizeof *m);
    m->cfg = *cfg;
    snprintf(m->name, sizeof m->name, "%s", name);
    m->cfg.name = m->name;
    m->err = e;
    if (nn_build_named(m) < 0) goto fail;
    if (m->nlayers == 0 || m->layers[m->nlayers - 1].ops != &dense_ops ||
        m->layers[m->nlayers - 1].c != cfg->num_classes) {
        pst_fail(e, "model %s: the last layer must be dense with %d outputs", name,
                 cfg->num_classes);
        goto fail;
    }
    /* The layer kernels index a batch's activations (and gemm dimensions)
     * with int: refuse a batch and image size whose values would not fit,
     * before allocating them. */
    const int64_t in_vals = (int64_t)cfg->max_batch * cfg->height * cfg->width * cfg->channels;
    if (in_vals > INT_MAX) {
        pst_fail(e,
                 "model %s: a batch of %d images of %dx%dx%d holds %lld values, expected at most "
                 "%d (use a smaller batch)",
                 name, cfg->max_batch, cfg->height, cfg->width, cfg->channels, (long long)in_vals,
                 INT_MAX);
        goto fail;
    }
    for (int i = 0; i < m->nlayers; i++) {
        const nn_layer *l = &m->layers[i];
        const int64_t vals = (int64_t)cfg->max_batch * l->h * l->w * l->c;
        if (vals > INT_MAX) {
            pst_fail(e,
                     "model %s on %dx%dx%d images: layer %s holds %lld values for a batch of %d, "
                     "expected at most %d (use a smaller batch)",
                     name, cfg->height, cfg->width, cfg->channels, l->name, (long long)vals,
                     cfg->max_batch, INT_MAX);
            goto fail;
        }
    }
    m->err = NULL;
    m->params = pst_aligned_alloc(sizeof(float) * m->size);
    m->grads = pst_aligned_alloc(sizeof(float) * m->size);
    memset(m->grads, 0, sizeof(float) * m->size);
    init_vars(m);
    alloc_arena(m);
    *out = m;
    return 0;
fail:
    nn_model_free(m);
    return -1;
}

void nn_model_free(nn_model *m)
{
    if (!m) return;
    free(m->layers);
    free(m->vars);
    free(m->info);
    free(m->params);
    free(m->grads);
    free(m->arena);
    free(m);
}

/* ---- accessors ------------------------------------------------------------------- */

size_t nn_model_size(const nn_model *m)
{
    return m->size;
}
float *nn_model_params(nn_model *m)
{
    return m->params;
}
float *nn_model_grads(nn_model *m)
{
    return m->grads;
}
int nn_model_nvars(const nn_model *m)
{
    return m->nvars;
}
const nn_var *nn_model_var(const nn_model *m, int i)
{
    assert(i >= 0 && i < m->nvars);
    return &m->vars[i];
}

const nn_var *nn_model_vars(const nn_model *m)
{
    return m->vars;
}
const nn_model_cfg *nn_model_config(const nn_model *m)
{
    return &m->cfg;
}
size_t nn_model_trainable_size(const nn_model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->nvars; i++)
        if (m->vars[i].trainable) n += m->vars[i].size;
    return n;
}
const float *nn_model_logits(const nn_model *m)
{
    return m->layers[m->nlayers - 1].y;
}

/* Profiling counts the CPU time of the calling thread: on a shared machine
 * wall time also counts whoever else runs on the core. */
static double cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- steps --------------------------------------------------------------------------- */

static void forward(nn_model *m, const float *x, int n, bool train)
{
    m->x = x;
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *l = &m->layers[i];
        double t0 = m->profile ? cpu_now() : 0.0;
        l->ops->forward(m, l, n, train);
        if (m->profile) l->t_fwd += cpu_now() - t0;
    }
}

float nn_model_train_step(nn_model *m, const float *x, const int32_t *labels, int n, int64_t step,
                          int *ncorrect)
{
    assert(n >= 1 && n <= m->cfg.max_batch);
    m->step = step;
    forward(m, x, n, true);
    nn_layer *last = &m->layers[m->nlayers - 1];
    double loss = nn_softmax_xent(last->dy, last->y, labels, n, last->c, m->cfg.label_smoothing,
                                  ncorrect, NULL);
    for (int i = 0; i < m->nlayers; i++) m->layers[i].dy_written = false;
    for (int i = m->nlayers - 1; i >= 0; i--) {
        nn_layer *l = &m->layers[i];
        double t0 = m->profile ? cpu_now() : 0.0;
        l->ops->backward(m, l, n);
        if (m->profile) l->t_bwd += cpu_now() - t0;
    }
    /* L2 weight decay on kernels: loss += wd/2 |w|^2, grad += wd w */
    float wd = m->cfg.weight_decay;
    if (wd > 0.0f) {
        double sq = 0.0;
        for (int i = 0; i < m->nvars; i++) {
            if (!m->info[i].decay) continue;
            const float *restrict w = m->params + m->vars[i].offset;
            float *restrict g = m->grads + m->vars[i].offset;
            for (size_t j = 0; j < m->vars[i].size; j++) {
                sq += (double)w[j] * w[j];
                g[j] += wd * w[j];
            }
        }
        loss += 0.5 * wd * sq;
    }
    if (m->profile) m->profiled_steps++;
    return (float)loss;
}

float nn_model_eval(nn_model *m, const float *x, const int32_t *labels, int n, int *ncorrect,
                    int32_t *pred)
{
    assert(n >= 1 && n <= m->cfg.max_batch);
    bool prof = m->profile;
    m->profile = false;
    forward(m, x, n, false);
    m->profile = prof;
    nn_layer *last = &m->layers[m->nlayers - 1];
    return (float)nn_softmax_xent(NULL, last->y, labels, n, last->c, m->cfg.label_smoothing,
                                  ncorrect, pred);
}

void nn_model_apply_state(const nn_model *m, float *params, const float *src, size_t begin,
                          size_t end)
{
    for (int i = 0; i < m->nvars; i++) {
        const nn_var *v = &m->vars[i];
        if (v->trainable) continue;
        size_t a = v->offset > begin ? v->offset : begin;
        size_t b = v->offset + v->size < end ? v->offset + v->size : end;
        if (a < b) memcpy(params + a, src + a, sizeof(float) * (b - a));
    }
}

/* ---- description and profile ------------------------------------------------------ */

static size_t layer_params(const nn_model *m, const nn_layer *l, bool trainable)
{
    size_t n = 0;
    for (int k = 0; k < l->nvar; k++)
        if (m->vars[l->var0 + k].trainable == trainable) n += m->vars[l->var0 + k].size;
    return n;
}

static void layer_detail(const nn_model *m, const nn_layer *l, char *buf, size_t len)
{
    buf[0] = 0;
    if (l->ops == &conv_ops) {
        const nn_conv_dims *d = &l->u.conv;
        snprintf(buf, len, "%dx%d/%d pad %d%s%s", d->KH, d->KW, d->SH, d->PH,
                 l->nvar > 1 ? " +bias" : "", l->relu ? " relu" : "");
    } else if (l->ops == &maxpool_ops || l->ops == &avgpool_ops) {
        const nn_pool_dims *d = &l->u.pool.d;
        snprintf(buf, len, "%dx%d/%d pad %d", d->KH, d->KW, d->SH, d->PH);
    } else if (l->ops == &dense_ops || l->ops == &bn_ops) {
        snprintf(buf, len, "%s", l->relu ? "relu" : "");
    } else if (l->ops == &dropout_ops) {
        snprintf(buf, len, "rate %.2f", l->u.drop.rate);
    } else if (l->ops == &concat_ops) {
        size_t o = 0;
        for (int j = 0; j < l->nin && o < len; j++)
            o += (size_t)snprintf(buf + o, len - o, "%s%s", j ? "+" : "", in_name(m, l->in[j]));
    }
}

void nn_model_describe(const nn_model *m, FILE *out)
{
    fprintf(out, "model %s: input %dx%dx%d, %d classes\n", m->name, m->cfg.height, m->cfg.width,
            m->cfg.channels, m->cfg.num_classes);
    fprintf(out, "  %-28s %-10s %-14s %-26s %10s\n", "layer", "kind", "output", "detail", "params");
    for (int i = 0; i < m->nlayers; i++) {
        const nn_layer *l = &m->layers[i];
        char shape[32], detail[128];
        snprintf(shape, sizeof shape, "%dx%dx%d", l->h, l->w, l->c);
        layer_detail(m, l, detail, sizeof detail);
        fprintf(out, "  %-28s %-10s %-14s %-26s %10zu\n", l->name, l->ops->kind, shape, detail,
                layer_params(m, l, true));
    }
    size_t tr = nn_model_trainable_size(m);
    fprintf(out,
            "  trainable parameters: %zu, non-trainable: %zu, variables: %d, slab floats: %zu\n",
            tr, m->size - tr, m->nvars, m->size);
}

void nn_model_set_profiling(nn_model *m, bool on)
{
    m->profile = on;
}

void nn_model_profile_report(nn_model *m, FILE *out)
{
    double tf = 0, tb = 0;
    for (int i = 0; i < m->nlayers; i++) tf += m->layers[i].t_fwd, tb += m->layers[i].t_bwd;
    int64_t steps = m->profiled_steps > 0 ? m->profiled_steps : 1;
    double tot = tf + tb > 0 ? tf + tb : 1;
    fprintf(out, "  %-28s %-10s %10s %10s %7s\n", "layer", "kind", "fwd cpu us", "bwd cpu us",
            "share");
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *l = &m->layers[i];
        fprintf(out, "  %-28s %-10s %10.1f %10.1f %6.1f%%\n", l->name, l->ops->kind,
                1e6 * l->t_fwd / steps, 1e6 * l->t_bwd / steps,
                100.0 * (l->t_fwd + l->t_bwd) / tot);
        l->t_fwd = l->t_bwd = 0;
    }
    fprintf(out, "  %-28s %-10s %10.1f %10.1f (per step, %lld steps)\n", "total", "",
            1e6 * tf / steps, 1e6 * tb / steps, (long long)steps);
    m->profiled_steps = 0;
}
