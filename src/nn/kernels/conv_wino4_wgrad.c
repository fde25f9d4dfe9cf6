/*
 * conv_wino4_wgrad.c - the weight gradient of 3x3 stride-1 layers through
 * Winograd F(4x4, 3x3): 16 -> 16 (nn_wi4_wgrad) and C and K multiples of
 * 16 up to 64 (nn_wi4k_wgrad, at the end of the file);
 * conv_wino.c's nn_wino_wgrad calls them, with the points and the input
 * transform of conv_wino4.c (shared through conv_wino4_impl.h).
 *
 * With Z = A dY A^T (the 4x4 dy tile to 6x6; A is A^T transposed) and V
 * the forward's input transform:
 *   dU[p][c][k] = sum over tiles of V[p][t][c] Z[p][t][k]
 *   dW[tap][c][k] = G^T dU G   (6x6 -> 3x3 for each c, k)
 * (the gradient of y = A^T[U . V]A with U = G g G^T): 36 x 16 x 16
 * multiply-adds per 4x4 tile against the direct kernels' 16 x 9 x 16 x 16.
 * The tiles are cut into S slices fixed by the shapes (w4_slices: one per
 * 256 tiles, 12 at batch 64 and 28x28, their sums 442 KB); slice s sums
 * its tiles W4_WTB at a time, each block in float from zero (in order),
 * and adds the block sums in order into its own dU (in its thread's scratch):
 * 16 + 16 sequential additions per 256 tiles instead of 256. Then, per
 * input channel c, the slices are added in slice order in double and
 * G^T dU G is taken in double, rounded once. The typical error at
 * resnet-20's shape is about twice the direct kernels'; a slice summing
 * its tiles in one chain would be less accurate, slices of 64 tiles only a
 * little more accurate with 2 MB of sums (and slower). */
#include "conv_wino4_impl.h"

#define W4_WTB 16            /* tiles per block (V and Z: 36 KB each) */
#define W4_WPARTS (1u << 19) /* floats of slice sums, at most (2 MB) */
_Static_assert(W4_WPARTS / W4_U <= WI_MAX_SLICES, "w4_slices' cap must fit nn_wi4_wgrad's su[]");
#define W4_WVZ (W4_POS * W4_WTB * 16)

static int w4_slices(const nn_conv_dims *d)
{
    size_t nt = (size_t)d->N * ((d->OH + 3) / 4) * ((d->OW + 3) / 4);
    size_t S = nt / 256, cap = W4_WPARTS / W4_U;
    if (S > cap) S = cap;
    return S < 1 ? 1 : (int)S;
}

/* floats per thread: room for all the slices' dU (each in the scratch of the thread that sums it),
 * then V and Z */
size_t nn_wi4_wgrad_scratch(const nn_conv_dims *d)
{
    return (size_t)w4_slices(d) * W4_U + 2 * W4_WVZ + 16;
}

/* t[0..5] = A y[0..3] (one channel), strides st (t) and s (y); the powers
 * of 2 nested so that each product is exact */
static void az6_port(float *t, size_t st, const float *y, size_t s)
{
    float y0 = y[0], y1 = y[s], y2 = y[2 * s], y3 = y[3 * s], e = y0 + y2, o = y1 + y3;
    t[0] = y0;
    t[st] = e - o;
    t[2 * st] = e + o;
    t[3 * st] = y0 + 0.5f * (y1 + 0.5f * (y2 + 0.5f * y3));
    t[4 * st] = y0 - 2 * (y1 - 2 * (y2 - 2 * y3));
    t[5 * st] = y3;
}

/* Z[p][i][k] for tiles t0 + i, i < W4_WTB (zero past nt, OH and OW) */
static void z4_port(const wi_job *j, float *Z, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int per = j->TH * j->TW;
    const size_t ps = (size_t)W4_WTB * 16;
    for (int i = 0; i < W4_WTB; i++) {
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        for (int k = 0; k < 16; k++) {
            float y[4][4], q[4][6], z[6][6];
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) {
                    int oh = 4 * ty + a, ow = 4 * tx + b;
                    bool in = i < nt && oh < d->OH && ow < d->OW;
                    y[a][b] = in ? j->dy[(((size_t)n * d->OH + oh) * d->OW + ow) * 16 + k] : 0.0f;
                }
            for (int a = 0; a < 4; a++) az6_port(&q[a][0], 1, &y[a][0], 1);
            for (int b = 0; b < 6; b++) az6_port(&z[0][b], 6, &q[0][b], 6);
            for (int p = 0; p < W4_POS; p++) Z[p * ps + (size_t)i * 16 + k] = z[p / 6][p % 6];
        }
    }
}

