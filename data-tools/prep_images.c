/*
 * prep_images.c - `pstrain-prep images` (alias `png`): an ImageNet-style tree
 * of JPEG and PNG files (DIR/<class>/<name>.{JPEG,jpg,jpeg,png}) to a
 * pstrain data set, as pixels or as encoded JPEG bytes.
 *
 * Order of work:
 *  1. List the tree(s) and their labels (prep_tree.c).
 *  2. Probe the first file whose header reads: it fixes the channels (unless
 *     --channels) and, for pixels, the size (unless --size); then create the
 *     output.
 *  3. Decode with a pool of threads (prep_decode.c) while this thread takes
 *     the results in file order and streams them into the HDF5 writer, so
 *     that decoding and writing overlap. The writer needs each split's exact
 *     count up front; this pass assumes every file is readable.
 *  4. If some file was not (skipped with a warning), the output of step 3 is
 *     dropped once the pass has found every unreadable file, and a second
 *     pass decodes the readable ones again with the right counts. Broken
 *     files are rare; the common case pays for one pass and no spooling.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "data-tools/h5write.h"
#include "data-tools/prep.h"
#include "data-tools/prep_images.h"
#include "pstrain/common.h"
#include "pstrain/h5ds.h"
#include "pstrain/progress.h"
#include "pstrain/usage.h"

/* Skipped files listed one by one in the summary; more are only counted. */
#define MAX_LISTED_SKIPS 50

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: pstrain-prep images DIR [--val-dir DIR [--val-labels FILE]] [--test-dir DIR]\n"
        "         [--synsets FILE] [--store pixels|encoded] [--size HxW] [--max-side S]\n"
        "         [--quality Q] [--channels 1|3] [--val-fraction F] [--seed S] [--strict]\n"
        "         [--allow-truncated] [--max-pixels N] [--alpha black|drop] [--compression 0-9]\n"
        "         [--chunk-images N] [--threads N] [--force] -o OUT.h5\n"
        "       (pstrain-prep png is the same command)\n"
        "\n"
        "DIR/<class>/*.{JPEG,jpg,jpeg,png} (any case); the decoder is chosen by the file's\n"
        "content, not its name. Classes are the sorted folder names (ids 0..K-1), or the\n"
        "synset ids of --synsets FILE in its order ('n01440764 tench, Tinca tinca' lines;\n"
        "/classes stores the ids, /class_descriptions the words).\n"
        "  --val-dir DIR      validation images: DIR/<class>/* like the train tree, or a flat\n"
        "                     folder labelled by --val-labels FILE: one 1-based class index\n"
        "                     per line for the files in sorted name order (indices count the\n"
        "                     --synsets lines), or a CSV 'ImageId,PredictionString' whose\n"
        "                     label field starts with the synset (LOC_val_solution.csv)\n"
        "  --test-dir DIR     a test split, DIR/<class>/* with the train tree's classes\n"
        "  --store pixels     decode, convert, resize to --size: uint8 NHWC (default)\n"
        "  --store encoded    the JPEG files' own bytes (any size); PNGs and images shrunk\n"
        "                     by --max-side are re-encoded as JPEG at --quality (default %d)\n"
        "  --size HxW         pixels: area average when shrinking, bilinear when growing\n"
        "                     (default: keep; then all images must have one size)\n"
        "  --max-side S       encoded: shrink images whose shorter side exceeds S to S\n"
        "  --channels 1|3     output channels (default: those of the first image)\n"
        "  --val-fraction F   without --val-dir: round(F * n) images of each class to 'val'\n"
        "  --seed S           seed of the validation choice (default 0)\n"
        "  --strict           the first unreadable file is an error (default: skip it)\n"
        "  --allow-truncated  decode a truncated JPEG (missing rows grey) with a warning\n"
        "                     (default: it is unreadable)\n"
        "  --max-pixels N     refuse images declaring more than N pixels (default %lld)\n"
        "  --alpha black|drop PNG alpha composited on black (default) or ignored\n"
        "  --compression L    pixels: deflate level (default 4; 0 = none)\n"
        "  --chunk-images N   pixels: images per HDF5 chunk (default: about 512 KiB)\n"
        "  --threads N        decoding threads (default: online cores); as many compress,\n"
        "                     at most 8\n"
        "  -o, --output OUT.h5\n"
        "                     the output (written to a temporary file, renamed at the end)\n"
        "  --force            overwrite OUT.h5\n",
        IMG_DEFAULT_QUALITY, (long long)PNGIO_DEFAULT_MAX_PIXELS);
}

