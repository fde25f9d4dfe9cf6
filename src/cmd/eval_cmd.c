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
    "                    [--memory-budget SIZE] [--normalize N]\n"
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
    "threads (default 2) within --memory-budget (as pstrain train's).\n"
    "--normalize dataset|imagenet|M1,M2,M3/S1,S2,S3: the input normalisation (as pstrain\n"
    "train's; default the checkpoint's, dataset for one that records none).\n";

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

/* ---- the command ---- */

/* What the command line asks for. */
typedef struct eval_opts {
    const char *data, *ckarg, *split, *summary;
    const char *augment; /* --augment as given, or NULL: the checkpoint's */
    int batch, threads;
    bool quiet, no_averages;
    pipe_cfg input; /* --image-size, --augment, --prep-threads, --memory-budget */
} eval_opts;

/* An evaluation under way: what it owns (freed by eval_free) and found. */
typedef struct eval_run {
    eval_opts o;
    char path[4096]; /* the checkpoint file */
    logits_out lo;   /* --logits */
    h5ds ds;
    ckpt_meta meta;
    const h5ds_split *sp;
    nn_model *m;
    float *averages; /* the checkpoint's moving averages, when used */
    bool use_avg;
    int64_t *conf; /* K x K [true][predicted] */
    eval_stats ev;
} eval_run;

/* The value of option `o` (one that takes a number, a size or a recipe)
 * into *opt: 0, or PST_EXIT_USAGE after the message. */
static int eval_parse_value(int o, const char *arg, eval_opts *opt)
{
    switch (o) {
    case 'b':
        if (pst_parse_int(arg, &opt->batch) < 0 || opt->batch < 1) {
            pst_error("--batch: expected a positive integer, got '%s'", arg);
            return PST_EXIT_USAGE;
        }
        break;
    case 't':
        if (pst_parse_int(arg, &opt->threads) < 0 || opt->threads < 0 ||
            opt->threads > NN_MAX_THREADS) {
            pst_error("--threads: expected 0..%d threads (0: the CPUs of the affinity mask), "
                      "got '%s'",
                      NN_MAX_THREADS, arg);
            return PST_EXIT_USAGE;
        }
        break;
    case 'I':
        if (train_parse_image_size(arg, &opt->input.out_h, &opt->input.out_w) < 0) {
            pst_error("--image-size: expected HxW with sides 1..4096, e.g. 299x299, got '%s'", arg);
            return PST_EXIT_USAGE;
        }
        break;
    case 'G':
        if (train_parse_augment(arg, &opt->input) < 0) {
            pst_error("--augment: expected inception, resnet, a list of crop, flip, or none, "
                      "got '%s'",
                      arg);
            return PST_EXIT_USAGE;
        }
        opt->augment = arg;
        break;
    case 'N':
        if (pipe_norm_parse(arg, &opt->input.norm) < 0) {
            pst_error("--normalize: expected dataset, imagenet or M1,M2,M3/S1,S2,S3 (a mean in "
                      "[0, 1] and a std > 0 per channel), got '%s'",
                      arg);
            return PST_EXIT_USAGE;
        }
        break;
    case 'P':
        if (pst_parse_int(arg, &opt->input.prep_threads) < 0 || opt->input.prep_threads < 1 ||
            opt->input.prep_threads > 256) {
            pst_error("--prep-threads: expected 1..256 threads, got '%s'", arg);
            return PST_EXIT_USAGE;
        }
        break;
    case 'M':
        if (pipe_parse_size(arg, &opt->input.memory_budget) < 0) {
            pst_error("--memory-budget: expected a size in bytes with an optional K/M/G "
                      "suffix, e.g. 2G, got '%s'",
                      arg);
            return PST_EXIT_USAGE;
        }
        break;
    }
    return 0;
}

/* Parses the command line into *opt and lo->path. -1 to go on, or the exit
 * status (0 after --help, PST_EXIT_USAGE after the message). */
