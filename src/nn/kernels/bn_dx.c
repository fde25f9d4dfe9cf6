/*
 * bn_dx.c - batch norm's backward dx pass (bn_impl.h): dx = a*d - bterm -
 * (x - mean)*g per element, written or added, d the masked gradient (the
 * mask recomputed as the sums' pass does, or the addend's gradient that
 * pass wrote, read back), over a range of rows; a, bterm and g per channel
 * from the sums (bn.c).
 */
#include "bn_impl.h"

/* 8, 16, 24, 32, 48 or 64 channels (a half chunk of 8 lanes for 8 and 24): the same expressions
 * with the per-channel constants in registers (the plain loop's per-row overhead cost more than its
 * arithmetic at 16 channels). */
AI void dx_chunk(const bn_bw *b, int M, const int NG, const bool H8, const int mask, const bool acc,
                 const bool two)
{
    const int C = 16 * NG + 8 * H8;
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
    vf8 mu8 = {0}, av8 = {0}, bt8 = {0}, gv8 = {0}, sc8 = {0}, sh8 = {0};
    if (H8) {
        const int c = 16 * NG;
        mu8 = vld8(b->mean + c), av8 = vld8(b->a + c), bt8 = vld8(b->bterm + c);
        gv8 = vld8(b->g + c);
        sc8 = mask == MASK_RELU ? vld8(b->scale + c) : (vf8){0};
        sh8 = mask == MASK_RELU ? vld8(b->shift + c) : (vf8){0};
    }
    const size_t ldy = b->ldy;
    for (int i = 0; i < M; i++) {
        for (int g = 0; g < NG; g++) {
            size_t e = (size_t)i * C + 16 * g, ed = (size_t)i * ldy + 16 * g;
            pf_chunk(X, e, false), pf_far(DY, ed, b->pfc_dy, false), pf_chunk(DX, e, true);
            if (two) pf_far(DY2, ed, b->pfc_dy, false);
            if (mask == MASK_OUT) pf_chunk(OUT, e, false);
            vf16 x = vld(X + e), d = dmask16(DY, DY2, ed, OUT, e, x, sc[g], sh[g], mask, two);
            vf16 v = av[g] * d - bt[g] - (x - mu[g]) * gv[g];
            vst(DX + e, acc ? vld(DX + e) + v : v);
        }
        if (H8) {
            size_t e = (size_t)i * C + 16 * NG, ed = (size_t)i * ldy + 16 * NG;
            pf_chunk(X, e, false), pf_far(DY, ed, b->pfc_dy, false), pf_chunk(DX, e, true);
            if (two) pf_far(DY2, ed, b->pfc_dy, false);
            if (mask == MASK_OUT) pf_chunk(OUT, e, false);
            vf8 x = vld8(X + e), d = dmask8(DY, DY2, ed, OUT, e, x, sc8, sh8, mask, two);
            vf8 v = av8 * d - bt8 - (x - mu8) * gv8;
            vst8(DX + e, acc ? vld8(DX + e) + v : v);
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
        size_t o = (size_t)i * C, od = (size_t)i * b->ldy;
        for (int c = 0; c < cv; c += 16) {
            size_t e = o + c, ed = od + c;
            pf_line(b->x, e, false), pf_far(b->dy, ed, b->pfl_dy, false), pf_line(b->dx, e, true);
            if (two) pf_far(b->dy2, ed, b->pfl_dy, false);
            if (mask == MASK_OUT) pf_line(b->out, e, false);
            vf16 x = vld(b->x + e);
            vf16 sc = mask == MASK_RELU ? vld(b->scale + c) : (vf16){0};
            vf16 sh = mask == MASK_RELU ? vld(b->shift + c) : (vf16){0};
            vf16 d = dmask16(b->dy, b->dy2, ed, b->out, e, x, sc, sh, mask, two);
            vf16 v = vld(b->a + c) * d - vld(b->bterm + c) - (x - vld(b->mean + c)) * vld(b->g + c);
            vst(b->dx + e, acc ? vld(b->dx + e) + v : v);
        }
        const float *x = b->x + o;
        for (int c = cv; c < C; c++)
            dm[c - cv] =
                dmask1(x, b->dy + od, two ? b->dy2 + od : NULL,
                       mask == MASK_OUT ? b->out + o : NULL, b->scale, b->shift, c, mask, two);
        for (int c = cv; c < C; c++) {
            float v = b->a[c] * dm[c - cv] - b->bterm[c] - (x[c] - b->mean[c]) * b->g[c];
            b->dx[o + c] = acc ? b->dx[o + c] + v : v;
        }
    }
}

AI void dx_any(const bn_bw *b, int M, int C, const int mask, const bool acc, const bool two)
{
    if (C == 8)
        dx_chunk(b, M, 0, true, mask, acc, two);
    else if (C == 16)
        dx_chunk(b, M, 1, false, mask, acc, two);
    else if (C == 24)
        dx_chunk(b, M, 1, true, mask, acc, two);
    else if (C == 32)
        dx_chunk(b, M, 2, false, mask, acc, two);
    else if (C == 48)
        dx_chunk(b, M, 3, false, mask, acc, two);
    else if (C == 64)
        dx_chunk(b, M, 4, false, mask, acc, two);
    else
        dx_wide(b, M, C, mask, acc, two);
}

/* As the sums' (bn_sums.c): each combination of mask, the gradient's parts
 * and dx written or added is a function of its own (one function holding
 * all of them took GCC minutes), cloned for AVX-512 and the baseline; the
 * table below picks one per call (once per range of rows). */
typedef void bn_dx_fn(const bn_bw *b, int M, int C);

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

void nn_bn_dx(const bn_bw *b, int M, int C, int mask, bool acc)
{
    dx_fns[mask][acc][b->dy2 != NULL](b, M, C);
}
