/*
 * conv_wino2.c - Winograd F(2x2, 3x3) (Lavin & Gray 2016): the variant
 * the driver (conv_wino.c) runs for the forward and input gradient of
 * stride-1 3x3 convolutions; its weight gradient is in conv_wino2_wgrad.c
 * (what the two share: conv_wino2_impl.h).
 *
 * The output is cut into 2x2 tiles; tile (ty, tx) of image n reads the 4x4
 * input patch d at rows 2ty - PH + [0, 4), columns 2tx - PW + [0, 4) (zero
 * outside the image) and, for every channel pair (c, k),
 *   y = A^T [ (G g G^T) . (B^T d B) ] A     (. elementwise, 4x4)
 * with
 *   B^T = | 1  0 -1  0 |   G = | 1    0    0  |   A^T = | 1  1  1  0 |
 *         | 0  1  1  0 |       | 1/2  1/2  1/2 |         | 0  1 -1 -1 |
 *         | 0 -1  1  0 |       | 1/2 -1/2  1/2 |
 *         | 0  1  0 -1 |       | 0    0    1  |
 * Summed over c, position by position: with V[pos][tile][c] = B^T d B and
 * U[pos][c][k] = G g G^T, M[pos][tile][k] = sum_c V U is 16 matrix products
 * [tiles x C] x [C x K], then y = A^T M A per tile and channel. 16 products
 * of C x K per 4 outputs instead of 36: 2.25x fewer multiplications, paid
 * for by the two transforms (additions only, O(C + K) per tile).
 *
 * Error: every coefficient of B, G and A is 0, +-1 or +-1/2, so the
 * transforms only add; an output's rounding error is at most about
 * (C + 8) u times A^T [ (|G||g||G^T|) . (|B^T||d||B|) ] A summed over c
 * (|.| elementwise; u = 2^-24), which is at most 9 times the same bound's
 * direct-convolution counterpart sum |g||d| (the row sums of |A^T|, |G|
 * and |B^T| are 3, 3/2 and 2). test_wino.c checks every output against a
 * double-precision direct convolution with that bound.
 *
 * Blocks: TB tiles (a multiple of 24, fixed by C and K so that a block's V
 * and M stay in L2). U is built per input channel (forward) or per 16
 * output channels (input gradient: the flipped, transposed kernel).
 *
 * The AVX-512 kernels are used when nn_narrow_use_simd says so; the
 * portable ones compute the same sums in plain C (the tests compare both
 * with a direct reference).
 */
#include <stdlib.h>
#include <string.h>

#include "conv_wino2_impl.h"

#define WI_MR 24    /* TB is a multiple of every register-tile height (24, 12, 8, 6) */
#define WI_L2 65536 /* floats of V + M per block, at most (256 KB) */

/* Tiles per block: a multiple of WI_MR with V + M (16 TB (Cs + Ks) floats)
 * within WI_L2, at least WI_MR, at most 96. Symmetric in C and K, so the
 * forward and the input gradient share one scratch layout. */
static int wino_tb(int C, int K)
{
    int tb = WI_L2 / (WI_POS * (wi_r16(C) + wi_r16(K))) / WI_MR * WI_MR;
    if (tb > 4 * WI_MR) tb = 4 * WI_MR;
    return tb < WI_MR ? WI_MR : tb;
}

/* Floats from one position of U ([pos][C][Ks]) to the next: a cache line
 * more than C Ks, so that the 16 lines one kernel's transform writes fall
 * in different sets of L1 (at 64 x 64, 16 KB apart, they shared one set). */
static size_t u_ps(int C, int K)
{
    return (size_t)C * wi_r16(K) + 16;
}

