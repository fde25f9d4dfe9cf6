/* layer_add.c - elementwise sum of two or more producers of the same shape
 * (a residual connection: block output + shortcut), optional fused ReLU.
 * No variables. Kernels: nn_sum_forward/backward (layers.c). An add fed by
 * a batch norm right before it is usually computed by that batch norm
 * (graph fusion, model.c: l->fuse). */
#include <assert.h>

#include "graph.h"

/* An add call over elements [lo, hi): elementwise, so the pool's threads
 * take ranges. */
typedef struct add_job {
    const float *ins[NN_MAX_IN];
    float *dins[NN_MAX_IN];
    bool acc[NN_MAX_IN];
    int nin;
    bool relu;
    float *y, *dy;
} add_job;

static void add_fwd_range(void *varg, int lo, int hi)
{
    const add_job *j = varg;
    const float *ins[NN_MAX_IN];
    for (int k = 0; k < j->nin; k++) ins[k] = j->ins[k] + lo;
    nn_sum_forward(j->y + lo, ins, j->nin, (size_t)(hi - lo), j->relu);
}

static void add_bwd_range(void *varg, int lo, int hi)
{
    const add_job *j = varg;
    float *dins[NN_MAX_IN];
    for (int k = 0; k < j->nin; k++) dins[k] = j->dins[k] ? j->dins[k] + lo : NULL;
    nn_sum_backward(dins, j->acc, j->nin, j->dy + lo, j->y + lo, (size_t)(hi - lo), j->relu);
}

static void add_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    if (l->fuse) return; /* computed by the batch norm before it (model.c) */
    add_job j = {.nin = l->nin, .relu = l->relu, .y = l->y};
    for (int k = 0; k < l->nin; k++) j.ins[k] = nn_in_y(m, l, k);
    nn_pool_range(m->pool, n * l->h * l->w * l->c, (size_t)l->nin + 1, add_fwd_range, &j);
}

static void add_bwd(nn_model *m, nn_layer *l, int n)
{
    if (l->fuse) return; /* the batch norm before it takes the gradient (model.c) */
    add_job j = {.nin = l->nin, .relu = l->relu, .y = l->y, .dy = l->dy};
    for (int k = 0; k < l->nin; k++) j.dins[k] = nn_in_dy(m, l, k, &j.acc[k]);
    nn_pool_range(m->pool, n * l->h * l->w * l->c, (size_t)l->nin + 2, add_bwd_range, &j);
}

static void add_describe(const nn_model *m, const nn_layer *l, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (int j = 0; j < l->nin && o < len; j++)
        o += (size_t)snprintf(buf + o, len - o, "%s%s", j ? "+" : "", nn_in_name(m, l->in[j]));
    if (l->relu && o < len) snprintf(buf + o, len - o, " relu");
}

const nn_layer_ops nn_add_ops = {
    .kind = "add",
    .forward = add_fwd,
    .backward = add_bwd,
    .bwd_reads = NN_READS_OUT_RELU,
    .describe = add_describe,
};

int nn_add_sum(nn_model *m, const char *name, const int *ins, int nin, bool relu)
{
    if (m->failed) return NN_FAILED;
    assert(nin >= 2 && nin <= NN_MAX_IN);
    int h0 = 0, w0 = 0, c0 = 0;
    for (int j = 0; j < nin; j++) {
        if (ins[j] == NN_FAILED) return NN_FAILED;
        int h, w, c;
        nn_in_shape(m, ins[j], &h, &w, &c);
        if (j == 0) h0 = h, w0 = w, c0 = c;
        if (h != h0 || w != w0 || c != c0)
            return nn_fail(m, "model %s: add %s joins %dx%dx%d (%s) and %dx%dx%d (%s) outputs",
                           m->name, name, h0, w0, c0, nn_in_name(m, ins[0]), h, w, c,
                           nn_in_name(m, ins[j]));
    }
    nn_layer *l = nn_new_layer(m, &nn_add_ops, name, ins[0]);
    for (int j = 0; j < nin; j++) l->in[j] = ins[j];
    l->nin = nin;
    l->h = h0, l->w = w0, l->c = c0, l->relu = relu;
    return m->nlayers - 1;
}
