/*
 * model.c - the model graph: the table of layer kinds, what builders share
 * (layers, variables), one slab per parameters and gradients, seeded
 * initialization, the arena, train/eval steps, description. The layer kinds
 * themselves (ops and builders) are src/nn/layer_<kind>.c; the profiling of
 * the steps (bench_model's per-layer report, --predict, --rerun) is
 * model_prof.c.
 *
 * Layers run in list order forward and in reverse backward. A layer reads
 * its producers' outputs (or the caller's batch) and writes its own y; in
 * backward it writes (first consumer) or adds (later consumers) into its
 * producers' dy, so a tensor that feeds several towers sums their gradients
 * without an extra pass.
 *
 * Graph fusion (fuse_layers): a batch norm without ReLU whose output only
 * feeds the two-input add right after it computes that add too, in its own
 * passes over the data (nn_bn_res; the add's forward and backward then do
 * nothing). The plan (plan.c) gives the add's buffers the batch norm's
 * times. Bitwise the same results as unfused (test nn-model).
 *
 * Split gradients (graph.h): a tensor of at most 64 channels with two
 * consumers whose gradient is read by a batch norm's backward (resnet-20's
 * block outputs: the next block's first convolution and its add; the stem)
 * gets a second gradient
 * buffer (plan.c): the second consumer writes its part there instead of
 * adding it into the first, and the batch norm adds the two as it reads
 * them. nn_switches.no_split fuses without splitting, no_fuse does
 * neither.
 */
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "model_prof.h"
#include "pstrain/pool.h"
#include "pstrain/optim.h"

/* Every layer kind, one row per src/nn/layer_<kind>.c (see graph.h). A
 * builder may only create layers of a kind listed here. */
const nn_layer_ops *const nn_layer_kinds[] = {
    &nn_dense_ops,  &nn_conv_ops, &nn_bn_ops, &nn_maxpool_ops, &nn_avgpool_ops, &nn_dropout_ops,
    &nn_concat_ops, &nn_add_ops,  NULL,
};

static bool kind_registered(const nn_layer_ops *ops)
{
    for (const nn_layer_ops *const *k = nn_layer_kinds; *k; k++)
        if (*k == ops) return true;
    return false;
}

/* ---- for the builders (graph.h) ------------------------------------------------- */

int nn_fail(nn_model *m, const char *fmt, ...)
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

int nn_fail_no_fit(nn_model *m, const char *name, const char *what, int KH, int KW, int stride,
                   int PH, int PW, int H, int W, int in)
{
    char pad[24];
    if (PH == PW)
        snprintf(pad, sizeof pad, "%d", PH);
    else
        snprintf(pad, sizeof pad, "%d,%d", PH, PW);
    return nn_fail(m,
                   "model %s does not fit a %dx%dx%d image: layer %s (%dx%d %s, stride %d, "
                   "padding %s) gets a %dx%d input from %s",
                   m->name, m->cfg.height, m->cfg.width, m->cfg.channels, name, KH, KW, what,
                   stride, pad, H, W, nn_in_name(m, in));
}

void nn_describe_relu(const nn_model *m, const nn_layer *l, char *buf, size_t len)
{
    snprintf(buf, len, "%s", l->relu ? "relu" : "");
}

nn_layer *nn_new_layer(nn_model *m, const nn_layer_ops *ops, const char *name, int in)
{
    bool known = kind_registered(ops) && ops->forward && ops->backward && ops->bwd_reads;
    assert(known); /* a builder of a kind missing from nn_layer_kinds, or incomplete */
    (void)known;
    if (m->nlayers == m->cap_layers) {
        m->cap_layers = m->cap_layers ? 2 * m->cap_layers : 16;
        m->layers = pst_realloc(m->layers, sizeof(nn_layer) * m->cap_layers);
    }
    nn_layer *l = &m->layers[m->nlayers++];
    memset(l, 0, sizeof *l);
    l->ops = ops;
    if (snprintf(l->name, sizeof l->name, "%s", name) >= (int)sizeof l->name)
        nn_fail(m, "model %s: layer name %s is longer than %d characters", m->name, name,
                NN_LAYER_NAME_LEN - 1);
    l->in[0] = in;
    l->nin = 1;
    l->var0 = m->nvars;
    if (ops->priv_size) l->priv = pst_calloc(1, ops->priv_size);
    return l;
}