typedef struct img_run {
    img_cfg cfg;
    img_tree tree;
    int height, width, channels; /* encoded: height = width = 0 */
    const char *shape_file;      /* the file that fixed the size */
    bool *bad;                   /* per item: unreadable (found by the first pass) */
    int64_t good[NSPLITS];       /* readable images per split */
    int64_t nskipped;            /* unreadable files */
    char **skipped;              /* "path: reason", the first MAX_LISTED_SKIPS */
    int64_t nreencoded, stored_bytes, ntruncated;
} img_run;

static img_dec_opts dec_opts(const img_run *r)
{
    const img_cfg *c = &r->cfg;
    return (img_dec_opts){.store = c->store,
                          .channels = r->channels,
                          .height = c->height,
                          .width = c->width,
                          .max_side = c->max_side,
                          .quality = c->quality,
                          .alpha = c->alpha,
                          .max_pixels = c->max_pixels,
                          .allow_truncated = c->allow_truncated};
}

/* Fixes channels (and for pixels the size) from the first file whose header
 * reads. */
static int probe_shape(img_run *r, pst_err *e)
{
    const img_cfg *c = &r->cfg;
    img_dec_opts o = dec_opts(r);
    for (int64_t i = 0; i < r->tree.nitems; i++) {
        const char *path = r->tree.items[i].path;
        pst_err pe = {""};
        uint8_t *buf;
        size_t n;
        int h, w, ch, rc = img_read_file(path, &buf, &n, &pe);
        if (rc == 0) rc = img_probe(buf, n, &o, &h, &w, &ch, &pe);
        free(buf);
        if (rc < 0) {
            if (c->strict) return pst_fail(e, "%s: %s (--strict)", path, pe.msg);
            continue; /* the pool reports it */
        }
        r->channels = c->channels ? c->channels : ch;
        if (c->store == IMG_STORE_PIXELS) {
            r->height = c->height ? c->height : h;
            r->width = c->width ? c->width : w;
        }
        r->shape_file = path;
        return 0;
    }
    /* nothing readable: report every file */
    for (int64_t i = 0; i < r->tree.nitems; i++) {
        pst_err pe = {""};
        uint8_t *buf;
        size_t n;
        int h, w, ch, rc = img_read_file(r->tree.items[i].path, &buf, &n, &pe);
        if (rc == 0) rc = img_probe(buf, n, &o, &h, &w, &ch, &pe);
        free(buf);
        if (rc < 0) pst_warn("%s: %s (skipped)", r->tree.items[i].path, pe.msg);
    }
    return pst_fail(e, "%s: none of the %lld image files is readable", c->dir,
                    (long long)r->tree.nitems);
}

static void record_skip(img_run *r, const char *path, const char *why)
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

/* Appends one decoded image to the open split of w. */
static int append(img_run *r, h5w *w, const img_item *it, const img_result *s, pst_err *e)
{
    if (r->cfg.store == IMG_STORE_PIXELS) return h5w_split_append(w, s->px, &it->label, 1, e);
    bool train = it->split == SPLIT_TRAIN;
    if (h5w_split_append_encoded(w, s->jpeg, s->njpeg, s->jh, s->jw, it->label,
                                 train ? s->px : NULL, train ? (int64_t)s->height * s->width : 0,
                                 e) < 0)
        return -1;
    r->stored_bytes += (int64_t)s->njpeg;
    r->nreencoded += s->reencoded;
    return 0;
}

/* One pass over the items not marked bad: decode with the pool, stream the
 * images in file order into `w` (when not NULL), split by split. The first
 * pass (w created with every file counted) marks and reports unreadable
 * files; after the first one it stops writing (aborts w, *w_dropped) but
 * goes on decoding to find them all. A second pass expects every file to
 * read. */
