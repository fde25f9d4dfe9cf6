/*
 * eval_cmd.c - `pstrain eval`: a checkpoint on a split of a data set:
 * top-1 and top-5 accuracy, loss, per-class accuracy and the confusion matrix.
 */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "pstrain/blas.h"
#include "pstrain/ckpt.h"
#include "pstrain/h5ds.h"
#include "pstrain/model.h"
#include "commands.h"
#include "pstrain/train.h"
#include "pstrain/run_common.h"
#include "pstrain/augment.h"
#include "pstrain/usage.h"

static const char eval_usage[] =
    "usage: pstrain eval --data FILE.h5 --checkpoint CKPT [--split test|val|train]\n"
    "                    [--batch B] [--summary-json FILE.json] [--logits FILE.npy]\n"
    "                    [--threads T] [--no-averages] [--quiet] [-h|--help]\n"
    "                    [--image-size HxW] [--augment A] [--prep-threads T]\n"
    "                    [--memory-budget SIZE]\n"
    "\n"
    "CKPT is a checkpoint file, or a checkpoint directory (its newest good checkpoint).\n"
    "A checkpoint with moving averages (--moving-average-decay) is evaluated with the\n"
    "averages in place of the variables; --no-averages uses the raw variables.\n"
    "Prints top-1 and top-5 accuracy (a class is in the top 5 when fewer than 5 classes\n"
    "rank above it: a higher logit, or an equal one at a lower index; with 5 classes or\n"
    "fewer top-5 is 1), loss, per-class accuracy and the confusion matrix (rows: true\n"
    "class); with more than 100 classes only the 10 best and 10 worst classes by accuracy\n"
    "(--summary-json has them all).\n"
    "--logits writes every example's logits (before the softmax), in the split's order, as a\n"
    "NumPy .npy array of float32 [examples][classes].\n"
    "--threads T: compute threads (default 1; 0 = the CPUs of the affinity mask); the\n"
    "results do not depend on T.\n"
    "--image-size and --augment default to the checkpoint's (what it was trained with):\n"
    "encoded data sets, and pixels with --augment inception|resnet, are read through the\n"
    "recipe's evaluation transform (inception: central 87.5% crop, resize; resnet: shorter\n"
    "side to 256/224 of the size, centre crop; otherwise a plain resize) on --prep-threads\n"
    "threads (default 2) within --memory-budget (as pstrain train's).\n";

/* ---- --logits: a NumPy .npy file (format 1.0), streamed batch by batch ---- */

typedef struct logits_out {
    const char *path;
    FILE *f;
    char tmp[4200];
    int renamed;   /* 0: a device, in place */
    int64_t rows;  /* written so far */
    int64_t total; /* announced in the header */
} logits_out;

static bool little_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

static int logits_open(logits_out *o, int64_t rows, int K, pst_err *e)
{
    o->f = pst_out_fopen(o->path, "wb", o->tmp, sizeof o->tmp, &o->renamed);
    if (!o->f) return pst_fail(e, "%s: cannot create logits file: %s", o->path, strerror(errno));
    o->total = rows;
    /* magic, version 1.0, header length (little-endian uint16), then the
     * header dictionary padded with spaces to a multiple of 64 bytes in all,
     * ending in a newline */
    char hdr[160];
    int n = snprintf(hdr, sizeof hdr,
                     "{'descr': '%cf4', 'fortran_order': False, 'shape': (%lld, %d), }",
                     little_endian() ? '<' : '>', (long long)rows, K);
    int total = 10 + n + 1;
    int pad = (64 - total % 64) % 64;
    int hlen = n + pad + 1;
    fwrite("\x93NUMPY\x01\x00", 1, 8, o->f);
    fputc(hlen & 0xff, o->f);
    fputc(hlen >> 8, o->f);
    fwrite(hdr, 1, (size_t)n, o->f);
    for (int i = 0; i < pad; i++) fputc(' ', o->f);
    fputc('\n', o->f);
    return 0;
}

