/*
 * prep_decode.c - one image file to what `pstrain-prep images` stores, and
 * the pool of threads that does it for a whole tree.
 *
 * The decoder is chosen by the file's magic bytes (img_sniff), never by its
 * name: a PNG named .JPEG is decoded as a PNG.
 *
 *  pixels   JPEG: jpg_decode (libjpeg-turbo, accurate IDCT, fancy upsampling:
 *           PIL's pixels), PNG: pngio; then resize_u8 to --size.
 *  encoded  JPEG whose shorter side is within --max-side (or no --max-side):
 *           the file's own bytes. It is still decoded, DCT-scaled to 1/8
 *           (jpg_decode_region with a 1x1 minimum: every coefficient is
 *           entropy-decoded, so a corrupt file is caught here, for an eighth
 *           of the IDCT work); those pixels feed the train mean/std (block
 *           means: the mean is the full image's, the std slightly lower).
 *           JPEG larger than --max-side: decoded DCT-scaled to the smallest
 *           scale still at least the target, area-resized so that the
 *           shorter side is --max-side, re-encoded at --quality. PNG (any
 *           size): decoded, shrunk the same way when asked, encoded as JPEG.
 *           The mean/std of re-encoded images come from the pixels encoded.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data-tools/prep_images.h"
#include "data-tools/resize.h"
#include "pstrain/jpeg.h"

void img_result_free(img_result *r)
{
    if (!r) return;
    free(r->px);
    free(r->jpeg);
    r->px = NULL, r->jpeg = NULL;
}

int img_read_file(const char *path, uint8_t **buf, size_t *n, pst_err *e)
{
    *buf = NULL, *n = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return pst_fail(e, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int err = errno;
        close(fd);
        return pst_fail(e, "cannot stat: %s", strerror(err));
    }
    /* one byte more than the size, so that a file read whole ends with a
     * read of 0 bytes into spare room; a file that grew meanwhile (or whose
     * size was unknown) grows the buffer */
    size_t cap = (st.st_size > 0 ? (size_t)st.st_size : 4095) + 1, got = 0;
    uint8_t *p = pst_malloc(cap);
    for (;;) {
        if (got == cap) p = pst_realloc(p, cap *= 2);
        ssize_t r = read(fd, p + got, cap - got);
        if (r == 0) break;
        if (r < 0) {
            if (errno == EINTR) continue;
            int err = errno;
            free(p);
            close(fd);
            return pst_fail(e, "read error: %s", strerror(err));
        }
        got += (size_t)r;
    }
    close(fd);
    *buf = p, *n = got;
    return 0;
}

static int not_an_image(const uint8_t *buf, size_t n, pst_err *e)
{
    if (n == 0) return pst_fail(e, "empty file (0 bytes)");
    char hex[3 * 4 + 1] = "";
    for (size_t i = 0; i < PST_MIN(n, (size_t)4); i++)
        snprintf(hex + 3 * i, sizeof hex - 3 * i, "%s%02x", i ? " " : "", buf[i]);
    return pst_fail(e, "not a JPEG or PNG file (starts with bytes %s)", hex);
}

static int check_pixels(int w, int h, int64_t max_pixels, pst_err *e)
{
    int64_t lim = max_pixels > 0 ? max_pixels : PNGIO_DEFAULT_MAX_PIXELS;
    if ((int64_t)w * h > lim)
        return pst_fail(e,
                        "declared size %dx%d = %lld pixels exceeds the limit of %lld "
                        "(decompression bomb?; raise it with --max-pixels)",
                        w, h, (long long)w * h, (long long)lim);
    return 0;
}

int img_probe(const uint8_t *buf, size_t n, const img_dec_opts *o, int *height, int *width,
              int *channels, pst_err *e)
{
    switch (img_sniff(buf, n)) {
    case IMG_JPEG: {
        jpg_info info;
        if (jpg_read_info(buf, n, &info, e) < 0) return -1;
        if (check_pixels(info.width, info.height, o->max_pixels, e) < 0) return -1;
        *height = info.height, *width = info.width;
        *channels = info.components == 1 ? 1 : 3;
        return 0;
    }
    case IMG_PNG: {
        pngio_opts po = {.max_pixels = o->max_pixels};
        pngio_header h;
        if (pngio_decode_header(buf, n, &po, &h, e) < 0) return -1;
        *height = h.height, *width = h.width, *channels = h.channels;
        return 0;
    }
    default:
        return not_an_image(buf, n, e);
    }
}