/* dU[p][c][k] (+)= the block's sum over i < nt of V[p][i][c] Z[p][i][k],
 * i in order, from zero (dU adds whole blocks) */
static void wgemm4_port(float *dU, const float *V, const float *Z, int nt, bool acc)
{
    for (int p = 0; p < W4_POS; p++)
        for (int c = 0; c < 16; c++) {
            float *o = dU + ((size_t)p * 16 + c) * 16, s[16] = {0};
            for (int i = 0; i < nt; i++) {
                float v = V[((size_t)p * W4_WTB + i) * 16 + c];
                const float *z = Z + ((size_t)p * W4_WTB + i) * 16;
                for (int k = 0; k < 16; k++) s[k] += v * z[k];
            }
            for (int k = 0; k < 16; k++) o[k] = acc ? o[k] + s[k] : s[k];
        }
}

#if WI_X86
/* t[0..5] = A y[0..3], 16 channels, the order of az6_port */
#define AZ6(t, y)                                                                                  \
    do {                                                                                           \
        const __m512 h = _mm512_set1_ps(0.5f), f2 = _mm512_set1_ps(2.0f);                          \
        __m512 e = _mm512_add_ps(y[0], y[2]), o = _mm512_add_ps(y[1], y[3]);                       \
        t[0] = y[0];                                                                               \
        t[1] = _mm512_sub_ps(e, o);                                                                \
        t[2] = _mm512_add_ps(e, o);                                                                \
        t[3] = _mm512_fmadd_ps(h, _mm512_fmadd_ps(h, _mm512_fmadd_ps(h, y[3], y[2]), y[1]), y[0]); \
        t[4] = _mm512_fnmadd_ps(f2, _mm512_fnmadd_ps(f2, _mm512_fnmadd_ps(f2, y[3], y[2]), y[1]),  \
                                y[0]);                                                             \
        t[5] = y[3];                                                                               \
    } while (0)

AVX512 static INLINE void z4_simd(const wi_job *j, float *Z, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int per = j->TH * j->TW, OH = d->OH, OW = d->OW;
    const size_t ps = (size_t)W4_WTB * 16;
    const __m512 zero = _mm512_setzero_ps();
    for (int i = 0; i < W4_WTB; i++) {
        float *z = Z + (size_t)i * 16;
        if (i >= nt) {
            for (int p = 0; p < W4_POS; p++) _mm512_storeu_ps(z + p * ps, zero);
            continue;
        }
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        int oh0 = 4 * ty, ow0 = 4 * tx;
        bool inside = oh0 + 4 <= OH && ow0 + 4 <= OW;
        const float *src = j->dy + (((size_t)n * OH + oh0) * OW + ow0) * 16;
        __m512 q[6][4];
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            __m512 y[4], u[6];
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++)
                y[b] = inside || (oh0 + a < OH && ow0 + b < OW)
                           ? _mm512_loadu_ps(src + ((size_t)a * OW + b) * 16)
                           : zero;
            AZ6(u, y);
#pragma GCC unroll 6
            for (int b = 0; b < 6; b++) q[b][a] = u[b];
        }
#pragma GCC unroll 6
        for (int b = 0; b < 6; b++) {
            __m512 u[6];
            AZ6(u, q[b]);
#pragma GCC unroll 6
            for (int a = 0; a < 6; a++) _mm512_storeu_ps(z + (size_t)(6 * a + b) * ps, u[a]);
        }
    }
}

/* 16 c x 16 k of dU at each position, over nt tiles (the order of
 * wgemm4_port) */
