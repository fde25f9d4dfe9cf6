/*
 * jpeg.c - JPEG decoding and encoding in memory through libjpeg-turbo's
 * libjpeg API (pstrain/jpeg.h has the contract).
 *
 * libjpeg reports errors by calling error_exit, which must not return: ours
 * longjmps back to the one setjmp of each public call (guarded()), which then
 * destroys the libjpeg object and returns -1 with libjpeg's message. So that
 * no local variable lives across the setjmp (-Wclobbered), the work runs in
 * a separate function on a struct (dec_job/enc_job) that stays in memory.
 */
#include "pstrain/jpeg.h"

#include <limits.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include <jerror.h>

/* ---- errors --------------------------------------------------------------- */

typedef struct jpg_errmgr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int flags;
    bool truncated; /* saw "Premature end of JPEG file" (accepted) */
    char msg[JMSG_LENGTH_MAX + 64];
} jpg_errmgr;

static void jpg_throw(j_common_ptr c) __attribute__((noreturn));
static void jpg_throw(j_common_ptr c)
{
    jpg_errmgr *m = (jpg_errmgr *)c->err;
    longjmp(m->jb, 1);
}

/* Our own reasons (limits, bad arguments found after the header): libjpeg's
 * state is cleaned up like after one of its errors. */
static void jpg_fail(j_common_ptr c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
static void jpg_fail(j_common_ptr c, const char *fmt, ...)
{
    jpg_errmgr *m = (jpg_errmgr *)c->err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->msg, sizeof m->msg, fmt, ap);
    va_end(ap);
    jpg_throw(c);
}

static void on_error_exit(j_common_ptr c)
{
    jpg_errmgr *m = (jpg_errmgr *)c->err;
    c->err->format_message(c, m->msg);
    jpg_throw(c);
}

/* Warnings that touch no pixel: accepted (see pstrain/jpeg.h). */
static bool warning_is_benign(int code)
{
    return code == JWRN_EXTRANEOUS_DATA || code == JWRN_JFIF_MAJOR || code == JWRN_ADOBE_XFORM ||
           code == JWRN_BOGUS_ICC;
}

/* Level -1 is a warning (the data is damaged, libjpeg would go on); levels
 * >= 0 are trace messages, never shown. */
static void on_emit_message(j_common_ptr c, int level)
{
    jpg_errmgr *m = (jpg_errmgr *)c->err;
    if (level >= 0) return;
    c->err->num_warnings++;
    int code = c->err->msg_code;
    if (code == JWRN_JPEG_EOF && (m->flags & JPG_ALLOW_TRUNCATED)) {
        m->truncated = true;
        return;
    }
    /* after an accepted truncation, the damage it causes (a data segment
     * that ends early) is part of it */
    if (warning_is_benign(code) || m->truncated) return;
    c->err->format_message(c, m->msg);
    jpg_throw(c);
}

static void on_output_message(j_common_ptr c)
{
    (void)c;
}

static void errmgr_init(jpg_errmgr *m, int flags)
{
    memset(m, 0, sizeof *m);
    jpeg_std_error(&m->pub);
    m->pub.error_exit = on_error_exit;
    m->pub.emit_message = on_emit_message;
    m->pub.output_message = on_output_message;
    m->flags = flags;
}

/* Called by libjpeg between passes over the input: stops files with absurd
 * numbers of progressive scans (each costs a pass over all coefficients). */
static void on_progress(j_common_ptr c)
{
    if (!c->is_decompressor) return;
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (d->input_scan_number > JPG_MAX_SCANS)
        jpg_fail(c, "more than %d progressive scans", JPG_MAX_SCANS);
}

/* ---- sniffing and the header ---------------------------------------------- */

img_kind img_sniff(const uint8_t *buf, size_t n)
{
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (buf == NULL) return IMG_UNKNOWN;
    if (n >= 3 && buf[0] == 0xFF && buf[1] == 0xD8 && buf[2] == 0xFF) return IMG_JPEG;
    if (n >= 8 && memcmp(buf, png_sig, 8) == 0) return IMG_PNG;
    return IMG_UNKNOWN;
}

/* One libjpeg decompression: the state every decode shares. */
typedef struct dec_job {
    struct jpeg_decompress_struct cinfo;
    jpg_errmgr err;
    struct jpeg_progress_mgr progress;
    const uint8_t *buf;
    size_t n;
    /* region decodes */
    int channels, x, y, cw, ch, min_w, min_h;
    bool whole;
    jpg_region *r;
    jpg_info *info;
} dec_job;