/* The size whose shorter side is `side` (aspect kept, rounded). */
static void shrunk_size(int h, int w, int side, int *th, int *tw)
{
    if (h <= w) {
        *th = side;
        *tw = (int)PST_MAX((int64_t)1, ((int64_t)w * side * 2 + h) / (2 * (int64_t)h));
    } else {
        *tw = side;
        *th = (int)PST_MAX((int64_t)1, ((int64_t)h * side * 2 + w) / (2 * (int64_t)w));
    }
}

/* Replaces r->px (r->height x r->width) by its resized copy. */
static void resize_px(img_result *r, int channels, int th, int tw)
{
    if (r->height == th && r->width == tw) return;
    uint8_t *dst = pst_malloc((size_t)th * (size_t)tw * (size_t)channels);
    resize_u8(r->px, r->height, r->width, channels, dst, th, tw);
    free(r->px);
    r->px = dst, r->height = th, r->width = tw;
}

/* Encodes r->px as the stored JPEG. */
static int encode_px(img_result *r, const img_dec_opts *o, pst_err *e)
{
    if (jpg_encode(r->px, r->width, r->height, o->channels, o->quality, &r->jpeg, &r->njpeg, e) < 0)
        return pst_err_prefix(e, "re-encoding as JPEG");
    r->jh = r->height, r->jw = r->width, r->reencoded = true;
    return 0;
}

/* Decodes the JPEG whole (pixels) or DCT-scaled to at least min_w x min_h
 * (encoded) into r->px. */
static int jpeg_pixels(const uint8_t *buf, size_t n, const jpg_info *info, const img_dec_opts *o,
                       int flags, int min_w, int min_h, img_result *r, pst_err *e)
{
    if (o->store == IMG_STORE_PIXELS)
        return jpg_decode(buf, n, o->channels, flags, &r->px, &r->width, &r->height, e);
    jpg_region reg = {0};
    if (jpg_decode_region(buf, n, o->channels, 0, 0, info->width, info->height, min_w, min_h, flags,
                          &reg, e) < 0) {
        jpg_region_free(&reg);
        return -1;
    }
    size_t bytes = (size_t)reg.w * (size_t)reg.h * (size_t)o->channels;
    r->px = pst_malloc(bytes);
    memcpy(r->px, reg.px, bytes);
    r->height = reg.h, r->width = reg.w;
    jpg_region_free(&reg);
    return 0;
}

static int decode_jpeg(uint8_t **buf, size_t n, const img_dec_opts *o, img_result *r, pst_err *e)
{
    jpg_info info;
    if (jpg_read_info(*buf, n, &info, e) < 0) return -1;
    if (check_pixels(info.width, info.height, o->max_pixels, e) < 0) return -1;
    int side = PST_MIN(info.width, info.height);
    bool shrink = o->store == IMG_STORE_ENCODED && o->max_side > 0 && side > o->max_side;
    int th = 1, tw = 1;
    if (shrink) shrunk_size(info.height, info.width, o->max_side, &th, &tw);
    /* A truncated file fails first; --allow-truncated decodes it again,
     * accepting it, and keeps libjpeg's message as the warning. */
    if (jpeg_pixels(*buf, n, &info, o, 0, tw, th, r, e) < 0) {
        if (!o->allow_truncated || !strstr(e->msg, "Premature end")) return -1;
        snprintf(r->warn, sizeof r->warn, "%s", e->msg);
        e->msg[0] = 0;
        if (jpeg_pixels(*buf, n, &info, o, JPG_ALLOW_TRUNCATED, tw, th, r, e) < 0) return -1;
    }
    if (o->store == IMG_STORE_PIXELS) {
        if (o->height) resize_px(r, o->channels, o->height, o->width);
        return 0;
    }
    if (shrink) {
        resize_px(r, o->channels, th, tw);
        return encode_px(r, o, e);
    }
    r->jpeg = *buf, r->njpeg = n, *buf = NULL; /* stored as it is */
    r->jh = info.height, r->jw = info.width;
    return 0;
}

