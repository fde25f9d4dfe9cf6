/* layer_pool.c - max and average pooling (square stride and padding; a
 * 0x0 window is global pooling over the whole image; an average pool
 * counts padding or not, see nn_avgpool_forward). No variables. Max
 * pooling keeps the argmax of each output in the arena for backward.
 * Kernels: nn_maxpool_* / nn_avgpool_* (layers.c). */
#include <assert.h>

#include "graph.h"

typedef struct pool_state {
    nn_pool_dims d;  /* N is set per call */
    int32_t *argmax; /* max pool only: [max_batch][h][w][c] */
} pool_state;

/* A pooling call over images [lo, hi) of the batch: images are
 * independent (argmax offsets are within the image), so the pool's threads
 * take ranges of images. */
typedef struct pool_job {
    const pool_state *s;
    float *y, *din;
    const float *x, *dy;
    bool acc;
} pool_job;

static nn_pool_dims sub_dims(const pool_job *j, int lo, int hi, size_t *in_off, size_t *out_off)
{
    nn_pool_dims d = j->s->d;
    d.N = hi - lo;
    *in_off = (size_t)lo * d.H * d.W * d.C;
    *out_off = (size_t)lo * d.OH * d.OW * d.C;
    return d;
}

static void maxpool_fwd_range(void *varg, int lo, int hi)
{
    const pool_job *j = varg;
    size_t io, oo;
    nn_pool_dims d = sub_dims(j, lo, hi, &io, &oo);
    nn_maxpool_forward(j->y + oo, j->s->argmax + oo, j->x + io, &d);
}

static void maxpool_bwd_range(void *varg, int lo, int hi)
{
    const pool_job *j = varg;
    size_t io, oo;
    nn_pool_dims d = sub_dims(j, lo, hi, &io, &oo);
    nn_maxpool_backward(j->din + io, j->acc, j->dy + oo, j->s->argmax + oo, &d);
}

static void avgpool_fwd_range(void *varg, int lo, int hi)
{
    const pool_job *j = varg;
    size_t io, oo;
    nn_pool_dims d = sub_dims(j, lo, hi, &io, &oo);
    nn_avgpool_forward(j->y + oo, j->x + io, &d);
}

static void avgpool_bwd_range(void *varg, int lo, int hi)
{
    const pool_job *j = varg;
    size_t io, oo;
    nn_pool_dims d = sub_dims(j, lo, hi, &io, &oo);
    nn_avgpool_backward(j->din + io, j->acc, j->dy + oo, &d);
}

/* floats one image reads and writes */
static size_t image_work(const nn_layer *l)
{
    const nn_pool_dims *d = &((const pool_state *)l->priv)->d;
    return (size_t)d->H * d->W * d->C + (size_t)d->OH * d->OW * d->C;
}

static void maxpool_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    pool_job j = {.s = l->priv, .y = l->y, .x = nn_in_y(m, l, 0)};
    nn_pool_range(m->pool, n, image_work(l), maxpool_fwd_range, &j);
}

static void maxpool_bwd(nn_model *m, nn_layer *l, int n)
{
    pool_job j = {.s = l->priv, .dy = l->dy};
    j.din = nn_in_dy(m, l, 0, &j.acc);
    if (j.din) nn_pool_range(m->pool, n, image_work(l), maxpool_bwd_range, &j);
}

static void avgpool_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    pool_job j = {.s = l->priv, .y = l->y, .x = nn_in_y(m, l, 0)};
    nn_pool_range(m->pool, n, image_work(l), avgpool_fwd_range, &j);
}

static void avgpool_bwd(nn_model *m, nn_layer *l, int n)
{
    pool_job j = {.s = l->priv, .dy = l->dy};
    j.din = nn_in_dy(m, l, 0, &j.acc);
    if (j.din) nn_pool_range(m->pool, n, image_work(l), avgpool_bwd_range, &j);
}

static size_t maxpool_arena(const nn_layer *l, size_t B)
{
    return nn_arena_round(B * l->h * l->w * l->c); /* int32 and float have the same size */
}

static void maxpool_bind(nn_layer *l, float *p)
{
    ((pool_state *)l->priv)->argmax = (int32_t *)(void *)p;
}

static void pool_describe(const nn_model *m, const nn_layer *l, char *buf, size_t len)
{
    const nn_pool_dims *d = &((const pool_state *)l->priv)->d;
    snprintf(buf, len, "%dx%d/%d pad %d%s", d->KH, d->KW, d->SH, d->PH,
             d->count_pad && d->PH ? " (counted)" : "");
}

const nn_layer_ops nn_maxpool_ops = {
    .kind = "maxpool",
    .forward = maxpool_fwd,
    .backward = maxpool_bwd,
    .bwd_reads = NN_READS_NOTHING, /* its argmax state only */
    .priv_size = sizeof(pool_state),
    .arena_floats = maxpool_arena,
    .arena_bind = maxpool_bind,
    .describe = pool_describe,
};

const nn_layer_ops nn_avgpool_ops = {
    .kind = "avgpool",
    .forward = avgpool_fwd,
    .backward = avgpool_bwd,
    .bwd_reads = NN_READS_NOTHING,
    .priv_size = sizeof(pool_state),
    .describe = pool_describe,
};

static int add_pool(nn_model *m, const char *name, int in, bool max, int KH, int KW, int stride,
                    int pad, bool count_pad)
{
    if (m->failed || in == NN_FAILED) return NN_FAILED;
    nn_pool_dims d = {0};
    nn_in_shape(m, in, &d.H, &d.W, &d.C);
    if (KH == 0 && KW == 0) KH = d.H, KW = d.W, stride = 1, pad = 0; /* global */
    d.KH = KH, d.KW = KW, d.SH = d.SW = stride, d.PH = d.PW = pad, d.count_pad = count_pad;
    nn_pool_dims_finish(&d);
    if (d.OH <= 0 || d.OW <= 0)
        return nn_fail_no_fit(m, name, "pool", KH, KW, stride, pad, pad, d.H, d.W, in);
    assert(pad < KH && pad < KW);
    nn_layer *l = nn_new_layer(m, max ? &nn_maxpool_ops : &nn_avgpool_ops, name, in);
    ((pool_state *)l->priv)->d = d;
    l->h = d.OH, l->w = d.OW, l->c = d.C;
    return m->nlayers - 1;
}

int nn_add_pool(nn_model *m, const char *name, int in, bool max, int KH, int KW, int stride,
                int pad)
{
    return add_pool(m, name, in, max, KH, KW, stride, pad, false);
}

int nn_add_avgpool_count_pad(nn_model *m, const char *name, int in, int KH, int KW, int stride,
                             int pad)
{
    return add_pool(m, name, in, false, KH, KW, stride, pad, true);
}
