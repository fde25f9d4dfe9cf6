/*
 * model_prof.h - the profiling of a model's steps (internal to src/nn;
 * model_prof.c): per layer and direction the caller's CPU time, the flops,
 * the single-thread loop profile (pool.h's nn_pool_prof: --predict), the
 * pool's statistics on T > 1 threads (nn_pool_stats), the reruns of the
 * convolutions (nn_model_set_profile_rerun), and the report
 * (nn_model_profile_report). The public switches are in pstrain/model.h.
 *
 * model.c brackets every layer's pass, only while m->profile is on:
 *
 *     nn_prof_mark k;
 *     if (m->profile) nn_prof_begin(m, l, n, bwd, &k);
 *     l->ops->forward(...) or ->backward(...);
 *     if (m->profile) nn_prof_end_fwd(m, l, n, train, &k) or nn_prof_end_bwd(m, l, n, &k);
 */
#ifndef PSTRAIN_NN_MODEL_PROF_H
#define PSTRAIN_NN_MODEL_PROF_H

#include "graph.h"
#include "pstrain/pool.h"

/* What a layer's pass starts from. */
typedef struct nn_prof_mark {
    double t0;        /* the caller's CPU time */
    nn_pool_prof p0;  /* the single-thread loop profile */
    double wall;      /* on a pool: the wall clock ... */
    nn_pool_totals s; /* ... and the pool's statistics */
    bool rerun;       /* a convolution's backward, run again after the first (--rerun) */
    nn_layer *p;      /* the producer of its input, NULL for the model's input */
    bool written, written2;
    float *din;        /* the input gradient the backward will write or add to */
    size_t nin, ngrad; /* floats of din and of the layer's gradients */
} nn_prof_mark;

/* Before a layer's forward (bwd false) or backward: m->profile is on. */
void nn_prof_begin(nn_model *m, nn_layer *l, int n, bool bwd, nn_prof_mark *k);
/* After the forward: adds the layer's times; with rerun, a convolution's
 * forward again (it writes the same output), timed apart. */
void nn_prof_end_fwd(nn_model *m, nn_layer *l, int n, bool train, const nn_prof_mark *k);
/* After the backward: adds the layer's times; with rerun, a convolution's
 * backward again from what the first found, timed apart and checked to
 * write the same bits. */
void nn_prof_end_bwd(nn_model *m, nn_layer *l, int n, nn_prof_mark *k);

#endif
