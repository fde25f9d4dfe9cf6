/*
 * conv_wino.c - Winograd minimal filtering F(2x2, 3x3) for stride-1 3x3
 * convolutions (Lavin & Gray 2016), forward and input gradient.
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
 * The input gradient of a stride-1 layer is the forward of dy zero-padded
 * by 2 - PH (2 - PW) with the kernel flipped and transposed (as conv.c's
 * fast path): the same code with U built from the flipped kernel.
 *
 * Work: blocks of TB tiles (TB a multiple of 24, fixed by C and K so that a
 * block's V and M stay in L2), numbered over the batch; a task transforms
 * its block's input into V, multiplies, and transforms M into the output.
 * Each output is computed by one task, in an order that does not depend
 * on the block it falls in (every register tile sums c = 0..C-1 in order),
 * so the result is the same bits for every thread count. U is built once
 * per call into thread 0's scratch (a task per input channel).
 *
 * The AVX-512 kernels are used when nn_narrow_use_simd says so; the
 * portable ones compute the same sums in plain C (the tests compare both
 * with a direct reference).
 */
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "pool.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define WI_X86 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,fma")))
#define INLINE __attribute__((always_inline)) inline
#else
#define WI_X86 0
#endif

#define WI_POS 16   /* positions of a 4x4 transformed tile */
#define WI_MR 24    /* TB is a multiple of every register-tile height (24, 12, 8, 6) */
#define WI_L2 65536 /* floats of V + M per block, at most (256 KB) */

static int r16(int n)
{
    return (n + 15) / 16 * 16;
}

/* ---- dispatch ------------------------------------------------------------ */

static int wino_mode = -1; /* -1: not read yet */

int nn_wino_use(int force)
{
    if (force >= 0 && force <= 3) wino_mode = force;
    if (wino_mode < 0) {
        const char *e = getenv("PSTRAIN_WINO");
        wino_mode = e && e[0] >= '0' && e[0] <= '3' && e[0] != '1' && !e[1] ? e[0] - '0' : 1;
    }
    return wino_mode;
}

bool nn_wino_shape(const nn_conv_dims *d)
{
    return d->KH == 3 && d->KW == 3 && d->SH == 1 && d->SW == 1 && d->PH >= 0 && d->PH <= 2 &&
           d->PW >= 0 && d->PW <= 2 && d->OH > 0 && d->OW > 0;
}

/* Where F(2x2, 3x3) measured faster than the direct kernels (docs/design.md
 * section 12, bench_conv): AVX-512, 32 or more channels on both sides (the
 * 16-channel layers of resnet-20 ran slower: too little product per tile
 * for the transforms), C*K <= 65536 (U, 16 C K floats, is read once per
 * block of tiles: 512x512 and 448x384 at 7x7-8x8 ran 2x slower) and at
 * least 256 tiles (the U transform and its traffic amortised). Monotone in
 * N: a smaller batch never switches it on. */
static bool wino_faster(const nn_conv_dims *d)
{
    size_t tiles = (size_t)d->N * ((d->OH + 1) / 2) * ((d->OW + 1) / 2);
    return WI_X86 && nn_narrow_use_simd(-1) && d->C >= 32 && d->K >= 32 &&
           (size_t)d->C * d->K <= 65536 && tiles >= 256;
}

static bool wino4_use(const nn_conv_dims *d);
static size_t wino4_scratch(const nn_conv_dims *d);

/* The forward takes F(4x4) only in mode 3 (tests): in resnet-20's training
 * step at batch 4 (torch-trainstep-resnet-20) its rounding, amplified by
 * the batch norms, moved a variable's change by up to 1.4% from PyTorch's
 * (the limit is 0.1%; direct kernels 0.015%, F(2x2) on every layer 0.063%);
 * F(4x4) for the input gradient only gives 0.037%. */
bool nn_wino_ok(const nn_conv_dims *d)
{
    int mode = nn_wino_use(-1);
    if (mode == 0 || !nn_wino_shape(d)) return false;
    return (mode == 3 && wino4_use(d)) || mode >= 2 || wino_faster(d);
}

/* The weight gradient where it measured faster (section 12): the
 * forward's rule, C*K <= 4096 (the slices' sums, 16 C K floats each, stay
 * small) and images of at most 56x56 (1.3-1.5x on ResNet-20's 32- and
 * 64-channel stages and ResNet-50's res2; Inception-v3's 147x147 and
 * 149x149 layers ran no faster). */
bool nn_wino_wgrad_ok(const nn_conv_dims *d)
{
    int mode = nn_wino_use(-1);
    if (mode == 0 || !nn_wino_shape(d)) return false;
    return mode >= 2 ||
           (wino_faster(d) && (size_t)d->C * d->K <= 4096 && (size_t)d->OH * d->OW <= 3136);
}

bool nn_wino_dgrad_ok(const nn_conv_dims *d)
{
    /* the input-gradient convolution: padding 2 - P must be >= 0 */
    return nn_wino_ok(d) || wino4_use(d);
}

/* Tiles per block: a multiple of WI_MR with V + M (16 TB (Cs + Ks) floats)
 * within WI_L2, at least WI_MR, at most 96. Symmetric in C and K, so the
 * forward and the input gradient share one scratch layout. */
static int wino_tb(int C, int K)
{
    int tb = WI_L2 / (WI_POS * (r16(C) + r16(K))) / WI_MR * WI_MR;
    if (tb > 4 * WI_MR) tb = 4 * WI_MR;
    return tb < WI_MR ? WI_MR : tb;
}

static size_t u_floats(int C, int K)
{
    return (size_t)WI_POS * r16(C) * r16(K);
}

