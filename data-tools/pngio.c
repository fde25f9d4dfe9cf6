/* pngio.c - PNG decoding (every variant) to 8-bit gray/RGB, and encoding. */
#include "data-tools/pngio.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <png.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* libpng reports through callbacks; this carries the message back out of
 * the longjmp, and the input buffer for the read callback. */
typedef struct pngio_ctx {
    const uint8_t *buf;
    size_t n, pos;
    char msg[256];
} pngio_ctx;

static void on_error(png_structp png, png_const_charp msg)
{
    pngio_ctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof c->msg, "%s", msg && *msg ? msg : "libpng error");
    png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
    /* Warnings (bad ancillary chunks, odd profiles) do not make the pixels
     * wrong; libpng has already skipped what it could not use. */
    (void)png, (void)msg;
}

static void on_read(png_structp png, png_bytep out, size_t len)
{
    pngio_ctx *c = png_get_io_ptr(png);
    if (len > c->n - c->pos) png_error(png, "unexpected end of file (truncated PNG)");
    memcpy(out, c->buf + c->pos, len);
    c->pos += len;
}

/* Output channels for a colour type: gray (+alpha) -> 1, the rest -> 3. */
static int natural_channels(int color_type)
{
    return (color_type & PNG_COLOR_MASK_COLOR) ? 3 : 1;
}

/* Converts `raw` (8-bit, nin = 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA) to
 * `out` with nout = 1 or 3 channels, by the rules in pngio.h. */
static void convert(const uint8_t *restrict raw, int nin, uint8_t *restrict out, int nout,
                    size_t npix, pngio_alpha alpha)
{
    bool has_alpha = nin == 2 || nin == 4;
    bool color = nin >= 3;
    for (size_t i = 0; i < npix; i++) {
        const uint8_t *p = raw + i * (size_t)nin;
        unsigned v[3];
        int nc = color ? 3 : 1;
        for (int k = 0; k < nc; k++) v[k] = p[k];
        if (has_alpha && alpha == PNGIO_ALPHA_BLACK) {
            unsigned a = p[nc];
            for (int k = 0; k < nc; k++) v[k] = (v[k] * a + 127) / 255;
        }
        uint8_t *q = out + i * (size_t)nout;
        if (nout == 1) {
            q[0] = (uint8_t)(color ? (299 * v[0] + 587 * v[1] + 114 * v[2] + 500) / 1000 : v[0]);
        } else if (color) {
            q[0] = (uint8_t)v[0], q[1] = (uint8_t)v[1], q[2] = (uint8_t)v[2];
        } else {
            q[0] = q[1] = q[2] = (uint8_t)v[0];
        }
    }
}

/* The decoder behind pngio_decode and pngio_read_header: with img == NULL
 * it stops after IHDR. */
static int decode(const uint8_t *buf, size_t n, const pngio_opts *opts, pngio_header *hdr,
                  pngio_image *img, pst_err *e)
{
    const pngio_opts o = opts ? *opts : (pngio_opts){0};
    const int64_t max_pixels = o.max_pixels > 0 ? o.max_pixels : PNGIO_DEFAULT_MAX_PIXELS;
    if (img) memset(img, 0, sizeof *img);
    if (n == 0) return pst_fail(e, "empty file (0 bytes)");
    if (n < 8 || png_sig_cmp(buf, 0, 8) != 0) return pst_fail(e, "not a PNG file (bad signature)");

    pngio_ctx ctx = {.buf = buf, .n = n};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx, on_error, on_warning);
    if (!png) return pst_fail(e, "png_create_read_struct failed (out of memory?)");
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return pst_fail(e, "png_create_info_struct failed (out of memory?)");
    }
    /* Written after setjmp and read after longjmp: volatile. */
    uint8_t *volatile raw = NULL;
    png_bytep *volatile rows = NULL;
    if (setjmp(png_jmpbuf(png))) {
        free(raw);
        free(rows);
        png_destroy_read_struct(&png, &info, NULL);
        if (img) memset(img, 0, sizeof *img);
        return pst_fail(e, "%s", ctx.msg);
    }
    png_set_read_fn(png, &ctx, on_read);
    /* Our own width*height limit below replaces libpng's per-side one. */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_read_info(png, info);

    png_uint_32 w32, h32;
    int depth, ctype, ilace;
    png_get_IHDR(png, info, &w32, &h32, &depth, &ctype, &ilace, NULL, NULL);
    pngio_header h = {.height = (int)h32,
                      .width = (int)w32,
                      .bit_depth = depth,
                      .color_type = ctype,
                      .interlaced = ilace != PNG_INTERLACE_NONE,
                      .channels = natural_channels(ctype)};
    if (hdr) *hdr = h;
    if ((int64_t)w32 * (int64_t)h32 > max_pixels) {
        snprintf(ctx.msg, sizeof ctx.msg,
                 "declared size %ux%u = %lld pixels exceeds the limit of %lld "
                 "(decompression bomb?; raise it with --max-pixels)",
                 (unsigned)w32, (unsigned)h32, (long long)w32 * (long long)h32,
                 (long long)max_pixels);
        png_longjmp(png, 1);
    }
    if (!img) {
        png_destroy_read_struct(&png, &info, NULL);
        return 0;
    }

    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
    if (depth == 16) png_set_scale_16(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);

    int nin = png_get_channels(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    if (png_get_bit_depth(png, info) != 8 || nin < 1 || nin > 4 || rowbytes != w32 * (size_t)nin) {
        snprintf(ctx.msg, sizeof ctx.msg, "unsupported layout after transforms (%d channels)", nin);
        png_longjmp(png, 1);
    }
    raw = pst_malloc(rowbytes * h32);
    rows = pst_malloc(sizeof(png_bytep) * h32);
    for (png_uint_32 y = 0; y < h32; y++) rows[y] = raw + y * rowbytes;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);

    int nout = o.channels > 0 ? o.channels : h.channels;
    size_t npix = (size_t)w32 * h32;
    img->height = h.height, img->width = h.width, img->channels = nout;
    if (nin == nout) {
        img->pixels = raw;
    } else {
        img->pixels = pst_malloc(npix * (size_t)nout);
        convert(raw, nin, img->pixels, nout, npix, o.alpha);
        free(raw);
    }
    return 0;
}