void nn_add_var(nn_model *m, nn_layer *l, const char *suffix, int ndim, const int *shape,
                bool trainable, nn_init init, int fan_in, int fan_out, bool decay)
{
    if (m->nvars == m->cap_vars) {
        m->cap_vars = m->cap_vars ? 2 * m->cap_vars : 32;
        m->vars = pst_realloc(m->vars, sizeof(nn_var) * m->cap_vars);
        m->info = pst_realloc(m->info, sizeof(nn_var_info) * m->cap_vars);
    }
    nn_var *v = &m->vars[m->nvars];
    memset(v, 0, sizeof *v);
    if (snprintf(v->name, sizeof v->name, "%s/%s", l->name, suffix) >= (int)sizeof v->name)
        nn_fail(m, "model %s: variable name %s/%s is longer than %d characters", m->name, l->name,
                suffix, NN_VAR_NAME_LEN - 1);
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

double *nn_red(nn_model *m, size_t n)
{
    if (n > m->red_cap) {
        free(m->red);
        m->red = pst_aligned_alloc(sizeof(double) * n);
        m->red_cap = n;
    }
    return m->red;
}

const char *nn_in_name(const nn_model *m, int in)
{
    return in == NN_INPUT ? "input" : m->layers[in].name;
}

/* ---- graph fusion ---------------------------------------------------------------- */

/* Whether environment variable `name` is the one character c. */
static bool env_is(const char *name, char c)
{
    const char *e = getenv(name);
    return e && e[0] == c && !e[1];
}

void nn_switches_from_env(nn_switches *sw)
{
    *sw = (nn_switches){0};
    sw->wino = env_is("PSTRAIN_WINO", '0')   ? NN_WINO_OFF
               : env_is("PSTRAIN_WINO", '2') ? NN_WINO_F2
               : env_is("PSTRAIN_WINO", '3') ? NN_WINO_F4
                                             : NN_WINO_AUTO;
    sw->no_fuse = env_is("PSTRAIN_FUSE", '0');
    sw->no_split = env_is("PSTRAIN_FUSE", '1');
    sw->no_alias = env_is("PSTRAIN_ALIAS", '0');
}

/* How many layers read each layer's output (an array of m->nlayers; free it). */
static int *layer_uses(const nn_model *m)
{
    int *uses = pst_calloc((size_t)m->nlayers, sizeof(int));
    for (int j = 0; j < m->nlayers; j++)
        for (int k = 0; k < m->layers[j].nin; k++)
            if (m->layers[j].in[k] >= 0) uses[m->layers[j].in[k]]++;
    return uses;
}

/* Marks each batch norm at i without ReLU whose only consumer is a
 * two-input add at i + 1 (the ResNets' last batch norm of a block, or the
 * projection's) and that add as fused (l->fuse, graph.h). The add's other
 * input must be another layer than the batch norm's producer (else the
 * fused backward would write that gradient twice in one pass). */
static void fuse_layers(nn_model *m)
{
    if (m->cfg.sw.no_fuse) return;
    int *uses = layer_uses(m);
    for (int i = 0; i + 1 < m->nlayers; i++) {
        nn_layer *b = &m->layers[i], *a = &m->layers[i + 1];
        if (b->ops != &nn_bn_ops || b->relu || uses[i] != 1 || a->ops != &nn_add_ops ||
            a->nin != 2 || (a->in[0] != i && a->in[1] != i))
            continue;
        int other = a->in[a->in[0] == i ? 1 : 0];
        if (other == i || other == b->in[0]) continue;
        b->fuse = i + 2, a->fuse = i + 1;
    }
    /* split gradients (graph.h): a tensor of at most NN_SPLIT_MAX_C
     * channels with two or more consumers whose gradient a batch norm's
     * backward reads, its own or the fused add's */
    for (int i = 0; i < m->nlayers && !m->cfg.sw.no_split; i++) {
        nn_layer *l = &m->layers[i];
        bool bn_reads = (l->ops == &nn_bn_ops && !l->fuse) || (l->ops == &nn_add_ops && l->fuse);
        l->split = bn_reads && uses[i] >= 2 && l->c <= NN_SPLIT_MAX_C;
    }
    free(uses);
}

/* Concat without copies (graph.h): marks each producer of a strided kind
 * whose one use is an input of a concat (not fused with an add, not split)
 * as aliased into that concat's output and gradient; every layer's row
 * stride ld (c, or the concat's channel count). */
static void alias_layers(nn_model *m)
{
    int *uses = layer_uses(m);
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *l = &m->layers[i];
        l->alias = l->alias_c0 = 0, l->ld = l->c;
    }
    for (int j = 0; j < m->nlayers && !m->cfg.sw.no_alias; j++) {
        const nn_layer *c = &m->layers[j];
        if (c->ops != &nn_concat_ops) continue;
        for (int k = 0, c0 = 0; k < c->nin; k++) {
            int i = c->in[k], h, w, ch;
            nn_in_shape(m, i, &h, &w, &ch);
            if (i >= 0) {
                nn_layer *p = &m->layers[i];
                if (p->ops->strided && uses[i] == 1 && !p->fuse && !p->split)
                    p->alias = j + 1, p->alias_c0 = c0, p->ld = c->c;
            }
            c0 += ch;
        }
    }
    free(uses);
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
        case NN_INIT_GLOROT:
        case NN_INIT_TORCH: {
            float lim = (float)(in->init == NN_INIT_GLOROT ? sqrt(6.0 / (in->fan_in + in->fan_out))
                                                           : 1.0 / sqrt(in->fan_in));
            for (size_t j = 0; j < v->size; j++) p[j] = (2.0f * nn_rng_uniform(&r) - 1.0f) * lim;
            break;
        }
        case NN_INIT_HE_FAN_OUT: {
            double sd = sqrt(2.0 / in->fan_out);
            for (size_t j = 0; j < v->size; j++) p[j] = (float)(nn_rng_normal(&r) * sd);
            break;
        }
        case NN_INIT_NORMAL_01:
            for (size_t j = 0; j < v->size; j++) {
                double z;
                do z = 0.1 * nn_rng_normal(&r);
                while (fabs(z) > 2.0);
                p[j] = (float)z;
            }
            break;
        }
    }
}

