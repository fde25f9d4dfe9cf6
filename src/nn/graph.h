/*
 * graph.h - the model graph inside src/nn (internal): a list of layers in
 * topological order, each with a kind (an ops table), up to NN_MAX_IN
 * producers, an output shape per example, and its variables in the slabs.
 * The built-in models (models.c) are written with the nn_add_* builders.
 *
 * Layer kinds. Each kind lives in its own file, src/nn/layer_<kind>.c: its
 * nn_layer_ops (forward, backward, arena needs, description), its private
 * state (the struct l->priv points to) and its builder, which checks the
 * input shape, sets the output shape and adds the variables (parameters).
 * The numeric kernels it calls are declared in layers.h. A new kind is one
 * new file, one row in nn_layer_kinds (model.c) and its builder's prototype
 * below; model.c itself knows no kind except that the last layer is dense.
 */
#ifndef PSTRAIN_NN_GRAPH_H
#define PSTRAIN_NN_GRAPH_H

#include "kernels/layers.h"
#include "pstrain/pool.h"
#include "pstrain/model.h"

#define NN_MAX_IN 6 /* Inception-v3's Mixed_7b/7c concatenate six towers */
#define NN_LAYER_NAME_LEN 40
#define NN_INPUT (-1)  /* producer index of the model's input */
#define NN_FAILED (-2) /* what a builder returns after an error */

typedef struct nn_layer nn_layer;

/* What a kind's backward reads besides gradients and its own state
 * (nn_layer_ops.bwd_reads; the activation planner, plan.c, keeps exactly
 * these outputs alive until that backward). Every kind declares it: 0 is
 * refused, so a new kind cannot silently get its inputs freed early. */
#define NN_READS_NOTHING 1u  /* neither (pools, concat, dropout, add) */
#define NN_READS_IN 2u       /* the producers' outputs (conv, dense, batch norm) */
#define NN_READS_OUT 4u      /* its own output, always */
#define NN_READS_OUT_RELU 8u /* its own output when a ReLU is fused (the mask) */

typedef struct nn_layer_ops {
    const char *kind; /* the "kind" column of nn_model_describe */
    /* Computes l->y for n examples from the producers' outputs (nn_in_y);
     * train: the training forward (batch statistics, dropout). */
    void (*forward)(nn_model *m, nn_layer *l, int n, bool train);
    /* From l->dy: writes or adds the producers' gradients (nn_in_dy) and
     * writes the gradients of the layer's variables (nn_grad). */
    void (*backward)(nn_model *m, nn_layer *l, int n);
    /* Bytes of l->priv (the kind's own parameters and state pointers);
     * 0: none. */
    size_t priv_size;
    /* NN_READS_*: what backward reads (see above). */
    unsigned bwd_reads;
    /* Its forward writes y and its backward reads dy with rows l->ld floats
     * apart (not y by any other access): a concat may alias them
     * (nn_layer.alias). */
    bool strided;
    /* Floats of per-batch state the layer keeps in the model's arena beyond
     * its output and gradient (batch-norm statistics, pooling indices,
     * dropout masks) for max_batch B; NULL: none. The training forward
     * writes it and backward reads it; an inference forward may write it
     * (it lives during that call only). */
    size_t (*arena_floats)(const nn_layer *l, size_t B);
    /* Points that state at p (arena_floats(l, B) floats; not zeroed: the
     * bytes are shared with buffers whose lifetimes do not overlap). */
    void (*arena_bind)(nn_layer *l, float *p);
    /* Floats of scratch the layer needs during a call, shared by all layers
     * (convolution's im2col); NULL: none. */
    size_t (*scratch_floats)(const nn_layer *l, size_t B);
    /* The "detail" column of nn_model_describe ("3x3/1 pad 1 relu"). */
    void (*describe)(const nn_model *m, const nn_layer *l, char *buf, size_t len);
    /* Floating-point operations of one forward (bwd false) or backward call
     * on n examples, for the profile's GFLOP/s; NULL: not counted. */
    double (*flops)(const nn_layer *l, int n, bool bwd);
} nn_layer_ops;

/* Profiling of a layer on a pool of T > 1 threads (pool.h's nn_pool_stats
 * over its calls): seconds summed over calls. */
typedef struct nn_layer_par {
    double wall;      /* the layer's wall time on the caller */
    double loop_wall; /* of which in its parallel loops */
    double cpu;       /* CPU time of all threads in the loops' tasks */
    double busy;      /* wall time of all threads in the loops' tasks */
    double wait;      /* the caller's wait at the loops' ends */
    long loops, tasks;
} nn_layer_par;

