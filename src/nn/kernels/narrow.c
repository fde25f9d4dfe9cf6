/*
 * narrow.c - matrix products with a narrow side (at most NN_NARROW_MAX = 32
 * columns), the shapes of small convolutions: LeNet's conv1 multiplies
 * [50176][25] by [25][6], conv2 [6400][150] by [150][16].
 *
 * Why not BLIS here: BLIS's AVX-512 kernel is 32x12 and prefers column
 * storage, so for a row-major C with 6 or 16 columns it transposes the
 * problem and runs its 32-row micro-tile over those 6-16 rows (most of each
 * FMA wasted), after packing the long operand. With K <= 32 one output
 * row is one or two 16-float vectors, the whole of B stays in L1, and a
 * register-blocked loop of broadcast-FMAs is several times as fast with
 * nothing packed (bench_conv compares them).
 *
 * Each product has an AVX-512 kernel (chosen at run time from cpuid) and a
 * portable C version with the same contract; the tests check both against
 * nn_gemm_ref.
 */
#include <assert.h>
#include <string.h>

#include "layers.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define NARROW_X86 1
#include <immintrin.h>
#else
#define NARROW_X86 0
#endif

static int narrow_mode = -1; /* -1 unknown, 0 portable, 1 AVX-512 */

bool nn_narrow_use_simd(int force)
{
    if (force == 0 || force == 1) narrow_mode = force;
    if (narrow_mode < 0) {
#if NARROW_X86
        __builtin_cpu_init();
        narrow_mode = __builtin_cpu_supports("avx512f") ? 1 : 0;
#else
        narrow_mode = 0;
#endif
    }
    return narrow_mode == 1;
}

/* ---- portable versions ------------------------------------------------------------- */

static void nn_port(int M, int K, int R, const float *A, int lda, const float *B, int ldb,
                    const float *bias, bool relu, float *C, int ldc, bool acc)
{
    for (int i = 0; i < M; i++) {
        float out[NN_NARROW_MAX];
        for (int k = 0; k < K; k++) out[k] = acc ? C[(size_t)i * ldc + k] : 0.0f;
        const float *a = A + (size_t)i * lda;
        for (int r = 0; r < R; r++)
            for (int k = 0; k < K; k++) out[k] += a[r] * B[(size_t)r * ldb + k];
        for (int k = 0; k < K; k++) {
            float v = out[k] + (bias ? bias[k] : 0.0f);
            C[(size_t)i * ldc + k] = relu && v < 0.0f ? 0.0f : v;
        }
    }
}

static void tn_port(int R, int K, int M, const float *A, int lda, const float *D, int ldd, float *C,
                    int ldc, bool acc)
{
    if (!acc)
        for (int r = 0; r < R; r++) memset(C + (size_t)r * ldc, 0, sizeof(float) * K);
    for (int m = 0; m < M; m++) {
        const float *a = A + (size_t)m * lda, *d = D + (size_t)m * ldd;
        for (int r = 0; r < R; r++)
            for (int k = 0; k < K; k++) C[(size_t)r * ldc + k] += a[r] * d[k];
    }
}

static void nt_port(int M, int R, int K, const float *D, const float *BT, float *C, int ldc,
                    bool acc)
{
    for (int m = 0; m < M; m++) {
        float *c = C + (size_t)m * ldc;
        const float *d = D + (size_t)m * K;
        if (!acc) memset(c, 0, sizeof(float) * R);
        for (int k = 0; k < K; k++)
            for (int r = 0; r < R; r++) c[r] += d[k] * BT[(size_t)k * R + r];
    }
}

static void conv_row_port(float *out, const float *prow, int OW, int SWC, int KH, int WpC, int seg,
                          const float *W, int K, const float *bias, bool relu, bool accum)
{
    for (int ow = 0; ow < OW; ow++) {
        float acc[NN_NARROW_MAX];
        for (int k = 0; k < K; k++) acc[k] = bias ? bias[k] : 0.0f;
        for (int kh = 0; kh < KH; kh++) {
            const float *a = prow + (size_t)kh * WpC + (size_t)ow * SWC;
            const float *b = W + (size_t)kh * seg * K;
            for (int j = 0; j < seg; j++)
                for (int k = 0; k < K; k++) acc[k] += a[j] * b[(size_t)j * K + k];
        }
        for (int k = 0; k < K; k++) {
            float v = accum ? acc[k] + out[(size_t)ow * K + k] : acc[k];
            out[(size_t)ow * K + k] = relu && v < 0.0f ? 0.0f : v;
        }
    }
}

static void dcol_row_port(float *dprow, const float *dy, int OW, int SWC, int KH, int WpC, int seg,
                          const float *WT, int K)
{
    const int R = KH * seg;
    for (int ow = 0; ow < OW; ow++)
        for (int kh = 0; kh < KH; kh++) {
            float *o = dprow + (size_t)kh * WpC + (size_t)ow * SWC;
            for (int k = 0; k < K; k++) {
                float g = dy[(size_t)ow * K + k];
                const float *wt = WT + (size_t)k * R + (size_t)kh * seg;
                for (int j = 0; j < seg; j++) o[j] += g * wt[j];
            }
        }
}

/* ---- AVX-512 kernels ------------------------------------------------------------------ */

#if NARROW_X86
#define AVX512 __attribute__((target("avx512f,fma")))

