/* layer_concat.c - concatenation of up to NN_MAX_IN producers of the same
 * height and width along the channels (the Inception towers). No
 * variables. Kernels: nn_concat_forward/backward (layers.c). */
#include <assert.h>

#include "graph.h"

static void concat_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    const float *ins[NN_MAX_IN];
    int cs[NN_MAX_IN];
    for (int j = 0; j < l->nin; j++) {
        int h, w;
        ins[j] = nn_in_y(m, l, j);
        nn_in_shape(m, l->in[j], &h, &w, &cs[j]);
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
        dins[j] = nn_in_dy(m, l, j, &acc[j]);
        nn_in_shape(m, l->in[j], &h, &w, &cs[j]);
    }
    nn_concat_backward(dins, acc, l->dy, cs, l->nin, n * l->h * l->w);
}

static void concat_describe(const nn_model *m, const nn_layer *l, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (int j = 0; j < l->nin && o < len; j++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", j ? "+" : "", nn_in_name(m, l->in[j]));
}

const nn_layer_ops nn_concat_ops = {
    .kind = "concat",
    .forward = concat_fwd,
    .backward = concat_bwd,
    .bwd_reads = NN_READS_NOTHING,
    .describe = concat_describe,
};

int nn_add_concat(nn_model *m, const char *name, const int *ins, int nin)
{
    if (m->failed) return NN_FAILED;
    assert(nin >= 1 && nin <= NN_MAX_IN);
    int h0, w0, ctot = 0;
    for (int j = 0; j < nin; j++) {
        if (ins[j] == NN_FAILED) return NN_FAILED;
        int h, w, c;
        nn_in_shape(m, ins[j], &h, &w, &c);
        if (j == 0) h0 = h, w0 = w;
        if (h != h0 || w != w0)
            return nn_fail(m, "model %s: concat %s joins %dx%d and %dx%d outputs", m->name, name,
                           h0, w0, h, w);
        ctot += c;
    }
    nn_layer *l = nn_new_layer(m, &nn_concat_ops, name, ins[0]);
    for (int j = 0; j < nin; j++) l->in[j] = ins[j];
    l->nin = nin;
    l->h = h0, l->w = w0, l->c = ctot;
    return m->nlayers - 1;
}
