/* test_jpeg.c - src/data/jpeg.c against libjpeg's own decode of fixtures the
 * test writes (jpegfix.h): every JPEG kind, both channel counts, region
 * decodes at every scale, broken and hostile files, the encoder.
 *
 *   test_jpeg               the test
 *   test_jpeg --write DIR   writes every fixture as DIR/NAME.jpg and
 *                           jpg_decode's pixels as DIR/NAME.c3 / NAME.c1
 *                           (raw bytes, for pil_xcheck.py)
 *   test_jpeg --eval DIR S...  for every DIR/NAME.jpg, the resnet recipe's
 *                           evaluation transform to S x S (aug_from_jpeg;
 *                           aug_from_pixels on jpg_decode's image must give
 *                           the same bytes) as DIR/NAME.e1-S / NAME.e3-S */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "jpegfix.h"
#include "pstrain/augment.h"
#include "pstrain/jpeg.h"

static uint32_t rng = 2463534242u;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

static int first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return (int)i;
    return -1;
}

/* jpg_read_info and jpg_decode (1 and 3 channels) on every fixture. */
static void test_fixtures(void)
{
    for (size_t f = 0; f < JF_NSPECS; f++) {
        const jf_spec *sp = &jf_specs[f];
        size_t n;
        uint8_t *jpg = jf_write(sp, &n);
        CHECK(jpg != NULL, "%s: fixture", sp->name);
        if (!jpg) continue;
        CHECK(img_sniff(jpg, n) == IMG_JPEG, "%s: sniffed as JPEG", sp->name);
        jpg_info info;
        pst_err e = {{0}};
        CHECK(jpg_read_info(jpg, n, &info, &e) == 0, "%s: info: %s", sp->name, e.msg);
        CHECK(info.width == sp->w && info.height == sp->h, "%s: %dx%d", sp->name, info.width,
              info.height);
        CHECK(info.components == sp->in_components, "%s: %d components", sp->name, info.components);
        CHECK(info.colorspace == (int)sp->jcs, "%s: colorspace %d, expected %d", sp->name,
              info.colorspace, (int)sp->jcs);
        CHECK(info.progressive == sp->progressive && info.arithmetic == sp->arith,
              "%s: progressive %d arithmetic %d", sp->name, info.progressive, info.arithmetic);
        for (int c = 1; c <= 3; c += 2) {
            int rw, rh, w = -1, h = -1;
            uint8_t *ref = jf_decode(jpg, n, c, 8, &rw, &rh);
            uint8_t *px = NULL;
            int rc = jpg_decode(jpg, n, c, 0, &px, &w, &h, &e);
            CHECK(rc == 0 && ref != NULL, "%s: decode %d channels: %s", sp->name, c, e.msg);
            if (rc == 0 && ref) {
                CHECK(w == rw && h == rh, "%s: %dx%d vs %dx%d", sp->name, w, h, rw, rh);
                int d = first_diff(px, ref, (size_t)w * h * c);
                CHECK(d < 0, "%s, %d channels: byte %d is %d, libjpeg's decode has %d", sp->name, c,
                      d, d < 0 ? 0 : px[d], d < 0 ? 0 : ref[d]);
            }
            free(px);
            free(ref);
        }
        free(jpg);
    }
}

/* The scale pstrain/jpeg.h promises, computed the long way. */
static int expected_scale(int cw, int ch, int min_w, int min_h)
{
    static const int fast[] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++)
        if (cw * fast[i] / 8.0 >= min_w && ch * fast[i] / 8.0 >= min_h) return fast[i];
    return 8;
}

/* jpg_decode_region against the same pixels of libjpeg's whole decode at
 * the same scale, over random rectangles and minimum sizes, with one
 * jpg_region reused throughout. */
