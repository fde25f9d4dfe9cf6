/*
 * layers.c - random numbers, elementwise layers, dense, pooling, dropout,
 * concat and softmax cross-entropy. Shapes and conventions: layers.h.
 */
#include "layers.h"
#include "pstrain/pool.h"
#include "pstrain/common.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "pstrain/blas.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define LAYERS_X86 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#else
#define LAYERS_X86 0
#endif

void nn_rng_seed(nn_rng *r, uint64_t seed)
{
    uint64_t st = seed;
    for (int i = 0; i < 4; i++) r->s[i] = pst_splitmix64(&st);
}

static inline uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t nn_rng_next(nn_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

float nn_rng_uniform(nn_rng *r)
{
    return (float)(nn_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

double nn_rng_normal(nn_rng *r)
{
    /* Box-Muller; u1 in (0, 1] so the log is finite. */
    double u1 = ((double)(nn_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(nn_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t nn_seed_mix(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t st = a;
    uint64_t h = pst_splitmix64(&st);
    st = h ^ b;
    h = pst_splitmix64(&st);
    st = h ^ c;
    return pst_splitmix64(&st);
}

/* ---- elementwise ------------------------------------------------------------- */

NN_CLONES void nn_bias_relu(float *out, const float *b, int M, int K, bool relu)
{
    /* out[M][K]: one pass, row by row, while the row is in cache. */
    for (int i = 0; i < M; i++) {
        float *restrict o = out + (size_t)i * K;
        if (b && relu) {
            for (int k = 0; k < K; k++) {
                float v = o[k] + b[k];
                o[k] = v > 0.0f ? v : 0.0f;
            }
        } else if (b) {
            for (int k = 0; k < K; k++) o[k] += b[k];
        } else if (relu) {
            for (int k = 0; k < K; k++) o[k] = o[k] > 0.0f ? o[k] : 0.0f;
        }
    }
}

NN_CLONES void nn_bias_backward(float *db, const float *dout, int M, int K)
{
    /* db[K] = sum_i dout[i][K]; accumulated in float rows, which is exact
     * enough for batch means (the tests compare with finite differences). */
    memset(db, 0, sizeof(float) * K);
    for (int i = 0; i < M; i++) {
        const float *restrict d = dout + (size_t)i * K;
        float *restrict acc = db;
        for (int k = 0; k < K; k++) acc[k] += d[k];
    }
}

NN_CLONES void nn_relu_mask(float *dout, const float *out, size_t n)
{
    float *restrict d = dout;
    const float *restrict o = out;
    for (size_t i = 0; i < n; i++) d[i] = o[i] > 0.0f ? d[i] : 0.0f;
}

NN_CLONES void nn_relu_forward(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

NN_CLONES void nn_relu_backward(float *dinp, bool acc, const float *dout, const float *out,
                                size_t n)
{
    float *restrict di = dinp;
    const float *restrict d = dout, *restrict o = out;
    if (acc)
        for (size_t i = 0; i < n; i++) di[i] += o[i] > 0.0f ? d[i] : 0.0f;
    else
        for (size_t i = 0; i < n; i++) di[i] = o[i] > 0.0f ? d[i] : 0.0f;
}

/* ---- dense --------------------------------------------------------------------- */

/* Small dense products (the last layers: weights up to 16k floats) go by
 * column blocks of NN_NARROW_MAX through the narrow kernels when they run
 * vectorised: BLIS's call and packing overheads dominate there. Larger ones
 * (784x256) are faster in BLIS. */
static bool dense_narrow(int I, int O)
{
    return (size_t)I * O <= 16384 && nn_narrow_use_simd(-1);
}

/* The parallel dense products split an output dimension into fixed blocks
 * of whole 16-column groups (nn_pool_nblocks over the groups, about 1M
 * multiply-adds each): every output element is one BLIS call's dot product
 * over the full inner dimension, so nothing is summed across tasks. */
#define DENSE_GROUP 16
#define DENSE_GRAIN ((size_t)1 << 20)
#define DENSE_MAX_BLOCKS 32

static int dense_blocks(int n, size_t work_per_item)
{
    int groups = (n + DENSE_GROUP - 1) / DENSE_GROUP;
    return nn_pool_nblocks(groups, DENSE_GROUP * work_per_item, DENSE_GRAIN, DENSE_MAX_BLOCKS);
}

/* [*lo, *hi) of block b of nb over n items, in whole groups. */
static void dense_range(int n, int nb, int b, int *lo, int *hi)
{
    int groups = (n + DENSE_GROUP - 1) / DENSE_GROUP;
    nn_pool_block(groups, nb, b, lo, hi);
    *lo *= DENSE_GROUP;
    *hi = *hi * DENSE_GROUP < n ? *hi * DENSE_GROUP : n;
}

typedef struct dense_job {
    float *out, *dinp, *dw, *db, *dout;
    const float *inp, *w, *b, *yout;
    int N, I, O;
    int nb_fwd, nb_dw, nb_db, nb_dx;
    bool relu, acc;
} dense_job;

static void dense_fwd_task(void *varg, int t, int tid)
{
    const dense_job *j = varg;
    int j0, j1;
    dense_range(j->O, j->nb_fwd, t, &j0, &j1);
    /* out[N][j0:j1] = inp[N][I] w[I][j0:j1], + b, ReLU */
    nn_gemm(false, false, j->N, j1 - j0, j->I, 1.0f, j->inp, j->I, j->w + j0, j->O, 0.0f,
            j->out + j0, j->O);
    for (int i = 0; i < j->N; i++) {
        float *restrict o = j->out + (size_t)i * j->O;
        if (j->b)
            for (int k = j0; k < j1; k++) o[k] += j->b[k];
        if (j->relu)
            for (int k = j0; k < j1; k++) o[k] = o[k] > 0.0f ? o[k] : 0.0f;
    }
}

static void dense_bwd_task(void *varg, int t, int tid)
{
    const dense_job *j = varg;
    int lo, hi;
    if (t < j->nb_dw) {
        if (j->O <= NN_NARROW_MAX && dense_narrow(j->I, j->O)) {
            /* dw[I][O] = inp^T dout by the narrow kernel, one task */
            nn_narrow_tn(j->I, j->O, j->N, j->inp, j->I, j->dout, j->O, j->dw, j->O, false);
            return;
        }
        /* dw[lo:hi][O] = inp[N][lo:hi]^T dout[N][O] */
        dense_range(j->I, j->nb_dw, t, &lo, &hi);
        nn_gemm(true, false, hi - lo, j->O, j->N, 1.0f, j->inp + lo, j->I, j->dout, j->O, 0.0f,
                j->dw + (size_t)lo * j->O, j->O);
        return;
    }
    t -= j->nb_dw;
    if (t < j->nb_db) {
        /* db[lo:hi] = column sums, rows in order (as nn_bias_backward) */
        nn_pool_block(j->O, j->nb_db, t, &lo, &hi);
        float *restrict db = j->db;
        for (int k = lo; k < hi; k++) db[k] = 0.0f;
        for (int i = 0; i < j->N; i++) {
            const float *restrict d = j->dout + (size_t)i * j->O;
            for (int k = lo; k < hi; k++) db[k] += d[k];
        }
        return;
    }
    t -= j->nb_db;
    /* dinp[N][lo:hi] (+)= dout[N][O] w[lo:hi][O]^T */
    dense_range(j->I, j->nb_dx, t, &lo, &hi);
    nn_gemm(false, true, j->N, hi - lo, j->O, 1.0f, j->dout, j->O, j->w + (size_t)lo * j->O, j->O,
            j->acc ? 1.0f : 0.0f, j->dinp + lo, j->I);
}

static void dense_mask_range(void *varg, int lo, int hi)
{
    const dense_job *j = varg;
    size_t o = (size_t)lo * j->O;
    nn_relu_mask(j->dout + o, j->yout + o, (size_t)(hi - lo) * j->O);
}

void nn_dense_forward_par(nn_pool *pool, float *out, const float *inp, const float *w,
                          const float *b, int N, int I, int O, bool relu)
{
    if (dense_narrow(I, O)) { /* small: on the caller */
        for (int j0 = 0; j0 < O; j0 += NN_NARROW_MAX) {
            int kb = O - j0 < NN_NARROW_MAX ? O - j0 : NN_NARROW_MAX;
            nn_narrow_nn(N, kb, I, inp, I, w + j0, O, b ? b + j0 : NULL, relu, out + j0, O, false);
        }
        return;
    }
    dense_job j = {.out = out, .inp = inp, .w = w, .b = b, .N = N, .I = I, .O = O, .relu = relu};
    j.nb_fwd = dense_blocks(O, (size_t)N * I);
    nn_pool_for(pool, j.nb_fwd, dense_fwd_task, &j);
}

void nn_dense_backward_par(nn_pool *pool, float *dinp, bool acc, float *dw, float *db, float *dout,
                           const float *out, const float *inp, const float *w, int N, int I, int O,
                           bool relu)
{
    dense_job j = {.dinp = dinp,
                   .dw = dw,
                   .db = db,
                   .dout = dout,
                   .inp = inp,
                   .w = w,
                   .yout = out,
                   .N = N,
                   .I = I,
                   .O = O,
                   .relu = relu,
                   .acc = acc};
    if (relu) nn_pool_range(pool, N, (size_t)O, dense_mask_range, &j);
    j.nb_dw = O <= NN_NARROW_MAX && dense_narrow(I, O) ? 1 : dense_blocks(I, (size_t)N * O);
    j.nb_db = db ? nn_pool_nblocks(O, (size_t)N, 65536, 8) : 0;
    j.nb_dx = dinp ? dense_blocks(I, (size_t)N * O) : 0;
    nn_pool_for(pool, j.nb_dw + j.nb_db + j.nb_dx, dense_bwd_task, &j);
}

void nn_dense_forward(float *out, const float *inp, const float *w, const float *b, int N, int I,
                      int O, bool relu)
{
    nn_dense_forward_par(NULL, out, inp, w, b, N, I, O, relu);
}

void nn_dense_backward(float *dinp, bool acc, float *dw, float *db, float *dout, const float *out,
                       const float *inp, const float *w, int N, int I, int O, bool relu)
{
    nn_dense_backward_par(NULL, dinp, acc, dw, db, dout, out, inp, w, N, I, O, relu);
}

/* ---- pooling --------------------------------------------------------------------- */

int nn_window_out(int n, int k, int s, int p)
{
    if (k <= 0 || s <= 0 || p < 0 || n + 2 * p < k) return 0;
    return (n + 2 * p - k) / s + 1;
}

void nn_pool_dims_finish(nn_pool_dims *d)
{
    d->OH = nn_window_out(d->H, d->KH, d->SH, d->PH);
    d->OW = nn_window_out(d->W, d->KW, d->SW, d->PW);
}

/* The divisor of an average window clipped to rows [h0, h1) and columns
 * [w0, w1) of the image. */
static inline float avg_scale(const nn_pool_dims *d, int h0, int h1, int w0, int w1)
{
    return 1.0f / (float)(d->count_pad ? d->KH * d->KW : (h1 - h0) * (w1 - w0));
}

/* 2x2 windows, stride 2, no padding (LeNet): two input rows per output row,
 * compares written as selects so that random data costs no mispredicted
 * branches. */
static void maxpool_2x2(float *out, int32_t *argmax, const float *inp, const nn_pool_dims *d)
{
    const int W = d->W, C = d->C, OH = d->OH, OW = d->OW;
    for (int n = 0; n < d->N; n++) {
        const float *img = inp + (size_t)n * d->H * W * C;
        for (int oh = 0; oh < OH; oh++) {
            const float *restrict r0 = img + (size_t)(2 * oh) * W * C, *restrict r1 = r0 + W * C;
            size_t o = (((size_t)n * OH + oh) * OW) * C;
            float *restrict y = out + o;
            int32_t *restrict a = argmax + o;
            int32_t base = 2 * oh * W * C;
            for (int ow = 0; ow < OW; ow++) {
                int j0 = 2 * ow * C, j1 = j0 + C;
                for (int c = 0; c < C; c++) {
                    float v00 = r0[j0 + c], v01 = r0[j1 + c], v10 = r1[j0 + c], v11 = r1[j1 + c];
                    int32_t i0 = base + j0 + c, i1 = base + j1 + c;
                    float t0 = v01 > v00 ? v01 : v00, t1 = v11 > v10 ? v11 : v10;
                    int32_t k0 = v01 > v00 ? i1 : i0, k1 = (v11 > v10 ? i1 : i0) + W * C;
                    y[ow * C + c] = t1 > t0 ? t1 : t0;
                    a[ow * C + c] = t1 > t0 ? k1 : k0;
                }
            }
        }
    }
}

#if LAYERS_X86
/* maxpool_2x2 with 16 channels per vector: selects by masks, no branches. */
AVX512 static void maxpool_2x2_simd(float *out, int32_t *argmax, const float *inp,
                                    const nn_pool_dims *d)
{
    const int W = d->W, C = d->C, OH = d->OH, OW = d->OW, WC = W * C;
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int n = 0; n < d->N; n++) {
        const float *img = inp + (size_t)n * d->H * WC;
        for (int oh = 0; oh < OH; oh++) {
            const float *r0 = img + (size_t)(2 * oh) * WC, *r1 = r0 + WC;
            size_t o = (((size_t)n * OH + oh) * OW) * C;
            for (int ow = 0; ow < OW; ow++) {
                for (int c0 = 0; c0 < C; c0 += 16) {
                    int left = C - c0;
                    __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
                    int j0 = 2 * ow * C + c0, j1 = j0 + C;
                    __m512i i00 = _mm512_add_epi32(_mm512_set1_epi32(2 * oh * WC + j0), iota);
                    __m512i i01 = _mm512_add_epi32(i00, _mm512_set1_epi32(C));
                    __m512i i10 = _mm512_add_epi32(i00, _mm512_set1_epi32(WC));
                    __m512i i11 = _mm512_add_epi32(i01, _mm512_set1_epi32(WC));
                    __m512 v00 = _mm512_maskz_loadu_ps(m, r0 + j0);
                    __m512 v01 = _mm512_maskz_loadu_ps(m, r0 + j1);
                    __m512 v10 = _mm512_maskz_loadu_ps(m, r1 + j0);
                    __m512 v11 = _mm512_maskz_loadu_ps(m, r1 + j1);
                    __mmask16 g0 = _mm512_cmp_ps_mask(v01, v00, _CMP_GT_OQ);
                    __mmask16 g1 = _mm512_cmp_ps_mask(v11, v10, _CMP_GT_OQ);
                    __m512 t0 = _mm512_mask_blend_ps(g0, v00, v01);
                    __m512 t1 = _mm512_mask_blend_ps(g1, v10, v11);
                    __m512i k0 = _mm512_mask_blend_epi32(g0, i00, i01);
                    __m512i k1 = _mm512_mask_blend_epi32(g1, i10, i11);
                    __mmask16 g = _mm512_cmp_ps_mask(t1, t0, _CMP_GT_OQ);
                    size_t oo = o + (size_t)ow * C + c0;
                    _mm512_mask_storeu_ps(out + oo, m, _mm512_mask_blend_ps(g, t0, t1));
                    _mm512_mask_storeu_epi32(argmax + oo, m, _mm512_mask_blend_epi32(g, k0, k1));
                }
            }
        }
    }
}

/* Backward of the 2x2/2 pool over an even-sized input: every input is in
 * exactly one window, so each is written once (no clearing pass). */
AVX512 static void maxpool_2x2_backward_simd(float *dinp, bool acc, const float *dout,
                                             const int32_t *argmax, const nn_pool_dims *d)
{
    const int W = d->W, C = d->C, OH = d->OH, OW = d->OW, WC = W * C;
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int n = 0; n < d->N; n++) {
        float *img = dinp + (size_t)n * d->H * WC;
        for (int oh = 0; oh < OH; oh++) {
            size_t o = (((size_t)n * OH + oh) * OW) * C;
            for (int ow = 0; ow < OW; ow++) {
                for (int c0 = 0; c0 < C; c0 += 16) {
                    int left = C - c0;
                    __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
                    size_t oo = o + (size_t)ow * C + c0;
                    __m512 dy = _mm512_maskz_loadu_ps(m, dout + oo);
                    __m512i a = _mm512_maskz_loadu_epi32(m, argmax + oo);
                    int base = 2 * oh * WC + 2 * ow * C + c0;
                    const int offs[4] = {0, C, WC, WC + C};
                    for (int q = 0; q < 4; q++) {
                        __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(base + offs[q]), iota);
                        __mmask16 hit = _mm512_cmpeq_epi32_mask(a, idx);
                        float *p = img + base + offs[q];
                        __m512 v = _mm512_maskz_mov_ps(hit, dy);
                        if (acc) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, p));
                        _mm512_mask_storeu_ps(p, m, v);
                    }
                }
            }
        }
    }
}

/* Any window: up to 64 channels (four vectors, four independent compare
 * chains) per pass over the window's positions, which are scanned in
 * row-major order with a strict > as in the portable loop: the first
 * maximum wins, so the argmax (and with it the backward) is bitwise that of
 * the portable code. */
#define MAXPOOL_AHEAD 4
AVX512 static void maxpool_simd(float *out, int32_t *argmax, const float *inp,
                                const nn_pool_dims *d)
{
    const int H = d->H, W = d->W, C = d->C, OH = d->OH, OW = d->OW;
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int n = 0; n < d->N; n++) {
        const float *img = inp + (size_t)n * H * W * C;
        for (int oh = 0; oh < OH; oh++) {
            int h0 = oh * d->SH - d->PH, h1 = h0 + d->KH;
            h0 = h0 < 0 ? 0 : h0;
            h1 = h1 > H ? H : h1;
            for (int ow = 0; ow < OW; ow++) {
                int w0 = ow * d->SW - d->PW, w1 = w0 + d->KW;
                w0 = w0 < 0 ? 0 : w0;
                w1 = w1 > W ? W : w1;
                size_t o = (((size_t)n * OH + oh) * OW + ow) * C;
                /* the pixels that enter the windows MAXPOOL_AHEAD outputs
                 * on: the hardware prefetcher alone left the loads
                 * waiting on memory (three input rows interleaved) */
                int wp = w1 + MAXPOOL_AHEAD * d->SW;
                if (wp + d->SW <= W)
                    for (int h = h0; h < h1; h++)
                        for (int q = 0; q < d->SW * C; q += 16)
                            _mm_prefetch((const char *)(img + (size_t)(h * W + wp) * C + q),
                                         _MM_HINT_T0);
                for (int c0 = 0; c0 < C; c0 += 64) {
                    __mmask16 m[4];
                    __m512 best[4];
                    __m512i idx[4];
                    int off0 = (h0 * W + w0) * C + c0;
                    for (int v = 0; v < 4; v++) {
                        int left = C - c0 - 16 * v;
                        m[v] = left >= 16  ? (__mmask16)0xffff
                               : left <= 0 ? (__mmask16)0
                                           : (__mmask16)((1u << left) - 1);
                        best[v] = _mm512_maskz_loadu_ps(m[v], img + off0 + 16 * v);
                        idx[v] = _mm512_add_epi32(_mm512_set1_epi32(off0 + 16 * v), iota);
                    }
                    for (int h = h0; h < h1; h++)
                        for (int w = w0; w < w1; w++) {
                            int off = (h * W + w) * C + c0;
                            if (off == off0) continue; /* the first position initialised */
                            __m512i io = _mm512_add_epi32(_mm512_set1_epi32(off), iota);
                            for (int v = 0; v < 4; v++) {
                                __m512 x = _mm512_maskz_loadu_ps(m[v], img + off + 16 * v);
                                __mmask16 gt =
                                    _mm512_mask_cmp_ps_mask(m[v], x, best[v], _CMP_GT_OQ);
                                best[v] = _mm512_mask_mov_ps(best[v], gt, x);
                                idx[v] = _mm512_mask_add_epi32(idx[v], gt, io,
                                                               _mm512_set1_epi32(16 * v));
                            }
                        }
                    for (int v = 0; v < 4; v++) {
                        _mm512_mask_storeu_ps(out + o + c0 + 16 * v, m[v], best[v]);
                        _mm512_mask_storeu_epi32(argmax + o + c0 + 16 * v, m[v], idx[v]);
                    }
                }
            }
        }
    }
}

/* Average pool forward (scale = 1/positions inside the image) and backward. */
AVX512 static void avgpool_simd(float *out, const float *inp, float *dinp, const float *dout,
                                const nn_pool_dims *d, bool fresh)
{
    const int H = d->H, W = d->W, C = d->C, OH = d->OH, OW = d->OW;
    for (int n = 0; n < d->N; n++) {
        size_t img_off = (size_t)n * H * W * C;
        for (int oh = 0; oh < OH; oh++) {
            int h0 = oh * d->SH - d->PH, h1 = h0 + d->KH;
            h0 = h0 < 0 ? 0 : h0;
            h1 = h1 > H ? H : h1;
            for (int ow = 0; ow < OW; ow++) {
                int w0 = ow * d->SW - d->PW, w1 = w0 + d->KW;
                w0 = w0 < 0 ? 0 : w0;
                w1 = w1 > W ? W : w1;
                size_t o = (((size_t)n * OH + oh) * OW + ow) * C;
                __m512 scale = _mm512_set1_ps(avg_scale(d, h0, h1, w0, w1));
                for (int c0 = 0; c0 < C; c0 += 16) {
                    int left = C - c0;
                    __mmask16 m = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
                    if (out) {
                        __m512 acc = _mm512_setzero_ps();
                        for (int h = h0; h < h1; h++)
                            for (int w = w0; w < w1; w++)
                                acc = _mm512_add_ps(
                                    acc, _mm512_maskz_loadu_ps(
                                             m, inp + img_off + ((size_t)h * W + w) * C + c0));
                        _mm512_mask_storeu_ps(out + o + c0, m, _mm512_mul_ps(acc, scale));
                    } else {
                        __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dout + o + c0), scale);
                        for (int h = h0; h < h1; h++)
                            for (int w = w0; w < w1; w++) {
                                float *p = dinp + img_off + ((size_t)h * W + w) * C + c0;
                                __m512 v =
                                    fresh ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, p);
                                _mm512_mask_storeu_ps(p, m, _mm512_add_ps(v, g));
                            }
                    }
                }
            }
        }
    }
}
#endif

