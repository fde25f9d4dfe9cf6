/*
 * conv_wino2_impl.h - what Winograd F(2x2, 3x3)'s two files share:
 * conv_wino2.c (U, the forward's and input gradient's kernels, the scratch
 * sizes) and conv_wino2_wgrad.c (the weight gradient).
 */
#ifndef PSTRAIN_NN_CONV_WINO2_IMPL_H
#define PSTRAIN_NN_CONV_WINO2_IMPL_H

#include "conv_wino_impl.h"

#define WI_POS 16 /* positions of a 4x4 transformed tile */

/* Floats of one slice's weight-gradient sums dU ([pos][Cs][Ks], positions
 * back to back), also the room the scratch sizes keep for the forward's U,
 * whose positions are u_ps() apart: the 16 padding floats per position are
 * in nn_wi2_scratch's second term. */
static inline size_t u_floats(int C, int K)
{
    return (size_t)WI_POS * wi_r16(C) * wi_r16(K);
}

/* Tiles per block of the weight gradient, at most (blocks of a slice are
 * near-equal): every block reads and writes the whole of its dU (16 Cs Ks
 * floats, 4 MB at 256 x 256), so blocks of the forward's 24 tiles streamed
 * res4's dU 17 times per call; at 96 a position's V and Z rows (96 (Cs +
 * Ks) floats) still stay in L2. The sums over a slice's tiles are in tile
 * order whatever the blocks (dU is stored as floats between them), so the
 * blocks do not change the bits. */
#define WI_WG_TB 96

/* The weight gradient's slices of the tiles (conv_wino2_wgrad.c), which
 * nn_wi2_scratch keeps room for. */
int nn_wi2_slices(const nn_conv_dims *d);

/* V[pos][i][c] = B^T d B of tiles t0 + i, i < rows (zero past nt; rows >=
 * nt, at most j->TB: V's rows are j->TB apart), for the channels c in [c0,
 * c1) (the rest of V's rows of j->Cs floats is not written): portable, and
 * AVX-512 (c0, c1 multiples of 16; only where j->simd). */
void nn_wi2_in_port(const wi_job *j, float *V, int t0, int nt, int rows, int c0, int c1);
#if WI_X86
void nn_wi2_in_simd(const wi_job *j, float *V, int t0, int nt, int rows, int c0, int c1);
#endif

#endif