static void test_regions(void)
{
    jpg_region r = {0};
    int tried = 0;
    for (size_t f = 0; f < JF_NSPECS; f++) {
        const jf_spec *sp = &jf_specs[f];
        size_t n;
        uint8_t *jpg = jf_write(sp, &n);
        if (!jpg) continue;
        uint8_t *ref[2][9] = {{NULL}};
        int rw[9], rh[9];
        for (int t = 0; t < 60; t++) {
            int c = (t & 1) ? 3 : 1;
            int cw = 1 + (int)(rnd() % (unsigned)sp->w), ch = 1 + (int)(rnd() % (unsigned)sp->h);
            /* narrow ones: libjpeg's window must stay wide enough for its
             * triangle upsampling */
            if (t % 4 == 2 && cw > 3) cw = 1 + (int)(rnd() % 3);
            int x = (int)(rnd() % (unsigned)(sp->w - cw + 1));
            int y = (int)(rnd() % (unsigned)(sp->h - ch + 1));
            if (t == 0) x = y = 0, cw = sp->w, ch = sp->h;
            int min_w = (int)(rnd() % (unsigned)(cw + 2)),
                min_h = (int)(rnd() % (unsigned)(ch + 2));
            if (t % 5 == 4) min_w = min_h = 0; /* the smallest scale, 1/8 */
            int s = expected_scale(cw, ch, min_w, min_h);
            uint8_t **rp = &ref[c == 3][s];
            if (!*rp) *rp = jf_decode(jpg, n, c, s, &rw[s], &rh[s]);
            pst_err e = {{0}};
            int rc = jpg_decode_region(jpg, n, c, x, y, cw, ch, min_w, min_h, 0, &r, &e);
            CHECK(rc == 0 && *rp, "%s: region %dx%d+%d+%d: %s", sp->name, cw, ch, x, y, e.msg);
            if (rc != 0 || !*rp) continue;
            tried++;
            int sx0 = x * s / 8, sy0 = y * s / 8;
            int sx1 = (int)((x + cw) * (int64_t)s + 7) / 8,
                sy1 = (int)((y + ch) * (int64_t)s + 7) / 8;
            CHECK(r.scale_num == s && r.sx == sx0 && r.sy == sy0 && r.w == sx1 - sx0 &&
                      r.h == sy1 - sy0,
                  "%s: region %dx%d+%d+%d min %dx%d: s %d [%d,+%d)x[%d,+%d), expected s %d "
                  "[%d,%d)x[%d,%d)",
                  sp->name, cw, ch, x, y, min_w, min_h, r.scale_num, r.sx, r.w, r.sy, r.h, s, sx0,
                  sx1, sy0, sy1);
            CHECK(r.w * (size_t)r.h * c <= r.cap, "%s: cap %zu", sp->name, r.cap);
            CHECK(sx1 <= rw[s] && sy1 <= rh[s], "%s: scaled image %dx%d", sp->name, rw[s], rh[s]);
            if (r.w != sx1 - sx0 || r.h != sy1 - sy0 || sx1 > rw[s] || sy1 > rh[s]) continue;
            int bad = 0, bx = 0, by = 0;
            for (int i = 0; i < r.h; i++)
                for (int j = 0; j < r.w * c; j++) {
                    uint8_t want = (*rp)[((size_t)(sy0 + i) * rw[s] + sx0) * c + j];
                    if (r.px[(size_t)i * r.w * c + j] != want && !bad++) bx = j / c, by = i;
                }
            CHECK(bad == 0,
                  "%s, %d channels: region %dx%d+%d+%d at scale %d/8: %d bytes differ from the "
                  "whole decode, the first at pixel (%d, %d) of %dx%d",
                  sp->name, c, cw, ch, x, y, s, bad, bx, by, r.w, r.h);
        }
        for (int c = 0; c < 2; c++)
            for (int s = 0; s < 9; s++) free(ref[c][s]);
        free(jpg);
    }
    CHECK(tried > 500, "%d regions compared", tried);

    /* the buffer is reused: a smaller region keeps it */
    jf_spec sp = jf_specs[0];
    size_t n;
    uint8_t *jpg = jf_write(&sp, &n);
    pst_err e;
    CHECK(jpg_decode_region(jpg, n, 3, 0, 0, sp.w, sp.h, sp.w, sp.h, 0, &r, &e) == 0, "%s", e.msg);
    uint8_t *px = r.px;
    size_t cap = r.cap;
    CHECK(jpg_decode_region(jpg, n, 3, 5, 5, 10, 10, 10, 10, 0, &r, &e) == 0, "%s", e.msg);
    CHECK(r.px == px && r.cap == cap, "buffer reused");
    /* a rectangle outside the image, bad channel counts */
    CHECK(jpg_decode_region(jpg, n, 3, sp.w - 4, 0, 5, 5, 1, 1, 0, &r, &e) < 0 &&
              strstr(e.msg, "does not lie in"),
          "outside: %s", e.msg);
    CHECK(jpg_decode_region(jpg, n, 3, -1, 0, 5, 5, 1, 1, 0, &r, &e) < 0, "negative x");
    CHECK(jpg_decode_region(jpg, n, 3, 0, 0, 0, 5, 1, 1, 0, &r, &e) < 0, "zero width");
    CHECK(jpg_decode_region(jpg, n, 2, 0, 0, 5, 5, 1, 1, 0, &r, &e) < 0 &&
              strstr(e.msg, "expected 1 or 3"),
          "2 channels: %s", e.msg);
    free(jpg);
    jpg_region_free(&r);
    CHECK(r.px == NULL && r.cap == 0, "freed");
    jpg_region_free(NULL);
}