/* The scratch shared by all layers (ops->scratch_floats; one copy per
 * thread of the pool, nn_scratch(m, tid)), then the arena:
 * activations, gradients and each layer's state placed by the plan
 * (plan.c), the scratch after them in the same allocation. */
static int alloc_arena(nn_model *m)
{
    const size_t B = (size_t)m->cfg.max_batch;
    size_t scratch = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const nn_layer *l = &m->layers[i];
        if (l->ops->scratch_floats) scratch = PST_MAX(scratch, l->ops->scratch_floats(l, B));
    }
    m->scratch_stride = scratch ? nn_arena_round(scratch) : 0;
    m->scratch_floats = m->scratch_stride * (size_t)nn_pool_threads(m->pool);
    return nn_plan_model(m);
}

int nn_model_new(nn_model **out, const nn_model_cfg *cfg, pst_err *e)
{
    return nn_model_new_narrow(out, cfg, 1, e);
}

static int model_new(nn_model **out, const nn_model_cfg *cfg, int width_div,
                     int (*build)(nn_model *m), pst_err *e);

int nn_model_new_narrow(nn_model **out, const nn_model_cfg *cfg, int width_div, pst_err *e)
{
    return model_new(out, cfg, width_div, NULL, e);
}

int nn_model_new_graph(nn_model **out, const nn_model_cfg *cfg, int (*build)(nn_model *m),
                       pst_err *e)
{
    return model_new(out, cfg, 1, build, e);
}

static int model_new(nn_model **out, const nn_model_cfg *cfg, int width_div,
                     int (*build)(nn_model *m), pst_err *e)
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
    m->width_div = width_div > 1 ? width_div : 1;
    snprintf(m->name, sizeof m->name, "%s", name);
    m->cfg.name = m->name;
    m->err = e;
    if (build ? build(m) == NN_FAILED || m->failed : nn_build_named(m) < 0) goto fail;
    if (m->nlayers == 0 || m->layers[m->nlayers - 1].ops != &nn_dense_ops ||
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
    fuse_layers(m);
    alias_layers(m);
    if (cfg->threads > 1 && nn_pool_new(&m->pool, cfg->threads, e) < 0) goto fail;
    m->err = NULL;
    m->params = pst_aligned_alloc(sizeof(float) * m->size);
    m->grads = pst_aligned_alloc(sizeof(float) * m->size);
    memset(m->grads, 0, sizeof(float) * m->size);
    init_vars(m);
    m->err = e;
    if (alloc_arena(m) < 0) goto fail;
    m->err = NULL;
    *out = m;
    return 0;
fail:
    nn_model_free(m);
    return -1;
}

void nn_model_free(nn_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->nlayers; i++) free(m->layers[i].priv);
    free(m->layers);
    free(m->vars);
    free(m->info);
    free(m->params);
    free(m->grads);
    free(m->rerun_buf);
    free(m->arena);
    nn_plan_free(&m->plan_train);
    nn_plan_free(&m->plan_infer);
    free(m->red);
    nn_pool_free(m->pool);
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

