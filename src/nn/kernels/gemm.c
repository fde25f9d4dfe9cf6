/* gemm.c - row-major float GEMM over BLIS, and the naive reference. */
#include <blis.h>

#include "pstrain/blas.h"

void nn_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0) return;
    /* BLIS takes general strides: row-major is row stride ld, column stride 1,
     * and a transpose is just swapped strides - no copies. */
    bli_sgemm(trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE,
              trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, M, N, K, &alpha, (float *)A, lda, 1,
              (float *)B, ldb, 1, &beta, C, ldc, 1);
}

void nn_gemm_ref(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) {
                float a = trans_a ? A[(long)k * lda + i] : A[(long)i * lda + k];
                float b = trans_b ? B[(long)j * ldb + k] : B[(long)k * ldb + j];
                acc += (double)a * b;
            }
            float *c = &C[(long)i * ldc + j];
            *c = (float)(alpha * acc + (beta == 0.0f ? 0.0 : (double)beta * *c));
        }
    }
}