AVX512 static INLINE void wgemm4_simd(float *dU, const float *V, const float *Z, int nt, bool acc)
{
    for (int p = 0; p < W4_POS; p++) {
        const float *v = V + (size_t)p * W4_WTB * 16, *z = Z + (size_t)p * W4_WTB * 16;
        float *o = dU + (size_t)p * 256;
        __m512 s[16];
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++) s[c] = _mm512_setzero_ps();
        for (int i = 0; i < nt; i++) {
            __m512 zv = _mm512_loadu_ps(z + 16 * i);
#pragma GCC unroll 16
            for (int c = 0; c < 16; c++)
                s[c] = _mm512_fmadd_ps(_mm512_set1_ps(v[16 * i + c]), zv, s[c]);
        }
#pragma GCC unroll 16
        for (int c = 0; c < 16; c++)
            _mm512_storeu_ps(o + 16 * c,
                             acc ? _mm512_add_ps(_mm512_loadu_ps(o + 16 * c), s[c]) : s[c]);
    }
}

AVX512 static void w4_block_simd(const wi_job *j, float *dU, float *V, float *Z, int t0, int nt,
                                 bool acc)
{
    in4_tiles_simd(j, V, t0, nt, W4_WTB, 16, (size_t)W4_WTB * 16);
    z4_simd(j, Z, t0, nt);
    wgemm4_simd(dU, V, Z, nt, acc);
}
#endif

/* Slice s: its tiles, block by block, into dU_s, at s in the scratch of
 * the thread that runs it (as F(2x2)'s wslice_task), found through j->su. */
static void w4_slice_task(void *arg, int s, int tid)
{
    const wi_job *j = arg;
    float *A = j->scratch + (size_t)tid * j->stride;
    float *V = A + (size_t)j->S * W4_U, *Z = V + W4_WVZ;
    float *dU = A + (size_t)s * W4_U;
    j->su[s] = dU;
    int a, e;
    nn_pool_block(j->NT, j->S, s, &a, &e);
    for (int t0 = a; t0 < e; t0 += W4_WTB) {
        int nt = e - t0 < W4_WTB ? e - t0 : W4_WTB;
        wi_prefetch_next(j, t0, nt, W4_WTB);
#if WI_X86
        if (j->simd) {
            w4_block_simd(j, dU, V, Z, t0, nt, t0 > a);
            continue;
        }
#endif
        in4_tiles_port(j, V, t0, nt, W4_WTB, (size_t)W4_WTB * 16);
        z4_port(j, Z, t0, nt);
        wgemm4_port(dU, V, Z, nt, t0 > a);
    }
    if (e == a) memset(dU, 0, sizeof(float) * W4_U);
}

/* G^T dU G for 16 kernels of one input channel, in double, rounded once:
 * position p's sums at su[s][p * ps + o], the S slices added in slice
 * order; tap (r, t) of the result to dw[(3 r + t) * tap_stride]. Both
 * weight gradients' last step (w4_out_row, w4k_out_row).
 *
 * The next 16 kernels' sums (at o + 16, while below end) are requested
 * first: the S x 36 lines a call reads are ps floats apart, which the
 * hardware prefetchers do not follow, and on two threads half of them
 * are in the other core's cache (each slice is summed by the thread that
 * ran it), ~225 ns a line (docs/platform.md, "Two cores of machine Z"): the 64 -> 64 reduction at
 * 7x7, batch 64, took each of two threads as long as one thread the whole
 * (bench_conv, rdtsc). A hint only: the sums do not change. */
static INLINE void w4_gtg16(float *dw, size_t tap_stride, float *const *su, int S, size_t o,
                            size_t ps, size_t end)
{
    double m[W4_POS][16], q[6][3][16];
    if (o + 16 < end)
        for (int s = 0; s < S; s++)
            for (int p = 0; p < W4_POS; p++) __builtin_prefetch(su[s] + p * ps + o + 16, 0, 3);
    for (int p = 0; p < W4_POS; p++) {
        const size_t e = p * ps + o;
        for (int i = 0; i < 16; i++) m[p][i] = su[0][e + i];
        for (int s = 1; s < S; s++)
            for (int i = 0; i < 16; i++) m[p][i] += su[s][e + i];
    }
    for (int a = 0; a < 6; a++)
        for (int t = 0; t < 3; t++)
            for (int i = 0; i < 16; i++) {
                double x = 0;
                for (int b = 0; b < 6; b++) x += m[6 * a + b][i] * G4[b][t];
                q[a][t][i] = x;
            }
    for (int r = 0; r < 3; r++)
        for (int t = 0; t < 3; t++)
            for (int i = 0; i < 16; i++) {
                double x = 0;
                for (int a = 0; a < 6; a++) x += G4[a][r] * q[a][t][i];
                dw[(size_t)(3 * r + t) * tap_stride + i] = (float)x;
            }
}