static bool is_pool_2x2(const nn_pool_dims *d)
{
    return d->KH == 2 && d->KW == 2 && d->SH == 2 && d->SW == 2 && d->PH == 0 && d->PW == 0;
}

void nn_maxpool_forward(float *out, int32_t *argmax, const float *inp, const nn_pool_dims *d)
{
    const int H = d->H, W = d->W, C = d->C, OH = d->OH, OW = d->OW;
    /* Every window holds at least one input position when padding < kernel. */
    assert(d->PH < d->KH && d->PW < d->KW);
    if (is_pool_2x2(d)) {
#if LAYERS_X86
        if (nn_narrow_use_simd(-1)) {
            maxpool_2x2_simd(out, argmax, inp, d);
            return;
        }
#endif
        maxpool_2x2(out, argmax, inp, d);
        return;
    }
#if LAYERS_X86
    if (nn_narrow_use_simd(-1)) {
        maxpool_simd(out, argmax, inp, d);
        return;
    }
#endif
    for (int n = 0; n < d->N; n++) {
        const float *img = inp + (size_t)n * H * W * C;
        for (int oh = 0; oh < OH; oh++) {
            int h0 = oh * d->SH - d->PH, h1 = h0 + d->KH;
            h0 = h0 < 0 ? 0 : h0;
            h1 = h1 > H ? H : h1;
            for (int ow = 0; ow < OW; ow++) {
                int w0 = ow * d->SW - d->PW, w1 = w0 + d->KW;
                w0 = w0 < 0 ? 0 : w0;
                w1 = w1 > W ? W : w1;
                size_t o = (((size_t)n * OH + oh) * OW + ow) * C;
                float *restrict y = out + o;
                int32_t *restrict a = argmax + o;
                /* the first position initialises, the others compare */
                int32_t off0 = (h0 * W + w0) * C;
                for (int c = 0; c < C; c++) y[c] = img[off0 + c], a[c] = off0 + c;
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        int32_t off = (h * W + w) * C;
                        const float *restrict x = img + off;
                        for (int c = 0; c < C; c++) {
                            bool gt = x[c] > y[c];
                            y[c] = gt ? x[c] : y[c];
                            a[c] = gt ? off + c : a[c];
                        }
                    }
            }
        }
    }
}

