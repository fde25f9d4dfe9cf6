/* layer_concat.c - concatenation of up to NN_MAX_IN producers of the same
 * height and width along the channels (the Inception towers). No
 * variables. Kernels: nn_concat_forward/backward (layers.c). An input
 * whose producer is aliased into this concat (graph.h, concat without
 * copies: it wrote its slice of l->y itself and reads its slice of l->dy)
 * is not copied either way. */
#include <assert.h>

#include "graph.h"

/* A concat call over rows [lo, hi) of the M = n*h*w rows: rows are
 * independent, so the pool's threads take ranges of rows. */
typedef struct concat_job {
    const float *ins[NN_MAX_IN];
    float *dins[NN_MAX_IN];
    bool acc[NN_MAX_IN];
    int cs[NN_MAX_IN], nin, ctot;
    float *y;
    const float *dy;
} concat_job;

static void concat_fwd_range(void *varg, int lo, int hi)
{
    const concat_job *j = varg;
    const float *ins[NN_MAX_IN];
    for (int k = 0; k < j->nin; k++) ins[k] = j->ins[k] ? j->ins[k] + (size_t)lo * j->cs[k] : NULL;
    nn_concat_forward(j->y + (size_t)lo * j->ctot, ins, j->cs, j->nin, hi - lo);
}

static void concat_bwd_range(void *varg, int lo, int hi)
{
    const concat_job *j = varg;
    float *dins[NN_MAX_IN];
    for (int k = 0; k < j->nin; k++)
        dins[k] = j->dins[k] ? j->dins[k] + (size_t)lo * j->cs[k] : NULL;
    nn_concat_backward(dins, j->acc, j->dy + (size_t)lo * j->ctot, j->cs, j->nin, hi - lo);
}

static void concat_job_init(nn_model *m, const nn_layer *l, concat_job *j)
{
    j->nin = l->nin, j->ctot = l->c;
    for (int k = 0; k < l->nin; k++) {
        int h, w;
        nn_in_shape(m, l->in[k], &h, &w, &j->cs[k]);
    }
}

/* Whether input k is aliased: its producer wrote its output into l->y
 * and reads its gradient from l->dy (graph.h, concat without copies). */
static bool aliased(const nn_model *m, const nn_layer *l, int k)
{
    return l->in[k] >= 0 && m->layers[l->in[k]].alias == (int)(l - m->layers) + 1;
}

static void concat_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    concat_job j = {.y = l->y};
    concat_job_init(m, l, &j);
    size_t copied = 0;
    for (int k = 0; k < l->nin; k++) {
        j.ins[k] = aliased(m, l, k) ? NULL : nn_in_y(m, l, k);
        if (j.ins[k]) copied += (size_t)j.cs[k];
    }
    if (copied) nn_pool_range(m->pool, n * l->h * l->w, 2 * copied, concat_fwd_range, &j);
}

static void concat_bwd(nn_model *m, nn_layer *l, int n)
{
    concat_job j = {.dy = l->dy};
    concat_job_init(m, l, &j);
    size_t copied = 0;
    for (int k = 0; k < l->nin; k++) {
        if (aliased(m, l, k)) {
            /* the producer reads its slice of l->dy */
            j.dins[k] = NULL, j.acc[k] = false;
            m->layers[l->in[k]].dy_written = true;
            continue;
        }
        j.dins[k] = nn_in_dy(m, l, k, &j.acc[k]);
        if (j.dins[k]) copied += (size_t)j.cs[k];
    }
    if (copied) nn_pool_range(m->pool, n * l->h * l->w, 2 * copied, concat_bwd_range, &j);
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
