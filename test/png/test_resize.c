/* test_resize.c - area averaging and bilinear growing on known patterns. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "data-tools/resize.h"
#include "pstrain/common.h"

static uint32_t rng_state = 99;
static uint8_t rnd8(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (uint8_t)(rng_state >> 24);
}

/* A constant image stays exactly constant, whatever the scales. */
static void test_constant(void)
{
    static const int sizes[][4] = {{37, 23, 5, 9},  {5, 3, 17, 11}, {28, 28, 24, 24},
                                   {7, 40, 21, 13}, {1, 1, 9, 4},   {13, 13, 13, 13},
                                   {30, 20, 7, 20}, {3, 99, 2, 1}};
    for (size_t s = 0; s < PST_ARRAY_LEN(sizes); s++) {
        int sh = sizes[s][0], sw = sizes[s][1], dh = sizes[s][2], dw = sizes[s][3];
        uint8_t *src = malloc((size_t)sh * sw * 3), *dst = malloc((size_t)dh * dw * 3);
        const uint8_t val[3] = {0, 201, 255};
        for (int i = 0; i < sh * sw; i++) memcpy(src + 3 * i, val, 3);
        resize_u8(src, sh, sw, 3, dst, dh, dw);
        int bad = 0;
        for (int i = 0; i < dh * dw; i++) bad += memcmp(dst + 3 * i, val, 3) != 0;
        CHECK(bad == 0, "constant %dx%d -> %dx%d: %d pixels changed", sh, sw, dh, dw, bad);
        free(src);
        free(dst);
    }
}

/* A 2x shrink is the mean of each 2x2 block, rounded half up. */
static void test_shrink2(void)
{
    int h = 16, w = 12;
    uint8_t src[16 * 12], dst[8 * 6];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) src[y * w + x] = (x + y) % 2 ? 255 : 0;
    resize_u8(src, h, w, 1, dst, h / 2, w / 2);
    int bad = 0;
    for (int i = 0; i < 48; i++) bad += dst[i] != 128; /* 127.5 rounds up */
    CHECK(bad == 0, "checkerboard 0/255 2x shrink: %d pixels not 128", bad);

    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) src[y * w + x] = (x / 2 + y / 2) % 2 ? 200 : 40;
    resize_u8(src, h, w, 1, dst, h / 2, w / 2);
    bad = 0;
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 6; x++) bad += dst[y * 6 + x] != ((x + y) % 2 ? 200 : 40);
    CHECK(bad == 0, "2x2-block checkerboard 2x shrink: %d wrong", bad);

    for (int i = 0; i < h * w; i++) src[i] = rnd8();
    resize_u8(src, h, w, 1, dst, h / 2, w / 2);
    bad = 0;
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 6; x++) {
            int s = src[2 * y * w + 2 * x] + src[2 * y * w + 2 * x + 1] +
                    src[(2 * y + 1) * w + 2 * x] + src[(2 * y + 1) * w + 2 * x + 1];
            bad += dst[y * 6 + x] != (s + 2) / 4;
        }
    CHECK(bad == 0, "random 2x shrink vs block means: %d wrong", bad);
}

/* 3 -> 2 shrink: the middle pixel is shared half and half. */
static void test_fractional(void)
{
    uint8_t src[3] = {30, 90, 210}, dst[2];
    resize_u8(src, 1, 3, 1, dst, 1, 2);
    int want0 = (int)floor((30 + 0.5 * 90) / 1.5 + 0.5),
        want1 = (int)floor((0.5 * 90 + 210) / 1.5 + 0.5);
    CHECK(dst[0] == want0 && dst[1] == want1, "3->2: %d %d, want %d %d", dst[0], dst[1], want0,
          want1);
    /* 28 -> 24 (the benchmark's shrink): every output is a convex mix */
    uint8_t r[28], o[24];
    for (int i = 0; i < 28; i++) r[i] = (uint8_t)(9 * i);
    resize_u8(r, 1, 28, 1, o, 1, 24);
    int bad = 0;
    for (int i = 0; i < 24; i++) {
        double lo = i * 28.0 / 24, hi = (i + 1) * 28.0 / 24, acc = 0;
        for (int j = 0; j < 28; j++) {
            double ov = fmin(hi, j + 1) - fmax(lo, j);
            if (ov > 0) acc += ov * r[j];
        }
        double want = acc / (hi - lo);
        bad += fabs(o[i] - want) > 0.5 + 1e-9;
    }
    CHECK(bad == 0, "28->24 ramp: %d outputs off the exact box average", bad);
}

/* Bilinear growth of a ramp stays a ramp (inside the edge-clamped border). */
static void test_grow_ramp(void)
{
    int sw = 10, dw = 25;
    uint8_t src[3 * 10], dst[3 * 25];
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < sw; x++) src[y * sw + x] = (uint8_t)(20 + 20 * x);
    resize_u8(src, 3, sw, 1, dst, 3, dw);
    int bad = 0, nonmono = 0;
    for (int y = 0; y < 3; y++)
        for (int i = 0; i < dw; i++) {
            double x = (i + 0.5) * sw / dw - 0.5;
            x = x < 0 ? 0 : x > sw - 1 ? sw - 1 : x;
            int want = (int)floor(20 + 20 * x + 0.5);
            bad += dst[y * dw + i] != want;
            if (i) nonmono += dst[y * dw + i] < dst[y * dw + i - 1];
        }
    CHECK(bad == 0, "ramp grown 10->25: %d outputs off the line", bad);
    CHECK(nonmono == 0, "ramp grown: not monotonic");
    /* the same ramp along y, grown 2x: steps of 10 in the interior */
    uint8_t col[10], out[20];
    for (int i = 0; i < 10; i++) col[i] = (uint8_t)(20 * i);
    resize_u8(col, 10, 1, 1, out, 20, 1);
    bad = 0;
    for (int i = 1; i < 19; i++) bad += out[i] != (uint8_t)(20 * ((i + 0.5) / 2 - 0.5) + 0.5);
    CHECK(bad == 0 && out[0] == 0 && out[19] == 180, "vertical 2x ramp: %d off, ends %d %d", bad,
          out[0], out[19]);
    /* identity */
    uint8_t a[5 * 7 * 3], b[5 * 7 * 3];
    for (size_t i = 0; i < sizeof a; i++) a[i] = rnd8();
    resize_u8(a, 5, 7, 3, b, 5, 7);
    CHECK(!memcmp(a, b, sizeof a), "same size is the identity");
}

int main(void)
{
    test_constant();
    test_shrink2();
    test_fractional();
    test_grow_ramp();
    return check_exit();
}
