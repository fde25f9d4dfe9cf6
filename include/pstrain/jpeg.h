/*
 * pstrain/jpeg.h - JPEG decoding and encoding in memory (libjpeg-turbo).
 *
 * What the data pipeline needs from JPEG files: recognise a file by its
 * content (img_sniff), read its header (jpg_read_info), decode it whole to
 * 8-bit gray or RGB (jpg_decode), decode only a rectangle of it, DCT-scaled
 * (jpg_decode_region: the training-time crop of Inception preprocessing), and
 * write a baseline JPEG (jpg_encode). All of it through the libjpeg API of
 * libjpeg-turbo (Debian's libjpeg62-turbo-dev), buffers in memory only.
 *
 * Pixels. Decoding uses libjpeg-turbo's defaults (the accurate integer IDCT
 * JDCT_ISLOW, fancy upsampling), which is also what PIL (Pillow 9.4) uses, so
 * jpg_decode(..., 3, ...) gives the bytes of
 *     PIL.Image.open(f).convert("RGB")
 * and jpg_decode(..., 1, ...) the bytes of PIL.Image.open(f).convert("L"),
 * for every kind of JPEG: baseline, progressive, arithmetic coding, restart
 * markers, any chroma subsampling (4:4:4, 4:2:2, 4:2:0, ...), grayscale,
 * CMYK and YCCK. In detail:
 *   - colour (YCbCr or RGB) to 3 channels: libjpeg's RGB output;
 *   - grayscale to 1 channel: the samples; to 3: each sample three times;
 *   - CMYK and YCCK (libjpeg turns YCCK into CMYK): like PIL, the samples are
 *     taken as Adobe-inverted (Photoshop's convention; PIL reads every CMYK
 *     JPEG as "CMYK;I" whether or not it has an Adobe marker), so with
 *     c, m, y, k the decoded samples
 *         R = k - ((t + (t >> 8)) >> 8),  t = (255 - c) * k + 128
 *     (PIL's cmyk2rgb on the inverted samples), likewise G from m, B from y;
 *   - colour (and CMYK) to 1 channel: the RGB above, then PIL's "L":
 *         L = (R * 19595 + G * 38470 + B * 7471 + 0x8000) >> 16
 *     (not libjpeg's Y channel: the round trip through RGB differs from Y by
 *     a unit here and there, and PIL's numbers are the reference).
 * Neither the EXIF orientation nor an ICC profile is applied (PIL's
 * Image.open applies neither). test/jpeg/test_jpeg.c checks every case
 * against a decode it does with libjpeg itself; test/jpeg/pil_xcheck.py
 * against PIL.
 *
 * Broken files. Every failure is a return value -1 with a one-line message
 * in `e` giving the reason, libjpeg's where it has one ("Premature end of
 * JPEG file", "not a JPEG file: starts with 0x89 0x50 0x4e, expected 0xff
 * 0xd8 0xff", "empty file (0 bytes)", ...); the caller adds the file name.
 * Nothing is printed, nothing exits, and libjpeg's state is released. Of
 * libjpeg's warnings (the file is damaged but it can go on):
 *   - "Premature end of JPEG file" (truncated) is an error, unless `flags`
 *     has JPG_ALLOW_TRUNCATED: then the rows past the end come back as
 *     libjpeg fills them (grey, or the coarser progressive scans); the other
 *     warnings that the missing data then causes are accepted too;
 *   - bytes between a segment and the next marker ("Corrupt JPEG data: N
 *     extraneous bytes before marker 0xd9"), an unknown JFIF revision, an
 *     unknown Adobe transform code and a bad ICC marker are accepted: they
 *     touch no pixel (ImageNet has such files; PIL decodes them alike);
 *   - any other "Corrupt JPEG data" warning (bad Huffman or arithmetic code,
 *     a premature end of a data segment, a lost restart marker, an
 *     inconsistent progression) is an error: libjpeg goes on with zeroed
 *     coefficients, so the pixels are partly made up. PIL would silently
 *     return them; training on them helps nobody, and pstrain-prep lists the
 *     file as broken with the reason instead.
 * Limits that keep a hostile file from costing much: at most JPG_MAX_PIXELS
 * pixels, at most JPG_MAX_SCANS progressive scans.
 *
 * Thread safety: every call has its own libjpeg state; calls on different
 * threads (with different jpg_region's) run in parallel.
 */
#ifndef PSTRAIN_JPEG_H
#define PSTRAIN_JPEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pstrain/common.h"

typedef enum { IMG_UNKNOWN = 0, IMG_JPEG, IMG_PNG } img_kind;

/* The kind of an image file from its first bytes: JPEG (FF D8 FF) or PNG
 * (its 8-byte signature); IMG_UNKNOWN otherwise, also for fewer bytes. The
 * name of the file plays no part (ImageNet has a PNG named .JPEG). */
img_kind img_sniff(const uint8_t *buf, size_t n);

