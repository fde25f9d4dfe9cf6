/* test_recipes.c - the preprocessing recipes of pstrain/augment.h:
 * Inception's and ResNet's random crops stay within their area and aspect
 * ranges over many draws (and fall back as TF and torchvision do for odd
 * images); the evaluation crops' exact boxes; flips; the colour ops on known
 * pixels against TF's formulas (a double-precision reference of TF's
 * rgb_to_hsv/hsv_to_rgb kernels); the fused colour distortion against the
 * separate ops; brightness clipping and the quantisation rule; PIL's
 * antialiased bilinear against a double reference; determinism per hash;
 * aug_from_jpeg against aug_from_pixels on the whole decoded image: equal
 * bytes when the region is decoded at full scale, close when DCT-scaled. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pstrain/augment.h"
#include "pstrain/jpeg.h"

static uint8_t pix(int y, int x, int c)
{
    return (uint8_t)(x * 7 + y * 13 + c * 50 + (x * y) % 17);
}

static uint8_t *make_image(int H, int W, int C)
{
    uint8_t *px = malloc((size_t)H * W * C);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < C; c++) px[((size_t)y * W + x) * C + c] = pix(y, x, c);
    return px;
}

static uint64_t hash_of(int i)
{
    uint64_t s = 0x1234567ull + (uint64_t)i * 0x9E3779B97F4A7C15ull;
    s ^= s >> 31;
    s *= 0xBF58476D1CE4E5B9ull;
    return s ^ (s >> 29);
}

/* ---- crops ---------------------------------------------------------------------- */

static void inception_crops(int W, int H, double max_area, bool expect_fallback_only)
{
    int n_fallback = 0;
    double amin = 2, amax = 0, rmin = 9, rmax = 0;
    for (int i = 0; i < 20000; i++) {
        aug_box b = aug_train_box(AUG_INCEPTION, hash_of(i), W, H);
        CHECK(b.x >= 0 && b.y >= 0 && b.w >= 1 && b.h >= 1 && b.x + b.w <= W && b.y + b.h <= H,
              "%dx%d: box %d,%d %dx%d outside", W, H, b.x, b.y, b.w, b.h);
        if (b.x == 0 && b.y == 0 && b.w == W && b.h == H) {
            n_fallback++;
            continue;
        }
        const double area = (double)b.w * b.h / ((double)W * H);
        /* min_object_covered 0.1 over the whole image binds before area 0.05 */
        CHECK(area >= 0.1 && area <= 1.0, "%dx%d: area fraction %g", W, H, area);
        /* width = round(height * ar), ar in [0.75, 1.33] */
        CHECK(b.w + 0.5 >= 0.75 * b.h && b.w - 0.5 <= 1.33 * b.h, "%dx%d: aspect %d/%d", W, H, b.w,
              b.h);
        /* TF draws offsets with Uniform(H - h): never the last one */
        CHECK(b.h == H || b.y < H - b.h, "%dx%d: y %d for h %d", W, H, b.y, b.h);
        CHECK(b.w == W || b.x < W - b.w, "%dx%d: x %d for w %d", W, H, b.x, b.w);
        amin = fmin(amin, area), amax = fmax(amax, area);
        rmin = fmin(rmin, (double)b.w / b.h), rmax = fmax(rmax, (double)b.w / b.h);
    }
    if (expect_fallback_only) {
        CHECK(n_fallback == 20000, "%dx%d: %d of 20000 fell back", W, H, n_fallback);
        return;
    }
    /* the draws span the ranges (a fixed set of hashes: deterministic) */
    CHECK(amin < 0.12 && amax > max_area - 0.05 && amax <= max_area, "%dx%d: areas %g..%g", W, H,
          amin, amax);
    CHECK(rmin < 0.78 && rmax > 1.3, "%dx%d: aspects %g..%g", W, H, rmin, rmax);
    CHECK(n_fallback < 200, "%dx%d: %d fallbacks", W, H, n_fallback);
}

