/*
 * bn.c - batch normalization over the channels of an [M][C] matrix
 * (M = N*H*W rows for a conv output, M = N for a dense one).
 *
 *   xhat = (x - mean) * invstd,  invstd = 1/sqrt(var + eps),  y = gamma*xhat + beta
 *   backward: dbeta = sum dy, dgamma = sum dy*xhat,
 *             dx = gamma*invstd/M * (M*dy - dbeta - xhat*dgamma)
 * Sums over rows are kept in double per channel: M reaches 10^5. The
 * forward takes both moments in one pass, around the batch's first row
 * (var = E[(x-s)^2] - E[x-s]^2, s near the mean: in double no digit that
 * matters is lost), so it reads x twice, not three times. Sums are
 * taken per fixed block of rows (nn_bn_blocks) and the blocks' partials
 * added in block order, so that the *_par kernels give the same bits on any
 * number of threads.
 *
 * Memory passes (these layers are memory-bound: docs/design.md §11, "Batch
 * norm, ReLU and the residual add"): the forward reads x for the sums, then
 * reads x and writes y; the backward reads dy and x for its two sums, then
 * dy and x again and writes dx. A fused ReLU's mask is recomputed from x
 * (x*scale + shift > 0, the forward's own expression on the same floats)
 * instead of read from y and written back into dy. The residual add that
 * follows a batch norm without ReLU can be fused in (nn_bn_res, model.c):
 * the forward adds the other addend while it writes, the backward masks the
 * add's gradient with the add's output, hands it to the other addend in the
 * sums' pass and reads it back from there in the dx pass.
 *
 * Every sum runs in one order (docs/design.md section 11): per block of
 * rows, in float over groups of BN_GROUP rows and in double over the groups
 * (sums_any: 16-64-channel chunks with the sums in registers, other
 * channel counts a row at a time with the group's float sums in memory).
 * More than 64 channels: one pass for the backward's sums with the mask
 * and the addend's gradient, and software prefetch in the row-major passes. */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "pool.h"
#include "pstrain/common.h"

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

/* Software prefetch for the row-major passes over more than 64 channels:
 * the line BN_PF floats ahead of element e (for writing: w). Without it
 * the single pass ran slower than a mask pass plus sums from L2 (the
 * masked dy's load waits for x's compare; the hardware prefetchers did not
 * keep enough lines in flight): 25088x128 with ReLU 4.2-4.3 ms -> 3.1-3.5,
 * 25088x256 fused 7.8-8.6 -> 6.6-7.1 (the harness of docs/mpi-facts.md).
 * A hint only (a prefetch past a tensor's end does not fault). */
#define BN_PF 512
AI void pf_line(const float *p, size_t e, const bool w)
{
    if (w)
        __builtin_prefetch(p + e + BN_PF, 1, 3);
    else
        __builtin_prefetch(p + e + BN_PF, 0, 3);
}

/* ---- the forward's output: y = x*scale[c] + shift[c] (+ res), then ReLU ---- */

AI void affine_rows(float *out, const float *inp, const float *res, const float *scale,
                    const float *shift, int M, int C, const bool has_res, const bool relu)
{
    int cv = C / 16 * 16;
    for (int i = 0; i < M; i++) {
        size_t o = (size_t)i * C;
        for (int c = 0; c < cv; c += 16) {
            pf_line(inp, o + c, false), pf_line(out, o + c, true);
            if (has_res) pf_line(res, o + c, false);
            vf16 v = vld(inp + o + c) * vld(scale + c) + vld(shift + c);
            if (has_res) v = v + vld(res + o + c);
            vst(out + o + c, relu ? vkeep(v, v) : v);
        }
        for (int c = cv; c < C; c++) {
            float v = inp[o + c] * scale[c] + shift[c];
            if (has_res) v = v + res[o + c];
            out[o + c] = relu ? (v > 0.0f ? v : 0.0f) : v;
        }
    }
}

/* 16-64 channels: the same expression with scale and shift in registers
 * (the loop above reloads them and recomputes the row's pointers per row,
 * which cost more than the row's arithmetic here). */
AI void affine_chunk(float *out, const float *inp, const float *res, const float *scale,
                     const float *shift, int M, const int NG, const bool has_res, const bool relu)
{
    const int C = 16 * NG;
    vf16 sc[4], sh[4];
    for (int g = 0; g < NG; g++) sc[g] = vld(scale + 16 * g), sh[g] = vld(shift + 16 * g);
    for (int i = 0; i < M; i++) {
        for (int g = 0; g < NG; g++) {
            size_t e = (size_t)i * C + 16 * g;
            vf16 v = vld(inp + e) * sc[g] + sh[g];
            if (has_res) v = v + vld(res + e);
            vst(out + e, relu ? vkeep(v, v) : v);
        }
    }
}

