/* test_gemm.c - nn_gemm (BLIS) against the naive reference: every transpose
 * case, odd sizes, leading dimensions larger than the matrix, alpha/beta. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"
#include "pstrain_config.h"

static float frand(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

int main(void)
{
    nn_blis_init();
    const int sizes[][3] = {{1, 1, 1},  {3, 5, 7},   {17, 1, 33},  {1, 64, 9},
                            {64, 10, 128}, {31, 29, 37}, {128, 96, 200}, {7, 300, 5}};
    const float ab[][2] = {{1, 0}, {0.5f, 1}, {-2, 0.25f}};
    unsigned seed = 42;
    for (size_t si = 0; si < PST_ARRAY_LEN(sizes); si++) {
        int M = sizes[si][0], N = sizes[si][1], K = sizes[si][2];
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (size_t k = 0; k < PST_ARRAY_LEN(ab); k++) {
                    int lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
                    int arows = ta ? K : M, brows = tb ? N : K;
                    float *A = malloc(sizeof(float) * arows * lda);
                    float *B = malloc(sizeof(float) * brows * ldb);
                    float *C = malloc(sizeof(float) * M * ldc);
                    float *R = malloc(sizeof(float) * M * ldc);
                    for (int i = 0; i < arows * lda; i++) A[i] = frand(&seed);
                    for (int i = 0; i < brows * ldb; i++) B[i] = frand(&seed);
                    for (int i = 0; i < M * ldc; i++) C[i] = R[i] = frand(&seed);
                    nn_gemm(ta, tb, M, N, K, ab[k][0], A, lda, B, ldb, ab[k][1], C, ldc);
                    nn_gemm_ref(ta, tb, M, N, K, ab[k][0], A, lda, B, ldb, ab[k][1], R, ldc);
                    double maxerr = 0;
                    for (int i = 0; i < M; i++)
                        for (int j = 0; j < ldc; j++) {
                            double d = fabs((double)C[i * ldc + j] - R[i * ldc + j]);
                            if (j >= N) d = C[i * ldc + j] == R[i * ldc + j] ? 0 : 1e9;
                            if (d > maxerr) maxerr = d;
                        }
                    CHECK(maxerr <= 1e-4 * (K + 1), "M=%d N=%d K=%d ta=%d tb=%d alpha=%g: err %g",
                          M, N, K, ta, tb, ab[k][0], maxerr);
                    free(A), free(B), free(C), free(R);
                }
    }
    const char *arch = nn_blis_arch();
    fprintf(stderr, "BLIS %s, kernels %s\n", nn_blis_version(), arch);
    CHECK(arch && *arch, "no kernel name");
#if PSTRAIN_BLIS_OVERRIDE && defined(__x86_64__)
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        !getenv("PSTRAIN_BLIS_ARCH"))
        CHECK(strcmp(arch, "generic") != 0, "AVX2+FMA CPU but BLIS runs generic kernels");
#endif
    return check_exit();
}
