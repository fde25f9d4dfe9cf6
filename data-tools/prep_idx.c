/*
 * prep_idx.c - `pstrain-prep idx`: MNIST-style idx files (gzipped or raw)
 * to a pstrain data set.
 *
 * idx format: a 4-byte magic 0x00 0x00 <dtype> <ndim>, then ndim big-endian
 * uint32 dimensions, then the data. Images are dtype 0x08 (uint8) with
 * ndim 3 (N, H, W) or 4 (N, H, W, C); labels dtype 0x08 with ndim 1 (N).
 * Everything that can be checked before writing (headers, counts, labels)
 * is checked first; images are then streamed through the writer, and a
 * truncated image file aborts the run without leaving an output file.
 */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "h5write.h"
#include "prep.h"
#include "pstrain/common.h"
#include "pstrain/usage.h"
#include "pstrain/h5ds.h"
#include "pstrain/progress.h"

#define IDX_MAX_CLASSES 65536
#define IDX_READ_IMAGES 4096              /* images per read at most ... */
#define IDX_READ_BYTES ((size_t)16 << 20) /* ... and about this many bytes (at least one image) */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: pstrain-prep idx --train-images F --train-labels F\n"
            "                        [--test-images F --test-labels F] [--classes NAME,...]\n"
            "                        [--chunk-images N] [--compression 0-9] [--force] -o OUT.h5\n"
            "\n"
            "Converts MNIST-style idx files (gzipped or raw) to a pstrain data set.\n"
            "\n"
            "  --train-images F, --train-labels F   the train split (required)\n"
            "  --test-images F, --test-labels F     the test split (optional, both or neither)\n"
            "  --classes NAME,...   class names in label order; labels must lie in [0, K).\n"
            "                       Default: names 0..K-1 with K = the largest label + 1\n"
            "  --chunk-images N     images per HDF5 chunk (default: about 512 KiB of images)\n"
            "  --compression L      deflate level 0-9, 0 = none (default 4)\n"
            "  --threads N          compression threads (default: one per CPU, at most 8)\n"
            "  --force              overwrite OUT.h5 if it exists\n"
            "  -o, --output OUT.h5  the output (written to a temporary file, renamed at the end)\n"
            "\n"
            "Refused, with a message naming the file and exit status 1, before or while\n"
            "writing (no OUT.h5 and no temporary file are left): a missing or empty file,\n"
            "a bad magic number, a data type other than 0x08 (unsigned byte), images\n"
            "without 3 (N,H,W) or 4 (N,H,W,C) dimensions or labels without 1, a file\n"
            "shorter or longer than its header announces, a damaged gzip stream, image\n"
            "and label counts that differ, test images of another shape than the train\n"
            "images, labels outside the --classes given. Usage errors exit with 2.\n");
}

typedef struct idx_file {
    const char *path;
    gzFile gz;
    int ndim;
    int64_t dims[4];
    int64_t n;             /* dims[0] */
    size_t item_bytes;     /* product of the other dimensions */
    unsigned long long at; /* data bytes consumed so far */
} idx_file;

static void idx_close(idx_file *f)
{
    if (f->gz) gzclose(f->gz);
    f->gz = NULL;
}

static const char *gz_reason(idx_file *f)
{
    int errnum = 0;
    const char *msg = gzerror(f->gz, &errnum);
    if (errnum == Z_ERRNO) return strerror(errno);
    return msg && *msg ? msg : "read error";
}

/* Reads up to n bytes; returns the count read, or -1 on a read or gzip
 * error (message in e). */
static int64_t idx_read(idx_file *f, void *buf, size_t n, pst_err *e)
{
    size_t got = 0;
    while (got < n) {
        unsigned want = (unsigned)PST_MIN(n - got, (size_t)1 << 30);
        int r = gzread(f->gz, (char *)buf + got, want);
        if (r < 0) return pst_fail(e, "%s: read failed (%s)", f->path, gz_reason(f));
        if (r == 0) {
            /* zlib reports a cut gzip stream (Z_BUF_ERROR) only here */
            int errnum = 0;
            gzerror(f->gz, &errnum);
            if (errnum != Z_OK) return pst_fail(e, "%s: read failed (%s)", f->path, gz_reason(f));
            break;
        }
        got += (size_t)r;
    }
    return (int64_t)got;
}

/* Opens an idx file and checks its header: dtype uint8, ndim within
 * [min_ndim, max_ndim], every dimension >= 1. `what` names the content
 * for messages ("images", "labels"). */