/* Slices of the tiles whose weight-gradient sums S[pos][c][k] are kept
 * apart (then added in slice order): one per 256 tiles, at most N and as
 * many as WI_PARTS floats of sums allow. */
#define WI_PARTS (1u << 19)
static int wgrad_slices(const nn_conv_dims *d)
{
    size_t nt = (size_t)d->N * ((d->OH + 1) / 2) * ((d->OW + 1) / 2);
    size_t S = nt / 256, cap = WI_PARTS / u_floats(d->C, d->K);
    if (S > cap) S = cap;
    if (S > (size_t)d->N) S = (size_t)d->N;
    if (S > 64) S = 64;
    return S < 1 ? 1 : (int)S;
}

size_t nn_wino_scratch(const nn_conv_dims *d)
{
    if (!nn_wino_dgrad_ok(d) && !nn_wino_wgrad_ok(d)) return 0;
    size_t tb = (size_t)wino_tb(d->C, d->K), S = nn_wino_wgrad_ok(d) ? wgrad_slices(d) : 1;
    size_t f2 = S * u_floats(d->C, d->K) + WI_POS * tb * (r16(d->C) + r16(d->K)) + 16;
    size_t f4 = wino4_scratch(d);
    return f2 > f4 ? f2 : f4;
}

/* ---- the kernel transform: U[pos][c][Ks] = G g G^T ---------------------- */

typedef struct wino_job {
    const nn_conv_dims *d; /* the convolution computed (input gradient: its transpose) */
    const float *inp, *w, *b, *dy;
    float *out, *U, *scratch;
    size_t stride;
    bool relu, acc, flip, simd;
    int TH, TW, NT, TB, Cs, Ks, S; /* S: weight-gradient slices */
} wino_job;

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

/* Task r of U: forward, row c = r of every position (16 k at a time, read
 * and written contiguously); input gradient (flip: the layer's kernel
 * w[3][3][K][C] flipped and transposed), columns k in [16r, 16r + 16) (16
 * c at a time, transposed through a 16 x 16 block per position). */
static void u_task(void *arg, int r, int tid)
{
    const wino_job *j = arg;
    const int C = j->d->C, K = j->d->K, Ks = j->Ks;
    float g[9][16], u[WI_POS][16];
    (void)tid;
    if (!j->flip) {
        for (int k0 = 0; k0 < K; k0 += 16) {
            int m = K - k0 < 16 ? K - k0 : 16;
            for (int t = 0; t < 9; t++)
                for (int i = 0; i < 16; i++)
                    g[t][i] = i < m ? j->w[((size_t)t * C + r) * K + k0 + i] : 0.0f;
            u_16(u, g);
            for (int p = 0; p < WI_POS; p++)
                memcpy(j->U + ((size_t)p * C + r) * Ks + k0, u[p], sizeof(float) * 16);
        }
        return;
    }
    const int k0 = 16 * r, mk = K - k0 < 16 ? K - k0 : 16;
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
                memcpy(j->U + ((size_t)p * C + c0 + i) * Ks + k0, blk[p][i], sizeof(float) * 16);
    }
}

/* ---- portable kernels ------------------------------------------------------ */

/* Image n's tile origin and pointer for global tile t. */
static const float *tile_src(const wino_job *j, int t, int *h0, int *w0)
{
    const nn_conv_dims *d = j->d;
    int per = j->TH * j->TW, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
    *h0 = 2 * ty - d->PH, *w0 = 2 * tx - d->PW;
    return j->inp + (size_t)n * d->H * d->W * d->C;
}

