/*
 * pstrain/blas.h - the one matrix-product entry point, and the BLIS kernel set.
 *
 * All matrix products in pstrain go through nn_gemm (row-major, float32),
 * which calls BLIS. nn_gemm_ref is the naive triple loop the tests compare
 * it with.
 *
 * Kernel set: Debian's BLIS 0.9.0 does not recognise recent CPUs and falls
 * back to its reference kernels (5x slower). Unless built with
 * -Dblis_arch=library, pstrain links BLIS statically and chooses the kernel
 * set itself from cpuid (AVX-512 -> skx, AVX2+FMA -> haswell/zen3); the
 * environment variable PSTRAIN_BLIS_ARCH=skx|zen3|zen2|zen|haswell|
 * sandybridge|generic overrides it at run time.
 */
#ifndef PSTRAIN_BLAS_H
#define PSTRAIN_BLAS_H

#include <stdbool.h>
#include <stdio.h>

/* C[M][N] = alpha * op(A) * op(B) + beta * C, all row-major.
 * op(A) is M x K: A is M x K (lda >= K) or, transposed, K x M (lda >= M).
 * op(B) is K x N: B is K x N (ldb >= N) or, transposed, N x K (ldb >= K). */
void nn_gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc);
/* Same contract, plain loops, for tests. */
void nn_gemm_ref(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Name of the active BLIS kernel set ("skx", "haswell", "generic", ...). */
const char *nn_blis_arch(void);
/* BLIS version string. */
const char *nn_blis_version(void);
/* The "BLIS     version, kernels: K (chosen by ...)" line of --version, and a
 * warning line when K is the slow generic set. */
void nn_blis_version_print(FILE *out);
/* Makes BLIS single-threaded (pstrain runs one rank per core). Idempotent. */
void nn_blis_init(void);

#endif