/* A JPEG's header. colorspace is libjpeg's J_COLOR_SPACE of the file
 * (JCS_GRAYSCALE, JCS_YCbCr, JCS_RGB, JCS_CMYK, JCS_YCCK). */
typedef struct jpg_info {
    int width, height, components;
    int colorspace;
    bool progressive, arithmetic;
} jpg_info;

/* Larger images are refused (2^27: 11585 x 11585, a 134-megapixel photo). */
#define JPG_MAX_PIXELS ((int64_t)1 << 27)
/* More progressive scans are refused (libjpeg-turbo's TurboJPEG API draws the
 * same line against files that cost minutes with millions of tiny scans). */
#define JPG_MAX_SCANS 500

/* Reads only the header (up to the first scan): 0, or -1 with the reason. */
int jpg_read_info(const uint8_t *buf, size_t n, jpg_info *info, pst_err *e);

enum { JPG_ALLOW_TRUNCATED = 1 };

/* Whole image, `channels` 1 (gray) or 3 (RGB), 8-bit interleaved rows of
 * w*channels bytes: the pixels PIL gives (see the top of this file). *out is
 * malloc'd (the caller frees it); on failure *out is NULL. */
int jpg_decode(const uint8_t *buf, size_t n, int channels, int flags, uint8_t **out, int *w, int *h,
               pst_err *e);

/* A decoded rectangle. Zero-initialise it, pass it to any number of
 * jpg_decode_region calls (its buffer is reused and grown: cap bytes), then
 * jpg_region_free. */
typedef struct jpg_region {
    uint8_t *px; /* h rows of w*channels bytes */
    size_t cap;  /* bytes allocated at px */
    int w, h;    /* the rectangle, in pixels of the scaled image */
    int sx, sy;  /* its top-left corner in the scaled image */
    int scale_num;
} jpg_region;

/* Decodes only the source rectangle [x, x+cw) x [y, y+ch) (which must lie in
 * the image, cw, ch >= 1), DCT-scaled by s/8 = scale_num/8 where s is the
 * smallest of 1, 2, 4, 8 with cw*s >= 8*min_w and ch*s >= 8*min_h, i.e. the
 * scaled rectangle is still at least min_w x min_h (s = 8 when none is: the
 * rectangle is smaller than that already). Only these four: libjpeg-turbo
 * has SIMD inverse DCTs for 8x8, 4x4, 2x2 and 1x1 blocks only, and decodes
 * at 3/8, 5/8, 6/8 and 7/8 (scalar code) slower than at 8/8, 7/8 by about
 * 2.5 times (bench/bench_jpeg).
 *
 * The scaled image is the image libjpeg decodes with scale_num = s,
 * scale_denom = 8: ceil(width*s/8) x ceil(height*s/8) pixels, source pixel
 * (X, Y) falling on scaled (X*s/8, Y*s/8). On return r->px holds exactly the
 * scaled pixels [sx, sx+w) x [sy, sy+h) with
 *     sx = floor(x*s/8), w = ceil((x+cw)*s/8) - sx,  sy, h likewise,
 * the smallest block of whole scaled pixels covering the rectangle; the
 * caller maps its crop into it (source x maps to r->px column x*s/8 - sx).
 * Every pixel equals the pixel at the same place of a whole-image decode at
 * the same scale (for s = 8: of jpg_decode), colour conversions included:
 * the decode is widened by a margin where libjpeg's cropping would change
 * the edge columns (fancy upsampling uses the neighbouring chroma column)
 * and cut back to the rectangle. test/jpeg/test_jpeg.c checks it for every
 * subsampling and scale.
 *
 * Work saved: rows above the rectangle are skipped (jpeg_skip_scanlines:
 * entropy-decoded only, no IDCT), rows below are never read, columns are
 * cropped to whole iMCUs (jpeg_crop_scanline), and the IDCT works at the
 * scaled size. Progressive files must still be entropy-decoded whole. No
 * allocation when r->cap suffices. Errors as jpg_decode (then r keeps its
 * buffer for the next call; its other fields are undefined); damage in rows
 * the rectangle does not need may pass unnoticed (sequential files). */
int jpg_decode_region(const uint8_t *buf, size_t n, int channels, int x, int y, int cw, int ch,
                      int min_w, int min_h, int flags, jpg_region *r, pst_err *e);

/* Frees r->px and zeroes *r; NULL-safe. */
void jpg_region_free(jpg_region *r);

/* A baseline JPEG of an RGB (channels 3) or gray (1) image of w x h pixels
 * (1..65500 each), quality 1..100: libjpeg's defaults (4:2:0 for RGB,
 * standard Huffman tables, a JFIF header). *out is malloc'd (the caller
 * frees it), *n its size; on failure *out is NULL. */
int jpg_encode(const uint8_t *px, int w, int h, int channels, int quality, uint8_t **out, size_t *n,
               pst_err *e);

#endif