/* V[pos][i][Cs] for tiles t0 + i, i < TB (zero past the last tile). */
static void in_port(const wino_job *j, float *V, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int C = d->C, Cs = j->Cs;
    const size_t ps = (size_t)j->TB * Cs;
    for (int i = 0; i < j->TB; i++) {
        if (i >= nt) {
            for (int p = 0; p < WI_POS; p++)
                memset(V + p * ps + (size_t)i * Cs, 0, sizeof(float) * Cs);
            continue;
        }
        int h0, w0;
        const float *img = tile_src(j, t0 + i, &h0, &w0);
        for (int c = 0; c < Cs; c++) {
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

/* M[pos][i][Ks] = V[pos][i][0, C) U[pos][0, C)[Ks], c in increasing order. */
static void gemm_port(const wino_job *j, float *M, const float *V)
{
    const int C = j->d->C, Cs = j->Cs, Ks = j->Ks, TB = j->TB;
    for (int p = 0; p < WI_POS; p++)
        for (int i = 0; i < TB; i++) {
            float *m = M + ((size_t)p * TB + i) * Ks;
            const float *v = V + ((size_t)p * TB + i) * Cs;
            const float *u = j->U + (size_t)p * C * Ks;
            for (int k = 0; k < Ks; k++) m[k] = 0.0f;
            for (int c = 0; c < C; c++)
                for (int k = 0; k < Ks; k++) m[k] += v[c] * u[(size_t)c * Ks + k];
        }
}

/* The output of tile t0 + i from M: A^T M A, + bias, acc, ReLU. */
static void out_port(const wino_job *j, const float *M, int t0, int nt)
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
AVX512 static void in_simd(const wino_job *j, float *V, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int C = d->C, Cs = j->Cs, H = d->H, W = d->W;
    const size_t ps = (size_t)j->TB * Cs;
    const __m512 z = _mm512_setzero_ps();
    for (int i = 0; i < j->TB; i++) {
        if (i >= nt) {
            for (int p = 0; p < WI_POS; p++)
                for (int c = 0; c < Cs; c += 16)
                    _mm512_storeu_ps(V + p * ps + (size_t)i * Cs + c, z);
            continue;
        }
        int h0, w0;
        const float *img = tile_src(j, t0 + i, &h0, &w0);
        bool inside = h0 >= 0 && w0 >= 0 && h0 + 4 <= H && w0 + 4 <= W;
        bool ok[4][4];
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 4; b++)
                ok[a][b] = inside || (h0 + a >= 0 && h0 + a < H && w0 + b >= 0 && w0 + b < W);
        const float *base = img + ((ptrdiff_t)h0 * W + w0) * C;
        for (int c = 0; c < Cs; c += 16) {
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

static void gemm_simd(const wino_job *j, float *M, const float *V)
{
    const int C = j->d->C, Cs = j->Cs, Ks = j->Ks, TB = j->TB, nv = Ks / 16;
    for (int p = 0; p < WI_POS; p++) {
        const float *Vp = V + (size_t)p * TB * Cs, *Up = j->U + (size_t)p * C * Ks;
        float *Mp = M + (size_t)p * TB * Ks;
        for (int v0 = 0; v0 < nv; v0 += 4) {
            int w = nv - v0 < 4 ? nv - v0 : 4, mr = w == 1 ? 24 : w == 2 ? 12 : w == 3 ? 8 : 6;
            for (int i = 0; i < TB; i += mr) {
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

AVX512 static void out_simd(const wino_job *j, const float *M, int t0, int nt)
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

/* ---- F(4x4, 3x3) for 16 -> 16 channels ------------------------------------
 *
 * ResNet-20's first stage (16 -> 16 channels at 28x28): with F(2x2) a tile
 * has only 16 products of 16 x 16 (the transforms cost as much), while the
 * direct kernels spend 9 multiply-adds per output and channel pair. F(4x4,
 * 3x3) (Lavin & Gray's points 0, +-1, +-2) cuts the output into 4x4 tiles
 * read from 6x6 input patches:
 *   B^T = | 4  0 -5  0  1  0 |   G = |  1/4    0     0   |
 *         | 0 -4 -4  1  1  0 |       | -1/6  -1/6  -1/6  |
 *         | 0  4 -4 -1  1  0 |       | -1/6   1/6  -1/6  |
 *         | 0 -2 -1  2  1  0 |       |  1/24  1/12  1/6  |
 *         | 0  2 -1 -2  1  0 |       |  1/24 -1/12  1/6  |
 *         | 0  4  0 -5  0  1 |       |  0     0     1    |
 *   A^T = | 1  1  1  1  1  0 |
 *         | 0  1 -1  2 -2  0 |
 *         | 0  1  1  4  4  0 |
 *         | 0  1 -1  8 -8  1 |
 * 36 products [tiles x 16] x [16 x 16] per 16 outputs: 2.25 multiplies per
 * output and channel pair instead of 9; a channel vector is one register,
 * so both transforms are vector additions over 16 channels.
 *
 * Error: the coefficients are no longer 0, +-1, +-1/2 but reach 5 (B^T)
 * and 8 (A^T): an output's rounding error is bounded by about 2 (C + 16) u
 * times A^T[(|G||g||G^T|) . (|B^T||d||B|)]A summed over c (|.|
 * elementwise); on random data the typical error is 4x F(2x2)'s (1e-6
 * relative). test_wino.c checks every output against a double-precision
 * direct convolution with that bound and the typical error with a sharper
 * limit. Used for the input gradient only: in resnet-20's training step
 * at batch 4 (torch-trainstep-resnet-20) the forward's error, amplified by
 * the batch norms, moved a variable's change by 1.4% from PyTorch's,
 * while with the input gradient alone the largest difference stays at
 * 0.037%, what F(2x2) on the other stages gave before (nn_wino_ok);
 * mode 3 runs the forward too (tests: the same kernels, unflipped).
 *
 * Work: blocks of W4_TB tiles numbered over the batch, one task per block
 * (transform the block's input into V[36][TB][16], 36 products into M,
 * transform M into the output): every output is computed by one task in an
 * order that does not depend on the block, so the bits do not depend on
 * the thread count. U (36 x 16 x 16) is built in double once per call, a
 * task per input channel. The input gradient is the same code on dy padded
 * by 2 - P with the flipped, transposed kernel. */

#define W4_POS 36
#define W4_TB 12 /* tiles per block: V and M (2 x 36 x 12 x 16 floats) in L1/L2 */
#define W4_U (W4_POS * 16 * 16)

/* F(4x4) for this 16 -> 16 shape: mode 1 with AVX-512 (the input gradient
 * only, nn_wino_ok), or mode 3 (tests: also portable, also the forward). */
static bool wino4_use(const nn_conv_dims *d)
{
    int mode = nn_wino_use(-1);
    if (!nn_wino_shape(d) || d->C != 16 || d->K != 16) return false;
    return mode == 3 || (mode == 1 && WI_X86 && nn_narrow_use_simd(-1));
}

static size_t wino4_scratch(const nn_conv_dims *d)
{
    return wino4_use(d) ? W4_U + 2 * W4_POS * W4_TB * 16 + 16 : 0;
}

/* u[p][16] = G g G^T for 16 kernels g[tap][16] at once, in double, rounded once */
static void u4_16(float u[W4_POS][16], float g[9][16])
{
    static const double G[6][3] = {{0.25, 0, 0},
                                   {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                   {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                   {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                   {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                   {0, 0, 1}};
    for (int a = 0; a < 6; a++)
        for (int b = 0; b < 6; b++)
            for (int i = 0; i < 16; i++) {
                double s = 0;
                for (int r = 0; r < 3; r++)
                    for (int t = 0; t < 3; t++) s += G[a][r] * (double)g[3 * r + t][i] * G[b][t];
                u[6 * a + b][i] = (float)s;
            }
}

typedef struct w4_job {
    const nn_conv_dims *d; /* the convolution computed (input gradient: its transpose) */
    const float *inp, *w, *b;
    float *out, *U, *scratch;
    size_t stride;
    bool relu, acc, flip, simd;
    int TH, TW, NT;
} w4_job;

/* U[p][c][k] for input channel c = r: taps w[t][c][k], or (flip) the
 * layer's w[8 - t][k][c] (the layer's C and K are both 16) */
static void u4_task(void *arg, int r, int tid)
{
    const w4_job *j = arg;
    float g[9][16], u[W4_POS][16];
    (void)tid;
    for (int t = 0; t < 9; t++)
        for (int i = 0; i < 16; i++)
            g[t][i] = j->flip ? j->w[((size_t)(8 - t) * 16 + i) * 16 + r]
                              : j->w[((size_t)t * 16 + r) * 16 + i];
    u4_16(u, g);
    for (int p = 0; p < W4_POS; p++) memcpy(j->U + ((size_t)p * 16 + r) * 16, u[p], sizeof(u[p]));
}

/* Image n, tile origin (h0, w0) of global tile t. */
static const float *tile4_src(const w4_job *j, int t, int *h0, int *w0)
{
    const nn_conv_dims *d = j->d;
    int per = j->TH * j->TW, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
    *h0 = 4 * ty - d->PH, *w0 = 4 * tx - d->PW;
    return j->inp + (size_t)n * d->H * d->W * 16;
}

/* t[0..5] = B^T x[0..5] (one channel), s = stride of x and t */
static void bt6_port(float *t, const float *x, size_t s)
{
    float x0 = x[0], x1 = x[s], x2 = x[2 * s], x3 = x[3 * s], x4 = x[4 * s], x5 = x[5 * s];
    float a = x4 - 4 * x2, b = x3 - 4 * x1, c = x4 - x2, e = 2 * (x3 - x1);
    t[0] = 4 * x0 - 5 * x2 + x4;
    t[s] = a + b;
    t[2 * s] = a - b;
    t[3 * s] = c + e;
    t[4 * s] = c - e;
    t[5 * s] = 4 * x1 - 5 * x3 + x5;
}

static void in4_port(const w4_job *j, float *V, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const size_t ps = (size_t)W4_TB * 16;
    for (int i = 0; i < W4_TB; i++) {
        if (i >= nt) {
            for (int p = 0; p < W4_POS; p++) memset(V + p * ps + (size_t)i * 16, 0, 64);
            continue;
        }
        int h0, w0;
        const float *img = tile4_src(j, t0 + i, &h0, &w0);
        for (int c = 0; c < 16; c++) {
            float x[6][6], t[6][6];
            for (int a = 0; a < 6; a++)
                for (int b = 0; b < 6; b++) {
                    int h = h0 + a, w = w0 + b;
                    bool in = h >= 0 && h < d->H && w >= 0 && w < d->W;
                    x[a][b] = in ? img[((size_t)h * d->W + w) * 16 + c] : 0.0f;
                }
            for (int b = 0; b < 6; b++) bt6_port(&t[0][b], &x[0][b], 6);
            for (int a = 0; a < 6; a++) bt6_port(&x[a][0], &t[a][0], 1);
            for (int p = 0; p < W4_POS; p++) V[p * ps + (size_t)i * 16 + c] = x[p / 6][p % 6];
        }
    }
}

/* M[p][i][k] = sum over c in order of V[p][i][c] U[p][c][k] */
static void gemm4_port(const w4_job *j, float *M, const float *V)
{
    for (int p = 0; p < W4_POS; p++)
        for (int i = 0; i < W4_TB; i++) {
            float *m = M + ((size_t)p * W4_TB + i) * 16;
            const float *v = V + ((size_t)p * W4_TB + i) * 16, *u = j->U + (size_t)p * 256;
            for (int k = 0; k < 16; k++) m[k] = 0.0f;
            for (int c = 0; c < 16; c++)
                for (int k = 0; k < 16; k++) m[k] += v[c] * u[c * 16 + k];
        }
}

/* y[0..3] = A^T m[0..5], strides s (m) and sy (y) */
static void at6_port(float *y, size_t sy, const float *m, size_t s)
{
    float s12 = m[s] + m[2 * s], d12 = m[s] - m[2 * s], s34 = m[3 * s] + m[4 * s],
          d34 = m[3 * s] - m[4 * s];
    y[0] = m[0] + s12 + s34;
    y[sy] = d12 + 2 * d34;
    y[2 * sy] = s12 + 4 * s34;
    y[3 * sy] = d12 + 8 * d34 + m[5 * s];
}

/* Output pixel (oh, ow) of image n, channel k, from y: + bias, acc, ReLU */
static void out4_port(const w4_job *j, const float *M, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int per = j->TH * j->TW;
    const size_t ps = (size_t)W4_TB * 16;
    for (int i = 0; i < nt; i++) {
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        for (int k = 0; k < 16; k++) {
            float m[36], s[4][6], y[4][4];
            for (int p = 0; p < W4_POS; p++) m[p] = M[p * ps + (size_t)i * 16 + k];
            for (int b = 0; b < 6; b++) at6_port(&s[0][b], 6, m + b, 6);
            for (int a = 0; a < 4; a++) at6_port(&y[a][0], 1, &s[a][0], 1);
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) {
                    int oh = 4 * ty + a, ow = 4 * tx + b;
                    if (oh >= d->OH || ow >= d->OW) continue;
                    float *o = j->out + (((size_t)n * d->OH + oh) * d->OW + ow) * 16 + k;
                    float v = j->acc ? *o + y[a][b] : y[a][b] + (j->b ? j->b[k] : 0.0f);
                    *o = j->relu && v < 0.0f ? 0.0f : v;
                }
        }
    }
}

#if WI_X86
/* t[0..5] = B^T x[0..5], 16 channels */
#define BT6(t, x)                                                                                  \
    do {                                                                                           \
        const __m512 f4 = _mm512_set1_ps(4.0f), f5 = _mm512_set1_ps(5.0f);                         \
        __m512 a_ = _mm512_fnmadd_ps(f4, x[2], x[4]), b_ = _mm512_fnmadd_ps(f4, x[1], x[3]);       \
        __m512 c_ = _mm512_sub_ps(x[4], x[2]), e_ = _mm512_sub_ps(x[3], x[1]);                     \
        e_ = _mm512_add_ps(e_, e_);                                                                \
        t[0] = _mm512_fmadd_ps(f4, x[0], _mm512_fnmadd_ps(f5, x[2], x[4]));                        \
        t[1] = _mm512_add_ps(a_, b_);                                                              \
        t[2] = _mm512_sub_ps(a_, b_);                                                              \
        t[3] = _mm512_add_ps(c_, e_);                                                              \
        t[4] = _mm512_sub_ps(c_, e_);                                                              \
        t[5] = _mm512_fmadd_ps(f4, x[1], _mm512_fnmadd_ps(f5, x[3], x[5]));                        \
    } while (0)

AVX512 static void in4_simd(const w4_job *j, float *V, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int H = d->H, W = d->W;
    const size_t ps = (size_t)W4_TB * 16;
    const __m512 z = _mm512_setzero_ps();
    for (int i = 0; i < W4_TB; i++) {
        if (i >= nt) {
            for (int p = 0; p < W4_POS; p++) _mm512_storeu_ps(V + p * ps + (size_t)i * 16, z);
            continue;
        }
        int h0, w0;
        const float *img = tile4_src(j, t0 + i, &h0, &w0);
        bool inside = h0 >= 0 && w0 >= 0 && h0 + 6 <= H && w0 + 6 <= W;
        __m512 t[6][6];
#pragma GCC unroll 6
        for (int b = 0; b < 6; b++) {
            __m512 x[6], y[6];
            bool colok = w0 + b >= 0 && w0 + b < W;
#pragma GCC unroll 6
            for (int a = 0; a < 6; a++) {
                int h = h0 + a, w = w0 + b;
                x[a] = inside || (colok && h >= 0 && h < H)
                           ? _mm512_loadu_ps(img + ((ptrdiff_t)h * W + w) * 16)
                           : z;
            }
            BT6(y, x);
#pragma GCC unroll 6
            for (int a = 0; a < 6; a++) t[a][b] = y[a];
        }
        float *v = V + (size_t)i * 16;
#pragma GCC unroll 6
        for (int a = 0; a < 6; a++) {
            __m512 y[6];
            BT6(y, t[a]);
#pragma GCC unroll 6
            for (int b = 0; b < 6; b++) _mm512_storeu_ps(v + (size_t)(6 * a + b) * ps, y[b]);
        }
    }
}

/* 12 tiles x 16 k of M at position p: sum over c in order */
AVX512 static void gemm4_simd(const w4_job *j, float *M, const float *V)
{
    for (int p = 0; p < W4_POS; p++) {
        const float *U = j->U + (size_t)p * 256, *v = V + (size_t)p * W4_TB * 16;
        __m512 acc[W4_TB];
#pragma GCC unroll 12
        for (int i = 0; i < W4_TB; i++) acc[i] = _mm512_setzero_ps();
#pragma GCC unroll 4
        for (int c = 0; c < 16; c++) {
            __m512 u = _mm512_loadu_ps(U + c * 16);
#pragma GCC unroll 12
            for (int i = 0; i < W4_TB; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(v[i * 16 + c]), u, acc[i]);
        }
        float *m = M + (size_t)p * W4_TB * 16;
#pragma GCC unroll 12
        for (int i = 0; i < W4_TB; i++) _mm512_storeu_ps(m + i * 16, acc[i]);
    }
}

/* y[0..3] = A^T m[0..5], 16 channels */
#define AT6(y, m)                                                                                  \
    do {                                                                                           \
        __m512 s12 = _mm512_add_ps(m[1], m[2]), d12 = _mm512_sub_ps(m[1], m[2]);                   \
        __m512 s34 = _mm512_add_ps(m[3], m[4]), d34 = _mm512_sub_ps(m[3], m[4]);                   \
        y[0] = _mm512_add_ps(_mm512_add_ps(m[0], s12), s34);                                       \
        y[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), d34, d12);                                    \
        y[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), s34, s12);                                    \
        y[3] = _mm512_add_ps(_mm512_fmadd_ps(_mm512_set1_ps(8.0f), d34, d12), m[5]);               \
    } while (0)

AVX512 static void out4_simd(const w4_job *j, const float *M, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int per = j->TH * j->TW;
    const size_t ps = (size_t)W4_TB * 16;
    const __m512 z = _mm512_setzero_ps(), bv = j->b ? _mm512_loadu_ps(j->b) : z;
    for (int i = 0; i < nt; i++) {
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        int oh0 = 4 * ty, ow0 = 4 * tx;
        const float *m = M + (size_t)i * 16;
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
        float *o = j->out + (((size_t)n * d->OH + oh0) * d->OW + ow0) * 16;
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            __m512 y[4];
            AT6(y, s[a]);
            if (oh0 + a >= d->OH) continue;
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++) {
                if (ow0 + b >= d->OW) continue;
                float *q = o + ((size_t)a * d->OW + b) * 16;
                __m512 v =
                    j->acc ? _mm512_add_ps(_mm512_loadu_ps(q), y[b]) : _mm512_add_ps(y[b], bv);
                if (j->relu) v = _mm512_max_ps(v, z);
                _mm512_storeu_ps(q, v);
            }
        }
    }
}
#endif

static void block4_task(void *arg, int task, int tid)
{
    const w4_job *j = arg;
    float *V = j->scratch + (size_t)tid * j->stride + W4_U;
    float *M = V + (size_t)W4_POS * W4_TB * 16;
    int t0 = task * W4_TB, nt = j->NT - t0 < W4_TB ? j->NT - t0 : W4_TB;
#if WI_X86
    if (j->simd) {
        in4_simd(j, V, t0, nt);
        gemm4_simd(j, M, V);
        out4_simd(j, M, t0, nt);
        return;
    }
#endif
    in4_port(j, V, t0, nt);
    gemm4_port(j, M, V);
    out4_port(j, M, t0, nt);
}

static void wino4_run(w4_job *j, nn_pool *pool)
{
    const nn_conv_dims *d = j->d;
    j->simd = WI_X86 && nn_narrow_use_simd(-1);
    j->TH = (d->OH + 3) / 4, j->TW = (d->OW + 3) / 4, j->NT = d->N * j->TH * j->TW;
    j->U = j->scratch;
    nn_pool_for(pool, 16, u4_task, j);
    nn_pool_for(pool, (j->NT + W4_TB - 1) / W4_TB, block4_task, j);
}

/* ---- the driver ------------------------------------------------------------- */

static void block_task(void *arg, int task, int tid)
{
    const wino_job *j = arg;
    float *V = j->scratch + (size_t)tid * j->stride + u_floats(j->d->C, j->d->K);
    float *M = V + (size_t)WI_POS * j->TB * j->Cs;
    int t0 = task * j->TB, nt = j->NT - t0 < j->TB ? j->NT - t0 : j->TB;
#if WI_X86
    if (j->simd) {
        in_simd(j, V, t0, nt);
        gemm_simd(j, M, V);
        out_simd(j, M, t0, nt);
        return;
    }
#endif
    in_port(j, V, t0, nt);
    gemm_port(j, M, V);
    out_port(j, M, t0, nt);
}

static void wino_run(wino_job *j, nn_pool *pool)
{
    const nn_conv_dims *d = j->d;
    j->simd = WI_X86 && nn_narrow_use_simd(-1);
    j->TH = (d->OH + 1) / 2, j->TW = (d->OW + 1) / 2, j->NT = d->N * j->TH * j->TW;
    j->TB = wino_tb(d->C, d->K), j->Cs = r16(d->C), j->Ks = r16(d->K);
    j->U = j->scratch;
    nn_pool_for(pool, j->flip ? j->Ks / 16 : d->C, u_task, j);
    nn_pool_for(pool, (j->NT + j->TB - 1) / j->TB, block_task, j);
}

void nn_wino_forward(float *out, const float *inp, const float *w, const float *b,
                     const nn_conv_dims *d, bool relu, nn_pool *pool, float *scratch, size_t stride)
{
    if (nn_wino_use(-1) == 3 && wino4_use(d)) {
        w4_job j4 = {.d = d,
                     .inp = inp,
                     .w = w,
                     .b = b,
                     .out = out,
                     .scratch = scratch,
                     .stride = stride,
                     .relu = relu};
        wino4_run(&j4, pool);
        return;
    }
    wino_job j = {.d = d,
                  .inp = inp,
                  .w = w,
                  .b = b,
                  .out = out,
                  .scratch = scratch,
                  .stride = stride,
                  .relu = relu};
    wino_run(&j, pool);
}

void nn_wino_dgrad(float *dinp, bool acc, const float *dout, const float *w, const nn_conv_dims *d,
                   nn_pool *pool, float *scratch, size_t stride)
{
    /* dinp = conv(dy padded by 2 - P, flipped and transposed kernel) */
    nn_conv_dims g = {d->N, d->OH, d->OW, d->K, 3, 3, 1, 1, 2 - d->PH, 2 - d->PW, d->H, d->W, d->C};
    if (wino4_use(d)) {
        w4_job j4 = {.d = &g,
                     .inp = dout,
                     .w = w,
                     .out = dinp,
                     .scratch = scratch,
                     .stride = stride,
                     .acc = acc,
                     .flip = true};
        wino4_run(&j4, pool);
        return;
    }
    wino_job j = {.d = &g,
                  .inp = dout,
                  .w = w,
                  .out = dinp,
                  .scratch = scratch,
                  .stride = stride,
                  .acc = acc,
                  .flip = true};
    wino_run(&j, pool);
}

/* ---- the weight gradient ------------------------------------------------
 * With Z = A dY A^T (the 2x2 dy tile to 4x4; A = [1 0; 1 1; 1 -1; 0 -1]):
 *   dU[pos][c][k] = sum over tiles of V[pos][t][c] Z[pos][t][k]
 *   dW[tap][c][k] = G^T dU G   (4x4 -> 3x3 for each c, k)
 * (the gradient of y = A^T[U . V]A with U = G g G^T). The tiles are cut into
 * S slices fixed by the shapes (wgrad_slices); slice s sums its tiles in
 * order, block by block, into its own dU; then dU = dU_0 + dU_1 + ... in
 * slice order and the G^T (.) G transform, by input channel. */

/* Z[pos][i][Ks] for tiles t0 + i, i < nt (zero past them, and past OH, OW). */
static void z_port(const wino_job *j, float *Z, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int K = d->K, Ks = j->Ks, per = j->TH * j->TW;
    const size_t ps = (size_t)j->TB * Ks;
    for (int i = 0; i < j->TB; i++) {
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        for (int k = 0; k < Ks; k++) {
            float y[2][2], q[2][4];
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++) {
                    int oh = 2 * ty + a, ow = 2 * tx + b;
                    bool in = i < nt && k < K && oh < d->OH && ow < d->OW;
                    y[a][b] = in ? j->dy[(((size_t)n * d->OH + oh) * d->OW + ow) * K + k] : 0.0f;
                }
            for (int a = 0; a < 2; a++) {
                q[a][0] = y[a][0];
                q[a][1] = y[a][0] + y[a][1];
                q[a][2] = y[a][0] - y[a][1];
                q[a][3] = -y[a][1];
            }
            float *z = Z + (size_t)i * Ks + k;
            for (int b = 0; b < 4; b++) {
                z[b * ps] = q[0][b];
                z[(4 + b) * ps] = q[0][b] + q[1][b];
                z[(8 + b) * ps] = q[0][b] - q[1][b];
                z[(12 + b) * ps] = -q[1][b];
            }
        }
    }
}

/* dU[pos][c][Ks] (+)= sum over i < nt of V[pos][i][c] Z[pos][i][k], i in order. */
static void wgemm_port(const wino_job *j, float *dU, const float *V, const float *Z, int nt,
                       bool acc)
{
    const int Cs = j->Cs, Ks = j->Ks, TB = j->TB;
    for (int p = 0; p < WI_POS; p++)
        for (int c = 0; c < Cs; c++) {
            float *o = dU + ((size_t)p * Cs + c) * Ks;
            if (!acc) memset(o, 0, sizeof(float) * Ks);
            for (int i = 0; i < nt; i++) {
                float v = V[((size_t)p * TB + i) * Cs + c];
                const float *z = Z + ((size_t)p * TB + i) * Ks;
                for (int k = 0; k < Ks; k++) o[k] += v * z[k];
            }
        }
}

#if WI_X86
AVX512 static void z_simd(const wino_job *j, float *Z, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int K = d->K, Ks = j->Ks, per = j->TH * j->TW;
    const size_t ps = (size_t)j->TB * Ks;
    const __m512 z0 = _mm512_setzero_ps();
    for (int i = 0; i < j->TB; i++) {
        float *z = Z + (size_t)i * Ks;
        if (i >= nt) {
            for (int p = 0; p < WI_POS; p++)
                for (int k = 0; k < Ks; k += 16) _mm512_storeu_ps(z + p * ps + k, z0);
            continue;
        }
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        bool ok[2][2];
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) ok[a][b] = 2 * ty + a < d->OH && 2 * tx + b < d->OW;
        const float *src = j->dy + (((size_t)n * d->OH + 2 * ty) * d->OW + 2 * tx) * K;
        for (int k = 0; k < Ks; k += 16) {
            __mmask16 m = K - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k)) - 1);
            __m512 y[2][2], q[2][4];
#pragma GCC unroll 2
            for (int a = 0; a < 2; a++)
#pragma GCC unroll 2
                for (int b = 0; b < 2; b++)
                    y[a][b] = ok[a][b]
                                  ? _mm512_maskz_loadu_ps(m, src + ((size_t)a * d->OW + b) * K + k)
                                  : z0;
#pragma GCC unroll 2
            for (int a = 0; a < 2; a++) {
                q[a][0] = y[a][0];
                q[a][1] = _mm512_add_ps(y[a][0], y[a][1]);
                q[a][2] = _mm512_sub_ps(y[a][0], y[a][1]);
                q[a][3] = _mm512_sub_ps(z0, y[a][1]);
            }
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++) {
                _mm512_storeu_ps(z + b * ps + k, q[0][b]);
                _mm512_storeu_ps(z + (4 + b) * ps + k, _mm512_add_ps(q[0][b], q[1][b]));
                _mm512_storeu_ps(z + (8 + b) * ps + k, _mm512_sub_ps(q[0][b], q[1][b]));
                _mm512_storeu_ps(z + (12 + b) * ps + k, _mm512_sub_ps(z0, q[1][b]));
            }
        }
    }
}

/* MR channels c x NV vectors of k of dU at one position, over nt tiles. */
AVX512 static INLINE void wgemm_tile(int MR, int NV, float *dU, int Ks, const float *V, int Cs,
                                     const float *Z, int nt, bool acc)
{
    __m512 s[16][3];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++)
            s[i][v] = acc ? _mm512_loadu_ps(dU + (size_t)i * Ks + 16 * v) : _mm512_setzero_ps();
    for (int t = 0; t < nt; t++) {
        __m512 z[3];
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) z[v] = _mm512_loadu_ps(Z + (size_t)t * Ks + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            __m512 x = _mm512_set1_ps(V[(size_t)t * Cs + i]);
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++) s[i][v] = _mm512_fmadd_ps(x, z[v], s[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(dU + (size_t)i * Ks + 16 * v, s[i][v]);
}

AVX512 static void wgemm_16x1(float *dU, int Ks, const float *V, int Cs, const float *Z, int nt,
                              bool acc)
{
    wgemm_tile(16, 1, dU, Ks, V, Cs, Z, nt, acc);
}
AVX512 static void wgemm_8x2(float *dU, int Ks, const float *V, int Cs, const float *Z, int nt,
                             bool acc)
{
    wgemm_tile(8, 2, dU, Ks, V, Cs, Z, nt, acc);
}
AVX512 static void wgemm_8x3(float *dU, int Ks, const float *V, int Cs, const float *Z, int nt,
                             bool acc)
{
    wgemm_tile(8, 3, dU, Ks, V, Cs, Z, nt, acc);
}

static void wgemm_simd(const wino_job *j, float *dU, const float *V, const float *Z, int nt,
                       bool acc)
{
    const int Cs = j->Cs, Ks = j->Ks, TB = j->TB, nv = Ks / 16;
    for (int p = 0; p < WI_POS; p++) {
        const float *Vp = V + (size_t)p * TB * Cs, *Zp = Z + (size_t)p * TB * Ks;
        float *Sp = dU + (size_t)p * Cs * Ks;
        for (int v0 = 0; v0 < nv; v0 += 3) {
            int w = nv - v0 < 3 ? nv - v0 : 3, mr = w == 1 ? 16 : 8;
            for (int c = 0; c < Cs; c += mr) {
                float *o = Sp + (size_t)c * Ks + 16 * v0;
                const float *v = Vp + c, *z = Zp + 16 * v0;
                if (w == 1)
                    wgemm_16x1(o, Ks, v, Cs, z, nt, acc);
                else if (w == 2)
                    wgemm_8x2(o, Ks, v, Cs, z, nt, acc);
                else
                    wgemm_8x3(o, Ks, v, Cs, z, nt, acc);
            }
        }
    }
}
#endif

/* Slice s: its tiles, block by block, into dU_s (thread 0's scratch). */
static void wslice_task(void *arg, int s, int tid)
{
    const wino_job *j = arg;
    float *V = j->scratch + (size_t)tid * j->stride + (size_t)j->S * u_floats(j->d->C, j->d->K);
    float *Z = V + (size_t)WI_POS * j->TB * j->Cs;
    float *dU = j->U + (size_t)s * u_floats(j->d->C, j->d->K);
    int a, e;
    nn_pool_block(j->NT, j->S, s, &a, &e);
    for (int t0 = a; t0 < e; t0 += j->TB) {
        int nt = e - t0 < j->TB ? e - t0 : j->TB;
#if WI_X86
        if (j->simd) {
            in_simd(j, V, t0, nt);
            z_simd(j, Z, t0, nt);
            wgemm_simd(j, dU, V, Z, nt, t0 > a);
            continue;
        }
#endif
        in_port(j, V, t0, nt);
        z_port(j, Z, t0, nt);
        wgemm_port(j, dU, V, Z, nt, t0 > a);
    }
    if (e == a) memset(dU, 0, sizeof(float) * WI_POS * j->Cs * j->Ks);
}

/* dw[tap][c][k] for input channel c: dU summed over the slices in order, then
 * G^T dU G. */
NN_CLONES static void wout_row(float *dw, const float *const *su, int S, int Cs, int C, int K,
                               int Ks, int c)
{
    float buf[WI_POS][16];
    for (int k0 = 0; k0 < K; k0 += 16) {
        int m = K - k0 < 16 ? K - k0 : 16;
        for (int p = 0; p < WI_POS; p++) {
            const size_t off = ((size_t)p * Cs + c) * Ks + k0;
            for (int i = 0; i < 16; i++) buf[p][i] = su[0][off + i];
            for (int s = 1; s < S; s++)
                for (int i = 0; i < 16; i++) buf[p][i] += su[s][off + i];
        }
        for (int i = 0; i < m; i++) {
            float t[4][3];
            for (int a = 0; a < 4; a++) {
                float x0 = buf[4 * a][i], x1 = buf[4 * a + 1][i], x2 = buf[4 * a + 2][i],
                      x3 = buf[4 * a + 3][i];
                t[a][0] = x0 + 0.5f * (x1 + x2);
                t[a][1] = 0.5f * (x1 - x2);
                t[a][2] = 0.5f * (x1 + x2) + x3;
            }
            for (int b = 0; b < 3; b++) {
                dw[((size_t)(0 * 3 + b) * C + c) * K + k0 + i] =
                    t[0][b] + 0.5f * (t[1][b] + t[2][b]);
                dw[((size_t)(1 * 3 + b) * C + c) * K + k0 + i] = 0.5f * (t[1][b] - t[2][b]);
                dw[((size_t)(2 * 3 + b) * C + c) * K + k0 + i] =
                    0.5f * (t[1][b] + t[2][b]) + t[3][b];
            }
        }
    }
}

static void wout_task(void *arg, int c, int tid)
{
    const wino_job *j = arg;
    const float *su[64];
    for (int s = 0; s < j->S; s++) su[s] = j->U + (size_t)s * u_floats(j->d->C, j->d->K);
    wout_row(j->out, su, j->S, j->Cs, j->d->C, j->d->K, j->Ks, c);
    (void)tid;
}

void nn_wino_wgrad(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                   nn_pool *pool, float *scratch, size_t stride)
{
    wino_job j = {.d = d, .inp = inp, .dy = dout, .out = dw, .scratch = scratch, .stride = stride};
    j.simd = WI_X86 && nn_narrow_use_simd(-1);
    j.TH = (d->OH + 1) / 2, j.TW = (d->OW + 1) / 2, j.NT = d->N * j.TH * j.TW;
    j.TB = wino_tb(d->C, d->K), j.Cs = r16(d->C), j.Ks = r16(d->K);
    j.S = wgrad_slices(d), j.U = scratch;
    nn_pool_for(pool, j.S, wslice_task, &j);
    nn_pool_for(pool, d->C, wout_task, &j);
}
