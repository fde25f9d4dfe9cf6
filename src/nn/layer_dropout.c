/* layer_dropout.c - inverted dropout: in training, each value is kept with
 * probability 1 - rate and scaled by 1/(1 - rate); the mask depends on
 * (seed, step, layer index) only, so steps are reproducible. Identity in
 * inference. No variables. Kernels: nn_dropout_* (layers.c). */
#include <assert.h>
#include <string.h>

#include "graph.h"

typedef struct drop_state {
    float rate;
    float *mask; /* [max_batch][h][w][c] */
} drop_state;

/* Work of a dropout call, by NN_DROPOUT_BLOCK blocks of elements (the
 * mask's streams), on the model's pool. */
typedef struct drop_job {
    float *y, *din, *mask;
    const float *x, *dy;
    size_t n;
    float rate;
    uint64_t seed;
    bool train, acc;
} drop_job;

static void drop_fwd_range(void *varg, int lo, int hi)
{
    const drop_job *j = varg;
    size_t i0 = (size_t)lo * NN_DROPOUT_BLOCK, i1 = (size_t)hi * NN_DROPOUT_BLOCK;
    if (i1 > j->n) i1 = j->n;
    if (!j->train) {
        memcpy(j->y + i0, j->x + i0, sizeof(float) * (i1 - i0));
        return;
    }
    nn_dropout_mask_range(j->mask, i0, i1, j->rate, j->seed);
    nn_dropout_forward(j->y + i0, j->x + i0, j->mask + i0, i1 - i0);
}

static void drop_bwd_range(void *varg, int lo, int hi)
{
    const drop_job *j = varg;
    size_t i0 = (size_t)lo * NN_DROPOUT_BLOCK, i1 = (size_t)hi * NN_DROPOUT_BLOCK;
    if (i1 > j->n) i1 = j->n;
    nn_dropout_backward(j->din + i0, j->acc, j->dy + i0, j->mask + i0, i1 - i0);
}

static int drop_blocks(size_t n)
{
    return (int)((n + NN_DROPOUT_BLOCK - 1) / NN_DROPOUT_BLOCK);
}

static void dropout_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    const drop_state *s = l->priv;
    drop_job j = {.y = l->y,
                  .mask = s->mask,
                  .x = nn_in_y(m, l, 0),
                  .n = (size_t)n * l->h * l->w * l->c,
                  .rate = s->rate,
                  .train = train};
    /* the mask depends on (seed, step, layer) only */
    j.seed = nn_seed_mix(m->cfg.seed, (uint64_t)m->step, (uint64_t)(l - m->layers));
    nn_pool_range(m->pool, drop_blocks(j.n), NN_DROPOUT_BLOCK, drop_fwd_range, &j);
}

static void dropout_bwd(nn_model *m, nn_layer *l, int n)
{
    const drop_state *s = l->priv;
    drop_job j = {.dy = l->dy, .mask = s->mask, .n = (size_t)n * l->h * l->w * l->c};
    j.din = nn_in_dy(m, l, 0, &j.acc);
    if (j.din) nn_pool_range(m->pool, drop_blocks(j.n), NN_DROPOUT_BLOCK, drop_bwd_range, &j);
}

static size_t dropout_arena(const nn_layer *l, size_t B)
{
    return nn_arena_round(B * l->h * l->w * l->c);
}

static void dropout_bind(nn_layer *l, float *p)
{
    ((drop_state *)l->priv)->mask = p;
}

static void dropout_describe(const nn_model *m, const nn_layer *l, char *buf, size_t len)
{
    snprintf(buf, len, "rate %.2f", ((const drop_state *)l->priv)->rate);
}

const nn_layer_ops nn_dropout_ops = {
    .kind = "dropout",
    .forward = dropout_fwd,
    .backward = dropout_bwd,
    .bwd_reads = NN_READS_NOTHING,
    .priv_size = sizeof(drop_state),
    .arena_floats = dropout_arena,
    .arena_bind = dropout_bind,
    .describe = dropout_describe,
};

int nn_add_dropout(nn_model *m, const char *name, int in, float rate)
{
    if (m->failed || in == NN_FAILED) return NN_FAILED;
    assert(rate >= 0.0f && rate < 1.0f);
    nn_layer *l = nn_new_layer(m, &nn_dropout_ops, name, in);
    nn_in_shape(m, in, &l->h, &l->w, &l->c);
    ((drop_state *)l->priv)->rate = rate;
    return m->nlayers - 1;
}