struct nn_layer {
    const nn_layer_ops *ops;
    char name[NN_LAYER_NAME_LEN];
    int in[NN_MAX_IN], nin; /* producers (layer indices or NN_INPUT) */
    int h, w, c;            /* output shape of one example */
    bool relu;              /* ReLU fused into the output */
    int var0, nvar;         /* variables m->vars[var0, var0 + nvar) */
    float *y, *dy;          /* output and its gradient, [max_batch][h][w][c], where the
                             * bound plan puts them (dy NULL in inference) */
    bool dy_written;        /* during backward: first consumer writes, later ones add */
    bool split;             /* its gradient may come in two parts (split gradients, below) */
    float *dy2;             /* the second part where the bound plan has one (split, training) */
    bool dy2_written;       /* during backward: the second part was written */
    int alias;              /* concat without copies (model.c): the concat + 1 whose output
                             * and gradient hold this layer's y and dy as a channel slice
                             * (rows ld floats apart); 0: its own buffers */
    int alias_c0, ld;       /* the slice's first channel; floats between rows of y and dy
                             * (c unless aliased) */
    int fuse;               /* graph fusion (model.c): the partner layer + 1 when this layer
                             * runs fused with another (a batch norm and the residual add it
                             * feeds: the batch norm computes both); 0: not fused */
    void *priv;             /* the kind's struct, ops->priv_size bytes, zeroed; owned */
    double t_fwd, t_bwd;    /* profiling: seconds summed over calls */
    double f_fwd, f_bwd;    /* profiling: flops summed over calls (ops->flops) */
    double w_fwd, w_bwd;    /* profiling: task CPU time of its parallel loops */
    double s_fwd, s_bwd;    /* profiling: those tasks on profile_threads threads */
    double r_fwd, r_bwd;    /* profiling with rerun: the immediate second call */
    nn_layer_par par[2];    /* profiling on a pool: forward, backward */
};

/* Every layer kind, NULL-terminated: one row per layer_<kind>.c. */
extern const nn_layer_ops *const nn_layer_kinds[];
extern const nn_layer_ops nn_dense_ops, nn_conv_ops, nn_bn_ops, nn_maxpool_ops, nn_avgpool_ops,
    nn_dropout_ops, nn_concat_ops, nn_add_ops;

/* What to do with a variable at initialization: the distribution its
 * elements are drawn from, one after the other from the model's one seeded
 * stream (model.c init_vars; docs/torchvision.md lists which model uses
 * which, and why). */
typedef enum nn_init {
    NN_INIT_ZERO,
    NN_INIT_ONE,
    /* normal truncated to |z| <= 2 and scaled to variance 2/fan_in (TF's
     * VarianceScaling(2.0, fan_in, truncated_normal)) */
    NN_INIT_HE,
    /* U(+-sqrt(6/(fan_in + fan_out))) */
    NN_INIT_GLOROT,
    /* U(+-1/sqrt(fan_in)): PyTorch's default for Conv2d and Linear weights,
     * kaiming_uniform_(a=sqrt(5)), and biases (fan_in of their kernel) */
    NN_INIT_TORCH,
    /* N(0, 2/fan_out), not truncated: kaiming_normal_(mode='fan_out',
     * nonlinearity='relu'), torchvision's ResNets */
    NN_INIT_HE_FAN_OUT,
    /* N(0, 0.1^2) truncated to [-2, 2] (20 standard deviations):
     * trunc_normal_(std=0.1, a=-2, b=2), torchvision's inception_v3 */
    NN_INIT_NORMAL_01,
} nn_init;

typedef struct nn_var_info {
    nn_init init;
    int fan_in, fan_out;
    bool decay; /* L2 weight decay applies (kernels) */
} nn_var_info;

/* ---- activation memory plan (plan.c) -------------------------------------------- */

/* The arena buffers of a step: each layer's output y, its gradient dy
 * (training only) and its state (ops->arena_floats). Time points: in
 * training, forward of layer i at t = i, the loss at t = L (L layers),
 * backward of layer i at t = 2L - i, and t = 2L + 1 after the step (the
 * logits stay readable); in inference, forward at t = i, the loss at L,
 * L + 1 after. A buffer is live over [start, end] (both ends included):
 * from the call that first writes it to the last call that reads it.
 * Buffers whose lifetimes intersect never share a byte. */
/* NN_BUF_DY2: the second part of a split gradient (l->split, training
 * only). */