/* C[M][K] (+)= A B (+ bias, ReLU), K <= 16: 8 rows at a time in 8 registers. */
AVX512 static void nn_16(int M, int K, int R, const float *A, int lda, const float *B, int ldb,
                         const float *bias, bool relu, float *C, int ldc, bool acc)
{
    const __mmask16 km = (__mmask16)((1u << K) - 1);
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(km, bias) : _mm512_setzero_ps();
    const __m512 zero = _mm512_setzero_ps();
    int i = 0;
    for (; i + 8 <= M; i += 8) {
        __m512 c0 = zero, c1 = zero, c2 = zero, c3 = zero, c4 = zero, c5 = zero, c6 = zero,
               c7 = zero;
        const float *a = A + (size_t)i * lda;
        for (int r = 0; r < R; r++) {
            __m512 b = _mm512_maskz_loadu_ps(km, B + (size_t)r * ldb);
            c0 = _mm512_fmadd_ps(_mm512_set1_ps(a[r]), b, c0);
            c1 = _mm512_fmadd_ps(_mm512_set1_ps(a[lda + r]), b, c1);
            c2 = _mm512_fmadd_ps(_mm512_set1_ps(a[2 * lda + r]), b, c2);
            c3 = _mm512_fmadd_ps(_mm512_set1_ps(a[3 * lda + r]), b, c3);
            c4 = _mm512_fmadd_ps(_mm512_set1_ps(a[4 * lda + r]), b, c4);
            c5 = _mm512_fmadd_ps(_mm512_set1_ps(a[5 * lda + r]), b, c5);
            c6 = _mm512_fmadd_ps(_mm512_set1_ps(a[6 * lda + r]), b, c6);
            c7 = _mm512_fmadd_ps(_mm512_set1_ps(a[7 * lda + r]), b, c7);
        }
        __m512 cs[8] = {c0, c1, c2, c3, c4, c5, c6, c7};
        for (int j = 0; j < 8; j++) {
            float *c = C + (size_t)(i + j) * ldc;
            __m512 v = _mm512_add_ps(cs[j], bv);
            if (acc) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km, c));
            if (relu) v = _mm512_max_ps(v, zero);
            _mm512_mask_storeu_ps(c, km, v);
        }
    }
    for (; i < M; i++) {
        __m512 c0 = zero;
        const float *a = A + (size_t)i * lda;
        for (int r = 0; r < R; r++)
            c0 = _mm512_fmadd_ps(_mm512_set1_ps(a[r]),
                                 _mm512_maskz_loadu_ps(km, B + (size_t)r * ldb), c0);
        float *c = C + (size_t)i * ldc;
        __m512 v = _mm512_add_ps(c0, bv);
        if (acc) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km, c));
        if (relu) v = _mm512_max_ps(v, zero);
        _mm512_mask_storeu_ps(c, km, v);
    }
}

/* K in (16, 32]: two registers per row, 4 rows at a time. */
AVX512 static void nn_32(int M, int K, int R, const float *A, int lda, const float *B, int ldb,
                         const float *bias, bool relu, float *C, int ldc, bool acc)
{
    const __mmask16 km = (__mmask16)((1u << (K - 16)) - 1);
    const __m512 zero = _mm512_setzero_ps();
    const __m512 blo = bias ? _mm512_loadu_ps(bias) : zero;
    const __m512 bhi = bias ? _mm512_maskz_loadu_ps(km, bias + 16) : zero;
    int i = 0;
    for (; i + 4 <= M; i += 4) {
        __m512 l0 = zero, l1 = zero, l2 = zero, l3 = zero, h0 = zero, h1 = zero, h2 = zero,
               h3 = zero;
        const float *a = A + (size_t)i * lda;
        for (int r = 0; r < R; r++) {
            __m512 bl = _mm512_loadu_ps(B + (size_t)r * ldb);
            __m512 bh = _mm512_maskz_loadu_ps(km, B + (size_t)r * ldb + 16);
            __m512 a0 = _mm512_set1_ps(a[r]), a1 = _mm512_set1_ps(a[lda + r]);
            __m512 a2 = _mm512_set1_ps(a[2 * lda + r]), a3 = _mm512_set1_ps(a[3 * lda + r]);
            l0 = _mm512_fmadd_ps(a0, bl, l0), h0 = _mm512_fmadd_ps(a0, bh, h0);
            l1 = _mm512_fmadd_ps(a1, bl, l1), h1 = _mm512_fmadd_ps(a1, bh, h1);
            l2 = _mm512_fmadd_ps(a2, bl, l2), h2 = _mm512_fmadd_ps(a2, bh, h2);
            l3 = _mm512_fmadd_ps(a3, bl, l3), h3 = _mm512_fmadd_ps(a3, bh, h3);
        }
        __m512 ls[4] = {l0, l1, l2, l3}, hs[4] = {h0, h1, h2, h3};
        for (int j = 0; j < 4; j++) {
            float *c = C + (size_t)(i + j) * ldc;
            __m512 vl = _mm512_add_ps(ls[j], blo), vh = _mm512_add_ps(hs[j], bhi);
            if (acc) {
                vl = _mm512_add_ps(vl, _mm512_loadu_ps(c));
                vh = _mm512_add_ps(vh, _mm512_maskz_loadu_ps(km, c + 16));
            }
            if (relu) vl = _mm512_max_ps(vl, zero), vh = _mm512_max_ps(vh, zero);
            _mm512_storeu_ps(c, vl);
            _mm512_mask_storeu_ps(c + 16, km, vh);
        }
    }
    /* the last rows one at a time with the same arithmetic, so that a row's
     * result does not depend on where a call's rows start or end */
    for (; i < M; i++) {
        __m512 l0 = zero, h0 = zero;
        const float *a = A + (size_t)i * lda;
        for (int r = 0; r < R; r++) {
            __m512 a0 = _mm512_set1_ps(a[r]);
            l0 = _mm512_fmadd_ps(a0, _mm512_loadu_ps(B + (size_t)r * ldb), l0);
            h0 = _mm512_fmadd_ps(a0, _mm512_maskz_loadu_ps(km, B + (size_t)r * ldb + 16), h0);
        }
        float *c = C + (size_t)i * ldc;
        __m512 vl = _mm512_add_ps(l0, blo), vh = _mm512_add_ps(h0, bhi);
        if (acc) {
            vl = _mm512_add_ps(vl, _mm512_loadu_ps(c));
            vh = _mm512_add_ps(vh, _mm512_maskz_loadu_ps(km, c + 16));
        }
        if (relu) vl = _mm512_max_ps(vl, zero), vh = _mm512_max_ps(vh, zero);
        _mm512_storeu_ps(c, vl);
        _mm512_mask_storeu_ps(c + 16, km, vh);
    }
}

