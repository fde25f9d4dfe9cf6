/*
 * pstrain/bf16.h - bfloat16 (the upper 16 bits of an IEEE float32) for the
 * parameter servers' transfers (--comm-dtype bf16, docs/design.md §3).
 *
 * float32 -> bf16 rounds to nearest, ties to even, on the 16 dropped bits;
 * overflow rounds to infinity as IEEE rounding does. A NaN stays a NaN (quiet
 * bit set, sign kept): rounding its payload could carry into the exponent
 * and make an infinity. bf16 -> float32 is exact (the low 16 bits zero).
 */
#ifndef PSTRAIN_BF16_H
#define PSTRAIN_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint16_t pst_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float pst_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline void pst_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = pst_f32_to_bf16(src[i]);
}

static inline void pst_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = pst_bf16_to_f32(src[i]);
}

#endif