static void resnet_crops(int W, int H)
{
    double amin = 2, amax = 0;
    bool last_x = false;
    for (int i = 0; i < 20000; i++) {
        aug_box b = aug_train_box(AUG_RESNET, hash_of(i), W, H);
        CHECK(b.x >= 0 && b.y >= 0 && b.w >= 1 && b.h >= 1 && b.x + b.w <= W && b.y + b.h <= H,
              "%dx%d: box %d,%d %dx%d outside", W, H, b.x, b.y, b.w, b.h);
        const double A = (double)W * H;
        /* w = round(sqrt(a r)), h = round(sqrt(a / r)): a and r within
         * half a pixel of each side */
        CHECK((b.w + 0.5) * (b.h + 0.5) >= 0.08 * A && (b.w - 0.5) * (b.h - 0.5) <= A,
              "%dx%d: area %dx%d", W, H, b.w, b.h);
        CHECK((b.w + 0.5) / (b.h - 0.5) >= 0.75 - 1e-9 &&
                  (b.w - 0.5) / (b.h + 0.5) <= 4.0 / 3 + 1e-9,
              "%dx%d: ratio %d/%d", W, H, b.w, b.h);
        amin = fmin(amin, b.w * b.h / A), amax = fmax(amax, b.w * b.h / A);
        /* torch.randint(0, W - w + 1): the last offset is possible */
        if (b.w < W && b.x == W - b.w) last_x = true;
    }
    CHECK(amin < 0.1 && amax > 0.9, "%dx%d: areas %g..%g", W, H, amin, amax);
    CHECK(last_x, "%dx%d: the last x offset never drawn", W, H);
}

static void test_crops(void)
{
    inception_crops(500, 375, 1.0, false);
    inception_crops(375, 500, 1.0, false);
    inception_crops(256, 256, 1.0, false);
    /* 31x17: the aspect range caps the crop at 23x17 (74%) */
    inception_crops(31, 17, 23.0 * 17 / (31 * 17), false);
    /* 1000x50: an aspect in [0.75, 1.33] caps the crop at 66x50 = 6.6% of
     * the image, below min_object_covered 0.1: always the whole image */
    inception_crops(1000, 50, 1.0, true);
    inception_crops(1, 1, 1.0, true);
    resnet_crops(500, 375);
    resnet_crops(375, 500);
    resnet_crops(64, 64);
    /* torchvision's fallback: ratio 20 > 4/3, h = H, w = round(H * 4/3),
     * centred; ratio 1/20: w = W, h = round(W / (3/4)) */
    aug_box b = aug_train_box(AUG_RESNET, hash_of(1), 1000, 50);
    CHECK(b.x == 466 && b.y == 0 && b.w == 67 && b.h == 50, "fallback %d,%d %dx%d", b.x, b.y, b.w,
          b.h);
    b = aug_train_box(AUG_RESNET, hash_of(2), 30, 600);
    CHECK(b.x == 0 && b.y == 280 && b.w == 30 && b.h == 40, "fallback %d,%d %dx%d", b.x, b.y, b.w,
          b.h);
    b = aug_train_box(AUG_RESIZE, hash_of(3), 30, 600);
    CHECK(b.x == 0 && b.y == 0 && b.w == 30 && b.h == 600, "resize box %d,%d %dx%d", b.x, b.y, b.w,
          b.h);
}

/* ---- evaluation crops and flips: exact pixels at scale 1 ------------------------ */

static void test_eval_boxes(aug_scratch *s)
{
    /* tf.image.central_crop(0.875): start int((n - 0.875 n) / 2) */
    aug_box b = aug_central_crop(500, 375);
    CHECK(b.x == 31 && b.w == 438 && b.y == 23 && b.h == 329, "central %d,%d %dx%d", b.x, b.y, b.w,
          b.h);
    /* inception eval with the output the crop's size: the crop itself */
    enum { H = 48, W = 64 };
    uint8_t *px = make_image(H, W, 3);
    b = aug_central_crop(W, H);
    CHECK(b.x == 4 && b.w == 56 && b.y == 3 && b.h == 42, "central %d,%d %dx%d", b.x, b.y, b.w,
          b.h);
    uint8_t *out = malloc((size_t)b.h * b.w * 3);
    aug_from_pixels(AUG_INCEPTION, false, 0, px, H, W, 3, b.h, b.w, out, s);
    int bad = 0;
    for (int y = 0; y < b.h; y++)
        for (int x = 0; x < b.w; x++)
            for (int c = 0; c < 3; c++) bad += out[(y * b.w + x) * 3 + c] != pix(y + 3, x + 4, c);
    CHECK(bad == 0, "inception eval: %d bytes differ from the central crop", bad);
    free(out);
    free(px);

    /* resnet eval, 293x256 to 224x224: S = 256 = the shorter side, no
     * scaling; left = round(34.5) = 34 (Python rounds half to even), top 16 */
    px = make_image(256, 293, 3);
    out = malloc(224 * 224 * 3);
    aug_from_pixels(AUG_RESNET, false, 0, px, 256, 293, 3, 224, 224, out, s);
    bad = 0;
    for (int y = 0; y < 224; y++)
        for (int x = 0; x < 224; x++)
            for (int c = 0; c < 3; c++) bad += out[(y * 224 + x) * 3 + c] != pix(y + 16, x + 34, c);
    CHECK(bad == 0, "resnet eval: %d bytes differ from the centre crop at (34, 16)", bad);
    free(out);
    free(px);
}