void nn_maxpool_backward(float *dinp, bool acc, const float *dout, const int32_t *argmax,
                         const nn_pool_dims *d)
{
#if LAYERS_X86
    if (is_pool_2x2(d) && d->H % 2 == 0 && d->W % 2 == 0 && nn_narrow_use_simd(-1)) {
        maxpool_2x2_backward_simd(dinp, acc, dout, argmax, d);
        return;
    }
#endif
    const size_t WC = (size_t)d->W * d->C, img_in = (size_t)d->H * WC;
    const size_t row_out = (size_t)d->OW * d->C, img_out = (size_t)d->OH * row_out;
    for (int n = 0; n < d->N; n++) {
        float *restrict di = dinp + n * img_in;
        /* Without acc, the input rows are cleared just before the first
         * output row whose windows reach them, so that they are in cache
         * for the scatter: no separate pass over the whole gradient
         * (resnet-50: 25.7 MB per batch of 8). The scatter stays scalar: a
         * 16-channel version (compare each window position with the
         * argmax, masked add) is slower, its masks unpredictable. */
        int cleared = 0;
        for (int oh = 0; oh < d->OH; oh++) {
            if (!acc) {
                int h1 = oh * d->SH - d->PH + d->KH;
                h1 = h1 > d->H ? d->H : h1;
                if (h1 > cleared)
                    memset(di + cleared * WC, 0, sizeof(float) * (size_t)(h1 - cleared) * WC);
                cleared = h1 > cleared ? h1 : cleared;
            }
            const float *restrict dy = dout + n * img_out + oh * row_out;
            const int32_t *restrict a = argmax + n * img_out + oh * row_out;
            for (size_t i = 0; i < row_out; i++) di[a[i]] += dy[i];
        }
        /* rows below the last window */
        if (!acc && cleared < d->H)
            memset(di + cleared * WC, 0, sizeof(float) * (size_t)(d->H - cleared) * WC);
    }
}

