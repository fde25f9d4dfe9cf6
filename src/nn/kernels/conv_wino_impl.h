/*
 * conv_wino_impl.h - what the Winograd files share: the job of one call,
 * the variant table the common driver (conv_wino.c) runs, and the two
 * variants, F(2x2, 3x3) (conv_wino2.c) and F(4x4, 3x3) (conv_wino4.c).
 *
 * A variant computes U (the transformed kernel) row by row (u_row), into
 * the start of each thread's scratch or of thread 0's (conv_wino.c's
 * wino_run), and the driver cuts the NT output tiles (m x m outputs each, numbered over the batch)
 * into blocks of TB; a block task transforms its input tiles into V[pos][TB][Cs] (after the uf
 * floats of U in its thread's area), multiplies them into M[pos][TB][Ks] and transforms M into the
 * output. Every output is computed by one task in an order that depends on the shapes only.
 */
#ifndef PSTRAIN_NN_CONV_WINO_IMPL_H
#define PSTRAIN_NN_CONV_WINO_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "layers.h"
#include "pstrain/pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define WI_X86 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,fma")))
#define INLINE __attribute__((always_inline)) inline
#else
#define WI_X86 0
#endif

typedef struct wi_variant wi_variant;

#define WI_MAX_SLICES 64

typedef struct wi_job {
    const nn_conv_dims *d; /* the convolution computed (input gradient: its transpose) */
    const float *inp, *w, *b, *dy;
    float *out, *U, *scratch;
    size_t stride;
    bool relu, acc, flip, simd;
    int TH, TW, NT; /* output tiles per column, per row, in all */
    int TB, Cs, Ks; /* tiles per block (at most), channels rounded up to 16 */
    int g, nb;      /* forward, input gradient: rows of V and M computed in steps of g
                       (wi_blocks); nb blocks of whole steps */
    int S;          /* weight gradient: slices (at most WI_MAX_SLICES) */
    float **su;     /* weight gradient: slice s's sums, in the scratch of the thread that ran it */
    int nu;         /* rows of U */
    unsigned long serial; /* forward, input gradient: the call (U in each thread's scratch) */
    size_t uf, vf;        /* floats of U, of a block's V (M follows it) */
    const wi_variant *v;
} wi_job;

typedef void (*wi_in_fn)(const wi_job *j, float *V, int t0, int nt);
/* M's first `rows` rows (a multiple of j->g, at most j->TB; F(4x4): TB) */
typedef void (*wi_gemm_fn)(const wi_job *j, float *M, const float *V, const float *U, int rows);
typedef void (*wi_out_fn)(const wi_job *j, const float *M, int t0, int nt);

struct wi_variant {
    int m, pos; /* output tile m x m, transformed tile pos = (m + 2)^2 */
    /* fills TB, g, Cs, Ks, uf, vf from j->d and returns the rows of U (F(4x4): blocks of 16) */
    int (*setup)(wi_job *j);
    /* row (block) r of U (the rows are independent; each writes its own floats) */
    void (*u_row)(const wi_job *j, float *U, int r);
    /* the kernels of a block: [0] portable, [1] AVX-512 (NULL without) */
    wi_in_fn in[2];
    wi_gemm_fn gemm[2];
    wi_out_fn out[2];
};

extern const wi_variant nn_wi_f2, nn_wi_f4;

/* The kernel path and the tiling of j->d by the variant's m x m output
 * tiles: what every Winograd pass sets up first. */
static inline void wi_tile(wi_job *j)
{
    const nn_conv_dims *d = j->d;
    const int m = j->v->m;
    j->simd = WI_X86 && nn_narrow_use_simd(-1);
    j->TH = (d->OH + m - 1) / m, j->TW = (d->OW + m - 1) / m, j->NT = d->N * j->TH * j->TW;
}

/* Rows of V and M a block of nt tiles computes: nt rounded up to a
 * multiple of j->g (at most j->TB). */
static inline int wi_rows(const wi_job *j, int nt)
{
    int r = (nt + j->g - 1) / j->g * j->g;
    return r < j->TB ? r : j->TB;
}

/* The float offset of row r (clipped to the image) of image n. */
static inline size_t wi_row_at(int n, int r, int H, int W, int C)
{
    r = r < 0 ? 0 : r > H ? H : r;
    return ((size_t)n * H + (size_t)r) * W * C;
}

/* The rows of input and output that the tiles [t0, t1) reach, as float
 * offsets [*ilo, *ihi) and [*olo, *ohi) (NHWC: one range, also across
 * images). */