/* A training crop resized to its own size is the crop itself, mirrored
 * when the draw says so (resnet: no colour). */
static void test_flip(aug_scratch *s)
{
    enum { H = 40, W = 52 };
    uint8_t *px = make_image(H, W, 3);
    uint8_t *out = malloc(H * W * 3);
    int flips = 0;
    for (int i = 0; i < 40; i++) {
        const uint64_t h = hash_of(100 + i);
        const aug_box b = aug_train_box(AUG_RESNET, h, W, H);
        const aug_color col = aug_train_color(AUG_RESNET, h);
        flips += col.flip;
        aug_from_pixels(AUG_RESNET, true, h, px, H, W, 3, b.h, b.w, out, s);
        int bad = 0;
        for (int y = 0; y < b.h; y++)
            for (int x = 0; x < b.w; x++) {
                const int xs = b.x + (col.flip ? b.w - 1 - x : x);
                for (int c = 0; c < 3; c++)
                    bad += out[(y * b.w + x) * 3 + c] != pix(b.y + y, xs, c);
            }
        CHECK(bad == 0, "hash %d: crop %d,%d %dx%d flip %d: %d bytes differ", i, b.x, b.y, b.w, b.h,
              col.flip, bad);
    }
    CHECK(flips > 5 && flips < 35, "%d flips of 40", flips);
    free(out);
    free(px);
}

/* ---- colour ops against TF's kernels (double reference) ------------------------- */

/* adjust_saturation_op.cc's rgb_to_hsv and hsv_to_rgb, in double. */
static void ref_rgb_to_hsv(const double *p, double *h, double *s, double *v)
{
    const double r = p[0], g = p[1], b = p[2];
    const double vv = fmax(r, fmax(g, b)), range = vv - fmin(r, fmin(g, b));
    *s = vv > 0 ? range / vv : 0;
    double hh;
    if (range <= 0)
        hh = 0;
    else if (r == vv)
        hh = (g - b) / (6 * range);
    else if (g == vv)
        hh = (b - r) / (6 * range) + 2.0 / 6;
    else
        hh = (r - g) / (6 * range) + 4.0 / 6;
    if (hh < 0) hh += 1;
    *h = hh;
    *v = vv;
}

static void ref_hsv_to_rgb(double h, double s, double v, double *p)
{
    const double c = s * v, m = v - c, dh = h * 6;
    const int cat = (int)dh;
    const double x = c * (1 - fabs(fmod(dh, 2) - 1));
    double r = 0, g = 0, b = 0;
    switch (cat) {
    case 0:
        r = c, g = x;
        break;
    case 1:
        r = x, g = c;
        break;
    case 2:
        g = c, b = x;
        break;
    case 3:
        g = x, b = c;
        break;
    case 4:
        r = x, b = c;
        break;
    default:
        r = c, b = x;
        break;
    }
    p[0] = r + m, p[1] = g + m, p[2] = b + m;
}

static void ref_saturation(double *p, double f)
{
    double h, s, v;
    ref_rgb_to_hsv(p, &h, &s, &v);
    s = fmin(1, fmax(0, s * f));
    ref_hsv_to_rgb(h, s, v, p);
}

static void ref_hue(double *p, double d)
{
    double h, s, v;
    ref_rgb_to_hsv(p, &h, &s, &v);
    h = fmod(h + d + 2, 1.0);
    ref_hsv_to_rgb(h, s, v, p);
}