/* ---- steps --------------------------------------------------------------------------- */

static void forward(nn_model *m, const float *x, int n, bool train)
{
    m->x = x;
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *l = &m->layers[i];
        nn_prof_mark k;
        if (m->profile) nn_prof_begin(m, l, n, false, &k);
        l->ops->forward(m, l, n, train);
        if (m->profile) nn_prof_end_fwd(m, l, n, train, &k);
        nn_plan_after(m, i);
    }
}

/* ---- the loss and weight decay on the pool: fixed blocks, partials added in
 * block order (pool.h's determinism rule) ---- */

typedef struct xent_job {
    float *dlogits;
    const float *logits;
    const int32_t *labels;
    int32_t *pred;
    int n, K, nb;
    float smoothing;
    double *red; /* [nb][2]: loss sum, correct */
} xent_job;

static void xent_task(void *varg, int b, int tid)
{
    const xent_job *j = varg;
    int lo, hi, correct = 0;
    nn_pool_block(j->n, j->nb, b, &lo, &hi);
    size_t o = (size_t)lo * j->K;
    j->red[2 * b] = nn_softmax_xent_rows(j->dlogits ? j->dlogits + o : NULL, j->logits + o,
                                         j->labels + lo, hi - lo, j->K, j->n, j->smoothing,
                                         &correct, j->pred ? j->pred + lo : NULL);
    j->red[2 * b + 1] = correct;
}

/* nn_softmax_xent of the last layer's output by blocks of rows. */
static double model_xent(nn_model *m, float *dlogits, const float *logits, const int32_t *labels,
                         int n, int K, int *ncorrect, int32_t *pred)
{
    xent_job j = {dlogits, logits, labels, pred, n, K, 0, m->cfg.label_smoothing, NULL};
    j.nb = nn_pool_nblocks(n, (size_t)K, 8192, 64);
    j.red = nn_red(m, 2 * (size_t)j.nb);
    nn_pool_for(m->pool, j.nb, xent_task, &j);
    double loss = 0.0, correct = 0.0;
    for (int b = 0; b < j.nb; b++) loss += j.red[2 * b], correct += j.red[2 * b + 1];
    if (ncorrect) *ncorrect = (int)correct;
    return loss / n;
}

#define DECAY_CHUNK 65536 /* floats of a weight-decay task */

typedef struct decay_job {
    nn_model *m;
    float wd;
    double *red; /* [chunks]: sums of squares */
} decay_job;

static void decay_task(void *varg, int task, int tid)
{
    const decay_job *j = varg;
    const nn_model *m = j->m;
    int t = task;
    for (int i = 0; i < m->nvars; i++) {
        if (!m->info[i].decay) continue;
        size_t size = m->vars[i].size;
        int chunks = (int)((size + DECAY_CHUNK - 1) / DECAY_CHUNK);
        if (t >= chunks) {
            t -= chunks;
            continue;
        }
        size_t a = (size_t)t * DECAY_CHUNK, b = a + DECAY_CHUNK < size ? a + DECAY_CHUNK : size;
        const float *restrict w = m->params + m->vars[i].offset;
        float *restrict g = m->grads + m->vars[i].offset;
        double sq = 0.0;
        for (size_t k = a; k < b; k++) {
            sq += (double)w[k] * w[k];
            g[k] += j->wd * w[k];
        }
        j->red[task] = sq;
        return;
    }
}

/* L2 weight decay on kernels: grad += wd w; returns wd/2 |w|^2. Chunks of
 * DECAY_CHUNK floats per variable, their sums added in chunk order. */
static double model_decay(nn_model *m, float wd)
{
    int chunks = 0;
    for (int i = 0; i < m->nvars; i++)
        if (m->info[i].decay) chunks += (int)((m->vars[i].size + DECAY_CHUNK - 1) / DECAY_CHUNK);
    decay_job j = {m, wd, nn_red(m, (size_t)chunks)};
    nn_pool_for(m->pool, chunks, decay_task, &j);
    double sq = 0.0;
    for (int c = 0; c < chunks; c++) sq += j.red[c];
    return 0.5 * wd * sq;
}

