/* test_pngio.c - decoding every PNG variant (written here with libpng),
 * the documented conversions, corrupt inputs, the size limit, the encoder. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "data-tools/pngio.h"
#include "pngtest.h"

static uint32_t rng_state = 12345;
static uint8_t rnd8(void)
{
    rng_state = rng_state * 1664525u + 1013904223u;
    return (uint8_t)(rng_state >> 24);
}

static int decode(const pt_buf *b, int channels, pngio_alpha alpha, pngio_image *img, pst_err *e)
{
    pngio_opts o = {.channels = channels, .alpha = alpha};
    return pngio_decode(b->p, b->n, &o, img, e);
}

static unsigned luma(unsigned r, unsigned g, unsigned b)
{
    return (299 * r + 587 * g + 114 * b + 500) / 1000;
}

static unsigned over_black(unsigned c, unsigned a)
{
    return (unsigned)((double)c * a / 255.0 + 0.5); /* round(c*a/255), computed differently */
}

/* 8-bit gray and RGB, plain and interlaced (odd sizes exercise Adam7's
 * partial passes): pixel-exact, and the channel conversions. */
static void test_8bit(void)
{
    for (int inter = 0; inter <= 1; inter++) {
        int w = 13, h = 7;
        uint8_t g[13 * 7], rgb[13 * 7 * 3];
        for (size_t i = 0; i < sizeof g; i++) g[i] = rnd8();
        for (size_t i = 0; i < sizeof rgb; i++) rgb[i] = rnd8();
        pt_buf bg = pt_make(w, h, 8, PNG_COLOR_TYPE_GRAY, inter, g, 13, NULL, 0, NULL, 0, NULL);
        pt_buf bc = pt_make(w, h, 8, PNG_COLOR_TYPE_RGB, inter, rgb, 39, NULL, 0, NULL, 0, NULL);
        pngio_image im;
        pst_err e;
        CHECK(decode(&bg, 0, PNGIO_ALPHA_BLACK, &im, &e) == 0, "gray8 i%d: %s", inter, e.msg);
        CHECK(im.height == h && im.width == w && im.channels == 1, "gray8 shape %dx%dx%d",
              im.height, im.width, im.channels);
        CHECK(im.pixels && !memcmp(im.pixels, g, sizeof g), "gray8 i%d pixels differ", inter);
        pngio_image_free(&im);
        CHECK(decode(&bg, 3, PNGIO_ALPHA_BLACK, &im, &e) == 0, "gray8->3: %s", e.msg);
        int bad = 0;
        for (int i = 0; i < w * h; i++)
            for (int k = 0; k < 3; k++) bad += im.pixels[i * 3 + k] != g[i];
        CHECK(im.channels == 3 && bad == 0, "gray->RGB replicate: %d wrong", bad);
        pngio_image_free(&im);

        CHECK(decode(&bc, 0, PNGIO_ALPHA_BLACK, &im, &e) == 0, "rgb8: %s", e.msg);
        CHECK(im.channels == 3 && !memcmp(im.pixels, rgb, sizeof rgb), "rgb8 i%d differs", inter);
        pngio_image_free(&im);
        CHECK(decode(&bc, 1, PNGIO_ALPHA_BLACK, &im, &e) == 0, "rgb8->1: %s", e.msg);
        bad = 0;
        for (int i = 0; i < w * h; i++)
            bad += im.pixels[i] != luma(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
        CHECK(im.channels == 1 && bad == 0, "RGB->gray BT.601: %d wrong", bad);
        pngio_image_free(&im);
        free(bg.p);
        free(bc.p);
    }
    /* BT.601 on known values */
    uint8_t px[] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255};
    pt_buf b = pt_make8(4, 1, 3, px);
    pngio_image im;
    pst_err e;
    CHECK(decode(&b, 1, PNGIO_ALPHA_BLACK, &im, &e) == 0, "luma: %s", e.msg);
    CHECK(im.pixels[0] == 76 && im.pixels[1] == 150 && im.pixels[2] == 29 && im.pixels[3] == 255,
          "luma of R,G,B,W = %d %d %d %d (want 76 150 29 255)", im.pixels[0], im.pixels[1],
          im.pixels[2], im.pixels[3]);
    pngio_image_free(&im);
    free(b.p);
}