/* NB rows of C = A^T D, K <= 16, with U independent accumulators per row
 * (over m mod U) so that short blocks are not bound by the FMA latency.
 * Inlined with constant NB and U: the accumulators live in registers. */
__attribute__((always_inline)) AVX512 static inline void tn16_block(int NB, int U, int r0, int K,
                                                                    int M, const float *A, int lda,
                                                                    const float *D, int ldd,
                                                                    float *C, int ldc, bool acc)
{
    const __mmask16 km = (__mmask16)((1u << K) - 1);
    __m512 c[4][16];
    for (int u = 0; u < U; u++)
        for (int j = 0; j < NB; j++) c[u][j] = _mm512_setzero_ps();
    int m = 0;
    for (; m + U <= M; m += U)
        for (int u = 0; u < U; u++) {
            __m512 d = _mm512_maskz_loadu_ps(km, D + (size_t)(m + u) * ldd);
            const float *a = A + (size_t)(m + u) * lda + r0;
            for (int j = 0; j < NB; j++)
                c[u][j] = _mm512_fmadd_ps(_mm512_set1_ps(a[j]), d, c[u][j]);
        }
    for (; m < M; m++) {
        __m512 d = _mm512_maskz_loadu_ps(km, D + (size_t)m * ldd);
        const float *a = A + (size_t)m * lda + r0;
        for (int j = 0; j < NB; j++) c[0][j] = _mm512_fmadd_ps(_mm512_set1_ps(a[j]), d, c[0][j]);
    }
    for (int j = 0; j < NB; j++) {
        __m512 v = c[0][j];
        for (int u = 1; u < U; u++) v = _mm512_add_ps(v, c[u][j]);
        float *o = C + (size_t)(r0 + j) * ldc;
        if (acc) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km, o));
        _mm512_mask_storeu_ps(o, km, v);
    }
}

/* C[R][K] (+)= A^T D, K <= 16: blocks of 16, 8, 4, 2, 1 rows of C in
 * registers, all of M streamed through each block. */
AVX512 static void tn_16(int R, int K, int M, const float *A, int lda, const float *D, int ldd,
                         float *C, int ldc, bool acc)
{
    int r0 = 0;
    for (; r0 + 16 <= R; r0 += 16) tn16_block(16, 1, r0, K, M, A, lda, D, ldd, C, ldc, acc);
    if (r0 + 8 <= R) tn16_block(8, 2, r0, K, M, A, lda, D, ldd, C, ldc, acc), r0 += 8;
    if (r0 + 4 <= R) tn16_block(4, 4, r0, K, M, A, lda, D, ldd, C, ldc, acc), r0 += 4;
    if (r0 + 2 <= R) tn16_block(2, 4, r0, K, M, A, lda, D, ldd, C, ldc, acc), r0 += 2;
    if (r0 < R) tn16_block(1, 4, r0, K, M, A, lda, D, ldd, C, ldc, acc);
}