static int logits_batch(void *ctx, const float *logits, int n, int K, pst_err *e)
{
    logits_out *o = ctx;
    if (fwrite(logits, sizeof *logits * (size_t)K, (size_t)n, o->f) != (size_t)n)
        return pst_fail(e, "%s: cannot write logits: %s", o->path, strerror(errno));
    o->rows += n;
    return 0;
}

/* Flushes, closes and publishes the file; on failure (or `ok` false) the
 * temporary is removed and nothing is published. */
static int logits_close(logits_out *o, bool ok, pst_err *e)
{
    if (!o->f) return 0;
    bool bad = fflush(o->f) != 0 || ferror(o->f);
    int err = errno;
    if (fclose(o->f) != 0 && !bad) bad = true, err = errno;
    o->f = NULL;
    if (ok && !bad && o->rows != o->total) bad = true, err = EIO;
    if (ok && !bad && o->renamed && rename(o->tmp, o->path) != 0) bad = true, err = errno;
    if (!ok || bad) {
        if (o->renamed) remove(o->tmp);
        if (ok) return pst_fail(e, "%s: cannot write logits: %s", o->path, strerror(err));
    }
    return 0;
}

static int write_json(const char *path, const char *ckpt, const char *split, bool averages,
                      const h5ds *ds, const eval_stats *ev, const int64_t *conf, pst_err *e)
{
    char tmp[4200];
    int renamed; /* 0: a device, in place */
    FILE *f = pst_out_fopen(path, "w", tmp, sizeof tmp, &renamed);
    if (!f) return pst_fail(e, "%s: cannot create summary: %s", path, strerror(errno));
    const int K = ds->num_classes;
    fprintf(f, "{\n  \"checkpoint\": ");
    pst_json_str(f, ckpt);
    fprintf(f, ",\n  \"split\": ");
    pst_json_str(f, split);
    fprintf(f, ",\n  \"averages\": %s,\n", averages ? "true" : "false");
    fprintf(f,
            "  \"accuracy\": %.8g,\n  \"top5_accuracy\": %.8g,\n  \"loss\": %.8g,\n"
            "  \"examples\": %lld,\n",
            ev->accuracy, ev->top5_accuracy, ev->loss, (long long)ev->examples);
    fprintf(f, "  \"per_class_accuracy\": [");
    for (int k = 0; k < K; k++) {
        int64_t row = 0;
        for (int j = 0; j < K; j++) row += conf[k * K + j];
        fprintf(f, "%s%.6g", k ? ", " : "", row ? (double)conf[k * K + k] / (double)row : 0.0);
    }
    fprintf(f, "],\n  \"confusion\": [");
    for (int k = 0; k < K; k++) {
        fprintf(f, "%s\n    [", k ? "," : "");
        for (int j = 0; j < K; j++) fprintf(f, "%s%lld", j ? ", " : "", (long long)conf[k * K + j]);
        fprintf(f, "]");
    }
    fprintf(f, "\n  ]\n}\n");
    bool bad = fflush(f) != 0 || ferror(f);
    int err = errno;
    if (fclose(f) != 0 && !bad) bad = true, err = errno;
    if (!bad && renamed && rename(tmp, path) != 0) bad = true, err = errno;
    if (bad) {
        if (renamed) remove(tmp);
        return pst_fail(e, "%s: cannot write summary: %s", path, strerror(err));
    }
    return 0;
}

/* ---- the per-class report ---- */

/* Up to this many classes eval prints the per-class table and the confusion
 * matrix; above it (ImageNet's 1000) the best and worst classes. */
#define EVAL_TABLE_MAX_CLASSES 100
#define EVAL_SUMMARY_CLASSES 10

static int64_t class_count(const int64_t *conf, int K, int k)
{
    int64_t row = 0;
    for (int j = 0; j < K; j++) row += conf[(int64_t)k * K + j];
    return row;
}

