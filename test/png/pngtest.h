/*
 * pngtest.h - PNG fixtures for the tests, written with libpng directly (not
 * with the code under test), plus byte-level corruption helpers.
 */
#ifndef PSTRAIN_TEST_PNGTEST_H
#define PSTRAIN_TEST_PNGTEST_H

#include <png.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

typedef struct pt_buf {
    uint8_t *p;
    size_t n, cap;
} pt_buf;

static inline void pt_write_cb(png_structp png, png_bytep d, size_t n)
{
    pt_buf *b = png_get_io_ptr(png);
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static inline void pt_flush_cb(png_structp png)
{
    (void)png;
}

/* A PNG in memory. `data` holds height rows of `stride` bytes in libpng's
 * packed form (sub-byte samples packed MSB first, 16-bit big endian).
 * Optional: palette (npal entries), tRNS alpha per palette index (ntrans),
 * tRNS colour key (trans_color). Aborts on a libpng error (test bug). */
static inline pt_buf pt_make(int w, int h, int depth, int ctype, int interlace, const uint8_t *data,
                             size_t stride, const png_color *pal, int npal, const uint8_t *trans,
                             int ntrans, const png_color_16 *trans_color)
{
    pt_buf b = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (!png || !info || setjmp(png_jmpbuf(png))) {
        fprintf(stderr, "pt_make: libpng error\n");
        abort();
    }
    png_set_write_fn(png, &b, pt_write_cb, pt_flush_cb);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, ctype,
                 interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (pal) png_set_PLTE(png, info, pal, npal);
    if (trans || trans_color)
        png_set_tRNS(png, info, trans, ntrans, (png_color_16p)(uintptr_t)trans_color);
    png_write_info(png, info);
    png_bytep *rows = malloc(sizeof(png_bytep) * (size_t)h);
    for (int y = 0; y < h; y++) rows[y] = (png_bytep)(uintptr_t)(data + (size_t)y * stride);
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    return b;
}

/* An 8-bit gray or RGB PNG of h x w x c pixels. */
static inline pt_buf pt_make8(int w, int h, int c, const uint8_t *px)
{
    return pt_make(w, h, 8, c == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, 0, px,
                   (size_t)w * (size_t)c, NULL, 0, NULL, 0, NULL);
}

static inline int pt_save(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return (fclose(f) == 0 && w == n) ? 0 : -1;
}

static inline void pt_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

/* Rewrites IHDR's width/height (bytes 16..23) and fixes IHDR's CRC. */
static inline void pt_set_dims(pt_buf *b, uint32_t w, uint32_t h)
{
    pt_put32(b->p + 16, w);
    pt_put32(b->p + 20, h);
    uint32_t crc = (uint32_t)crc32(0, b->p + 12, 17); /* "IHDR" + 13 data bytes */
    pt_put32(b->p + 29, crc);
}

/* Offset of the first IDAT chunk's data, or 0. */
static inline size_t pt_find_idat(const pt_buf *b)
{
    size_t off = 8;
    while (off + 8 <= b->n) {
        uint32_t len = (uint32_t)b->p[off] << 24 | (uint32_t)b->p[off + 1] << 16 |
                       (uint32_t)b->p[off + 2] << 8 | b->p[off + 3];
        if (!memcmp(b->p + off + 4, "IDAT", 4)) return off + 8;
        off += 12 + len;
    }
    return 0;
}

#endif