/* K in (16, 32]: 8 rows of C (16 registers) at a time. */
AVX512 static void tn_32(int R, int K, int M, const float *A, int lda, const float *D, int ldd,
                         float *C, int ldc, bool acc)
{
    const __mmask16 km = (__mmask16)((1u << (K - 16)) - 1);
    int r0 = 0;
    for (; r0 + 8 <= R; r0 += 8) {
        __m512 lo[8], hi[8];
        for (int j = 0; j < 8; j++) lo[j] = hi[j] = _mm512_setzero_ps();
        for (int m = 0; m < M; m++) {
            __m512 dl = _mm512_loadu_ps(D + (size_t)m * ldd);
            __m512 dh = _mm512_maskz_loadu_ps(km, D + (size_t)m * ldd + 16);
            const float *a = A + (size_t)m * lda + r0;
            for (int j = 0; j < 8; j++) {
                __m512 av = _mm512_set1_ps(a[j]);
                lo[j] = _mm512_fmadd_ps(av, dl, lo[j]);
                hi[j] = _mm512_fmadd_ps(av, dh, hi[j]);
            }
        }
        for (int j = 0; j < 8; j++) {
            float *o = C + (size_t)(r0 + j) * ldc;
            __m512 vl = lo[j], vh = hi[j];
            if (acc) {
                vl = _mm512_add_ps(vl, _mm512_loadu_ps(o));
                vh = _mm512_add_ps(vh, _mm512_maskz_loadu_ps(km, o + 16));
            }
            _mm512_storeu_ps(o, vl);
            _mm512_mask_storeu_ps(o + 16, km, vh);
        }
    }
    if (r0 < R) {
        /* the remaining rows of C: a column slice of A */
        for (int r = r0; r < R; r++) {
            __m512 lo = _mm512_setzero_ps(), hi = lo;
            for (int m = 0; m < M; m++) {
                __m512 av = _mm512_set1_ps(A[(size_t)m * lda + r]);
                lo = _mm512_fmadd_ps(av, _mm512_loadu_ps(D + (size_t)m * ldd), lo);
                hi = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(km, D + (size_t)m * ldd + 16), hi);
            }
            float *o = C + (size_t)r * ldc;
            if (acc) {
                lo = _mm512_add_ps(lo, _mm512_loadu_ps(o));
                hi = _mm512_add_ps(hi, _mm512_maskz_loadu_ps(km, o + 16));
            }
            _mm512_storeu_ps(o, lo);
            _mm512_mask_storeu_ps(o + 16, km, hi);
        }
    }
}

/* ROWS rows of C[m][r0, r0 + 16*NV) (+)= D BT; the last vector may be
 * partial. Inlined with constant ROWS and NV: 16 accumulators at most. */