static void test_known_pixels(void)
{
    float p[3] = {1, 0, 0};
    aug_adjust_hue(p, 1, 3, 0.2f); /* 72 degrees: (0.8, 1, 0) */
    CHECK(fabsf(p[0] - 0.8f) < 1e-6 && p[1] == 1 && p[2] == 0, "red + 0.2: %g %g %g", p[0], p[1],
          p[2]);
    float q[3] = {1, 0, 0};
    aug_adjust_hue(q, 1, 3, -0.2f); /* 288 degrees: (0.8, 0, 1) */
    CHECK(fabsf(q[0] - 0.8f) < 1e-6 && q[1] == 0 && q[2] == 1, "red - 0.2: %g %g %g", q[0], q[1],
          q[2]);
    float g[3] = {0.3f, 0.3f, 0.3f};
    aug_adjust_saturation(g, 1, 3, 1.5f);
    aug_adjust_hue(g, 1, 3, 0.17f);
    CHECK(g[0] == 0.3f && g[1] == 0.3f && g[2] == 0.3f, "grey moved: %g %g %g", g[0], g[1], g[2]);
    float t[3] = {0.8f, 0.4f, 0.2f}; /* s 0.75 -> 0.375: (0.8, 0.6, 0.5) */
    aug_adjust_saturation(t, 1, 3, 0.5f);
    CHECK(fabsf(t[0] - 0.8f) < 1e-6 && fabsf(t[1] - 0.6f) < 1e-6 && fabsf(t[2] - 0.5f) < 1e-6,
          "saturation 0.5: %g %g %g", t[0], t[1], t[2]);
    float u[3] = {0.8f, 0.4f, 0.2f}; /* s 1.5 -> 1: min 0, mid 0.8 * 1/3 */
    aug_adjust_saturation(u, 1, 3, 2.0f);
    CHECK(fabsf(u[0] - 0.8f) < 1e-6 && fabsf(u[1] - 0.8f / 3) < 1e-6 && fabsf(u[2]) < 1e-6,
          "saturation 2: %g %g %g", u[0], u[1], u[2]);
    /* contrast about each channel's mean: 0.3, 0.5, 0.5 (values leave [0, 1]) */
    float c[6] = {0.2f, 0.5f, 0.1f, 0.4f, 0.5f, 0.9f};
    aug_adjust_contrast(c, 2, 3, 1.5f);
    const float want[6] = {0.15f, 0.5f, -0.1f, 0.45f, 0.5f, 1.1f};
    for (int i = 0; i < 6; i++) CHECK(fabsf(c[i] - want[i]) < 1e-6, "contrast[%d] %g", i, c[i]);
    float bb[2] = {0.9f, 0.1f};
    aug_adjust_brightness(bb, 2, 1, 0.125f);
    CHECK(fabsf(bb[0] - 1.025f) < 1e-6 && fabsf(bb[1] - 0.225f) < 1e-6, "brightness %g %g", bb[0],
          bb[1]);

    /* random pixels, also out of [0, 1] as after brightness */
    uint64_t st = 99;
    int bad_s = 0, bad_h = 0;
    for (int i = 0; i < 20000; i++) {
        double d[3], e[3];
        float fp[3], fq[3];
        for (int k = 0; k < 3; k++) {
            d[k] = (double)(pst_splitmix64(&st) >> 11) / 9007199254740992.0 * 1.25 - 0.125;
            fp[k] = fq[k] = (float)d[k];
            d[k] = fp[k];
            e[k] = d[k];
        }
        const double f = 0.5 + (double)(pst_splitmix64(&st) >> 40) / 16777216.0;
        const float dh = (float)((double)(pst_splitmix64(&st) >> 40) / 16777216.0 * 0.4 - 0.2);
        ref_saturation(d, (float)f);
        aug_adjust_saturation(fp, 1, 3, (float)f);
        for (int k = 0; k < 3; k++) bad_s += fabs(fp[k] - d[k]) > 1e-5;
        /* hue: TF's hv-range kernel equals the HSV rotation for v >= 0 and
         * s <= 1, i.e. pixels in [0, 1] */
        bool inrange = true;
        for (int k = 0; k < 3; k++) {
            if (e[k] < 0 || e[k] > 1) inrange = false;
        }
        if (!inrange) continue;
        ref_hue(e, dh);
        aug_adjust_hue(fq, 1, 3, dh);
        for (int k = 0; k < 3; k++) bad_h += fabs(fq[k] - e[k]) > 1e-5;
    }
    CHECK(bad_s == 0, "%d saturation channels differ from TF's formula", bad_s);
    CHECK(bad_h == 0, "%d hue channels differ from TF's formula", bad_h);
}