size_t nn_wi2_scratch(const nn_conv_dims *d, bool wgrad)
{
    size_t tb = (size_t)wino_tb(d->C, d->K), S = wgrad ? nn_wi2_slices(d) : 1;
    if (wgrad && tb < WI_WG_TB) tb = WI_WG_TB; /* the weight gradient's V and Z */
    return S * u_floats(d->C, d->K) + WI_POS * (tb * (wi_r16(d->C) + wi_r16(d->K)) + 16) + 16;
}

/* nn_wi2_backward's area per thread: the S slices' dU, the input
 * gradient's U (the transposed convolution's: u_ps(K, C) apart), then the
 * larger of a slice task's V and Z (WI_WG_TB rows) and a block's V and M
 * (wino_tb rows, symmetric in C and K). */
size_t nn_wi2_bwd_scratch(const nn_conv_dims *d)
{
    size_t tb = (size_t)wino_tb(d->C, d->K);
    if (tb < WI_WG_TB) tb = WI_WG_TB;
    return (size_t)nn_wi2_slices(d) * u_floats(d->C, d->K) + WI_POS * u_ps(d->K, d->C) +
           WI_POS * (tb * (wi_r16(d->C) + wi_r16(d->K)) + 16) + 16;
}

/* ---- the kernel transform: U[pos][c][Ks] = G g G^T ---------------------- */

/* U of 16 kernels at once: g[tap][i] (i < 16) -> u[pos][i], in double,
 * rounded once (vectorised over i). */
NN_CLONES static void u_16(float u[WI_POS][16], float g[9][16])
{
    double t[4][3][16];
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < 16; i++) {
            double g0 = g[b][i], g1 = g[3 + b][i], g2 = g[6 + b][i];
            t[0][b][i] = g0;
            t[1][b][i] = 0.5 * (g0 + g1 + g2);
            t[2][b][i] = 0.5 * (g0 - g1 + g2);
            t[3][b][i] = g2;
        }
    for (int a = 0; a < 4; a++)
        for (int i = 0; i < 16; i++) {
            double t0 = t[a][0][i], t1 = t[a][1][i], t2 = t[a][2][i];
            u[4 * a][i] = (float)t0;
            u[4 * a + 1][i] = (float)(0.5 * (t0 + t1 + t2));
            u[4 * a + 2][i] = (float)(0.5 * (t0 - t1 + t2));
            u[4 * a + 3][i] = (float)t2;
        }
}

#if WI_X86
/* The 8 floats of half q of a 16-float vector, widened to double. */
AVX512 static INLINE __m512d half_pd(__m512 v, int q)
{
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), q)));
}

/* u_16 with AVX-512 (the same operations in the same order: additions and
 * halvings in double, rounded once) of the taps' 16 kernels g[tap], stored
 * into U[p * ps] */
AVX512 static INLINE void u_16_vec(float *U, size_t ps, const __m512 g[9])
{
    const __m512d h = _mm512_set1_pd(0.5);
    __m512d t[4][3][2];
#pragma GCC unroll 2
    for (int q = 0; q < 2; q++)
#pragma GCC unroll 3
        for (int b = 0; b < 3; b++) {
            __m512d g0 = half_pd(g[b], q), g1 = half_pd(g[3 + b], q), g2 = half_pd(g[6 + b], q);
            t[0][b][q] = g0;
            t[1][b][q] = _mm512_mul_pd(h, _mm512_add_pd(_mm512_add_pd(g0, g1), g2));
            t[2][b][q] = _mm512_mul_pd(h, _mm512_add_pd(_mm512_sub_pd(g0, g1), g2));
            t[3][b][q] = g2;
        }
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++) {
        __m256 o[4][2];
#pragma GCC unroll 2
        for (int q = 0; q < 2; q++) {
            __m512d t0 = t[a][0][q], t1 = t[a][1][q], t2 = t[a][2][q];
            o[0][q] = _mm512_cvtpd_ps(t0);
            o[1][q] = _mm512_cvtpd_ps(_mm512_mul_pd(h, _mm512_add_pd(_mm512_add_pd(t0, t1), t2)));
            o[2][q] = _mm512_cvtpd_ps(_mm512_mul_pd(h, _mm512_add_pd(_mm512_sub_pd(t0, t1), t2)));
            o[3][q] = _mm512_cvtpd_ps(t2);
        }
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++)
            _mm512_storeu_pd((double *)(U + (size_t)(4 * a + b) * ps),
                             _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(o[b][0])),
                                                _mm256_castps_pd(o[b][1]), 1));
    }
}