__attribute__((always_inline)) AVX512 static inline void nt_block(int ROWS, int NV, int m, int r0,
                                                                  int R, int K, const float *D,
                                                                  const float *BT, float *C,
                                                                  int ldc, bool acc)
{
    __mmask16 mk[4];
    for (int v = 0; v < NV; v++) {
        int left = R - r0 - 16 * v;
        mk[v] = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
    }
    __m512 c[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < ROWS; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[i][v] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        const float *bt = BT + (size_t)k * R + r0;
        __m512 w[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) w[v] = _mm512_maskz_loadu_ps(mk[v], bt + 16 * v);
#pragma GCC unroll 4
        for (int i = 0; i < ROWS; i++) {
            __m512 x = _mm512_set1_ps(D[(size_t)(m + i) * K + k]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) c[i][v] = _mm512_fmadd_ps(x, w[v], c[i][v]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < ROWS; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            float *p = C + (size_t)(m + i) * ldc + r0 + 16 * v;
            __m512 val = c[i][v];
            if (acc) val = _mm512_add_ps(val, _mm512_maskz_loadu_ps(mk[v], p));
            _mm512_mask_storeu_ps(p, mk[v], val);
        }
}

#define NT_ROWS(ROWS)                                                                              \
    for (int r0 = 0; r0 < R; r0 += 64) {                                                           \
        int nv = (R - r0 + 15) / 16;                                                               \
        if (nv >= 4)                                                                               \
            nt_block(ROWS, 4, m, r0, R, K, D, BT, C, ldc, acc);                                    \
        else if (nv == 3)                                                                          \
            nt_block(ROWS, 3, m, r0, R, K, D, BT, C, ldc, acc);                                    \
        else if (nv == 2)                                                                          \
            nt_block(ROWS, 2, m, r0, R, K, D, BT, C, ldc, acc);                                    \
        else                                                                                       \
            nt_block(ROWS, 1, m, r0, R, K, D, BT, C, ldc, acc);                                    \
    }

/* C[M][R] (+)= D BT, BT[K][R], K <= 32, R any: 4 rows x 64 columns of C
 * per block. */
AVX512 static void nt_simd(int M, int R, int K, const float *D, const float *BT, float *C, int ldc,
                           bool acc)
{
    int m = 0;
    for (; m + 4 <= M; m += 4) NT_ROWS(4)
    for (; m < M; m++) NT_ROWS(1)
}

/* RR output rows x PX output columns of a convolution read straight from
 * the padded image (implicit im2col): the window of output (r, ow) starts
 * at prow + r*ldp + ow*SWC and is KH segments of seg floats, WpC apart.
 * RR*PX accumulators (inlined with constant RR and PX), K <= 16: every
 * weight vector loaded serves RR*PX multiply-adds, and 2 x 7 = 14
 * independent sums keep both FMA pipes busy through their latency. */
__attribute__((always_inline)) AVX512 static inline void
conv16_block(int RR, int PX, float *out, size_t ldo, const float *prow, size_t ldp, int ow, int SWC,
             int KH, int WpC, int seg, const float *W, int K, __m512 bv, __mmask16 km, bool relu,
             bool acc)
{
    __m512 c[2][8];
#pragma GCC unroll 2
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 8
        for (int i = 0; i < PX; i++) c[r][i] = bv;
    for (int kh = 0; kh < KH; kh++) {
        const float *a = prow + (size_t)kh * WpC + (size_t)ow * SWC;
        const float *b = W + (size_t)kh * seg * K;
        for (int j = 0; j < seg; j++) {
            __m512 w = _mm512_maskz_loadu_ps(km, b + (size_t)j * K);
#pragma GCC unroll 2
            for (int r = 0; r < RR; r++)
#pragma GCC unroll 8
                for (int i = 0; i < PX; i++)
                    c[r][i] = _mm512_fmadd_ps(_mm512_set1_ps(a[r * ldp + (size_t)i * SWC + j]), w,
                                              c[r][i]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 8
        for (int i = 0; i < PX; i++) {
            float *o = out + r * ldo + (size_t)(ow + i) * K;
            __m512 v = c[r][i];
            if (acc) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km, o));
            if (relu) v = _mm512_max_ps(v, _mm512_setzero_ps());
            _mm512_mask_storeu_ps(o, km, v);
        }
}

#define CONV16(RR, PX)                                                                             \
    case PX:                                                                                       \
        conv16_block(RR, PX, out, ldo, prow, ldp, ow, SWC, KH, WpC, seg, W, K, bv, km, relu, acc); \
        break;
#define CONV16_ROWS(RR)                                                                            \
    for (int ow = 0, bi = 0; bi < nblocks; bi++) {                                                 \
        int px = (OW - ow) / (nblocks - bi);                                                       \
        switch (px) {                                                                              \
            CONV16(RR, 1)                                                                          \
            CONV16(RR, 2)                                                                          \
            CONV16(RR, 3)                                                                          \
            CONV16(RR, 4)                                                                          \
            CONV16(RR, 5)                                                                          \
            CONV16(RR, 6)                                                                          \
            CONV16(RR, 7)                                                                          \
            CONV16(RR, 8)                                                                          \
        }                                                                                          \
        ow += px;                                                                                  \
    }

AVX512 static void conv_rows_16(float *out, size_t ldo, int NR, const float *prow, size_t ldp,
                                int OW, int SWC, int KH, int WpC, int seg, const float *W, int K,
                                const float *bias, bool relu, bool acc)
{
    const __mmask16 km = (__mmask16)((1u << K) - 1);
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(km, bias) : _mm512_setzero_ps();
    /* blocks of equal size (10 = 5 + 5, not 8 + 2: a short block is bound
     * by the FMA latency), two rows at a time */
    const int nblocks = (OW + 7) / 8;
    int r = 0;
    for (; r + 2 <= NR; r += 2, out += 2 * ldo, prow += 2 * ldp) CONV16_ROWS(2)
    if (r < NR) CONV16_ROWS(1)
}

/* The same for 16 < K <= 32: two registers per output pixel (channels
 * [0, 16) and [16, K)), RR rows x PX columns: 2*RR*PX independent sums (up
 * to 24), each pair of weight vectors serving RR*PX pixels. Inlined with
 * constant RR and PX. */
__attribute__((always_inline)) AVX512 static inline void
conv32_block(int RR, int PX, float *out, size_t ldo, const float *prow, size_t ldp, int ow, int SWC,
             int KH, int WpC, int seg, const float *W, int K, __m512 blo, __m512 bhi, __mmask16 km,
             bool relu, bool acc)
{
    __m512 l[2][6], h[2][6];
#pragma GCC unroll 2
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 6
        for (int i = 0; i < PX; i++) l[r][i] = blo, h[r][i] = bhi;
    for (int kh = 0; kh < KH; kh++) {
        const float *a = prow + (size_t)kh * WpC + (size_t)ow * SWC;
        const float *b = W + (size_t)kh * seg * K;
        for (int j = 0; j < seg; j++) {
            const __m512 wl = _mm512_loadu_ps(b + (size_t)j * K);
            const __m512 wh = _mm512_maskz_loadu_ps(km, b + (size_t)j * K + 16);
#pragma GCC unroll 2
            for (int r = 0; r < RR; r++)
#pragma GCC unroll 6
                for (int i = 0; i < PX; i++) {
                    const __m512 x = _mm512_set1_ps(a[r * ldp + (size_t)i * SWC + j]);
                    l[r][i] = _mm512_fmadd_ps(x, wl, l[r][i]);
                    h[r][i] = _mm512_fmadd_ps(x, wh, h[r][i]);
                }
        }
    }
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int r = 0; r < RR; r++)
#pragma GCC unroll 6
        for (int i = 0; i < PX; i++) {
            float *o = out + r * ldo + (size_t)(ow + i) * K;
            __m512 vl = l[r][i], vh = h[r][i];
            if (acc) {
                vl = _mm512_add_ps(vl, _mm512_loadu_ps(o));
                vh = _mm512_add_ps(vh, _mm512_maskz_loadu_ps(km, o + 16));
            }
            if (relu) vl = _mm512_max_ps(vl, zero), vh = _mm512_max_ps(vh, zero);
            _mm512_storeu_ps(o, vl);
            _mm512_mask_storeu_ps(o + 16, km, vh);
        }
}

#define CONV32(RR, PX)                                                                             \
    case PX:                                                                                       \
        conv32_block(RR, PX, out, ldo, prow, ldp, ow, SWC, KH, WpC, seg, W, K, blo, bhi, km, relu, \
                     acc);                                                                         \
        break;
#define CONV32_ROWS(RR)                                                                            \
    for (int ow = 0, bi = 0; bi < nblocks; bi++) {                                                 \
        int px = (OW - ow) / (nblocks - bi);                                                       \
        switch (px) {                                                                              \
            CONV32(RR, 1)                                                                          \
            CONV32(RR, 2)                                                                          \
            CONV32(RR, 3)                                                                          \
            CONV32(RR, 4)                                                                          \
            CONV32(RR, 5)                                                                          \
            CONV32(RR, 6)                                                                          \
        }                                                                                          \
        ow += px;                                                                                  \
    }

/* Every output pixel's sums in the same order as conv16_block's (bias,
 * then the window in order); windows are read exactly (no column past OW). */
AVX512 static void conv_rows_32(float *out, size_t ldo, int NR, const float *prow, size_t ldp,
                                int OW, int SWC, int KH, int WpC, int seg, const float *W, int K,
                                const float *bias, bool relu, bool acc)
{
    const __mmask16 km = (__mmask16)((1u << (K - 16)) - 1);
    const __m512 zero = _mm512_setzero_ps();
    const __m512 blo = bias ? _mm512_loadu_ps(bias) : zero;
    const __m512 bhi = bias ? _mm512_maskz_loadu_ps(km, bias + 16) : zero;
    /* blocks of equal size (14 = 4 + 5 + 5), two rows at a time */
    const int nblocks = (OW + 5) / 6;
    int r = 0;
    for (; r + 2 <= NR; r += 2, out += 2 * ldo, prow += 2 * ldp) CONV32_ROWS(2)
    if (r < NR) CONV32_ROWS(1)
}

/* ROWS output columns rows[0..ROWS) of one output row: their dcol segments
 * for window row kh, columns [j0, j0 + 16*NV) of the segment, in
 * registers, then added into the padded gradient. The columns of a block
 * are chosen so that their windows do not overlap: a load that overlaps a
 * store just issued cannot take its data from the store buffer and waits
 * for it to retire. */
__attribute__((always_inline)) AVX512 static inline void
dcol_block(int ROWS, int NV, int KHB, float *dprow, const float *dy, const int *rows, int SWC,
           int kh, int WpC, int seg, int j0, const float *WT, int R, int K)
{
    /* KHB window rows at once (disjoint too): more independent sums */
    __mmask16 mk[4];
    for (int v = 0; v < NV; v++) {
        int left = seg - j0 - 16 * v;
        mk[v] = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
    }
    __m512 c[2][4][4];
#pragma GCC unroll 2
    for (int h = 0; h < KHB; h++)
#pragma GCC unroll 4
        for (int i = 0; i < ROWS; i++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) c[h][i][v] = _mm512_setzero_ps();
    const float *wt0 = WT + (size_t)kh * seg + j0;
    for (int k = 0; k < K; k++) {
        __m512 w[2][4];
#pragma GCC unroll 2
        for (int h = 0; h < KHB; h++)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                w[h][v] =
                    _mm512_maskz_loadu_ps(mk[v], wt0 + (size_t)k * R + (size_t)h * seg + 16 * v);
#pragma GCC unroll 4
        for (int i = 0; i < ROWS; i++) {
            __m512 x = _mm512_set1_ps(dy[(size_t)rows[i] * K + k]);
#pragma GCC unroll 2
            for (int h = 0; h < KHB; h++)
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) c[h][i][v] = _mm512_fmadd_ps(x, w[h][v], c[h][i][v]);
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < KHB; h++)
#pragma GCC unroll 4
        for (int i = 0; i < ROWS; i++) {
            float *o = dprow + (size_t)(kh + h) * WpC + (size_t)rows[i] * SWC + j0;
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                _mm512_mask_storeu_ps(
                    o + 16 * v, mk[v],
                    _mm512_add_ps(_mm512_maskz_loadu_ps(mk[v], o + 16 * v), c[h][i][v]));
        }
}

#define DCOL_KH(ROWS, KHB)                                                                         \
    for (int j0 = 0; j0 < seg; j0 += 64) {                                                         \
        int nv = (seg - j0 + 15) / 16;                                                             \
        if (nv >= 4)                                                                               \
            dcol_block(ROWS, 4, KHB, dprow, dy, rows, SWC, kh, WpC, seg, j0, WT, R, K);            \
        else if (nv == 3)                                                                          \
            dcol_block(ROWS, 3, KHB, dprow, dy, rows, SWC, kh, WpC, seg, j0, WT, R, K);            \
        else if (nv == 2)                                                                          \
            dcol_block(ROWS, 2, KHB, dprow, dy, rows, SWC, kh, WpC, seg, j0, WT, R, K);            \
        else                                                                                       \
            dcol_block(ROWS, 1, KHB, dprow, dy, rows, SWC, kh, WpC, seg, j0, WT, R, K);            \
    }

#define DCOL_ROWS(ROWS)                                                                            \
    {                                                                                              \
        int kh = 0;                                                                                \
        for (; kh + 2 <= KH; kh += 2) DCOL_KH(ROWS, 2)                                             \
        for (; kh < KH; kh++) DCOL_KH(ROWS, 1)                                                     \
    }

AVX512 static void dcol_row_simd(float *dprow, const float *dy, int OW, int SWC, int KH, int WpC,
                                 int seg, const float *WT, int K)
{
    const int R = KH * seg;
    /* columns step apart have disjoint windows: blocks o, o+step, ... */
    const int step = (seg + SWC - 1) / SWC;
    for (int o = 0; o < step && o < OW; o++) {
        int rows[4], n = 0;
        for (int ow = o; ow < OW; ow += step) {
            rows[n++] = ow;
            if (n == 4) {
                DCOL_ROWS(4)
                n = 0;
            }
        }
        if (n >= 2) {
            DCOL_ROWS(2)
            rows[0] = rows[2], rows[1] = rows[3], n -= 2;
        }
        if (n == 1) DCOL_ROWS(1)
    }
}

/* dw rows [kh*seg + j0, + NB) (+)= windows^T dy over one padded image
 * (implicit im2col: window (oh, ow) starts at pad + oh*SHWpC + ow*SWC);
 * K <= 16; U accumulators per row over consecutive columns. Inlined with
 * constant NB and U. */
__attribute__((always_inline)) AVX512 static inline void
cdw_block(int NB, int U, float *dw, const float *pad, int OH, int OW, int SHWpC, int SWC, int kh,
          int WpC, int seg, int j0, const float *dy, int K, bool acc)
{
    const __mmask16 km = (__mmask16)((1u << K) - 1);
    __m512 c[4][16];
#pragma GCC unroll 4
    for (int u = 0; u < U; u++)
#pragma GCC unroll 16
        for (int j = 0; j < NB; j++) c[u][j] = _mm512_setzero_ps();
    for (int oh = 0; oh < OH; oh++) {
        const float *arow = pad + (size_t)oh * SHWpC + (size_t)kh * WpC + j0;
        const float *drow = dy + (size_t)oh * OW * K;
        int ow = 0;
        for (; ow + U <= OW; ow += U)
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) {
                __m512 d = _mm512_maskz_loadu_ps(km, drow + (size_t)(ow + u) * K);
                const float *a = arow + (size_t)(ow + u) * SWC;
#pragma GCC unroll 16
                for (int j = 0; j < NB; j++)
                    c[u][j] = _mm512_fmadd_ps(_mm512_set1_ps(a[j]), d, c[u][j]);
            }
        for (; ow < OW; ow++) {
            __m512 d = _mm512_maskz_loadu_ps(km, drow + (size_t)ow * K);
            const float *a = arow + (size_t)ow * SWC;
#pragma GCC unroll 16
            for (int j = 0; j < NB; j++)
                c[0][j] = _mm512_fmadd_ps(_mm512_set1_ps(a[j]), d, c[0][j]);
        }
    }
#pragma GCC unroll 16
    for (int j = 0; j < NB; j++) {
        __m512 v = c[0][j];
#pragma GCC unroll 4
        for (int u = 1; u < U; u++) v = _mm512_add_ps(v, c[u][j]);
        float *o = dw + (size_t)(kh * seg + j0 + j) * K;
        if (acc) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(km, o));
        _mm512_mask_storeu_ps(o, km, v);
    }
}

