/*
 * conv_wino4.c - Winograd F(4x4, 3x3): for 16 -> 16 channels (ResNet-20's
 * first stage) the variant the driver (conv_wino.c) runs for the forward
 * and the input gradient (nn_wi_f4); their weight gradient (nn_wi4_wgrad)
 * is in conv_wino4_wgrad.c, the input transform both use in
 * conv_wino4_impl.h. nn_wi_f4 also takes the input gradient and the
 * forward of layers with 32 to 64 channels (multiples of 16) where the
 * driver prefers it to F(2x2) (conv_wino.c's wino4_dgrad_use).
 *
 * With F(2x2) a 16-channel tile has only 16 products of 16 x 16 (the
 * transforms cost as much), while the direct kernels spend 9 multiply-adds
 * per output and channel pair. F(4x4, 3x3) cuts the output into 4x4 tiles
 * read from 6x6 input patches, 36 products [tiles x 16] x [16 x 16] per
 * tile: 2.25 multiplies per output and channel pair; a channel vector is
 * one register, so both transforms are vector operations over 16 channels.
 * Interpolation points 0, -1, 1, 1/2, -2 (and infinity), after Barabasz et
 * al. 2020 ("Error analysis and improving the accuracy of Winograd
 * convolution for deep neural networks"), the most accurate of the sets
 * 0, +-1, +-2; 0, +-1, +-1/2; 0, +-1, -1/2, 2 on these layers:
 *   B^T = | 1 -3/2  -2   3/2  1    0 |   G = |  1      0     0    |
 *         | 0  1   -5/2  1/2  1    0 |       | -1/3   1/3  -1/3   |
 *         | 0 -1    1/2  5/2  1    0 |       |  1/3   1/3   1/3   |
 *         | 0 -2   -1    2    1    0 |       | -16/15 -8/15 -4/15 |
 *         | 0  1/2 -1   -1/2  1    0 |       |  1/15  -2/15  4/15 |
 *         | 0  1   -3/2 -2    3/2  1 |       |  0      0     1    |
 *   A^T = | 1  1  1  1    1  0 |
 *         | 0 -1  1  1/2 -2  0 |
 *         | 0  1  1  1/4  4  0 |
 *         | 0 -1  1  1/8 -8  1 |
 * Lavin & Gray's points 0, +-1, +-2 (coefficients up to 5 in B^T and 8 in
 * A^T) had a typical error 5x the direct kernels' and a largest error 10x.
 *
 * Error (relative to the outputs' standard deviation, on ReLU outputs and
 * He-initialised kernels): these points in float are a few times the
 * direct kernels' error, points 0, +-1, +-2 about twice that again; most
 * of the float error is the sum over the channels (M), amplified by A^T's
 * 4 and 8. The sum therefore runs in two chains (c = 0..C/2-1 and
 * C/2..C-1, added at the end): for 16 -> 16 as fast as one chain (12
 * tiles' chains already hide the FMA latency) and more accurate.
 * docs/design.md §12 has the figures and why they are accepted.
 * test_wino.c checks every output against a double-precision direct
 * convolution with the bound 2 (C + 16) u A^T[(|G||g||G^T|) .
 * (|B^T||d||B|)]A (|.| elementwise) and the typical error with a sharper
 * limit.
 *
 * The forward sums in float, not in double, a deliberate trade of accuracy
 * for speed argued in docs/design.md §12 (torch-trainstep-resnet-20
 * keeps pre-ReLU values away from zero so that no error flips a ReLU).
 *
 * Blocks: W4_TB tiles (V[36][TB][C] and M[36][TB][K] floats, in L2).
 * U (36 positions of C x K floats and a cache line) is built in double once
 * per call, 16 input channels at a time, and rounded once to float; with
 * AVX-512 in the order u4_16_simd writes out (docs/design.md §12,
 * "Building U"; test_wino.c checks it). */
#include "conv_wino4_impl.h"

/* u[p][16] = G g G^T for 16 kernels g[tap][16] at once, in double: in two
 * stages ((G g) G^T, 162 multiply-adds per kernel instead of 324),
 * vectorised over the 16 kernels (nine-tap scalar sums make U a visible
 * part of a 64 x 64 layer's call) */
