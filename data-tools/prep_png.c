/*
 * prep_png.c - `pstrain-prep png`: an ImageNet-style tree of PNG files
 * (DIR/<class>/<name>.png) to a pstrain data set.
 *
 * Classes are the subdirectories of DIR sorted by strcmp (ids 0..K-1). In a
 * class directory, regular files whose name ends in ".png" (any case) are
 * images, sorted by strcmp; everything else is ignored and counted, and so
 * are names starting with '.' (hidden files, "._x.png" resource forks).
 *
 * Order of work:
 *  1. List the tree(s); pick the validation files (stratified: round(F * n_c)
 *     files of each class, chosen by a Fisher-Yates shuffle seeded by --seed).
 *  2. Probe the first file whose header reads: it fixes the channels (unless
 *     --channels) and the size (unless --size); then create the output.
 *  3. Decode with a pool of threads while the main thread takes the results
 *     in file order and streams them into the HDF5 writer, so that decoding
 *     and compression overlap. The writer needs each split's exact count up
 *     front; this pass assumes every file is readable.
 *  4. If some file was not (skipped with a warning), the output of step 3 is
 *     dropped once the pass has found every unreadable file, and a second
 *     pass decodes the readable ones again with the right counts. Corrupt
 *     files are rare; the common case pays for one pass and no spooling.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data-tools/h5write.h"
#include "data-tools/pngio.h"
#include "data-tools/prep.h"
#include "data-tools/resize.h"
#include "pstrain/common.h"
#include "pstrain/usage.h"
#include "pstrain/progress.h"

enum { SPLIT_TRAIN, SPLIT_VAL, SPLIT_TEST, NSPLITS };
static const char *const split_names[NSPLITS] = {"train", "val", "test"};

/* Skipped files listed one by one in the summary; more are only counted. */
#define MAX_LISTED_SKIPS 50

typedef struct png_cfg {
    const char *dir, *test_dir, *out;
    int height, width; /* 0 = the images' own size (all must agree) */
    int channels;      /* 0 = the first image's */
    pngio_alpha alpha;
    double val_fraction;
    uint64_t seed;
    bool strict, force;
    int64_t max_pixels;
    int compression, chunk_images, threads;
} png_cfg;

typedef struct png_item {
    char *path;
    int32_t label;
    int split;
} png_item;

/* The listing of one or two trees. */
typedef struct png_tree {
    char **classes;
    int nclasses;
    png_item *items; /* train, then val, then test: the order of decoding */
    int64_t nitems, cap;
    int64_t per_split[NSPLITS];
    int64_t ignored; /* entries that are not .png files */
} png_tree;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pstrain-prep png DIR [--test-dir DIR] [--size HxW] [--channels 1|3]\n"
            "         [--val-fraction F] [--seed S] [--strict] [--max-pixels N]\n"
            "         [--alpha black|drop] [--compression 0-9] [--chunk-images N]\n"
            "         [--threads N] [--force] -o OUT.h5\n"
            "\n"
            "DIR/<class>/*.png, classes sorted by name (ids 0..K-1); --test-dir has the same\n"
            "class names. Every PNG variant is read (palette, gray 1-16 bit, alpha, 16-bit,\n"
            "interlaced); alpha is composited on black (--alpha drop ignores it); 16-bit is\n"
            "scaled to 8 with rounding; RGB -> gray uses BT.601 weights.\n"
            "  --size HxW         resize: area average when shrinking, bilinear when growing\n"
            "                     (default: keep; then all images must have one size)\n"
            "  --channels 1|3     output channels (default: those of the first image)\n"
            "  --val-fraction F   put round(F * n) images of each class in 'val' (default 0)\n"
            "  --seed S           seed of the validation choice (default 0)\n"
            "  --strict           the first unreadable file is an error (default: skip it)\n"
            "  --max-pixels N     refuse images declaring more than N pixels (default %lld)\n"
            "  --compression L    deflate level (default 4; 0 = none)\n"
            "  --chunk-images N   images per HDF5 chunk (default: about 512 KiB)\n"
            "  --threads N        decoding threads (default: online cores); as many compress,\n"
            "                     at most 8\n"
            "  --force            overwrite OUT.h5\n",
            (long long)PNGIO_DEFAULT_MAX_PIXELS);
}