int pngio_decode(const uint8_t *buf, size_t n, const pngio_opts *o, pngio_image *img, pst_err *e)
{
    assert(img);
    assert(!o || o->channels == 0 || o->channels == 1 || o->channels == 3);
    return decode(buf, n, o, NULL, img, e);
}

/* Reads the whole file into a fresh buffer. */
static int slurp(const char *path, uint8_t **out, size_t *n, pst_err *e)
{
    *out = NULL, *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pst_fail(e, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return pst_fail(e, "cannot stat: %s", strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return pst_fail(e, "not a regular file");
    }
    size_t size = (size_t)st.st_size, got = 0;
    uint8_t *buf = pst_malloc(size);
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int err = r < 0 ? errno : 0;
            free(buf);
            close(fd);
            return pst_fail(e, "read failed: %s", err ? strerror(err) : "file shrank");
        }
        got += (size_t)r;
    }
    close(fd);
    *out = buf, *n = size;
    return 0;
}

int pngio_read(const char *path, const pngio_opts *o, pngio_image *img, pst_err *e)
{
    assert(img);
    memset(img, 0, sizeof *img);
    uint8_t *buf;
    size_t n;
    if (slurp(path, &buf, &n, e) < 0) return -1;
    int rc = pngio_decode(buf, n, o, img, e);
    free(buf);
    return rc;
}

int pngio_decode_header(const uint8_t *buf, size_t n, const pngio_opts *o, pngio_header *h,
                        pst_err *e)
{
    return decode(buf, n, o, h, NULL, e);
}

int pngio_read_header(const char *path, const pngio_opts *o, pngio_header *h, pst_err *e)
{
    uint8_t *buf;
    size_t n;
    if (slurp(path, &buf, &n, e) < 0) return -1;
    int rc = decode(buf, n, o, h, NULL, e);
    free(buf);
    return rc;
}

void pngio_image_free(pngio_image *img)
{
    if (!img) return;
    free(img->pixels);
    memset(img, 0, sizeof *img);
}

/* Encodes the image into the open stream `f`; `path` names it in messages. */
static int write_stream(FILE *f, const char *path, const uint8_t *pixels, int height, int width,
                        int channels, int level, pst_err *e)
{
    pngio_ctx ctx = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &ctx, on_error, on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        return pst_fail(e, "%s: libpng write setup failed (out of memory?)", path);
    }
    png_bytep *volatile rows = NULL;
    if (setjmp(png_jmpbuf(png))) {
        free(rows);
        png_destroy_write_struct(&png, &info);
        return pst_fail(e, "%s: writing PNG: %s", path, ctx.msg);
    }
    png_init_io(png, f);
    if (level >= 0) png_set_compression_level(png, PST_MIN(level, 9));
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8,
                 channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    rows = pst_malloc(sizeof(png_bytep) * (size_t)height);
    size_t stride = (size_t)width * (size_t)channels;
    for (int y = 0; y < height; y++) rows[y] = (png_bytep)(pixels + (size_t)y * stride);
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    if (fflush(f) != 0 || ferror(f))
        return pst_fail(e, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

int pngio_write(const char *path, const uint8_t *pixels, int height, int width, int channels,
                int level, pst_err *e)
{
    assert(channels == 1 || channels == 3);
    assert(height > 0 && width > 0);
    /* A regular file (or a new one) is written under a temporary name and
     * renamed, so a failure leaves no partial file and keeps an existing
     * one. Anything else (/dev/stdout, a FIFO, /dev/full) is written in
     * place and never removed: unlinking a device node after a failed
     * write would destroy it. */
    char tmp[4200];
    int renamed; /* exclusively created temporary, or a device in place */
    FILE *f = pst_out_fopen(path, "wb", tmp, sizeof tmp, &renamed);
    if (!f) return pst_fail(e, "%s: cannot create: %s", path, strerror(errno));
    int rc = write_stream(f, path, pixels, height, width, channels, level, e);
    if (fclose(f) != 0 && rc == 0) rc = pst_fail(e, "%s: close failed: %s", path, strerror(errno));
    if (rc == 0 && renamed && rename(tmp, path) != 0)
        rc = pst_fail(e, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
    if (rc < 0 && renamed) remove(tmp);
    return rc;
}