static void test_sniff(void)
{
    static const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13};
    static const uint8_t jpg[] = {0xFF, 0xD8, 0xFF, 0xE0};
    CHECK(img_sniff(png, sizeof png) == IMG_PNG, "png");
    CHECK(img_sniff(png, 7) == IMG_UNKNOWN, "7 bytes of png");
    CHECK(img_sniff(jpg, 3) == IMG_JPEG, "jpeg");
    CHECK(img_sniff(jpg, 2) == IMG_UNKNOWN, "2 bytes of jpeg");
    CHECK(img_sniff((const uint8_t *)"hello world", 11) == IMG_UNKNOWN, "text");
    CHECK(img_sniff(NULL, 0) == IMG_UNKNOWN, "nothing");
    /* a PNG handed to the JPEG decoder (ImageNet's PNG named .JPEG) */
    pst_err e;
    uint8_t *px = (uint8_t *)1;
    int w, h;
    CHECK(jpg_decode(png, sizeof png, 3, 0, &px, &w, &h, &e) < 0 && px == NULL &&
              strstr(e.msg, "not a JPEG file: starts with 0x89 0x50 0x4e, expected 0xff 0xd8 0xff"),
          "png: %s", e.msg);
    CHECK(jpg_decode(png, 0, 3, 0, &px, &w, &h, &e) < 0 && strstr(e.msg, "empty file"),
          "zero bytes: %s", e.msg);
    const char *text = "P6\n2 2\n255\nthis is not an image";
    CHECK(jpg_decode((const uint8_t *)text, strlen(text), 3, 0, &px, &w, &h, &e) < 0 &&
              strstr(e.msg, "not a JPEG"),
          "text: %s", e.msg);
    jpg_info info;
    CHECK(jpg_read_info(jpg, sizeof jpg, &info, &e) < 0 && strchr(e.msg, '\n') == NULL,
          "4 bytes: %s", e.msg);
}

/* Truncated files: an error naming libjpeg's reason, or with
 * JPG_ALLOW_TRUNCATED libjpeg's own (warned) decode. */
static void test_truncated(void)
{
    const char *names[] = {"baseline-420", "progressive-420", "gray", "cmyk"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const jf_spec *sp = NULL;
        for (size_t f = 0; f < JF_NSPECS; f++)
            if (!strcmp(jf_specs[f].name, names[k])) sp = &jf_specs[f];
        size_t n;
        uint8_t *jpg = jf_write(sp, &n);
        size_t cut = n * 2 / 3;
        pst_err e;
        uint8_t *px = NULL;
        int w, h, rw, rh;
        CHECK(jpg_decode(jpg, cut, 3, 0, &px, &w, &h, &e) < 0 && px == NULL &&
                  strstr(e.msg, "Premature end of JPEG file"),
              "%s truncated: %s", sp->name, e.msg);
        jpg_region r = {0};
        CHECK(jpg_decode_region(jpg, cut, 3, 0, 0, sp->w, sp->h, sp->w, sp->h, 0, &r, &e) < 0 &&
                  strstr(e.msg, "Premature end of JPEG file"),
              "%s truncated region: %s", sp->name, e.msg);
        CHECK(jpg_decode_region(jpg, cut, 3, 0, 0, sp->w, sp->h, sp->w, sp->h, JPG_ALLOW_TRUNCATED,
                                &r, &e) == 0,
              "%s truncated region allowed: %s", sp->name, e.msg);
        jpg_region_free(&r);
        uint8_t *ref = jf_decode(jpg, cut, 3, 8, &rw, &rh);
        CHECK(jpg_decode(jpg, cut, 3, JPG_ALLOW_TRUNCATED, &px, &w, &h, &e) == 0 && ref,
              "%s truncated, allowed: %s", sp->name, e.msg);
        if (px && ref)
            CHECK(first_diff(px, ref, (size_t)w * h * 3) < 0, "%s: truncated decode differs",
                  sp->name);
        free(px);
        free(ref);
        /* the header alone reads */
        jpg_info info;
        CHECK(jpg_read_info(jpg, cut, &info, &e) == 0 && info.width == sp->w, "%s: %s", sp->name,
              e.msg);
        free(jpg);
    }
}