static int run_pass(img_run *r, h5w *w, bool first_pass, bool *w_dropped, pst_err *e)
{
    const img_cfg *c = &r->cfg;
    int64_t *order = pst_malloc(sizeof(int64_t) * (size_t)PST_MAX(r->tree.nitems, (int64_t)1));
    int64_t n = 0, expect[NSPLITS] = {0};
    for (int64_t i = 0; i < r->tree.nitems; i++)
        if (!r->bad[i]) {
            order[n++] = i;
            expect[r->tree.items[i].split]++;
        }
    memset(r->good, 0, sizeof r->good);
    r->nreencoded = r->stored_bytes = 0;
    img_dec_opts o = dec_opts(r);
    img_pool p;
    if (img_pool_start(&p, r->tree.items, order, n, &o, c->threads, e) < 0) {
        free(order);
        return -1;
    }
    int rc = 0;
    int split = -1; /* the split open in w */
    pst_progress prog;
    char label[64];
    snprintf(label, sizeof label, "%s%s", c->cmd, first_pass ? "" : " (pass 2)");
    pst_progress_start(&prog, label, "images", n);
    for (int64_t i = 0; i < n && rc == 0; i++) {
        img_result s;
        img_pool_take(&p, i, &s);
        int64_t item = order[i];
        const img_item *it = &r->tree.items[item];
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
        } else if (c->store == IMG_STORE_PIXELS && (s.height != r->height || s.width != r->width)) {
            rc = pst_fail(e,
                          "%s: size %dx%d (HxW) differs from %dx%d of %s; give --size HxW to "
                          "resize all images to one size",
                          it->path, s.height, s.width, r->height, r->width, r->shape_file);
        } else {
            if (s.warn[0] && first_pass) {
                if (prog.tty) fputs("\r\033[K", stderr);
                pst_warn("%s: %s (--allow-truncated: decoded, the missing part grey)", it->path,
                         s.warn);
                r->ntruncated++;
            }
            r->good[it->split]++;
            if (w && split != it->split) {
                if ((split >= 0 && h5w_split_end(w, e) < 0) ||
                    h5w_split_begin(w, img_split_names[it->split], expect[it->split], e) < 0)
                    rc = -1;
                split = it->split;
            }
            if (rc == 0 && w && append(r, w, it, &s, e) < 0) rc = -1;
        }
        img_result_free(&s);
        pst_progress_update(&prog, i + 1, NULL);
    }
    if (rc == 0 && w && split >= 0 && h5w_split_end(w, e) < 0) rc = -1;
    if (rc == 0) pst_progress_finish(&prog, n, NULL);
    img_pool_stop(&p);
    free(order);
    return rc;
}