/* The same product the other way round, for window rows of whole vectors
 * (seg % 16 == 0) and K = 8 or 16: dw^T[k0, k0+8)[j0, j0 + 16*NV) in 8 x NV
 * registers, each pixel's window vectors loaded once and its 8 dy values
 * broadcast: NV + 8 loads per 8*NV multiply-adds, where cdw_block needs
 * NB + 1 per NB (a broadcast per multiply-add: loads bound it). Every dw
 * element still sums its pixels in raster order from zero and is then
 * added to dw: bitwise the same as cdw_block(16, 1). */
__attribute__((always_inline)) AVX512 static inline void
cdwt_block(int NV, float *dw, const float *pad, int OH, int OW, int SHWpC, int SWC, int kh, int WpC,
           int seg, int j0, int k0, const float *dy, int K, bool acc)
{
    __m512 c[8][3];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) c[k][v] = _mm512_setzero_ps();
    for (int oh = 0; oh < OH; oh++) {
        const float *arow = pad + (size_t)oh * SHWpC + (size_t)kh * WpC + j0;
        const float *drow = dy + (size_t)oh * OW * K + k0;
        for (int ow = 0; ow < OW; ow++) {
            const float *a = arow + (size_t)ow * SWC, *g = drow + (size_t)ow * K;
            __m512 x[3];
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++) x[v] = _mm512_loadu_ps(a + 16 * v);
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                __m512 b = _mm512_set1_ps(g[k]);
#pragma GCC unroll 3
                for (int v = 0; v < NV; v++) c[k][v] = _mm512_fmadd_ps(b, x[v], c[k][v]);
            }
        }
    }
    float t[8][48];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(t[k] + 16 * v, c[k][v]);
    for (int j = 0; j < 16 * NV; j++) {
        float *o = dw + (size_t)(kh * seg + j0 + j) * K + k0;
        for (int k = 0; k < 8; k++) o[k] = acc ? t[k][j] + o[k] : t[k][j];
    }
}

