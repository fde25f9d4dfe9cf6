/* layer_conv.c - 2-D convolution (NHWC, kernel [KH][KW][C][K], square
 * stride, padding PH rows top and bottom and PW columns left and right,
 * optional bias and fused ReLU). Kernels:
 * nn_conv2d_forward/backward (conv.c, conv_backward.c), run as tasks on
 * the model's pool; each thread has its own scratch (nn_scratch), shared by all
 * convolutions of the model. */
#include "graph.h"

static void conv_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    nn_conv_dims d = *(const nn_conv_dims *)l->priv;
    d.N = n;
    nn_conv2d_forward(l->y, nn_in_y(m, l, 0), nn_param(m, l, 0),
                      l->nvar > 1 ? nn_param(m, l, 1) : NULL, &d, l->relu, m->pool, m->scratch,
                      m->scratch_stride);
}

static void conv_bwd(nn_model *m, nn_layer *l, int n)
{
    nn_conv_dims d = *(const nn_conv_dims *)l->priv;
    d.N = n;
    bool acc;
    float *din = nn_in_dy(m, l, 0, &acc);
    nn_conv2d_backward(din, acc, nn_grad(m, l, 0), l->nvar > 1 ? nn_grad(m, l, 1) : NULL, l->dy,
                       l->y, nn_in_y(m, l, 0), nn_param(m, l, 0), &d, l->relu, m->pool, m->scratch,
                       m->scratch_stride);
}

static size_t conv_scratch(const nn_layer *l, size_t B)
{
    nn_conv_dims d = *(const nn_conv_dims *)l->priv;
    d.N = (int)B;
    return nn_conv_scratch(&d);
}

static void conv_describe(const nn_model *m, const nn_layer *l, char *buf, size_t len)
{
    const nn_conv_dims *d = l->priv;
    char pad[24];
    if (d->PH == d->PW)
        snprintf(pad, sizeof pad, "%d", d->PH);
    else
        snprintf(pad, sizeof pad, "%d,%d", d->PH, d->PW);
    snprintf(buf, len, "%dx%d/%d pad %s%s%s", d->KH, d->KW, d->SH, pad, l->nvar > 1 ? " +bias" : "",
             l->relu ? " relu" : "");
}

/* 2*N*OH*OW*K*KH*KW*C per product: one forward; the weight gradient and,
 * unless the layer reads the model's input, the input gradient. */
static double conv_flops(const nn_layer *l, int n, bool bwd)
{
    const nn_conv_dims *d = l->priv;
    double f = 2.0 * n * d->OH * d->OW * (double)d->K * d->KH * d->KW * d->C;
    return bwd ? f * (l->in[0] == NN_INPUT ? 1 : 2) : f;
}

const nn_layer_ops nn_conv_ops = {
    .kind = "conv2d",
    .forward = conv_fwd,
    .backward = conv_bwd,
    .bwd_reads = NN_READS_IN | NN_READS_OUT_RELU,
    .priv_size = sizeof(nn_conv_dims), /* N is set per call */
    .scratch_floats = conv_scratch,
    .describe = conv_describe,
    .flops = conv_flops,
};

int nn_add_conv(nn_model *m, const char *name, int in, int K, int KH, int KW, int stride, int pad,
                bool bias, bool relu, nn_init init)
{
    return nn_add_conv_hw(m, name, in, K, KH, KW, stride, pad, pad, bias, relu, init);
}

int nn_add_conv_hw(nn_model *m, const char *name, int in, int K, int KH, int KW, int stride, int PH,
                   int PW, bool bias, bool relu, nn_init init)
{
    if (m->failed || in == NN_FAILED) return NN_FAILED;
    nn_conv_dims d = {0};
    nn_in_shape(m, in, &d.H, &d.W, &d.C);
    d.KH = KH, d.KW = KW, d.SH = d.SW = stride, d.PH = PH, d.PW = PW, d.K = K;
    d.wino = m->cfg.sw.wino, d.no_shared_pad = m->cfg.sw.no_shared_pad;
    d.no_fuse_strided = m->cfg.sw.no_fuse_strided;
    nn_conv_dims_finish(&d);
    if (d.OH <= 0 || d.OW <= 0)
        return nn_fail_no_fit(m, name, "kernel", KH, KW, stride, PH, PW, d.H, d.W, in);
    nn_layer *l = nn_new_layer(m, &nn_conv_ops, name, in);
    *(nn_conv_dims *)l->priv = d;
    l->h = d.OH, l->w = d.OW, l->c = K, l->relu = relu;
    int ks[4] = {KH, KW, d.C, K};
    nn_add_var(m, l, "kernel", 4, ks, true, init, KH * KW * d.C, KH * KW * K, true);
    if (bias) nn_add_var(m, l, "bias", 1, &K, true, NN_INIT_ZERO, 0, 0, false);
    return m->nlayers - 1;
}
