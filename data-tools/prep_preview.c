/*
 * prep_preview.c - `pstrain-prep preview`: a PNG contact sheet of a split.
 *
 * A random choice of --count images (seeded by --seed, or by the clock and
 * then printed; shown in file order), or with --first the first ones, is
 * laid out row by row in a near-square grid, each scaled up by nearest
 * neighbour (automatic scale: the smallest integer that makes a tile's
 * longer side at least 84 px, at most 16; --scale overrides). Under each
 * tile a black strip of PREVIEW_LABEL_H px carries the class name in white
 * (5x7 font, font5x7.h; cut to the tile's width), and a 2 px mid-gray (128)
 * separator runs around and between the cells. Gray data sets give a gray
 * PNG, 3-channel ones an RGB PNG. The output must end in .png.
 *
 * Encoded data sets (JPEG bytes, images of any size): each chosen image is
 * decoded (jpg_decode, pstrain/jpeg.h) and resized (resize_u8: area
 * averaging when shrinking, bilinear when growing) so that its longer side
 * is the tile side (--tile, default 128 px), centred on a black tile; the
 * grid is then laid out as above at scale 1. An image that does not decode
 * is a warning naming it and the decoder's reason, and its tile stays black.
 */
#include <math.h>
#include <strings.h>
#include <time.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "data-tools/font5x7.h"
#include "data-tools/pngio.h"
#include "data-tools/prep.h"
#include "data-tools/resize.h"
#include "pstrain/common.h"
#include "pstrain/jpeg.h"
#include "pstrain/usage.h"
#include "pstrain/h5ds.h"

#define PREVIEW_SEP 2
#define PREVIEW_SEP_VALUE 128
#define PREVIEW_MIN_TILE 84
#define PREVIEW_MAX_AUTO_SCALE 16
#define PREVIEW_MAX_BYTES ((size_t)256 << 20)
#define PREVIEW_LABEL_H (FONT_CELL_H + 2) /* the class name's strip under a tile */
#define PREVIEW_TILE 128                  /* encoded: a thumbnail's longer side */

typedef struct preview_cfg {
    const char *in, *out, *split;
    int64_t count;
    bool first, seeded;
    uint64_t seed;
    int scale; /* 0 = automatic */
    int tile;  /* encoded: thumbnail side; 0 = PREVIEW_TILE */
} preview_cfg;

static void usage(FILE *f)
{
    fprintf(f, "usage: pstrain-prep preview FILE.h5 [--split train] [--count 64] [--seed S]\n"
               "         [--first] [--scale N | --tile PX] -o GRID.png\n"
               "\n"
               "A grid of --count images of a split chosen at random (--seed S repeats a\n"
               "choice; the seed used is printed), or with --first the first ones, scaled up\n"
               "by nearest neighbour (default: tiles of at least 84 px), each with its class\n"
               "name underneath. Encoded data sets (JPEG bytes of any size): each image is\n"
               "decoded and resized so that its longer side is --tile PX (default 128).\n"
               "-o GRID.png (or --output GRID.png) names the output, which must end in .png.\n");
}

static const char *const preview_flags[] = {"help",  "h",    "first", "o",    "output", "split",
                                            "count", "seed", "scale", "tile", NULL};

static bool known_flag(const char *a)
{
    a += a[1] == '-' ? 2 : 1;
    for (const char *const *n = preview_flags; *n; n++)
        if (!strcmp(a, *n)) return true;
    return false;
}