static inline void wi_block_rows(const wi_job *j, int t0, int t1, size_t *ilo, size_t *ihi,
                                 size_t *olo, size_t *ohi)
{
    const nn_conv_dims *d = j->d;
    const int m = j->v->m, per = j->TH * j->TW;
    int n0 = t0 / per, h0 = t0 % per / j->TW, n1 = (t1 - 1) / per, h1 = (t1 - 1) % per / j->TW;
    *ilo = wi_row_at(n0, h0 * m - d->PH, d->H, d->W, d->C);
    *ihi = wi_row_at(n1, h1 * m - d->PH + m + 2, d->H, d->W, d->C);
    *olo = wi_row_at(n0, h0 * m, d->OH, d->OW, d->K);
    *ohi = wi_row_at(n1, h1 * m + m, d->OH, d->OW, d->K);
}

/* Inside a model a block's rows come from L3 or memory (the layer before
 * wrote 3.2 MB, the output buffer was last written a step ago): the rows
 * that the next block of tb tiles adds to this one's, of the input and of
 * the output (the forward's and input gradient's, written; the weight
 * gradient's dy, read), are requested before this block's work
 * (docs/platform.md, "A layer inside a model"). Hints
 * only: the results do not change. */
static inline void wi_prefetch_next(const wi_job *j, int t0, int nt, int tb)
{
    if (t0 + nt >= j->NT) return;
    int t2 = t0 + nt + tb < j->NT ? t0 + nt + tb : j->NT;
    size_t ilo, ihi, olo, ohi, ilo2, ihi2, olo2, ohi2;
    wi_block_rows(j, t0, t0 + nt, &ilo, &ihi, &olo, &ohi);
    wi_block_rows(j, t0 + nt, t2, &ilo2, &ihi2, &olo2, &ohi2);
    for (size_t o = ihi > ilo2 ? ihi : ilo2; o < ihi2; o += 16)
        __builtin_prefetch(j->inp + o, 0, 2);
    if (j->dy) {
        for (size_t o = ohi > olo2 ? ohi : olo2; o < ohi2; o += 16)
            __builtin_prefetch(j->dy + o, 0, 2);
    } else {
        for (size_t o = ohi > olo2 ? ohi : olo2; o < ohi2; o += 16)
            __builtin_prefetch(j->out + o, 1, 2);
    }
}

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

/* Sets up j for its blocks on T threads (the tiles, the variant's sizes,
 * j->nb) and, where each thread builds its own U before its first block
 * (at least WI_OWN_TILES tiles per extra thread), a new serial for that;
 * false where U is to be built by tasks into thread 0's scratch first. */
bool nn_wi_prepare(wi_job *j, int T);
/* Block `task` of a job that nn_wi_prepare returned true for (pool task) */
void nn_wi_block_task(void *arg, int task, int tid);

/* The variants' scratch floats per thread (conv_wino2.c: with the weight
 * gradient's slices when wgrad) and F(2x2)'s rule for F(4x4) shapes. */
size_t nn_wi2_scratch(const nn_conv_dims *d, bool wgrad);
size_t nn_wi4_scratch(const nn_conv_dims *d);

/* The weight gradients (layers.h's nn_wino_wgrad): F(2x2)
 * (conv_wino2_wgrad.c) and F(4x4) for 16 -> 16 (conv_wino4_wgrad.c). */
void nn_wi2_wgrad(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                  nn_pool *pool, float *scratch, size_t stride);
/* F(2x2)'s weight gradient of d with the input gradient's job g (its
 * scratch, stride, ...: conv_wino.c) in one loop; false (nothing done)
 * where g would build U by tasks (nn_wi_prepare). Scratch floats per
 * thread: nn_wi2_bwd_scratch. */
bool nn_wi2_backward(float *dw, wi_job *g, const float *dout, const float *inp,
                     const nn_conv_dims *d, nn_pool *pool);
size_t nn_wi2_bwd_scratch(const nn_conv_dims *d);
void nn_wi4_wgrad(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                  nn_pool *pool, float *scratch, size_t stride);
/* F(4x4) for C and K multiples of 16 up to 64 other than 16 -> 16
 * (conv_wino4_wgrad.c), and its scratch floats per thread */
void nn_wi4k_wgrad(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                   nn_pool *pool, float *scratch, size_t stride);
size_t nn_wi4k_wgrad_scratch(const nn_conv_dims *d);
/* F(4x4)'s weight gradient of d (nn_wi4k_wgrad's shapes) with the F(4x4)
 * input gradient's job g in one loop; false (nothing done) where g would
 * build U by tasks (nn_wi_prepare). Scratch: nn_wi4k_wgrad_scratch. */
bool nn_wi4k_backward(float *dw, wi_job *g, const float *dout, const float *inp,
                      const nn_conv_dims *d, nn_pool *pool);

#endif
