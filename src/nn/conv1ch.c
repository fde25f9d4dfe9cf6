/*
 * conv1ch.c - convolution of a one-channel image (a grayscale input layer:
 * LeNet's conv1, [28][28][1] -> [28][28][6]) with stride 1 and at most 16
 * output channels, vectorised along the output row.
 *
 * With C = 1 an im2col row is only KH*KW floats and the products have 1-16
 * output columns, so the narrow kernels fill only K of 16 lanes. Here a
 * vector holds 16 neighbouring output columns of one channel instead:
 *   forward   out[oh][ow..ow+15][k] += pad[oh+kh][ow+kw .. +15] * w[kh][kw][k]
 *   dW        dw[kh][kw][k] += sum over (oh, ow) of pad[oh+kh][ow+kw] * g[k][oh][ow]
 * where g is dout (masked by out > 0 under a fused ReLU) transposed to
 * channel-major rows. Every FMA does 16 useful products. The input
 * gradient is never needed for such a layer (it reads the model's input);
 * callers use the general path when it is.
 *
 * AVX-512 only; nn_conv1ch_ok() says when it applies.
 */
#include <string.h>

#include "layers.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define C1_X86 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#else
#define C1_X86 0
#endif

#define C1_MAX_TAPS 28 /* KH*KW: passes of 14 taps */

bool nn_conv1ch_ok(const nn_conv_dims *d)
{
    return C1_X86 && nn_narrow_use_simd(-1) && d->C == 1 && d->SH == 1 && d->SW == 1 &&
           d->K <= 16 && d->KH * d->KW <= C1_MAX_TAPS;
}

size_t nn_conv1ch_scratch(const nn_conv_dims *d)
{
    /* g: [K][OH][OW rounded up to 16] */
    return (size_t)d->K * d->OH * ((d->OW + 15) / 16 * 16) + 16;
}

#if C1_X86
static const int iota_k[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* ROWS output rows (1 or 2) of KK channels; the weights are broadcast from
 * memory, shared by the rows. Inlined with constant KK and ROWS. */
__attribute__((always_inline)) AVX512 static inline void
c1_fwd_rows(int KK, int ROWS, float *out, const float *pad, int Wp, int oh, int OW, int KH, int KW,
            const float *w, const float *bias, bool relu)
{
    const __m512i vidx = _mm512_mullo_epi32(_mm512_loadu_si512(iota_k), _mm512_set1_epi32(KK));
    const __m512 zero = _mm512_setzero_ps();
    for (int ow0 = 0; ow0 < OW; ow0 += 16) {
        int left = OW - ow0;
        __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m512 acc[2][16];
        for (int r = 0; r < ROWS; r++)
            for (int k = 0; k < KK; k++) acc[r][k] = bias ? _mm512_set1_ps(bias[k]) : zero;
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {
                const float *wk = w + (size_t)(kh * KW + kw) * KK;
                /* reads up to 15 floats past the row's last window */
                __m512 x[2];
                for (int r = 0; r < ROWS; r++)
                    x[r] = _mm512_loadu_ps(pad + (size_t)(oh + r + kh) * Wp + ow0 + kw);
                for (int k = 0; k < KK; k++) {
                    __m512 wv = _mm512_set1_ps(wk[k]);
                    for (int r = 0; r < ROWS; r++) acc[r][k] = _mm512_fmadd_ps(x[r], wv, acc[r][k]);
                }
            }
        for (int r = 0; r < ROWS; r++) {
            float *o = out + ((size_t)(oh + r) * OW + ow0) * KK;
            for (int k = 0; k < KK; k++) {
                __m512 v = relu ? _mm512_max_ps(acc[r][k], zero) : acc[r][k];
                _mm512_mask_i32scatter_ps(o + k, m, vidx, v, 4);
            }
        }
    }
}

__attribute__((always_inline)) AVX512 static inline void
c1_fwd_image(int KK, float *out, const float *pad, int Wp, int OH, int OW, int KH, int KW,
             const float *w, const float *bias, bool relu)
{
    int oh = 0;
    if (KK <= 12)
        for (; oh + 2 <= OH; oh += 2)
            c1_fwd_rows(KK, 2, out, pad, Wp, oh, OW, KH, KW, w, bias, relu);
    for (; oh < OH; oh++) c1_fwd_rows(KK, 1, out, pad, Wp, oh, OW, KH, KW, w, bias, relu);
}

#define C1_CASE(KK)                                                                                \
    case KK:                                                                                       \
        c1_fwd_image(KK, out, pad, Wp, OH, OW, KH, KW, w, bias, relu);                             \
        break;

AVX512 static void c1_forward(float *out, const float *pad, int Wp, int OH, int OW, int KH, int KW,
                              const float *w, int K, const float *bias, bool relu)
{
    switch (K) {
        C1_CASE(1)
        C1_CASE(2)
        C1_CASE(3)
        C1_CASE(4)
        C1_CASE(5)
        C1_CASE(6)
        C1_CASE(7)
        C1_CASE(8)
        C1_CASE(9)
        C1_CASE(10)
        C1_CASE(11)
        C1_CASE(12)
        C1_CASE(13)
        C1_CASE(14)
        C1_CASE(15)
        C1_CASE(16)
    }
}

/* dw[t][k] += pad windows x g and (first pass) db[k] += g sums, for one
 * image and the taps [t0, t0+TT) (TT constant: the accumulators stay in
 * registers; taps past T are computed on a dummy offset and dropped). */
__attribute__((always_inline)) AVX512 static inline void c1_dw_taps(int TT, int t0, float *dw,
                                                                    float *db, const float *pad,
                                                                    int Wp, int OH, int OW, int KH,
                                                                    int KW, const float *g, int K)
{
    const int T = KH * KW, OWp = (OW + 15) / 16 * 16;
    int off[16];
    for (int t = 0; t < TT; t++) off[t] = t0 + t < T ? ((t0 + t) / KW) * Wp + (t0 + t) % KW : 0;
    for (int k = 0; k < K; k++) {
        __m512 acc[16], sum = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int t = 0; t < TT; t++) acc[t] = _mm512_setzero_ps();
        const float *gk = g + (size_t)k * OH * OWp;
        for (int oh = 0; oh < OH; oh++)
            for (int ow0 = 0; ow0 < OW; ow0 += 16) {
                /* lanes past OW hold zeros in g */
                __m512 gv = _mm512_loadu_ps(gk + (size_t)oh * OWp + ow0);
                if (db) sum = _mm512_add_ps(sum, gv);
                const float *p = pad + (size_t)oh * Wp + ow0;
#pragma GCC unroll 16
                for (int t = 0; t < TT; t++)
                    acc[t] = _mm512_fmadd_ps(_mm512_loadu_ps(p + off[t]), gv, acc[t]);
            }
        for (int t = 0; t < TT && t0 + t < T; t++)
            dw[(size_t)(t0 + t) * K + k] += _mm512_reduce_add_ps(acc[t]);
        if (db) db[k] += _mm512_reduce_add_ps(sum);
    }
}

