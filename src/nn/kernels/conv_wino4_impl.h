/*
 * conv_wino4_impl.h - what F(4x4, 3x3)'s two files share: the kernel
 * transform's G, and the input transform V = B^T d B of a block of tiles
 * (portable and AVX-512), which the forward and input gradient
 * (conv_wino4.c) and the weight gradient (conv_wino4_wgrad.c) both run.
 * conv_wino4.c's header gives the points, the matrices and the error.
 * The AVX-512 transform is always inlined into each caller, as it was
 * when both lived in one file.
 */
#ifndef PSTRAIN_NN_CONV_WINO4_IMPL_H
#define PSTRAIN_NN_CONV_WINO4_IMPL_H

#include <string.h>

#include "conv_wino_impl.h"

#define W4_POS 36
#define W4_TB 12 /* tiles per block */
#define W4_U (W4_POS * 16 * 16)

static const double G4[6][3] = {{1, 0, 0},
                                {-1.0 / 3, 1.0 / 3, -1.0 / 3},
                                {1.0 / 3, 1.0 / 3, 1.0 / 3},
                                {-16.0 / 15, -8.0 / 15, -4.0 / 15},
                                {1.0 / 15, -2.0 / 15, 4.0 / 15},
                                {0, 0, 1}};

/* t[0..5] = B^T x[0..5] (one channel), s = stride of x and t */
static void bt6_port(float *t, const float *x, size_t s)
{
    float x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s], x5 = x[5 * s];
    float d31 = x3 - x1, d42 = x4 - x2;
    t[0] = (x0 + x4) - 2 * x2 + 1.5f * d31;
    t[s] = (x1 + x4) - 2.5f * x2 + 0.5f * x3;
    t[2 * s] = (x4 - x1) + 0.5f * x2 + 2.5f * x3;
    t[3 * s] = d42 + 2 * d31;
    t[4 * s] = d42 - 0.5f * d31;
    t[5 * s] = (x1 + x5) - 2 * x3 + 1.5f * d42;
}

/* V[p][i][c] for tiles t0 + i, i < tb (zero past nt), positions ps floats
 * apart (at least tb C) */
static void in4_tiles_port(const wi_job *j, float *V, int t0, int nt, int tb, size_t ps)
{
    const nn_conv_dims *d = j->d;
    const int C = d->C;
    for (int i = 0; i < tb; i++) {
        if (i >= nt) {
            for (int p = 0; p < W4_POS; p++)
                memset(V + p * ps + (size_t)i * C, 0, sizeof(float) * C);
            continue;
        }
        int h0, w0;
        const float *img = wi_tile_src(j, t0 + i, &h0, &w0);
        for (int c = 0; c < C; c++) {
            float x[6][6], t[6][6];
            for (int a = 0; a < 6; a++)
                for (int b = 0; b < 6; b++) {
                    int h = h0 + a, w = w0 + b;
                    bool in = h >= 0 && h < d->H && w >= 0 && w < d->W;
                    x[a][b] = in ? img[((size_t)h * d->W + w) * C + c] : 0.0f;
                }
            for (int b = 0; b < 6; b++) bt6_port(&t[0][b], &x[0][b], 6);
            for (int a = 0; a < 6; a++) bt6_port(&x[a][0], &t[a][0], 1);
            for (int p = 0; p < W4_POS; p++) V[p * ps + (size_t)i * C + c] = x[p / 6][p % 6];
        }
    }
}