/* Gray 1/2/4-bit: expanded by bit replication, v * 255 / (2^d - 1). */
static void test_low_bit_gray(void)
{
    for (int d = 1; d <= 4; d *= 2) {
        int w = 19, h = 5, maxv = (1 << d) - 1;
        size_t stride = ((size_t)w * (size_t)d + 7) / 8;
        uint8_t packed[5 * 10] = {0}, vals[19 * 5];
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int v = (x + 3 * y) % (maxv + 1);
                vals[y * w + x] = (uint8_t)v;
                int bit = x * d;
                packed[(size_t)y * stride + (size_t)(bit / 8)] |= (uint8_t)(v << (8 - d - bit % 8));
            }
        for (int inter = 0; inter <= 1; inter++) {
            pt_buf b = pt_make(w, h, d, PNG_COLOR_TYPE_GRAY, inter, packed, stride, NULL, 0, NULL,
                               0, NULL);
            pngio_image im;
            pst_err e;
            CHECK(decode(&b, 0, PNGIO_ALPHA_BLACK, &im, &e) == 0, "gray%d: %s", d, e.msg);
            int bad = 0;
            for (int i = 0; i < w * h; i++) bad += im.pixels[i] != vals[i] * 255 / maxv;
            CHECK(im.channels == 1 && bad == 0, "gray%d i%d: %d pixels wrong", d, inter, bad);
            pngio_image_free(&im);
            free(b.p);
        }
    }
}

/* 16-bit gray: all 65536 values; documented out = round(v * 255 / 65535). */
static void test_16bit(void)
{
    int w = 256, h = 256;
    uint8_t *raw = malloc((size_t)w * h * 2);
    for (int i = 0; i < w * h; i++) raw[2 * i] = (uint8_t)(i >> 8), raw[2 * i + 1] = (uint8_t)i;
    pt_buf b =
        pt_make(w, h, 16, PNG_COLOR_TYPE_GRAY, 0, raw, (size_t)w * 2, NULL, 0, NULL, 0, NULL);
    pngio_image im;
    pst_err e;
    CHECK(decode(&b, 0, PNGIO_ALPHA_BLACK, &im, &e) == 0, "gray16: %s", e.msg);
    int bad = 0, first = -1;
    for (int v = 0; v < 65536; v++) {
        unsigned want = (unsigned)(((uint64_t)v * 255 * 2 + 65535) / (2 * 65535));
        if (im.pixels[v] != want) {
            if (first < 0) first = v;
            bad++;
        }
    }
    CHECK(bad == 0, "gray16: %d of 65536 values differ from round(v*255/65535) (first %d)", bad,
          first);
    pngio_image_free(&im);
    free(b.p);
    free(raw);

    /* 16-bit RGB, interlaced, and 16-bit RGBA composited after scaling */
    w = 9, h = 6;
    uint16_t v16[9 * 6 * 4];
    uint8_t be[9 * 6 * 4 * 2];
    for (size_t i = 0; i < PST_ARRAY_LEN(v16); i++) {
        v16[i] = (uint16_t)(rnd8() << 8 | rnd8());
        be[2 * i] = (uint8_t)(v16[i] >> 8), be[2 * i + 1] = (uint8_t)v16[i];
    }
    b = pt_make(w, h, 16, PNG_COLOR_TYPE_RGB, 1, be, (size_t)w * 6, NULL, 0, NULL, 0, NULL);
    CHECK(decode(&b, 0, PNGIO_ALPHA_BLACK, &im, &e) == 0, "rgb16: %s", e.msg);
    bad = 0;
    for (int i = 0; i < w * h * 3; i++) bad += im.pixels[i] != (v16[i] * 255u * 2 + 65535) / 131070;
    CHECK(im.channels == 3 && bad == 0, "rgb16: %d samples off", bad);
    pngio_image_free(&im);
    free(b.p);
    b = pt_make(w, h, 16, PNG_COLOR_TYPE_RGB_ALPHA, 0, be, (size_t)w * 8, NULL, 0, NULL, 0, NULL);
    CHECK(decode(&b, 0, PNGIO_ALPHA_BLACK, &im, &e) == 0, "rgba16: %s", e.msg);
    bad = 0;
    for (int i = 0; i < w * h; i++) {
        unsigned a8 = (v16[4 * i + 3] * 255u * 2 + 65535) / 131070;
        for (int k = 0; k < 3; k++) {
            unsigned c8 = (v16[4 * i + k] * 255u * 2 + 65535) / 131070;
            bad += im.pixels[3 * i + k] != over_black(c8, a8);
        }
    }
    CHECK(im.channels == 3 && bad == 0, "rgba16 on black: %d samples off", bad);
    pngio_image_free(&im);
    free(b.p);
}

