/* layer_bn.c - batch normalization over the channels (fused ReLU optional).
 * Variables: gamma, beta (trainable), moving_mean, moving_variance (not
 * trainable: the training forward writes their new values into the
 * gradient slab, see model.h). Momentum 0.99; eps per layer, 1e-3 by
 * default (TF's defaults in the Inception example; torchvision's ResNets
 * use 1e-5). Kernels: nn_bn_* (bn.c). */
#include "graph.h"

#define BN_MOMENTUM 0.99f
#define BN_EPS 1e-3f

typedef struct bn_state {
    float eps;
    float *mean, *invstd; /* [c], saved by the training forward for backward */
} bn_state;

static void bn_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    const bn_state *s = l->priv;
    int M = n * l->h * l->w;
    if (train)
        nn_bn_forward_train_par(m->pool, nn_red(m, nn_bn_red_doubles(M, l->c)), l->y, s->mean,
                                s->invstd, nn_grad(m, l, 2), nn_grad(m, l, 3), nn_in_y(m, l, 0),
                                nn_param(m, l, 0), nn_param(m, l, 1), nn_param(m, l, 2),
                                nn_param(m, l, 3), M, l->c, BN_MOMENTUM, s->eps, l->relu);
    else
        nn_bn_forward_infer_par(m->pool, l->y, nn_in_y(m, l, 0), nn_param(m, l, 0),
                                nn_param(m, l, 1), nn_param(m, l, 2), nn_param(m, l, 3), M, l->c,
                                s->eps, l->relu);
}

static void bn_bwd(nn_model *m, nn_layer *l, int n)
{
    const bn_state *s = l->priv;
    bool acc;
    float *din = nn_in_dy(m, l, 0, &acc);
    int M = n * l->h * l->w;
    nn_bn_backward_par(m->pool, nn_red(m, nn_bn_red_doubles(M, l->c)), din, acc, nn_grad(m, l, 0),
                       nn_grad(m, l, 1), l->dy, l->y, nn_in_y(m, l, 0), nn_param(m, l, 0), s->mean,
                       s->invstd, M, l->c, l->relu);
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
    .bwd_reads = NN_READS_IN | NN_READS_OUT_RELU,
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
