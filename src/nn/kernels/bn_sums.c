/*
 * bn_sums.c - batch norm's summation pass (bn_impl.h): per block of rows,
 * the forward's two moments and the backward's two sums (the latter with the
 * ReLU's or the add's mask, the gradient's two parts and the addend's
 * gradient in the same pass), in the float-block order of docs/design.md
 * §11 for every channel count.
 */
#include "bn_impl.h"

/* The sums of 16-64 channels in float over short runs, then in double:
 * each group of BN_GROUP rows of a block (counted from the block's first
 * row, a multiple of BN_GROUP: bn.c) is summed in float, in two
 * accumulators (its even and its odd rows: one chain of dependent adds per
 * row was the limit at 16 and 32 channels), which are added together and
 * then, converted, into the double sums; over the groups and the blocks
 * the sums stay in double. The two conversions and double adds per row and
 * channel vector, if every row went into double, would be these
 * reductions' cost. No float sum has more than BN_GROUP / 2 terms (then one
 * add of the two), so its relative error is a few units of float
 * rounding, random across the groups. The summation order is fixed by M
 * and C alone (docs/design.md §11). */

/* Adds a group's float sums (f0[g] + f1[g]: its two accumulators) into
 * the double sums s[2g], s[2g + 1] (lanes 0-7, 8-15). */
AI void group_add(vd8 *s, const vf16 *f0, const vf16 *f1, const int NG, const bool H8, vf8 h0,
                  vf8 h1)
{
    for (int g = 0; g < NG; g++) {
        vf16 f = f0[g] + f1[g];
        s[2 * g] += vlo(f), s[2 * g + 1] += vhi(f);
    }
    if (H8) s[2 * NG] += vcv8(h0 + h1);
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
    vf8 mu8, is8, sc8, sh8; /* H8: the 8 channels after the NG chunks */
} bn_ck;

AI void ck_load(bn_ck *k, const bn_bw *b, int c0, const int NG, const bool H8, const int op,
                const int mask)
{
    for (int g = 0; g < NG; g++) {
        size_t c = (size_t)c0 + 16 * g;
        k->mu[g] = vld(b->mean + c);
        k->is[g] = op == OP_BWD ? vld(b->invstd + c) : (vf16){0};
        k->sc[g] = op == OP_BWD && mask == MASK_RELU ? vld(b->scale + c) : (vf16){0};
        k->sh[g] = op == OP_BWD && mask == MASK_RELU ? vld(b->shift + c) : (vf16){0};
    }
    if (H8) {
        size_t c = (size_t)c0 + 16 * NG;
        k->mu8 = vld8(b->mean + c);
        k->is8 = op == OP_BWD ? vld8(b->invstd + c) : (vf8){0};
        k->sc8 = op == OP_BWD && mask == MASK_RELU ? vld8(b->scale + c) : (vf8){0};
        k->sh8 = op == OP_BWD && mask == MASK_RELU ? vld8(b->shift + c) : (vf8){0};
    } else {
        k->mu8 = k->is8 = k->sc8 = k->sh8 = (vf8){0};
    }
}

/* One row (its first element at o) of 16 * NG channels into the float
 * sums fs, fq. OP_FWD: x - s and its square. OP_BWD: d = the masked dy,
 * also into dres; d and d * xhat. */
