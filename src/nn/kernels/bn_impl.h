/*
 * bn_impl.h - what the batch-norm files share (internal to src/nn; the API
 * is layers.h's nn_bn_*):
 *   bn.c         the driver: blocks of rows, the pool loops, the blocks'
 *                partials reduced in block order, the per-channel statistics
 *                and constants between the passes, the entry points
 *   bn_sums.c    the summation pass: the forward's moments and the
 *                backward's sums (with the mask, the two parts and the
 *                addend's gradient), per block in the float-block order
 *   bn_affine.c  the forward's output pass: y = x*scale + shift (+ res), ReLU
 *   bn_dx.c      the backward's dx pass
 * Each pass's kernels are inlined into the few functions its file exports
 * (one call per block or range of rows), so the hot loops stay within one
 * translation unit. The helpers below are the vector idioms and the
 * backward's shared expressions (the mask) that more than one pass must
 * compute with the same bits.
 */
#ifndef PSTRAIN_NN_BN_IMPL_H
#define PSTRAIN_NN_BN_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "layers.h"

#define BN_MAX_C NN_BN_MAX_C
#define AI static inline __attribute__((always_inline))

/* ---- 16 channels at a time: GCC's generic vectors (AVX-512 registers in
 * the avx512f clones, SSE pieces in the baseline ones). Chunks of 16-64
 * channels keep their per-channel sums in registers over a block's rows;
 * each lane computes exactly the scalar expression of its channel (floats
 * in 16-lane vectors, where the avx512f clones contract x*a + b into one
 * FMA as the scalar code does; doubles in 8-lane halves), so the
 * elementwise results are the bits of a plain loop over rows and channels
 * (the sums: the order of chunk_rows). The channels past the last multiple
 * of 16 run as such a plain loop. */

/* The helpers below take and return vectors, always inlined: no call ever
 * passes one, so the ABI note GCC gives for the baseline clones is moot. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
typedef float vf16 __attribute__((vector_size(64)));
typedef int vi16 __attribute__((vector_size(64)));
typedef float vf8 __attribute__((vector_size(32)));
typedef int vi8 __attribute__((vector_size(32)));
typedef double vd8 __attribute__((vector_size(64)));

AI vf16 vld(const float *p)
{
    vf16 v;
    memcpy(&v, p, sizeof v);
    return v;
}
AI void vst(float *p, vf16 v)
{
    memcpy(p, &v, sizeof v);
}
AI void vstd(double *p, vd8 v)
{
    memcpy(p, &v, sizeof v);
}
/* lanes 0-7 / 8-15 in double */
AI vd8 vlo(vf16 v)
{
    return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), vd8);
}
AI vd8 vhi(vf16 v)
{
    return __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15),
                                   vd8);
}
/* keep > 0 ? d : +0 per lane (as the scalar `keep > 0.0f ? d : 0.0f`) */
AI vf16 vkeep(vf16 keep, vf16 d)
{
    vi16 m = keep > (vf16){0};
    return (vf16)((vi16)d & m);
}
/* The same for the 8 channels past the 16-lane chunks of 24, 40 or 56
 * channels (H8: a half chunk): each lane the scalar expression as above. */
AI vf8 vld8(const float *p)
{
    vf8 v;
    memcpy(&v, p, sizeof v);
    return v;
}
AI void vst8(float *p, vf8 v)
{
    memcpy(p, &v, sizeof v);
}
AI vd8 vcv8(vf8 v)
{
    return __builtin_convertvector(v, vd8);
}
AI vf8 vkeep8(vf8 keep, vf8 d)
{
    vi8 m = keep > (vf8){0};
    return (vf8)((vi8)d & m);
}

/* Software prefetch for the row-major passes over more than 64 channels:
 * the line BN_PF floats ahead of element e (for writing: w). Without it
 * the single pass is slower than a mask pass plus sums from L2 (the
 * masked dy's load waits for x's compare; the hardware prefetchers do not
 * keep enough lines in flight; bench_bn shows it on 25088x128 and
 * 25088x256). A hint only (a prefetch past a tensor's end does not
 * fault). */
#define BN_PF 512
AI void pf_line(const float *p, size_t e, const bool w)
{
    if (w)
        __builtin_prefetch(p + e + BN_PF, 1, 3);
    else
        __builtin_prefetch(p + e + BN_PF, 0, 3);
}
/* The same hint for the 16-64-channel chunk paths (sums, affine, dx; the
 * register-resident kernels of bn_sums.c, bn_affine.c, bn_dx.c), BN_PFC
 * floats (4 KiB) ahead of each stream: one prefetch per stream and 16
 * channels, a line each. Without it those passes wait on memory, the
 * backward most (its sums' masked dy load behind x's compare; bench_bn
 * compares them); the forward gains little. 2048 floats ahead is no
 * better. */
#define BN_PFC 1024
AI void pf_chunk(const float *p, size_t e, const bool w)
{
    if (w)
        __builtin_prefetch(p + e + BN_PFC, 1, 3);
    else
        __builtin_prefetch(p + e + BN_PFC, 0, 3);
}
/* The prefetch distance of a stream with rows ld floats apart: as many
 * rows ahead as `dist` floats are rows of C (a strided stream, a
 * concat's slice, would otherwise look only dist floats, fewer rows,
 * ahead: inception-v3's aliased batch norms would wait on memory). */