#if WI_X86
/* t[0..5] = B^T x[0..5], 16 channels, the order of bt6_port */
#define BT6(t, x)                                                                                  \
    do {                                                                                           \
        const __m512 f2 = _mm512_set1_ps(2.0f), f15 = _mm512_set1_ps(1.5f),                        \
                     f25 = _mm512_set1_ps(2.5f), f05 = _mm512_set1_ps(0.5f);                       \
        __m512 d31 = _mm512_sub_ps(x[3], x[1]), d42 = _mm512_sub_ps(x[4], x[2]);                   \
        t[0] = _mm512_fmadd_ps(f15, d31, _mm512_fnmadd_ps(f2, x[2], _mm512_add_ps(x[0], x[4])));   \
        t[1] = _mm512_fmadd_ps(f05, x[3], _mm512_fnmadd_ps(f25, x[2], _mm512_add_ps(x[1], x[4]))); \
        t[2] = _mm512_fmadd_ps(f25, x[3], _mm512_fmadd_ps(f05, x[2], _mm512_sub_ps(x[4], x[1])));  \
        t[3] = _mm512_fmadd_ps(f2, d31, d42);                                                      \
        t[4] = _mm512_fnmadd_ps(f05, d31, d42);                                                    \
        t[5] = _mm512_fmadd_ps(f15, d42, _mm512_fnmadd_ps(f2, x[3], _mm512_add_ps(x[1], x[5])));   \
    } while (0)

/* V[p] (stride ps) of one tile from its 6 x 6 patch of 16 channels at src:
 * rows rs floats apart, pixels cs apart */
AVX512 static INLINE void in4_tile(float *v, size_t ps, const float *src, size_t rs, size_t cs)
{
    __m512 t[6][6];
#pragma GCC unroll 6
    for (int b = 0; b < 6; b++) {
        __m512 x[6], y[6];
#pragma GCC unroll 6
        for (int a = 0; a < 6; a++) x[a] = _mm512_loadu_ps(src + a * rs + b * cs);
        BT6(y, x);
#pragma GCC unroll 6
        for (int a = 0; a < 6; a++) t[a][b] = y[a];
    }
#pragma GCC unroll 6
    for (int a = 0; a < 6; a++) {
        __m512 y[6];
        BT6(y, t[a]);
#pragma GCC unroll 6
        for (int b = 0; b < 6; b++) _mm512_storeu_ps(v + (size_t)(6 * a + b) * ps, y[b]);
    }
}

/* Tiles inside the image read it in place; a border tile's patch is first
 * copied, zero-padded, into a local 6 x 6 buffer (the same values and
 * arithmetic: per-load border tests in the transform cost more than it).
 * C channels (a multiple of 16), 16 at a time. */
AVX512 static INLINE void in4_tiles_simd(const wi_job *j, float *V, int t0, int nt, int tb, int C,
                                         size_t ps)
{
    const nn_conv_dims *d = j->d;
    const int H = d->H, W = d->W;
    const __m512 z = _mm512_setzero_ps();
    float patch[W4_POS * 16] __attribute__((aligned(64)));
    for (int i = 0; i < tb; i++) {
        float *v = V + (size_t)i * C;
        if (i >= nt) {
            for (int p = 0; p < W4_POS; p++)
                for (int c0 = 0; c0 < C; c0 += 16) _mm512_storeu_ps(v + p * ps + c0, z);
            continue;
        }
        int h0, w0;
        const float *img = wi_tile_src(j, t0 + i, &h0, &w0);
        if (h0 >= 0 && w0 >= 0 && h0 + 6 <= H && w0 + 6 <= W) {
            const float *src = img + ((size_t)h0 * W + w0) * C;
            for (int c0 = 0; c0 < C; c0 += 16)
                in4_tile(v + c0, ps, src + c0, (size_t)W * C, (size_t)C);
            continue;
        }
        for (int c0 = 0; c0 < C; c0 += 16) {
            for (int a = 0; a < 6; a++)
                for (int b = 0; b < 6; b++) {
                    int h = h0 + a, w = w0 + b;
                    bool in = h >= 0 && h < H && w >= 0 && w < W;
                    _mm512_store_ps(patch + (6 * a + b) * 16,
                                    in ? _mm512_loadu_ps(img + ((size_t)h * W + w) * C + c0) : z);
                }
            in4_tile(v + c0, ps, patch, 6 * 16, 16);
        }
    }
}

#endif

/* The weight gradient's scratch floats per thread (conv_wino4_wgrad.c). */
size_t nn_wi4_wgrad_scratch(const nn_conv_dims *d);

#endif