void nn_avgpool_forward(float *out, const float *inp, const nn_pool_dims *d)
{
    const int H = d->H, W = d->W, C = d->C, OH = d->OH, OW = d->OW;
    assert(d->PH < d->KH && d->PW < d->KW);
#if LAYERS_X86
    if (nn_narrow_use_simd(-1)) {
        avgpool_simd(out, inp, NULL, NULL, d, false);
        return;
    }
#endif
    for (int n = 0; n < d->N; n++) {
        const float *img = inp + (size_t)n * H * W * C;
        for (int oh = 0; oh < OH; oh++) {
            int h0 = oh * d->SH - d->PH, h1 = h0 + d->KH;
            h0 = h0 < 0 ? 0 : h0;
            h1 = h1 > H ? H : h1;
            for (int ow = 0; ow < OW; ow++) {
                int w0 = ow * d->SW - d->PW, w1 = w0 + d->KW;
                w0 = w0 < 0 ? 0 : w0;
                w1 = w1 > W ? W : w1;
                float *restrict y = out + (((size_t)n * OH + oh) * OW + ow) * C;
                for (int c = 0; c < C; c++) y[c] = 0.0f;
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        const float *restrict x = img + ((size_t)h * W + w) * C;
                        for (int c = 0; c < C; c++) y[c] += x[c];
                    }
                float scale = avg_scale(d, h0, h1, w0, w1);
                for (int c = 0; c < C; c++) y[c] *= scale;
            }
        }
    }
}