AI void row_terms(vf16 *fs, vf16 *fq, vf8 *hs, vf8 *hq, const bn_bw *b, size_t o, size_t od,
                  const bn_ck *k, const int NG, const bool H8, const int op, const int mask,
                  const int dres, const bool two)
{
    for (int g = 0; g < NG; g++) {
        size_t e = o + 16 * g, ed = od + 16 * g;
        pf_chunk(b->x, e, false);
        if (op == OP_BWD) pf_far(b->dy, ed, b->pfc_dy, false);
        if (op == OP_BWD && mask == MASK_OUT) pf_chunk(b->out, e, false);
        if (op == OP_BWD && two) pf_far(b->dy2, ed, b->pfc_dy, false);
        if (op == OP_BWD && dres != DRES_NONE) pf_chunk(b->dres, e, true);
        vf16 x = vld(b->x + e);
        if (op == OP_FWD) {
            vf16 v = x - k->mu[g];
            fs[g] += v, fq[g] += v * v;
            continue;
        }
        vf16 d = dmask16(b->dy, b->dy2, ed, b->out, e, x, k->sc[g], k->sh[g], mask, two);
        if (dres == DRES_SET) vst(b->dres + e, d);
        if (dres == DRES_ADD) vst(b->dres + e, vld(b->dres + e) + d);
        vf16 t = (x - k->mu[g]) * k->is[g];
        fs[g] += d, fq[g] += d * t;
    }
    if (H8) {
        size_t e = o + 16 * NG, ed = od + 16 * NG;
        pf_chunk(b->x, e, false);
        if (op == OP_BWD) pf_far(b->dy, ed, b->pfc_dy, false);
        if (op == OP_BWD && mask == MASK_OUT) pf_chunk(b->out, e, false);
        if (op == OP_BWD && two) pf_far(b->dy2, ed, b->pfc_dy, false);
        if (op == OP_BWD && dres != DRES_NONE) pf_chunk(b->dres, e, true);
        vf8 x = vld8(b->x + e);
        if (op == OP_FWD) {
            vf8 v = x - k->mu8;
            *hs += v, *hq += v * v;
        } else {
            vf8 d = dmask8(b->dy, b->dy2, ed, b->out, e, x, k->sc8, k->sh8, mask, two);
            if (dres == DRES_SET) vst8(b->dres + e, d);
            if (dres == DRES_ADD) vst8(b->dres + e, vld8(b->dres + e) + d);
            vf8 t = (x - k->mu8) * k->is8;
            *hs += d, *hq += d * t;
        }
    }
}

/* Rows [i0, i1) of one chunk (b's pointers at the chunk's first channel,
 * rows C floats apart) into the double sums s, q (2 * NG lanes of 8): in
 * groups of BN_GROUP rows counted from i0, each in float in two
 * accumulators (even and odd rows), the pair added and then, converted,
 * into s and q (group_add). */
AI void chunk_rows(vd8 *s, vd8 *q, const bn_bw *b, size_t C, int i0, int i1, const bn_ck *k,
                   const int NG, const bool H8, const int op, const int mask, const int dres,
                   const bool two)
{
    for (; i0 < i1; i0 += BN_GROUP) {
        int ie = i0 + BN_GROUP < i1 ? i0 + BN_GROUP : i1;
        vf16 fs0[4], fq0[4], fs1[4], fq1[4];
        vf8 hs0 = {0}, hq0 = {0}, hs1 = {0}, hq1 = {0};
        for (int g = 0; g < NG; g++) fs0[g] = fq0[g] = fs1[g] = fq1[g] = (vf16){0};
        int i = i0;
        for (; i + 1 < ie; i += 2) {
            row_terms(fs0, fq0, &hs0, &hq0, b, (size_t)i * C, (size_t)i * b->ldy, k, NG, H8, op,
                      mask, dres, two);
            row_terms(fs1, fq1, &hs1, &hq1, b, (size_t)(i + 1) * C, (size_t)(i + 1) * b->ldy, k, NG,
                      H8, op, mask, dres, two);
        }
        if (i < ie)
            row_terms(fs0, fq0, &hs0, &hq0, b, (size_t)i * C, (size_t)i * b->ldy, k, NG, H8, op,
                      mask, dres, two);
        group_add(s, fs0, fs1, NG, H8, hs0, hs1), group_add(q, fq0, fq1, NG, H8, hq0, hq1);
    }
}

/* 8, 16, 24, 32, 48 or 64 channels (NG 16-lane chunks, H8: and a half chunk of 8):
 * all M rows with the sums in registers. */
AI void sums_one(double *sum, double *sq, const bn_bw *b, int M, const int NG, const bool H8,
                 const int op, const int mask, const int dres, const bool two)
{
    bn_ck k;
    vd8 s[9], q[9];
    const int nh = 2 * NG + H8; /* 8-lane double sums */
    ck_load(&k, b, 0, NG, H8, op, mask);
    for (int h = 0; h < nh; h++) s[h] = q[h] = (vd8){0};
    chunk_rows(s, q, b, 16 * NG + 8 * H8, 0, M, &k, NG, H8, op, mask, dres, two);
    for (int h = 0; h < nh; h++) vstd(sum + 8 * h, s[h]), vstd(sq + 8 * h, q[h]);
}

/* One row (its first element at o) of C channels into the float sums in
 * memory fs, fq (C floats each): the terms of row_terms, added to them
 * (first: to 0, the group's first row into these sums). The channels past
 * the last multiple of 16 take the same expressions one by one. */