/* Gray+alpha and RGBA: on black (default) or alpha dropped. */
static void test_alpha(void)
{
    int w = 16, h = 16;
    uint8_t ga[16 * 16 * 2], rgba[16 * 16 * 4];
    for (int i = 0; i < w * h; i++) {
        ga[2 * i] = rnd8(), ga[2 * i + 1] = (uint8_t)(i % 256); /* every alpha 0..255 */
        for (int k = 0; k < 3; k++) rgba[4 * i + k] = rnd8();
        rgba[4 * i + 3] = (uint8_t)(255 - i % 256);
    }
    pt_buf b = pt_make(w, h, 8, PNG_COLOR_TYPE_GRAY_ALPHA, 0, ga, 32, NULL, 0, NULL, 0, NULL);
    pngio_image im;
    pst_err e;
    CHECK(decode(&b, 0, PNGIO_ALPHA_BLACK, &im, &e) == 0, "ga: %s", e.msg);
    int bad = 0;
    for (int i = 0; i < w * h; i++) bad += im.pixels[i] != over_black(ga[2 * i], ga[2 * i + 1]);
    CHECK(im.channels == 1 && bad == 0, "gray+alpha on black: %d wrong", bad);
    pngio_image_free(&im);
    CHECK(decode(&b, 0, PNGIO_ALPHA_DROP, &im, &e) == 0, "ga drop: %s", e.msg);
    bad = 0;
    for (int i = 0; i < w * h; i++) bad += im.pixels[i] != ga[2 * i];
    CHECK(bad == 0, "gray+alpha dropped: %d wrong", bad);
    pngio_image_free(&im);
    free(b.p);

    b = pt_make(w, h, 8, PNG_COLOR_TYPE_RGB_ALPHA, 1, rgba, 64, NULL, 0, NULL, 0, NULL);
    CHECK(decode(&b, 0, PNGIO_ALPHA_BLACK, &im, &e) == 0, "rgba: %s", e.msg);
    bad = 0;
    for (int i = 0; i < w * h; i++)
        for (int k = 0; k < 3; k++)
            bad += im.pixels[3 * i + k] != over_black(rgba[4 * i + k], rgba[4 * i + 3]);
    CHECK(im.channels == 3 && bad == 0, "RGBA on black: %d wrong", bad);
    pngio_image_free(&im);
    CHECK(decode(&b, 1, PNGIO_ALPHA_DROP, &im, &e) == 0, "rgba drop gray: %s", e.msg);
    bad = 0;
    for (int i = 0; i < w * h; i++)
        bad += im.pixels[i] != luma(rgba[4 * i], rgba[4 * i + 1], rgba[4 * i + 2]);
    CHECK(im.channels == 1 && bad == 0, "RGBA dropped -> gray: %d wrong", bad);
    pngio_image_free(&im);
    free(b.p);

    /* gray colour key (tRNS): the key becomes transparent -> black */
    uint8_t g[8] = {10, 200, 77, 200, 0, 255, 200, 9};
    png_color_16 key = {.gray = 200};
    b = pt_make(8, 1, 8, PNG_COLOR_TYPE_GRAY, 0, g, 8, NULL, 0, NULL, 0, &key);
    CHECK(decode(&b, 0, PNGIO_ALPHA_BLACK, &im, &e) == 0, "gray key: %s", e.msg);
    bad = 0;
    for (int i = 0; i < 8; i++) bad += im.pixels[i] != (g[i] == 200 ? 0 : g[i]);
    CHECK(im.channels == 1 && bad == 0, "gray tRNS key: %d wrong", bad);
    pngio_image_free(&im);
    free(b.p);
}

