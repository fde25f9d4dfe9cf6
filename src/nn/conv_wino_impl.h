/*
 * conv_wino_impl.h - what the Winograd files share: the job of one call,
 * the variant table the common driver (conv_wino.c) runs, and the two
 * variants, F(2x2, 3x3) (conv_wino2.c) and F(4x4, 3x3) (conv_wino4.c).
 *
 * A variant computes U (the transformed kernel) into the start of thread
 * 0's scratch, a task per row (u_tasks of them), then the driver cuts the
 * NT output tiles (m x m outputs each, numbered over the batch) into
 * blocks of TB; a block task transforms its input tiles into V[pos][TB][Cs]
 * (after the uf floats of U in its thread's area), multiplies them into
 * M[pos][TB][Ks] and transforms M into the output. Every output is
 * computed by one task in an order that depends on the shapes only.
 */
#ifndef PSTRAIN_NN_CONV_WINO_IMPL_H
#define PSTRAIN_NN_CONV_WINO_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "layers.h"
#include "pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define WI_X86 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,fma")))
#define INLINE __attribute__((always_inline)) inline
#else
#define WI_X86 0
#endif

typedef struct wi_variant wi_variant;

typedef struct wi_job {
    const nn_conv_dims *d; /* the convolution computed (input gradient: its transpose) */
    const float *inp, *w, *b, *dy;
    float *out, *U, *scratch;
    size_t stride;
    bool relu, acc, flip, simd;
    int TH, TW, NT; /* output tiles per column, per row, in all */
    int TB, Cs, Ks; /* tiles per block, channels rounded up to 16 */
    int S;          /* weight gradient (F(2x2)): slices */
    size_t uf, vf;  /* floats of U, of a block's V (M follows it) */
    const wi_variant *v;
} wi_job;

typedef void (*wi_in_fn)(const wi_job *j, float *V, int t0, int nt);
typedef void (*wi_gemm_fn)(const wi_job *j, float *M, const float *V);
typedef void (*wi_out_fn)(const wi_job *j, const float *M, int t0, int nt);

struct wi_variant {
    int m, pos; /* output tile m x m, transformed tile pos = (m + 2)^2 */
    /* fills TB, Cs, Ks, uf, vf from j->d and returns the tasks of u_task */
    int (*setup)(wi_job *j);
    void (*u_task)(void *arg, int r, int tid);
    /* the kernels of a block: [0] portable, [1] AVX-512 (NULL without) */
    wi_in_fn in[2];
    wi_gemm_fn gemm[2];
    wi_out_fn out[2];
};

extern const wi_variant nn_wi_f2, nn_wi_f4, nn_wi_f4d;

static inline int wi_r16(int n)
{
    return (n + 15) / 16 * 16;
}

/* Image n of global tile t (m x m outputs) and its input corner (h0, w0). */
static inline const float *wi_tile_src(const wi_job *j, int t, int *h0, int *w0)
{
    const nn_conv_dims *d = j->d;
    const int m = j->v->m;
    int per = j->TH * j->TW, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
    *h0 = m * ty - d->PH, *w0 = m * tx - d->PW;
    return j->inp + (size_t)n * d->H * d->W * d->C;
}

/* The variants' scratch floats per thread (conv_wino2.c: with the weight
 * gradient's slices when wgrad) and F(2x2)'s rule for F(4x4) shapes. */
size_t nn_wi2_scratch(const nn_conv_dims *d, bool wgrad);
size_t nn_wi4_scratch(const nn_conv_dims *d);

/* The weight gradients (layers.h's nn_wino_wgrad): F(2x2) (conv_wino2.c)
 * and F(4x4) for 16 -> 16 (conv_wino4.c). */
void nn_wi2_wgrad(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                  nn_pool *pool, float *scratch, size_t stride);
void nn_wi4_wgrad(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                  nn_pool *pool, float *scratch, size_t stride);

#endif