static char *path_join(const char *a, const char *b)
{
    size_t na = strlen(a), nb = strlen(b);
    char *p = pst_malloc(na + nb + 2);
    memcpy(p, a, na);
    p[na] = '/';
    memcpy(p + na + 1, b, nb + 1);
    return p;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_png_name(const char *name)
{
    size_t n = strlen(name);
    return n > 4 && !strcasecmp(name + n - 4, ".png");
}

/* The names in `dir` (without . and ..), sorted by strcmp. */
static int list_dir(const char *dir, char ***out, int64_t *n, pst_err *e)
{
    *out = NULL, *n = 0;
    DIR *d = opendir(dir);
    if (!d) return pst_fail(e, "%s: cannot open directory: %s", dir, strerror(errno));
    char **names = NULL;
    int64_t cnt = 0, cap = 0;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        if (cnt == cap) {
            cap = cap ? 2 * cap : 64;
            names = pst_realloc(names, sizeof(char *) * (size_t)cap);
        }
        names[cnt++] = pst_strdup(de->d_name);
    }
    int err = errno;
    closedir(d);
    if (err) {
        for (int64_t i = 0; i < cnt; i++) free(names[i]);
        free(names);
        return pst_fail(e, "%s: reading directory failed: %s", dir, strerror(err));
    }
    if (cnt) qsort(names, (size_t)cnt, sizeof(char *), cmp_str);
    *out = names, *n = cnt;
    return 0;
}