/* u_16_vec of g[tap][16] */
AVX512 static void u_16_simd(float *U, size_t ps, float g[9][16])
{
    __m512 v[9];
#pragma GCC unroll 9
    for (int t = 0; t < 9; t++) v[t] = _mm512_loadu_ps(g[t]);
    u_16_vec(U, ps, v);
}

/* u_16_vec of the forward's 16 kernels k0 + [0, 16) of input channel c:
 * tap t's at w + t C K, loaded in place (zero past K: mask m) instead of
 * gathered into g[9][16] a float at a time, which would take as long as
 * the transform (res4's 4 MB U is built on each thread, every pass) */
AVX512 static void u_16_simd_w(float *U, size_t ps, const float *w, size_t tap, __mmask16 m)
{
    __m512 v[9];
#pragma GCC unroll 9
    for (int t = 0; t < 9; t++) v[t] = _mm512_maskz_loadu_ps(m, w + t * tap);
    u_16_vec(U, ps, v);
}
#endif

/* Task r of U: forward, row c = r of every position (16 k at a time, read
 * and written contiguously); input gradient (flip: the layer's kernel
 * w[3][3][K][C] flipped and transposed), columns k in [16r, 16r + 16) (16
 * c at a time, transposed through a 16 x 16 block per position). */
static void u_row(const wi_job *j, float *U, int r)
{
    const int C = j->d->C, K = j->d->K, Ks = j->Ks;
    float g[9][16], u[WI_POS][16];
    if (!j->flip) {
        for (int k0 = 0; k0 < K; k0 += 16) {
            int m = K - k0 < 16 ? K - k0 : 16;
#if WI_X86
            if (j->simd) {
                u_16_simd_w(U + (size_t)r * Ks + k0, u_ps(C, K), j->w + (size_t)r * K + k0,
                            (size_t)C * K, (__mmask16)((1u << m) - 1));
                continue;
            }
#endif
            for (int t = 0; t < 9; t++)
                for (int i = 0; i < 16; i++)
                    g[t][i] = i < m ? j->w[((size_t)t * C + r) * K + k0 + i] : 0.0f;
            u_16(u, g);
            for (int p = 0; p < WI_POS; p++)
                memcpy(U + p * u_ps(C, K) + (size_t)r * Ks + k0, u[p], sizeof(float) * 16);
        }
        return;
    }
    const int k0 = 16 * r, mk = K - k0 < 16 ? K - k0 : 16;
#if WI_X86
    if (j->simd) {
        /* g(c, k)[tap t] = w[8 - t][k][c]: the 16 k of a row c are a column
         * of the layer's [K][C] rows, so each tap's 16 x 16 block comes
         * transposed (zero past K and C), and every row c goes into U with
         * u_16_simd like the forward's (scalar gathers and u_16 would be
         * a large part of res4's 256 -> 256 input gradient) */
        float gt[16][9][16]; /* [c - c0][tap][k - k0] */
        for (int c0 = 0; c0 < C; c0 += 16) {
            int mc = C - c0 < 16 ? C - c0 : 16;
            for (int t = 0; t < 9; t++)
                nn_cf_transpose16(&gt[0][t][0], 9 * 16, mc,
                                  j->w + ((size_t)(8 - t) * K + k0) * C + c0, (size_t)C, mk, mc);
            for (int i = 0; i < mc; i++)
                u_16_simd(U + (size_t)(c0 + i) * Ks + k0, u_ps(C, K), gt[i]);
        }
        return;
    }
#endif
    float blk[WI_POS][16][16]; /* [pos][c - c0][k - k0] */
    for (int c0 = 0; c0 < C; c0 += 16) {
        int mc = C - c0 < 16 ? C - c0 : 16;
        for (int kk = 0; kk < 16; kk++) {
            /* g(c, k)[tap t] = w[8 - t][k][c] */
            for (int t = 0; t < 9; t++)
                for (int i = 0; i < 16; i++)
                    g[t][i] = kk < mk && i < mc ? j->w[((size_t)(8 - t) * K + k0 + kk) * C + c0 + i]
                                                : 0.0f;
            u_16(u, g);
            for (int p = 0; p < WI_POS; p++)
                for (int i = 0; i < 16; i++) blk[p][i][kk] = u[p][i];
        }
        for (int p = 0; p < WI_POS; p++)
            for (int i = 0; i < mc; i++)
                memcpy(U + p * u_ps(C, K) + (size_t)(c0 + i) * Ks + k0, blk[p][i],
                       sizeof(float) * 16);
    }
}