static double cpu_seconds(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0) return 0;
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
           (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

static void print_summary(const img_run *r, double seconds, double cpu)
{
    const img_cfg *c = &r->cfg;
    int64_t total = r->good[0] + r->good[1] + r->good[2];
    if (c->store == IMG_STORE_PIXELS)
        printf("%s: %s -> %s: %d classes, images %dx%dx%d (HxWxC)\n", c->cmd, c->dir, c->out,
               r->tree.nclasses, r->height, r->width, r->channels);
    else
        printf("%s: %s -> %s: %d classes, encoded JPEG, %d channel%s, %.1f MB (%lld "
               "re-encoded)\n",
               c->cmd, c->dir, c->out, r->tree.nclasses, r->channels, r->channels > 1 ? "s" : "",
               (double)r->stored_bytes / 1e6, (long long)r->nreencoded);
    printf("  train %lld, val %lld, test %lld images\n", (long long)r->good[SPLIT_TRAIN],
           (long long)r->good[SPLIT_VAL], (long long)r->good[SPLIT_TEST]);
    printf("  skipped %lld unreadable file(s)%s\n", (long long)r->nskipped, r->nskipped ? ":" : "");
    for (int64_t i = 0; i < PST_MIN(r->nskipped, (int64_t)MAX_LISTED_SKIPS); i++)
        printf("    %s\n", r->skipped[i]);
    if (r->nskipped > MAX_LISTED_SKIPS)
        printf("    ... and %lld more (see the warnings above)\n",
               (long long)(r->nskipped - MAX_LISTED_SKIPS));
    if (r->ntruncated)
        printf("  decoded %lld truncated JPEG(s) (--allow-truncated)\n", (long long)r->ntruncated);
    printf("  ignored %lld entries that are not image files or class directories\n",
           (long long)r->tree.ignored);
    printf("  %.2f s, %.0f images/s, %.2f CPU s, %.3f CPU ms per image\n", seconds,
           seconds > 0 ? (double)total / seconds : 0.0, cpu,
           total ? 1e3 * cpu / (double)total : 0.0);
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

static const char *const img_flags[] = {
    "help",       "h",        "strict",      "force",        "allow-truncated", "o",
    "output",     "test-dir", "val-dir",     "val-labels",   "synsets",         "store",
    "max-side",   "quality",  "size",        "channels",     "val-fraction",    "seed",
    "max-pixels", "alpha",    "compression", "chunk-images", "threads",         NULL};

static bool known_flag(const char *a)
{
    a += a[1] == '-' ? 2 : 1;
    for (const char *const *n = img_flags; *n; n++)
        if (!strcmp(a, *n)) return true;
    return false;
}

/* The options that need or exclude each other (the *_set flags: given on
 * the command line). Returns 0 or the exit status of a usage error. */
static int check_args(const img_cfg *c, bool quality_set, bool compression_set, bool chunks_set)
{
    if (!c->dir || !c->out) return pst_usage_error("%s is required", !c->dir ? "DIR" : "-o OUT.h5");
    if (c->val_labels && !c->val_dir)
        return pst_usage_error("--val-labels FILE labels the flat folder of --val-dir DIR; "
                               "give --val-dir");
    if (c->val_dir && c->val_fraction > 0)
        return pst_usage_error("--val-fraction takes val images from the train tree; with "
                               "--val-dir they come from there (give one of them)");
    if (c->store == IMG_STORE_PIXELS && (c->max_side || quality_set))
        return pst_usage_error("%s is for --store encoded (pixels are resized by --size HxW)",
                               c->max_side ? "--max-side" : "--quality");
    if (c->store == IMG_STORE_ENCODED && c->height)
        return pst_usage_error("--size is for --store pixels (encoded keeps each image's size; "
                               "--max-side S shrinks the large ones)");
    if (c->store == IMG_STORE_ENCODED && (compression_set || chunks_set))
        return pst_usage_error("%s is for --store pixels (JPEG bytes are stored as they are)",
                               compression_set ? "--compression" : "--chunk-images");
    return 0;
}

/* Parses the command line into `c`; returns 0, or the exit status (-1: help
 * printed, exit 0). */
static int parse_args(int argc, char **argv, img_cfg *c)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *c = (img_cfg){.cmd = argv[0],
                   .compression = 4,
                   .quality = IMG_DEFAULT_QUALITY,
                   .threads = cores > 0 ? (int)PST_MIN(cores, 256L) : 1};
    bool quality_set = false, compression_set = false, chunks_set = false;
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
        } else if (!strcmp(a, "--allow-truncated")) {
            c->allow_truncated = true, takes = false;
        } else if (a[0] == '-' && a[1] && !known_flag(a)) {
            return pst_unknown_option(a, img_flags);
        } else if (a[0] == '-' && a[1] && !v) {
            return pst_usage_error("%s needs a value", a);
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            c->out = v;
        } else if (!strcmp(a, "--test-dir")) {
            c->test_dir = v;
        } else if (!strcmp(a, "--val-dir")) {
            c->val_dir = v;
        } else if (!strcmp(a, "--val-labels")) {
            c->val_labels = v;
        } else if (!strcmp(a, "--synsets")) {
            c->synsets = v;
        } else if (!strcmp(a, "--store")) {
            if (!strcmp(v, "pixels"))
                c->store = IMG_STORE_PIXELS;
            else if (!strcmp(v, "encoded"))
                c->store = IMG_STORE_ENCODED;
            else
                return pst_usage_error("--store '%s', expected pixels or encoded", v);
        } else if (!strcmp(a, "--max-side")) {
            if (pst_parse_int(v, &c->max_side) < 0 || c->max_side < 1 || c->max_side > 65500)
                return pst_usage_error("--max-side '%s', expected 1-65500 pixels", v);
        } else if (!strcmp(a, "--quality")) {
            if (pst_parse_int(v, &c->quality) < 0 || c->quality < 1 || c->quality > 100)
                return pst_usage_error("--quality '%s', expected 1-100", v);
            quality_set = true;
        } else if (!strcmp(a, "--size")) {
            if (parse_size(v, &c->height, &c->width) < 0)
                return pst_usage_error("--size '%s', expected HxW such as 28x28", v);
        } else if (!strcmp(a, "--channels")) {
            if (pst_parse_int(v, &c->channels) < 0 || (c->channels != 1 && c->channels != 3))
                return pst_usage_error("--channels '%s', expected 1 or 3", v);
        } else if (!strcmp(a, "--val-fraction")) {
            if (pst_parse_double(v, &c->val_fraction) < 0 || c->val_fraction < 0 ||
                c->val_fraction >= 1)
                return pst_usage_error("--val-fraction '%s', expected 0 <= F < 1", v);
        } else if (!strcmp(a, "--seed")) {
            if (pst_parse_i64(v, &i64) < 0)
                return pst_usage_error("--seed '%s', expected an integer", v);
            c->seed = (uint64_t)i64;
        } else if (!strcmp(a, "--max-pixels")) {
            if (pst_parse_i64(v, &c->max_pixels) < 0 || c->max_pixels < 1)
                return pst_usage_error("--max-pixels '%s', expected N >= 1", v);
        } else if (!strcmp(a, "--alpha")) {
            if (!strcmp(v, "black"))
                c->alpha = PNGIO_ALPHA_BLACK;
            else if (!strcmp(v, "drop"))
                c->alpha = PNGIO_ALPHA_DROP;
            else
                return pst_usage_error("--alpha '%s', expected black or drop", v);
        } else if (!strcmp(a, "--compression")) {
            if (pst_parse_int(v, &c->compression) < 0 || c->compression < 0 || c->compression > 9)
                return pst_usage_error("--compression '%s', expected 0-9", v);
            compression_set = true;
        } else if (!strcmp(a, "--chunk-images")) {
            if (pst_parse_int(v, &c->chunk_images) < 0 || c->chunk_images < 1)
                return pst_usage_error("--chunk-images '%s', expected an integer >= 1", v);
            chunks_set = true;
        } else if (!strcmp(a, "--threads")) {
            if (pst_parse_int(v, &c->threads) < 0 || c->threads < 1 || c->threads > 1024)
                return pst_usage_error("--threads '%s', expected 1-1024", v);
        } else if (!c->dir) {
            c->dir = a, takes = false;
        } else {
            return pst_usage_error("unexpected argument '%s'", a);
        }
        if (takes) i++;
    }
    return check_args(c, quality_set, compression_set, chunks_set);
}