AVX512 static void conv_dw_simd(float *dw, const float *pad, int OH, int OW, int SHWpC, int SWC,
                                int KH, int WpC, int seg, const float *dy, int K, bool acc)
{
    if (seg % 16 == 0 && K % 8 == 0) {
        for (int kh = 0; kh < KH; kh++)
            for (int j0 = 0; j0 < seg; j0 += 48)
                for (int k0 = 0; k0 < K; k0 += 8) {
                    int nv = (seg - j0) / 16;
                    if (nv >= 3)
                        cdwt_block(3, dw, pad, OH, OW, SHWpC, SWC, kh, WpC, seg, j0, k0, dy, K,
                                   acc);
                    else if (nv == 2)
                        cdwt_block(2, dw, pad, OH, OW, SHWpC, SWC, kh, WpC, seg, j0, k0, dy, K,
                                   acc);
                    else
                        cdwt_block(1, dw, pad, OH, OW, SHWpC, SWC, kh, WpC, seg, j0, k0, dy, K,
                                   acc);
                }
        return;
    }
    for (int kh = 0; kh < KH; kh++) {
        int j0 = 0;
        for (; j0 + 16 <= seg; j0 += 16)
            cdw_block(16, 1, dw, pad, OH, OW, SHWpC, SWC, kh, WpC, seg, j0, dy, K, acc);
        if (j0 + 8 <= seg)
            cdw_block(8, 2, dw, pad, OH, OW, SHWpC, SWC, kh, WpC, seg, j0, dy, K, acc), j0 += 8;
        if (j0 + 4 <= seg)
            cdw_block(4, 4, dw, pad, OH, OW, SHWpC, SWC, kh, WpC, seg, j0, dy, K, acc), j0 += 4;
        if (j0 + 2 <= seg)
            cdw_block(2, 4, dw, pad, OH, OW, SHWpC, SWC, kh, WpC, seg, j0, dy, K, acc), j0 += 2;
        if (j0 < seg) cdw_block(1, 4, dw, pad, OH, OW, SHWpC, SWC, kh, WpC, seg, j0, dy, K, acc);
    }
}
#endif

