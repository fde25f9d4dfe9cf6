/*
 * conv_wino4.c - Winograd F(4x4, 3x3) for 16 -> 16 channels: the variant
 * the driver (conv_wino.c) runs where nn_wino_ok / nn_wino_dgrad_ok pick it.
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
 * Blocks: W4_TB tiles (V[36][TB][16] and M in L1/L2). U (36 x 16 x 16) is
 * built in double once per call, a task per input channel. */
#include <string.h>

#include "conv_wino_impl.h"

#define W4_POS 36
#define W4_TB 12 /* tiles per block: V and M (2 x 36 x 12 x 16 floats) in L1/L2 */
#define W4_U (W4_POS * 16 * 16)

size_t nn_wi4_scratch(void)
{
    return W4_U + 2 * W4_POS * W4_TB * 16 + 16;
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

/* U[p][c][k] for input channel c = r: taps w[t][c][k], or (flip) the
 * layer's w[8 - t][k][c] (the layer's C and K are both 16) */
static void u4_task(void *arg, int r, int tid)
{
    const wi_job *j = arg;
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

static void in4_port(const wi_job *j, float *V, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const size_t ps = (size_t)W4_TB * 16;
    for (int i = 0; i < W4_TB; i++) {
        if (i >= nt) {
            for (int p = 0; p < W4_POS; p++) memset(V + p * ps + (size_t)i * 16, 0, 64);
            continue;
        }
        int h0, w0;
        const float *img = wi_tile_src(j, t0 + i, &h0, &w0);
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
static void gemm4_port(const wi_job *j, float *M, const float *V)
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
static void out4_port(const wi_job *j, const float *M, int t0, int nt)
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

AVX512 static void in4_simd(const wi_job *j, float *V, int t0, int nt)
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
        const float *img = wi_tile_src(j, t0 + i, &h0, &w0);
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
AVX512 static void gemm4_simd(const wi_job *j, float *M, const float *V)
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

AVX512 static void out4_simd(const wi_job *j, const float *M, int t0, int nt)
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

static int f4_setup(wi_job *j)
{
    j->TB = W4_TB, j->Cs = 16, j->Ks = 16, j->uf = W4_U;
    return 16;
}

#if WI_X86
#define F4_SIMD(f) f
#else
#define F4_SIMD(f) NULL
#endif

const wi_variant nn_wi_f4 = {.m = 4,
                             .pos = W4_POS,
                             .setup = f4_setup,
                             .u_task = u4_task,
                             .in = {in4_port, F4_SIMD(in4_simd)},
                             .gemm = {gemm4_port, F4_SIMD(gemm4_simd)},
                             .out = {out4_port, F4_SIMD(out4_simd)}};