static void print_class_line(const h5ds *ds, const int64_t *conf, int k)
{
    const int K = ds->num_classes;
    int64_t row = class_count(conf, K, k), hit = conf[(int64_t)k * K + k];
    printf("  %2d %-20s %.4f  (%lld", k, ds->class_names[k], row ? (double)hit / (double)row : 0.0,
           (long long)row);
    if (K > EVAL_TABLE_MAX_CLASSES) printf(", %lld correct", (long long)hit);
    printf(")\n");
}

static void print_class_table(const h5ds *ds, const int64_t *conf)
{
    const int K = ds->num_classes;
    printf("\nper-class accuracy:\n");
    for (int k = 0; k < K; k++) print_class_line(ds, conf, k);
    printf("\nconfusion matrix (rows: true class, columns: predicted):\n     ");
    for (int j = 0; j < K; j++) printf(" %5d", j);
    printf("\n");
    for (int k = 0; k < K; k++) {
        printf("  %2d ", k);
        for (int j = 0; j < K; j++) printf(" %5lld", (long long)conf[k * K + j]);
        printf("\n");
    }
}

/* A class's accuracy for the ranking (hit/row as a double: equal fractions
 * give equal doubles, the division being correctly rounded). */
typedef struct class_rank {
    int k;
    double acc;
} class_rank;

/* best first; equal accuracies by class index */
static int cmp_best(const void *pa, const void *pb)
{
    const class_rank *a = pa, *b = pb;
    if (a->acc != b->acc) return a->acc > b->acc ? -1 : 1;
    return (a->k > b->k) - (a->k < b->k);
}

/* worst first; equal accuracies by class index */
static int cmp_worst(const void *pa, const void *pb)
{
    const class_rank *a = pa, *b = pb;
    if (a->acc != b->acc) return a->acc < b->acc ? -1 : 1;
    return (a->k > b->k) - (a->k < b->k);
}

/* More classes than a table can show: the best and worst by accuracy among
 * the classes with examples in the split (a class with none has no
 * accuracy), and how many had none. */
static void print_class_summary(const h5ds *ds, const int64_t *conf, const char *json)
{
    const int K = ds->num_classes;
    class_rank *r = pst_malloc(sizeof *r * (size_t)K);
    int n = 0;
    for (int k = 0; k < K; k++) {
        int64_t row = class_count(conf, K, k);
        if (row) r[n++] = (class_rank){k, (double)conf[(int64_t)k * K + k] / (double)row};
    }
    const int show = PST_MIN(n, EVAL_SUMMARY_CLASSES);
    printf("\nper-class accuracy of %d classes (%d without examples in the split); the %d best:\n",
           K, K - n, show);
    qsort(r, (size_t)n, sizeof *r, cmp_best);
    for (int i = 0; i < show; i++) print_class_line(ds, conf, r[i].k);
    printf("the %d worst:\n", show);
    qsort(r, (size_t)n, sizeof *r, cmp_worst);
    for (int i = 0; i < show; i++) print_class_line(ds, conf, r[i].k);
    printf("(more than %d classes: no per-class table or confusion matrix; %s)\n",
           EVAL_TABLE_MAX_CLASSES,
           json ? "the --summary-json file has every class's accuracy and the confusion matrix"
                : "--summary-json FILE writes every class's accuracy and the confusion matrix");
    free(r);
}