/* Finds marker 0xFF m (after the SOI) in a fixture. */
static size_t find_marker(const uint8_t *p, size_t n, uint8_t m)
{
    for (size_t i = 2; i + 1 < n; i++)
        if (p[i] == 0xFF && p[i + 1] == m) return i;
    return 0;
}

/* Bytes before the end marker (ImageNet has such files): accepted, same
 * pixels. Damaged entropy data: an error naming it. */
static void test_corrupt_warnings(void)
{
    jf_spec sp = jf_specs[0];
    size_t n;
    uint8_t *jpg = jf_write(&sp, &n);
    size_t eoi = find_marker(jpg, n, 0xD9);
    CHECK(eoi == n - 2, "EOI at %zu of %zu", eoi, n);
    uint8_t *x = malloc(n + 10);
    memcpy(x, jpg, eoi);
    memset(x + eoi, 0x55, 10);
    memcpy(x + eoi + 10, jpg + eoi, 2);
    pst_err e;
    uint8_t *a = NULL, *b = NULL;
    int w, h;
    CHECK(jpg_decode(jpg, n, 3, 0, &a, &w, &h, &e) == 0, "%s", e.msg);
    CHECK(jpg_decode(x, n + 10, 3, 0, &b, &w, &h, &e) == 0, "extraneous bytes: %s", e.msg);
    CHECK(a && b && first_diff(a, b, (size_t)w * h * 3) < 0, "extraneous bytes change pixels");
    free(b);
    b = NULL;
    /* A file that ends right before its EOI marker: libjpeg's entropy decoder
     * needs the marker to end the last segment, so it reads as truncated
     * (as in PIL); allowed, the pixels are all there. */
    CHECK(jpg_decode(jpg, n - 2, 3, 0, &b, &w, &h, &e) < 0 && strstr(e.msg, "Premature end"),
          "no EOI: %s", e.msg);
    CHECK(jpg_decode(jpg, n - 2, 3, JPG_ALLOW_TRUNCATED, &b, &w, &h, &e) == 0, "no EOI: %s", e.msg);
    CHECK(a && b && first_diff(a, b, (size_t)w * h * 3) < 0, "no EOI changes pixels");
    free(b);
    b = NULL;

    /* a restart marker in the middle of the data renamed (RST0 -> RST5):
     * libjpeg resynchronises with "Corrupt JPEG data: ... instead of RST" */
    jf_spec rs = jf_specs[0];
    for (size_t f = 0; f < JF_NSPECS; f++)
        if (!strcmp(jf_specs[f].name, "restart-420")) rs = jf_specs[f];
    size_t rn;
    uint8_t *rj = jf_write(&rs, &rn);
    size_t rst = find_marker(rj, rn, 0xD0);
    CHECK(rst > 0, "no RST0 in %s", rs.name);
    if (rst) {
        rj[rst + 1] = 0xD5;
        CHECK(jpg_decode(rj, rn, 3, 0, &b, &w, &h, &e) < 0 && b == NULL &&
                  strstr(e.msg, "Corrupt JPEG data"),
              "damaged restart marker: %s", e.msg);
    }
    free(rj);
    free(x);
    free(a);
    free(jpg);
}

/* Random damage to every fixture must never crash or leak (this runs in the
 * ASan build): either an error with a one-line message or an image of the
 * header's size. */