static int parse_args(int argc, char **argv, preview_cfg *c)
{
    *c = (preview_cfg){.split = "train", .count = 64};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t i64;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return -1;
        }
        if (!strcmp(a, "--first")) {
            c->first = true;
            continue;
        }
        if (a[0] == '-' && a[1] && !known_flag(a)) return pst_unknown_option(a, preview_flags);
        if (a[0] == '-' && a[1] && !v) return pst_usage_error("%s needs a value", a);
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            c->out = v;
        } else if (!strcmp(a, "--split")) {
            c->split = v;
        } else if (!strcmp(a, "--count")) {
            if (pst_parse_i64(v, &c->count) < 0 || c->count < 1 || c->count > 100000) {
                pst_error("--count '%s', expected 1-100000", v);
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            if (pst_parse_i64(v, &i64) < 0) {
                pst_error("--seed '%s', expected an integer", v);
                return 2;
            }
            c->seed = (uint64_t)i64, c->seeded = true;
        } else if (!strcmp(a, "--scale")) {
            if (pst_parse_int(v, &c->scale) < 0 || c->scale < 1 || c->scale > 64) {
                pst_error("--scale '%s', expected 1-64", v);
                return 2;
            }
        } else if (!strcmp(a, "--tile")) {
            if (pst_parse_int(v, &c->tile) < 0 || c->tile < 8 || c->tile > 1024) {
                pst_error("--tile '%s', expected 8-1024 (pixels)", v);
                return 2;
            }
        } else if (!c->in) {
            c->in = a;
            continue;
        } else {
            return pst_usage_error("unexpected argument '%s'", a);
        }
        i++;
    }
    if (!c->in || !c->out) {
        return pst_usage_error("%s is required", !c->in ? "FILE.h5" : "-o GRID.png");
    }
    size_t n = strlen(c->out);
    if (n < 5 || strcasecmp(c->out + n - 4, ".png") != 0)
        return pst_usage_error("-o %s: expected a file name ending in .png", c->out);
    if (c->first && c->seeded) return pst_usage_error("--first and --seed exclude each other");
    if (c->scale && c->tile)
        return pst_usage_error(
            "--scale (pixels data sets) and --tile (encoded) exclude each other");
    if (!c->seeded) c->seed = (uint64_t)time(NULL);
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* `count` distinct indices of [0, n), ascending: the first ones, or a
 * seeded random choice (partial Fisher-Yates). */
static int64_t *choose(int64_t n, int64_t count, bool random, uint64_t seed)
{
    int64_t *idx = pst_malloc(sizeof(int64_t) * (size_t)n);
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    if (random) {
        uint64_t s = seed;
        for (int64_t i = 0; i < count; i++) {
            int64_t j = i + (int64_t)(pst_splitmix64(&s) % (uint64_t)(n - i));
            int64_t t = idx[i];
            idx[i] = idx[j], idx[j] = t;
        }
        qsort(idx, (size_t)count, sizeof(int64_t), cmp_i64);
    }
    return idx;
}

/* Encoded split: decodes example `i` into a tile x tile x C thumbnail (its
 * longer side the tile's, centred on black). buf, cap: the JPEG buffer,
 * reused. 0 (after a warning when the image does not decode: the tile stays
 * black), or -1 with e set when the data set cannot be read. */
static int encoded_thumb(h5ds *ds, const char *split, int64_t i, int tile, uint8_t *out,
                         uint8_t **buf, size_t *cap, int32_t *label, pst_err *e)
{
    const int C = ds->channels;
    int64_t off[2];
    memset(out, 0, (size_t)tile * (size_t)tile * (size_t)C);
    if (h5ds_read_encoded(ds, split, i, 1, off, NULL, 0, label, NULL, NULL, e) < 0) return -1;
    if ((size_t)off[1] > *cap) {
        free(*buf);
        *cap = (size_t)off[1];
        *buf = pst_malloc(*cap);
    }
    if (h5ds_read_encoded(ds, split, i, 1, off, *buf, *cap, NULL, NULL, NULL, e) < 0) return -1;
    uint8_t *px = NULL;
    int w = 0, h = 0;
    pst_err de;
    if (jpg_decode(*buf, (size_t)off[1], C, 0, &px, &w, &h, &de) < 0) {
        pst_warn("%s: /%s example %lld: %s (tile left black)", ds->path, split, (long long)i,
                 de.msg);
        return 0;
    }
    int tw = tile, th = tile;
    if (w >= h)
        th = PST_MAX(1, (int)(((int64_t)h * tile + w / 2) / w));
    else
        tw = PST_MAX(1, (int)(((int64_t)w * tile + h / 2) / h));
    uint8_t *small = pst_malloc((size_t)tw * (size_t)th * (size_t)C);
    resize_u8(px, h, w, C, small, th, tw);
    int oy = (tile - th) / 2, ox = (tile - tw) / 2;
    for (int y = 0; y < th; y++)
        memcpy(out + ((size_t)(oy + y) * (size_t)tile + (size_t)ox) * (size_t)C,
               small + (size_t)y * (size_t)tw * (size_t)C, (size_t)tw * (size_t)C);
    free(small);
    free(px);
    return 0;
}