AI void row_mem(float *fs, float *fq, const bn_bw *b, size_t o, size_t od, int C, const bool first,
                const int op, const int mask, const int dres, const bool two)
{
    int cv = C / 16 * 16;
    for (int c = 0; c < cv; c += 16) {
        size_t e = o + c, ed = od + c;
        pf_line(b->x, e, false);
        if (op == OP_BWD) pf_far(b->dy, ed, b->pfl_dy, false);
        if (op == OP_BWD && mask == MASK_OUT) pf_line(b->out, e, false);
        if (op == OP_BWD && two) pf_far(b->dy2, ed, b->pfl_dy, false);
        if (op == OP_BWD && dres != DRES_NONE) pf_line(b->dres, e, true);
        vf16 x = vld(b->x + e), u, t;
        vf16 s = first ? (vf16){0} : vld(fs + c), q = first ? (vf16){0} : vld(fq + c);
        if (op == OP_FWD) {
            u = x - vld(b->mean + c), t = u;
        } else {
            vf16 sc = mask == MASK_RELU ? vld(b->scale + c) : (vf16){0};
            vf16 sh = mask == MASK_RELU ? vld(b->shift + c) : (vf16){0};
            u = dmask16(b->dy, b->dy2, ed, b->out, e, x, sc, sh, mask, two);
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
            float u = dmask1(x, b->dy + od, b->dy2 ? b->dy2 + od : NULL, b->out ? b->out + o : NULL,
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
        const size_t ld = b->ldy;
        row_mem(fb[0], fb[2], b, (size_t)i0 * C, (size_t)i0 * ld, C, true, op, mask, dres, two);
        if (i0 + 1 < ie)
            row_mem(fb[1], fb[3], b, (size_t)(i0 + 1) * C, (size_t)(i0 + 1) * ld, C, true, op, mask,
                    dres, two);
        else
            memset(fb[1], 0, sizeof(float) * C), memset(fb[3], 0, sizeof(float) * C);
        for (int i = i0 + 2; i < ie; i++)
            row_mem(fb[(i - i0) & 1], fb[2 + ((i - i0) & 1)], b, (size_t)i * C, (size_t)i * ld, C,
                    false, op, mask, dres, two);
        group_add_mem(sum, fb[0], fb[1], C), group_add_mem(sq, fb[2], fb[3], C);
    }
}

/* sum[c], sq[c] over the M rows of a block (b's pointers at its first
 * row), every channel in float over groups of BN_GROUP rows (counted from
 * the block's first row; even and odd rows apart) and in double over the
 * groups: 8, 16, 24, 32, 48 or 64 channels with the sums in registers, others
 * with the group's sums in memory; the same order for every channel. */
AI void sums_any(double *sum, double *sq, const bn_bw *b, int M, int C, const int op,
                 const int mask, const int dres, const bool two)
{
    if (C == 8)
        sums_one(sum, sq, b, M, 0, true, op, mask, dres, two);
    else if (C == 16)
        sums_one(sum, sq, b, M, 1, false, op, mask, dres, two);
    else if (C == 24)
        sums_one(sum, sq, b, M, 1, true, op, mask, dres, two);
    else if (C == 32)
        sums_one(sum, sq, b, M, 2, false, op, mask, dres, two);
    else if (C == 48)
        sums_one(sum, sq, b, M, 3, false, op, mask, dres, two);
    else if (C == 64)
        sums_one(sum, sq, b, M, 4, false, op, mask, dres, two);
    else
        sums_mem(sum, sq, b, M, C, op, mask, dres, two);
}

/* The forward's sums: sum[c] of x[i][c] - s[c], sq[c] of its square over
 * the M rows, s the batch's first row (near the mean, so that the variance
 * sq/M - (sum/M)^2 loses no digits that matter): one pass for both
 * moments. */
NN_CLONES void nn_bn_fwd_sums(double *restrict sum, double *restrict sq, const float *inp,
                              const float *restrict s0, int M, int C)
{
    bn_bw b = {.x = inp, .mean = s0};
    sums_any(sum, sq, &b, M, C, OP_FWD, MASK_NONE, DRES_NONE, false);
}

/* Each combination of mask, addend's gradient and the gradient's parts is
 * a function of its own (as the dx pass's, bn_dx.c): one function holding
 * all of them took GCC minutes (PRE and the post-reload load CSE grow
 * faster than linearly with a function's size). Each is cloned for AVX-512
 * and the baseline; the table below picks one per call (once per block of
 * rows). */
typedef void bn_grad_fn(double *sdy, double *sdyx, const bn_bw *b, int M, int C);

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

void nn_bn_grad_sums(double *sdy, double *sdyx, const bn_bw *b, int M, int C, int mask, int dres)
{
    grad_fns[mask][dres][b->dy2 != NULL](sdy, sdyx, b, M, C);
}