/* dw[tap][c][k] for input channel c: the slices' dU added in order and
 * G^T dU G, in double, rounded once */
NN_CLONES static void w4_out_row(float *dw, float *const *su, int S, int c)
{
    w4_gtg16(dw + (size_t)c * 16, 256, su, S, (size_t)c * 16, 256, 256);
}

static void w4_out_task(void *arg, int c, int tid)
{
    const wi_job *j = arg;
    (void)tid;
    w4_out_row(j->out, j->su, j->S, c);
}

/* The F(4x4) weight gradient's two loops: the S slices (each its tiles'
 * dU), then dw from their sum, nrows tasks (by input channel) of out_task. */
static void w4_wgrad_run(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                         nn_pool *pool, float *scratch, size_t stride, int S,
                         void (*slice_task)(void *, int, int), int nrows,
                         void (*out_task)(void *, int, int))
{
    wi_job j = {.d = d,
                .inp = inp,
                .dy = dout,
                .out = dw,
                .scratch = scratch,
                .stride = stride,
                .v = &nn_wi_f4};
    float *su[WI_MAX_SLICES];
    wi_tile(&j);
    j.S = S, j.su = su;
    nn_pool_for(pool, j.S, slice_task, &j);
    nn_pool_for(pool, nrows, out_task, &j);
}

void nn_wi4_wgrad(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                  nn_pool *pool, float *scratch, size_t stride)
{
    w4_wgrad_run(dw, dout, inp, d, pool, scratch, stride, w4_slices(d), w4_slice_task, 16,
                 w4_out_task);
}

/* ---- 32 to 64 channels ---------------------------------------------------
 * The same sums for C and K multiples of 16 up to 64 (conv_wino.c's
 * wino4_wgrad_use), as F(2x2)'s weight gradient is organised: a task is a
 * slice; it transforms a block of TB tiles into V[36][TB][C] and
 * Z[36][TB][K] and, per position, multiplies V^T Z in register tiles of
 * MR channels c x NV vectors of k over the block's tiles in order, from
 * zero, then adds the block sum into its slice's dU[36][C][K]. Then per
 * input channel c the slices are added in slice order in double and
 * G^T dU G taken in double, rounded once (as w4_out_row). Its typical
 * error at ResNet-20's 32- and 64-channel and ResNet-50's res2 shapes is
 * of the order of F(2x2)'s and the direct kernels' (`test_nn_wino
 * --accuracy` prints them). V, Z and each slice's dU keep their positions
 * a cache line more than a multiple of 4 KB apart: with V and Z 4 KB
 * apart per position (32 tiles of 32 channels) all 36 lines a tile's
 * transform writes would fall in one set of L1, and the pass would be
 * slower than F(2x2)'s instead of faster (docs/platform.md, "Two cores of machine Z"). */

#define W4K_TB 32 /* tiles per block */

/* Slices: one per 256 tiles, two from 256 tiles on (ResNet-20's 7x7 at
 * batch 64 has 256: two threads share it), at most W4K_PARTS floats of
 * sums (rounded down to an even count, so that two threads share them
 * evenly: 6 for 64 x 64), at least 1. Fixed by the shapes. (One per 128
 * tiles is slower: the slices' reduction grows more than the tasks
 * shrink.) */
#define W4K_PARTS (1u << 20)
static int w4k_slices(const nn_conv_dims *d)
{
    size_t nt = (size_t)d->N * ((d->OH + 3) / 4) * ((d->OW + 3) / 4);
    size_t cap = W4K_PARTS / ((size_t)W4_POS * d->C * d->K);
    cap = cap > 2 ? cap & ~(size_t)1 : cap;
    if (cap > WI_MAX_SLICES) cap = WI_MAX_SLICES;
    size_t S = nt / 256;
    if (S < 2) S = nt / 128 < 2 ? nt / 128 : 2;
    if (S > cap) S = cap;
    return S < 1 ? 1 : (int)S;
}