/* The fused distortion equals the separate ops, in both orders, C = 3 and 1. */
static void test_fused(void)
{
    enum { N = 500 };
    float a[N * 3], b[N * 3];
    uint8_t fused[N * 3], sep[N * 3];
    uint64_t st = 7;
    for (int order = 0; order < 2; order++)
        for (int C = 1; C <= 3; C += 2)
            for (int trial = 0; trial < 20; trial++) {
                for (int i = 0; i < N * C; i++)
                    a[i] = b[i] = (float)(pst_splitmix64(&st) >> 40) / 16777216.0f;
                aug_color col = aug_train_color(AUG_INCEPTION, hash_of(trial));
                col.order = order;
                aug_distort_color(a, N, C, &col, fused);
                aug_adjust_brightness(b, N, C, col.brightness);
                if (order == 1) aug_adjust_contrast(b, N, C, col.contrast);
                aug_adjust_saturation(b, N, C, col.saturation);
                aug_adjust_hue(b, N, C, col.hue);
                if (order == 0) aug_adjust_contrast(b, N, C, col.contrast);
                int bad = 0;
                for (int i = 0; i < N * C; i++) {
                    const float v = fminf(fmaxf(b[i], 0), 1) * 255;
                    sep[i] = (uint8_t)(v + 0.5f);
                    /* the same value up to float rounding: a byte apart only
                     * where 255 v sits at a rounding boundary */
                    bad += abs(fused[i] - sep[i]) > 1 ||
                           (fused[i] != sep[i] && fabsf(v - floorf(v) - 0.5f) > 1e-3f);
                }
                CHECK(bad == 0, "order %d C %d trial %d: %d bytes differ", order, C, trial, bad);
            }
}

/* A white image brightened stays white (clipped); darkened it becomes
 * floor(255 (1 + delta) + 0.5); every other op leaves a uniform grey as is. */
static void test_clip_and_quantise(aug_scratch *s)
{
    enum { H = 20, W = 30, OH = 9, OW = 11 };
    uint8_t px[H * W * 3], out[OH * OW * 3];
    memset(px, 255, sizeof px);
    int up = 0, down = 0;
    for (int i = 0; i < 40; i++) {
        const uint64_t h = hash_of(500 + i);
        const aug_color col = aug_train_color(AUG_INCEPTION, h);
        aug_from_pixels(AUG_INCEPTION, true, h, px, H, W, 3, OH, OW, out, s);
        const double want = col.brightness >= 0 ? 255 : floor(255 * (1 + col.brightness) + 0.5);
        int bad = 0;
        for (int k = 0; k < OH * OW * 3; k++) bad += fabs(out[k] - want) > (col.brightness < 0);
        CHECK(bad == 0, "delta %g: %d bytes not %g", col.brightness, bad, want);
        if (col.brightness >= 0)
            up++;
        else
            down++;
        CHECK(fabsf(col.brightness) <= 32.0f / 255 && col.saturation >= 0.5f &&
                  col.saturation < 1.5f && col.contrast >= 0.5f && col.contrast < 1.5f &&
                  fabsf(col.hue) <= 0.2f,
              "colour parameters out of range");
    }
    CHECK(up > 5 && down > 5, "brightness signs %d/%d", up, down);
}

/* ---- resize: PIL's antialiased bilinear against a double reference -------------- */

static double ref_pil_tap(double k, double centre, double fs)
{
    const double t = fabs((k + 0.5 - centre) / fs);
    return t < 1 ? 1 - t : 0;
}