int eval_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"data", required_argument, 0, 'd'},
        {"checkpoint", required_argument, 0, 'c'},
        {"split", required_argument, 0, 's'},
        {"batch", required_argument, 0, 'b'},
        {"summary-json", required_argument, 0, 'j'},
        {"logits", required_argument, 0, 'l'},
        {"quiet", no_argument, 0, 'q'},
        {"no-averages", no_argument, 0, 'A'},
        {"threads", required_argument, 0, 't'},
        {"image-size", required_argument, 0, 'I'},
        {"augment", required_argument, 0, 'G'},
        {"prep-threads", required_argument, 0, 'P'},
        {"memory-budget", required_argument, 0, 'M'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *data = NULL, *ckarg = NULL, *split = "test", *summary = NULL;
    logits_out lo = {0};
    int batch = 256, threads = 1;
    bool quiet = false, no_averages = false;
    const char *augment = NULL;
    pipe_cfg input = pipe_cfg_defaults();
    int o;
    optind = 1;
    opterr = 0; /* pst_getopt_error reports, with the nearest flag */
    while ((o = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
        switch (o) {
        case 'd':
            data = optarg;
            break;
        case 'c':
            ckarg = optarg;
            break;
        case 's':
            split = optarg;
            break;
        case 'b':
            if (pst_parse_int(optarg, &batch) < 0 || batch < 1) {
                pst_error("--batch: expected a positive integer, got '%s'", optarg);
                return PST_EXIT_USAGE;
            }
            break;
        case 't':
            if (pst_parse_int(optarg, &threads) < 0 || threads < 0 || threads > NN_MAX_THREADS) {
                pst_error("--threads: expected 0..%d threads (0: the CPUs of the affinity mask), "
                          "got '%s'",
                          NN_MAX_THREADS, optarg);
                return PST_EXIT_USAGE;
            }
            break;
        case 'I':
            if (train_parse_image_size(optarg, &input.out_h, &input.out_w) < 0) {
                pst_error("--image-size: expected HxW with sides 1..4096, e.g. 299x299, got '%s'",
                          optarg);
                return PST_EXIT_USAGE;
            }
            break;
        case 'G':
            if (train_parse_augment(optarg, &input) < 0) {
                pst_error("--augment: expected inception, resnet, a list of crop, flip, or none, "
                          "got '%s'",
                          optarg);
                return PST_EXIT_USAGE;
            }
            augment = optarg;
            break;
        case 'P':
            if (pst_parse_int(optarg, &input.prep_threads) < 0 || input.prep_threads < 1 ||
                input.prep_threads > 256) {
                pst_error("--prep-threads: expected 1..256 threads, got '%s'", optarg);
                return PST_EXIT_USAGE;
            }
            break;
        case 'M':
            if (pipe_parse_size(optarg, &input.memory_budget) < 0) {
                pst_error("--memory-budget: expected a size in bytes with an optional K/M/G "
                          "suffix, e.g. 2G, got '%s'",
                          optarg);
                return PST_EXIT_USAGE;
            }
            break;
        case 'j':
            summary = optarg;
            break;
        case 'l':
            lo.path = optarg;
            break;
        case 'q':
            quiet = true;
            break;
        case 'A':
            no_averages = true;
            break;
        case 'h':
            fputs(eval_usage, stdout);
            return 0;
        default:
            return pst_getopt_error(o, argv, opts);
        }
    }
    if (optind < argc) return pst_usage_error("unexpected argument '%s'", argv[optind]);
    if (!data || !ckarg)
        return pst_usage_error("--data FILE.h5 and --checkpoint CKPT are required");
    nn_blis_init();
    pst_err e = {{0}};
    h5ds ds;
    nn_model *m = NULL;
    ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    int64_t *conf = NULL;
    float *averages = NULL;
    int rc = 1;
    char path[4096];
    int r = ckpt_resolve(ckarg, path, sizeof path, &e);
    if (r <= 0) {
        if (r == 0) pst_fail(&e, "%s: no checkpoint found", ckarg);
        pst_error("%s", e.msg);
        return 1;
    }
    if (lo.path && pst_out_check(lo.path, true, &e) < 0) {
        pst_error("%s", e.msg);
        return 1;
    }
    if (h5ds_open(&ds, data, &e) < 0) {
        pst_error("%s", e.msg);
        return 1;
    }
    if (ckpt_read_meta(path, &meta, &e) < 0) goto fail;
    /* the input: the checkpoint's size and recipe unless given */
    if (!augment && meta.augment[0] && train_parse_augment(meta.augment, &input) < 0) {
        pst_fail(&e, "%s: attribute augment is '%s', expected inception, resnet, crop,flip or none",
                 path, meta.augment);
        goto fail;
    }
    if (!input.out_h) input.out_h = meta.height, input.out_w = meta.width;
    const bool stored_pixels = ds.storage != H5DS_STORE_ENCODED && input.recipe == AUG_RESIZE;
    if ((stored_pixels && (meta.height != ds.height || meta.width != ds.width)) ||
        meta.channels != ds.channels || meta.num_classes != ds.num_classes) {
        pst_fail(&e,
                 "%s: checkpoint is for %dx%dx%d images and %d classes, but %s has %dx%dx%d "
                 "and %d classes",
                 path, meta.height, meta.width, meta.channels, meta.num_classes, data, ds.height,
                 ds.width, ds.channels, ds.num_classes);
        goto fail;
    }
    const h5ds_split *sp = h5ds_find_split(&ds, split);
    if (!sp) {
        h5ds_no_split(&ds, split, &e);
        goto fail;
    }
    /* a batch larger than the split would only allocate (and maybe exhaust) memory */
    if (batch > sp->count) batch = (int)PST_MAX(sp->count, (int64_t)1);
    nn_model_cfg mc = {.name = meta.model_name,
                       .height = input.out_h,
                       .width = input.out_w,
                       .channels = ds.channels,
                       .num_classes = ds.num_classes,
                       .max_batch = batch,
                       .seed = meta.seed,
                       .threads = pst_threads_resolve(threads)};
    if (nn_model_new(&m, &mc, &e) < 0) goto fail;
    ckpt_expect want = ckpt_expect_model(m, NULL);
    const bool use_avg = meta.has_averages && !no_averages;
    if (use_avg) {
        averages = pst_aligned_alloc(sizeof(float) * (nn_model_size(m) ? nn_model_size(m) : 1));
        want.averages = averages;
    }
    if (ckpt_read(path, &want, nn_model_params(m), NULL, 0, NULL, &e) < 0) goto fail;
    if (use_avg) memcpy(nn_model_params(m), averages, sizeof(float) * nn_model_size(m));

    const int K = ds.num_classes;
    conf = pst_calloc((size_t)K * (size_t)K, sizeof *conf);
    eval_stats ev;
    if (lo.path && logits_open(&lo, sp->count, K, &e) < 0) goto fail;
    if (train_evaluate_logits(m, &ds, &input, split, batch, &ev, conf,
                              lo.path ? logits_batch : NULL, &lo, &e) < 0)
        goto fail;

    printf("checkpoint %s (%s, step %lld, %s)\n", path, meta.model_name,
           (long long)meta.global_step,
           use_avg             ? "moving averages"
           : meta.has_averages ? "raw variables, --no-averages"
                               : "variables");
    printf("%s split of %s: accuracy %.4f, top-5 %.4f, loss %.4f, %lld examples\n", split, data,
           ev.accuracy, ev.top5_accuracy, ev.loss, (long long)ev.examples);
    if (!quiet && K <= EVAL_TABLE_MAX_CLASSES) {
        print_class_table(&ds, conf);
    } else if (!quiet) {
        print_class_summary(&ds, conf, summary);
    }
    if (summary && write_json(summary, path, split, use_avg, &ds, &ev, conf, &e) < 0) goto fail;
    if (logits_close(&lo, true, &e) < 0) goto fail;
    rc = 0;
    goto out;
fail:
    pst_error("%s", e.msg);
    logits_close(&lo, false, &e);
out:
    free(conf);
    free(averages);
    nn_model_free(m);
    ckpt_meta_free(&meta);
    h5ds_close(&ds);
    return rc;
}
