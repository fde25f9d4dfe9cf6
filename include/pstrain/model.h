/*
 * pstrain/model.h - the built-in models and the one-slab parameter layout.
 *
 * A model owns three contiguous float slabs of nn_model_size() floats:
 * parameters, gradients, and (in optim.h) the optimizer's slots. Variables
 * (weights, biases, batch-norm scale/shift and batch-norm moving mean and
 * variance) are views into the slab: nn_var gives each one's name, shape,
 * offset and size, in model order. A parameter server's shard is a set of
 * ranges of this slab, and moving a whole model is one transfer.
 *
 * Non-trainable state (batch-norm moving statistics) lives in the parameter
 * slab too. After nn_model_train_step, the gradient slab holds, at the
 * offsets of non-trainable variables, their NEW values (not a gradient): the
 * caller (optimizer driver or parameter server) writes them back - averaged
 * over workers in sync mode - instead of applying an optimizer. See
 * nn_model_apply_state().
 *
 * Shapes: inputs are batch-major NHWC float32 (N batch, H, W, C channels),
 * K classes. Weight decay (L2) is added to the gradients of weight kernels
 * (not biases, not batch-norm) inside train_step.
 */
#ifndef PSTRAIN_MODEL_H
#define PSTRAIN_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pstrain/common.h"

#define NN_VAR_NAME_LEN 48

typedef struct nn_var {
    char name[NN_VAR_NAME_LEN]; /* e.g. "conv1/kernel", "mixed_a/b1x1/bn/moving_mean" */
    int ndim;
    int shape[4];   /* axis 0 first; dense kernels are [in][out], conv [kh][kw][cin][cout] */
    size_t offset;  /* in floats, into the slabs */
    size_t size;    /* floats */
    bool trainable; /* false: batch-norm moving statistics */
} nn_var;

#define NN_MAX_THREADS 1024 /* nn_model_cfg.threads */

/* Kernel and graph choices of a model (docs/design.md §11 and docs/design.md §12).
 * All zero is the default: each choice where it is faster, and the results
 * are those the tests check for it. The other values exist for tests and
 * benchmarks (old against new in one binary); the library reads no
 * environment for them: the commands fill them with nn_switches_from_env. */
#define NN_WINO_AUTO 0 /* Winograd where it is faster than the direct kernels (AVX-512 only) */
#define NN_WINO_OFF 1  /* the direct kernels only */
#define NN_WINO_F2 2   /* F(2x2, 3x3) on every shape it supports, also portable */
/* as F2, and F(4x4, 3x3) for every 16 -> 16 layer and the input gradient
 * of every layer whose C and K are multiples of 16 up to 64 */
#define NN_WINO_F4 3
typedef struct nn_switches {
    int wino;             /* NN_WINO_*; PSTRAIN_WINO=0 off, 2 F2, 3 F4, else auto */
    bool no_fuse;         /* no graph fusion (nor split gradients): PSTRAIN_FUSE=0 */
    bool no_split;        /* fusion without split gradients: PSTRAIN_FUSE=1 */
    bool no_alias;        /* every concat copies its inputs: PSTRAIN_ALIAS=0 */
    bool no_shared_pad;   /* the weight gradient pads small batches per task */
    bool no_fuse_strided; /* a strided layer's input gradient in a loop of its own */
} nn_switches;

/* The switches the environment variables PSTRAIN_WINO, PSTRAIN_FUSE and
 * PSTRAIN_ALIAS set (the values above; unset or any other value: the
 * default); the others zero. The one place they are read. */
void nn_switches_from_env(nn_switches *sw);

typedef struct nn_model_cfg {
    const char *name; /* a name of nn_model_names() */
    int height, width, channels, num_classes;
    int max_batch;         /* activations are allocated for this many examples */
    uint64_t seed;         /* initialization and dropout */
    float weight_decay;    /* L2 coefficient, 0 = none */
    float label_smoothing; /* 0 = none */
    int threads; /* compute threads (at most NN_MAX_THREADS) of train/eval steps; <= 1: the caller
                    only */
    nn_switches sw; /* kernel and graph choices (zero: the defaults) */
} nn_model_cfg;

typedef struct nn_model nn_model;

/* Builds a model. Fails (with a message naming the model and the image size)
 * when the model does not fit the image size, or the name is unknown. */
int nn_model_new(nn_model **out, const nn_model_cfg *cfg, pst_err *e);
void nn_model_free(nn_model *m); /* NULL-safe */

/* The built-in models come from one table (src/nn/models.c); every list of
 * their names (--help, errors, `pstrain plan`) is derived from it. */
/* Names of the built-in models in table order, NULL-terminated. */
const char *const *nn_model_names(void);
/* Whether `name` is a built-in model (NULL: false). */
bool nn_model_known(const char *name);
/* Writes the names into buf, joined by `sep` and the last two by `last`:
 * (", ", " or ") gives "mlp, lenet5 or inception-mini". Returns buf. */
#define NN_MODEL_NAMES_LEN 256
const char *nn_model_names_join(char *buf, size_t len, const char *sep, const char *last);

size_t nn_model_size(const nn_model *m); /* floats in each slab */
float *nn_model_params(nn_model *m);
float *nn_model_grads(nn_model *m);
int nn_model_nvars(const nn_model *m);
const nn_var *nn_model_var(const nn_model *m, int i);
/* All nn_model_nvars(m) variables as one array, in model order (owned by m). */
const nn_var *nn_model_vars(const nn_model *m);

/* Text description: one line per layer with output shape and parameter
 * count, and the totals. Stored with checkpoints. */
void nn_model_describe(const nn_model *m, FILE *out);