AI void affine_any(float *out, const float *inp, const float *res, const float *scale,
                   const float *shift, int M, int C, const bool has_res, const bool relu)
{
    if (C == 16)
        affine_chunk(out, inp, res, scale, shift, M, 1, has_res, relu);
    else if (C == 32)
        affine_chunk(out, inp, res, scale, shift, M, 2, has_res, relu);
    else if (C == 48)
        affine_chunk(out, inp, res, scale, shift, M, 3, has_res, relu);
    else if (C == 64)
        affine_chunk(out, inp, res, scale, shift, M, 4, has_res, relu);
    else
        affine_rows(out, inp, res, scale, shift, M, C, has_res, relu);
}

NN_CLONES static void bn_affine(float *out, const float *inp, const float *res, const float *scale,
                                const float *shift, int M, int C, bool relu)
{
    if (res) {
        if (relu)
            affine_any(out, inp, res, scale, shift, M, C, true, true);
        else
            affine_any(out, inp, res, scale, shift, M, C, true, false);
    } else if (relu) {
        affine_any(out, inp, NULL, scale, shift, M, C, false, true);
    } else {
        affine_any(out, inp, NULL, scale, shift, M, C, false, false);
    }
}

/* The sums of 16-64 channels in float over short runs, then in double:
 * each group of BN_GROUP rows of a block (counted from the block's first
 * row) is summed in float, in two accumulators (its even and its odd rows:
 * one chain of dependent adds per row was the limit at 16 and 32
 * channels), which are added together and then, converted, into the double
 * sums; over the groups and the blocks the sums stay in double. The two
 * conversions and double adds per row and channel vector were these
 * reductions' cost before. No float sum has more than BN_GROUP / 2 terms
 * (then one add of the two), so its relative error is a few units of float
 * rounding, random across the groups. A new summation order (2026-12-01),
 * still fixed by M and C alone (docs/design.md section 11). */
#define BN_GROUP 8

/* Adds a group's float sums (f0[g] + f1[g]: its two accumulators) into
 * the double sums s[2g], s[2g + 1] (lanes 0-7, 8-15). */
AI void group_add(vd8 *s, const vf16 *f0, const vf16 *f1, const int NG)
{
    for (int g = 0; g < NG; g++) {
        vf16 f = f0[g] + f1[g];
        s[2 * g] += vlo(f), s[2 * g + 1] += vhi(f);
    }
}

/* ---- backward ---- */

enum { MASK_NONE, MASK_RELU, MASK_OUT }; /* no mask; own ReLU (from x); the add's (out > 0) */
enum { DRES_NONE, DRES_SET, DRES_ADD };  /* the residual's gradient: none, written, added */

/* What the backward passes read and write (one block of rows: pointers at
 * its first row). */
