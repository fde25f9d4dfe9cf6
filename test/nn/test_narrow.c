/* test_narrow.c - the narrow-side products (narrow.c), AVX-512 and portable
 * paths, against nn_gemm_ref: every K up to 32, odd M and R, remainders of
 * the register blocks, lda > R, bias, ReLU and accumulation. */
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
    }
    return check_exit();
}