NN_CLONES static void u4_16(double u[W4_POS][16], float g[9][16])
{
    double t[6][3][16];
    for (int a = 0; a < 6; a++)
        for (int c = 0; c < 3; c++)
            for (int i = 0; i < 16; i++)
                t[a][c][i] = G4[a][0] * g[c][i] + G4[a][1] * g[3 + c][i] + G4[a][2] * g[6 + c][i];
    for (int a = 0; a < 6; a++)
        for (int b = 0; b < 6; b++)
            for (int i = 0; i < 16; i++)
                u[6 * a + b][i] =
                    t[a][0][i] * G4[b][0] + t[a][1][i] * G4[b][1] + t[a][2][i] * G4[b][2];
}

#if WI_X86
/* u4_16 with AVX-512, the 16 kernels in two halves of 8 doubles (one half
 * at a time: t's 18 vectors stay in registers), each sum as the portable
 * code's contracted order (G g: the products by G[a][0], [1], [2] added
 * left to right, fused), rounded once into U[p * ps]. G's rows 0 and 5
 * are (1, 0, 0) and (0, 0, 1): their sums are the one product, exact, and
 * are taken as it (t[0] = g[0], t[5] = g[2], u[.][0] = t[.][0], u[.][5] =
 * t[.][2]), a third of the multiply-adds fewer. The same floats, except
 * that a zero may keep its sign where the sum with +0 products made it +0
 * (M sums from +0, so U's zero signs never reach it) and that an infinite
 * tap stays infinite where 0 inf made a NaN. */
AVX512 static void u4_16_simd(float *U, size_t ps, float g[9][16])
{
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m512d t[6][3];
#pragma GCC unroll 3
        for (int c = 0; c < 3; c++) {
            __m512d g0 = _mm512_cvtps_pd(_mm256_loadu_ps(g[c] + 8 * h)),
                    g1 = _mm512_cvtps_pd(_mm256_loadu_ps(g[3 + c] + 8 * h)),
                    g2 = _mm512_cvtps_pd(_mm256_loadu_ps(g[6 + c] + 8 * h));
            t[0][c] = g0, t[5][c] = g2;
#pragma GCC unroll 4
            for (int a = 1; a < 5; a++)
                t[a][c] =
                    _mm512_fmadd_pd(_mm512_set1_pd(G4[a][2]), g2,
                                    _mm512_fmadd_pd(_mm512_set1_pd(G4[a][1]), g1,
                                                    _mm512_mul_pd(_mm512_set1_pd(G4[a][0]), g0)));
        }
#pragma GCC unroll 6
        for (int a = 0; a < 6; a++)
#pragma GCC unroll 6
            for (int b = 0; b < 6; b++) {
                __m512d u =
                    b == 0 ? t[a][0]
                    : b == 5
                        ? t[a][2]
                        : _mm512_fmadd_pd(
                              t[a][2], _mm512_set1_pd(G4[b][2]),
                              _mm512_fmadd_pd(t[a][1], _mm512_set1_pd(G4[b][1]),
                                              _mm512_mul_pd(t[a][0], _mm512_set1_pd(G4[b][0]))));
                _mm256_storeu_ps(U + (size_t)(6 * a + b) * ps + 8 * h, _mm512_cvtpd_ps(u));
            }
    }
}
#endif

/* Floats from one position of U to the next: C K and a cache line more, so
 * that the 36 lines one kernel's transform writes (one per position) fall
 * in different sets of L1 (at C K = 4096, 16 KB apart, all 36 would share
 * one set of 12 lines, and a 64 x 64 layer's U would take far longer per
 * kernel than a 16 x 16 layer's). */
static size_t u4_ps(int C, int K)
{
    return (size_t)C * K + 16;
}

/* U[p][c][k] for the 16 input channels c = 16 rb + rr, rr < 16: taps
 * w[t][c][k], or (flip) the layer's w[8 - t][k][c] (the job's C and K are
 * the layer's K and C), computed in double and rounded once to float. The
 * flipped kernel's taps are a column of the layer's [K][C] rows per c: with
 * AVX-512 they come as 16 x 16 transposes (the scalar loads cost a cache
 * line each: a third of a 64 x 64 layer's U). C is a multiple of 16 (the
 * F(4x4) shapes, conv_wino.c). */