float nn_model_train_step(nn_model *m, const float *x, const int32_t *labels, int n, int64_t step,
                          int *ncorrect)
{
    assert(n >= 1 && n <= m->cfg.max_batch);
    nn_pool_enter(m->pool);
    m->step = step;
    nn_plan_bind(m, &m->plan_train);
    forward(m, x, n, true);
    nn_layer *last = &m->layers[m->nlayers - 1];
    double loss = model_xent(m, last->dy, last->y, labels, n, last->c, ncorrect, NULL);
    nn_plan_after(m, m->nlayers);
    for (int i = 0; i < m->nlayers; i++) m->layers[i].dy_written = m->layers[i].dy2_written = false;
    for (int i = m->nlayers - 1; i >= 0; i--) {
        nn_layer *l = &m->layers[i];
        nn_prof_mark k;
        if (m->profile) nn_prof_begin(m, l, n, true, &k);
        l->ops->backward(m, l, n);
        if (m->profile) nn_prof_end_bwd(m, l, n, &k);
        nn_plan_after(m, 2 * m->nlayers - i);
    }
    /* L2 weight decay on kernels: loss += wd/2 |w|^2, grad += wd w */
    if (m->cfg.weight_decay > 0.0f) loss += model_decay(m, m->cfg.weight_decay);
    if (m->profile) m->profiled_steps++;
    nn_pool_leave(m->pool);
    return (float)loss;
}

float nn_model_eval(nn_model *m, const float *x, const int32_t *labels, int n, int *ncorrect,
                    int32_t *pred)
{
    assert(n >= 1 && n <= m->cfg.max_batch);
    bool prof = m->profile;
    m->profile = false;
    nn_pool_enter(m->pool);
    nn_plan_bind(m, &m->plan_infer);
    forward(m, x, n, false);
    m->profile = prof;
    nn_layer *last = &m->layers[m->nlayers - 1];
    double loss = model_xent(m, NULL, last->y, labels, n, last->c, ncorrect, pred);
    nn_pool_leave(m->pool);
    return (float)loss;
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

#define OPT_BLOCK 16384          /* floats of an optimizer task */
#define OPT_PIN_FLOATS (1 << 20) /* from which the optimizer's caller is pinned */

typedef struct opt_job {
    const opt_cfg *c;
    float lr;
    int64_t t;
    float *param, *slots;
    const float *grad;
    size_t stride, n;
} opt_job;

static void opt_task(void *varg, int task, int tid)
{
    const opt_job *j = varg;
    size_t a = (size_t)task * OPT_BLOCK, b = a + OPT_BLOCK < j->n ? a + OPT_BLOCK : j->n;
    opt_apply(j->c, j->lr, j->t, j->param + a, j->grad + a, j->slots ? j->slots + a : NULL,
              j->stride, b - a);
    (void)tid;
}

void nn_model_opt_apply(nn_model *m, const opt_cfg *c, float lr, int64_t t, float *param,
                        const float *grad, float *slots, size_t slot_stride, size_t n)
{
    /* a small model's optimizer (inception-mini: 97k floats) runs without
     * pinning the caller: its three system calls would cost a good part of
     * so short a loop (and the caller comes from the train step on its CPU
     * anyway); a long loop (resnet-50: 25M floats) keeps the caller off the
     * workers' CPUs */
    bool pin = n >= OPT_PIN_FLOATS;
    opt_job j = {c, lr, t, param, slots, grad, slot_stride, n};
    if (pin) nn_pool_enter(m->pool);
    nn_pool_for(m->pool, (int)((n + OPT_BLOCK - 1) / OPT_BLOCK), opt_task, &j);
    if (pin) nn_pool_leave(m->pool);
}

int nn_model_pinned_cpus(const nn_model *m, int *cpu, int max)
{
    if (nn_pool_cpu(m->pool, 0) < 0) return 0;
    int T = nn_pool_threads(m->pool);
    for (int t = 0; t < T && t < max; t++) cpu[t] = nn_pool_cpu(m->pool, t);
    return T;
}

/* ---- description (the profile: model_prof.c) ------------------------------------- */

static size_t layer_params(const nn_model *m, const nn_layer *l, bool trainable)
{
    size_t n = 0;
    for (int k = 0; k < l->nvar; k++)
        if (m->vars[l->var0 + k].trainable == trainable) n += m->vars[l->var0 + k].size;
    return n;
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
        detail[0] = 0;
        if (l->ops->describe) l->ops->describe(m, l, detail, sizeof detail);
        fprintf(out, "  %-28s %-10s %-14s %-26s %10zu\n", l->name, l->ops->kind, shape, detail,
                layer_params(m, l, true));
    }
    size_t tr = nn_model_trainable_size(m);
    fprintf(out,
            "  trainable parameters: %zu, non-trainable: %zu, variables: %d, slab floats: %zu\n",
            tr, m->size - tr, m->nvars, m->size);
}