/* Runs body(job) with libjpeg's errors caught: 0, or -1 with the message in
 * `e`. The decompressor is destroyed either way. */
static int dec_guarded(dec_job *job, void (*body)(dec_job *), pst_err *e)
{
    job->cinfo.err = &job->err.pub;
    if (setjmp(job->err.jb)) {
        jpeg_destroy_decompress(&job->cinfo);
        return pst_fail(e, "%s", job->err.msg);
    }
    jpeg_create_decompress(&job->cinfo);
    job->progress.progress_monitor = on_progress;
    job->cinfo.progress = &job->progress;
    body(job);
    jpeg_destroy_decompress(&job->cinfo);
    return 0;
}

static void read_header(dec_job *job)
{
    j_decompress_ptr c = &job->cinfo;
    if (job->n > ULONG_MAX) jpg_fail((j_common_ptr)c, "file of %zu bytes too large", job->n);
    jpeg_mem_src(c, job->buf, (unsigned long)job->n);
    jpeg_read_header(c, TRUE);
    if ((int64_t)c->image_width * c->image_height > JPG_MAX_PIXELS)
        jpg_fail((j_common_ptr)c, "image of %ux%u pixels is larger than the limit of %lld pixels",
                 c->image_width, c->image_height, (long long)JPG_MAX_PIXELS);
}

static void info_body(dec_job *job)
{
    read_header(job);
    j_decompress_ptr c = &job->cinfo;
    job->info->width = (int)c->image_width;
    job->info->height = (int)c->image_height;
    job->info->components = c->num_components;
    job->info->colorspace = (int)c->jpeg_color_space;
    job->info->progressive = c->progressive_mode;
    job->info->arithmetic = c->arith_code;
}

static int check_input(const uint8_t *buf, size_t n, pst_err *e)
{
    if (n == 0) return pst_fail(e, "empty file (0 bytes), expected a JPEG image");
    if (img_sniff(buf, n) != IMG_JPEG) {
        if (n < 3) return pst_fail(e, "not a JPEG file: only %zu bytes", n);
        return pst_fail(e,
                        "not a JPEG file: starts with 0x%02x 0x%02x 0x%02x, expected 0xff 0xd8 "
                        "0xff",
                        buf[0], buf[1], buf[2]);
    }
    return 0;
}

/* A decoding job over buf[0, n) with the error manager's flags; the caller
 * fills in what its body needs. */
static void dec_job_init(dec_job *job, const uint8_t *buf, size_t n, int channels, int flags)
{
    memset(job, 0, sizeof *job);
    errmgr_init(&job->err, flags);
    job->buf = buf;
    job->n = n;
    job->channels = channels;
}

int jpg_read_info(const uint8_t *buf, size_t n, jpg_info *info, pst_err *e)
{
    memset(info, 0, sizeof *info);
    if (check_input(buf, n, e) < 0) return -1;
    dec_job job;
    dec_job_init(&job, buf, n, 0, 0);
    job.info = info;
    return dec_guarded(&job, info_body, e);
}

/* ---- decoding ------------------------------------------------------------- */

/* PIL's cmyk2rgb (Pillow 9.4, libImaging/Convert.c) on samples it first
 * inverted (JpegImagePlugin reads CMYK JPEGs as "CMYK;I"):
 *     nk = 255 - in[3];
 *     out[0] = CLIP8(nk - MULDIV255(in[0], nk, tmp));   likewise 1, 2
 *     MULDIV255(a, b, tmp) = (tmp = (a) * (b) + 128, ((((tmp) >> 8) + (tmp)) >> 8))
 * With in = 255 - (libjpeg's sample): nk = k and in[0] = 255 - c. The result
 * is never below 0 nor above 255, so CLIP8 does nothing. */
static inline uint8_t cmyk_channel(int c, int k)
{
    int t = (255 - c) * k + 128;
    return (uint8_t)(k - (((t >> 8) + t) >> 8));
}

