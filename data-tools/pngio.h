/*
 * pngio.h - PNG decoding to 8-bit gray or RGB pixels, and a small encoder.
 *
 * Decoding accepts every PNG variant (libpng does the unpacking):
 *   palette (with or without tRNS), grayscale 1/2/4/8/16-bit, gray+alpha,
 *   RGB, RGBA, 16-bit samples, Adam7 interlaced.
 * and produces H x W x C uint8 pixels (HWC, row-major), C = 1 or 3.
 *
 * Conversions, in this order (all exact integer formulas):
 *  1. Unpacking: palette -> RGB; tRNS (palette or colour key) -> an alpha
 *     channel; 1/2/4-bit gray expanded to 0..255 by libpng (bit replication:
 *     1-bit 1 -> 255, 2-bit 1 -> 85, 4-bit 1 -> 17).
 *  2. 16 -> 8 bits with libpng's png_set_scale_16: out = round(v * 255 / 65535)
 *     (the PNG specification's rule; not the truncating v >> 8).
 *  3. Alpha: PNGIO_ALPHA_BLACK (default) composites on black,
 *     out = round(c * a / 255) = (c * a + 127) / 255 per colour sample;
 *     PNGIO_ALPHA_DROP discards the alpha channel (out = c).
 *  4. Channels: RGB -> gray by ITU-R BT.601 luma weights,
 *     Y = (299 R + 587 G + 114 B + 500) / 1000 (round half up);
 *     gray -> RGB replicates the sample (R = G = B = Y).
 * gAMA, cHRM, sRGB and iCCP are ignored: pixels are the stored sample values,
 * as training pipelines expect. libpng warnings (e.g. a bad ancillary-chunk
 * CRC, which libpng skips) are not reported; errors are.
 *
 * Decompression bombs: an image whose declared width*height exceeds
 * max_pixels is refused after reading IHDR, before any pixel memory is
 * allocated.
 *
 * Thread safety: every call uses its own libpng state; calls in different
 * threads are independent.
 */
#ifndef PSTRAIN_PNGIO_H
#define PSTRAIN_PNGIO_H

#include <stddef.h>
#include <stdint.h>

#include "pstrain/common.h"

/* 64 Mpixel: above any real training image, far below memory trouble. */
#define PNGIO_DEFAULT_MAX_PIXELS (INT64_C(64) * 1024 * 1024)

typedef enum pngio_alpha {
    PNGIO_ALPHA_BLACK = 0, /* composite on black: c * a / 255, rounded */
    PNGIO_ALPHA_DROP,      /* ignore alpha */
} pngio_alpha;

typedef struct pngio_opts {
    int channels;       /* 1 or 3; 0 = the file's own (gray -> 1, palette/colour -> 3) */
    pngio_alpha alpha;  /* what to do with an alpha channel or tRNS */
    int64_t max_pixels; /* refuse width*height above this; 0 = PNGIO_DEFAULT_MAX_PIXELS */
} pngio_opts;

/* A decoded image: height x width x channels bytes, HWC. */
typedef struct pngio_image {
    int height, width, channels;
    uint8_t *pixels; /* owned; free with pngio_image_free */
} pngio_image;

/* What IHDR declares. */
typedef struct pngio_header {
    int height, width;
    int bit_depth;  /* 1, 2, 4, 8 or 16 */
    int color_type; /* PNG_COLOR_TYPE_* */
    int interlaced; /* 1 for Adam7 */
    int channels;   /* natural output channels: 1 for gray (+alpha), 3 for palette/RGB(A) */
} pngio_header;

/* Decodes the PNG in buf[0..n) into `img` (pixels allocated here). On
 * failure returns -1, leaves img empty and puts the reason in `e` (libpng's
 * own message where libpng found it, e.g. "IDAT: CRC error",
 * "unexpected end of file", "not a PNG file (bad signature)"). `o` may be
 * NULL for the defaults (file's channels, alpha on black, default limit). */
int pngio_decode(const uint8_t *buf, size_t n, const pngio_opts *o, pngio_image *img, pst_err *e);

/* Reads and decodes the file at `path`; errors as pngio_decode, prefixed by
 * nothing (the caller names the file). */
int pngio_read(const char *path, const pngio_opts *o, pngio_image *img, pst_err *e);

/* Reads only the signature and IHDR of buf[0..n) (the pixel data is not
 * checked). Applies the max_pixels limit of `o` (may be NULL). */
int pngio_decode_header(const uint8_t *buf, size_t n, const pngio_opts *o, pngio_header *h,
                        pst_err *e);

/* Reads only the signature and IHDR of `path` (cheap; the pixel data is not
 * checked). Applies the max_pixels limit of `o` (may be NULL). */
int pngio_read_header(const char *path, const pngio_opts *o, pngio_header *h, pst_err *e);

/* Frees the pixels; NULL-safe, leaves the image empty. */
void pngio_image_free(pngio_image *img);

/* Writes an 8-bit gray (channels 1) or RGB (channels 3) PNG, HWC pixels,
 * deflate level `level` (0-9, -1 = libpng default). A regular file is
 * written under a temporary name and renamed: a failed write leaves neither
 * a partial file nor a damaged old one. Devices and FIFOs are written in
 * place. Returns 0 or -1 with `e` naming the file. */
int pngio_write(const char *path, const uint8_t *pixels, int height, int width, int channels,
                int level, pst_err *e);

#endif