/* Palettes of 1/2/4/8 bits, with and without tRNS. */
static void test_palette(void)
{
    png_color pal[256];
    uint8_t trans[256];
    for (int i = 0; i < 256; i++) {
        pal[i].red = rnd8(), pal[i].green = rnd8(), pal[i].blue = rnd8();
        trans[i] = rnd8();
    }
    for (int d = 1; d <= 8; d *= 2) {
        int w = 11, h = 4, npal = 1 << d;
        size_t stride = ((size_t)w * (size_t)d + 7) / 8;
        uint8_t packed[4 * 11] = {0}, idx[11 * 4];
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int v = (x * 7 + y * 3) % npal;
                idx[y * w + x] = (uint8_t)v;
                int bit = x * d;
                packed[(size_t)y * stride + (size_t)(bit / 8)] |= (uint8_t)(v << (8 - d - bit % 8));
            }
        for (int with_trns = 0; with_trns <= 1; with_trns++) {
            int ntrans = with_trns ? npal / 2 + 1 : 0; /* shorter tRNS: the rest opaque */
            pt_buf b = pt_make(w, h, d, PNG_COLOR_TYPE_PALETTE, d == 4, packed, stride, pal, npal,
                               with_trns ? trans : NULL, ntrans, NULL);
            pngio_image im;
            pst_err e;
            CHECK(decode(&b, 0, PNGIO_ALPHA_BLACK, &im, &e) == 0, "pal%d: %s", d, e.msg);
            int bad = 0;
            for (int i = 0; i < w * h; i++) {
                int p = idx[i];
                unsigned a = p < ntrans ? trans[p] : 255;
                unsigned want[3] = {pal[p].red, pal[p].green, pal[p].blue};
                for (int k = 0; k < 3; k++) bad += im.pixels[3 * i + k] != over_black(want[k], a);
            }
            CHECK(im.channels == 3 && bad == 0, "palette %d-bit trns=%d: %d wrong", d, with_trns,
                  bad);
            pngio_image_free(&im);
            free(b.p);
        }
    }
}

static void test_corrupt_and_limits(const char *dir)
{
    uint8_t px[32 * 32];
    for (size_t i = 0; i < sizeof px; i++) px[i] = rnd8();
    pt_buf good = pt_make8(32, 32, 1, px);
    pngio_image im;
    pst_err e;
    memset(&im, 0x55, sizeof im);

    CHECK(pngio_decode(good.p, 0, NULL, &im, &e) < 0 && strstr(e.msg, "empty"), "empty: %s", e.msg);
    CHECK(im.pixels == NULL, "failed decode leaves the image empty");
    const char *text = "this is not a png, just text\n";
    CHECK(pngio_decode((const uint8_t *)text, strlen(text), NULL, &im, &e) < 0 &&
              strstr(e.msg, "not a PNG"),
          "text: %s", e.msg);
    for (size_t cut = 8; cut < good.n; cut += (cut < 64 ? 7 : 61)) {
        e.msg[0] = 0;
        int rc = pngio_decode(good.p, cut, NULL, &im, &e);
        CHECK(rc < 0 && e.msg[0], "truncated at %zu of %zu accepted", cut, good.n);
        pngio_image_free(&im);
    }
    CHECK(pngio_decode(good.p, good.n - 6, NULL, &im, &e) < 0 && strstr(e.msg, "end of file"),
          "truncated: '%s'", e.msg);

    pt_buf bad = {malloc(good.n), good.n, good.n};
    memcpy(bad.p, good.p, good.n);
    size_t idat = pt_find_idat(&bad);
    CHECK(idat > 0, "IDAT found");
    uint32_t idat_len = (uint32_t)bad.p[idat - 8] << 24 | (uint32_t)bad.p[idat - 7] << 16 |
                        (uint32_t)bad.p[idat - 6] << 8 | bad.p[idat - 5];
    bad.p[idat + idat_len] ^= 0x40; /* the stored CRC of IDAT */
    CHECK(pngio_decode(bad.p, bad.n, NULL, &im, &e) < 0 && strstr(e.msg, "CRC"),
          "bad IDAT CRC: '%s'", e.msg);
    memcpy(bad.p, good.p, good.n);
    bad.p[idat + idat_len / 2] ^= 0x40; /* payload changed: zlib or the CRC objects */
    e.msg[0] = 0;
    CHECK(pngio_decode(bad.p, bad.n, NULL, &im, &e) < 0 && e.msg[0], "corrupt IDAT accepted");
    memcpy(bad.p, good.p, good.n);
    bad.p[30] ^= 1; /* IHDR CRC byte */
    CHECK(pngio_decode(bad.p, bad.n, NULL, &im, &e) < 0 && strstr(e.msg, "CRC"),
          "bad IHDR CRC: '%s'", e.msg);

    /* declared size: refused before allocating, raisable */
    memcpy(bad.p, good.p, good.n);
    pt_set_dims(&bad, 1000000, 1000000);
    CHECK(pngio_decode(bad.p, bad.n, NULL, &im, &e) < 0 && strstr(e.msg, "exceeds the limit"),
          "huge dims: '%s'", e.msg);
    pngio_opts small = {.max_pixels = 1000};
    CHECK(pngio_decode(good.p, good.n, &small, &im, &e) < 0 && strstr(e.msg, "1024 pixels"),
          "limit 1000 on 32x32: '%s'", e.msg);
    small.max_pixels = 1024;
    CHECK(pngio_decode(good.p, good.n, &small, &im, &e) == 0, "limit 1024 on 32x32: %s", e.msg);
    CHECK(!memcmp(im.pixels, px, sizeof px), "pixels");
    pngio_image_free(&im);
    pngio_image_free(&im); /* idempotent */
    pngio_image_free(NULL);

    /* files: read, header, missing file */
    char path[4096];
    snprintf(path, sizeof path, "%s/huge.png", dir);
    CHECK(pt_save(path, bad.p, bad.n) == 0, "save");
    pngio_header hd;
    CHECK(pngio_read_header(path, NULL, &hd, &e) < 0 && strstr(e.msg, "exceeds"),
          "header limit: %s", e.msg);
    pngio_opts big = {.max_pixels = INT64_C(1) << 40};
    CHECK(pngio_read_header(path, &big, &hd, &e) == 0 && hd.width == 1000000, "raised: %s", e.msg);
    snprintf(path, sizeof path, "%s/good.png", dir);
    CHECK(pt_save(path, good.p, good.n) == 0, "save");
    CHECK(pngio_read_header(path, NULL, &hd, &e) == 0 && hd.width == 32 && hd.height == 32 &&
              hd.channels == 1 && hd.bit_depth == 8 && !hd.interlaced,
          "header: %s", e.msg);
    CHECK(pngio_read(path, NULL, &im, &e) == 0 && !memcmp(im.pixels, px, sizeof px), "read: %s",
          e.msg);
    pngio_image_free(&im);
    snprintf(path, sizeof path, "%s/missing.png", dir);
    CHECK(pngio_read(path, NULL, &im, &e) < 0 && strstr(e.msg, "cannot open"), "missing: %s",
          e.msg);
    free(bad.p);
    free(good.p);
}