typedef enum nn_buf_kind { NN_BUF_Y, NN_BUF_DY, NN_BUF_STATE, NN_BUF_DY2 } nn_buf_kind;

typedef struct nn_buf {
    int layer;
    nn_buf_kind kind;
    int start, end; /* live over [start, end] */
    size_t floats;  /* nn_arena_round'ed: its slack is its own */
    size_t offset;  /* in floats into the arena, a multiple of NN_ARENA_ALIGN */
    size_t img;     /* floats per image of a [batch][...] buffer; 0: not per image */
} nn_buf;

/* On T > 1 threads the plan gives every float of a per-image buffer of at
 * most T * NN_PLAN_THREAD_FLOATS floats to the thread that writes it in
 * every buffer on those bytes (plan.c); larger buffers are placed freely. */
#define NN_PLAN_THREAD_FLOATS ((size_t)1 << 20)

typedef struct nn_plan {
    nn_buf *bufs;
    int nbufs;
    size_t floats; /* arena floats this plan uses */
    bool train;
} nn_plan;

/* How buffers are placed: planned (lifetimes may share bytes, the default),
 * private (every buffer its own bytes, the layout before planning; for
 * tests and for comparing), or poison (private, and every buffer is filled
 * with NaN before it is born and after it dies, so a kernel that reads a
 * buffer outside its declared lifetime changes the result; tests only). */
typedef enum nn_layout { NN_LAYOUT_PLANNED, NN_LAYOUT_PRIVATE, NN_LAYOUT_POISON } nn_layout;

struct nn_model {
    nn_model_cfg cfg;
    int width_div; /* see nn_model_new_narrow; 1 = the published widths */
    char name[32];
    nn_layer *layers;
    int nlayers, cap_layers;
    nn_var *vars;
    nn_var_info *info;
    int nvars, cap_vars;
    size_t size; /* floats per slab */
    float *params, *grads;
    float *arena; /* activations, gradients, masks, indices (plan.c) */
    size_t arena_floats;
    nn_plan plan_train, plan_infer; /* where each buffer lives in the arena, per step kind */
    const nn_plan *bound;           /* the plan the layers' pointers follow */
    nn_layout layout;
    float *scratch;        /* conv im2col scratch, shared by all convs: nn_scratch */
    size_t scratch_floats; /* all T copies */
    size_t scratch_stride; /* floats between the T per-thread copies of scratch */
    nn_pool *pool;         /* cfg.threads threads; NULL when single-threaded */
    double *red;           /* reduction partials (nn_red), red_cap doubles */
    size_t red_cap;
    const float *x; /* the batch being processed */
    int64_t step;
    bool profile;
    int profile_threads;  /* predict this many threads (0: no prediction) */
    bool profile_rerun;   /* convolutions run twice, the second time timed apart */
    float *rerun_buf;     /* its snapshots: grads, then 2 of the largest input gradient */
    double *profile_wall; /* nn_model_set_profile_wall: [2 * nlayers] wall seconds, or NULL */
    int64_t profiled_steps;
    bool failed; /* a builder failed; err holds why */
    pst_err *err;
};

/* ---- for the layer files: the graph around a layer ------------------------- */

/* Variable k of layer l in the parameter and gradient slabs. */
static inline float *nn_param(nn_model *m, const nn_layer *l, int k)
{
    return m->params + m->vars[l->var0 + k].offset;
}
static inline float *nn_grad(nn_model *m, const nn_layer *l, int k)
{
    return m->grads + m->vars[l->var0 + k].offset;
}
/* Producer j's output (the model's input for NN_INPUT). */
static inline const float *nn_in_y(nn_model *m, const nn_layer *l, int j)
{
    return l->in[j] == NN_INPUT ? m->x : m->layers[l->in[j]].y;
}
/* Split gradients (model.c, docs/design.md §11): a tensor with several
 * consumers whose gradient is read by a batch norm's backward (its own, or
 * that of the batch norm fused with the add that made it) takes its
 * gradient in two buffers: the first consumer in backward order writes dy,
 * the second writes dy2 instead of adding into dy (a third would add into
 * dy2), and the batch norm reads dy + dy2 in the passes it makes anyway.
 * That saves the read-modify-write of dy inside the second consumer (a
 * convolution's input gradient, in every resnet-20 block). Only for
 * tensors of at most NN_SPLIT_MAX_C channels: wider ones need the batch
 * norm's mask prepass to read one more stream, and their second consumers
 * (the 1x1 fast kernels) prefetch what they accumulate into, so nothing was
 * shown to be gained there (docs/design.md §11). */
#define NN_SPLIT_MAX_C 64