/* The n chosen images (idx; the first n when c->first) of c->split and
 * their labels: pixels as stored, or (encoded) thumbnails of side H. */
static int read_images(h5ds *ds, const preview_cfg *c, const int64_t *idx, int64_t n, int H,
                       size_t image_bytes, uint8_t *images, int32_t *labels, pst_err *e)
{
    if (ds->storage == H5DS_STORE_ENCODED) {
        uint8_t *buf = NULL;
        size_t cap = 0;
        int rc = 0;
        for (int64_t i = 0; i < n && rc == 0; i++)
            rc = encoded_thumb(ds, c->split, idx[i], H, images + (size_t)i * image_bytes, &buf,
                               &cap, labels + i, e);
        free(buf);
        return rc < 0 ? -1 : 0;
    }
    if (c->first) return h5ds_read(ds, c->split, 0, n, images, labels, e) < 0 ? -1 : 0;
    for (int64_t i = 0; i < n; i++)
        if (h5ds_read(ds, c->split, idx[i], 1, images + (size_t)i * image_bytes, labels + i, e) < 0)
            return -1;
    return 0;
}

/* The grid's geometry: cols cells a row, each a tile of tw x th px (images
 * of W px and C channels scaled up `scale` times) over a label strip, ch
 * px in all; the whole grid gw x gh px. */
typedef struct grid_geom {
    int cols, scale, W, C;
    int64_t th, tw, ch, gh, gw;
} grid_geom;

/* Draws the n images (image_bytes each) into the grid, row by row, each
 * with its class name underneath. */
static void draw_grid(uint8_t *grid, const grid_geom *g, const h5ds *ds, const uint8_t *images,
                      size_t image_bytes, const int32_t *labels, int64_t n)
{
    const int C = g->C, scale = g->scale;
    const int64_t th = g->th, tw = g->tw, ch = g->ch, gh = g->gh, gw = g->gw;
    memset(grid, PREVIEW_SEP_VALUE, (size_t)(gh * gw * C));
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *img = images + (size_t)i * image_bytes;
        int64_t oy = (i / g->cols) * (ch + PREVIEW_SEP) + PREVIEW_SEP;
        int64_t ox = (i % g->cols) * (tw + PREVIEW_SEP) + PREVIEW_SEP;
        for (int64_t y = 0; y < th; y++) {
            const uint8_t *srow = img + (size_t)(y / scale) * (size_t)g->W * (size_t)C;
            uint8_t *drow = grid + (size_t)(((oy + y) * gw + ox) * C);
            for (int64_t x = 0; x < tw; x++)
                memcpy(drow + x * C, srow + (x / scale) * C, (size_t)C);
        }
        /* the label strip: black, the class name in white from (1, 1) */
        for (int64_t y = oy + th; y < oy + ch; y++)
            memset(grid + (size_t)((y * gw + ox) * C), 0, (size_t)(tw * C));
        const int32_t k = labels[i];
        const char *name = k >= 0 && k < ds->num_classes ? ds->class_names[k] : "?";
        font_draw(grid, (int)gh, (int)gw, C, (int)ox + 1, (int)(oy + th + 1), name,
                  (int)((tw - 1) / FONT_CELL_W), 255);
    }
}