static void test_fuzz(void)
{
    int errors = 0, ok = 0;
    jpg_region r = {0};
    for (size_t f = 0; f < JF_NSPECS; f++) {
        size_t n;
        uint8_t *jpg = jf_write(&jf_specs[f], &n);
        uint8_t *m = malloc(n);
        for (int t = 0; t < 60; t++) {
            memcpy(m, jpg, n);
            int k = 1 + (int)(rnd() % 8);
            for (int i = 0; i < k; i++) {
                size_t at = 2 + rnd() % (n - 2);
                m[at] = (t & 1) ? (uint8_t)rnd() : (uint8_t)(m[at] ^ (1u << (rnd() % 8)));
            }
            size_t len = (t % 7 == 3) ? 2 + rnd() % (n - 2) : n;
            pst_err e = {{0}};
            uint8_t *px = NULL;
            int w = 0, h = 0;
            int flags = (t % 3 == 0) ? JPG_ALLOW_TRUNCATED : 0;
            int c = (t & 2) ? 3 : 1;
            if (jpg_decode(m, len, c, flags, &px, &w, &h, &e) == 0) {
                ok++;
                CHECK(px && w >= 1 && h >= 1 && (int64_t)w * h <= JPG_MAX_PIXELS, "bad result");
                free(px);
            } else {
                errors++;
                CHECK(e.msg[0] && !strchr(e.msg, '\n') && px == NULL, "message: %s", e.msg);
            }
            jpg_info info;
            if (jpg_read_info(m, len, &info, &e) == 0 && info.width >= 4 && info.height >= 4)
                (void)jpg_decode_region(m, len, c, 1, 1, info.width - 2, info.height - 2,
                                        info.width / 3, info.height / 3, flags, &r, &e);
        }
        free(m);
        free(jpg);
    }
    jpg_region_free(&r);
    CHECK(errors > 0 && ok > 0, "%d errors, %d decoded", errors, ok);
}

/* Hostile headers: a huge size is refused before any pixel is allocated. */
static void test_limits(void)
{
    jf_spec sp = jf_specs[0];
    size_t n;
    uint8_t *jpg = jf_write(&sp, &n);
    size_t sof = find_marker(jpg, n, 0xC0);
    CHECK(sof > 0, "SOF0");
    /* FF C0 len(2) precision(1) height(2) width(2) */
    jpg[sof + 5] = 0xEA, jpg[sof + 6] = 0x60; /* 60000 */
    jpg[sof + 7] = 0xEA, jpg[sof + 8] = 0x60;
    pst_err e;
    uint8_t *px = NULL;
    int w, h;
    CHECK(jpg_decode(jpg, n, 3, 0, &px, &w, &h, &e) < 0 && strstr(e.msg, "larger than the limit"),
          "60000x60000: %s", e.msg);
    jpg_info info;
    CHECK(jpg_read_info(jpg, n, &info, &e) < 0, "info of 60000x60000");
    free(jpg);
}

/* A valid progressive file with 704 scans (every AC coefficient in its own
 * scan, each refined bit by bit): libjpeg decodes it, jpg_decode refuses it
 * (such files cost a pass over all coefficients per scan). */
static void test_scan_limit(void)
{
    enum { NSCANS = 11 + 63 * 11 };
    static jpeg_scan_info scans[NSCANS];
    int k = 0;
    for (int al = 10; al >= 0; al--)
        scans[k++] = (jpeg_scan_info){1, {0}, 0, 0, al == 10 ? 0 : al + 1, al};
    for (int ss = 1; ss <= 63; ss++)
        for (int al = 10; al >= 0; al--)
            scans[k++] = (jpeg_scan_info){1, {0}, ss, ss, al == 10 ? 0 : al + 1, al};
    struct jpeg_compress_struct c;
    jf_err err;
    c.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = jf_error_exit;
    if (setjmp(err.jb)) {
        CHECK(0, "writing the 704-scan file: %s", err.msg);
        jpeg_destroy_compress(&c);
        return;
    }
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&c, &out, &n);
    c.image_width = 16, c.image_height = 16, c.input_components = 1;
    c.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&c);
    c.scan_info = scans;
    c.num_scans = NSCANS;
    uint8_t *img = jf_image(16, 16, 1, 3);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < 16) {
        JSAMPROW row = img + c.next_scanline * 16;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    int w, h;
    uint8_t *ref = jf_decode(out, n, 1, 8, &w, &h);
    CHECK(ref && w == 16, "libjpeg decodes the 704-scan file");
    pst_err e;
    uint8_t *px = NULL;
    CHECK(jpg_decode(out, n, 1, 0, &px, &w, &h, &e) < 0 && px == NULL &&
              strstr(e.msg, "more than 500 progressive scans"),
          "704 scans: %s", e.msg);
    free(ref);
    free(img);
    free(out);
}