/* ---- portable kernels ------------------------------------------------------ */

/* V[pos][i][c] for tiles t0 + i, i < rows (zero past the last tile), of
 * the channels c in [c0, c1) (the weight gradient's channel groups; the
 * rest of V's rows of Cs floats is not written). */
void nn_wi2_in_port(const wi_job *j, float *V, int t0, int nt, int rows, int c0, int c1)
{
    const nn_conv_dims *d = j->d;
    const int C = d->C, Cs = j->Cs;
    const size_t ps = (size_t)j->TB * Cs;
    for (int i = 0; i < rows; i++) {
        if (i >= nt) {
            for (int p = 0; p < WI_POS; p++)
                memset(V + p * ps + (size_t)i * Cs + c0, 0, sizeof(float) * (c1 - c0));
            continue;
        }
        int h0, w0;
        const float *img = wi_tile_src(j, t0 + i, &h0, &w0);
        for (int c = c0; c < c1; c++) {
            float x[4][4], t[4][4];
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) {
                    int h = h0 + a, w = w0 + b;
                    bool in = c < C && h >= 0 && h < d->H && w >= 0 && w < d->W;
                    x[a][b] = in ? img[((size_t)h * d->W + w) * C + c] : 0.0f;
                }
            for (int b = 0; b < 4; b++) {
                t[0][b] = x[0][b] - x[2][b];
                t[1][b] = x[1][b] + x[2][b];
                t[2][b] = x[2][b] - x[1][b];
                t[3][b] = x[1][b] - x[3][b];
            }
            for (int a = 0; a < 4; a++) {
                float *v = V + (size_t)i * Cs + c + (size_t)a * 4 * ps;
                v[0] = t[a][0] - t[a][2];
                v[ps] = t[a][1] + t[a][2];
                v[2 * ps] = t[a][2] - t[a][1];
                v[3 * ps] = t[a][1] - t[a][3];
            }
        }
    }
}

/* V[pos][i][Cs] for tiles t0 + i, i < wi_rows (zero past the last tile). */
static void in_port(const wi_job *j, float *V, int t0, int nt)
{
    nn_wi2_in_port(j, V, t0, nt, wi_rows(j, nt), 0, j->Cs);
}

/* M[pos][i][Ks] = V[pos][i][0, C) U[pos][0, C)[Ks], c in increasing order,
 * i < rows. */
static void gemm_port(const wi_job *j, float *M, const float *V, const float *U, int rows)
{
    const int C = j->d->C, Cs = j->Cs, Ks = j->Ks, TB = j->TB;
    for (int p = 0; p < WI_POS; p++)
        for (int i = 0; i < rows; i++) {
            float *m = M + ((size_t)p * TB + i) * Ks;
            const float *v = V + ((size_t)p * TB + i) * Cs;
            const float *u = U + p * u_ps(C, Ks);
            for (int k = 0; k < Ks; k++) m[k] = 0.0f;
            for (int c = 0; c < C; c++)
                for (int k = 0; k < Ks; k++) m[k] += v[c] * u[(size_t)c * Ks + k];
        }
}