void nn_avgpool_backward(float *dinp, bool acc, const float *dout, const nn_pool_dims *d)
{
    const int H = d->H, W = d->W, C = d->C, OH = d->OH, OW = d->OW;
#if LAYERS_X86
    /* windows that tile the image (a global pool): each input gradient is
     * 0 + its one term, written without a clearing pass */
    bool tiled = d->PH == 0 && d->PW == 0 && (OH == 1 || d->SH == d->KH) &&
                 (OW == 1 || d->SW == d->KW) && OH * d->KH == H && OW * d->KW == W;
    if (nn_narrow_use_simd(-1)) {
        if (!acc && !tiled) memset(dinp, 0, sizeof(float) * (size_t)d->N * H * W * C);
        avgpool_simd(NULL, NULL, dinp, dout, d, !acc && tiled);
        return;
    }
#endif
    if (!acc) memset(dinp, 0, sizeof(float) * (size_t)d->N * H * W * C);
    for (int n = 0; n < d->N; n++) {
        float *img = dinp + (size_t)n * H * W * C;
        for (int oh = 0; oh < OH; oh++) {
            int h0 = oh * d->SH - d->PH, h1 = h0 + d->KH;
            h0 = h0 < 0 ? 0 : h0;
            h1 = h1 > H ? H : h1;
            for (int ow = 0; ow < OW; ow++) {
                int w0 = ow * d->SW - d->PW, w1 = w0 + d->KW;
                w0 = w0 < 0 ? 0 : w0;
                w1 = w1 > W ? W : w1;
                const float *restrict dy = dout + (((size_t)n * OH + oh) * OW + ow) * C;
                float scale = avg_scale(d, h0, h1, w0, w1);
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        float *restrict dx = img + ((size_t)h * W + w) * C;
                        for (int c = 0; c < C; c++) dx[c] += dy[c] * scale;
                    }
            }
        }
    }
}

