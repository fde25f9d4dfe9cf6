/*
 * augment.c - the preprocessing recipes of pstrain/augment.h.
 *
 * One image goes through three stages, each a plain loop over float rows:
 *   plan       the recipe's geometry (crop box, resize, centre crop, flip)
 *              and colour parameters, drawn from the hash h;
 *   resample   a separable resize from the source pixels (the decoded
 *              image, or the DCT-scaled region of a JPEG) to out_h x out_w
 *              floats in [0, 1]: per axis a table of taps (first input
 *              index and ntap weights per output index), built once per
 *              image, then a horizontal pass over the input rows the
 *              vertical taps touch and a vertical pass (axpy over whole
 *              rows);
 *   finish     AUG_INCEPTION's colour distortion (brightness, then
 *              saturation and hue fused into one HSV round trip per pixel,
 *              contrast about the channel means) and the quantisation to
 *              uint8.
 * Coordinates: "edge" coordinates put pixel i at [i, i+1) (centre i + 0.5);
 * TF's legacy resize samples "index" positions (pixel i at i).
 */
#include "pstrain/augment.h"
#include "pstrain/jpeg.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* GCC if-converts (and so vectorises) the select-heavy colour loop only
 * without -ftrapping-math, its default; that flag matters only to code that
 * reads floating-point exception flags, none here. */
#if defined(__GNUC__) && !defined(__clang__)
#define AUG_NO_TRAPS __attribute__((optimize("no-trapping-math", "fp-contract=off")))
#else
#define AUG_NO_TRAPS
#endif
/* ... and compiles them for AVX-512 and AVX2 too, chosen at load time
 * (ifunc), as the build targets baseline x86-64 (SSE2: 4 floats a step).
 * fp-contract=off keeps FMA out of the AVX clones: every clone does the same
 * IEEE operations in the same order (no reductions), so the bytes do not
 * depend on the CPU (checked by building with -DPSTRAIN_AUG_NO_CLONES, the
 * SSE2 code alone: the same bytes for 192 Inception crops). Not under
 * ThreadSanitizer: the dynamic loader calls an ifunc resolver before the TSan
 * runtime is set up, and the instrumented resolver crashes every program that
 * links this file at start-up. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&                             \
    !defined(PSTRAIN_AUG_NO_CLONES) && !defined(__SANITIZE_THREAD__)
#define AUG_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define AUG_CLONES
#endif

enum { STREAM_CROP = 1, STREAM_FLIP = 2, STREAM_COLOR = 3 };
/* resize conventions (header); RS_PIL_EXACT: PIL's own integer arithmetic */
enum { RS_TF = 0, RS_PIL = 1, RS_PIL_EXACT = 2 };

/* ---- random streams ------------------------------------------------------------ */

/* The state of sub-stream `tag` of hash h: well separated from the other
 * tags' states (a splitmix64 step of h mixed with the tag), so no stream is
 * a shifted copy of another. */
static uint64_t stream_state(uint64_t h, uint64_t tag)
{
    uint64_t s = h ^ (tag * 0xD6E8FEB86659FD93ull);
    return pst_splitmix64(&s);
}