static void test_write(const char *dir)
{
    char path[4096];
    for (int c = 1; c <= 3; c += 2) {
        int w = 37, h = 23;
        uint8_t *px = malloc((size_t)w * h * c);
        for (int i = 0; i < w * h * c; i++) px[i] = rnd8();
        snprintf(path, sizeof path, "%s/w%d.png", dir, c);
        pst_err e;
        CHECK(pngio_write(path, px, h, w, c, 6, &e) == 0, "write c%d: %s", c, e.msg);
        pngio_image im;
        pngio_header hd;
        CHECK(pngio_read_header(path, NULL, &hd, &e) == 0 && hd.bit_depth == 8 &&
                  hd.color_type == (c == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB),
              "written header c%d", c);
        CHECK(pngio_read(path, NULL, &im, &e) == 0, "read back: %s", e.msg);
        CHECK(im.height == h && im.width == w && im.channels == c &&
                  !memcmp(im.pixels, px, (size_t)w * h * c),
              "round trip c%d", c);
        pngio_image_free(&im);
        free(px);
    }
    pst_err e;
    uint8_t one = 7;
    CHECK(pngio_write("/nonexistent-dir/x.png", &one, 1, 1, 1, -1, &e) < 0 &&
              strstr(e.msg, "/nonexistent-dir/x.png"),
          "unwritable: %s", e.msg);
}

int main(void)
{
    char dir[] = "/tmp/pstrain-test-pngio-XXXXXX";
    if (!mkdtemp(dir)) CHECK_SKIP("mkdtemp failed");
    test_8bit();
    test_low_bit_gray();
    test_16bit();
    test_alpha();
    test_palette();
    test_corrupt_and_limits(dir);
    test_write(dir);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return check_exit();
}