/* Decodes on several threads at once give the single-threaded bytes. */
typedef struct thread_arg {
    const uint8_t *jpg[JF_NSPECS];
    size_t n[JF_NSPECS];
    uint8_t *want[JF_NSPECS];
    int mismatches, seed;
} thread_arg;

static void *decode_thread(void *p)
{
    thread_arg *a = p;
    jpg_region r = {0};
    uint32_t s = (uint32_t)a->seed * 747796405u + 1;
    for (int it = 0; it < 20; it++)
        for (size_t f = 0; f < JF_NSPECS; f++) {
            s = s * 1664525u + 1013904223u;
            const jf_spec *sp = &jf_specs[f];
            pst_err e;
            if (jpg_decode_region(a->jpg[f], a->n[f], 3, 0, 0, sp->w, sp->h, sp->w, sp->h, 0, &r,
                                  &e) < 0 ||
                memcmp(r.px, a->want[f], (size_t)sp->w * sp->h * 3) != 0)
                __atomic_add_fetch(&a->mismatches, 1, __ATOMIC_RELAXED);
            int x = (int)(s >> 20) % sp->w;
            (void)jpg_decode_region(a->jpg[f], a->n[f], 1, x, 0, sp->w - x, sp->h, 1, 1, 0, &r, &e);
        }
    jpg_region_free(&r);
    return NULL;
}

static void test_threads(void)
{
    static thread_arg a;
    for (size_t f = 0; f < JF_NSPECS; f++) {
        a.jpg[f] = jf_write(&jf_specs[f], &a.n[f]);
        int w, h;
        pst_err e;
        CHECK(jpg_decode(a.jpg[f], a.n[f], 3, 0, &a.want[f], &w, &h, &e) == 0, "%s", e.msg);
    }
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        CHECK(pthread_create(&t[i], NULL, decode_thread, &a) == 0, "thread");
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    CHECK(a.mismatches == 0, "%d decodes on 4 threads differ", a.mismatches);
    for (size_t f = 0; f < JF_NSPECS; f++) {
        free((void *)a.jpg[f]);
        free(a.want[f]);
    }
}

/* The encoder: what libjpeg reads back is close to the input, baseline
 * 4:2:0 for RGB, and bad arguments are refused. */
static void test_encode(void)
{
    for (int c = 1; c <= 3; c += 2) {
        int W = 37, H = 29;
        uint8_t *img = jf_image(W, H, c, 7);
        uint8_t *out = NULL;
        size_t n = 0;
        pst_err e;
        CHECK(jpg_encode(img, W, H, c, 95, &out, &n, &e) == 0 && out && n > 100, "encode: %s",
              e.msg);
        jpg_info info;
        CHECK(jpg_read_info(out, n, &info, &e) == 0 && info.width == W && info.height == H &&
                  info.components == c && !info.progressive && !info.arithmetic,
              "encoded header");
        int w, h;
        uint8_t *back = jf_decode(out, n, c, 8, &w, &h);
        CHECK(back && w == W && h == H, "decode back");
        double se = 0;
        for (size_t i = 0; back && i < (size_t)W * H * c; i++)
            se += (back[i] - img[i]) * (double)(back[i] - img[i]);
        double mse = se / ((double)W * H * c);
        CHECK(mse < 60, "%d channels: mean squared error %.1f at quality 95", c, mse);
        free(back);
        free(out);
        /* a larger image grows the output buffer (its first guess is small) */
        int BW = 300, BH = 200;
        uint8_t *big = jf_image(BW, BH, c, 9);
        CHECK(jpg_encode(big, BW, BH, c, 100, &out, &n, &e) == 0 && n > 4096, "big: %s", e.msg);
        back = jf_decode(out, n, c, 8, &w, &h);
        CHECK(back && w == BW && h == BH, "big decode back");
        free(back);
        free(out);
        free(big);
        free(img);
    }
    uint8_t px[12] = {0};
    uint8_t *out = (uint8_t *)1;
    size_t n = 1;
    pst_err e;
    CHECK(jpg_encode(px, 2, 2, 2, 90, &out, &n, &e) < 0 && out == NULL && strstr(e.msg, "channels"),
          "%s", e.msg);
    CHECK(jpg_encode(px, 0, 2, 3, 90, &out, &n, &e) < 0 && strstr(e.msg, "0x2"), "%s", e.msg);
    CHECK(jpg_encode(px, 2, 2, 3, 0, &out, &n, &e) < 0 && strstr(e.msg, "quality"), "%s", e.msg);
    CHECK(jpg_encode(px, 2, 2, 3, 101, &out, &n, &e) < 0, "quality 101");
}