int prep_cmd_images(int argc, char **argv)
{
    img_run r = {0};
    int st = parse_args(argc, argv, &r.cfg);
    if (st) return st < 0 ? 0 : st;
    const img_cfg *c = &r.cfg;
    double t0 = pst_now(), cpu0 = cpu_seconds();
    pst_err e = {""};
    h5w *w = NULL;
    int status = 1;

    if (img_list_tree(&r.tree, c, &e) < 0) goto fail;
    if (probe_shape(&r, &e) < 0) goto fail;
    char source[2048], shape[64];
    if (c->store == IMG_STORE_PIXELS)
        snprintf(shape, sizeof shape, "pixels %dx%dx%d%s", r.height, r.width, r.channels,
                 c->height ? " (resized)" : "");
    else if (c->max_side)
        snprintf(shape, sizeof shape, "encoded, %d channels, max side %d, quality %d", r.channels,
                 c->max_side, c->quality);
    else
        snprintf(shape, sizeof shape, "encoded, %d channels, quality %d", r.channels, c->quality);
    snprintf(source, sizeof source,
             "pstrain-prep %s %s%s%s%s%s%s%s%s%s: image tree, %s, val-fraction %g, seed %llu, "
             "alpha %s",
             c->cmd, c->dir, c->val_dir ? " --val-dir " : "", c->val_dir ? c->val_dir : "",
             c->val_labels ? " --val-labels " : "", c->val_labels ? c->val_labels : "",
             c->test_dir ? " --test-dir " : "", c->test_dir ? c->test_dir : "",
             c->synsets ? " --synsets " : "", c->synsets ? c->synsets : "", shape, c->val_fraction,
             (unsigned long long)c->seed, c->alpha == PNGIO_ALPHA_BLACK ? "on black" : "dropped");
    h5w_opts wo = {.storage =
                       c->store == IMG_STORE_ENCODED ? H5DS_STORE_ENCODED : H5DS_STORE_PIXELS,
                   .height = r.height,
                   .width = r.width,
                   .channels = r.channels,
                   .num_classes = r.tree.nclasses,
                   .class_names = (const char *const *)r.tree.classes,
                   .class_descriptions = (const char *const *)r.tree.words,
                   .chunk_images = c->chunk_images,
                   .compression = c->store == IMG_STORE_ENCODED ? 0 : c->compression,
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
                         img_split_names[s], (long long)r.tree.per_split[s]);
        if (h5w_create(&w, c->out, &wo, &e) < 0) goto fail;
        if (run_pass(&r, w, false, &dropped, &e) < 0) goto fail;
    }
    h5w *wc = w;
    w = NULL;
    if (h5w_commit(wc, &e) < 0) goto fail;
    print_summary(&r, pst_now() - t0, cpu_seconds() - cpu0);
    status = 0;
fail:
    if (status) pst_error("%s", e.msg);
    h5w_abort(w);
    free(r.bad);
    for (int64_t i = 0; i < PST_MIN(r.nskipped, (int64_t)MAX_LISTED_SKIPS); i++) free(r.skipped[i]);
    free(r.skipped);
    img_tree_free(&r.tree);
    return status;
}
