/*
 * conv1ch.c - convolution of a one-channel image (a grayscale input layer:
 * resnet-20's stem [28][28][1] -> [28][28][16], LeNet's conv1 -> [..][6])
 * with stride 1 and at most 16 output channels.
 *
 * With C = 1 an im2col row is only KH*KW floats, and an output pixel's K
 * channels are one (masked) vector of the NHWC output. Each multiply-add
 * takes one input value broadcast straight from the padded image:
 *   forward   out[oh][ow..ow+P)[:] = bias + sum over taps t (in order) of
 *             pad[oh+kh][ow+kw+i] * w[t][:]   (P <= 14 pixels in registers)
 *   dW        dw[t][:] += pad[oh+kh][ow+kw] * dy[oh][ow][:], the image's
 *             pixels in order (9 taps' sums in registers)
 * (a 28-pixel row is two blocks of 14 sums, each weight vector serves 14
 * independent sums; dW keeps 9 independent sums, enough for both FMA
 * pipes). No transposes or scatters: holding 16 output columns of one
 * channel per vector and scattering them into NHWC would cost more than
 * the multiply-adds.
 *
 * The input gradient is never needed for such a layer (it reads the
 * model's input); callers use the general path when it is. AVX-512 only;
 * nn_conv1ch_ok() says when it applies (the portable path is im2col + BLIS).
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

#define C1_MAX_TAPS 28 /* KH*KW: dW in passes of C1_PASS taps */
#define C1_PASS 14     /* taps per dW pass: accumulators in registers */
#define C1_COLS 14     /* output pixels per forward block */

bool nn_conv1ch_ok(const nn_conv_dims *d)
{
    return C1_X86 && nn_narrow_use_simd(-1) && d->C == 1 && d->SH == 1 && d->SW == 1 &&
           d->K <= 16 && d->KH * d->KW <= C1_MAX_TAPS;
}

#if C1_X86
/* P consecutive output pixels of one row from px (the padded image at the
 * block's first window), every channel (lanes m). Inlined with constant P. */
__attribute__((always_inline)) AVX512 static inline void
c1_fwd_block(int P, float *out, const float *px, int Wp, int KH, int KW, const float *w, int K,
             __mmask16 m, __m512 b0, bool relu)
{
    __m512 acc[C1_COLS];
#pragma GCC unroll 16
    for (int i = 0; i < P; i++) acc[i] = b0;
    for (int kh = 0; kh < KH; kh++)
        for (int kw = 0; kw < KW; kw++) {
            const __m512 wv = _mm512_maskz_loadu_ps(m, w + (size_t)(kh * KW + kw) * K);
            const float *x = px + (size_t)kh * Wp + kw;
#pragma GCC unroll 16
            for (int i = 0; i < P; i++) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(x[i]), wv, acc[i]);
        }
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < P; i++)
        _mm512_mask_storeu_ps(out + (size_t)i * K, m, relu ? _mm512_max_ps(acc[i], zero) : acc[i]);
}

#define C1_FWD_CASE(P)                                                                             \
    case P:                                                                                        \
        c1_fwd_block(P, o, px, Wp, KH, KW, w, K, m, b0, relu);                                     \
        break;

AVX512 static void c1_forward(float *out, const float *pad, int Wp, int OH, int OW, int KH, int KW,
                              const float *w, int K, const float *bias, bool relu)
{
    const __mmask16 m = (__mmask16)((1u << K) - 1);
    const __m512 b0 = bias ? _mm512_maskz_loadu_ps(m, bias) : _mm512_setzero_ps();
    for (int oh = 0; oh < OH; oh++) {
        int ow = 0;
        for (; ow + C1_COLS <= OW; ow += C1_COLS)
            c1_fwd_block(C1_COLS, out + ((size_t)oh * OW + ow) * K, pad + (size_t)oh * Wp + ow, Wp,
                         KH, KW, w, K, m, b0, relu);
        if (ow == OW) continue;
        float *o = out + ((size_t)oh * OW + ow) * K;
        const float *px = pad + (size_t)oh * Wp + ow;
        switch (OW - ow) {
            C1_FWD_CASE(1)
            C1_FWD_CASE(2)
            C1_FWD_CASE(3)
            C1_FWD_CASE(4)
            C1_FWD_CASE(5)
            C1_FWD_CASE(6)
            C1_FWD_CASE(7)
            C1_FWD_CASE(8)
            C1_FWD_CASE(9)
            C1_FWD_CASE(10)
            C1_FWD_CASE(11)
            C1_FWD_CASE(12)
            C1_FWD_CASE(13)
        }
    }
}

/* dw[t][:] (+)= the image's pixels' products for taps [t0, t0+TT), and db
 * (first pass) += dy's sums. TT
 * constant: the sums stay in registers; taps past T are computed on a
 * dummy offset and dropped. */
__attribute__((always_inline)) AVX512 static inline void c1_dw_taps(int TT, int t0, float *dw,
                                                                    float *db, const float *pad,
                                                                    int Wp, int OH, int OW, int KH,
                                                                    int KW, const float *dy, int K)
{
    const int T = KH * KW;
    const __mmask16 m = (__mmask16)((1u << K) - 1);
    const __m512 zero = _mm512_setzero_ps();
    int off[C1_PASS];
    __m512 acc[C1_PASS];
#pragma GCC unroll 16
    for (int t = 0; t < TT; t++) {
        bool in = t0 + t < T;
        off[t] = in ? ((t0 + t) / KW) * Wp + (t0 + t) % KW : 0;
        acc[t] = in ? _mm512_maskz_loadu_ps(m, dw + (size_t)(t0 + t) * K) : zero;
    }
    __m512 sum = db ? _mm512_maskz_loadu_ps(m, db) : zero;
    for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
            const size_t p = (size_t)oh * OW + ow;
            const __m512 g = _mm512_maskz_loadu_ps(m, dy + p * K);
            if (db) sum = _mm512_add_ps(sum, g);
            const float *x = pad + (size_t)oh * Wp + ow;
#pragma GCC unroll 16
            for (int t = 0; t < TT; t++)
                acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(x[off[t]]), g, acc[t]);
        }
#pragma GCC unroll 16
    for (int t = 0; t < TT; t++)
        if (t0 + t < T) _mm512_mask_storeu_ps(dw + (size_t)(t0 + t) * K, m, acc[t]);
    if (db) _mm512_mask_storeu_ps(db, m, sum);
}

AVX512 static void c1_dw(float *dw, float *db, const float *pad, int Wp, int OH, int OW, int KH,
                         int KW, const float *dy, int K)
{
    const int T = KH * KW;
    if (T <= 9) {
        c1_dw_taps(9, 0, dw, db, pad, Wp, OH, OW, KH, KW, dy, K);
        return;
    }
    for (int t0 = 0; t0 < T; t0 += C1_PASS)
        c1_dw_taps(C1_PASS, t0, dw, t0 ? NULL : db, pad, Wp, OH, OW, KH, KW, dy, K);
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
                   const float *dout)
{
#if C1_X86
    c1_dw(dw, db, pad, Wp, d->OH, d->OW, d->KH, d->KW, dout, d->K);
#else
    (void)dw, (void)db, (void)pad, (void)Wp, (void)d, (void)dout;
#endif
}
