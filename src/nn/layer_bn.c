/* layer_bn.c - batch normalization over the channels (fused ReLU optional).
 * Variables: gamma, beta (trainable), moving_mean, moving_variance (not
 * trainable: the training forward writes their new values into the
 * gradient slab, see model.h). Momentum 0.99; eps per layer, 1e-3 by
 * default (TF's defaults in the Inception example; torchvision's ResNets
 * use 1e-5). Kernels: nn_bn_* (bn.c). A batch norm without ReLU may also
 * compute the residual add that follows it (graph fusion, model.c): then
 * it writes the add's output and reads the add's gradient. Its backward
 * reads a gradient in two parts (split gradients, graph.h): its own, or
 * the fused add's. */
#include "graph.h"

#define BN_MOMENTUM 0.99f
#define BN_EPS 1e-3f

typedef struct bn_state {
    float eps;
    float *mean, *invstd; /* [c], saved by the training forward for backward */
} bn_state;

/* The residual add this batch norm computes (graph fusion, model.c), for
 * a forward (dres NULL) or a backward (dres: the other addend's gradient). */
static nn_bn_res fused_res(nn_model *m, const nn_layer *l, const nn_layer *add, bool bwd)
{
    int other = add->in[0] == (int)(l - m->layers) ? 1 : 0;
    nn_bn_res r = {.res = nn_in_y(m, add, other), .relu = add->relu};
    if (bwd) r.dres = nn_in_dy(m, add, other, &r.dres_acc);
    return r;
}

static void bn_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    const bn_state *s = l->priv;
    int M = n * l->h * l->w;
    const nn_layer *add = nn_fused_add(m, l);
    nn_bn_res r = add ? fused_res(m, l, add, false) : (nn_bn_res){0};
    float *y = add ? add->y : l->y;
    int ld = add ? add->c : l->ld; /* a concat's row when aliased (graph.h) */
    if (train)
        nn_bn_forward_train_ld(m->pool, nn_red(m, nn_bn_red_doubles(M, l->c)), y, ld, s->mean,
                               s->invstd, nn_grad(m, l, 2), nn_grad(m, l, 3), nn_in_y(m, l, 0),
                               nn_param(m, l, 0), nn_param(m, l, 1), nn_param(m, l, 2),
                               nn_param(m, l, 3), M, l->c, BN_MOMENTUM, s->eps, l->relu,
                               add ? &r : NULL);
    else
        nn_bn_forward_infer_ld(m->pool, y, ld, nn_in_y(m, l, 0), nn_param(m, l, 0),
                               nn_param(m, l, 1), nn_param(m, l, 2), nn_param(m, l, 3), M, l->c,
                               s->eps, l->relu, add ? &r : NULL);
}

static void bn_bwd(nn_model *m, nn_layer *l, int n)
{
    const bn_state *s = l->priv;
    const nn_layer *add = nn_fused_add(m, l);
    /* the add's gradient goes to its other addend first, as the add's own
     * backward (which ran just before in list order) would have */
    nn_bn_res r = add ? fused_res(m, l, add, true) : (nn_bn_res){0};
    bool acc;
    float *din = nn_in_dy(m, l, 0, &acc);
    int M = n * l->h * l->w;
    nn_bn_backward_ld(m->pool, nn_red(m, nn_bn_red_doubles(M, l->c)), din, acc, nn_grad(m, l, 0),
                      nn_grad(m, l, 1), add ? add->dy : l->dy, add ? add->c : l->ld,
                      nn_dy2(add ? add : l), add ? add->y : NULL, nn_in_y(m, l, 0),
                      nn_param(m, l, 0), nn_param(m, l, 1), s->mean, s->invstd, M, l->c, l->relu,
                      add ? &r : NULL);
}

static size_t bn_arena(const nn_layer *l, size_t B)
{
    return nn_arena_round(2 * (size_t)l->c);
}

static void bn_bind(nn_layer *l, float *p)
{
    bn_state *s = l->priv;
    s->mean = p, s->invstd = p + l->c;
}

static void bn_describe(const nn_model *m, const nn_layer *l, char *buf, size_t len)
{
    snprintf(buf, len, "eps %g%s", (double)((const bn_state *)l->priv)->eps,
             l->relu ? " relu" : "");
}

const nn_layer_ops nn_bn_ops = {
    .kind = "batchnorm",
    .forward = bn_fwd,
    .backward = bn_bwd,
    .bwd_reads = NN_READS_IN, /* the ReLU's mask is recomputed from the input */
    .strided = true,          /* y and dy with rows l->ld apart: a concat may alias them */
    .priv_size = sizeof(bn_state),
    .arena_floats = bn_arena,
    .arena_bind = bn_bind,
    .describe = bn_describe,
};

int nn_add_bn(nn_model *m, const char *name, int in, bool relu)
{
    return nn_add_bn_eps(m, name, in, relu, BN_EPS);
}

int nn_add_bn_eps(nn_model *m, const char *name, int in, bool relu, float eps)
{
    if (m->failed || in == NN_FAILED) return NN_FAILED;
    int h, w, c;
    nn_in_shape(m, in, &h, &w, &c);
    if (c > NN_BN_MAX_C)
        return nn_fail(m, "model %s: batch norm %s gets %d channels from %s, expected at most %d",
                       m->name, name, c, nn_in_name(m, in), NN_BN_MAX_C);
    nn_layer *l = nn_new_layer(m, &nn_bn_ops, name, in);
    l->h = h, l->w = w, l->c = c;
    l->relu = relu;
    ((bn_state *)l->priv)->eps = eps;
    nn_add_var(m, l, "gamma", 1, &l->c, true, NN_INIT_ONE, 0, 0, false);
    nn_add_var(m, l, "beta", 1, &l->c, true, NN_INIT_ZERO, 0, 0, false);
    nn_add_var(m, l, "moving_mean", 1, &l->c, false, NN_INIT_ZERO, 0, 0, false);
    nn_add_var(m, l, "moving_variance", 1, &l->c, false, NN_INIT_ONE, 0, 0, false);
    return m->nlayers - 1;
}

int nn_add_conv_bn(nn_model *m, const char *name, int in, int K, int KH, int KW, int stride,
                   int pad)
{
    char bn[NN_LAYER_NAME_LEN];
    snprintf(bn, sizeof bn, "%s/bn", name);
    return nn_add_conv_bn_named(m, name, bn, in, K, KH, KW, stride, pad, pad, BN_EPS, true);
}

int nn_add_conv_bn_named(nn_model *m, const char *conv, const char *bn, int in, int K, int KH,
                         int KW, int stride, int PH, int PW, float eps, bool relu)
{
    int c = nn_add_conv_hw(m, conv, in, K, KH, KW, stride, PH, PW, false, false, NN_INIT_HE);
    return nn_add_bn_eps(m, bn, c, relu, eps);
}