/* ---- dropout --------------------------------------------------------------------- */

void nn_dropout_mask_range(float *mask, size_t i0, size_t i1, float rate, uint64_t seed)
{
    assert(i0 % NN_DROPOUT_BLOCK == 0);
    float keep = 1.0f - rate, scale = 1.0f / keep;
    for (size_t b0 = i0; b0 < i1; b0 += NN_DROPOUT_BLOCK) {
        size_t b1 = b0 + NN_DROPOUT_BLOCK < i1 ? b0 + NN_DROPOUT_BLOCK : i1;
        nn_rng r;
        nn_rng_seed(&r, nn_seed_mix(seed, b0 / NN_DROPOUT_BLOCK, 0x64726f70 /* "drop" */));
        /* 24-bit uniforms, two per 64-bit draw */
        size_t i = b0;
        for (; i + 1 < b1; i += 2) {
            uint64_t v = nn_rng_next(&r);
            float u0 = (float)(v >> 40) * (1.0f / 16777216.0f);
            float u1 = (float)((v >> 8) & 0xffffff) * (1.0f / 16777216.0f);
            mask[i] = u0 < keep ? scale : 0.0f;
            mask[i + 1] = u1 < keep ? scale : 0.0f;
        }
        if (i < b1) mask[i] = nn_rng_uniform(&r) < keep ? scale : 0.0f;
    }
}

