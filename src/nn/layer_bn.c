/* layer_bn.c - batch normalization over the channels (fused ReLU optional).
 * Variables: gamma, beta (trainable), moving_mean, moving_variance (not
 * trainable: the training forward writes their new values into the
 * gradient slab, see model.h). Momentum 0.99, eps 1e-3 (TF's defaults in
 * the Inception example). Kernels: nn_bn_* (bn.c). */
#include "graph.h"

#define BN_MOMENTUM 0.99f
#define BN_EPS 1e-3f

typedef struct bn_state {
    float *mean, *invstd; /* [c], saved by the training forward for backward */
} bn_state;

static void bn_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    const bn_state *s = l->priv;
    int M = n * l->h * l->w;
    if (train)
        nn_bn_forward_train(l->y, s->mean, s->invstd, nn_grad(m, l, 2), nn_grad(m, l, 3),
                            nn_in_y(m, l, 0), nn_param(m, l, 0), nn_param(m, l, 1),
                            nn_param(m, l, 2), nn_param(m, l, 3), M, l->c, BN_MOMENTUM, BN_EPS,
                            l->relu);
    else
        nn_bn_forward_infer(l->y, nn_in_y(m, l, 0), nn_param(m, l, 0), nn_param(m, l, 1),
                            nn_param(m, l, 2), nn_param(m, l, 3), M, l->c, BN_EPS, l->relu);
}

static void bn_bwd(nn_model *m, nn_layer *l, int n)
{
    const bn_state *s = l->priv;
    bool acc;
    float *din = nn_in_dy(m, l, 0, &acc);
    nn_bn_backward(din, acc, nn_grad(m, l, 0), nn_grad(m, l, 1), l->dy, l->y, nn_in_y(m, l, 0),
                   nn_param(m, l, 0), s->mean, s->invstd, n * l->h * l->w, l->c, l->relu);
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

const nn_layer_ops nn_bn_ops = {
    .kind = "batchnorm",
    .forward = bn_fwd,
    .backward = bn_bwd,
    .priv_size = sizeof(bn_state),
    .arena_floats = bn_arena,
    .arena_bind = bn_bind,
    .describe = nn_describe_relu,
};

int nn_add_bn(nn_model *m, const char *name, int in, bool relu)
{
    if (m->failed || in == NN_FAILED) return NN_FAILED;
    nn_layer *l = nn_new_layer(m, &nn_bn_ops, name, in);
    nn_in_shape(m, in, &l->h, &l->w, &l->c);
    l->relu = relu;
    nn_add_var(m, l, "gamma", 1, &l->c, true, NN_INIT_ONE, 0, 0, false);
    nn_add_var(m, l, "beta", 1, &l->c, true, NN_INIT_ZERO, 0, 0, false);
    nn_add_var(m, l, "moving_mean", 1, &l->c, false, NN_INIT_ZERO, 0, 0, false);
    nn_add_var(m, l, "moving_variance", 1, &l->c, false, NN_INIT_ONE, 0, 0, false);
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
