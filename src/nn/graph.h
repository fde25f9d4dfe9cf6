/*
 * graph.h - the model graph inside src/nn (internal): a list of layers in
 * topological order, each with a kind (an ops table), up to NN_MAX_IN
 * producers, an output shape per example, and its variables in the slabs.
 * The built-in models (models.c) are written with the nn_add_* builders.
 */
#ifndef PSTRAIN_NN_GRAPH_H
#define PSTRAIN_NN_GRAPH_H

#include "layers.h"
#include "pstrain/model.h"

#define NN_MAX_IN 4
#define NN_LAYER_NAME_LEN 40
#define NN_INPUT (-1)  /* producer index of the model's input */
#define NN_FAILED (-2) /* what a builder returns after an error */

typedef struct nn_layer nn_layer;

typedef struct nn_layer_ops {
    const char *kind;
    void (*forward)(nn_model *m, nn_layer *l, int n, bool train);
    void (*backward)(nn_model *m, nn_layer *l, int n);
} nn_layer_ops;

struct nn_layer {
    const nn_layer_ops *ops;
    char name[NN_LAYER_NAME_LEN];
    int in[NN_MAX_IN], nin; /* producers (layer indices or NN_INPUT) */
    int h, w, c;            /* output shape of one example */
    bool relu;              /* ReLU fused into the output */
    int var0, nvar;         /* variables m->vars[var0, var0 + nvar) */
    float *y, *dy;          /* output and its gradient, [max_batch][h][w][c] */
    bool dy_written;        /* during backward: first consumer writes, later ones add */
    union {
        nn_conv_dims conv; /* N is set per call */
        struct {
            nn_pool_dims d;
            int32_t *argmax; /* max pool only */
        } pool;
        struct {
            float *mean, *invstd; /* [c], saved by the training forward */
        } bn;
        struct {
            float rate;
            float *mask; /* [max_batch][h][w][c] */
        } drop;
    } u;
    double t_fwd, t_bwd; /* profiling: seconds summed over calls */
};

/* What to do with a variable at initialization. */
typedef enum nn_init { NN_INIT_ZERO, NN_INIT_ONE, NN_INIT_HE, NN_INIT_GLOROT } nn_init;

typedef struct nn_var_info {
    nn_init init;
    int fan_in, fan_out;
    bool decay; /* L2 weight decay applies (kernels) */
} nn_var_info;

struct nn_model {
    nn_model_cfg cfg;
    char name[32];
    nn_layer *layers;
    int nlayers, cap_layers;
    nn_var *vars;
    nn_var_info *info;
    int nvars, cap_vars;
    size_t size; /* floats per slab */
    float *params, *grads;
    float *arena;   /* activations, gradients, masks, indices */
    float *scratch; /* conv im2col scratch, shared by all convs */
    const float *x; /* the batch being processed */
    int64_t step;
    bool profile;
    int64_t profiled_steps;
    bool failed; /* a builder failed; err holds why */
    pst_err *err;
};

/* Builders: each appends a layer fed by `in` (a layer index or NN_INPUT)
 * and returns its index, or NN_FAILED (with m->failed set and the reason in
 * m->err) when the shapes do not fit; a failed input propagates. */
int nn_add_conv(nn_model *m, const char *name, int in, int K, int KH, int KW, int stride, int pad,
                bool bias, bool relu, nn_init init);
int nn_add_bn(nn_model *m, const char *name, int in, bool relu);
/* conv (no bias) + batch norm + ReLU, named name and name/bn; returns the bn. */
int nn_add_conv_bn(nn_model *m, const char *name, int in, int K, int KH, int KW, int stride,
                   int pad);
/* Max or average pool; KH = KW = 0 means global (the whole image). */
int nn_add_pool(nn_model *m, const char *name, int in, bool max, int KH, int KW, int stride,
                int pad);
int nn_add_dense(nn_model *m, const char *name, int in, int O, bool relu);
int nn_add_dropout(nn_model *m, const char *name, int in, float rate);
int nn_add_concat(nn_model *m, const char *name, const int *ins, int nin);

/* Builds the named model into m (models.c); -1 with m->err on failure. */
int nn_build_named(nn_model *m);

#endif