/* ---- entry points ------------------------------------------------------------------- */

void nn_narrow_nn(int M, int K, int R, const float *A, int lda, const float *B, int ldb,
                  const float *bias, bool relu, float *C, int ldc, bool acc)
{
    assert(K >= 1 && K <= NN_NARROW_MAX);
#if NARROW_X86
    if (nn_narrow_use_simd(-1)) {
        if (K <= 16)
            nn_16(M, K, R, A, lda, B, ldb, bias, relu, C, ldc, acc);
        else
            nn_32(M, K, R, A, lda, B, ldb, bias, relu, C, ldc, acc);
        return;
    }
#endif
    nn_port(M, K, R, A, lda, B, ldb, bias, relu, C, ldc, acc);
}

void nn_narrow_tn(int R, int K, int M, const float *A, int lda, const float *D, int ldd, float *C,
                  int ldc, bool acc)
{
    assert(K >= 1 && K <= NN_NARROW_MAX);
#if NARROW_X86
    if (nn_narrow_use_simd(-1)) {
        if (K <= 16)
            tn_16(R, K, M, A, lda, D, ldd, C, ldc, acc);
        else
            tn_32(R, K, M, A, lda, D, ldd, C, ldc, acc);
        return;
    }
#endif
    tn_port(R, K, M, A, lda, D, ldd, C, ldc, acc);
}

void nn_narrow_nt(int M, int R, int K, const float *D, const float *BT, float *C, int ldc, bool acc)
{
    assert(K >= 1 && K <= NN_NARROW_MAX);
#if NARROW_X86
    if (nn_narrow_use_simd(-1)) {
        nt_simd(M, R, K, D, BT, C, ldc, acc);
        return;
    }
#endif
    nt_port(M, R, K, D, BT, C, ldc, acc);
}

void nn_narrow_conv_rows(float *out, size_t ldo, int NR, const float *prow, size_t ldp, int OW,
                         int SWC, int KH, int WpC, int seg, const float *W, int K,
                         const float *bias, bool relu, bool acc)
{
    assert(K >= 1 && K <= NN_NARROW_MAX);
#if NARROW_X86
    if (nn_narrow_use_simd(-1)) {
        if (K <= 16)
            conv_rows_16(out, ldo, NR, prow, ldp, OW, SWC, KH, WpC, seg, W, K, bias, relu, acc);
        else
            conv_rows_32(out, ldo, NR, prow, ldp, OW, SWC, KH, WpC, seg, W, K, bias, relu, acc);
        return;
    }
#endif
    for (int r = 0; r < NR; r++)
        conv_row_port(out + r * ldo, prow + r * ldp, OW, SWC, KH, WpC, seg, W, K, bias, relu, acc);
}

void nn_narrow_dcol_row(float *dprow, const float *dy, int OW, int SWC, int KH, int WpC, int seg,
                        const float *WT, int K)
{
#if NARROW_X86
    if (nn_narrow_use_simd(-1)) {
        dcol_row_simd(dprow, dy, OW, SWC, KH, WpC, seg, WT, K);
        return;
    }
#endif
    dcol_row_port(dprow, dy, OW, SWC, KH, WpC, seg, WT, K);
}

bool nn_narrow_conv_dw_ok(int seg, int K)
{
    return NARROW_X86 && nn_narrow_use_simd(-1) &&
           (K <= 16 || (K <= NN_NARROW_MAX && K % 8 == 0 && seg % 16 == 0));
}

bool nn_narrow_conv_dw(float *dw, const float *pad, int OH, int OW, int SHWpC, int SWC, int KH,
                       int WpC, int seg, const float *dy, int K, bool acc)
{
#if NARROW_X86
    if (nn_narrow_conv_dw_ok(seg, K)) {
        conv_dw_simd(dw, pad, OH, OW, SHWpC, SWC, KH, WpC, seg, dy, K, acc);
        return true;
    }
#endif
    (void)dw, (void)pad, (void)OH, (void)OW, (void)SHWpC, (void)SWC, (void)KH, (void)WpC;
    (void)seg, (void)dy, (void)K, (void)acc;
    return false;
}