AI size_t pf_dist(size_t dist, size_t ld, size_t C)
{
    return ld == C ? dist : dist * ld / C;
}
/* A prefetch d floats past element e (a distance from pf_dist). */
AI void pf_far(const float *p, size_t e, size_t d, const bool w)
{
    if (w)
        __builtin_prefetch(p + e + d, 1, 3);
    else
        __builtin_prefetch(p + e + d, 0, 3);
}
/* ---- backward ---- */

enum { MASK_NONE, MASK_RELU, MASK_OUT }; /* no mask; own ReLU (from x); the add's (out > 0) */
enum { DRES_NONE, DRES_SET, DRES_ADD };  /* the residual's gradient: none, written, added */

/* What the backward passes read and write (one block of rows: pointers at
 * its first row). */
typedef struct bn_bw {
    const float *x, *dy, *out; /* out: the add's output (MASK_OUT) */
    const float *dy2;          /* the gradient's second part (dy + dy2), or NULL */
    size_t ldy;                /* floats between rows of dy and dy2 (C, or more when dy is
                                * a channel slice of a concat's gradient); the others: C */
    size_t pfc_dy, pfl_dy;     /* dy's prefetch distance in floats: as many rows ahead as
                                * BN_PFC / BN_PF floats are of C (pf_dist) */
    float *dres, *dx;
    const float *mean, *invstd, *scale, *shift; /* scale, shift: MASK_RELU */
    const float *a, *bterm, *g;                 /* the dx pass */
} bn_bw;

/* The masked dy, d = keep > 0 ? dy (+ dy2) : 0, keep = x*scale + shift
 * (the forward's own expression: MASK_RELU), the add's output (MASK_OUT)
 * or 1: what every backward pass reads as the gradient. dmask16: the 16
 * channels at element e (x: their input, sc/sh: their scale and shift);
 * dmask1: channel c of a row (pointers at the row). The same expression
 * per lane, so the vector and the plain loops give the same bits. */
AI vf16 dmask16(const float *dy, const float *dy2, size_t ed, const float *out, size_t e, vf16 x,
                vf16 sc, vf16 sh, const int mask, const bool two)
{
    vf16 d = vld(dy + ed);
    if (two) d = d + vld(dy2 + ed);
    if (mask == MASK_RELU) d = vkeep(x * sc + sh, d);
    if (mask == MASK_OUT) d = vkeep(vld(out + e), d);
    return d;
}

AI vf8 dmask8(const float *dy, const float *dy2, size_t ed, const float *out, size_t e, vf8 x,
              vf8 sc, vf8 sh, const int mask, const bool two)
{
    vf8 d = vld8(dy + ed);
    if (two) d = d + vld8(dy2 + ed);
    if (mask == MASK_RELU) d = vkeep8(x * sc + sh, d);
    if (mask == MASK_OUT) d = vkeep8(vld8(out + e), d);
    return d;
}

AI float dmask1(const float *x, const float *dy, const float *dy2, const float *out,
                const float *scale, const float *shift, int c, const int mask, const bool two)
{
    float keep = mask == MASK_RELU ? x[c] * scale[c] + shift[c] : mask == MASK_OUT ? out[c] : 1.0f;
    float dv = two ? dy[c] + dy2[c] : dy[c];
    return keep > 0.0f ? dv : 0.0f;
}
/* The backward's pointers moved by `rows` rows of C floats (dy, dy2: of
 * ldy floats). */
static inline bn_bw bw_at(const bn_bw *b, size_t rows, size_t C)
{
    bn_bw r = *b;
    size_t o = rows * C;
    r.x += o;
    if (r.dy) r.dy += rows * b->ldy;
    if (r.dy2) r.dy2 += rows * b->ldy;
    if (r.out) r.out += o;
    if (r.dres) r.dres += o;
    if (r.dx) r.dx += o;
    return r;
}

/* The float sums' groups of rows (bn_sums.c); the driver's blocks are runs
 * of whole groups (bn.c). */
#define BN_GROUP 8

/* ---- the passes (one call per block or range of rows) ---- */

/* bn_sums.c. The forward's sums: sum[c] of x[i][c] - s0[c], sq[c] of its
 * square over the M rows at inp (s0: the batch's first row). The
 * backward's: sdy[c] of the masked dy d (written into or added to b->dres
 * per dres), sdyx[c] of d*xhat, over the M rows at b's pointers. Both in
 * the float-block order (bn_sums.c, docs/design.md §11). */
void nn_bn_fwd_sums(double *restrict sum, double *restrict sq, const float *inp,
                    const float *restrict s0, int M, int C);
void nn_bn_grad_sums(double *sdy, double *sdyx, const bn_bw *b, int M, int C, int mask, int dres);
/* bn_affine.c: out = x*scale[c] + shift[c] (+ res), then ReLU when relu,
 * over M rows (of out: ldo floats apart; the others C). */
void nn_bn_affine(float *out, size_t ldo, const float *inp, const float *res, const float *scale,
                  const float *shift, int M, int C, bool relu);
/* bn_dx.c: dx = a*d - bterm - (x - mean)*g (written, or added when acc),
 * d the masked dy (b->dy + b->dy2), over the M rows at b's pointers. */
void nn_bn_dx(const bn_bw *b, int M, int C, int mask, bool acc);

#endif