static int idx_open(idx_file *f, const char *path, int min_ndim, int max_ndim, const char *what,
                    pst_err *e)
{
    memset(f, 0, sizeof *f);
    f->path = path;
    struct stat st;
    if (stat(path, &st) < 0) return pst_fail(e, "%s: cannot open: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return pst_fail(e, "%s: is a directory, expected an idx file", path);
    f->gz = gzopen(path, "rb");
    if (!f->gz) return pst_fail(e, "%s: cannot open: %s", path, strerror(errno));
    gzbuffer(f->gz, 1 << 20);
    uint8_t magic[4];
    int64_t got = idx_read(f, magic, 4, e);
    if (got < 0) goto fail;
    if (got == 0) {
        pst_fail(e, "%s: empty file, expected an idx %s file", path, what);
        goto fail;
    }
    if (got < 4) {
        pst_fail(e, "%s: truncated: %lld bytes, expected a 4-byte idx magic number", path,
                 (long long)got);
        goto fail;
    }
    if (magic[0] != 0 || magic[1] != 0) {
        pst_fail(e,
                 "%s: bad magic number 0x%02x%02x%02x%02x, expected an idx file "
                 "(0x000008%02x for %s)",
                 path, magic[0], magic[1], magic[2], magic[3], min_ndim, what);
        goto fail;
    }
    if (magic[2] != 0x08) {
        pst_fail(e, "%s: idx data type 0x%02x, expected 0x08 (unsigned byte) for %s", path,
                 magic[2], what);
        goto fail;
    }
    f->ndim = magic[3];
    if (f->ndim < min_ndim || f->ndim > max_ndim) {
        if (min_ndim == max_ndim)
            pst_fail(e, "%s: %d dimensions, expected %d for %s", path, f->ndim, min_ndim, what);
        else
            pst_fail(e, "%s: %d dimensions, expected %d to %d for %s", path, f->ndim, min_ndim,
                     max_ndim, what);
        goto fail;
    }
    uint8_t raw[16];
    got = idx_read(f, raw, (size_t)f->ndim * 4, e);
    if (got < 0) goto fail;
    if (got < f->ndim * 4) {
        pst_fail(e, "%s: truncated header: %d dimensions announced, file ends after %lld bytes",
                 path, f->ndim, (long long)(4 + got));
        goto fail;
    }
    f->item_bytes = 1;
    for (int i = 0; i < f->ndim; i++) {
        const uint8_t *b = raw + 4 * i;
        f->dims[i] = (int64_t)((uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 |
                               (uint32_t)b[3]);
        if (f->dims[i] == 0) {
            pst_fail(e, "%s: dimension %d is 0, expected >= 1", path, i);
            goto fail;
        }
        if (i > 0) f->item_bytes *= (size_t)f->dims[i];
    }
    f->n = f->dims[0];
    return 0;
fail:
    idx_close(f);
    return -1;
}

/* Fails when the file holds data beyond what its header announced. */
static int idx_check_end(idx_file *f, const char *what, pst_err *e)
{
    uint8_t extra[1];
    int64_t got = idx_read(f, extra, 1, e);
    if (got < 0) return -1;
    if (got > 0)
        return pst_fail(e, "%s: unexpected data after the %lld %s the header announces", f->path,
                        (long long)f->n, what);
    return 0;
}

/* Reads all labels of an open labels file into *out (int32). */
static int idx_read_labels(idx_file *f, int32_t **out, pst_err *e)
{
    /* grown as data arrive, so that a corrupt header announcing billions of
     * labels costs a clear "truncated" error, not a giant allocation */
    const int64_t step = (int64_t)1 << 20;
    int64_t cap = PST_MIN(f->n, step), got = 0;
    uint8_t *raw = pst_malloc((size_t)cap);
    int32_t *labels = NULL;
    while (got < f->n) {
        if (got == cap) {
            cap = PST_MIN(f->n, 2 * cap);
            raw = pst_realloc(raw, (size_t)cap);
        }
        int64_t r = idx_read(f, raw + got, (size_t)(cap - got), e);
        if (r < 0) goto fail;
        if (r == 0) break;
        got += r;
    }
    if (got < f->n) {
        pst_fail(e, "%s: truncated: %lld labels announced, file ends after %lld", f->path,
                 (long long)f->n, (long long)got);
        goto fail;
    }
    if (idx_check_end(f, "labels", e) < 0) goto fail;
    labels = pst_malloc((size_t)f->n * sizeof *labels);
    for (int64_t i = 0; i < f->n; i++) labels[i] = raw[i];
    free(raw);
    *out = labels;
    return 0;
fail:
    free(raw);
    return -1;
}

/* Splits "a,b,c" into names; fails on an empty or duplicate name. */
static int parse_classes(const char *arg, char ***names_out, int *k_out, pst_err *e)
{
    char *copy = pst_strdup(arg);
    int k = 1;
    for (const char *p = arg; *p; p++) k += *p == ',';
    if (k > IDX_MAX_CLASSES) {
        free(copy);
        return pst_fail(e, "--classes: %d names, at most %d supported", k, IDX_MAX_CLASSES);
    }
    char **names = pst_calloc((size_t)k, sizeof *names);
    char *p = copy;
    for (int i = 0; i < k; i++) {
        char *comma = strchr(p, ',');
        if (comma) *comma = 0;
        names[i] = pst_strdup(p);
        p = comma ? comma + 1 : p + strlen(p);
    }
    free(copy);
    for (int i = 0; i < k; i++) {
        if (!names[i][0]) {
            pst_fail(e, "--classes: name %d is empty (expected NAME,NAME,...)", i);
            goto fail;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(names[i], names[j])) {
                pst_fail(e, "--classes: '%s' given twice (names %d and %d)", names[i], j, i);
                goto fail;
            }
    }
    *names_out = names;
    *k_out = k;
    return 0;
fail:
    for (int i = 0; i < k; i++) free(names[i]);
    free(names);
    return -1;
}

typedef struct idx_split {
    const char *name; /* "train", "test" */
    const char *images_path, *labels_path;
    idx_file images, labels;
    int32_t *label_data;
} idx_split;

/* Reads `want` bytes into *buf, growing it (capacity *cap) as data arrive:
 * a header that announces more than the file holds costs a "truncated"
 * error, not an allocation of what it announced. Returns the bytes read
 * (fewer than want at the end of the file) or -1. */
static int64_t idx_read_grow(idx_file *f, uint8_t **buf, size_t *cap, size_t want, pst_err *e)
{
    size_t got = 0;
    while (got < want) {
        if (got == *cap) {
            *cap = PST_MIN(want, PST_MAX(*cap * 2, (size_t)1 << 20));
            *buf = pst_realloc(*buf, *cap);
        }
        int64_t r = idx_read(f, *buf + got, PST_MIN(*cap, want) - got, e);
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (int64_t)got;
}

/* Streams the images of split `s` into the writer, in reads of about
 * IDX_READ_BYTES (a 4096x4096 image is one read of 16 MiB, not 4096). */
static int convert_split(h5w *w, idx_split *s, pst_progress *prog, int64_t *done, pst_err *e)
{
    idx_file *f = &s->images;
    const int64_t per =
        PST_MAX((int64_t)1, PST_MIN((int64_t)IDX_READ_IMAGES,
                                    (int64_t)(IDX_READ_BYTES / PST_MAX(f->item_bytes, (size_t)1))));
    uint8_t *buf = NULL;
    size_t cap = 0;
    int rc = -1;
    for (int64_t at = 0; at < f->n; at += per) {
        int64_t count = PST_MIN(per, f->n - at);
        size_t want = (size_t)count * f->item_bytes;
        int64_t got = idx_read_grow(f, &buf, &cap, want, e);
        if (got < 0) goto done;
        if ((size_t)got < want) {
            int64_t complete = at + got / (int64_t)f->item_bytes;
            pst_fail(e,
                     "%s: truncated: %lld images of %lld bytes announced, file ends inside "
                     "image %lld",
                     f->path, (long long)f->n, (long long)f->item_bytes, (long long)complete);
            goto done;
        }
        /* the split is begun once its first images are there */
        if (at == 0 && h5w_split_begin(w, s->name, f->n, e) < 0) goto done;
        if (h5w_split_append(w, buf, s->label_data + at, count, e) < 0) goto done;
        *done += count;
        pst_progress_update(prog, *done, s->name);
    }
    if (idx_check_end(f, "images", e) < 0 || h5w_split_end(w, e) < 0) goto done;
    rc = 0;
done:
    free(buf);
    return rc;
}

typedef struct idx_cfg {
    const char *train_images, *train_labels, *test_images, *test_labels;
    const char *classes, *out;
    int chunk_images, compression, threads;
    bool force;
} idx_cfg;

/* Opens split s's label and image files and checks them before anything is
 * written: one label per image, the image size, the train split's shape
 * (s is not the train split when `train` is given), labels within the k
 * --classes (when `names`). *max_label: raised to the largest label. */
static int open_split(idx_split *s, const idx_split *train, char **names, int k, int32_t *max_label,
                      pst_err *e)
{
    if (idx_open(&s->labels, s->labels_path, 1, 1, "labels", e) < 0 ||
        idx_read_labels(&s->labels, &s->label_data, e) < 0 ||
        idx_open(&s->images, s->images_path, 3, 4, "images", e) < 0)
        return -1;
    idx_close(&s->labels);
    idx_file *im = &s->images;
    if (im->n != s->labels.n)
        return pst_fail(e, "%s: %lld images, but %s has %lld labels; expected one label per image",
                        im->path, (long long)im->n, s->labels.path, (long long)s->labels.n);
    int64_t c = im->ndim == 4 ? im->dims[3] : 1;
    if (im->dims[1] > 65536 || im->dims[2] > 65536 || c > H5DS_MAX_CHANNELS)
        return pst_fail(e, "%s: images of %lldx%lldx%lld, expected at most 65536x65536x%d",
                        im->path, (long long)im->dims[1], (long long)im->dims[2], (long long)c,
                        H5DS_MAX_CHANNELS);
    if (train && im->item_bytes != train->images.item_bytes)
        return pst_fail(e,
                        "%s: images of %lldx%lld (%zu bytes), but the train images %s are "
                        "%lldx%lld (%zu bytes); expected the same shape",
                        im->path, (long long)im->dims[1], (long long)im->dims[2], im->item_bytes,
                        train->images.path, (long long)train->images.dims[1],
                        (long long)train->images.dims[2], train->images.item_bytes);
    for (int64_t j = 0; j < s->labels.n; j++) {
        int32_t l = s->label_data[j];
        if (names && l >= k)
            return pst_fail(e,
                            "%s: label %d at index %lld is outside the %d classes given by "
                            "--classes (expected 0..%d)",
                            s->labels.path, l, (long long)j, k, k - 1);
        *max_label = PST_MAX(*max_label, l);
    }
    return 0;
}

/* Without --classes: classes "0".."max_label" into *names, *k; refuses a
 * one-class data set (labels_path names the train labels). */
static int number_classes(int32_t max_label, const char *labels_path, char ***names, int *k,
                          pst_err *e)
{
    if (max_label < 1) /* pstrain train refuses a one-class data set: say so now */
        return pst_fail(e,
                        "%s: every label is 0: one class, expected at least 2 (a classifier "
                        "needs two classes; --classes names them when another split has the "
                        "others)",
                        labels_path);
    *k = max_label + 1;
    *names = pst_calloc((size_t)*k, sizeof **names);
    for (int i = 0; i < *k; i++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", i);
        (*names)[i] = pst_strdup(buf);
    }
    return 0;
}

/* Reopens the written file with the same check `pstrain train` makes and
 * prints its one-line summary (total images, secs of work). */
static int report_written(const idx_cfg *cfg, const idx_split *splits, int nsplits, int64_t total,
                          double secs, pst_err *e)
{
    h5ds ds;
    if (h5ds_open(&ds, cfg->out, e) < 0) return -1;
    struct stat st;
    double mb = stat(cfg->out, &st) == 0 ? (double)st.st_size / 1e6 : 0;
    printf("%s: train %lld", cfg->out, (long long)splits[0].images.n);
    if (nsplits > 1) printf(", test %lld", (long long)splits[1].images.n);
    printf(" images of %dx%dx%d, %d classes, mean %.4f std %.4f, %.1f MB, %.2f s (%.0f "
           "images/s)\n",
           ds.height, ds.width, ds.channels, ds.num_classes, ds.mean[0], ds.std[0], mb, secs,
           secs > 0 ? (double)total / secs : 0);
    h5ds_close(&ds);
    return 0;
}

static int run_idx(const idx_cfg *cfg)
{
    pst_err e;
    idx_split splits[2];
    int nsplits = 1, k = 0, rc = 1;
    char **names = NULL;
    h5w *w = NULL;
    double t0 = pst_now(); /* the reported time covers reading, checking and writing */
    memset(splits, 0, sizeof splits);
    splits[0] = (idx_split){
        .name = "train", .images_path = cfg->train_images, .labels_path = cfg->train_labels};
    if (cfg->test_images)
        splits[nsplits++] = (idx_split){
            .name = "test", .images_path = cfg->test_images, .labels_path = cfg->test_labels};
    if (cfg->classes && parse_classes(cfg->classes, &names, &k, &e) < 0) goto fail;

    /* headers, counts and labels, before anything is written */
    int32_t max_label = -1;
    for (int i = 0; i < nsplits; i++)
        if (open_split(&splits[i], i > 0 ? &splits[0] : NULL, names, k, &max_label, &e) < 0)
            goto fail;
    if (!names && number_classes(max_label, splits[0].labels.path, &names, &k, &e) < 0) goto fail;

    idx_file *im0 = &splits[0].images;
    char source[2048];
    int len = snprintf(source, sizeof source, "pstrain-prep idx: train-images=%s train-labels=%s",
                       cfg->train_images, cfg->train_labels);
    if (cfg->test_images && len > 0 && (size_t)len < sizeof source)
        snprintf(source + len, sizeof source - (size_t)len, " test-images=%s test-labels=%s",
                 cfg->test_images, cfg->test_labels);
    h5w_opts o = {
        .height = (int)im0->dims[1],
        .width = (int)im0->dims[2],
        .channels = im0->ndim == 4 ? (int)im0->dims[3] : 1,
        .num_classes = k,
        .class_names = (const char *const *)names,
        .chunk_images = cfg->chunk_images,
        .compression = cfg->compression,
        .force = cfg->force,
        .threads = cfg->threads,
        .source = source,
    };
    if (h5w_create(&w, cfg->out, &o, &e) < 0) goto fail;
    pst_progress prog;
    int64_t total = 0, done = 0;
    for (int i = 0; i < nsplits; i++) total += splits[i].images.n;
    pst_progress_start(&prog, "idx", "images", total);
    for (int i = 0; i < nsplits; i++)
        if (convert_split(w, &splits[i], &prog, &done, &e) < 0) goto fail;
    h5w *committing = w;
    w = NULL;
    if (h5w_commit(committing, &e) < 0) goto fail;
    pst_progress_finish(&prog, done, NULL);
    /* the written file must pass the same check `pstrain train` makes */
    if (report_written(cfg, splits, nsplits, total, pst_now() - t0, &e) < 0) goto fail;
    rc = 0;
fail:
    if (rc) pst_error("%s", e.msg);
    h5w_abort(w);
    for (int i = 0; i < nsplits; i++) {
        idx_close(&splits[i].images);
        idx_close(&splits[i].labels);
        free(splits[i].label_data);
    }
    if (names)
        for (int i = 0; i < k; i++) free(names[i]);
    free(names);
    return rc;
}

int prep_cmd_idx(int argc, char **argv)
{
    static const struct option opts[] = {
        {"train-images", required_argument, NULL, 'I'},
        {"train-labels", required_argument, NULL, 'L'},
        {"test-images", required_argument, NULL, 'i'},
        {"test-labels", required_argument, NULL, 'l'},
        {"classes", required_argument, NULL, 'c'},
        {"chunk-images", required_argument, NULL, 'n'},
        {"compression", required_argument, NULL, 'z'},
        {"force", no_argument, NULL, 'f'},
        {"threads", required_argument, NULL, 't'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0},
    };
    idx_cfg cfg = {.compression = 4};
    optind = 1;
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "+:o:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'I':
            cfg.train_images = optarg;
            break;
        case 'L':
            cfg.train_labels = optarg;
            break;
        case 'i':
            cfg.test_images = optarg;
            break;
        case 'l':
            cfg.test_labels = optarg;
            break;
        case 'c':
            cfg.classes = optarg;
            break;
        case 'n':
            if (pst_parse_int(optarg, &cfg.chunk_images) < 0 || cfg.chunk_images < 1) {
                pst_error("--chunk-images '%s', expected an integer >= 1", optarg);
                return 2;
            }
            break;
        case 'z':
            if (pst_parse_int(optarg, &cfg.compression) < 0 || cfg.compression < 0 ||
                cfg.compression > 9) {
                pst_error("--compression '%s', expected 0-9", optarg);
                return 2;
            }
            break;
        case 'f':
            cfg.force = true;
            break;
        case 't':
            if (pst_parse_int(optarg, &cfg.threads) < 0 || cfg.threads < 1 || cfg.threads > 16) {
                pst_error("--threads '%s', expected 1-16", optarg);
                return 2;
            }
            break;
        case 'o':
            cfg.out = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default: /* ':' or '?' */
            return pst_getopt_error(opt, argv, opts);
        }
    }
    const char *missing = !cfg.train_images   ? "--train-images"
                          : !cfg.train_labels ? "--train-labels"
                          : !cfg.out          ? "-o OUT.h5"
                                              : NULL;
    if (missing) {
        return pst_usage_error("%s is required", missing);
    }
    if (!cfg.test_images != !cfg.test_labels) {
        return pst_usage_error("--test-images and --test-labels go together");
    }
    if (optind < argc) {
        return pst_usage_error("unexpected argument '%s'", argv[optind]);
    }
    return run_idx(&cfg);
}