static int eval_parse(int argc, char **argv, eval_opts *opt, logits_out *lo)
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
        {"normalize", required_argument, 0, 'N'},
        {"prep-threads", required_argument, 0, 'P'},
        {"memory-budget", required_argument, 0, 'M'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    *opt = (eval_opts){.split = "test", .batch = 256, .threads = 1, .input = pipe_cfg_defaults()};
    int o;
    optind = 1;
    opterr = 0; /* pst_getopt_error reports, with the nearest flag */
    while ((o = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
        switch (o) {
        case 'd':
            opt->data = optarg;
            break;
        case 'c':
            opt->ckarg = optarg;
            break;
        case 's':
            opt->split = optarg;
            break;
        case 'b':
        case 't':
        case 'I':
        case 'G':
        case 'N':
        case 'P':
        case 'M':
            if (eval_parse_value(o, optarg, opt) != 0) return PST_EXIT_USAGE;
            break;
        case 'j':
            opt->summary = optarg;
            break;
        case 'l':
            lo->path = optarg;
            break;
        case 'q':
            opt->quiet = true;
            break;
        case 'A':
            opt->no_averages = true;
            break;
        case 'h':
            fputs(eval_usage, stdout);
            return 0;
        default:
            return pst_getopt_error(o, argv, opts);
        }
    }
    if (optind < argc) return pst_usage_error("unexpected argument '%s'", argv[optind]);
    if (!opt->data || !opt->ckarg)
        return pst_usage_error("--data FILE.h5 and --checkpoint CKPT are required");
    return -1;
}

/* The checkpoint's attributes; the input (image size and recipe: the
 * checkpoint's unless given) checked against the data set; the split; a
 * batch no larger than the split. 0, or -1 with the message in e. */
static int eval_check_input(eval_run *r, pst_err *e)
{
    eval_opts *o = &r->o;
    const h5ds *ds = &r->ds;
    const ckpt_meta *meta = &r->meta;
    if (ckpt_read_meta(r->path, &r->meta, e) < 0) return -1;
    /* the input: the checkpoint's size and recipe unless given */
    if (!o->augment && meta->augment[0] && train_parse_augment(meta->augment, &o->input) < 0)
        return pst_fail(e,
                        "%s: attribute augment is '%s', expected inception, resnet, crop,flip "
                        "or none",
                        r->path, meta->augment);
    if (!o->input.out_h) o->input.out_h = meta->height, o->input.out_w = meta->width;
    const bool stored_pixels = ds->storage != H5DS_STORE_ENCODED && o->input.recipe == AUG_RESIZE;
    if ((stored_pixels && (meta->height != ds->height || meta->width != ds->width)) ||
        meta->channels != ds->channels || meta->num_classes != ds->num_classes)
        return pst_fail(e,
                        "%s: checkpoint is for %dx%dx%d images and %d classes, but %s has "
                        "%dx%dx%d and %d classes",
                        r->path, meta->height, meta->width, meta->channels, meta->num_classes,
                        o->data, ds->height, ds->width, ds->channels, ds->num_classes);
    /* the normalisation: --normalize, else the checkpoint's */
    const char *norm_src =
        o->input.norm.kind == PIPE_NORM_UNSET ? "attribute normalize" : "--normalize";
    if (train_resolve_norm(&o->input.norm, meta, r->path, false, &o->input.norm, e) < 0 ||
        pipe_norm_apply(&o->input.norm, &r->ds, norm_src, e) < 0)
        return -1;
    r->sp = h5ds_find_split(ds, o->split);
    if (!r->sp) return h5ds_no_split(ds, o->split, e);
    /* a batch larger than the split would only allocate (and maybe exhaust) memory */
    if (o->batch > r->sp->count) o->batch = (int)PST_MAX(r->sp->count, (int64_t)1);
    return 0;
}

/* Builds the checkpoint's model and reads its variables, or its moving
 * averages in their place (unless --no-averages). 0, or -1. */
static int eval_load_model(eval_run *r, pst_err *e)
{
    const eval_opts *o = &r->o;
    nn_model_cfg mc = {.name = r->meta.model_name,
                       .height = o->input.out_h,
                       .width = o->input.out_w,
                       .channels = r->ds.channels,
                       .num_classes = r->ds.num_classes,
                       .max_batch = o->batch,
                       .seed = r->meta.seed,
                       .threads = pst_threads_resolve(o->threads)};
    nn_switches_from_env(&mc.sw);
    if (nn_model_new(&r->m, &mc, e) < 0) return -1;
    const size_t n = nn_model_size(r->m);
    ckpt_expect want = ckpt_expect_model(r->m, NULL);
    r->use_avg = r->meta.has_averages && !o->no_averages;
    if (r->use_avg) {
        r->averages = pst_aligned_alloc(sizeof(float) * (n ? n : 1));
        want.averages = r->averages;
    }
    if (ckpt_read(r->path, &want, nn_model_params(r->m), NULL, 0, NULL, e) < 0) return -1;
    if (r->use_avg) memcpy(nn_model_params(r->m), r->averages, sizeof(float) * n);
    return 0;
}

/* Prints the results (and the per-class table or summary) and writes
 * --summary-json. 0, or -1. */
static int eval_report(eval_run *r, pst_err *e)
{
    const eval_opts *o = &r->o;
    const eval_stats *ev = &r->ev;
    printf("checkpoint %s (%s, step %lld, %s)\n", r->path, r->meta.model_name,
           (long long)r->meta.global_step,
           r->use_avg             ? "moving averages"
           : r->meta.has_averages ? "raw variables, --no-averages"
                                  : "variables");
    printf("%s split of %s: accuracy %.4f, top-5 %.4f, loss %.4f, %lld examples\n", o->split,
           o->data, ev->accuracy, ev->top5_accuracy, ev->loss, (long long)ev->examples);
    if (!o->quiet && r->ds.num_classes <= EVAL_TABLE_MAX_CLASSES) {
        print_class_table(&r->ds, r->conf);
    } else if (!o->quiet) {
        print_class_summary(&r->ds, r->conf, o->summary);
    }
    if (o->summary &&
        write_json(o->summary, r->path, o->split, r->use_avg, &r->ds, ev, r->conf, e) < 0)
        return -1;
    return 0;
}

/* Checks the checkpoint, the data set and the model, evaluates the split
 * (streaming --logits) and reports. 0, or -1 with the message in e. */
static int eval_run_all(eval_run *r, pst_err *e)
{
    if (eval_check_input(r, e) < 0 || eval_load_model(r, e) < 0) return -1;
    const int K = r->ds.num_classes;
    r->conf = pst_calloc((size_t)K * (size_t)K, sizeof *r->conf);
    if (r->lo.path && logits_open(&r->lo, r->sp->count, K, e) < 0) return -1;
    if (train_evaluate_logits(r->m, &r->ds, &r->o.input, r->o.split, r->o.batch, &r->ev, r->conf,
                              r->lo.path ? logits_batch : NULL, &r->lo, e) < 0)
        return -1;
    if (eval_report(r, e) < 0) return -1;
    return logits_close(&r->lo, true, e);
}

int eval_main(int argc, char **argv)
{
    eval_run *r = pst_calloc(1, sizeof *r);
    int rc = eval_parse(argc, argv, &r->o, &r->lo);
    if (rc >= 0) {
        free(r);
        return rc;
    }
    nn_blis_init();
    pst_err e = {{0}};
    /* before the data set is open: a message and exit status 1 */
    int found = ckpt_resolve(r->o.ckarg, r->path, sizeof r->path, &e);
    if (found == 0) pst_fail(&e, "%s: no checkpoint found", r->o.ckarg);
    if (found <= 0 || (r->lo.path && pst_out_check(r->lo.path, true, &e) < 0) ||
        h5ds_open(&r->ds, r->o.data, &e) < 0) {
        pst_error("%s", e.msg);
        free(r);
        return 1;
    }
    rc = 0;
    if (eval_run_all(r, &e) < 0) {
        pst_error("%s", e.msg);
        logits_close(&r->lo, false, &e);
        rc = 1;
    }
    free(r->conf);
    free(r->averages);
    nn_model_free(r->m);
    ckpt_meta_free(&r->meta);
    h5ds_close(&r->ds);
    free(r);
    return rc;
}