NN_CLONES static void u4_row(const wi_job *j, float *U, int rb)
{
    const int C = j->d->C, K = j->d->K, r0 = 16 * rb;
    float g[16][9][16]; /* [rr][tap][k - k0] */
    double u[W4_POS][16];
    for (int k0 = 0; k0 < K; k0 += 16) {
        if (!j->flip) {
            for (int rr = 0; rr < 16; rr++)
                for (int t = 0; t < 9; t++)
                    for (int i = 0; i < 16; i++)
                        g[rr][t][i] = j->w[((size_t)t * C + r0 + rr) * K + k0 + i];
        } else {
#if WI_X86
            if (j->simd)
                for (int t = 0; t < 9; t++)
                    nn_cf_transpose16(&g[0][t][0], 9 * 16, 16,
                                      j->w + ((size_t)(8 - t) * K + k0) * C + r0, (size_t)C, 16,
                                      16);
            else
#endif
                for (int rr = 0; rr < 16; rr++)
                    for (int t = 0; t < 9; t++)
                        for (int i = 0; i < 16; i++)
                            g[rr][t][i] = j->w[((size_t)(8 - t) * K + k0 + i) * C + r0 + rr];
        }
        for (int rr = 0; rr < 16; rr++) {
#if WI_X86
            if (j->simd) {
                u4_16_simd(U + (size_t)(r0 + rr) * K + k0, u4_ps(C, K), g[rr]);
                continue;
            }
#endif
            u4_16(u, g[rr]);
            for (int p = 0; p < W4_POS; p++)
                for (int i = 0; i < 16; i++)
                    U[p * u4_ps(C, K) + (size_t)(r0 + rr) * K + k0 + i] = (float)u[p][i];
        }
    }
}

static void in4_port(const wi_job *j, float *V, int t0, int nt)
{
    in4_tiles_port(j, V, t0, nt, W4_TB, (size_t)W4_TB * j->d->C);
}

/* M[p][i][k] = sum over c of V[p][i][c] U[p][c][k] in float, in two
 * chains, c = 0..C/2-1 and C/2..C-1 in order, added at the end (the
 * header says why) */
static void gemm4_port(const wi_job *j, float *M, const float *V, const float *U, int rows)
{
    const int C = j->d->C, K = j->d->K, h = C / 2;
    (void)rows; /* always W4_TB (j->g) */
    for (int p = 0; p < W4_POS; p++)
        for (int i = 0; i < W4_TB; i++) {
            float *m = M + ((size_t)p * W4_TB + i) * K, m2[64];
            const float *v = V + ((size_t)p * W4_TB + i) * C, *u = U + p * u4_ps(C, K);
            for (int k = 0; k < K; k++) m[k] = 0.0f, m2[k] = 0.0f;
            for (int c = 0; c < h; c++)
                for (int k = 0; k < K; k++) m[k] += v[c] * u[(size_t)c * K + k];
            for (int c = h; c < C; c++)
                for (int k = 0; k < K; k++) m2[k] += v[c] * u[(size_t)c * K + k];
            for (int k = 0; k < K; k++) m[k] += m2[k];
        }
}

/* y[0..3] = A^T m[0..5], strides s (m) and sy (y) */
static void at6_port(float *y, size_t sy, const float *m, size_t s)
{
    float s12 = m[2 * s] + m[s], d21 = m[2 * s] - m[s], m3 = m[3 * s], m4 = m[4 * s];
    y[0] = (m[0] + s12) + (m3 + m4);
    y[sy] = d21 + (0.5f * m3 - 2 * m4);
    y[2 * sy] = s12 + (0.25f * m3 + 4 * m4);
    y[3 * sy] = d21 + (0.125f * m3 - 8 * m4) + m[5 * s];
}

/* Output pixel (oh, ow) of image n, channel k, from y: + bias, acc, ReLU */
static void out4_store(const wi_job *j, int t, int k, float y[4][4])
{
    const nn_conv_dims *d = j->d;
    int per = j->TH * j->TW, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            int oh = 4 * ty + a, ow = 4 * tx + b;
            if (oh >= d->OH || ow >= d->OW) continue;
            float *o = j->out + (((size_t)n * d->OH + oh) * d->OW + ow) * d->K + k;
            float v = j->acc ? *o + y[a][b] : y[a][b] + (j->b ? j->b[k] : 0.0f);
            *o = j->relu && v < 0.0f ? 0.0f : v;
        }
}

static void out4_port(const wi_job *j, const float *M, int t0, int nt)
{
    const int K = j->d->K;
    const size_t ps = (size_t)W4_TB * K;
    for (int i = 0; i < nt; i++)
        for (int k = 0; k < K; k++) {
            float m[36], s[4][6], y[4][4];
            for (int p = 0; p < W4_POS; p++) m[p] = M[p * ps + (size_t)i * K + k];
            for (int b = 0; b < 6; b++) at6_port(&s[0][b], 6, m + b, 6);
            for (int a = 0; a < 4; a++) at6_port(&y[a][0], 1, &s[a][0], 1);
            out4_store(j, t0 + i, k, y);
        }
}