/* Floats from one position of V (C channels) or Z (K) to the next: a
 * cache line more than the block's W4K_TB tiles, so that the 36 lines a
 * tile's transform writes do not fall in one set of L1 (32 tiles of 32
 * channels are 4 KB: all 36 in one 12-way set) */
static size_t w4k_ps(int C)
{
    return (size_t)W4K_TB * C + 16;
}

/* Floats from one position of a slice's dU ([36][C][K]) to the next: a
 * cache line more than C K, so that the 36 lines of one (c, k) that the
 * reduction reads do not fall in one set of L1 (at 32 x 32, 4 KB apart),
 * and the floats of a slice's dU */
static size_t w4k_dps(int C, int K)
{
    return (size_t)C * K + 16;
}

static size_t w4k_uf(const nn_conv_dims *d)
{
    return W4_POS * w4k_dps(d->C, d->K);
}

/* Where a thread's slices start in its scratch: past the forward's and
 * input gradient's U, V and M (nn_wi4_scratch). The reduction (w4k_out_task)
 * reads half of each slice on the other thread; at the front of the
 * scratch, where the next layer's input gradient builds U, thread 0's U
 * would write lines the other core held (a hand-over each), and thread 0
 * would take much longer than thread 1 for the 64 -> 64 input gradient's
 * U (resnet-20 and bench_conv on 2 threads). */
static size_t w4k_off(const nn_conv_dims *d)
{
    return (nn_wi4_scratch(d) + 15) / 16 * 16;
}

size_t nn_wi4k_wgrad_scratch(const nn_conv_dims *d)
{
    return w4k_off(d) + (size_t)w4k_slices(d) * w4k_uf(d) + W4_POS * (w4k_ps(d->C) + w4k_ps(d->K)) +
           16;
}

/* Z[p][i][k] for tiles t0 + i, i < tb, K channels (zero past nt, OH and
 * OW) */
static void z4k_port(const wi_job *j, float *Z, int t0, int nt, int tb)
{
    const nn_conv_dims *d = j->d;
    const int per = j->TH * j->TW, K = d->K;
    const size_t ps = w4k_ps(K);
    for (int i = 0; i < tb; i++) {
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        for (int k = 0; k < K; k++) {
            float y[4][4], q[4][6], z[6][6];
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) {
                    int oh = 4 * ty + a, ow = 4 * tx + b;
                    bool in = i < nt && oh < d->OH && ow < d->OW;
                    y[a][b] = in ? j->dy[(((size_t)n * d->OH + oh) * d->OW + ow) * K + k] : 0.0f;
                }
            for (int a = 0; a < 4; a++) az6_port(&q[a][0], 1, &y[a][0], 1);
            for (int b = 0; b < 6; b++) az6_port(&z[0][b], 6, &q[0][b], 6);
            for (int p = 0; p < W4_POS; p++) Z[p * ps + (size_t)i * K + k] = z[p / 6][p % 6];
        }
    }
}

/* dU[p][c][k] (+)= the block's sum over i < nt of V[p][i][c] Z[p][i][k],
 * i in order, from zero */
static void wgemm4k_port(float *dU, const float *V, const float *Z, int nt, int C, int K, bool acc)
{
    float s[64];
    for (int p = 0; p < W4_POS; p++)
        for (int c = 0; c < C; c++) {
            float *o = dU + p * w4k_dps(C, K) + (size_t)c * K;
            for (int k = 0; k < K; k++) s[k] = 0.0f;
            for (int i = 0; i < nt; i++) {
                float v = V[p * w4k_ps(C) + (size_t)i * C + c];
                const float *z = Z + p * w4k_ps(K) + (size_t)i * K;
                for (int k = 0; k < K; k++) s[k] += v * z[k];
            }
            for (int k = 0; k < K; k++) o[k] = acc ? o[k] + s[k] : s[k];
        }
}