typedef struct bn_bw {
    const float *x, *dy, *out; /* out: the add's output (MASK_OUT) */
    const float *dy2;          /* the gradient's second part (dy + dy2), or NULL */
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
AI vf16 dmask16(const float *dy, const float *dy2, const float *out, size_t e, vf16 x, vf16 sc,
                vf16 sh, const int mask, const bool two)
{
    vf16 d = vld(dy + e);
    if (two) d = d + vld(dy2 + e);
    if (mask == MASK_RELU) d = vkeep(x * sc + sh, d);
    if (mask == MASK_OUT) d = vkeep(vld(out + e), d);
    return d;
}

AI float dmask1(const float *x, const float *dy, const float *dy2, const float *out,
                const float *scale, const float *shift, int c, const int mask, const bool two)
{
    float keep = mask == MASK_RELU ? x[c] * scale[c] + shift[c] : mask == MASK_OUT ? out[c] : 1.0f;
    float dv = two ? dy[c] + dy2[c] : dy[c];
    return keep > 0.0f ? dv : 0.0f;
}

/* ---- the sums: one group loop for the forward's and the backward's ----
 *
 * The forward's terms per row are v = x - s (s: the batch's first row)
 * and v*v; the backward's d (the masked dy, also written into dres) and
 * d*xhat. OP_FWD and OP_BWD pick the row's terms; the loop over a
 * chunk's groups of rows and the order of the sums are the same. */
enum { OP_FWD, OP_BWD };

/* A chunk's per-channel constants (16 * NG channels, in registers): the
 * forward's shift s in mu; the backward's mean, invstd and (MASK_RELU)
 * the affine map that gives the mask. */
typedef struct bn_ck {
    vf16 mu[4], is[4], sc[4], sh[4];
} bn_ck;

AI void ck_load(bn_ck *k, const bn_bw *b, int c0, const int NG, const int op, const int mask)
{
    for (int g = 0; g < NG; g++) {
        size_t c = (size_t)c0 + 16 * g;
        k->mu[g] = vld(b->mean + c);
        k->is[g] = op == OP_BWD ? vld(b->invstd + c) : (vf16){0};
        k->sc[g] = op == OP_BWD && mask == MASK_RELU ? vld(b->scale + c) : (vf16){0};
        k->sh[g] = op == OP_BWD && mask == MASK_RELU ? vld(b->shift + c) : (vf16){0};
    }
}

/* One row (its first element at o) of 16 * NG channels into the float
 * sums fs, fq. OP_FWD: x - s and its square. OP_BWD: d = the masked dy,
 * also into dres; d and d * xhat. */
AI void row_terms(vf16 *fs, vf16 *fq, const bn_bw *b, size_t o, const bn_ck *k, const int NG,
                  const int op, const int mask, const int dres, const bool two)
{
    for (int g = 0; g < NG; g++) {
        size_t e = o + 16 * g;
        vf16 x = vld(b->x + e);
        if (op == OP_FWD) {
            vf16 v = x - k->mu[g];
            fs[g] += v, fq[g] += v * v;
            continue;
        }
        vf16 d = dmask16(b->dy, b->dy2, b->out, e, x, k->sc[g], k->sh[g], mask, two);
        if (dres == DRES_SET) vst(b->dres + e, d);
        if (dres == DRES_ADD) vst(b->dres + e, vld(b->dres + e) + d);
        vf16 t = (x - k->mu[g]) * k->is[g];
        fs[g] += d, fq[g] += d * t;
    }
}

/* Rows [i0, i1) of one chunk (b's pointers at the chunk's first channel,
 * rows C floats apart) into the double sums s, q (2 * NG lanes of 8): in
 * groups of BN_GROUP rows counted from i0, each in float in two
 * accumulators (even and odd rows), the pair added and then, converted,
 * into s and q (group_add). */
AI void chunk_rows(vd8 *s, vd8 *q, const bn_bw *b, size_t C, int i0, int i1, const bn_ck *k,
                   const int NG, const int op, const int mask, const int dres, const bool two)
{
    for (; i0 < i1; i0 += BN_GROUP) {
        int ie = i0 + BN_GROUP < i1 ? i0 + BN_GROUP : i1;
        vf16 fs0[4], fq0[4], fs1[4], fq1[4];
        for (int g = 0; g < NG; g++) fs0[g] = fq0[g] = fs1[g] = fq1[g] = (vf16){0};
        int i = i0;
        for (; i + 1 < ie; i += 2) {
            row_terms(fs0, fq0, b, (size_t)i * C, k, NG, op, mask, dres, two);
            row_terms(fs1, fq1, b, (size_t)(i + 1) * C, k, NG, op, mask, dres, two);
        }
        if (i < ie) row_terms(fs0, fq0, b, (size_t)i * C, k, NG, op, mask, dres, two);
        group_add(s, fs0, fs1, NG), group_add(q, fq0, fq1, NG);
    }
}

/* The backward's pointers moved by o floats. */
static inline bn_bw bw_at(const bn_bw *b, size_t o)
{
    bn_bw r = *b;
    r.x += o;
    if (r.dy) r.dy += o;
    if (r.dy2) r.dy2 += o;
    if (r.out) r.out += o;
    if (r.dres) r.dres += o;
    if (r.dx) r.dx += o;
    return r;
}

/* 16, 32, 48 or 64 channels: all M rows with the sums in registers. */
AI void sums_one(double *sum, double *sq, const bn_bw *b, int M, const int NG, const int op,
                 const int mask, const int dres, const bool two)
{
    bn_ck k;
    vd8 s[8], q[8];
    ck_load(&k, b, 0, NG, op, mask);
    for (int h = 0; h < 2 * NG; h++) s[h] = q[h] = (vd8){0};
    chunk_rows(s, q, b, 16 * NG, 0, M, &k, NG, op, mask, dres, two);
    for (int h = 0; h < 2 * NG; h++) vstd(sum + 8 * h, s[h]), vstd(sq + 8 * h, q[h]);
}

/* One row (its first element at o) of C channels into the float sums in
 * memory fs, fq (C floats each): the terms of row_terms, added to them
 * (first: to 0, the group's first row into these sums). The channels past
 * the last multiple of 16 take the same expressions one by one. */
AI void row_mem(float *fs, float *fq, const bn_bw *b, size_t o, int C, const bool first,
                const int op, const int mask, const int dres, const bool two)
{
    int cv = C / 16 * 16;
    for (int c = 0; c < cv; c += 16) {
        size_t e = o + c;
        pf_line(b->x, e, false);
        if (op == OP_BWD) pf_line(b->dy, e, false);
        if (op == OP_BWD && mask == MASK_OUT) pf_line(b->out, e, false);
        if (op == OP_BWD && two) pf_line(b->dy2, e, false);
        if (op == OP_BWD && dres != DRES_NONE) pf_line(b->dres, e, true);
        vf16 x = vld(b->x + e), u, t;
        vf16 s = first ? (vf16){0} : vld(fs + c), q = first ? (vf16){0} : vld(fq + c);
        if (op == OP_FWD) {
            u = x - vld(b->mean + c), t = u;
        } else {
            vf16 sc = mask == MASK_RELU ? vld(b->scale + c) : (vf16){0};
            vf16 sh = mask == MASK_RELU ? vld(b->shift + c) : (vf16){0};
            u = dmask16(b->dy, b->dy2, b->out, e, x, sc, sh, mask, two);
            if (dres == DRES_SET) vst(b->dres + e, u);
            if (dres == DRES_ADD) vst(b->dres + e, vld(b->dres + e) + u);
            t = (x - vld(b->mean + c)) * vld(b->invstd + c);
        }
        vst(fs + c, s + u), vst(fq + c, q + u * t);
    }
    /* the masked row first, then its sums: in one loop GCC contracted the
     * two parts' sum differently into the product (nn-layers' two-part
     * test at 56 channels) */
    const float *x = b->x + o;
    float dm[16];
    if (op == OP_BWD)
        for (int c = cv; c < C; c++) {
            float u = dmask1(x, b->dy + o, b->dy2 ? b->dy2 + o : NULL, b->out ? b->out + o : NULL,
                             b->scale, b->shift, c, mask, two);
            if (dres == DRES_SET) b->dres[o + c] = u;
            if (dres == DRES_ADD) b->dres[o + c] += u;
            dm[c - cv] = u;
        }
    for (int c = cv; c < C; c++) {
        float s = first ? 0.0f : fs[c], q = first ? 0.0f : fq[c], u, t;
        if (op == OP_FWD)
            u = x[c] - b->mean[c], t = u;
        else
            u = dm[c - cv], t = (x[c] - b->mean[c]) * b->invstd[c];
        fs[c] = s + u, fq[c] = q + u * t;
    }
}

/* Adds a group's float sums in memory (f0 + f1: its even and odd rows')
 * into the double sums s (C channels). */
AI void group_add_mem(double *s, const float *f0, const float *f1, int C)
{
    int cv = C / 16 * 16;
    for (int c = 0; c < cv; c += 16) {
        vf16 f = vld(f0 + c) + vld(f1 + c);
        vd8 lo, hi;
        memcpy(&lo, s + c, 64), memcpy(&hi, s + c + 8, 64);
        vstd(s + c, lo + vlo(f)), vstd(s + c + 8, hi + vhi(f));
    }
    for (int c = cv; c < C; c++) s[c] += (double)(f0[c] + f1[c]);
}

/* Other channel counts (more than 64, or not a multiple of 16): row after
 * row over all C channels (the rows in memory order), each group's float
 * sums in memory (fb: the even rows' and the odd rows' sums of both
 * terms), then into the double sums: per channel the order of chunk_rows
 * (with as many channels per row, there are enough independent sums that
 * keeping them in memory does not stall). */
AI void sums_mem(double *sum, double *sq, const bn_bw *b, int M, int C, const int op,
                 const int mask, const int dres, const bool two)
{
    float fb[4][BN_MAX_C] __attribute__((aligned(64)));
    for (int c = 0; c < C; c++) sum[c] = 0.0, sq[c] = 0.0;
    for (int i0 = 0; i0 < M; i0 += BN_GROUP) {
        int ie = i0 + BN_GROUP < M ? i0 + BN_GROUP : M;
        row_mem(fb[0], fb[2], b, (size_t)i0 * C, C, true, op, mask, dres, two);
        if (i0 + 1 < ie)
            row_mem(fb[1], fb[3], b, (size_t)(i0 + 1) * C, C, true, op, mask, dres, two);
        else
            memset(fb[1], 0, sizeof(float) * C), memset(fb[3], 0, sizeof(float) * C);
        for (int i = i0 + 2; i < ie; i++)
            row_mem(fb[(i - i0) & 1], fb[2 + ((i - i0) & 1)], b, (size_t)i * C, C, false, op, mask,
                    dres, two);
        group_add_mem(sum, fb[0], fb[1], C), group_add_mem(sq, fb[2], fb[3], C);
    }
}

/* sum[c], sq[c] over the M rows of a block (b's pointers at its first
 * row), every channel in float over groups of BN_GROUP rows (counted from
 * the block's first row; even and odd rows apart) and in double over the
 * groups: 16, 32, 48 or 64 channels with the sums in registers, others
 * with the group's sums in memory; the same order for every channel. */
AI void sums_any(double *sum, double *sq, const bn_bw *b, int M, int C, const int op,
                 const int mask, const int dres, const bool two)
{
    if (C == 16)
        sums_one(sum, sq, b, M, 1, op, mask, dres, two);
    else if (C == 32)
        sums_one(sum, sq, b, M, 2, op, mask, dres, two);
    else if (C == 48)
        sums_one(sum, sq, b, M, 3, op, mask, dres, two);
    else if (C == 64)
        sums_one(sum, sq, b, M, 4, op, mask, dres, two);
    else
        sums_mem(sum, sq, b, M, C, op, mask, dres, two);
}

/* The forward's sums: sum[c] of x[i][c] - s[c], sq[c] of its square over
 * the M rows, s the batch's first row (near the mean, so that the variance
 * sq/M - (sum/M)^2 loses no digits that matter): one pass for both
 * moments. */
NN_CLONES static void bn_sums(double *restrict sum, double *restrict sq, const float *inp,
                              const float *restrict s0, int M, int C)
{
    bn_bw b = {.x = inp, .mean = s0};
    sums_any(sum, sq, &b, M, C, OP_FWD, MASK_NONE, DRES_NONE, false);
}

/* 16-64 channels: the same expressions with the per-channel constants in
 * registers (the plain loop's per-row overhead cost more than its
 * arithmetic at 16 channels). */
AI void dx_chunk(const bn_bw *b, int M, const int NG, const int mask, const bool acc,
                 const bool two)
{
    const int C = 16 * NG;
    const float *restrict X = b->x, *restrict DY = b->dy, *restrict DY2 = b->dy2;
    const float *restrict OUT = b->out;
    float *restrict DX = b->dx;
    vf16 mu[4], av[4], bt[4], gv[4], sc[4], sh[4];
    for (int g = 0; g < NG; g++) {
        mu[g] = vld(b->mean + 16 * g), av[g] = vld(b->a + 16 * g);
        bt[g] = vld(b->bterm + 16 * g), gv[g] = vld(b->g + 16 * g);
        sc[g] = mask == MASK_RELU ? vld(b->scale + 16 * g) : (vf16){0};
        sh[g] = mask == MASK_RELU ? vld(b->shift + 16 * g) : (vf16){0};
    }
    for (int i = 0; i < M; i++) {
        for (int g = 0; g < NG; g++) {
            size_t e = (size_t)i * C + 16 * g;
            vf16 x = vld(X + e), d = dmask16(DY, DY2, OUT, e, x, sc[g], sh[g], mask, two);
            vf16 v = av[g] * d - bt[g] - (x - mu[g]) * gv[g];
            vst(DX + e, acc ? vld(DX + e) + v : v);
        }
    }
}

/* dx = a*d - bterm - (x - mean)*g (written or added), d the masked dy:
 * other channel counts, row after row, 16 channels at a time, each
 * stream's line BN_PF floats ahead prefetched (as the sums' pass); the
 * channels past the last multiple of 16 one by one, their masked dy into
 * a row buffer first (in one loop GCC contracted the two parts' sum
 * differently into the product: nn-layers' two-part test at 56 channels). */
AI void dx_wide(const bn_bw *b, int M, int C, const int mask, const bool acc, const bool two)
{
    int cv = C / 16 * 16;
    float dm[16];
    for (int i = 0; i < M; i++) {
        size_t o = (size_t)i * C;
        for (int c = 0; c < cv; c += 16) {
            size_t e = o + c;
            pf_line(b->x, e, false), pf_line(b->dy, e, false), pf_line(b->dx, e, true);
            if (two) pf_line(b->dy2, e, false);
            if (mask == MASK_OUT) pf_line(b->out, e, false);
            vf16 x = vld(b->x + e);
            vf16 sc = mask == MASK_RELU ? vld(b->scale + c) : (vf16){0};
            vf16 sh = mask == MASK_RELU ? vld(b->shift + c) : (vf16){0};
            vf16 d = dmask16(b->dy, b->dy2, b->out, e, x, sc, sh, mask, two);
            vf16 v = vld(b->a + c) * d - vld(b->bterm + c) - (x - vld(b->mean + c)) * vld(b->g + c);
            vst(b->dx + e, acc ? vld(b->dx + e) + v : v);
        }
        const float *x = b->x + o;
        for (int c = cv; c < C; c++)
            dm[c - cv] =
                dmask1(x, b->dy + o, two ? b->dy2 + o : NULL, mask == MASK_OUT ? b->out + o : NULL,
                       b->scale, b->shift, c, mask, two);
        for (int c = cv; c < C; c++) {
            float v = b->a[c] * dm[c - cv] - b->bterm[c] - (x[c] - b->mean[c]) * b->g[c];
            b->dx[o + c] = acc ? b->dx[o + c] + v : v;
        }
    }
}

AI void dx_any(const bn_bw *b, int M, int C, const int mask, const bool acc, const bool two)
{
    if (C == 16)
        dx_chunk(b, M, 1, mask, acc, two);
    else if (C == 32)
        dx_chunk(b, M, 2, mask, acc, two);
    else if (C == 48)
        dx_chunk(b, M, 3, mask, acc, two);
    else if (C == 64)
        dx_chunk(b, M, 4, mask, acc, two);
    else
        dx_wide(b, M, C, mask, acc, two);
}

/* Each combination of mask, addend's gradient and the gradient's parts
 * (and of dx written or added) is a function of its own: one function
 * holding all of them took GCC minutes (PRE and the post-reload load CSE
 * grow faster than linearly with a function's size). Each is cloned for
 * AVX-512 and the baseline; the tables below pick one per call (once per
 * block of rows). */
typedef void bn_grad_fn(double *sdy, double *sdyx, const bn_bw *b, int M, int C);
typedef void bn_dx_fn(const bn_bw *b, int M, int C);

#define BN_GRAD_FN(mk, dr, tw)                                                                     \
    NN_CLONES __attribute__((noinline)) static void grad_##mk##_##dr##_##tw(                       \
        double *sdy, double *sdyx, const bn_bw *b, int M, int C)                                   \
    {                                                                                              \
        sums_any(sdy, sdyx, b, M, C, OP_BWD, mk, dr, tw);                                          \
    }