static void test_pil_resize(aug_scratch *s)
{
    const int sizes[][4] = {{375, 500, 224, 224}, {48, 40, 100, 73}, {33, 97, 10, 10}};
    for (size_t t = 0; t < PST_ARRAY_LEN(sizes); t++) {
        const int H = sizes[t][0], W = sizes[t][1], OH = sizes[t][2], OW = sizes[t][3];
        uint8_t *px = make_image(H, W, 3), *out = malloc((size_t)OH * OW * 3);
        aug_from_pixels(AUG_RESIZE, false, 0, px, H, W, 3, OH, OW, out, s);
        const double sx = (double)W / OW, sy = (double)H / OH;
        const double fx = fmax(sx, 1), fy = fmax(sy, 1);
        int bad = 0;
        for (int y = 0; y < OH; y++) {
            const double cy = (y + 0.5) * sy;
            for (int x = 0; x < OW; x++) {
                const double cx = (x + 0.5) * sx;
                for (int c = 0; c < 3; c++) {
                    double acc = 0, wy_sum = 0;
                    for (int yy = 0; yy < H; yy++) {
                        const double wy = ref_pil_tap(yy, cy, fy);
                        if (wy == 0) continue;
                        double row = 0, wx_sum = 0;
                        for (int xx = 0; xx < W; xx++) {
                            const double wx = ref_pil_tap(xx, cx, fx);
                            row += wx * pix(yy, xx, c);
                            wx_sum += wx;
                        }
                        acc += wy * row / wx_sum;
                        wy_sum += wy;
                    }
                    const double v = acc / wy_sum;
                    bad += fabs(out[(y * OW + x) * 3 + c] - v) > 0.5 + 1e-3;
                }
            }
        }
        CHECK(bad == 0, "%dx%d -> %dx%d: %d bytes off the reference", W, H, OW, OH, bad);
        free(out);
        free(px);
    }
}

/* ---- determinism ---------------------------------------------------------------- */

static void test_determinism(void)
{
    enum { H = 75, W = 100, OH = 32, OW = 40, SZ = OH * OW * 3 };
    uint8_t *px = make_image(H, W, 3), *big = make_image(300, 200, 3);
    aug_scratch *s1 = aug_scratch_new(), *s2 = aug_scratch_new();
    uint8_t a[SZ], b[SZ], junk[64 * 64 * 3];
    static uint8_t seen[10][SZ];
    for (int recipe = AUG_INCEPTION; recipe <= AUG_RESNET; recipe++) {
        for (int i = 0; i < 10; i++) {
            const uint64_t h = hash_of(1000 + i);
            aug_from_pixels(recipe, true, h, px, H, W, 3, OH, OW, a, s1);
            /* another scratch, after other images of other sizes */
            aug_from_pixels(AUG_RESNET, true, h + 1, big, 300, 200, 3, 64, 64, junk, s2);
            aug_from_pixels(AUG_INCEPTION, false, 0, big, 300, 200, 1, 17, 5, junk, s2);
            aug_from_pixels(recipe, true, h, px, H, W, 3, OH, OW, b, s2);
            CHECK(memcmp(a, b, SZ) == 0, "recipe %d hash %d: not deterministic", recipe, i);
            memcpy(seen[i], a, SZ);
            for (int j = 0; j < i; j++)
                CHECK(memcmp(seen[i], seen[j], SZ) != 0, "recipe %d: hashes %d and %d agree",
                      recipe, i, j);
        }
    }
    aug_scratch_free(s1);
    aug_scratch_free(s2);
    aug_scratch_free(NULL);
    free(px);
    free(big);
}

/* Gray images: brightness and contrast only, the same crop as RGB. */
static void test_gray(aug_scratch *s)
{
    enum { H = 60, W = 80, OH = 24, OW = 24 };
    uint8_t *rgb = malloc(H * W * 3), *g = malloc(H * W);
    for (int i = 0; i < H * W; i++) {
        g[i] = (uint8_t)(i * 37);
        rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = g[i];
    }
    uint8_t o3[OH * OW * 3], o1[OH * OW];
    int bad = 0;
    for (int i = 0; i < 20; i++) {
        aug_from_pixels(AUG_INCEPTION, true, hash_of(i), rgb, H, W, 3, OH, OW, o3, s);
        aug_from_pixels(AUG_INCEPTION, true, hash_of(i), g, H, W, 1, OH, OW, o1, s);
        for (int k = 0; k < OH * OW; k++)
            for (int c = 0; c < 3; c++) bad += abs(o3[3 * k + c] - o1[k]) > 1;
    }
    CHECK(bad == 0, "gray and grey RGB differ in %d bytes", bad);
    free(rgb);
    free(g);
}

/* A smooth photo-like image (gradients and a soft disc), so that DCT
 * scaling changes it little. */