/* The output of tile t0 + i from M: A^T M A, + bias, acc, ReLU. */
static void out_port(const wi_job *j, const float *M, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int K = d->K, Ks = j->Ks, per = j->TH * j->TW;
    const size_t ps = (size_t)j->TB * Ks;
    for (int i = 0; i < nt; i++) {
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        for (int k = 0; k < K; k++) {
            const float *m = M + (size_t)i * Ks + k;
            float s[4][2], y[2][2];
            for (int b = 0; b < 4; b++) {
                s[b][0] = m[b * ps] + m[(4 + b) * ps] + m[(8 + b) * ps];
                s[b][1] = m[(4 + b) * ps] - m[(8 + b) * ps] - m[(12 + b) * ps];
            }
            for (int a = 0; a < 2; a++) {
                y[a][0] = s[0][a] + s[1][a] + s[2][a];
                y[a][1] = s[1][a] - s[2][a] - s[3][a];
            }
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++) {
                    int oh = 2 * ty + a, ow = 2 * tx + b;
                    if (oh >= d->OH || ow >= d->OW) continue;
                    float *o = j->out + (((size_t)n * d->OH + oh) * d->OW + ow) * K + k;
                    float v = y[a][b] + (j->b ? j->b[k] : 0.0f);
                    if (j->acc) v = *o + y[a][b];
                    *o = j->relu && v < 0.0f ? 0.0f : v;
                }
        }
    }
}

/* ---- AVX-512 kernels ------------------------------------------------------ */

#if WI_X86
AVX512 void nn_wi2_in_simd(const wi_job *j, float *V, int t0, int nt, int rows, int c0, int c1)
{
    const nn_conv_dims *d = j->d;
    const int C = d->C, Cs = j->Cs, H = d->H, W = d->W;
    const size_t ps = (size_t)j->TB * Cs;
    const __m512 z = _mm512_setzero_ps();
    for (int i = 0; i < rows; i++) {
        if (i >= nt) {
            for (int p = 0; p < WI_POS; p++)
                for (int c = c0; c < c1; c += 16)
                    _mm512_storeu_ps(V + p * ps + (size_t)i * Cs + c, z);
            continue;
        }
        int h0, w0;
        const float *img = wi_tile_src(j, t0 + i, &h0, &w0);
        bool inside = h0 >= 0 && w0 >= 0 && h0 + 4 <= H && w0 + 4 <= W;
        bool ok[4][4];
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                ok[a][b] = inside || (h0 + a >= 0 && h0 + a < H && w0 + b >= 0 && w0 + b < W);
        const float *base = img + ((ptrdiff_t)h0 * W + w0) * C;
        for (int c = c0; c < c1; c += 16) {
            __mmask16 m = C - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (C - c)) - 1);
            __m512 x[4][4], t[4][4];
#pragma GCC unroll 4
            for (int a = 0; a < 4; a++)
#pragma GCC unroll 4
                for (int b = 0; b < 4; b++)
                    x[a][b] = ok[a][b]
                                  ? _mm512_maskz_loadu_ps(m, base + ((ptrdiff_t)a * W + b) * C + c)
                                  : z;
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++) {
                t[0][b] = _mm512_sub_ps(x[0][b], x[2][b]);
                t[1][b] = _mm512_add_ps(x[1][b], x[2][b]);
                t[2][b] = _mm512_sub_ps(x[2][b], x[1][b]);
                t[3][b] = _mm512_sub_ps(x[1][b], x[3][b]);
            }
            float *v = V + (size_t)i * Cs + c;