#define BN_GRAD_FNS(mk)                                                                            \
    BN_GRAD_FN(mk, DRES_NONE, 0)                                                                   \
    BN_GRAD_FN(mk, DRES_NONE, 1)                                                                   \
    BN_GRAD_FN(mk, DRES_SET, 0)                                                                    \
    BN_GRAD_FN(mk, DRES_SET, 1)                                                                    \
    BN_GRAD_FN(mk, DRES_ADD, 0)                                                                    \
    BN_GRAD_FN(mk, DRES_ADD, 1)
BN_GRAD_FNS(MASK_NONE)
BN_GRAD_FNS(MASK_RELU)
BN_GRAD_FNS(MASK_OUT)

#define BN_DX_FN(mk, ac, tw)                                                                       \
    NN_CLONES                                                                                      \
    __attribute__((noinline)) static void dx_##mk##_##ac##_##tw(const bn_bw *b, int M, int C)      \
    {                                                                                              \
        dx_any(b, M, C, mk, ac, tw);                                                               \
    }
#define BN_DX_FNS(mk) BN_DX_FN(mk, 0, 0) BN_DX_FN(mk, 0, 1) BN_DX_FN(mk, 1, 0) BN_DX_FN(mk, 1, 1)
BN_DX_FNS(MASK_NONE)
BN_DX_FNS(MASK_RELU)
BN_DX_FNS(MASK_OUT)

