/* test_narrow.c - the narrow-side products (narrow.c), AVX-512 and portable
 * paths, against nn_gemm_ref: every K up to 32, odd M and R, remainders of
 * the register blocks, lda > R, bias, ReLU and accumulation; rows that
 * do not depend on how a call's rows are split; and the convolution-row
 * kernels against direct loops. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "layers.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"

static nn_rng rng;

static float *rand_vec(size_t n)
{
    float *v = pst_malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = 2.0f * nn_rng_uniform(&rng) - 1.0f;
    return v;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static void check_shape(int M, int K, int R, int pad, bool simd)
{
    /* lda, and the row length of B, C and D (a column block of a wider matrix) */
    int lda = R + pad, ldk = K + 2 * pad;
    float *A = rand_vec((size_t)M * lda), *B = rand_vec((size_t)R * ldk), *bias = rand_vec(K);
    float *C = rand_vec((size_t)M * ldk), *ref = pst_malloc(sizeof(float) * M * ldk);
    float *C0 = pst_malloc(sizeof(float) * M * ldk);
    memcpy(C0, C, sizeof(float) * M * ldk);
    double tol = 1e-5 * (R + M + 4);
    for (int mode = 0; mode < 4; mode++) {
        bool acc = mode & 1, fused = mode & 2;
        memcpy(C, C0, sizeof(float) * M * ldk);
        memcpy(ref, C0, sizeof(float) * M * ldk);
        nn_narrow_nn(M, K, R, A, lda, B, ldk, fused ? bias : NULL, fused, C, ldk, acc);
        nn_gemm_ref(false, false, M, K, R, 1, A, lda, B, ldk, acc ? 1 : 0, ref, ldk);
        if (fused)
            for (int i = 0; i < M; i++)
                for (int k = 0; k < K; k++) {
                    float v = ref[i * ldk + k] + bias[k];
                    ref[i * ldk + k] = v > 0 ? v : 0;
                }
        /* columns past K untouched: compared too */
        CHECK(max_diff(C, ref, (size_t)M * ldk) < tol, "nn simd=%d M%d K%d R%d acc%d fused%d: %g",
              simd, M, K, R, acc, fused, max_diff(C, ref, (size_t)M * ldk));
    }
    /* tn: C[R][K] = A^T D with D = [M][K] */
    float *D = rand_vec((size_t)M * ldk), *T = rand_vec((size_t)R * ldk);
    float *Tref = pst_malloc(sizeof(float) * R * ldk);
    for (int acc = 0; acc < 2; acc++) {
        memcpy(Tref, T, sizeof(float) * R * ldk);
        nn_narrow_tn(R, K, M, A, lda, D, ldk, T, ldk, acc);
        nn_gemm_ref(true, false, R, K, M, 1, A, lda, D, ldk, acc ? 1 : 0, Tref, ldk);
        CHECK(max_diff(T, Tref, (size_t)R * ldk) < tol, "tn simd=%d M%d K%d R%d acc%d: %g", simd, M,
              K, R, acc, max_diff(T, Tref, (size_t)R * ldk));
    }
    /* nt: C[M][R] (ldc) = D[M][K] BT[K][R] */
    int ldc = R + pad;
    for (int i = 0; i < M; i++) memmove(D + (size_t)i * K, D + (size_t)i * ldk, sizeof(float) * K);
    float *BT = rand_vec((size_t)K * R), *E = rand_vec((size_t)M * ldc);
    float *Eref = pst_malloc(sizeof(float) * M * ldc);
    for (int acc = 0; acc < 2; acc++) {
        memcpy(Eref, E, sizeof(float) * M * ldc);
        nn_narrow_nt(M, R, K, D, BT, E, ldc, acc);
        nn_gemm_ref(false, false, M, R, K, 1, D, K, BT, R, acc ? 1 : 0, Eref, ldc);
        CHECK(max_diff(E, Eref, (size_t)M * ldc) < tol, "nt simd=%d M%d K%d R%d acc%d: %g", simd, M,
              K, R, acc, max_diff(E, Eref, (size_t)M * ldc));
    }
    free(A), free(B), free(bias), free(C), free(ref), free(C0), free(D), free(T), free(Tref);
    free(BT), free(E), free(Eref);
}

/* A row of nn_narrow_nn does not depend on which rows share its call:
 * rows [0, M) in one call and in two calls split at every a give the same
 * bits (the convolutions cut a batch's rows into tasks by the shapes, and a
 * different cut must not change a result). */
static void check_row_split(int M, int K, int R, bool simd)
{
    float *A = rand_vec((size_t)M * R), *B = rand_vec((size_t)R * K), *bias = rand_vec(K);
    float *C0 = rand_vec((size_t)M * K), *one = pst_malloc(sizeof(float) * M * K);
    float *two = pst_malloc(sizeof(float) * M * K);
    for (int acc = 0; acc < 2; acc++) {
        memcpy(one, C0, sizeof(float) * M * K);
        nn_narrow_nn(M, K, R, A, R, B, K, bias, true, one, K, acc);
        for (int a = 1; a < M; a++) {
            memcpy(two, C0, sizeof(float) * M * K);
            nn_narrow_nn(a, K, R, A, R, B, K, bias, true, two, K, acc);
            nn_narrow_nn(M - a, K, R, A + (size_t)a * R, R, B, K, bias, true, two + (size_t)a * K,
                         K, acc);
            CHECK(memcmp(one, two, sizeof(float) * M * K) == 0,
                  "nn simd=%d M%d K%d R%d acc%d: rows split at %d differ from one call", simd, M, K,
                  R, acc, a);
        }
    }
    free(A), free(B), free(bias), free(C0), free(one), free(two);
}