static int write_fixtures(const char *dir)
{
    char path[4096];
    for (size_t f = 0; f < JF_NSPECS; f++) {
        size_t n;
        uint8_t *jpg = jf_write(&jf_specs[f], &n);
        if (!jpg) return 1;
        snprintf(path, sizeof path, "%s/%s.jpg", dir, jf_specs[f].name);
        FILE *fp = fopen(path, "wb");
        if (!fp || fwrite(jpg, 1, n, fp) != n || fclose(fp) != 0) {
            fprintf(stderr, "%s: %s\n", path, strerror(errno));
            return 1;
        }
        for (int c = 1; c <= 3; c += 2) {
            uint8_t *px;
            int w, h;
            pst_err e;
            if (jpg_decode(jpg, n, c, 0, &px, &w, &h, &e) < 0) {
                fprintf(stderr, "%s: %s\n", jf_specs[f].name, e.msg);
                return 1;
            }
            snprintf(path, sizeof path, "%s/%s.c%d", dir, jf_specs[f].name, c);
            fp = fopen(path, "wb");
            size_t bytes = (size_t)w * h * c;
            if (!fp || fwrite(px, 1, bytes, fp) != bytes || fclose(fp) != 0) {
                fprintf(stderr, "%s: %s\n", path, strerror(errno));
                return 1;
            }
            free(px);
        }
        free(jpg);
    }
    return 0;
}

/* The resnet evaluation transform of one file to S x S with C channels,
 * written to `out`; 0, or 1 after a message. */
static int eval_one(const uint8_t *jpg, size_t n, int C, int S, const char *out, aug_scratch *s)
{
    pst_err e;
    uint8_t *a = malloc((size_t)S * S * C), *b = malloc((size_t)S * S * C), *px = NULL;
    int w, h, rc = 1;
    if (aug_from_jpeg(AUG_RESNET, false, 0, jpg, n, C, S, S, a, s, &e) < 0 ||
        jpg_decode(jpg, n, C, 0, &px, &w, &h, &e) < 0) {
        fprintf(stderr, "%s: %s\n", out, e.msg);
        goto done;
    }
    aug_from_pixels(AUG_RESNET, false, 0, px, h, w, C, S, S, b, s);
    if (memcmp(a, b, (size_t)S * S * C) != 0) {
        fprintf(stderr, "%s: aug_from_jpeg and aug_from_pixels differ\n", out);
        goto done;
    }
    FILE *fp = fopen(out, "wb");
    if (!fp || fwrite(a, 1, (size_t)S * S * C, fp) != (size_t)S * S * C || fclose(fp) != 0) {
        fprintf(stderr, "%s: %s\n", out, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    free(a), free(b), free(px);
    return rc;
}

static int write_evals(const char *dir, int nsizes, char **sizes)
{
    DIR *d = opendir(dir);
    if (!d) return fprintf(stderr, "%s: %s\n", dir, strerror(errno)), 1;
    aug_scratch *s = aug_scratch_new();
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d))) {
        const size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 4, ".jpg") != 0) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *fp = fopen(path, "rb");
        uint8_t *jpg = malloc(1 << 24);
        const size_t n = fp ? fread(jpg, 1, 1 << 24, fp) : 0;
        if (fp) fclose(fp);
        for (int i = 0; rc == 0 && i < nsizes; i++)
            for (int C = 1; rc == 0 && C <= 3; C += 2) {
                char out[4200];
                snprintf(out, sizeof out, "%s/%.*s.e%d-%s", dir, (int)(len - 4), de->d_name, C,
                         sizes[i]);
                rc = eval_one(jpg, n, C, atoi(sizes[i]), out, s);
            }
        free(jpg);
    }
    closedir(d);
    aug_scratch_free(s);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--write")) return write_fixtures(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "--eval")) return write_evals(argv[2], argc - 3, argv + 3);
    test_fixtures();
    test_sniff();
    test_regions();
    test_truncated();
    test_corrupt_warnings();
    test_fuzz();
    test_limits();
    test_scan_limit();
    test_threads();
    test_encode();
    return check_exit();
}