/* [mask][dres][two] */
#define BN_ROW3(p, mk)                                                                             \
    {                                                                                              \
        {p##mk##_DRES_NONE_0, p##mk##_DRES_NONE_1}, {p##mk##_DRES_SET_0, p##mk##_DRES_SET_1},      \
        {                                                                                          \
            p##mk##_DRES_ADD_0, p##mk##_DRES_ADD_1                                                 \
        }                                                                                          \
    }
static bn_grad_fn *const grad_fns[3][3][2] = {BN_ROW3(grad_, MASK_NONE), BN_ROW3(grad_, MASK_RELU),
                                              BN_ROW3(grad_, MASK_OUT)};
/* [mask][acc][two] */
#define BN_ROW2(mk)                                                                                \
    {                                                                                              \
        {dx_##mk##_0_0, dx_##mk##_0_1},                                                            \
        {                                                                                          \
            dx_##mk##_1_0, dx_##mk##_1_1                                                           \
        }                                                                                          \
    }
static bn_dx_fn *const dx_fns[3][2][2] = {BN_ROW2(MASK_NONE), BN_ROW2(MASK_RELU),
                                          BN_ROW2(MASK_OUT)};

static void bn_grad_sums(double *sdy, double *sdyx, const bn_bw *b, int M, int C, int mask,
                         int dres)
{
    grad_fns[mask][dres][b->dy2 != NULL](sdy, sdyx, b, M, C);
}

static void bn_dx(const bn_bw *b, int M, int C, int mask, bool acc)
{
    dx_fns[mask][acc][b->dy2 != NULL](b, M, C);
}

/* ---- blocks of rows: the per-channel sums are taken per block, then the
 * blocks' partials are added in block order (the determinism rule of
 * pool.h: the blocks depend on M and C only). */

int nn_bn_blocks(int M, int C)
{
    return nn_pool_nblocks(M, (size_t)C, 32768, 64);
}

size_t nn_bn_red_doubles(int M, int C)
{
    return (size_t)nn_bn_blocks(M, C) * 2 * (size_t)C;
}

typedef struct bn_job {
    float *out;
    const float *inp, *res;
    const float *scale, *shift; /* forward: the affine map */
    bn_bw bw;                   /* backward: pointers at row 0 */
    double *red;                /* [nb][2C] partials */
    int M, C, nb, mask, dres;
    bool relu, acc;
} bn_job;

static void bn_sums_task(void *varg, int b, int tid)
{
    const bn_job *j = varg;
    int lo, hi;
    nn_pool_block(j->M, j->nb, b, &lo, &hi);
    double *part = j->red + (size_t)b * 2 * j->C;
    bn_sums(part, part + j->C, j->inp + (size_t)lo * j->C, j->inp, hi - lo, j->C);
}

static void bn_affine_range(void *varg, int lo, int hi)
{
    const bn_job *j = varg;
    size_t o = (size_t)lo * j->C;
    bn_affine(j->out + o, j->inp + o, j->res ? j->res + o : NULL, j->scale, j->shift, hi - lo, j->C,
              j->relu);
}

static void bn_grad_task(void *varg, int b, int tid)
{
    const bn_job *j = varg;
    int lo, hi;
    nn_pool_block(j->M, j->nb, b, &lo, &hi);
    bn_bw w = bw_at(&j->bw, (size_t)lo * j->C);
    double *part = j->red + (size_t)b * 2 * j->C;
    bn_grad_sums(part, part + j->C, &w, hi - lo, j->C, j->mask, j->dres);
}

static void bn_dx_range(void *varg, int lo, int hi)
{
    const bn_job *j = varg;
    bn_bw w = bw_at(&j->bw, (size_t)lo * j->C);
    bn_dx(&w, hi - lo, j->C, j->mask, j->acc);
}

/* sum[c] = the blocks' partials (stride 2C) added in block order. */
static void bn_reduce(double *sum, const double *red, int nb, int C, int off)
{
    for (int c = 0; c < C; c++) sum[c] = 0.0;
    for (int b = 0; b < nb; b++) {
        const double *part = red + (size_t)b * 2 * C + off;
        for (int c = 0; c < C; c++) sum[c] += part[c];
    }
}

/* The training forward's affine map from the saved statistics; the
 * backward recomputes it for the ReLU's mask, so both call this one
 * function (the same floats, the same rounding). */
__attribute__((noinline)) static void bn_scale_shift(float *scale, float *shift, const float *gamma,
                                                     const float *beta, const float *mean,
                                                     const float *invstd, int C)
{
    for (int c = 0; c < C; c++) {
        scale[c] = gamma[c] * invstd[c];
        shift[c] = beta[c] - mean[c] * scale[c];
    }
}

void nn_bn_forward_train_par(nn_pool *pool, double *red, float *out, float *mean, float *invstd,
                             float *new_mean, float *new_var, const float *inp, const float *gamma,
                             const float *beta, const float *moving_mean, const float *moving_var,
                             int M, int C, float momentum, float eps, bool relu,
                             const nn_bn_res *res)
{
    assert(C <= BN_MAX_C && M > 0);
    double sum[BN_MAX_C], sq[BN_MAX_C];
    float scale[BN_MAX_C], shift[BN_MAX_C];
    bn_job j = {.out = out,
                .inp = inp,
                .res = res ? res->res : NULL,
                .scale = scale,
                .shift = shift,
                .red = red,
                .M = M,
                .C = C,
                .nb = nn_bn_blocks(M, C),
                .relu = res ? res->relu : relu};
    assert(!(res && relu));
    nn_pool_for(pool, j.nb, bn_sums_task, &j);
    bn_reduce(sum, red, j.nb, C, 0);
    bn_reduce(sq, red, j.nb, C, C);
    for (int c = 0; c < C; c++) {
        double d = sum[c] / M; /* mean - shift */
        mean[c] = (float)((double)inp[c] + d);
        double var = sq[c] / M - d * d;
        if (var < 0.0) var = 0.0;
        sq[c] = var * M;
        invstd[c] = (float)(1.0 / sqrt(var + eps));
        double unbiased = M > 1 ? sq[c] / (M - 1) : var;
        new_mean[c] = (float)(momentum * (double)moving_mean[c] + (1.0 - momentum) * mean[c]);
        new_var[c] = (float)(momentum * (double)moving_var[c] + (1.0 - momentum) * unbiased);
    }
    bn_scale_shift(scale, shift, gamma, beta, mean, invstd, C);
    nn_pool_range(pool, M, (size_t)(j.res ? 3 : 2) * C, bn_affine_range, &j);
}

void nn_bn_forward_infer_par(nn_pool *pool, float *out, const float *inp, const float *gamma,
                             const float *beta, const float *moving_mean, const float *moving_var,
                             int M, int C, float eps, bool relu, const nn_bn_res *res)
{
    assert(C <= BN_MAX_C && !(res && relu));
    float scale[BN_MAX_C], shift[BN_MAX_C];
    for (int c = 0; c < C; c++) {
        scale[c] = gamma[c] / sqrtf(moving_var[c] + eps);
        shift[c] = beta[c] - moving_mean[c] * scale[c];
    }
    bn_job j = {.out = out,
                .inp = inp,
                .res = res ? res->res : NULL,
                .scale = scale,
                .shift = shift,
                .M = M,
                .C = C,
                .relu = res ? res->relu : relu};
    nn_pool_range(pool, M, (size_t)(j.res ? 3 : 2) * C, bn_affine_range, &j);
}

void nn_bn_backward_par(nn_pool *pool, double *red, float *dinp, bool acc, float *dgamma,
                        float *dbeta, float *dout, const float *dout2, const float *out,
                        const float *inp, const float *gamma, const float *beta, const float *mean,
                        const float *invstd, int M, int C, bool relu, const nn_bn_res *res)
{
    assert(C <= BN_MAX_C && M > 0 && !(res && relu));
    double sdy[BN_MAX_C], sdyx[BN_MAX_C];
    float scale[BN_MAX_C], shift[BN_MAX_C];
    if (relu) bn_scale_shift(scale, shift, gamma, beta, mean, invstd, C);
    bn_job j = {.bw = {.x = inp,
                       .dy = dout,
                       .dy2 = dout2,
                       .out = res && res->relu ? out : NULL,
                       .dres = res ? res->dres : NULL,
                       .dx = dinp,
                       .mean = mean,
                       .invstd = invstd,
                       .scale = scale,
                       .shift = shift},
                .red = red,
                .M = M,
                .C = C,
                .nb = nn_bn_blocks(M, C),
                .mask = relu               ? MASK_RELU
                        : res && res->relu ? MASK_OUT
                                           : MASK_NONE,
                .dres = !res || !res->dres ? DRES_NONE
                        : res->dres_acc    ? DRES_ADD
                                           : DRES_SET,
                .acc = acc};
    nn_pool_for(pool, j.nb, bn_grad_task, &j);
    bn_reduce(sdy, red, j.nb, C, 0);
    bn_reduce(sdyx, red, j.nb, C, C);
    float a[BN_MAX_C], bterm[BN_MAX_C], g[BN_MAX_C];
    for (int c = 0; c < C; c++) {
        dbeta[c] = (float)sdy[c];
        dgamma[c] = (float)sdyx[c];
        /* dx = k*dy - k*mean(dy) - k*xhat*mean(dy*xhat), k = gamma*invstd */
        float k = gamma[c] * invstd[c];
        a[c] = k;
        bterm[c] = (float)(k * sdy[c] / M);
        g[c] = (float)(k * sdyx[c] / M) * invstd[c];
    }
    if (!dinp) return;
    j.bw.a = a, j.bw.bterm = bterm, j.bw.g = g;
    if (j.dres == DRES_SET) {
        /* the residual's gradient is the masked dy (+ dy2): read it back
         * from there */
        j.bw.dy = j.bw.dres;
        j.bw.dy2 = NULL;
        j.mask = MASK_NONE;
    }
    int streams = 3 + (j.mask == MASK_OUT) + (j.bw.dy2 != NULL);
    nn_pool_range(pool, M, (size_t)streams * C, bn_dx_range, &j);
}

/* ---- the single-threaded entry points: the same blocks, on the caller ---- */

void nn_bn_forward_train(float *out, float *mean, float *invstd, float *new_mean, float *new_var,
                         const float *inp, const float *gamma, const float *beta,
                         const float *moving_mean, const float *moving_var, int M, int C,
                         float momentum, float eps, bool relu)
{
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    nn_bn_forward_train_par(NULL, red, out, mean, invstd, new_mean, new_var, inp, gamma, beta,
                            moving_mean, moving_var, M, C, momentum, eps, relu, NULL);
    free(red);
}

void nn_bn_forward_infer(float *out, const float *inp, const float *gamma, const float *beta,
                         const float *moving_mean, const float *moving_var, int M, int C, float eps,
                         bool relu)
{
    nn_bn_forward_infer_par(NULL, out, inp, gamma, beta, moving_mean, moving_var, M, C, eps, relu,
                            NULL);
}

void nn_bn_backward(float *dinp, bool acc, float *dgamma, float *dbeta, float *dout,
                    const float *inp, const float *gamma, const float *beta, const float *mean,
                    const float *invstd, int M, int C, bool relu)
{
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    nn_bn_backward_par(NULL, red, dinp, acc, dgamma, dbeta, dout, NULL, NULL, inp, gamma, beta,
                       mean, invstd, M, C, relu, NULL);
    free(red);
}