/* The convolution-row kernels against direct loops: NR output rows read
 * from a padded image (rows SW*WpC apart, output rows ldo apart), with and
 * without accumulation, and one row's input gradient added into one. */
static void check_conv_rows(int OW, int SW, int C, int KH, int KW, int K, bool simd)
{
    const int NR = 3;
    int seg = KW * C, SWC = SW * C, Wp = (OW - 1) * SW + KW, WpC = Wp * C, R = KH * seg;
    size_t ldp = (size_t)SW * WpC, ldo = (size_t)OW * K + 3;
    size_t npad =
        (NR - 1) * ldp + (size_t)KH * WpC + 8 * SWC + 64; /* the vector kernels' overrun */
    float *pad = rand_vec(npad), *W = rand_vec((size_t)R * K), *bias = rand_vec(K);
    float *out0 = rand_vec(NR * ldo), *out = rand_vec(NR * ldo), *ref = rand_vec(NR * ldo);
    for (int acc = 0; acc < 2; acc++) {
        memcpy(out, out0, sizeof(float) * NR * ldo);
        memcpy(ref, out0, sizeof(float) * NR * ldo);
        for (int r = 0; r < NR; r++)
            for (int ow = 0; ow < OW; ow++)
                for (int k = 0; k < K; k++) {
                    double sum = bias[k] + (acc ? out0[r * ldo + ow * K + k] : 0.0);
                    for (int kh = 0; kh < KH; kh++)
                        for (int j = 0; j < seg; j++)
                            sum += (double)pad[r * ldp + kh * WpC + ow * SWC + j] *
                                   W[(kh * seg + j) * K + k];
                    ref[r * ldo + ow * K + k] = sum > 0 ? (float)sum : 0.0f;
                }
        nn_narrow_conv_rows(out, ldo, NR, pad, ldp, OW, SWC, KH, WpC, seg, W, K, bias, true, acc);
        /* the gaps between output rows untouched: compared too */
        CHECK(max_diff(out, ref, NR * ldo) < 1e-4,
              "conv_rows simd=%d OW%d SW%d C%d %dx%d K%d acc%d: %g", simd, OW, SW, C, KH, KW, K,
              acc, max_diff(out, ref, NR * ldo));
    }
    /* dprow[kh*WpC + ow*SWC + j] += sum_k dy[ow][k] WT[k][kh*seg + j] */
    float *dy = rand_vec((size_t)OW * K), *WT = rand_vec((size_t)K * R);
    float *dp = rand_vec(npad), *dref = pst_malloc(sizeof(float) * npad);
    memcpy(dref, dp, sizeof(float) * npad);
    for (int ow = 0; ow < OW; ow++)
        for (int kh = 0; kh < KH; kh++)
            for (int j = 0; j < seg; j++) {
                double acc = 0;
                for (int k = 0; k < K; k++)
                    acc += (double)dy[ow * K + k] * WT[k * R + kh * seg + j];
                dref[kh * WpC + ow * SWC + j] += (float)acc;
            }
    nn_narrow_dcol_row(dp, dy, OW, SWC, KH, WpC, seg, WT, K);
    CHECK(max_diff(dp, dref, npad) < 1e-4, "dcol_row simd=%d OW%d SW%d C%d %dx%d K%d: %g", simd, OW,
          SW, C, KH, KW, K, max_diff(dp, dref, npad));
    free(pad), free(W), free(bias), free(out0), free(out), free(ref), free(dy), free(WT), free(dp),
        free(dref);
}

int main(void)
{
    nn_blis_init();
    nn_rng_seed(&rng, 7);
    bool have = nn_narrow_use_simd(-1);
    fprintf(stderr, "AVX-512 kernels: %s\n", have ? "yes" : "no (portable only)");
    for (int simd = have ? 1 : 0; simd >= 0; simd--) {
        nn_narrow_use_simd(simd);
        for (int K = 1; K <= NN_NARROW_MAX; K++) check_shape(11, K, 7, 0, simd);
        const int shapes[][3] = {{1, 6, 25},   {17, 16, 150}, {64, 6, 25},  {9, 24, 33},
                                 {33, 32, 97}, {8, 16, 16},   {3, 17, 200}, {100, 5, 1}};
        for (size_t i = 0; i < PST_ARRAY_LEN(shapes); i++)
            check_shape(shapes[i][0], shapes[i][1], shapes[i][2], (int)i % 3, simd);
        for (int K = 4; K <= NN_NARROW_MAX; K += 4) check_row_split(19, K, 37, simd);
        /*                OW SW C KH KW K */
        const int rows[][6] = {{10, 1, 6, 5, 5, 16},  {28, 1, 1, 5, 5, 6},  {7, 2, 3, 3, 3, 24},
                               {13, 1, 16, 3, 3, 32}, {1, 1, 2, 1, 4, 5},   {9, 3, 2, 2, 3, 17},
                               {28, 1, 16, 3, 3, 16}, {14, 2, 16, 3, 3, 8}, {11, 1, 8, 3, 3, 12}};
        for (size_t i = 0; i < PST_ARRAY_LEN(rows); i++)
            check_conv_rows(rows[i][0], rows[i][1], rows[i][2], rows[i][3], rows[i][4], rows[i][5],
                            simd);
    }
    return check_exit();
}
