/* test_bf16.c - float32 -> bfloat16 rounding (round to nearest, ties to
 * even; NaN kept) against a table worked by hand and against a reference
 * that picks the nearer of the two neighbouring bf16 values in double. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "pstrain/bf16.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The reference: the two bf16 values around f (truncation, and one unit of
 * the last place further from zero), the nearer one in exact double
 * arithmetic, on a tie the one with an even last bit. */
static uint16_t ref_bf16(uint32_t u)
{
    const float f = from_bits(u);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
    const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
    const double dl = fabs((double)f - (double)pst_bf16_to_f32(lo));
    if ((lo & 0x7fff) == 0x7f80) return lo; /* infinity */
    /* hi may be infinity: its distance is that of the next power of two */
    double vh = (hi & 0x7fff) == 0x7f80 ? ldexp(1.0, 128) * (lo & 0x8000 ? -1 : 1)
                                        : (double)pst_bf16_to_f32(hi);
    const double dh = fabs((double)f - vh);
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}

int main(void)
{
    /* hand-computed: bits in, bf16 out */
    static const struct {
        uint32_t in;
        uint16_t out;
    } table[] = {
        {0x3f800000, 0x3f80}, /* 1.0 exact */
        {0x3f808000, 0x3f80}, /* 1 + 2^-8: tie, 0x3f80 even: down */
        {0x3f818000, 0x3f82}, /* tie, 0x3f81 odd: up */
        {0x3f808001, 0x3f81}, /* just above the tie: up */
        {0x3f807fff, 0x3f80}, /* just below: down */
        {0xbf808001, 0xbf81}, /* negative: away from zero as magnitude rounds */
        {0x00000001, 0x0000}, /* smallest subnormal: down to +0 */
        {0x80000000, 0x8000}, /* -0 */
        {0x7f7fffff, 0x7f80}, /* FLT_MAX rounds up to +inf */
        {0x7f7f7fff, 0x7f7f}, /* just below the tie: the largest finite bf16 */
        {0x7f800000, 0x7f80}, /* +inf */
        {0xff800000, 0xff80}, /* -inf */
        {0x7fc00000, 0x7fc0}, /* quiet NaN */
        {0x7f800001, 0x7fc0}, /* signalling NaN, payload below the kept bits: quiet */
        {0x7fffffff, 0x7fff}, /* NaN whose rounding would carry: stays NaN */
        {0xff810000, 0xffc1}, /* negative NaN: sign and payload kept, quiet */
        {0x40490fdb, 0x4049}, /* pi: 0x0fdb < 0x8000, down */
        {0x3dcccccd, 0x3dcd}, /* 0.1: 0xcccd > 0x8000, up */
    };
    for (size_t i = 0; i < sizeof table / sizeof *table; i++) {
        uint16_t got = pst_f32_to_bf16(from_bits(table[i].in));
        CHECK(got == table[i].out, "0x%08x -> 0x%04x, expected 0x%04x", table[i].in, got,
              table[i].out);
    }
    /* every 257th bit pattern, and every pattern near the ties of a few
     * exponents, against the reference */
    int bad = 0;
    for (uint64_t u = 0; u <= 0xffffffffu && bad < 10; u += 257) {
        uint16_t got = pst_f32_to_bf16(from_bits((uint32_t)u)), want = ref_bf16((uint32_t)u);
        if (got != want) {
            bad++;
            CHECK(got == want, "0x%08x -> 0x%04x, reference 0x%04x", (unsigned)u, got, want);
        }
    }
    for (uint32_t e = 0; e < 256; e += 17)
        for (uint32_t m = 0x7ff0; m < 0x8010; m++) {
            uint32_t u = (e << 23) | (0x5a << 16) | m;
            CHECK(pst_f32_to_bf16(from_bits(u)) == ref_bf16(u), "0x%08x", u);
            u |= 0x10000;
            CHECK(pst_f32_to_bf16(from_bits(u)) == ref_bf16(u), "0x%08x", u);
        }
    /* bf16 -> float32 is exact and round-trips */
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = pst_bf16_to_f32((uint16_t)h);
        if (!isnan(f)) CHECK(pst_f32_to_bf16(f) == h, "round trip 0x%04x", h);
    }
    float src[3] = {1.0f, -2.5f, 3.0e38f}, back[3];
    uint16_t mid[3];
    pst_f32_to_bf16_n(mid, src, 3);
    pst_bf16_to_f32_n(back, mid, 3);
    CHECK(back[0] == 1.0f && back[1] == -2.5f && fabsf(back[2] - 3.0e38f) < 1e36f, "arrays");
    return check_exit();
}
