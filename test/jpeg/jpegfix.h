/*
 * jpegfix.h - JPEG test fixtures written with libjpeg's compression API, and
 * a reference decode with libjpeg's decompression API, both independent of
 * src/data/jpeg.c (used by test_jpeg.c, bench_jpeg.c and pil_xcheck.py
 * through `test_jpeg --write DIR`).
 */
#ifndef PSTRAIN_TEST_JPEGFIX_H
#define PSTRAIN_TEST_JPEGFIX_H

#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

/* What a fixture is made of. */
typedef struct jf_spec {
    const char *name;
    int w, h;
    int in_components; /* 1 gray, 3 RGB, 4 CMYK samples given to libjpeg */
    J_COLOR_SPACE jcs; /* colour space in the file */
    int hs, vs;        /* luma (or first component) sampling factors: 2,2 = 4:2:0 */
    bool progressive, arith, adobe_inverted, no_adobe_marker;
    int restart_rows; /* restart interval in MCU rows, 0 none */
    int quality;
} jf_spec;

/* A photo-like test image: smooth gradients, a few sharp edges and noise, so
 * every subsampling and IDCT path has work (deterministic in `seed`). */
static inline uint8_t *jf_image(int w, int h, int c, unsigned seed)
{
    uint8_t *p = malloc((size_t)w * h * c + 1);
    uint32_t s = seed * 2654435761u + 1;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++) {
                s = s * 1664525u + 1013904223u;
                int v = (x * (3 + k) * 255) / (w + 1) / 2 + (y * (5 - k) * 255) / (h + 1) / 3;
                if (((x / 7) + (y / 5) + k) % 3 == 0) v += 60;
                v += (int)(s >> 28) - 8;
                p[((size_t)y * w + x) * c + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
    return p;
}

typedef struct jf_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
} jf_err;

static void jf_error_exit(j_common_ptr c)
{
    jf_err *m = (jf_err *)c->err;
    c->err->format_message(c, m->msg);
    longjmp(m->jb, 1);
}
static void jf_quiet(j_common_ptr c)
{
    (void)c;
}

/* Writes the fixture; *n its size; the caller frees. NULL on a libjpeg error. */
static inline uint8_t *jf_write(const jf_spec *sp, size_t *n)
{
    struct jpeg_compress_struct c;
    jf_err err;
    unsigned char *volatile out = NULL;
    unsigned long size = 0;
    uint8_t *px =
        jf_image(sp->w, sp->h, sp->in_components, (unsigned)sp->w * 31u + (unsigned)sp->h);
    c.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = jf_error_exit;
    err.pub.output_message = jf_quiet;
    if (setjmp(err.jb)) {
        fprintf(stderr, "jf_write %s: %s\n", sp->name, err.msg);
        jpeg_destroy_compress(&c);
        free(px);
        return NULL;
    }
    jpeg_create_compress(&c);
    unsigned char *o = NULL;
    jpeg_mem_dest(&c, &o, &size);
    c.image_width = (JDIMENSION)sp->w;
    c.image_height = (JDIMENSION)sp->h;
    c.input_components = sp->in_components;
    c.in_color_space = sp->in_components == 1   ? JCS_GRAYSCALE
                       : sp->in_components == 3 ? JCS_RGB
                                                : JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, sp->jcs);
    jpeg_set_quality(&c, sp->quality ? sp->quality : 90, TRUE);
    c.comp_info[0].h_samp_factor = sp->hs ? sp->hs : 1;
    c.comp_info[0].v_samp_factor = sp->vs ? sp->vs : 1;
    for (int i = 1; i < c.num_components; i++) {
        c.comp_info[i].h_samp_factor = 1;
        c.comp_info[i].v_samp_factor = 1;
    }
    if (sp->jcs == JCS_YCCK) { /* K like Y at full resolution */
        c.comp_info[3].h_samp_factor = c.comp_info[0].h_samp_factor;
        c.comp_info[3].v_samp_factor = c.comp_info[0].v_samp_factor;
    }
    if (sp->no_adobe_marker) c.write_Adobe_marker = FALSE;
    if (sp->progressive) jpeg_simple_progression(&c);
    c.arith_code = sp->arith;
    c.restart_in_rows = sp->restart_rows;
    jpeg_start_compress(&c, TRUE);
    size_t stride = (size_t)sp->w * sp->in_components;
    uint8_t *row = malloc(stride);
    while (c.next_scanline < c.image_height) {
        memcpy(row, px + c.next_scanline * stride, stride);
        if (sp->adobe_inverted)
            for (size_t i = 0; i < stride; i++) row[i] = (uint8_t)(255 - row[i]);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    free(row);
    jpeg_finish_compress(&c);
    out = o;
    jpeg_destroy_compress(&c);
    free(px);
    *n = size;
    return out;
}

/* PIL's CMYK to RGB, derived here again: PIL inverts the samples ("CMYK;I")
 * and computes nk - nk*C'/255 with its rounding MULDIV255(a, b) =
 * round-half-up of a*b/255 done as ((a*b + 128) * 257) >> 16. */
static inline uint8_t jf_cmyk(int c, int k)
{
    int a = 255 - c; /* PIL's C after inversion; its nk = 255 - (255 - k) = k */
    int prod = a * k + 128;
    return (uint8_t)(k - ((prod + (prod >> 8)) >> 8));
}

static inline uint8_t jf_luma(int r, int g, int b)
{
    /* ITU-R 601-2 in 16-bit fixed point, PIL's "L" */
    return (uint8_t)((r * 19595 + g * 38470 + b * 7471 + 32768) / 65536);
}