static void free_names(char **names, int64_t n)
{
    for (int64_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

static void tree_add(png_tree *t, char *path, int32_t label, int split)
{
    if (t->nitems == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->items = pst_realloc(t->items, sizeof(png_item) * (size_t)t->cap);
    }
    t->items[t->nitems++] = (png_item){path, label, split};
    t->per_split[split]++;
}

static void tree_free(png_tree *t)
{
    free_names(t->classes, t->nclasses);
    for (int64_t i = 0; i < t->nitems; i++) free(t->items[i].path);
    free(t->items);
    memset(t, 0, sizeof *t);
}

/* The class subdirectories of `dir`, sorted; other entries are counted as
 * ignored. */
static int list_classes(const char *dir, char ***classes, int64_t *n, int64_t *ignored, pst_err *e)
{
    char **names;
    int64_t cnt;
    if (list_dir(dir, &names, &cnt, e) < 0) return -1;
    int64_t k = 0;
    for (int64_t i = 0; i < cnt; i++) {
        char *p = path_join(dir, names[i]);
        struct stat st;
        bool is_class = names[i][0] != '.' && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
        free(p);
        if (is_class) {
            names[k++] = names[i];
        } else {
            (*ignored)++;
            free(names[i]);
        }
    }
    *classes = names, *n = k;
    return 0;
}

/* The .png files of one class directory (names only), sorted; the other
 * entries are counted as ignored. */
static int list_class_files(const char *cdir, char ***files, int64_t *n, int64_t *ignored,
                            pst_err *e)
{
    char **names;
    int64_t cnt;
    if (list_dir(cdir, &names, &cnt, e) < 0) return -1;
    int64_t k = 0;
    for (int64_t i = 0; i < cnt; i++) {
        bool keep = names[i][0] != '.' && is_png_name(names[i]);
        if (keep) {
            char *p = path_join(cdir, names[i]);
            struct stat st;
            keep = stat(p, &st) == 0 && S_ISREG(st.st_mode);
            free(p);
        }
        if (keep) {
            names[k++] = names[i];
        } else {
            (*ignored)++;
            free(names[i]);
        }
    }
    *files = names, *n = k;
    return 0;
}

/* Lists DIR (and the test tree): classes, items in decoding order, the
 * validation choice. */
static int list_tree(png_tree *t, const png_cfg *c, pst_err *e)
{
    memset(t, 0, sizeof *t);
    int64_t nclasses;
    if (list_classes(c->dir, &t->classes, &nclasses, &t->ignored, e) < 0) return -1;
    t->nclasses = (int)nclasses;
    if (nclasses == 0)
        return pst_fail(e, "%s: no class subdirectories (expected DIR/<class>/*.png)", c->dir);
    /* pstrain train refuses a one-class data set: say so now, not after the conversion */
    if (nclasses == 1)
        return pst_fail(e,
                        "%s: one class subdirectory ('%s'), expected at least 2 (a classifier "
                        "needs two classes)",
                        c->dir, t->classes[0]);
    if (nclasses > INT32_MAX / 2) return pst_fail(e, "%s: too many classes", c->dir);

    /* train and val items per class, then laid out train-all, val-all */
    png_item *val = NULL;
    int64_t nval = 0, valcap = 0;
    uint64_t rng = c->seed;
    for (int k = 0; k < t->nclasses; k++) {
        char *cdir = path_join(c->dir, t->classes[k]);
        char **files;
        int64_t nf;
        int rc = list_class_files(cdir, &files, &nf, &t->ignored, e);
        if (rc < 0) {
            free(cdir);
            for (int64_t i = 0; i < nval; i++) free(val[i].path);
            free(val);
            return -1;
        }
        /* round(F * n) of this class to val: a partial Fisher-Yates shuffle
         * of the indices picks them, then they keep their sorted order. */
        int64_t want = (int64_t)(c->val_fraction * (double)nf + 0.5);
        bool *is_val = pst_calloc((size_t)PST_MAX(nf, (int64_t)1), sizeof(bool));
        if (want > 0) {
            int64_t *perm = pst_malloc(sizeof(int64_t) * (size_t)nf);
            for (int64_t i = 0; i < nf; i++) perm[i] = i;
            for (int64_t i = 0; i < want; i++) {
                int64_t j = i + (int64_t)(pst_splitmix64(&rng) % (uint64_t)(nf - i));
                int64_t tmp = perm[i];
                perm[i] = perm[j], perm[j] = tmp;
                is_val[perm[i]] = true;
            }
            free(perm);
        }
        for (int64_t i = 0; i < nf; i++) {
            char *p = path_join(cdir, files[i]);
            if (!is_val[i]) {
                tree_add(t, p, k, SPLIT_TRAIN);
                continue;
            }
            if (nval == valcap) {
                valcap = valcap ? 2 * valcap : 256;
                val = pst_realloc(val, sizeof(png_item) * (size_t)valcap);
            }
            val[nval++] = (png_item){p, k, SPLIT_VAL};
        }
        free(is_val);
        free_names(files, nf);
        free(cdir);
    }
    for (int64_t i = 0; i < nval; i++) tree_add(t, val[i].path, val[i].label, SPLIT_VAL);
    free(val);

    if (c->test_dir) {
        char **tclasses;
        int64_t ntc;
        if (list_classes(c->test_dir, &tclasses, &ntc, &t->ignored, e) < 0) return -1;
        for (int64_t i = 0; i < ntc; i++) {
            char **hit =
                bsearch(&tclasses[i], t->classes, (size_t)t->nclasses, sizeof(char *), cmp_str);
            if (!hit) {
                pst_fail(e, "%s/%s: class '%s' of the test tree is not a class of %s", c->test_dir,
                         tclasses[i], tclasses[i], c->dir);
                free_names(tclasses, ntc);
                return -1;
            }
            int32_t label = (int32_t)(hit - t->classes);
            char *cdir = path_join(c->test_dir, tclasses[i]);
            char **files;
            int64_t nf;
            if (list_class_files(cdir, &files, &nf, &t->ignored, e) < 0) {
                free(cdir);
                free_names(tclasses, ntc);
                return -1;
            }
            for (int64_t j = 0; j < nf; j++)
                tree_add(t, path_join(cdir, files[j]), label, SPLIT_TEST);
            free_names(files, nf);
            free(cdir);
        }
        free_names(tclasses, ntc);
        /* a mistyped --test-dir must not silently give a set without a test split */
        if (t->per_split[SPLIT_TEST] == 0)
            return pst_fail(e, "%s: no .png files for the test split under %s/<class>/",
                            c->test_dir, c->test_dir);
    }
    if (t->per_split[SPLIT_TRAIN] == 0)
        return pst_fail(e, "%s: no .png files for the train split under %s/<class>/", c->dir,
                        c->dir);
    return 0;
}

/* ---- the decoding pool --------------------------------------------------------- */

typedef struct png_slot {
    int64_t idx; /* item decoded into this slot; -1 = empty */
    int rc;
    pngio_image img;
    char err[PST_ERR_LEN];
} png_slot;

typedef struct png_pool {
    const png_item *items;
    const int64_t *order; /* the pool decodes items[order[0..n)] */
    int64_t n;
    pngio_opts popts;
    int height, width; /* resize target, 0 = none */
    pthread_mutex_t mu;
    pthread_cond_t ready, space;
    int64_t next, consumed;
    bool stop;
    png_slot *slots;
    int nslots;
} png_pool;

/* Decodes (and resizes) the i-th item of the pool's order. */
static void decode_item(const png_pool *p, int64_t i, png_slot *out)
{
    pst_err e = {""};
    out->rc = pngio_read(p->items[p->order[i]].path, &p->popts, &out->img, &e);
    if (out->rc < 0) {
        snprintf(out->err, sizeof out->err, "%s", e.msg);
        return;
    }
    pngio_image *im = &out->img;
    if (p->height && (im->height != p->height || im->width != p->width)) {
        uint8_t *dst = pst_malloc((size_t)p->height * (size_t)p->width * (size_t)im->channels);
        resize_u8(im->pixels, im->height, im->width, im->channels, dst, p->height, p->width);
        free(im->pixels);
        im->pixels = dst, im->height = p->height, im->width = p->width;
    }
}

static void *pool_worker(void *arg)
{
    png_pool *p = arg;
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

        png_slot r = {.idx = i};
        decode_item(p, i, &r);

        pthread_mutex_lock(&p->mu);
        p->slots[i % p->nslots] = r;
        pthread_cond_broadcast(&p->ready);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Waits for the i-th result (in order) and moves it out of the pool. */
static void pool_take(png_pool *p, int64_t i, png_slot *out)
{
    png_slot *s = &p->slots[i % p->nslots];
    pthread_mutex_lock(&p->mu);
    while (s->idx != i) pthread_cond_wait(&p->ready, &p->mu);
    *out = *s;
    s->idx = -1;
    s->img.pixels = NULL;
    p->consumed = i + 1;
    pthread_cond_broadcast(&p->space);
    pthread_mutex_unlock(&p->mu);
}

/* ---- the conversion ----------------------------------------------------------------- */

typedef struct png_run {
    png_cfg cfg;
    png_tree tree;
    int height, width, channels;
    const char *shape_file; /* the file that fixed the size */
    bool *bad;              /* per item: unreadable (found by the first pass) */
    int64_t good[NSPLITS];  /* readable images per split */
    int64_t nskipped;       /* unreadable files */
    char **skipped;         /* "path: reason", the first MAX_LISTED_SKIPS */
} png_run;

/* Fixes channels and size from the first file whose header reads. */
static int probe_shape(png_run *r, pst_err *e)
{
    const png_cfg *c = &r->cfg;
    pngio_opts po = {.max_pixels = c->max_pixels};
    for (int64_t i = 0; i < r->tree.nitems; i++) {
        pngio_header h;
        pst_err pe;
        const char *path = r->tree.items[i].path;
        if (pngio_read_header(path, &po, &h, &pe) < 0) {
            if (c->strict) return pst_fail(e, "%s: %s (--strict)", path, pe.msg);
            continue; /* the pool reports it */
        }
        r->channels = c->channels ? c->channels : h.channels;
        r->height = c->height ? c->height : h.height;
        r->width = c->width ? c->width : h.width;
        r->shape_file = path;
        return 0;
    }
    /* nothing readable: report every file */
    for (int64_t i = 0; i < r->tree.nitems; i++) {
        pngio_header h;
        pst_err pe;
        if (pngio_read_header(r->tree.items[i].path, &po, &h, &pe) < 0)
            pst_warn("%s: %s (skipped)", r->tree.items[i].path, pe.msg);
    }
    return pst_fail(e, "%s: none of the %lld .png files is readable", c->dir,
                    (long long)r->tree.nitems);
}

static void record_skip(png_run *r, const char *path, const char *why)
{
    pst_warn("%s: %s (skipped)", path, why);
    if (r->nskipped < MAX_LISTED_SKIPS) {
        if (!r->skipped) r->skipped = pst_calloc(MAX_LISTED_SKIPS, sizeof(char *));
        size_t n = strlen(path) + strlen(why) + 3;
        r->skipped[r->nskipped] = pst_malloc(n);
        snprintf(r->skipped[r->nskipped], n, "%s: %s", path, why);
    }
    r->nskipped++;
}

/* One pass over the items not marked bad: decode with the pool, stream the
 * images in file order into `w` (when not NULL), split by split. The first
 * pass (w created with every file counted) marks and reports unreadable
 * files; after the first one it stops writing (aborts w, *w_dropped) but
 * goes on decoding to find them all. A second pass expects every file to
 * read. */
static int run_pass(png_run *r, h5w *w, bool first_pass, bool *w_dropped, pst_err *e)
{
    const png_cfg *c = &r->cfg;
    int64_t *order = pst_malloc(sizeof(int64_t) * (size_t)PST_MAX(r->tree.nitems, (int64_t)1));
    int64_t n = 0, expect[NSPLITS] = {0};
    for (int64_t i = 0; i < r->tree.nitems; i++)
        if (!r->bad[i]) {
            order[n++] = i;
            expect[r->tree.items[i].split]++;
        }
    memset(r->good, 0, sizeof r->good);
    png_pool p = {
        .items = r->tree.items,
        .order = order,
        .n = n,
        .popts = {.channels = r->channels, .alpha = c->alpha, .max_pixels = c->max_pixels},
        .height = c->height,
        .width = c->width};
    int nthreads = (int)PST_MIN((int64_t)c->threads, PST_MAX(p.n, (int64_t)1));
    p.nslots = 4 * nthreads + 4;
    p.slots = pst_calloc((size_t)p.nslots, sizeof(png_slot));
    for (int s = 0; s < p.nslots; s++) p.slots[s].idx = -1;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.ready, NULL);
    pthread_cond_init(&p.space, NULL);
    pthread_t *tids = pst_calloc((size_t)nthreads, sizeof(pthread_t));
    int started = 0, rc = 0;
    for (; started < nthreads; started++) {
        int err = pthread_create(&tids[started], NULL, pool_worker, &p);
        if (err) {
            if (started == 0) {
                rc = pst_fail(e, "cannot start a decoding thread: %s", strerror(err));
                goto join;
            }
            break; /* fewer threads is fine */
        }
    }

    int split = -1; /* the split open in w */
    pst_progress prog;
    pst_progress_start(&prog, first_pass ? "png" : "png (pass 2)", "images", p.n);
    for (int64_t i = 0; i < p.n && rc == 0; i++) {
        png_slot s;
        pool_take(&p, i, &s);
        int64_t item = order[i];
        const png_item *it = &r->tree.items[item];
        if (s.rc < 0) {
            if (c->strict)
                rc = pst_fail(e, "%s: %s (--strict: stopping at the first unreadable file)",
                              it->path, s.err);
            else if (!first_pass)
                rc = pst_fail(e, "%s: unreadable in the second pass but not in the first: %s",
                              it->path, s.err);
            else {
                if (prog.tty) fputs("\r\033[K", stderr); /* the warning replaces the bar */
                record_skip(r, it->path, s.err);
                r->bad[item] = true;
                if (w) {
                    h5w_abort(w); /* the counts are wrong now; pass 2 rewrites */
                    w = NULL;
                    *w_dropped = true;
                }
            }
        } else if (s.img.height != r->height || s.img.width != r->width) {
            rc = pst_fail(e,
                          "%s: size %dx%d (HxW) differs from %dx%d of %s; give --size HxW to "
                          "resize all images to one size",
                          it->path, s.img.height, s.img.width, r->height, r->width, r->shape_file);
        } else {
            r->good[it->split]++;
            if (w && split != it->split) {
                if ((split >= 0 && h5w_split_end(w, e) < 0) ||
                    h5w_split_begin(w, split_names[it->split], expect[it->split], e) < 0)
                    rc = -1;
                split = it->split;
            }
            if (rc == 0 && w && h5w_split_append(w, s.img.pixels, &it->label, 1, e) < 0) rc = -1;
        }
        pngio_image_free(&s.img);
        pst_progress_update(&prog, i + 1, NULL);
    }
    if (rc == 0 && w && split >= 0 && h5w_split_end(w, e) < 0) rc = -1;
    if (rc == 0) pst_progress_finish(&prog, p.n, NULL);

join:
    pthread_mutex_lock(&p.mu);
    p.stop = true;
    pthread_cond_broadcast(&p.space);
    pthread_mutex_unlock(&p.mu);
    for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
    for (int s = 0; s < p.nslots; s++) pngio_image_free(&p.slots[s].img);
    free(p.slots);
    free(tids);
    free(order);
    pthread_cond_destroy(&p.space);
    pthread_cond_destroy(&p.ready);
    pthread_mutex_destroy(&p.mu);
    return rc;
}

static void print_summary(const png_run *r, double seconds)
{
    const png_cfg *c = &r->cfg;
    int64_t total = r->good[0] + r->good[1] + r->good[2];
    printf("png: %s -> %s: %d classes, images %dx%dx%d (HxWxC)\n", c->dir, c->out, r->tree.nclasses,
           r->height, r->width, r->channels);
    printf("  train %lld, val %lld, test %lld images\n", (long long)r->good[SPLIT_TRAIN],
           (long long)r->good[SPLIT_VAL], (long long)r->good[SPLIT_TEST]);
    printf("  skipped %lld unreadable file(s)%s\n", (long long)r->nskipped, r->nskipped ? ":" : "");
    for (int64_t i = 0; i < PST_MIN(r->nskipped, (int64_t)MAX_LISTED_SKIPS); i++)
        printf("    %s\n", r->skipped[i]);
    if (r->nskipped > MAX_LISTED_SKIPS)
        printf("    ... and %lld more (see the warnings above)\n",
               (long long)(r->nskipped - MAX_LISTED_SKIPS));
    printf("  ignored %lld entries that are not .png files or class directories\n",
           (long long)r->tree.ignored);
    printf("  %.2f s, %.0f images/s\n", seconds, seconds > 0 ? (double)total / seconds : 0.0);
}

static int parse_size(const char *s, int *h, int *w)
{
    char *x = strpbrk(s, "xX");
    if (!x) return -1;
    char hs[32];
    size_t n = (size_t)(x - s);
    if (n == 0 || n >= sizeof hs) return -1;
    memcpy(hs, s, n);
    hs[n] = 0;
    return (pst_parse_int(hs, h) < 0 || pst_parse_int(x + 1, w) < 0 || *h < 1 || *w < 1 ||
            *h > 65536 || *w > 65536)
               ? -1
               : 0;
}

static const char *const png_flags[] = {
    "help",     "h",           "strict",       "force",        "o",    "output",
    "test-dir", "size",        "channels",     "val-fraction", "seed", "max-pixels",
    "alpha",    "compression", "chunk-images", "threads",      NULL};

static bool known_flag(const char *a)
{
    a += a[1] == '-' ? 2 : 1;
    for (const char *const *n = png_flags; *n; n++)
        if (!strcmp(a, *n)) return true;
    return false;
}

/* Parses the command line into `c`; returns 0, or the exit status. */
static int parse_args(int argc, char **argv, png_cfg *c)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *c = (png_cfg){.compression = 4, .threads = cores > 0 ? (int)PST_MIN(cores, 256L) : 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t i64;
        bool takes = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return -1; /* exit 0 */
        } else if (!strcmp(a, "--strict")) {
            c->strict = true, takes = false;
        } else if (!strcmp(a, "--force")) {
            c->force = true, takes = false;
        } else if (a[0] == '-' && a[1] && !known_flag(a)) {
            return pst_unknown_option(a, png_flags);
        } else if (a[0] == '-' && a[1] && !v) {
            return pst_usage_error("%s needs a value", a);
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            c->out = v;
        } else if (!strcmp(a, "--test-dir")) {
            c->test_dir = v;
        } else if (!strcmp(a, "--size")) {
            if (parse_size(v, &c->height, &c->width) < 0) {
                pst_error("--size '%s', expected HxW such as 28x28", v);
                return 2;
            }
        } else if (!strcmp(a, "--channels")) {
            if (pst_parse_int(v, &c->channels) < 0 || (c->channels != 1 && c->channels != 3)) {
                pst_error("--channels '%s', expected 1 or 3", v);
                return 2;
            }
        } else if (!strcmp(a, "--val-fraction")) {
            if (pst_parse_double(v, &c->val_fraction) < 0 || c->val_fraction < 0 ||
                c->val_fraction >= 1) {
                pst_error("--val-fraction '%s', expected 0 <= F < 1", v);
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            if (pst_parse_i64(v, &i64) < 0) {
                pst_error("--seed '%s', expected an integer", v);
                return 2;
            }
            c->seed = (uint64_t)i64;
        } else if (!strcmp(a, "--max-pixels")) {
            if (pst_parse_i64(v, &c->max_pixels) < 0 || c->max_pixels < 1) {
                pst_error("--max-pixels '%s', expected N >= 1", v);
                return 2;
            }
        } else if (!strcmp(a, "--alpha")) {
            if (!strcmp(v, "black"))
                c->alpha = PNGIO_ALPHA_BLACK;
            else if (!strcmp(v, "drop"))
                c->alpha = PNGIO_ALPHA_DROP;
            else {
                pst_error("--alpha '%s', expected black or drop", v);
                return 2;
            }
        } else if (!strcmp(a, "--compression")) {
            if (pst_parse_int(v, &c->compression) < 0 || c->compression < 0 || c->compression > 9) {
                pst_error("--compression '%s', expected 0-9", v);
                return 2;
            }
        } else if (!strcmp(a, "--chunk-images")) {
            if (pst_parse_int(v, &c->chunk_images) < 0 || c->chunk_images < 1) {
                pst_error("--chunk-images '%s', expected an integer >= 1", v);
                return 2;
            }
        } else if (!strcmp(a, "--threads")) {
            if (pst_parse_int(v, &c->threads) < 0 || c->threads < 1 || c->threads > 1024) {
                pst_error("--threads '%s', expected 1-1024", v);
                return 2;
            }
        } else if (!c->dir) {
            c->dir = a, takes = false;
        } else {
            return pst_usage_error("unexpected argument '%s'", a);
        }
        if (takes) i++;
    }
    if (!c->dir || !c->out) {
        return pst_usage_error("%s is required", !c->dir ? "DIR" : "-o OUT.h5");
    }
    return 0;
}

int prep_cmd_png(int argc, char **argv)
{
    png_run r = {0};
    int st = parse_args(argc, argv, &r.cfg);
    if (st) return st < 0 ? 0 : st;
    const png_cfg *c = &r.cfg;
    double t0 = pst_now();
    pst_err e = {""};
    h5w *w = NULL;
    int status = 1;

    if (list_tree(&r.tree, c, &e) < 0) goto fail;
    if (probe_shape(&r, &e) < 0) goto fail;
    char source[1024];
    snprintf(source, sizeof source,
             "pstrain-prep png %s%s%s: PNG tree, %dx%dx%d%s, val-fraction %g, seed %llu, "
             "alpha %s",
             c->dir, c->test_dir ? " --test-dir " : "", c->test_dir ? c->test_dir : "", r.height,
             r.width, r.channels, c->height ? " (resized)" : "", c->val_fraction,
             (unsigned long long)c->seed, c->alpha == PNGIO_ALPHA_BLACK ? "on black" : "dropped");
    h5w_opts wo = {.height = r.height,
                   .width = r.width,
                   .channels = r.channels,
                   .num_classes = r.tree.nclasses,
                   .class_names = (const char *const *)r.tree.classes,
                   .chunk_images = c->chunk_images,
                   .compression = c->compression,
                   .threads = PST_MIN(c->threads, 8),
                   .force = c->force,
                   .source = source};
    if (h5w_create(&w, c->out, &wo, &e) < 0) goto fail;
    r.bad = pst_calloc((size_t)PST_MAX(r.tree.nitems, (int64_t)1), sizeof(bool));
    bool dropped = false;
    /* run_pass owns w until it aborts it (dropped) */
    if (run_pass(&r, w, true, &dropped, &e) < 0) {
        if (dropped) w = NULL;
        goto fail;
    }
    if (dropped) {
        w = NULL;
        if (r.good[SPLIT_TRAIN] == 0) {
            pst_fail(&e, "%s: none of the %lld train files is readable", c->dir,
                     (long long)r.tree.per_split[SPLIT_TRAIN]);
            goto fail;
        }
        for (int s = SPLIT_VAL; s < NSPLITS; s++)
            if (r.tree.per_split[s] > 0 && r.good[s] == 0)
                pst_warn("split '%s': none of its %lld files is readable; not written",
                         split_names[s], (long long)r.tree.per_split[s]);
        if (h5w_create(&w, c->out, &wo, &e) < 0) goto fail;
        if (run_pass(&r, w, false, &dropped, &e) < 0) goto fail;
    }
    h5w *wc = w;
    w = NULL;
    if (h5w_commit(wc, &e) < 0) goto fail;
    print_summary(&r, pst_now() - t0);
    status = 0;
fail:
    if (status) pst_error("%s", e.msg);
    h5w_abort(w);
    free(r.bad);
    for (int64_t i = 0; i < PST_MIN(r.nskipped, (int64_t)MAX_LISTED_SKIPS); i++) free(r.skipped[i]);
    free(r.skipped);
    tree_free(&r.tree);
    return status;
}