#if WI_X86
AVX512 static void in4_simd(const wi_job *j, float *V, int t0, int nt)
{
    in4_tiles_simd(j, V, t0, nt, W4_TB, j->d->C, (size_t)W4_TB * j->d->C);
}

/* MR tiles x NV vectors of k of M at one position, the sum over c in two
 * chains, c = 0..C/2-1 and C/2..C-1 (2 MR NV = 24 registers), added at the
 * end (the order of gemm4_port) */
AVX512 static INLINE void gemm4_tile2(int MR, int NV, float *M, int K, const float *V, int C,
                                      const float *U)
{
    const int h = C / 2;
    __m512 a0[12][4], a1[12][4];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) a0[i][v] = a1[i][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int c = 0; c < h; c++) {
        __m512 u0[4], u1[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            u0[v] = _mm512_loadu_ps(U + (size_t)c * K + 16 * v);
            u1[v] = _mm512_loadu_ps(U + (size_t)(c + h) * K + 16 * v);
        }
#pragma GCC unroll 12
        for (int i = 0; i < MR; i++) {
            __m512 x0 = _mm512_set1_ps(V[(size_t)i * C + c]),
                   x1 = _mm512_set1_ps(V[(size_t)i * C + c + h]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) {
                a0[i][v] = _mm512_fmadd_ps(x0, u0[v], a0[i][v]);
                a1[i][v] = _mm512_fmadd_ps(x1, u1[v], a1[i][v]);
            }
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            _mm512_storeu_ps(M + (size_t)i * K + 16 * v, _mm512_add_ps(a0[i][v], a1[i][v]));
}

/* 16 -> 16: the W4_TB tiles' M at one position in two chains, c = 0..7
 * and 8..15 (24 registers), added at the end (the order of gemm4_port) */
AVX512 static INLINE void gemm4_tile16(float *M, const float *V, const float *U)
{
    __m512 a0[W4_TB], a1[W4_TB];
#pragma GCC unroll 12
    for (int i = 0; i < W4_TB; i++) a0[i] = a1[i] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        __m512 u0 = _mm512_loadu_ps(U + c * 16), u1 = _mm512_loadu_ps(U + (c + 8) * 16);
#pragma GCC unroll 12
        for (int i = 0; i < W4_TB; i++) {
            a0[i] = _mm512_fmadd_ps(_mm512_set1_ps(V[i * 16 + c]), u0, a0[i]);
            a1[i] = _mm512_fmadd_ps(_mm512_set1_ps(V[i * 16 + c + 8]), u1, a1[i]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < W4_TB; i++) _mm512_storeu_ps(M + i * 16, _mm512_add_ps(a0[i], a1[i]));
}

/* M[p] for the W4_TB tiles, in two chains: 12 x 1 vectors (K = 16; 16 ->
 * 16 with the channel counts known: gemm4_tile2 with C and K at run time
 * is slower on resnet-20's 16-channel stage), 6 x 2 (32, and 64 as two
 * halves of k: 6 x 4 in two chains would need 48 registers, 3 x 4 would
 * read U from L2 twice as often), 4 x 3 (48); ResNet's shapes with C and
 * K constants */
AVX512 static INLINE void gemm4_pos(float *m, const float *v, const float *U, int C, int K)
{
    if (K == 16)
        gemm4_tile2(12, 1, m, K, v, C, U);
    else if (K == 48)
        for (int i = 0; i < W4_TB; i += 4)
            gemm4_tile2(4, 3, m + (size_t)i * K, K, v + (size_t)i * C, C, U);
    else
        for (int i = 0; i < W4_TB; i += 6)
            for (int k0 = 0; k0 < K; k0 += 32)
                gemm4_tile2(6, 2, m + (size_t)i * K + k0, K, v + (size_t)i * C, C, U + k0);
}

AVX512 static void gemm4_simd(const wi_job *j, float *M, const float *V, const float *U0, int rows)
{
    const int C = j->d->C, K = j->d->K;
    (void)rows; /* always W4_TB (j->g) */
    for (int p = 0; p < W4_POS; p++) {
        const float *U = U0 + p * u4_ps(C, K), *v = V + (size_t)p * W4_TB * C;
        float *m = M + (size_t)p * W4_TB * K;
        if (C == 16 && K == 16)
            gemm4_tile16(m, v, U);
        else if (C == 32 && K == 32)
            gemm4_pos(m, v, U, 32, 32);
        else if (C == 64 && K == 64)
            gemm4_pos(m, v, U, 64, 64);
        else
            gemm4_pos(m, v, U, C, K);
    }
}

/* y[0..3] = A^T m[0..5] (the order of at6_port), 16 floats */
#define AT6(y, m)                                                                                  \
    do {                                                                                           \
        __m512 s12 = _mm512_add_ps(m[2], m[1]), d21 = _mm512_sub_ps(m[2], m[1]);                   \
        y[0] = _mm512_add_ps(_mm512_add_ps(m[0], s12), _mm512_add_ps(m[3], m[4]));                 \
        y[1] = _mm512_add_ps(d21, _mm512_fnmadd_ps(_mm512_set1_ps(2), m[4],                        \
                                                   _mm512_mul_ps(_mm512_set1_ps(0.5f), m[3])));    \
        y[2] = _mm512_add_ps(s12, _mm512_fmadd_ps(_mm512_set1_ps(4), m[4],                         \
                                                  _mm512_mul_ps(_mm512_set1_ps(0.25f), m[3])));    \
        y[3] = _mm512_add_ps(                                                                      \
            _mm512_add_ps(d21, _mm512_fnmadd_ps(_mm512_set1_ps(8), m[4],                           \
                                                _mm512_mul_ps(_mm512_set1_ps(0.125f), m[3]))),     \
            m[5]);                                                                                 \
    } while (0)

/* Output tile of M at i: + bias, acc, ReLU (16 channels, float) */
AVX512 static void out4_simd(const wi_job *j, const float *M, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int per = j->TH * j->TW, K = d->K;
    const size_t ps = (size_t)W4_TB * K;
    const __m512 z = _mm512_setzero_ps();
    for (int i = 0; i < nt; i++)
        for (int k0 = 0; k0 < K; k0 += 16) {
            int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
            int oh0 = 4 * ty, ow0 = 4 * tx;
            const __m512 bv = j->b ? _mm512_loadu_ps(j->b + k0) : z;
            const float *m = M + (size_t)i * K + k0;
            __m512 s[4][6];
#pragma GCC unroll 6
            for (int b = 0; b < 6; b++) {
                __m512 x[6], y[4];
#pragma GCC unroll 6
                for (int a = 0; a < 6; a++) x[a] = _mm512_loadu_ps(m + (size_t)(6 * a + b) * ps);
                AT6(y, x);
#pragma GCC unroll 4
                for (int a = 0; a < 4; a++) s[a][b] = y[a];
            }
            float *o = j->out + (((size_t)n * d->OH + oh0) * d->OW + ow0) * K + k0;
#pragma GCC unroll 4
            for (int a = 0; a < 4; a++) {
                __m512 y[4];
                AT6(y, s[a]);
                if (oh0 + a >= d->OH) continue;
#pragma GCC unroll 4
                for (int b = 0; b < 4; b++) {
                    if (ow0 + b >= d->OW) continue;
                    float *q = o + ((size_t)a * d->OW + b) * K;
                    __m512 v =
                        j->acc ? _mm512_add_ps(_mm512_loadu_ps(q), y[b]) : _mm512_add_ps(y[b], bv);
                    if (j->relu) v = _mm512_max_ps(v, z);
                    _mm512_storeu_ps(q, v);
                }
            }
        }
}

#endif

/* floats per thread: the forward's and input gradient's (U, V and M) or,
 * for 16 -> 16, the weight gradient's if larger (conv_wino4_wgrad.c) */
size_t nn_wi4_scratch(const nn_conv_dims *d)
{
    size_t f = W4_POS * (u4_ps(d->C, d->K) + W4_TB * (d->C + d->K)) + 16;
    if (d->C != 16 || d->K != 16) return f; /* the input gradient alone */
    size_t w = nn_wi4_wgrad_scratch(d);
    return f > w ? f : w;
}

static int f4_setup(wi_job *j)
{
    const int C = j->d->C, K = j->d->K;
    j->TB = j->g = W4_TB, j->Cs = C, j->Ks = K;
    j->uf = W4_POS * u4_ps(C, K), j->vf = (size_t)W4_POS * W4_TB * C;
    return C / 16; /* u4_row's blocks of 16 rows */
}

#if WI_X86
#define F4_SIMD(f) f
#else
#define F4_SIMD(f) NULL
#endif

const wi_variant nn_wi_f4 = {.m = 4,
                             .pos = W4_POS,
                             .setup = f4_setup,
                             .u_row = u4_row,
                             .in = {in4_port, F4_SIMD(in4_simd)},
                             .gemm = {gemm4_port, F4_SIMD(gemm4_simd)},
                             .out = {out4_port, F4_SIMD(out4_simd)}};