#pragma GCC unroll 4
            for (int a = 0; a < 4; a++) {
                _mm512_storeu_ps(v + (size_t)(4 * a) * ps, _mm512_sub_ps(t[a][0], t[a][2]));
                _mm512_storeu_ps(v + (size_t)(4 * a + 1) * ps, _mm512_add_ps(t[a][1], t[a][2]));
                _mm512_storeu_ps(v + (size_t)(4 * a + 2) * ps, _mm512_sub_ps(t[a][2], t[a][1]));
                _mm512_storeu_ps(v + (size_t)(4 * a + 3) * ps, _mm512_sub_ps(t[a][1], t[a][3]));
            }
        }
    }
}

AVX512 static void in_simd(const wi_job *j, float *V, int t0, int nt)
{
    nn_wi2_in_simd(j, V, t0, nt, wi_rows(j, nt), 0, j->Cs);
}

/* MR tiles x NV vectors of M at one position: sum over c < C in order. */
AVX512 static INLINE void gemm_tile(int MR, int NV, float *M, int Ks, const float *V, int Cs,
                                    const float *U, int C)
{
    __m512 acc[24][4];
#pragma GCC unroll 24
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[i][v] = _mm512_setzero_ps();
    for (int c = 0; c < C; c++) {
        __m512 u[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) u[v] = _mm512_loadu_ps(U + (size_t)c * Ks + 16 * v);
#pragma GCC unroll 24
        for (int i = 0; i < MR; i++) {
            __m512 x = _mm512_set1_ps(V[(size_t)i * Cs + c]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[i][v] = _mm512_fmadd_ps(x, u[v], acc[i][v]);
        }
    }
#pragma GCC unroll 24
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(M + (size_t)i * Ks + 16 * v, acc[i][v]);
}

AVX512 static void gemm_24x1(float *M, int Ks, const float *V, int Cs, const float *U, int C)
{
    gemm_tile(24, 1, M, Ks, V, Cs, U, C);
}
AVX512 static void gemm_12x2(float *M, int Ks, const float *V, int Cs, const float *U, int C)
{
    gemm_tile(12, 2, M, Ks, V, Cs, U, C);
}
AVX512 static void gemm_8x3(float *M, int Ks, const float *V, int Cs, const float *U, int C)
{
    gemm_tile(8, 3, M, Ks, V, Cs, U, C);
}
AVX512 static void gemm_6x4(float *M, int Ks, const float *V, int Cs, const float *U, int C)
{
    gemm_tile(6, 4, M, Ks, V, Cs, U, C);
}

static void gemm_simd(const wi_job *j, float *M, const float *V, const float *U, int rows)
{
    const int C = j->d->C, Cs = j->Cs, Ks = j->Ks, TB = j->TB, nv = Ks / 16;
    for (int p = 0; p < WI_POS; p++) {
        const float *Vp = V + (size_t)p * TB * Cs, *Up = U + p * u_ps(C, Ks);
        float *Mp = M + (size_t)p * TB * Ks;
        for (int v0 = 0; v0 < nv; v0 += 4) {
            int w = nv - v0 < 4 ? nv - v0 : 4, mr = w == 1 ? 24 : w == 2 ? 12 : w == 3 ? 8 : 6;
            for (int i = 0; i < rows; i += mr) {
                float *m = Mp + (size_t)i * Ks + 16 * v0;
                const float *v = Vp + (size_t)i * Cs, *u = Up + 16 * v0;
                if (w == 1)
                    gemm_24x1(m, Ks, v, Cs, u, C);
                else if (w == 2)
                    gemm_12x2(m, Ks, v, Cs, u, C);
                else if (w == 3)
                    gemm_8x3(m, Ks, v, Cs, u, C);
                else
                    gemm_6x4(m, Ks, v, Cs, u, C);
            }
        }
    }
}

AVX512 static void out_simd(const wi_job *j, const float *M, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int K = d->K, Ks = j->Ks, per = j->TH * j->TW;
    const size_t ps = (size_t)j->TB * Ks;
    const __m512 z = _mm512_setzero_ps();
    for (int i = 0; i < nt; i++) {
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        int oh0 = 2 * ty, ow0 = 2 * tx;
        bool ok[2][2];
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) ok[a][b] = oh0 + a < d->OH && ow0 + b < d->OW;
        float *o = j->out + (((size_t)n * d->OH + oh0) * d->OW + ow0) * K;
        for (int k = 0; k < K; k += 16) {
            __mmask16 mk = K - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k)) - 1);
            const float *m = M + (size_t)i * Ks + k;
            __m512 s[4][2], y[2][2];
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++) {
                __m512 m0 = _mm512_loadu_ps(m + b * ps), m1 = _mm512_loadu_ps(m + (4 + b) * ps),
                       m2 = _mm512_loadu_ps(m + (8 + b) * ps),
                       m3 = _mm512_loadu_ps(m + (12 + b) * ps);
                s[b][0] = _mm512_add_ps(_mm512_add_ps(m0, m1), m2);
                s[b][1] = _mm512_sub_ps(_mm512_sub_ps(m1, m2), m3);
            }