/* Uniform float in [0, 1) with 24 random bits (TF's RandFloat has 23). */
static float rnd_float(uint64_t *s)
{
    return (float)(pst_splitmix64(s) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform double in [0, 1) with 53 random bits. */
static double rnd_double(uint64_t *s)
{
    return (double)(pst_splitmix64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n), n >= 1 (multiply-shift: bias below n/2^32). */
static int rnd_below(uint64_t *s, int n)
{
    return (int)(((pst_splitmix64(s) >> 32) * (uint64_t)n) >> 32);
}

/* ---- crop boxes ---------------------------------------------------------------- */

/* TF's GenerateRandomCrop (sample_distorted_bounding_box_op.cc), in the same
 * float arithmetic: a crop of aspect ratio ar whose height is uniform
 * between the heights of the smallest and the largest allowed area. */
static bool tf_generate_crop(int W, int H, float min_rel, float max_rel, float ar, uint64_t *rs,
                             aug_box *b)
{
    const float min_area = min_rel * (float)W * (float)H;
    const float max_area = max_rel * (float)W * (float)H;
    int height = (int)lrintf(sqrtf(min_area / ar));
    int max_height = (int)lrintf(sqrtf(max_area / ar));
    if (lrintf((float)max_height * ar) > W) {
        const float eps = 0.0000001f;
        max_height = (int)(((double)W + 0.5 - (double)eps) / (double)ar);
        if (lrintf((float)max_height * ar) > W) max_height -= 1;
    }
    if (max_height > H) max_height = H;
    if (height >= max_height) height = max_height;
    if (height < max_height) height += rnd_below(rs, max_height - height + 1);
    int width = (int)lrintf((float)height * ar);
    float area = (float)width * (float)height;
    if (area < min_area) {
        height += 1;
        width = (int)lrintf((float)height * ar);
        area = (float)width * (float)height;
    }
    if (area > max_area) {
        height -= 1;
        width = (int)lrintf((float)height * ar);
        area = (float)width * (float)height;
    }
    if (area < min_area || area > max_area || width > W || height > H || width <= 0 || height <= 0)
        return false;
    /* TF draws Uniform(H - height): the last offset is never chosen */
    b->y = height < H ? rnd_below(rs, H - height) : 0;
    b->x = width < W ? rnd_below(rs, W - width) : 0;
    b->w = width;
    b->h = height;
    return true;
}

/* sample_distorted_bounding_box(image, whole image as the box,
 * min_object_covered 0.1, aspect [0.75, 1.33], area [0.05, 1], 100 attempts,
 * fallback: the whole image). */
static aug_box inception_box(uint64_t *rs, int W, int H)
{
    const float min_cover = 0.1f, ar_lo = 0.75f, ar_hi = 1.33f;
    const float image_area = (float)((int64_t)W * H);
    for (int i = 0; i < 100; i++) {
        const float ar = rnd_float(rs) * (ar_hi - ar_lo) + ar_lo;
        aug_box b;
        if (!tf_generate_crop(W, H, 0.05f, 1.0f, ar, rs, &b)) continue;
        /* SatisfiesOverlapConstraints: the crop lies inside the image, so
         * the covered fraction of the whole-image box is its area ratio */
        const float crop_area = (float)b.w * (float)b.h;
        if (crop_area >= 1.0f && crop_area / image_area >= min_cover) return b;
    }
    return (aug_box){0, 0, W, H};
}

/* torchvision 0.14 RandomResizedCrop.get_params(scale (0.08, 1), ratio
 * (3/4, 4/3)); round() is Python's (half to even: nearbyint). */
static aug_box resnet_box(uint64_t *rs, int W, int H)
{
    const double area = (double)H * (double)W;
    const double lr0 = log(3.0 / 4.0), lr1 = log(4.0 / 3.0);
    for (int i = 0; i < 10; i++) {
        const double target = area * (0.08 + rnd_double(rs) * (1.0 - 0.08));
        const double ar = exp(lr0 + rnd_double(rs) * (lr1 - lr0));
        const double wd = nearbyint(sqrt(target * ar)), hd = nearbyint(sqrt(target / ar));
        if (wd > 0 && wd <= W && hd > 0 && hd <= H) {
            const int w = (int)wd, h = (int)hd;
            const int y = rnd_below(rs, H - h + 1);
            const int x = rnd_below(rs, W - w + 1);
            return (aug_box){x, y, w, h};
        }
    }
    const double in_ratio = (double)W / (double)H;
    int w = W, h = H;
    if (in_ratio < 3.0 / 4.0)
        h = (int)nearbyint(w / (3.0 / 4.0));
    else if (in_ratio > 4.0 / 3.0)
        w = (int)nearbyint(h * (4.0 / 3.0));
    return (aug_box){(W - w) / 2, (H - h) / 2, w, h};
}

aug_box aug_train_box(int recipe, uint64_t h, int W, int H)
{
    uint64_t rs = stream_state(h, STREAM_CROP);
    switch (recipe) {
    case AUG_INCEPTION:
        return inception_box(&rs, W, H);
    case AUG_RESNET:
        return resnet_box(&rs, W, H);
    default:
        return (aug_box){0, 0, W, H};
    }
}

/* tf.image.central_crop: start = int((n - n * f) / 2) in double, size = n - 2 start. */
static void central_1d(int n, int *start, int *size)
{
    *start = (int)(((double)n - (double)n * 0.875) / 2.0);
    *size = n - 2 * *start;
}

aug_box aug_central_crop(int W, int H)
{
    aug_box b;
    central_1d(W, &b.x, &b.w);
    central_1d(H, &b.y, &b.h);
    return b;
}

aug_color aug_train_color(int recipe, uint64_t h)
{
    aug_color c = {.flip = false, .order = 0, .saturation = 1, .contrast = 1};
    uint64_t fs = stream_state(h, STREAM_FLIP);
    c.flip = rnd_float(&fs) < 0.5f;
    if (recipe != AUG_INCEPTION) return c;
    uint64_t cs = stream_state(h, STREAM_COLOR);
    c.order = rnd_float(&cs) < 0.5f ? 0 : 1;
    c.brightness = (rnd_float(&cs) * 2.0f - 1.0f) * (32.0f / 255.0f);
    c.saturation = 0.5f + rnd_float(&cs);
    c.hue = (rnd_float(&cs) * 2.0f - 1.0f) * 0.2f;
    c.contrast = 0.5f + rnd_float(&cs);
    return c;
}

/* ---- colour ops (TF semantics) ------------------------------------------------ */

void aug_adjust_brightness(float *px, size_t n, int C, float delta)
{
    const size_t m = n * (size_t)C;
    for (size_t i = 0; i < m; i++) px[i] += delta;
}

/* Per-channel means in double (TF's adjust_contrastv2 takes the mean over
 * height and width). */
static void channel_means(const float *px, size_t n, int C, double *mean)
{
    for (int c = 0; c < C; c++) mean[c] = 0;
    if (C == 3) {
        double s0 = 0, s1 = 0, s2 = 0;
        for (size_t i = 0; i < n; i++) {
            s0 += px[3 * i];
            s1 += px[3 * i + 1];
            s2 += px[3 * i + 2];
        }
        mean[0] = s0, mean[1] = s1, mean[2] = s2;
    } else {
        for (size_t i = 0; i < n; i++) mean[0] += px[i];
    }
    for (int c = 0; c < C; c++) mean[c] /= (double)(n ? n : 1);
}

void aug_adjust_contrast(float *px, size_t n, int C, float factor)
{
    double mean[3];
    channel_means(px, n, C, mean);
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < C; c++) {
            const float m = (float)mean[c];
            px[i * C + c] = (px[i * C + c] - m) * factor + m;
        }
}

/* Saturation as TF's rgb_to_hsv / s' = clip(s * f, 0, 1) / hsv_to_rgb, in
 * closed form: with v = max, range = max - min, every channel x becomes
 * v - (v - x) k where k = s' v / range = min(f, v / range); v <= 0 gives
 * s = 0, a grey pixel of value v. */
static inline void sat_pixel(float *p, float f)
{
    const float v = fmaxf(p[0], fmaxf(p[1], p[2]));
    const float mn = fminf(p[0], fminf(p[1], p[2]));
    const float range = v - mn;
    if (v <= 0) {
        p[0] = p[1] = p[2] = v;
        return;
    }
    if (range <= 0) return;
    const float k = f * range > v ? v / range : f;
    for (int c = 0; c < 3; c++) p[c] = v - (v - p[c]) * k;
}

void aug_adjust_saturation(float *px, size_t n, int C, float factor)
{
    if (C != 3) return;
    for (size_t i = 0; i < n; i++) sat_pixel(px + 3 * i, factor);
}

/* TF's adjust_hue: the pixel as (hue in [0, 6), v_min, v_max), the hue moved
 * by 6 delta and wrapped, back to RGB; min and max are kept, the middle
 * channel is interpolated. Category c: 0 r>=g>=b, 1 g>=r>=b, 2 g>=b>=r,
 * 3 b>=g>=r, 4 b>=r>=g, 5 r>=b>=g (the channel order of max, mid, min). */
static const uint8_t hue_max[6] = {0, 1, 1, 2, 2, 0};
static const uint8_t hue_mid[6] = {1, 0, 2, 1, 0, 2};
static const uint8_t hue_min[6] = {2, 2, 0, 0, 1, 1};

/* The hue of p in [0, 6) as TF's rgb_to_hv_range, and its min and max. */
static inline float hue_of(const float *p, float *vmin, float *vmax)
{
    const float r = p[0], g = p[1], b = p[2];
    int cat;
    float hi, mid, lo;
    if (r < g) {
        if (b < r)
            cat = 1, hi = g, mid = r, lo = b;
        else if (b > g)
            cat = 3, hi = b, mid = g, lo = r;
        else
            cat = 2, hi = g, mid = b, lo = r;
    } else {
        if (b < g)
            cat = 0, hi = r, mid = g, lo = b;
        else if (b > r)
            cat = 4, hi = b, mid = r, lo = g;
        else
            cat = 5, hi = r, mid = b, lo = g;
    }
    *vmin = lo;
    *vmax = hi;
    if (hi == lo) return 0;
    const float ratio = (mid - lo) / (hi - lo);
    return (float)cat + ((cat & 1) == 0 ? ratio : 1 - ratio);
}

/* TF's hv_range_to_rgb. */
static inline void hue_to_rgb(float h, float vmin, float vmax, float *p)
{
    int cat = (int)h;
    if (cat > 5) cat = 5;
    float ratio = h - (float)cat;
    if (cat & 1) ratio = 1 - ratio;
    p[hue_max[cat]] = vmax;
    p[hue_mid[cat]] = vmin + ratio * (vmax - vmin);
    p[hue_min[cat]] = vmin;
}

static inline float hue_wrap(float h)
{
    while (h < 0) h += 6;
    while (h >= 6) h -= 6;
    return h;
}

void aug_adjust_hue(float *px, size_t n, int C, float delta)
{
    if (C != 3) return;
    for (size_t i = 0; i < n; i++) {
        float *p = px + 3 * i, lo, hi;
        const float h = hue_wrap(hue_of(p, &lo, &hi) + delta * 6);
        hue_to_rgb(h, lo, hi, p);
    }
}

/* min and max as selects, which compile to minss/maxss (fminf/fmaxf's NaN
 * rules make them longer sequences without -ffast-math); in a loop GCC
 * if-converts and vectorises them when every comparison is unconditional */
#define MINF(a, b) ((a) < (b) ? (a) : (b))
#define MAXF(a, b) ((a) > (b) ? (a) : (b))

/* Saturation then hue in one round trip (the hot loop of AUG_INCEPTION),
 * on n pixels held as planes r, g, b, written without branches so that the
 * compiler vectorises it: saturation keeps the max and the channel order
 * and moves the min to hi - min(f range, hi) (a grey hi when hi <= 0: TF's
 * s = 0); the hue h in [0, 6) (TF's h_category + ratio) moves by dh6 and the
 * channels are rebuilt by the closed form of hv_range_to_rgb: channel n in
 * {r: 5, g: 3, b: 1} is hi - (hi - lo') clamp(min(k, 4 - k), 0, 1) with
 * k = (n + h) mod 6. Equal to aug_adjust_saturation then aug_adjust_hue up
 * to float rounding. */
__attribute__((noinline)) AUG_NO_TRAPS AUG_CLONES static void
sat_hue_planes(float *restrict R, float *restrict G, float *restrict B, int n, float f, float dh6)
{
    /* every comparison is evaluated unconditionally (one select each), so
     * that GCC if-converts the loop even with -ftrapping-math */
    for (int i = 0; i < n; i++) {
        const float r = R[i], g = G[i], b = B[i];
        const float gb_max = MAXF(g, b), gb_min = MINF(g, b);
        const float hi = MAXF(r, gb_max), lo = MINF(r, gb_min);
        const float range = hi - lo;
        const float safe = range > 0 ? range : 1.0f;
        const float inv = 1.0f / safe;
        const float hr = (g - b) * inv, hg = 2.0f + (b - r) * inv, hb = 4.0f + (r - g) * inv;
        const float hgb = hi == g ? hg : hb;
        float h = hi == r ? hr : hgb;
        h += dh6;
        h += h < 0 ? 6.0f : 0.0f;
        h += h < 0 ? 6.0f : 0.0f;
        h -= h >= 6.0f ? 6.0f : 0.0f;
        const float cut = MINF(f * range, hi);
        const float span = hi > 0 ? cut : 0.0f;
        float k[3] = {5.0f + h, 3.0f + h, 1.0f + h};
        float o[3];
        for (int c = 0; c < 3; c++) {
            const float kc = k[c] - (k[c] >= 6.0f ? 6.0f : 0.0f);
            const float t0 = MINF(kc, 4.0f - kc);
            const float t1 = MAXF(t0, 0.0f);
            const float t2 = MINF(t1, 1.0f);
            o[c] = hi - span * t2;
        }
        R[i] = o[0];
        G[i] = o[1];
        B[i] = o[2];
    }
}

/* ---- scratch ------------------------------------------------------------------- */

typedef struct axis {
    int n, ntap;
    int *lo;          /* [n] first input index of each output's window */
    float *w;         /* [n * ntap] weights of inputs lo .. lo+ntap-1 */
    int in_lo, in_hi; /* inputs any window touches: [in_lo, in_hi) */
    size_t cap_n, cap_w;
} axis;

/* One axis of PIL's resize in its own arithmetic: output j's inputs
 * [lo[j], lo[j] + cnt[j]) with fixed-point weights k[j * ksize ..]. */
typedef struct pil_axis {
    int n, ksize;
    int *lo, *cnt;
    int32_t *k;
    size_t cap_lo, cap_cnt, cap_k;
} pil_axis;

struct aug_scratch {
    axis ax, ay;
    pil_axis px, py; /* RS_PIL_EXACT */
    uint8_t *tmp8;   /* RS_PIL_EXACT's horizontal pass */
    size_t tmp8_cap;
    float *tmp; /* horizontal pass: (ay.in_hi - ay.in_lo) rows of n_x * C */
    size_t tmp_cap;
    float *img; /* out_h x out_w x C in [0, 1] */
    size_t img_cap;
    float *pos; /* per-output tap list while building an axis */
    size_t pos_cap;
    jpg_region reg; /* aug_from_jpeg's decoded region */
};

aug_scratch *aug_scratch_new(void)
{
    return pst_calloc(1, sizeof(aug_scratch));
}

void aug_scratch_free(aug_scratch *s)
{
    if (!s) return;
    free(s->ax.lo), free(s->ax.w), free(s->ay.lo), free(s->ay.w);
    free(s->tmp), free(s->img), free(s->pos);
    free(s->px.lo), free(s->px.cnt), free(s->px.k), free(s->py.lo), free(s->py.cnt), free(s->py.k);
    free(s->tmp8);
    jpg_region_free(&s->reg);
    free(s);
}

static void *grow(void *p, size_t *cap, size_t need)
{
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    *cap = c;
    return pst_realloc(p, c);
}

/* ---- resize plans ---------------------------------------------------------------- */

/* One axis of the geometry, in source pixels: output index j shows pixel
 * (j + off) of the source span [src_lo, src_lo + src_len) resized to virt
 * pixels (virt = n and off = 0 except for resnet's eval centre crop). */
typedef struct axis_geom {
    int src_lo, src_len, virt, off, n;
    bool flip;
} axis_geom;

typedef struct plan {
    int mode; /* RS_TF or RS_PIL */
    axis_geom gx, gy;
    bool color;
    aug_color col;
} plan;

static axis_geom geom(int lo, int len, int n)
{
    return (axis_geom){.src_lo = lo, .src_len = len, .virt = n, .off = 0, .n = n};
}

/* torchvision's Resize(S) + CenterCrop(n) along one axis whose resized
 * length is `rn`. */
static axis_geom geom_center(int len, int rn, int n)
{
    axis_geom g = {.src_lo = 0, .src_len = len, .virt = rn, .n = n};
    g.off = (int)nearbyint((rn - n) / 2.0);
    return g;
}

static plan make_plan(int recipe, bool train, uint64_t h, int W, int H, int out_h, int out_w)
{
    plan p = {.mode = recipe == AUG_INCEPTION ? RS_TF : RS_PIL};
    if (train && recipe != AUG_RESIZE) {
        const aug_box b = aug_train_box(recipe, h, W, H);
        p.gx = geom(b.x, b.w, out_w);
        p.gy = geom(b.y, b.h, out_h);
        p.col = aug_train_color(recipe, h);
        p.gx.flip = p.col.flip;
        p.color = recipe == AUG_INCEPTION;
    } else if (recipe == AUG_INCEPTION) {
        const aug_box b = aug_central_crop(W, H);
        p.gx = geom(b.x, b.w, out_w);
        p.gy = geom(b.y, b.h, out_h);
    } else if (recipe == AUG_RESNET) {
        /* the shorter side to S, the longer to int(S * long / short), in
         * PIL's arithmetic: the evaluation transform is torchvision's to the
         * byte */
        p.mode = RS_PIL_EXACT;
        const int S = (int)nearbyint(256.0 / 224.0 * PST_MAX(out_h, out_w));
        int rw, rh;
        if (W <= H)
            rw = S, rh = (int)((double)S * H / W);
        else
            rh = S, rw = (int)((double)S * W / H);
        p.gx = geom_center(W, rw, out_w);
        p.gy = geom_center(H, rh, out_h);
    } else {
        p.gx = geom(0, W, out_w);
        p.gy = geom(0, H, out_h);
    }
    return p;
}

/* Places output j's taps, inputs [first, first + cnt) with weights w[], into
 * its window of a->ntap inputs that lies inside [0, bufn). */
static void place_taps(axis *a, int j, int first, int cnt, const float *w, int bufn)
{
    int lo = first;
    if (lo + a->ntap > bufn) lo = bufn - a->ntap;
    if (lo < 0) lo = 0;
    float *dst = a->w + (size_t)j * a->ntap;
    for (int k = 0; k < a->ntap; k++) dst[k] = 0;
    for (int k = 0; k < cnt; k++) {
        assert(first + k - lo >= 0 && first + k - lo < a->ntap);
        dst[first + k - lo] += w[k];
    }
    a->lo[j] = lo;
    a->in_lo = PST_MIN(a->in_lo, lo);
    a->in_hi = PST_MAX(a->in_hi, lo + a->ntap);
}

/* The buffer pixels [*k0, *k1) whose centres k + 0.5 lie within fs of
 * `centre` (where PIL's triangle filter is nonzero), clamped to [plo, phi). */
static void pil_span(double centre, double fs, int plo, int phi, int *k0, int *k1)
{
    *k0 = PST_MAX(plo, (int)floor(centre - 0.5 - fs) + 1);
    *k1 = PST_MIN(phi, (int)ceil(centre - 0.5 + fs));
    if (*k1 < *k0) *k1 = *k0;
}

/* Builds the taps of one axis for a buffer of bufn pixels that holds the
 * source scaled by f (= scale_num / 8) from scaled coordinate `shift` on:
 * buffer pixel k is scaled pixel k + shift. `gain` multiplies every weight
 * (1/255 on the vertical axis). */
static void build_axis(aug_scratch *s, axis *a, int mode, const axis_geom *g, double f, int shift,
                       int bufn, float gain)
{
    const int n = g->n;
    /* the crop's pixels in the buffer: [plo, phi) */
    const double b0 = g->src_lo * f - shift, b1 = (g->src_lo + g->src_len) * f - shift;
    const int plo = PST_MAX(0, (int)floor(b0 + 1e-9));
    const int phi = PST_MIN(bufn, PST_MAX(plo + 1, (int)ceil(b1 - 1e-9)));
    const double scale = (b1 - b0) / g->virt; /* buffer pixels per output pixel */
    const double fs = scale > 1 ? scale : 1;  /* PIL's filter scale */
    int ntap = 2;
    if (mode == RS_PIL) { /* the widest window of nonzero taps */
        ntap = 1;
        for (int j = 0; j < n; j++) {
            int k0, k1;
            pil_span(b0 + (j + g->off + 0.5) * scale, fs, plo, phi, &k0, &k1);
            ntap = PST_MAX(ntap, k1 - k0);
        }
    }
    ntap = PST_MIN(ntap, bufn);
    a->n = n;
    a->ntap = ntap;
    a->lo = grow(a->lo, &a->cap_n, (size_t)n * sizeof(int));
    a->w = grow(a->w, &a->cap_w, (size_t)n * ntap * sizeof(float));
    s->pos = grow(s->pos, &s->pos_cap, (size_t)(ntap + 8) * sizeof(float));
    a->in_lo = bufn;
    a->in_hi = 0;
    const float tf_scale = (float)g->src_len / (float)g->virt; /* TF: in / out in float */
    for (int j = 0; j < n; j++) {
        const int jj = (g->flip ? n - 1 - j : j) + g->off;
        float *w = s->pos;
        if (mode == RS_TF) {
            /* legacy resize_bilinear: index position jj * in/out of the
             * crop, 2 taps, clamped to the crop */
            const float in = (float)jj * tf_scale;
            const float in_f = floorf(in);
            int i0;
            float frac;
            if (f == 1.0) {
                i0 = (int)in_f + g->src_lo - shift;
                frac = in - in_f;
            } else {
                const double q = ((double)g->src_lo + in + 0.5) * f - 0.5 - shift;
                i0 = (int)floor(q);
                frac = (float)(q - floor(q));
            }
            if (i0 < plo) i0 = plo, frac = 0;
            if (i0 >= phi - 1) i0 = phi - 1, frac = 0;
            w[0] = 1 - frac;
            w[1] = frac;
            place_taps(a, j, i0, frac > 0 ? 2 : 1, w, bufn);
        } else {
            /* PIL's precompute_coeffs on the cropped image: triangle
             * filter of radius fs around the output's centre */
            const double centre = b0 + (jj + 0.5) * scale;
            int k0, k1;
            pil_span(centre, fs, plo, phi, &k0, &k1);
            double sum = 0;
            int cnt = 0;
            for (int k = k0; k < k1; k++) {
                const double t = fabs((k + 0.5 - centre) / fs);
                const double wt = t < 1 ? 1 - t : 0;
                w[cnt++] = (float)wt;
                sum += wt;
            }
            if (sum <= 0) { /* the centre's own pixel */
                k0 = PST_MIN(PST_MAX((int)floor(centre), plo), phi - 1);
                w[0] = 1, cnt = 1, sum = 1;
            }
            assert(cnt <= ntap);
            for (int k = 0; k < cnt; k++) w[k] = (float)(w[k] / sum);
            place_taps(a, j, k0, cnt, w, bufn);
        }
        float *aw = a->w + (size_t)j * ntap;
        for (int k = 0; k < ntap; k++) aw[k] *= gain;
    }
}

/* Resizes buffer px (bw x bh x C, the source scaled by f from (sx, sy))
 * to s->img (n_y x n_x x C floats in [0, 1]) as plan p says. */
static void resample(aug_scratch *s, const plan *p, const uint8_t *px, int bw, int bh, int C,
                     double f, int sx, int sy)
{
    build_axis(s, &s->ax, p->mode, &p->gx, f, sx, bw, 1.0f);
    build_axis(s, &s->ay, p->mode, &p->gy, f, sy, bh, 1.0f / 255.0f);
    const axis *ax = &s->ax, *ay = &s->ay;
    const int nx = ax->n, ny = ay->n, rows = ay->in_hi - ay->in_lo;
    const size_t orow = (size_t)nx * C;
    s->tmp = grow(s->tmp, &s->tmp_cap, (size_t)rows * orow * sizeof(float));
    s->img = grow(s->img, &s->img_cap, (size_t)ny * orow * sizeof(float));
    /* horizontal: tmp[r][j][c] = sum_k wx[j][k] px[r][lo[j]+k][c] */
    const int tx = ax->ntap;
    for (int r = 0; r < rows; r++) {
        const uint8_t *restrict in = px + (size_t)(ay->in_lo + r) * bw * C;
        float *restrict o = s->tmp + (size_t)r * orow;
        if (C == 3) {
            for (int j = 0; j < nx; j++) {
                const uint8_t *q = in + (size_t)ax->lo[j] * 3;
                const float *w = ax->w + (size_t)j * tx;
                float a0 = 0, a1 = 0, a2 = 0;
                for (int k = 0; k < tx; k++) {
                    a0 += w[k] * q[3 * k];
                    a1 += w[k] * q[3 * k + 1];
                    a2 += w[k] * q[3 * k + 2];
                }
                o[3 * j] = a0, o[3 * j + 1] = a1, o[3 * j + 2] = a2;
            }
        } else {
            for (int j = 0; j < nx; j++) {
                const uint8_t *q = in + ax->lo[j];
                const float *w = ax->w + (size_t)j * tx;
                float a0 = 0;
                for (int k = 0; k < tx; k++) a0 += w[k] * q[k];
                o[j] = a0;
            }
        }
    }
    /* vertical: img[y] = sum_k wy[y][k] tmp[lo[y]+k - in_lo] */
    const int ty = ay->ntap;
    for (int y = 0; y < ny; y++) {
        float *restrict o = s->img + (size_t)y * orow;
        const float *w = ay->w + (size_t)y * ty;
        const float *t0 = s->tmp + (size_t)(ay->lo[y] - ay->in_lo) * orow;
        for (size_t i = 0; i < orow; i++) o[i] = w[0] * t0[i];
        for (int k = 1; k < ty; k++) {
            if (w[k] == 0) continue;
            const float wk = w[k];
            const float *restrict t = t0 + (size_t)k * orow;
            for (size_t i = 0; i < orow; i++) o[i] += wk * t[i];
        }
    }
}

/* ---- PIL's resize, exactly ------------------------------------------------------------ */

/* Pillow 9.4's bilinear resize (src/libImaging/Resample.c) in its own
 * arithmetic: precompute_coeffs in double (a triangle filter of support
 * max(scale, 1) around each output's centre, the window rounded as it does,
 * the weights normalised by their sum), normalize_coeffs_8bpc (weights in
 * fixed point with PIL_PRECISION_BITS fraction bits, rounded half away from
 * zero), a horizontal pass over the rows the vertical windows use into
 * uint8, then a vertical pass, each sum starting at half a unit and clipped
 * to [0, 255] (clip8). Every output pixel depends only on its own windows,
 * so computing the outputs [off, off + n) of the virt-pixel resize alone
 * gives the bytes of PIL's whole resize, cropped. */
#define PIL_PRECISION_BITS (32 - 8 - 2)

static double pil_bilinear(double x)
{
    if (x < 0.0) x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Outputs [g->off, g->off + g->n) of PIL's resize of the g->src_len
 * source pixels to g->virt (g->src_lo = 0: the whole axis; box 0..in). */
__attribute__((optimize("fp-contract=off"))) static void pil_coeffs(pil_axis *a, const axis_geom *g)
{
    const int in_size = g->src_len, out_size = g->virt;
    const float in0 = 0.0f, in1 = (float)in_size;
    double scale, filterscale;
    filterscale = scale = (double)(in1 - in0) / out_size;
    if (filterscale < 1.0) filterscale = 1.0;
    const double support = 1.0 * filterscale;
    const int ksize = (int)ceil(support) * 2 + 1;
    a->n = g->n;
    a->ksize = ksize;
    a->lo = grow(a->lo, &a->cap_lo, (size_t)g->n * sizeof(int));
    a->cnt = grow(a->cnt, &a->cap_cnt, (size_t)g->n * sizeof(int));
    a->k = grow(a->k, &a->cap_k, (size_t)g->n * ksize * sizeof(int32_t));
    for (int j = 0; j < g->n; j++) {
        const int xx = g->off + j;
        const double center = in0 + (xx + 0.5) * scale;
        const double ss = 1.0 / filterscale;
        double ww = 0.0;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        assert(xmax >= 0 && xmax <= ksize);
        for (int x = 0; x < xmax; x++) ww += pil_bilinear((x + xmin - center + 0.5) * ss);
        int32_t *k = a->k + (size_t)j * ksize;
        for (int x = 0; x < xmax; x++) {
            double w = pil_bilinear((x + xmin - center + 0.5) * ss); /* as in the sum */
            if (ww != 0.0) w /= ww;
            k[x] = w < 0 ? (int32_t)(-0.5 + w * (1 << PIL_PRECISION_BITS))
                         : (int32_t)(0.5 + w * (1 << PIL_PRECISION_BITS));
        }
        a->lo[j] = xmin;
        a->cnt[j] = xmax;
    }
}

static inline uint8_t pil_clip8(int32_t v)
{
    const int32_t q = v >> PIL_PRECISION_BITS; /* arithmetic: floor */
    return (uint8_t)(q < 0 ? 0 : q > 255 ? 255 : q);
}

/* Resizes buffer px (bw x bh x C, source pixel (x, y) at buffer (x - sx,
 * y - sy), holding every source pixel the windows use) into out (p's
 * n_y x n_x x C bytes) as PIL does. */
static void pil_resample(aug_scratch *s, const plan *p, const uint8_t *px, int bw, int bh, int C,
                         int sx, int sy, uint8_t *out)
{
    pil_coeffs(&s->px, &p->gx);
    pil_coeffs(&s->py, &p->gy);
    const pil_axis *ax = &s->px, *ay = &s->py;
    const int nx = ax->n, ny = ay->n;
    /* the source rows the vertical windows use: [r0, r1) */
    int r0 = INT32_MAX, r1 = 0;
    for (int y = 0; y < ny; y++) {
        r0 = PST_MIN(r0, ay->lo[y]);
        r1 = PST_MAX(r1, ay->lo[y] + ay->cnt[y]);
    }
    assert(r0 - sy >= 0 && r1 - sy <= bh);
    assert(ax->lo[0] - sx >= 0 && ax->lo[nx - 1] + ax->cnt[nx - 1] - sx <= bw);
    (void)bh;
    const size_t orow = (size_t)nx * C;
    s->tmp8 = grow(s->tmp8, &s->tmp8_cap, (size_t)PST_MAX(r1 - r0, 1) * orow);
    for (int r = r0; r < r1; r++) {
        const uint8_t *in = px + ((size_t)(r - sy) * bw - sx) * C;
        uint8_t *o = s->tmp8 + (size_t)(r - r0) * orow;
        for (int j = 0; j < nx; j++) {
            const int32_t *k = ax->k + (size_t)j * ax->ksize;
            const uint8_t *q = in + (size_t)ax->lo[j] * C;
            for (int c = 0; c < C; c++) {
                int32_t ss = 1 << (PIL_PRECISION_BITS - 1);
                for (int x = 0; x < ax->cnt[j]; x++) ss += q[x * C + c] * k[x];
                o[(size_t)j * C + c] = pil_clip8(ss);
            }
        }
    }
    for (int y = 0; y < ny; y++) {
        const int32_t *k = ay->k + (size_t)y * ay->ksize;
        const uint8_t *t = s->tmp8 + (size_t)(ay->lo[y] - r0) * orow;
        uint8_t *o = out + (size_t)y * orow;
        for (size_t i = 0; i < orow; i++) {
            int32_t ss = 1 << (PIL_PRECISION_BITS - 1);
            for (int r = 0; r < ay->cnt[y]; r++) ss += t[(size_t)r * orow + i] * k[r];
            o[i] = pil_clip8(ss);
        }
    }
}

/* ---- colour distortion and quantisation ------------------------------------------ */

/* Clip to [0, 1] and quantise: floor(255 v + 0.5). */
__attribute__((noinline)) AUG_NO_TRAPS AUG_CLONES static void
quant_row(const float *restrict v, size_t m, uint8_t *restrict out)
{
    for (size_t i = 0; i < m; i++) {
        const float x0 = MAXF(v[i], 0.0f);
        const float x = MINF(x0, 1.0f);
        out[i] = (uint8_t)(int)(x * 255.0f + 0.5f);
    }
}

enum { BLK = 256 }; /* pixels per block of planes in aug_distort_color */

/* The strided loops around sat_hue_planes, cloned like it: pixels q[0..m)
 * to planes as v * a + add[c]; planes back to pixels; and an affine map of
 * interleaved pixels, clipped and quantised. */
__attribute__((noinline)) AUG_NO_TRAPS AUG_CLONES static void
load_planes(const float *restrict q, int m, float a, const float *add, float *restrict R,
            float *restrict G, float *restrict B)
{
    const float a0 = add[0], a1 = add[1], a2 = add[2];
    for (int i = 0; i < m; i++) {
        R[i] = q[3 * i] * a + a0;
        G[i] = q[3 * i + 1] * a + a1;
        B[i] = q[3 * i + 2] * a + a2;
    }
}

__attribute__((noinline)) AUG_NO_TRAPS AUG_CLONES static void store_planes(float *restrict q, int m,
                                                                           const float *restrict R,
                                                                           const float *restrict G,
                                                                           const float *restrict B)
{
    for (int i = 0; i < m; i++) {
        q[3 * i] = R[i];
        q[3 * i + 1] = G[i];
        q[3 * i + 2] = B[i];
    }
}

__attribute__((noinline)) AUG_NO_TRAPS AUG_CLONES static void
affine_quant3(const float *restrict v, size_t n, float a, const float *add, uint8_t *restrict out)
{
    const float a0 = add[0], a1 = add[1], a2 = add[2];
    for (size_t i = 0; i < n; i++) {
        const float x0 = v[3 * i] * a + a0, x1 = v[3 * i + 1] * a + a1, x2 = v[3 * i + 2] * a + a2;
        const float y0 = MAXF(x0, 0.0f), y1 = MAXF(x1, 0.0f), y2 = MAXF(x2, 0.0f);
        const float z0 = MINF(y0, 1.0f), z1 = MINF(y1, 1.0f), z2 = MINF(y2, 1.0f);
        out[3 * i] = (uint8_t)(int)(z0 * 255.0f + 0.5f);
        out[3 * i + 1] = (uint8_t)(int)(z1 * 255.0f + 0.5f);
        out[3 * i + 2] = (uint8_t)(int)(z2 * 255.0f + 0.5f);
    }
}

void aug_distort_color(float *img, size_t n, int C, const aug_color *c, uint8_t *out)
{
    const float db = c->brightness, fs = c->saturation, dh6 = c->hue * 6, fc = c->contrast;
    double mean[3];
    if (C != 3) { /* saturation and hue are the identity */
        channel_means(img, n, 1, mean);
        const float mk = (float)mean[0] + db; /* the mean after brightness */
        for (size_t i = 0; i < n; i++) img[i] = (img[i] + db - mk) * fc + mk;
        quant_row(img, n, out);
        return;
    }
    /* the affine part before saturation + hue: brightness (order 0), or
     * brightness then contrast about the brightened means (order 1):
     * (v + db - m) fc + m = v fc + ((db - m) fc + m), m = mean + db */
    float a = 1, add[3] = {db, db, db};
    if (c->order == 1) {
        channel_means(img, n, 3, mean);
        a = fc;
        for (int k = 0; k < 3; k++) {
            const float mk = (float)mean[k] + db;
            add[k] = (db - mk) * fc + mk;
        }
    }
    float R[BLK], G[BLK], B[BLK];
    for (size_t i0 = 0; i0 < n; i0 += BLK) {
        const int m = (int)PST_MIN((size_t)BLK, n - i0);
        float *q = img + 3 * i0;
        load_planes(q, m, a, add, R, G, B);
        sat_hue_planes(R, G, B, m, fs, dh6);
        store_planes(q, m, R, G, B);
    }
    /* order 0 ends with contrast about the means after hue: v fc + m (1 - fc) */
    a = 1;
    add[0] = add[1] = add[2] = 0;
    if (c->order == 0) {
        channel_means(img, n, 3, mean);
        a = fc;
        for (int k = 0; k < 3; k++) add[k] = (float)mean[k] * (1 - fc);
    }
    affine_quant3(img, n, a, add, out);
}

/* The colour distortion when the plan has one, else clip and quantise. */
static void finish(float *img, size_t n, int C, const plan *p, uint8_t *out)
{
    if (p->color) {
        aug_distort_color(img, n, C, &p->col, out);
        return;
    }
    quant_row(img, n * (size_t)C, out);
}

/* ---- entry points ----------------------------------------------------------------- */

void aug_from_pixels(int recipe, bool train, uint64_t h, const uint8_t *px, int H, int W, int C,
                     int out_h, int out_w, uint8_t *out, aug_scratch *s)
{
    assert(H >= 1 && W >= 1 && out_h >= 1 && out_w >= 1 && (C == 1 || C == 3));
    const plan p = make_plan(recipe, train, h, W, H, out_h, out_w);
    if (p.mode == RS_PIL_EXACT) {
        pil_resample(s, &p, px, W, H, C, 0, 0, out);
        return;
    }
    resample(s, &p, px, W, H, C, 1.0, 0, 0);
    finish(s->img, (size_t)out_h * out_w, C, &p, out);
}

/* The source pixels [*lo, *lo + *len) that axis g's outputs draw on: the
 * crop, or for resnet's eval centre crop the part of the image under it
 * (with the filter's support and a pixel to spare). */
static void need_range(const axis_geom *g, int *lo, int *len)
{
    if (g->off == 0 && g->virt == g->n) {
        *lo = g->src_lo;
        *len = g->src_len;
        return;
    }
    const double sc = (double)g->src_len / g->virt, support = sc > 1 ? sc : 1;
    const double e0 = g->src_lo + g->off * sc - support - 1;
    const double e1 = g->src_lo + (g->off + g->n) * sc + support + 1;
    const int a = PST_MAX(g->src_lo, (int)floor(e0));
    const int b = PST_MIN(g->src_lo + g->src_len, (int)ceil(e1));
    *lo = a;
    *len = PST_MAX(1, b - a);
}

/* The scaled size the decode must keep along an axis: the region of len
 * source pixels at the resize's density, at least the outputs it covers. */
static int min_scaled(const axis_geom *g, int len)
{
    const double v = ceil((double)len * g->virt / g->src_len - 1e-9);
    return (int)PST_MAX(1.0, v);
}

int aug_from_jpeg(int recipe, bool train, uint64_t h, const uint8_t *buf, size_t n, int channels,
                  int out_h, int out_w, uint8_t *out, aug_scratch *s, pst_err *e)
{
    assert(out_h >= 1 && out_w >= 1 && (channels == 1 || channels == 3));
    jpg_info info;
    if (jpg_read_info(buf, n, &info, e) < 0) return -1;
    const plan p = make_plan(recipe, train, h, info.width, info.height, out_h, out_w);
    int x, y, cw, ch;
    need_range(&p.gx, &x, &cw);
    need_range(&p.gy, &y, &ch);
    /* truncated files are accepted as libjpeg fills them: a data set holds
     * one only when pstrain-prep was told --allow-truncated */
    /* PIL's resize is exact on the full-scale decode only */
    const bool exact = p.mode == RS_PIL_EXACT;
    if (jpg_decode_region(buf, n, channels, x, y, cw, ch, exact ? cw : min_scaled(&p.gx, cw),
                          exact ? ch : min_scaled(&p.gy, ch), JPG_ALLOW_TRUNCATED, &s->reg, e) < 0)
        return -1;
    const jpg_region *r = &s->reg;
    if (exact) {
        assert(r->scale_num == 8);
        pil_resample(s, &p, r->px, r->w, r->h, channels, r->sx, r->sy, out);
        return 0;
    }
    resample(s, &p, r->px, r->w, r->h, channels, r->scale_num / 8.0, r->sx, r->sy);
    finish(s->img, (size_t)out_h * out_w, channels, &p, out);
    return 0;
}