AVX512 static void c1_dw(float *dw, float *db, const float *pad, int Wp, int OH, int OW, int KH,
                         int KW, const float *g, int K)
{
    const int T = KH * KW;
    if (T <= 9) {
        c1_dw_taps(9, 0, dw, db, pad, Wp, OH, OW, KH, KW, g, K);
        return;
    }
    for (int t0 = 0; t0 < T; t0 += 14)
        c1_dw_taps(14, t0, dw, t0 ? NULL : db, pad, Wp, OH, OW, KH, KW, g, K);
}

/* g[k][oh][0, OWp) = dout[oh][ow][k] masked by out > 0 under ReLU, zero
 * past OW: a gather per 16 columns and channel. */
AVX512 static void c1_transpose(float *g, const float *dout, const float *out, int OH, int OW,
                                int K, bool relu)
{
    const int OWp = (OW + 15) / 16 * 16;
    const __m512i vidx = _mm512_mullo_epi32(_mm512_loadu_si512(iota_k), _mm512_set1_epi32(K));
    const __m512 zero = _mm512_setzero_ps();
    for (int oh = 0; oh < OH; oh++)
        for (int ow0 = 0; ow0 < OWp; ow0 += 16) {
            int left = OW - ow0;
            __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
            size_t base = ((size_t)oh * OW + ow0) * K;
            for (int k = 0; k < K; k++) {
                __m512 v = _mm512_mask_i32gather_ps(zero, m, vidx, dout + base + k, 4);
                if (relu) {
                    __m512 y = _mm512_mask_i32gather_ps(zero, m, vidx, out + base + k, 4);
                    v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, zero, _CMP_GT_OQ), v);
                }
                _mm512_storeu_ps(g + ((size_t)k * OH + oh) * OWp + ow0, v);
            }
        }
}
#endif

void nn_conv1ch_forward(float *out, const float *pad, int Wp, const nn_conv_dims *d, const float *w,
                        const float *bias, bool relu)
{
#if C1_X86
    c1_forward(out, pad, Wp, d->OH, d->OW, d->KH, d->KW, w, d->K, bias, relu);
#else
    (void)out, (void)pad, (void)Wp, (void)d, (void)w, (void)bias, (void)relu;
#endif
}

void nn_conv1ch_dw(float *dw, float *db, const float *pad, int Wp, const nn_conv_dims *d,
                   const float *dout, const float *out, bool relu, float *g)
{
#if C1_X86
    c1_transpose(g, dout, out, d->OH, d->OW, d->K, relu);
    c1_dw(dw, db, pad, Wp, d->OH, d->OW, d->KH, d->KW, g, d->K);
#else
    (void)dw, (void)db, (void)pad, (void)Wp, (void)d, (void)dout, (void)out, (void)relu, (void)g;
#endif
}
