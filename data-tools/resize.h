/*
 * resize.h - resizing uint8 images (H x W x C, row-major) for pstrain-prep.
 *
 * Separable, one axis at a time (horizontally, then vertically), each axis
 * by its own scale:
 *  - shrinking or same size (dst <= src): exact area averaging (box filter).
 *    Output pixel i covers the source interval [i*src/dst, (i+1)*src/dst);
 *    each source pixel contributes its covered fraction, so partially
 *    covered pixels count fractionally and a same-size axis is the
 *    identity. A 2x shrink is the mean of each 2x2 block.
 *  - growing (dst > src): bilinear interpolation with pixel centres
 *    aligned (x_src = (i + 0.5) * src/dst - 0.5, clamped to [0, src-1], so
 *    the borders replicate the edge pixels).
 * Intermediate values are kept in double; the result is rounded half up,
 * floor(v + 0.5), and clamped to [0, 255]. A constant image stays exactly
 * constant.
 */
#ifndef PSTRAIN_RESIZE_H
#define PSTRAIN_RESIZE_H

#include <stdint.h>

/* Resizes src (sh x sw x c) into dst (dh x dw x c). All sizes >= 1; src and
 * dst must not overlap. Allocates scratch memory (fatal on out-of-memory). */
void resize_u8(const uint8_t *src, int sh, int sw, int c, uint8_t *dst, int dh, int dw);

#endif