/* PIL's "L" from RGB (Convert.c: L24(rgb) >> 16). */
static inline uint8_t rgb_to_l(int r, int g, int b)
{
    return (uint8_t)((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
}

/* Cuts the decoded rows (ww pixels of ncomp samples, the wanted pixels
 * starting at column lead) down to tw pixels of `channels`, converting
 * colour on the way, in place: every output byte lies at or before the bytes
 * it is made from, so one forward pass is safe. */
static void convert_rows(uint8_t *px, int rows, int ww, int ncomp, int lead, int tw, int channels)
{
    size_t in_stride = (size_t)ww * (size_t)ncomp, out_stride = (size_t)tw * (size_t)channels;
    if (ncomp == channels && lead == 0 && ww == tw) return;
    for (int i = 0; i < rows; i++) {
        const uint8_t *s = px + (size_t)i * in_stride + (size_t)lead * (size_t)ncomp;
        uint8_t *d = px + (size_t)i * out_stride;
        if (ncomp == channels) {
            memmove(d, s, out_stride);
        } else if (ncomp == 4 && channels == 3) {
            for (int j = 0; j < tw; j++, s += 4, d += 3) {
                int k = s[3];
                uint8_t r = cmyk_channel(s[0], k), g = cmyk_channel(s[1], k),
                        b = cmyk_channel(s[2], k);
                d[0] = r, d[1] = g, d[2] = b;
            }
        } else if (ncomp == 4) {
            for (int j = 0; j < tw; j++, s += 4, d++) {
                int k = s[3];
                *d = rgb_to_l(cmyk_channel(s[0], k), cmyk_channel(s[1], k), cmyk_channel(s[2], k));
            }
        } else { /* RGB to L */
            for (int j = 0; j < tw; j++, s += 3, d++) *d = rgb_to_l(s[0], s[1], s[2]);
        }
    }
}

/* The scale s of pstrain/jpeg.h: the smallest of 1/8, 2/8, 4/8, 8/8 keeping
 * the rectangle at least min_w x min_h (the scales libjpeg-turbo's SIMD
 * IDCTs cover; the others are slower than no scaling). */
static int region_scale(int cw, int ch, int min_w, int min_h)
{
    for (int s = 1; s < 8; s *= 2)
        if ((int64_t)cw * s >= (int64_t)min_w * 8 && (int64_t)ch * s >= (int64_t)min_h * 8)
            return s;
    return 8;
}

static int ceil_div(int64_t a, int64_t b)
{
    return (int)((a + b - 1) / b);
}

/* The decoder's parameters for a decode at scale s/8 into `channels`
 * channels; returns the components it will give. CMYK (and YCCK, which
 * libjpeg turns into CMYK) is converted by us, as PIL does; gray to RGB and
 * YCbCr to RGB by libjpeg. */
static int set_decode_params(j_decompress_ptr c, int s, int channels)
{
    c->scale_num = (unsigned)s;
    c->scale_denom = 8;
    /* libjpeg's defaults, set anyway: PIL decodes with them, and the pixels
     * depend on them (the fast IDCTs and the merged upsampler differ) */
    c->dct_method = JDCT_ISLOW;
    c->do_fancy_upsampling = TRUE;
    c->do_block_smoothing = TRUE;
    if (c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK) {
        c->out_color_space = JCS_CMYK;
        return 4;
    }
    if (channels == 1 && c->jpeg_color_space == JCS_GRAYSCALE) {
        c->out_color_space = JCS_GRAYSCALE;
        return 1;
    }
    c->out_color_space = JCS_RGB;
    return 3;
}

static void region_body(dec_job *job)
{
    j_decompress_ptr c = &job->cinfo;
    j_common_ptr cc = (j_common_ptr)c;
    jpg_region *r = job->r;
    read_header(job);
    int W = (int)c->image_width, H = (int)c->image_height;
    if (job->whole) {
        job->x = job->y = 0;
        job->cw = W, job->ch = H;
    } else if (job->x < 0 || job->y < 0 || job->cw < 1 || job->ch < 1 ||
               (int64_t)job->x + job->cw > W || (int64_t)job->y + job->ch > H) {
        jpg_fail(cc, "region %dx%d at (%d, %d) does not lie in the %dx%d image", job->cw, job->ch,
                 job->x, job->y, W, H);
    }
    int s = job->whole ? 8 : region_scale(job->cw, job->ch, job->min_w, job->min_h);
    const int ncomp = set_decode_params(c, s, job->channels);
    jpeg_start_decompress(c);
    if (c->output_components != ncomp)
        jpg_fail(cc, "decoder gave %d components, expected %d", c->output_components, ncomp);

    /* The wanted scaled rectangle [sx0, sx1) x [sy0, sy1). */
    int OW = (int)c->output_width, OH = (int)c->output_height;
    int sx0 = (int)((int64_t)job->x * s / 8), sy0 = (int)((int64_t)job->y * s / 8);
    int sx1 = ceil_div(((int64_t)job->x + job->cw) * s, 8);
    int sy1 = ceil_div(((int64_t)job->y + job->ch) * s, 8);
    if (sx1 > OW) sx1 = OW;
    if (sy1 > OH) sy1 = OH;

    /* Columns: jpeg_crop_scanline moves the left edge back to an iMCU border
     * and decodes the window as if it were the whole image, so fancy
     * upsampling replicates chroma at the window's edges where the full
     * decode would blend in the neighbouring column: the window's first and
     * last columns can differ from the full decode. A margin of one pixel on
     * both sides keeps them out of the rectangle. And libjpeg upsamples a
     * component of 2 columns or fewer by plain replication (jdsample.c
     * wants more for its triangle filter), so the window is at least
     * JPG_MIN_WINDOW columns wide: over 2 chroma columns even at 4:1:1. */
    enum { JPG_MIN_WINDOW = 16 };
    int cx0 = sx0 > 0 ? sx0 - 1 : 0, cx1 = sx1 < OW ? sx1 + 1 : OW;
    if (cx1 - cx0 < JPG_MIN_WINDOW) cx1 = cx0 + JPG_MIN_WINDOW < OW ? cx0 + JPG_MIN_WINDOW : OW;
    if (cx1 - cx0 < JPG_MIN_WINDOW) cx0 = cx1 - JPG_MIN_WINDOW > 0 ? cx1 - JPG_MIN_WINDOW : 0;
    JDIMENSION xoff = 0, ww = (JDIMENSION)OW;
    if (cx0 > 0 || cx1 < OW) {
        xoff = (JDIMENSION)cx0;
        ww = (JDIMENSION)(cx1 - cx0);
        jpeg_crop_scanline(c, &xoff, &ww);
    }
    int lead = sx0 - (int)xoff, tw = sx1 - sx0, th = sy1 - sy0;
    if (lead < 0 || (int64_t)lead + tw > (int64_t)ww)
        jpg_fail(cc, "cropped window [%u, +%u) misses columns [%d, %d)", xoff, ww, sx0, sx1);

    size_t need = (size_t)ww * (size_t)ncomp * (size_t)th;
    if (need > r->cap) {
        free(r->px);
        r->px = NULL;
        r->cap = 0;
        r->px = pst_malloc(need);
        r->cap = need;
    }
    if (sy0 > 0 && jpeg_skip_scanlines(c, (JDIMENSION)sy0) != (JDIMENSION)sy0)
        jpg_fail(cc, "could not skip to row %d of %d", sy0, OH);

    size_t stride = (size_t)ww * (size_t)ncomp;
    JSAMPROW rows[16];
    while ((int)c->output_scanline < sy1) {
        int done = (int)c->output_scanline - sy0;
        int want = sy1 - (int)c->output_scanline;
        if (want > 16) want = 16;
        for (int i = 0; i < want; i++) rows[i] = r->px + (size_t)(done + i) * stride;
        if (jpeg_read_scanlines(c, rows, (JDIMENSION)want) == 0)
            jpg_fail(cc, "decoder stopped at row %u of %d", c->output_scanline, OH);
    }
    /* Rows below the rectangle are never decoded: no jpeg_finish_decompress,
     * which would read the rest of the file. */
    jpeg_abort_decompress(c);

    convert_rows(r->px, th, (int)ww, ncomp, lead, tw, job->channels);
    r->w = tw;
    r->h = th;
    r->sx = sx0;
    r->sy = sy0;
    r->scale_num = s;
}

static int check_channels(int channels, pst_err *e)
{
    if (channels != 1 && channels != 3)
        return pst_fail(e, "JPEG decode: %d channels asked for, expected 1 or 3", channels);
    return 0;
}

int jpg_decode_region(const uint8_t *buf, size_t n, int channels, int x, int y, int cw, int ch,
                      int min_w, int min_h, int flags, jpg_region *r, pst_err *e)
{
    if (check_channels(channels, e) < 0 || check_input(buf, n, e) < 0) return -1;
    dec_job job;
    dec_job_init(&job, buf, n, channels, flags);
    job.x = x, job.y = y, job.cw = cw, job.ch = ch;
    job.min_w = min_w, job.min_h = min_h;
    job.r = r;
    return dec_guarded(&job, region_body, e);
}

void jpg_region_free(jpg_region *r)
{
    if (r == NULL) return;
    free(r->px);
    memset(r, 0, sizeof *r);
}

int jpg_decode(const uint8_t *buf, size_t n, int channels, int flags, uint8_t **out, int *w, int *h,
               pst_err *e)
{
    *out = NULL;
    *w = *h = 0;
    if (check_channels(channels, e) < 0 || check_input(buf, n, e) < 0) return -1;
    jpg_region r = {0};
    dec_job job;
    dec_job_init(&job, buf, n, channels, flags);
    job.whole = true;
    job.r = &r;
    if (dec_guarded(&job, region_body, e) < 0) {
        jpg_region_free(&r);
        return -1;
    }
    *out = r.px; /* CMYK decodes leave a quarter unused: not worth a copy */
    *w = r.w;
    *h = r.h;
    return 0;
}

/* ---- encoding ------------------------------------------------------------- */

/* A destination that grows a malloc'd buffer we own (jpeg_mem_dest's buffer
 * would leak when libjpeg fails half-way). */
typedef struct mem_dest {
    struct jpeg_destination_mgr pub;
    uint8_t *buf;
    size_t cap;
} mem_dest;

static void dest_init(j_compress_ptr c)
{
    mem_dest *d = (mem_dest *)c->dest;
    d->pub.next_output_byte = d->buf;
    d->pub.free_in_buffer = d->cap;
}

static boolean dest_empty(j_compress_ptr c)
{
    mem_dest *d = (mem_dest *)c->dest;
    size_t used = d->cap; /* libjpeg calls this when the buffer is full */
    d->buf = pst_realloc(d->buf, d->cap * 2);
    d->cap *= 2;
    d->pub.next_output_byte = d->buf + used;
    d->pub.free_in_buffer = d->cap - used;
    return TRUE;
}

static void dest_term(j_compress_ptr c)
{
    (void)c;
}

typedef struct enc_job {
    struct jpeg_compress_struct cinfo;
    jpg_errmgr err;
    mem_dest dest;
    const uint8_t *px;
    int w, h, channels, quality;
} enc_job;

static void encode_body(enc_job *job)
{
    j_compress_ptr c = &job->cinfo;
    job->dest.cap = 4096 + (size_t)job->w * (size_t)job->h * (size_t)job->channels / 4;
    job->dest.buf = pst_malloc(job->dest.cap);
    job->dest.pub.init_destination = dest_init;
    job->dest.pub.empty_output_buffer = dest_empty;
    job->dest.pub.term_destination = dest_term;
    c->dest = &job->dest.pub;
    c->image_width = (JDIMENSION)job->w;
    c->image_height = (JDIMENSION)job->h;
    c->input_components = job->channels;
    c->in_color_space = job->channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
    jpeg_set_defaults(c);
    jpeg_set_quality(c, job->quality, TRUE);
    jpeg_start_compress(c, TRUE);
    size_t stride = (size_t)job->w * (size_t)job->channels;
    while (c->next_scanline < c->image_height) {
        JSAMPROW row = (JSAMPROW)(job->px + (size_t)c->next_scanline * stride);
        jpeg_write_scanlines(c, &row, 1);
    }
    jpeg_finish_compress(c);
}

int jpg_encode(const uint8_t *px, int w, int h, int channels, int quality, uint8_t **out, size_t *n,
               pst_err *e)
{
    *out = NULL;
    *n = 0;
    if (channels != 1 && channels != 3)
        return pst_fail(e, "JPEG encode: %d channels, expected 1 or 3", channels);
    if (w < 1 || h < 1 || w > JPEG_MAX_DIMENSION || h > JPEG_MAX_DIMENSION)
        return pst_fail(e, "JPEG encode: image of %dx%d pixels, expected 1..%d each", w, h,
                        (int)JPEG_MAX_DIMENSION);
    if (quality < 1 || quality > 100)
        return pst_fail(e, "JPEG encode: quality %d, expected 1..100", quality);
    enc_job job;
    memset(&job, 0, sizeof job);
    errmgr_init(&job.err, 0);
    job.px = px;
    job.w = w, job.h = h, job.channels = channels, job.quality = quality;
    job.cinfo.err = &job.err.pub;
    if (setjmp(job.err.jb)) {
        jpeg_destroy_compress(&job.cinfo);
        free(job.dest.buf);
        return pst_fail(e, "JPEG encode: %s", job.err.msg);
    }
    jpeg_create_compress(&job.cinfo);
    encode_body(&job);
    *n = job.dest.cap - job.dest.pub.free_in_buffer;
    *out = job.dest.buf;
    jpeg_destroy_compress(&job.cinfo);
    return 0;
}