void nn_dropout_mask(float *mask, size_t n, float rate, uint64_t seed)
{
    nn_dropout_mask_range(mask, 0, n, rate, seed);
}

NN_CLONES void nn_dropout_forward(float *out, const float *inp, const float *mask, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = inp[i] * mask[i];
}

NN_CLONES void nn_dropout_backward(float *dinp, bool acc, const float *dout, const float *mask,
                                   size_t n)
{
    float *restrict di = dinp;
    const float *restrict d = dout, *restrict mk = mask;
    if (acc)
        for (size_t i = 0; i < n; i++) di[i] += d[i] * mk[i];
    else
        for (size_t i = 0; i < n; i++) di[i] = d[i] * mk[i];
}

/* ---- concat ---------------------------------------------------------------------- */

void nn_concat_forward(float *out, const float *const *ins, const int *Cs, int nin, int M)
{
    int Ctot = 0;
    for (int j = 0; j < nin; j++) Ctot += Cs[j];
    for (int i = 0; i < M; i++) {
        float *o = out + (size_t)i * Ctot;
        for (int j = 0; j < nin; j++) {
            if (ins[j]) memcpy(o, ins[j] + (size_t)i * Cs[j], sizeof(float) * Cs[j]);
            o += Cs[j];
        }
    }
}