#if WI_X86
AVX512 static INLINE void z4k_simd(const wi_job *j, float *Z, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int per = j->TH * j->TW, OH = d->OH, OW = d->OW, K = d->K;
    const size_t ps = w4k_ps(K);
    const __m512 zero = _mm512_setzero_ps();
    for (int i = 0; i < W4K_TB; i++) {
        float *z = Z + (size_t)i * K;
        if (i >= nt) {
            for (int p = 0; p < W4_POS; p++)
                for (int k0 = 0; k0 < K; k0 += 16) _mm512_storeu_ps(z + p * ps + k0, zero);
            continue;
        }
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        int oh0 = 4 * ty, ow0 = 4 * tx;
        bool inside = oh0 + 4 <= OH && ow0 + 4 <= OW;
        const float *src = j->dy + (((size_t)n * OH + oh0) * OW + ow0) * K;
        for (int k0 = 0; k0 < K; k0 += 16) {
            __m512 q[6][4];
#pragma GCC unroll 4
            for (int a = 0; a < 4; a++) {
                __m512 y[4], u[6];
#pragma GCC unroll 4
                for (int b = 0; b < 4; b++)
                    y[b] = inside || (oh0 + a < OH && ow0 + b < OW)
                               ? _mm512_loadu_ps(src + ((size_t)a * OW + b) * K + k0)
                               : zero;
                AZ6(u, y);
#pragma GCC unroll 6
                for (int b = 0; b < 6; b++) q[b][a] = u[b];
            }
#pragma GCC unroll 6
            for (int b = 0; b < 6; b++) {
                __m512 u[6];
                AZ6(u, q[b]);
#pragma GCC unroll 6
                for (int a = 0; a < 6; a++)
                    _mm512_storeu_ps(z + (size_t)(6 * a + b) * ps + k0, u[a]);
            }
        }
    }
}

/* MR channels c x NV vectors of k of dU at one position: the block's sum
 * over its nt tiles in order, from zero, added into dU (acc) or stored */