/* Reference decode with libjpeg itself: the whole image at scale s/8,
 * `channels` 1 or 3 as PIL's convert("L") / convert("RGB"). Warnings are
 * ignored (libjpeg's own behaviour). Returns malloc'd pixels or NULL. */
static inline uint8_t *jf_decode(const uint8_t *buf, size_t n, int channels, int s, int *w, int *h)
{
    struct jpeg_decompress_struct d;
    jf_err err;
    uint8_t *volatile px = NULL;
    d.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = jf_error_exit;
    err.pub.output_message = jf_quiet;
    if (setjmp(err.jb)) {
        jpeg_destroy_decompress(&d);
        free(px);
        return NULL;
    }
    jpeg_create_decompress(&d);
    jpeg_mem_src(&d, buf, (unsigned long)n);
    jpeg_read_header(&d, TRUE);
    bool cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
    bool gray = d.jpeg_color_space == JCS_GRAYSCALE;
    d.out_color_space = cmyk ? JCS_CMYK : gray ? JCS_GRAYSCALE : JCS_RGB;
    d.scale_num = (unsigned)s;
    d.scale_denom = 8;
    jpeg_start_decompress(&d);
    int ow = (int)d.output_width, oh = (int)d.output_height, oc = d.output_components;
    uint8_t *raw = malloc((size_t)ow * oh * oc);
    while (d.output_scanline < d.output_height) {
        JSAMPROW r = raw + (size_t)d.output_scanline * ow * oc;
        jpeg_read_scanlines(&d, &r, 1);
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    uint8_t *o = malloc((size_t)ow * oh * channels);
    for (size_t i = 0; i < (size_t)ow * oh; i++) {
        const uint8_t *p = raw + i * oc;
        int r, g, b;
        if (oc == 4) {
            r = jf_cmyk(p[0], p[3]), g = jf_cmyk(p[1], p[3]), b = jf_cmyk(p[2], p[3]);
        } else if (oc == 3) {
            r = p[0], g = p[1], b = p[2];
        } else {
            r = g = b = p[0];
        }
        if (channels == 3) {
            o[i * 3] = (uint8_t)r, o[i * 3 + 1] = (uint8_t)g, o[i * 3 + 2] = (uint8_t)b;
        } else {
            o[i] = oc == 1 ? p[0] : jf_luma(r, g, b);
        }
    }
    free(raw);
    *w = ow;
    *h = oh;
    return o;
}

/* The fixtures every test walks through. */
static const jf_spec jf_specs[] = {
    {"baseline-420", 64, 48, 3, JCS_YCbCr, 2, 2, false, false, false, false, 0, 90},
    {"baseline-444", 40, 24, 3, JCS_YCbCr, 1, 1, false, false, false, false, 0, 90},
    {"baseline-422", 48, 40, 3, JCS_YCbCr, 2, 1, false, false, false, false, 0, 85},
    {"baseline-440", 40, 48, 3, JCS_YCbCr, 1, 2, false, false, false, false, 0, 85},
    {"progressive-420", 72, 56, 3, JCS_YCbCr, 2, 2, true, false, false, false, 0, 90},
    {"progressive-444", 33, 17, 3, JCS_YCbCr, 1, 1, true, false, false, false, 0, 75},
    {"gray", 50, 30, 1, JCS_GRAYSCALE, 1, 1, false, false, false, false, 0, 90},
    {"gray-progressive", 31, 45, 1, JCS_GRAYSCALE, 1, 1, true, false, false, false, 0, 90},
    {"cmyk", 40, 32, 4, JCS_CMYK, 1, 1, false, false, false, false, 0, 90},
    {"cmyk-adobe-inverted", 40, 32, 4, JCS_CMYK, 1, 1, false, false, true, false, 0, 90},
    {"cmyk-no-adobe-marker", 24, 16, 4, JCS_CMYK, 1, 1, false, false, false, true, 0, 90},
    {"ycck", 48, 32, 4, JCS_YCCK, 2, 2, false, false, false, false, 0, 90},
    {"ycck-inverted-progressive", 48, 32, 4, JCS_YCCK, 2, 2, true, false, true, false, 0, 90},
    {"rgb-no-transform", 32, 24, 3, JCS_RGB, 1, 1, false, false, false, false, 0, 90},
    {"restart-420", 64, 64, 3, JCS_YCbCr, 2, 2, false, false, false, false, 1, 90},
    {"restart-gray", 40, 40, 1, JCS_GRAYSCALE, 1, 1, false, false, false, false, 2, 90},
    {"arith-420", 64, 48, 3, JCS_YCbCr, 2, 2, false, true, false, false, 0, 90},
    {"arith-progressive", 48, 40, 3, JCS_YCbCr, 2, 2, true, true, false, false, 1, 90},
    {"odd-1x1", 1, 1, 3, JCS_YCbCr, 2, 2, false, false, false, false, 0, 90},
    {"odd-17x33", 17, 33, 3, JCS_YCbCr, 2, 2, false, false, false, false, 0, 90},
    {"odd-33x17-422", 33, 17, 3, JCS_YCbCr, 2, 1, false, false, false, false, 0, 90},
    {"odd-gray-1x1", 1, 1, 1, JCS_GRAYSCALE, 1, 1, false, false, false, false, 0, 90},
    {"large-420", 227, 173, 3, JCS_YCbCr, 2, 2, false, false, false, false, 0, 90},
    {"large-progressive", 203, 151, 3, JCS_YCbCr, 2, 2, true, false, false, false, 0, 90},
};
#define JF_NSPECS (sizeof jf_specs / sizeof jf_specs[0])

#endif