/* Producer j's gradient buffer (NULL for the model input) and whether this
 * consumer adds to it; marks it written. */
static inline float *nn_in_dy(nn_model *m, const nn_layer *l, int j, bool *acc)
{
    *acc = false;
    if (l->in[j] == NN_INPUT) return NULL;
    nn_layer *p = &m->layers[l->in[j]];
    if (p->dy_written && p->dy2) {
        *acc = p->dy2_written;
        p->dy2_written = true;
        return p->dy2;
    }
    *acc = p->dy_written;
    p->dy_written = true;
    return p->dy;
}
/* The second part of layer l's gradient when a consumer wrote one, else
 * NULL (split gradients). */
static inline const float *nn_dy2(const nn_layer *l)
{
    return l->dy2_written ? l->dy2 : NULL;
}
/* Graph fusion (model.c, docs/design.md §11): a batch norm without ReLU
 * whose output feeds only a two-input add that comes right after it runs
 * the add in its own passes (nn_bn_res). On by default, with split
 * gradients (see nn_in_dy); the model's nn_switches.no_fuse turns both
 * off, no_split the split gradients only (tests and benchmarks: fused
 * against unfused in one binary).
 *
 * Concat without copies (model.c, docs/design.md "Concat without copies"):
 * a producer of a strided kind (nn_layer_ops.strided: batch norm) whose
 * only consumer is a concat (not fused, not split) writes its output
 * straight into its channel slice of the concat's output and reads its
 * gradient from the concat's gradient; the concat copies only its other
 * inputs. On unless the model's nn_switches.no_alias.
 *
 * nn_fused_add: the add a batch norm computes (its fusion partner), or
 * NULL. */
static inline nn_layer *nn_fused_add(nn_model *m, const nn_layer *l)
{
    return l->fuse ? &m->layers[l->fuse - 1] : NULL;
}

/* The scratch of thread `tid` of m->pool (tid 0: the caller's, m->scratch). */
static inline float *nn_scratch(nn_model *m, int tid)
{
    return m->scratch + (size_t)tid * m->scratch_stride;
}
/* A buffer of at least n doubles for per-task partial results (grows, so
 * only from the calling thread, before nn_pool_for). */
double *nn_red(nn_model *m, size_t n);
/* Output shape of one example of producer `in` (a layer index or NN_INPUT). */
static inline void nn_in_shape(const nn_model *m, int in, int *h, int *w, int *c)
{
    if (in == NN_INPUT) {
        *h = m->cfg.height, *w = m->cfg.width, *c = m->cfg.channels;
    } else {
        const nn_layer *p = &m->layers[in];
        *h = p->h, *w = p->w, *c = p->c;
    }
}
/* "input" or the producer's layer name, for messages. */
const char *nn_in_name(const nn_model *m, int in);

/* Arena buffers are 64-byte aligned with slack after each: n floats take
 * nn_arena_round(n). */
#define NN_ARENA_ALIGN 16 /* floats */
#define NN_ARENA_SLACK 16 /* floats after each buffer */
static inline size_t nn_arena_round(size_t n)
{
    return (n + NN_ARENA_SLACK + NN_ARENA_ALIGN - 1) / NN_ARENA_ALIGN * NN_ARENA_ALIGN;
}

/* For builders: appends a layer of kind `ops` fed by `in`, with l->priv
 * allocated; the builder sets its shape and adds its variables. */
nn_layer *nn_new_layer(nn_model *m, const nn_layer_ops *ops, const char *name, int in);
/* Adds variable `suffix` ("kernel", "bias", ...) to the layer just created,
 * named "<layer>/<suffix>", at the end of the slabs. */
void nn_add_var(nn_model *m, nn_layer *l, const char *suffix, int ndim, const int *shape,
                bool trainable, nn_init init, int fan_in, int fan_out, bool decay);
/* Records a builder error (the first one wins) and returns NN_FAILED. */
int nn_fail(nn_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* nn_fail for a windowed layer (conv, pool) whose output would be empty:
 * "model M does not fit a HxWxC image: layer L (KHxKW <what>, stride S,
 * padding P) gets a HxW input from <input>" ("padding PH,PW" when they
 * differ). */
int nn_fail_no_fit(nn_model *m, const char *name, const char *what, int KH, int KW, int stride,
                   int PH, int PW, int H, int W, int in);
/* The "detail" column of a layer whose only option is a fused ReLU. */
void nn_describe_relu(const nn_model *m, const nn_layer *l, char *buf, size_t len);