AVX512 static INLINE void wgemm4k_tile(int MR, int NV, float *dU, int K, const float *V, int C,
                                       const float *Z, int nt, bool acc)
{
    __m512 s[16][2];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) s[i][v] = _mm512_setzero_ps();
    for (int t = 0; t < nt; t++) {
        __m512 z[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) z[v] = _mm512_loadu_ps(Z + (size_t)t * K + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            __m512 x = _mm512_set1_ps(V[(size_t)t * C + i]);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) s[i][v] = _mm512_fmadd_ps(x, z[v], s[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            float *o = dU + (size_t)i * K + 16 * v;
            _mm512_storeu_ps(o, acc ? _mm512_add_ps(_mm512_loadu_ps(o), s[i][v]) : s[i][v]);
        }
}

/* register tiles 8 x 2 (K a multiple of 32) or 16 x 1 */
AVX512 static void wgemm4k_simd(float *dU, const float *V, const float *Z, int nt, int C, int K,
                                bool acc)
{
    for (int p = 0; p < W4_POS; p++) {
        const float *Vp = V + p * w4k_ps(C), *Zp = Z + p * w4k_ps(K);
        float *o = dU + p * w4k_dps(C, K);
        if (K % 32 == 0) {
            for (int k0 = 0; k0 < K; k0 += 32)
                for (int c = 0; c < C; c += 8)
                    wgemm4k_tile(8, 2, o + (size_t)c * K + k0, K, Vp + c, C, Zp + k0, nt, acc);
        } else {
            for (int k0 = 0; k0 < K; k0 += 16)
                for (int c = 0; c < C; c += 16)
                    wgemm4k_tile(16, 1, o + (size_t)c * K + k0, K, Vp + c, C, Zp + k0, nt, acc);
        }
    }
}

AVX512 static void w4k_block_simd(const wi_job *j, float *dU, float *V, float *Z, int t0, int nt,
                                  bool acc)
{
    in4_tiles_simd(j, V, t0, nt, W4K_TB, j->d->C, w4k_ps(j->d->C));
    z4k_simd(j, Z, t0, nt);
    wgemm4k_simd(dU, V, Z, nt, j->d->C, j->d->K, acc);
}
#endif

static void w4k_slice_task(void *arg, int s, int tid)
{
    const wi_job *j = arg;
    const size_t uf = w4k_uf(j->d);
    float *A = j->scratch + (size_t)tid * j->stride + w4k_off(j->d);
    float *V = A + (size_t)j->S * uf, *Z = V + W4_POS * w4k_ps(j->d->C);
    float *dU = A + (size_t)s * uf;
    j->su[s] = dU;
    int a, e;
    nn_pool_block(j->NT, j->S, s, &a, &e);
    for (int t0 = a; t0 < e; t0 += W4K_TB) {
        int nt = e - t0 < W4K_TB ? e - t0 : W4K_TB;
        wi_prefetch_next(j, t0, nt, W4K_TB);
#if WI_X86
        if (j->simd) {
            w4k_block_simd(j, dU, V, Z, t0, nt, t0 > a);
            continue;
        }
#endif
        in4_tiles_port(j, V, t0, nt, W4K_TB, w4k_ps(j->d->C));
        z4k_port(j, Z, t0, nt, W4K_TB);
        wgemm4k_port(dU, V, Z, nt, j->d->C, j->d->K, t0 > a);
    }
    if (e == a) memset(dU, 0, sizeof(float) * uf);
}

/* dw[tap][c][k] for input channel c, 16 k at a time: the slices' dU added
 * in order and G^T dU G, in double, rounded once (w4_out_row's order) */
NN_CLONES static void w4k_out_row(float *dw, float *const *su, int S, int C, int K, int c)
{
    for (int k0 = 0; k0 < K; k0 += 16)
        w4_gtg16(dw + (size_t)c * K + k0, (size_t)C * K, su, S, (size_t)c * K + k0, w4k_dps(C, K),
                 (size_t)C * K);
}

static void w4k_out_task(void *arg, int c, int tid)
{
    const wi_job *j = arg;
    (void)tid;
    w4k_out_row(j->out, j->su, j->S, j->d->C, j->d->K, c);
}

void nn_wi4k_wgrad(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                   nn_pool *pool, float *scratch, size_t stride)
{
    w4_wgrad_run(dw, dout, inp, d, pool, scratch, stride, w4k_slices(d), w4k_slice_task, d->C,
                 w4k_out_task);
}

/* ---- with the input gradient ---------------------------------------------
 * As F(2x2)'s nn_wi2_backward: the slice tasks are few and long (res2's 3x3
 * 64 at batch 8: 6 slices; ResNet-20's 7x7 stage at batch 64: 2) and
 * alone in their loop would leave the thread that finished first idle
 * until the loop's end; with the input gradient's F(4x4) blocks (12 tiles each)
 * in the same loop, that thread takes blocks meanwhile. Part p of the
 * pool's T contiguous parts holds the slice tasks p of T first, then the
 * blocks p of T. The scratch already holds both apart: a block's U, V and
 * M lie below w4k_off (nn_wi4_scratch: the input gradient's sizes equal
 * the forward's), the slices' dU and their V and Z from w4k_off on. Which
 * thread runs which task changes no bits: the slice sums and the blocks'
 * outputs are computed as in separate loops. */
typedef struct {
    wi_job *w, *g;
    int T;
} w4k_bw_job;

static void w4k_bw_task(void *arg, int i, int tid)
{
    const w4k_bw_job *b = arg;
    int k;
    if (nn_pool_two_lists(i, b->w->S, b->g->nb, b->T, &k) == 0)
        w4k_slice_task(b->w, k, tid);
    else
        nn_wi_block_task(b->g, k, tid);
}

bool nn_wi4k_backward(float *dw, wi_job *g, const float *dout, const float *inp,
                      const nn_conv_dims *d, nn_pool *pool)
{
    const int T = nn_pool_threads(pool);
    if (!nn_wi_prepare(g, T)) return false;
    float *su[WI_MAX_SLICES];
    wi_job w = {.d = d,
                .inp = inp,
                .dy = dout,
                .out = dw,
                .scratch = g->scratch,
                .stride = g->stride,
                .v = &nn_wi_f4};
    wi_tile(&w);
    w.S = w4k_slices(d), w.su = su;
    w4k_bw_job b = {.w = &w, .g = g, .T = T};
    nn_pool_for(pool, w.S + g->nb, w4k_bw_task, &b);
    nn_pool_for(pool, d->C, w4k_out_task, &w);
    return true;
}