int prep_cmd_preview(int argc, char **argv)
{
    preview_cfg c;
    int st = parse_args(argc, argv, &c);
    if (st) return st < 0 ? 0 : st;
    h5ds ds = {0};
    pst_err e = {""};
    uint8_t *images = NULL, *grid = NULL;
    int64_t *idx = NULL;
    int32_t *labels = NULL;
    int status = 1;
    if (h5ds_open(&ds, c.in, &e) < 0) goto fail;
    const h5ds_split *sp = h5ds_find_split(&ds, c.split);
    if (!sp) {
        h5ds_no_split(&ds, c.split, &e);
        goto fail;
    }
    const bool enc = ds.storage == H5DS_STORE_ENCODED;
    int H = ds.height, W = ds.width, C = ds.channels;
    if (enc && c.scale) {
        pst_fail(&e, "%s: --scale is for pixels data sets; this one is encoded (use --tile PX)",
                 c.in);
        goto fail;
    }
    if (!enc && c.tile) {
        pst_fail(&e, "%s: --tile is for encoded data sets; this one stores pixels (use --scale N)",
                 c.in);
        goto fail;
    }
    if (enc) { /* thumbnails of one size, shown at scale 1 */
        H = W = c.tile ? c.tile : PREVIEW_TILE;
        c.scale = 1;
    }
    if (C != 1 && C != 3) {
        pst_fail(&e, "%s: %d channels; preview writes gray (1) or RGB (3) PNGs only", c.in, C);
        goto fail;
    }
    int64_t n = PST_MIN(c.count, sp->count);
    int scale = c.scale;
    if (!scale) {
        int side = PST_MAX(H, W);
        scale = PST_MIN((PREVIEW_MIN_TILE + side - 1) / side, PREVIEW_MAX_AUTO_SCALE);
        scale = PST_MAX(scale, 1);
    }
    int cols = (int)ceil(sqrt((double)n));
    int rows = (int)((n + cols - 1) / cols);
    int64_t th = (int64_t)H * scale, tw = (int64_t)W * scale;
    int64_t ch = th + PREVIEW_LABEL_H; /* a cell: the tile and its label */
    int64_t gh = rows * ch + (rows + 1) * PREVIEW_SEP, gw = cols * tw + (cols + 1) * PREVIEW_SEP;
    if (gh > INT32_MAX || gw > INT32_MAX || (uint64_t)(gh * gw * C) > PREVIEW_MAX_BYTES) {
        pst_fail(&e, "%s: a %lldx%lld px grid is too large; use a smaller --count or --scale",
                 c.out, (long long)gw, (long long)gh);
        goto fail;
    }

    size_t image_bytes = (size_t)H * (size_t)W * (size_t)C;
    images = pst_malloc(image_bytes * (size_t)n);
    labels = pst_malloc(sizeof *labels * (size_t)n);
    idx = choose(sp->count, n, !c.first, c.seed);
    if (read_images(&ds, &c, idx, n, H, image_bytes, images, labels, &e) < 0) goto fail;

    grid = pst_malloc((size_t)(gh * gw * C));
    const grid_geom g = {cols, scale, W, C, th, tw, ch, gh, gw};
    draw_grid(grid, &g, &ds, images, image_bytes, labels, n);
    if (pngio_write(c.out, grid, (int)gh, (int)gw, C, -1, &e) < 0) goto fail;
    if (!c.first)
        printf("preview: %s /%s: %lld random images (--seed %llu)", c.in, c.split, (long long)n,
               (unsigned long long)c.seed);
    else
        printf("preview: %s /%s: the first %lld images", c.in, c.split, (long long)n);
    printf(" in %d x %d tiles of %lldx%lld px (scale %d), class names underneath -> %s, "
           "%lldx%lld px\n",
           rows, cols, (long long)tw, (long long)th, scale, c.out, (long long)gw, (long long)gh);
    status = 0;
fail:
    if (status) pst_error("%s", e.msg);
    free(grid);
    free(images);
    free(labels);
    free(idx);
    h5ds_close(&ds);
    return status;
}