/* Forward + loss + backward on a batch of n <= max_batch examples.
 * x: n*H*W*C normalised floats; labels: n ints in [0, K). Overwrites the
 * gradient slab (mean over the batch, plus weight decay) and, for
 * non-trainable variables, puts their new values there (see above). Returns
 * the mean loss (softmax cross-entropy with the configured label smoothing,
 * plus weight_decay/2 * |w|^2 over the kernels, whose gradient is added);
 * *ncorrect (may be NULL) gets the number of correct argmax predictions.
 * Dropout draws from (seed, step) so results are reproducible. Batch norm
 * uses the batch statistics and moves the averages with momentum 0.99
 * (variance with Bessel's correction, as TF's fused batch norm), eps 1e-3.
 * With cfg.threads = T > 1 the layers run on the model's pool of T threads
 * (the caller is one of them); the results are bitwise the same for every
 * T. A model is used by one thread at a time. */
float nn_model_train_step(nn_model *m, const float *x, const int32_t *labels, int n, int64_t step,
                          int *ncorrect);

/* Inference forward (batch norm uses the moving statistics, no dropout).
 * Returns the mean loss; *ncorrect and pred[n] (either may be NULL). */
float nn_model_eval(nn_model *m, const float *x, const int32_t *labels, int n, int *ncorrect,
                    int32_t *pred);

/* Copies the new values of non-trainable variables from `src` (a gradient
 * slab, or an average of several) into `params`, for the slab range
 * [begin, end). Both are indexed by slab offset (element i is offset i);
 * trainable entries are left alone. */
void nn_model_apply_state(const nn_model *m, float *params, const float *src, size_t begin,
                          size_t end);

/* opt_apply (optim.h) of n elements on the model's threads, in blocks of
 * 16,384 floats: the update is elementwise, so the bits do not depend on
 * the thread count. For a single-process step's update, which would
 * otherwise run on one thread (resnet-50: 25 M floats). */
struct opt_cfg;
void nn_model_opt_apply(nn_model *m, const struct opt_cfg *c, float lr, int64_t t, float *param,
                        const float *grad, float *slots, size_t slot_stride, size_t n);

/* The CPUs the model's threads are pinned to (thread t on cpu[t], t < max;
 * the placement rule of include/pstrain/pool.h: pinned when the caller's affinity
 * mask had exactly cfg.threads CPUs); returns the thread count, or 0 when
 * not pinned (one thread, or another mask). The calling thread is pinned
 * only during the model's step, evaluation and optimizer calls. */
int nn_model_pinned_cpus(const nn_model *m, int *cpu, int max);

/* ---- additions (compatible) ---------------------------------------------- */

/* The configuration the model was built with (name points into the model). */
const nn_model_cfg *nn_model_config(const nn_model *m);
/* Floats of trainable variables (the parameter count nn_model_describe prints). */
size_t nn_model_trainable_size(const nn_model *m);
/* Logits [n][K] of the last train_step or eval (owned by the model). */
const float *nn_model_logits(const nn_model *m);

/* Memory of a model for its max_batch, in bytes. Activations (each layer's
 * output, its gradient and its per-batch state) are planned: buffers whose
 * lifetimes within a step do not overlap share bytes of one arena. */
typedef struct nn_memory {
    size_t param_bytes;     /* one slab: parameters; gradients and each optimizer slot the same */
    size_t arena_bytes;     /* the activation arena: the larger of the next two */
    size_t train_bytes;     /* planned activations of a training step */
    size_t infer_bytes;     /* planned activations of an inference forward */
    size_t unplanned_bytes; /* a training step with a buffer of its own for each */
    size_t scratch_bytes;   /* scratch shared by the layers (convolution im2col) */
} nn_memory;
void nn_model_memory(const nn_model *m, nn_memory *out);
/* Prints the parameter memory (parameters, gradients, opt_slots slots of
 * optimizer `opt`) and the activation memory, planned and unplanned, in
 * bytes with units, as an indented table (--dry-run, `pstrain plan`). */
void nn_model_print_memory(const nn_model *m, int opt_slots, const char *opt, FILE *out);

/* Per-layer timing of train_step for benchmarks (off by default; costs two
 * clock reads per layer when on). The report prints the calling thread's
 * CPU microseconds per step, forward and backward, per layer, and resets
 * the counters. */
void nn_model_set_profiling(nn_model *m, bool on);
/* With profiling on, a single-threaded model also times each task of its
 * parallel loops and predicts, per layer, the time on `threads` threads
 * (pool.h's nn_pool_prof: serial parts plus list-scheduled tasks); the
 * report adds the parallel share and the predicted speedup. 0: off. */
void nn_model_set_profile_threads(nn_model *m, int threads);
void nn_model_profile_report(nn_model *m, FILE *out);
/* With profiling on, every convolution's forward and backward also runs a
 * second time right after the first, with the same inputs, and the report
 * adds its CPU time (columns "fwd rerun", "bwd rerun"): the same call with
 * the caches, TLB and predictors as the first left them, against the state
 * the preceding layers left (bench_model --rerun). The second backward is
 * checked bitwise against the first; results are those of one call. */
void nn_model_set_profile_rerun(nn_model *m, bool on);
/* Wall-time-only profiling (bench_model --compare-threads --layers): while
 * times is not NULL, train_step writes each layer's wall seconds into
 * times[2 i] (forward of layer i) and times[2 i + 1] (backward), overwriting
 * them every step (times: 2 * layers doubles, owned by the caller), and no
 * other profiling runs: no CPU-time reads (a system call each on virtual
 * machines, docs/design.md §11) and no pool statistics, only two
 * reads of the wall clock per pass. NULL: off. Not together with
 * nn_model_set_profiling. */
void nn_model_set_profile_wall(nn_model *m, double *times);

#endif