/* Builders: each appends a layer fed by `in` (a layer index or NN_INPUT)
 * and returns its index, or NN_FAILED (with m->failed set and the reason in
 * m->err) when the shapes do not fit; a failed input propagates. */
int nn_add_conv(nn_model *m, const char *name, int in, int K, int KH, int KW, int stride, int pad,
                bool bias, bool relu, nn_init init);
/* nn_add_conv with separate zero padding at the top/bottom (PH) and the
 * left/right (PW): a 1x7 kernel with (PH, PW) = (0, 3) keeps the size. */
int nn_add_conv_hw(nn_model *m, const char *name, int in, int K, int KH, int KW, int stride, int PH,
                   int PW, bool bias, bool relu, nn_init init);
/* Batch norm with eps 1e-3 (TF's default, inception-mini) and with a given
 * eps (torchvision's ResNets: 1e-5). */
int nn_add_bn(nn_model *m, const char *name, int in, bool relu);
int nn_add_bn_eps(nn_model *m, const char *name, int in, bool relu, float eps);
/* conv (no bias) + batch norm + ReLU, named name and name/bn; returns the bn. */
int nn_add_conv_bn(nn_model *m, const char *name, int in, int K, int KH, int KW, int stride,
                   int pad);
/* conv (no bias, He init) named `conv` + batch norm named `bn` with `eps`,
 * ReLU when relu; padding PH, PW as nn_add_conv_hw. Returns the bn. */
int nn_add_conv_bn_named(nn_model *m, const char *conv, const char *bn, int in, int K, int KH,
                         int KW, int stride, int PH, int PW, float eps, bool relu);
/* Max or average pool; KH = KW = 0 means global (the whole image). The
 * average counts only the window's positions inside the image (TF's SAME
 * padding). */
int nn_add_pool(nn_model *m, const char *name, int in, bool max, int KH, int KW, int stride,
                int pad);
/* Average pool that divides by KH*KW, padding included (PyTorch's
 * avg_pool2d with count_include_pad=True, Inception-v3's tower pools). */
int nn_add_avgpool_count_pad(nn_model *m, const char *name, int in, int KH, int KW, int stride,
                             int pad);
/* Elementwise sum of nin >= 2 producers of one shape (a residual
 * connection), then ReLU when relu. */
int nn_add_sum(nn_model *m, const char *name, const int *ins, int nin, bool relu);
int nn_add_dense(nn_model *m, const char *name, int in, int O, bool relu);
int nn_add_dropout(nn_model *m, const char *name, int in, float rate);
int nn_add_concat(nn_model *m, const char *name, const int *ins, int nin);

/* ---- activation planning (plan.c) -------------------------------------------------- */

/* Plans both steps for m's layout and max_batch and sizes the arena (with
 * m->scratch_floats of scratch after it), which the first bind allocates.
 * -1 with m->err on failure (a layer whose output nothing uses). */
int nn_plan_model(nn_model *m);
/* Points every layer's y, dy and state where plan p puts them (no-op when
 * p is already bound), allocating the arena on first use; poison layout:
 * fills the whole arena with NaN. */
void nn_plan_bind(nn_model *m, const nn_plan *p);
/* Poison layout only (no-op otherwise): after the call at time t of the
 * bound plan, fills the buffers that died at t with NaN. */
void nn_plan_after(nn_model *m, int t);
/* Switches the layout (re-plans, reallocates the arena); tests. */
void nn_model_set_layout(nn_model *m, nn_layout layout);
/* Checks a plan on its own terms: every offset aligned, every buffer inside
 * p->floats, and no two buffers with intersecting lifetimes sharing a
 * float. false with the first violation described in why. */
bool nn_plan_check(const nn_plan *p, const nn_model *m, char *why, size_t len);
void nn_plan_free(nn_plan *p);

/* nn_model_new with resnet-50's and inception-v3's channel counts divided
 * by width_div (rounded up; the other models ignore it): narrow versions
 * of the large models whose gradients the tests check quickly. */
int nn_model_new_narrow(nn_model **out, const nn_model_cfg *cfg, int width_div, pst_err *e);
/* nn_model_new with the graph built by `build` (nn_add_* calls; returns
 * the last layer or NN_FAILED) instead of a named model: tests of graph
 * shapes no built-in model has. cfg->name names it in messages. */
int nn_model_new_graph(nn_model **out, const nn_model_cfg *cfg, int (*build)(nn_model *m),
                       pst_err *e);

/* Builds the named model into m (models.c); -1 with m->err on failure. */
int nn_build_named(nn_model *m);

#endif