static int decode_png(const uint8_t *buf, size_t n, const img_dec_opts *o, img_result *r,
                      pst_err *e)
{
    pngio_opts po = {.channels = o->channels, .alpha = o->alpha, .max_pixels = o->max_pixels};
    pngio_image im;
    if (pngio_decode(buf, n, &po, &im, e) < 0) return -1;
    r->px = im.pixels, r->height = im.height, r->width = im.width;
    if (o->store == IMG_STORE_PIXELS) {
        if (o->height) resize_px(r, o->channels, o->height, o->width);
        return 0;
    }
    if (o->max_side > 0 && PST_MIN(r->height, r->width) > o->max_side) {
        int th, tw;
        shrunk_size(r->height, r->width, o->max_side, &th, &tw);
        resize_px(r, o->channels, th, tw);
    }
    return encode_px(r, o, e);
}

void img_decode_file(const char *path, const img_dec_opts *o, img_result *r)
{
    memset(r, 0, sizeof *r);
    pst_err e = {""};
    uint8_t *buf;
    size_t n;
    r->rc = img_read_file(path, &buf, &n, &e);
    if (r->rc == 0) {
        switch (img_sniff(buf, n)) {
        case IMG_JPEG:
            r->rc = decode_jpeg(&buf, n, o, r, &e);
            break;
        case IMG_PNG:
            r->rc = decode_png(buf, n, o, r, &e);
            break;
        default:
            r->rc = not_an_image(buf, n, &e);
        }
        free(buf);
    }
    if (r->rc < 0) {
        img_result_free(r);
        snprintf(r->err, sizeof r->err, "%s", e.msg);
    }
}

/* ---- the pool ------------------------------------------------------------------ */

static void *pool_worker(void *arg)
{
    img_pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && p->next < p->n && p->next - p->consumed >= p->nslots)
            pthread_cond_wait(&p->space, &p->mu);
        if (p->stop || p->next >= p->n) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        int64_t i = p->next++;
        pthread_mutex_unlock(&p->mu);

        img_slot s = {.idx = i};
        img_decode_file(p->items[p->order[i]].path, &p->opts, &s.res);

        pthread_mutex_lock(&p->mu);
        p->slots[i % p->nslots] = s;
        pthread_cond_broadcast(&p->ready);
        pthread_mutex_unlock(&p->mu);
    }
}

int img_pool_start(img_pool *p, const img_item *items, const int64_t *order, int64_t n,
                   const img_dec_opts *o, int threads, pst_err *e)
{
    memset(p, 0, sizeof *p);
    p->items = items, p->order = order, p->n = n, p->opts = *o;
    int nthreads = (int)PST_MIN((int64_t)threads, PST_MAX(n, (int64_t)1));
    p->nslots = 4 * nthreads + 4;
    p->slots = pst_calloc((size_t)p->nslots, sizeof(img_slot));
    for (int s = 0; s < p->nslots; s++) p->slots[s].idx = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->ready, NULL);
    pthread_cond_init(&p->space, NULL);
    p->tids = pst_calloc((size_t)nthreads, sizeof(pthread_t));
    for (; p->started < nthreads; p->started++) {
        int err = pthread_create(&p->tids[p->started], NULL, pool_worker, p);
        if (err) {
            if (p->started == 0) {
                img_pool_stop(p);
                return pst_fail(e, "cannot start a decoding thread: %s", strerror(err));
            }
            break; /* fewer threads is fine */
        }
    }
    return 0;
}

void img_pool_take(img_pool *p, int64_t i, img_result *out)
{
    img_slot *s = &p->slots[i % p->nslots];
    pthread_mutex_lock(&p->mu);
    while (s->idx != i) pthread_cond_wait(&p->ready, &p->mu);
    *out = s->res;
    s->idx = -1;
    memset(&s->res, 0, sizeof s->res);
    p->consumed = i + 1;
    pthread_cond_broadcast(&p->space);
    pthread_mutex_unlock(&p->mu);
}

void img_pool_stop(img_pool *p)
{
    if (!p->slots) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->space);
    pthread_mutex_unlock(&p->mu);
    for (int t = 0; t < p->started; t++) pthread_join(p->tids[t], NULL);
    for (int s = 0; s < p->nslots; s++) img_result_free(&p->slots[s].res);
    free(p->slots);
    free(p->tids);
    pthread_cond_destroy(&p->space);
    pthread_cond_destroy(&p->ready);
    pthread_mutex_destroy(&p->mu);
    memset(p, 0, sizeof *p);
}
