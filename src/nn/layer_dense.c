/* layer_dense.c - fully connected layer: y = x W + b (ReLU optional) over
 * the flattened input. Variables: kernel [I][O], bias [O]. Kernels:
 * nn_dense_forward/backward (layers.c). */
#include <limits.h>

#include "graph.h"

static void dense_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    int I = m->vars[l->var0].shape[0];
    nn_dense_forward_par(m->pool, l->y, nn_in_y(m, l, 0), nn_param(m, l, 0), nn_param(m, l, 1), n,
                         I, l->c, l->relu);
}

static void dense_bwd(nn_model *m, nn_layer *l, int n)
{
    int I = m->vars[l->var0].shape[0];
    bool acc;
    float *din = nn_in_dy(m, l, 0, &acc);
    nn_dense_backward_par(m->pool, din, acc, nn_grad(m, l, 0), nn_grad(m, l, 1), l->dy, l->y,
                          nn_in_y(m, l, 0), nn_param(m, l, 0), n, I, l->c, l->relu);
}

const nn_layer_ops nn_dense_ops = {
    .kind = "dense",
    .forward = dense_fwd,
    .backward = dense_bwd,
    .bwd_reads = NN_READS_IN | NN_READS_OUT_RELU,
    .describe = nn_describe_relu,
};

int nn_add_dense(nn_model *m, const char *name, int in, int O, bool relu)
{
    if (m->failed || in == NN_FAILED) return NN_FAILED;
    int h, w, c;
    nn_in_shape(m, in, &h, &w, &c);
    if ((int64_t)h * w * c > INT_MAX) /* the kernels index with int */
        return nn_fail(m,
                       "model %s does not fit a %dx%dx%d image: layer %s would have %lld inputs, "
                       "expected at most %d",
                       m->name, m->cfg.height, m->cfg.width, m->cfg.channels, name,
                       (long long)h * w * c, INT_MAX);
    nn_layer *l = nn_new_layer(m, &nn_dense_ops, name, in);
    l->h = l->w = 1, l->c = O, l->relu = relu;
    int I = h * w * c, ks[2] = {I, O};
    nn_add_var(m, l, "kernel", 2, ks, true, relu ? NN_INIT_HE : NN_INIT_GLOROT, I, O, true);
    nn_add_var(m, l, "bias", 1, &O, true, NN_INIT_ZERO, 0, 0, false);
    return m->nlayers - 1;
}
