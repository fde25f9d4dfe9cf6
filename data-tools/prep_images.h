/*
 * prep_images.h - `pstrain-prep images` (alias `png`): an ImageNet-style tree
 * of JPEG and PNG files to a pstrain data set. Internal to pstrain-prep; three
 * files share these types:
 *   prep_tree.c    listing the trees and the label sources (class folders,
 *                  --synsets, --val-dir with subfolders or a flat folder and
 *                  --val-labels, --val-fraction, --test-dir)
 *   prep_decode.c  one file to what the writer stores (decoder chosen by the
 *                  file's magic bytes), and the pool of decoding threads
 *   prep_images.c  the command line, the writer loop, the summary
 */
#ifndef PSTRAIN_PREP_IMAGES_H
#define PSTRAIN_PREP_IMAGES_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "data-tools/pngio.h"
#include "pstrain/common.h"

enum { SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST, NSPLITS };
extern const char *const img_split_names[NSPLITS];

enum { IMG_STORE_PIXELS = 0, IMG_STORE_ENCODED = 1 };

#define IMG_DEFAULT_QUALITY 90

typedef struct img_cfg {
    const char *cmd; /* "images" or "png" (the alias): the summary's first word */
    const char *dir, *val_dir, *val_labels, *test_dir, *synsets, *out;
    int height, width; /* pixels: 0 = the images' own size (all must agree) */
    int channels;      /* 0 = the first image's */
    pngio_alpha alpha;
    double val_fraction;
    uint64_t seed;
    bool strict, force, allow_truncated;
    int64_t max_pixels;
    int compression, chunk_images, threads;
    int store;    /* IMG_STORE_* */
    int max_side; /* encoded: shrink so that the shorter side is at most this; 0 = keep */
    int quality;  /* encoded: JPEG quality of re-encoded images */
} img_cfg;

typedef struct img_item {
    char *path;
    int32_t label;
    int split;
} img_item;

/* The listing of the trees: classes, then every image in decoding order. */
typedef struct img_tree {
    char **classes; /* nclasses names: folder names, or the synset ids of --synsets */
    char **words;   /* with --synsets: each synset's words ("tench, Tinca tinca"); else NULL */
    int nclasses;
    img_item *items; /* train, then val, then test */
    int64_t nitems, cap;
    int64_t per_split[NSPLITS];
    int64_t ignored; /* entries that are neither image files nor class folders */
} img_tree;

/* True for a name ending in .jpeg, .jpg or .png (any case). */
bool img_is_image_name(const char *name);

/* Lists c->dir (and the val and test trees) into t; every bad label input is
 * a one-line error naming the file and line. */
int img_list_tree(img_tree *t, const img_cfg *c, pst_err *e);
void img_tree_free(img_tree *t);

/* ---- decoding ------------------------------------------------------------------ */

/* What the decoder needs to know (fixed for a pass). */
typedef struct img_dec_opts {
    int store;         /* IMG_STORE_* */
    int channels;      /* 1 or 3 */
    int height, width; /* pixels: resize target, 0 = keep */
    int max_side, quality;
    pngio_alpha alpha;
    int64_t max_pixels;
    bool allow_truncated;
} img_dec_opts;

/* One decoded file. */
typedef struct img_result {
    int rc;                 /* 0, or -1 with err set */
    char err[PST_ERR_LEN];  /* why the file is unreadable */
    char warn[PST_ERR_LEN]; /* a warning that did not stop it (truncated JPEG accepted) */
    /* pixels: the image (height x width x channels); encoded: the pixels that
     * feed the train mean/std (a DCT-scaled decode, or the re-encoded image) */
    uint8_t *px;
    int height, width;
    /* encoded: the stored JPEG, its size and the image's size */
    uint8_t *jpeg;
    size_t njpeg;
    int jh, jw;
    bool reencoded;
} img_result;

void img_result_free(img_result *r);

/* Reads the file at `path` whole into *buf (malloc'd, *n bytes). */
int img_read_file(const char *path, uint8_t **buf, size_t *n, pst_err *e);

/* The size and natural channels (1 for gray, else 3) of the image in
 * buf[0..n), from its header, by content. */
int img_probe(const uint8_t *buf, size_t n, const img_dec_opts *o, int *height, int *width,
              int *channels, pst_err *e);

/* Decodes `path` as `o` asks into r (r->rc, r->err on failure). */
void img_decode_file(const char *path, const img_dec_opts *o, img_result *r);

/* A pool of threads decoding items[order[0..n)]; results are taken in order. */
typedef struct img_slot {
    int64_t idx; /* item decoded into this slot; -1 = empty */
    img_result res;
} img_slot;

typedef struct img_pool {
    const img_item *items;
    const int64_t *order;
    int64_t n;
    img_dec_opts opts;
    pthread_mutex_t mu;
    pthread_cond_t ready, space;
    int64_t next, consumed;
    bool stop;
    img_slot *slots;
    int nslots;
    pthread_t *tids;
    int started;
} img_pool;

/* Starts up to `threads` decoding threads (at least one, or an error). */
int img_pool_start(img_pool *p, const img_item *items, const int64_t *order, int64_t n,
                   const img_dec_opts *o, int threads, pst_err *e);
/* Waits for the i-th result (in order) and moves it into *out. */
void img_pool_take(img_pool *p, int64_t i, img_result *out);
/* Stops and joins the threads, frees what is left. */
void img_pool_stop(img_pool *p);

#endif