static uint8_t *smooth_image(int H, int W, int C)
{
    uint8_t *px = malloc((size_t)H * W * C);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const double dx = x - 0.6 * W, dy = y - 0.4 * H;
            const double disc = exp(-(dx * dx + dy * dy) / (0.05 * W * H));
            for (int c = 0; c < C; c++) {
                const double v = 40 + 120.0 * x / W * (c == 0) + 100.0 * y / H * (c != 1) +
                                 90 * disc * (c == 1 || C == 1);
                px[((size_t)y * W + x) * C + c] = (uint8_t)fmin(255, v);
            }
        }
    return px;
}

typedef struct jpeg_case {
    int W, H, C, out_h, out_w;
    bool full_scale; /* every crop decoded at 8/8 (the output is larger) */
} jpeg_case;

static void test_jpeg(aug_scratch *s)
{
    const jpeg_case cases[] = {
        {64, 48, 3, 64, 64, true},
        {45, 61, 3, 70, 50, true},
        {64, 48, 1, 64, 64, true},
        {400, 300, 3, 60, 60, false},
        {300, 400, 1, 48, 40, false},
        /* tiny and odd: a 3x2 image up to 17x13, a 200x20 strip (Inception
         * always falls back to the whole image; every crop at 8/8) */
        {3, 2, 3, 13, 17, true},
        {200, 20, 3, 24, 24, true},
    };
    pst_err e;
    for (size_t t = 0; t < PST_ARRAY_LEN(cases); t++) {
        const jpeg_case *k = &cases[t];
        uint8_t *src = smooth_image(k->H, k->W, k->C), *jpg = NULL, *dec = NULL;
        size_t n = 0;
        if (jpg_encode(src, k->W, k->H, k->C, 90, &jpg, &n, &e) < 0) {
            CHECK(0, "jpg_encode: %s", e.msg);
            free(src);
            continue;
        }
        int dw = 0, dh = 0;
        if (jpg_decode(jpg, n, k->C, 0, &dec, &dw, &dh, &e) < 0) {
            CHECK(0, "jpg_decode: %s", e.msg);
            free(src), free(jpg);
            continue;
        }
        const size_t sz = (size_t)k->out_h * k->out_w * k->C;
        uint8_t *a = malloc(sz), *b = malloc(sz);
        for (int recipe = AUG_RESIZE; recipe <= AUG_RESNET; recipe++)
            for (int i = 0; i < 12; i++) {
                const bool train = i < 10;
                const uint64_t h = hash_of(2000 + i);
                int rc =
                    aug_from_jpeg(recipe, train, h, jpg, n, k->C, k->out_h, k->out_w, a, s, &e);
                CHECK(rc == 0, "aug_from_jpeg: %s", e.msg);
                aug_from_pixels(recipe, train, h, dec, dh, dw, k->C, k->out_h, k->out_w, b, s);
                int maxd = 0;
                double sum = 0;
                for (size_t j = 0; j < sz; j++) {
                    const int d = abs(a[j] - b[j]);
                    maxd = d > maxd ? d : maxd;
                    sum += d;
                }
                if (k->full_scale) /* the same pixels, the same taps, the same float sums */
                    CHECK(maxd == 0, "%dx%dx%d recipe %d %s %d: max diff %d at full scale", k->W,
                          k->H, k->C, recipe, train ? "train" : "eval", i, maxd);
                else /* a DCT-downscaled source: close, not equal */
                    CHECK(sum / sz < 1.0 && maxd < 12, "%dx%dx%d recipe %d %d: mean diff %g max %d",
                          k->W, k->H, k->C, recipe, i, sum / sz, maxd);
            }
        free(a), free(b), free(src), free(jpg), free(dec);
    }
    /* not a JPEG: an error naming the decoder's reason, no crash */
    const uint8_t junk[] = "this is not a JPEG file at all";
    uint8_t o[16 * 16 * 3];
    e.msg[0] = 0;
    CHECK(aug_from_jpeg(AUG_INCEPTION, true, 1, junk, sizeof junk, 3, 16, 16, o, s, &e) < 0 &&
              e.msg[0],
          "junk accepted");
}

int main(void)
{
    aug_scratch *s = aug_scratch_new();
    test_crops();
    test_eval_boxes(s);
    test_flip(s);
    test_known_pixels();
    test_fused();
    test_clip_and_quantise(s);
    test_pil_resize(s);
    test_determinism();
    test_gray(s);
    test_jpeg(s);
    aug_scratch_free(s);
    return check_exit();
}
