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

static void dropout_fwd(nn_model *m, nn_layer *l, int n, bool train)
{
    const drop_state *s = l->priv;
    size_t cnt = (size_t)n * l->h * l->w * l->c;
    if (!train) {
        memcpy(l->y, nn_in_y(m, l, 0), sizeof(float) * cnt);
        return;
    }
    /* the mask depends on (seed, step, layer) only */
    uint64_t seed = nn_seed_mix(m->cfg.seed, (uint64_t)m->step, (uint64_t)(l - m->layers));
    nn_dropout_mask(s->mask, cnt, s->rate, seed);
    nn_dropout_forward(l->y, nn_in_y(m, l, 0), s->mask, cnt);
}

static void dropout_bwd(nn_model *m, nn_layer *l, int n)
{
    const drop_state *s = l->priv;
    bool acc;
    float *din = nn_in_dy(m, l, 0, &acc);
    if (din) nn_dropout_backward(din, acc, l->dy, s->mask, (size_t)n * l->h * l->w * l->c);
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