#pragma GCC unroll 2
            for (int a = 0; a < 2; a++) {
                y[a][0] = _mm512_add_ps(_mm512_add_ps(s[0][a], s[1][a]), s[2][a]);
                y[a][1] = _mm512_sub_ps(_mm512_sub_ps(s[1][a], s[2][a]), s[3][a]);
            }
            __m512 bv = j->b ? _mm512_maskz_loadu_ps(mk, j->b + k) : z;
#pragma GCC unroll 2
            for (int a = 0; a < 2; a++)
#pragma GCC unroll 2
                for (int b = 0; b < 2; b++) {
                    if (!ok[a][b]) continue;
                    float *p = o + ((size_t)a * d->OW + b) * K + k;
                    __m512 v = j->acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(mk, p), y[a][b])
                                      : _mm512_add_ps(y[a][b], bv);
                    if (j->relu) v = _mm512_max_ps(v, z);
                    _mm512_mask_storeu_ps(p, mk, v);
                }
        }
    }
}
#endif

/* The least common multiple of the register-tile heights gemm_simd uses
 * for Ks (its groups of up to 4 vectors of k: 6 rows for 4, 8 for 3, 12
 * for 2, 24 for 1): a block computes its rows in steps of it. */
static int f2_rows_step(int Ks)
{
    int nv = Ks / 16, g = 1;
    for (int v0 = 0; v0 < nv; v0 += 4) {
        int w = nv - v0 < 4 ? nv - v0 : 4, mr = w == 1 ? 24 : w == 2 ? 12 : w == 3 ? 8 : 6;
        int a = g, b = mr;
        while (b) {
            int t = a % b;
            a = b, b = t;
        }
        g = g / a * mr; /* lcm(g, mr) */
    }
    return g;
}

static int f2_setup(wi_job *j)
{
    const nn_conv_dims *d = j->d;
    j->TB = wino_tb(d->C, d->K), j->Cs = wi_r16(d->C), j->Ks = wi_r16(d->K);
    j->g = f2_rows_step(j->Ks);
    j->uf = WI_POS * u_ps(d->C, d->K), j->vf = (size_t)WI_POS * j->TB * j->Cs;
    return j->flip ? j->Ks / 16 : d->C;
}

#if WI_X86
#define F2_SIMD(f) f
#else
#define F2_SIMD(f) NULL
#endif

const wi_variant nn_wi_f2 = {.m = 2,
                             .pos = WI_POS,
                             .setup = f2_setup,
                             .u_row = u_row,
                             .in = {in_port, F2_SIMD(in_simd)},
                             .gemm = {gemm_port, F2_SIMD(gemm_simd)},
                             .out = {out_port, F2_SIMD(out_simd)}};