void nn_concat_backward(float *const *dins, const bool *acc, const float *dout, const int *Cs,
                        int nin, int M)
{
    int Ctot = 0;
    for (int j = 0; j < nin; j++) Ctot += Cs[j];
    for (int i = 0; i < M; i++) {
        const float *d = dout + (size_t)i * Ctot;
        for (int j = 0; j < nin; j++) {
            if (dins[j]) {
                float *restrict di = dins[j] + (size_t)i * Cs[j];
                if (acc[j])
                    for (int c = 0; c < Cs[j]; c++) di[c] += d[c];
                else
                    memcpy(di, d, sizeof(float) * Cs[j]);
            }
            d += Cs[j];
        }
    }
}

/* ---- elementwise sum ---------------------------------------------------------------- */

NN_CLONES void nn_sum_forward(float *out, const float *const *ins, int nin, size_t n, bool relu)
{
    const float *restrict a = ins[0], *restrict b = ins[1];
    float *restrict y = out;
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
    for (int j = 2; j < nin; j++) {
        const float *restrict x = ins[j];
        for (size_t i = 0; i < n; i++) y[i] += x[i];
    }
    if (relu) nn_relu_forward(out, out, n);
}

void nn_sum_backward(float *const *dins, const bool *acc, int nin, float *dout, const float *out,
                     size_t n, bool relu)
{
    if (relu) nn_relu_mask(dout, out, n);
    for (int j = 0; j < nin; j++) {
        if (!dins[j]) continue;
        if (!acc[j]) {
            memcpy(dins[j], dout, sizeof(float) * n);
            continue;
        }
        float *restrict di = dins[j];
        const float *restrict d = dout;
        for (size_t i = 0; i < n; i++) di[i] += d[i];
    }
}

/* ---- softmax cross-entropy ------------------------------------------------------- */

double nn_softmax_xent(float *dlogits, const float *logits, const int32_t *labels, int N, int K,
                       float smoothing, int *ncorrect, int32_t *pred)
{
    double sum = nn_softmax_xent_rows(dlogits, logits, labels, N, K, N, smoothing, ncorrect, pred);
    return N > 0 ? sum / N : 0.0;
}

double nn_softmax_xent_rows(float *dlogits, const float *logits, const int32_t *labels, int N,
                            int K, int Ntot, float smoothing, int *ncorrect, int32_t *pred)
{
    double loss = 0.0;
    int correct = 0;
    double off = (double)smoothing / K, on = 1.0 - smoothing + off;
    for (int i = 0; i < N; i++) {
        const float *z = logits + (size_t)i * K;
        int y = labels[i];
        assert(y >= 0 && y < K);
        int best = 0;
        for (int k = 1; k < K; k++)
            if (z[k] > z[best]) best = k;
        /* log-sum-exp around the max: no overflow, log of at least 1 */
        double zmax = z[best], sum = 0.0;
        for (int k = 0; k < K; k++) sum += exp((double)z[k] - zmax);
        double lse = log(sum);
        /* -sum_k q_k (z_k - zmax - lse) with sum_k q_k = 1 */
        double qz = 0.0;
        if (smoothing != 0.0f) {
            for (int k = 0; k < K; k++) qz += off * ((double)z[k] - zmax);
            qz += (on - off) * ((double)z[y] - zmax);
        } else {
            qz = (double)z[y] - zmax;
        }
        loss += lse - qz;
        if (dlogits) {
            float *dz = dlogits + (size_t)i * K;
            double inv = 1.0 / sum;
            for (int k = 0; k < K; k++) {
                double p = exp((double)z[k] - zmax) * inv;
                double q = (k == y) ? on : off;
                dz[k] = (float)((p - q) / Ntot);
            }
        }
        if (best == y) correct++;
        if (pred) pred[i] = best;
    }
    if (ncorrect) *ncorrect = correct;
    return loss;
}
