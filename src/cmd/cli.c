/* cli.c - `pstrain train` flags -> train_cfg. All checks of values live here,
 * so that a bad flag is a one-line error before any rank starts work. */
#include <assert.h>
#include <getopt.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/model.h"
#include "pstrain/placement.h"
#include "pstrain/run_common.h"
#include "pstrain/train.h"
#include "pstrain/usage.h"
#include "commands.h"

static const char train_usage_head[] =
    "usage: pstrain train --data FILE.h5 [options]\n"
    "       mpirun -np N pstrain train --ps P --data FILE.h5 [options]\n"
    "\n"
    "model and schedule:\n";
static const char train_usage[] =
    "  --epochs E              epochs to train (default 1)\n"
    "  --steps S               stop after S global steps instead\n"
    "  --batch B               examples per step per worker (default 64)\n"
    "  --optimizer NAME        sgd | momentum | rmsprop | adam (default momentum)\n"
    "  --lr X                  learning rate (default 0.01)\n"
    "  --momentum X            momentum, also rmsprop's (default 0.9)\n"
    "  --nesterov              Nesterov momentum\n"
    "  --rms-decay X           rmsprop decay (default 0.9)\n"
    "  --rms-epsilon X         rmsprop epsilon (default 1.0, as the Inception example)\n"
    "  --adam-beta1 X, --adam-beta2 X, --adam-epsilon X   (0.9, 0.999, 1e-8)\n"
    "  --lr-decay F            multiply the lr by F ...\n"
    "  --lr-decay-epochs E     ... every E epochs (staircase; Inception: 0.94 every 2)\n"
    "  --warmup-epochs E       gradual warm-up: the lr rises linearly from lr/10 to lr\n"
    "                          over the first E epochs (Goyal et al. 2017; default 0)\n"
    "  --lr-scale none|linear  linear: lr x (workers x batch) / 256 (default none)\n"
    "  --moving-average-decay D  keep exponential moving averages of the variables and\n"
    "                          batch-norm statistics (TF's, num_updates = global step;\n"
    "                          Inception: 0.9999), checkpointed under /averages and used\n"
    "                          by evaluations (default: off)\n"
    "  --weight-decay X        L2 on weight kernels (default 0)\n"
    "  --label-smoothing X     (default 0)\n"
    "  --seed S                initialisation, shuffling, augmentation (default 1234)\n"
    "\n"
    "input pipeline:\n"
    "  --prep-threads T        preprocessing threads (default 2)\n"
    "  --image-size HxW        the size the model sees (default: the stored size of a pixels\n"
    "                          data set; for encoded data the model's natural size:\n"
    "                          inception-v3 299x299, resnet-50 224x224; other models need it)\n"
    "  --memory-budget SIZE    bytes the input pipeline may hold, K/M/G suffixes (default: a\n"
    "                          quarter of the node's RAM); a split is preloaded only if it fits\n"
    "  --queue-capacity C      shuffle buffer size in examples (default: what fits in\n"
    "                          64 MiB within the budget, at most an epoch: a full shuffle\n"
    "                          for small sets)\n"
    "  --min-after-dequeue M   examples kept in the buffer (default: capacity - 1)\n"
    "  --augment A             inception | resnet (the recipes: random crop, resize, flip,\n"
    "                          inception's colour distortion; evaluation their eval transform)\n"
    "                          | crop,flip (random crop after 4-px padding, horizontal flip)\n"
    "                          | none (default: the stored images, resized if needed)\n"
    "  --normalize N           dataset (the data set's mean and std) | imagenet (torchvision's\n"
    "                          0.485,0.456,0.406/0.229,0.224,0.225) | M1,M2,M3/S1,S2,S3 (one\n"
    "                          mean and std per channel, on 0-1 pixels); recorded in the\n"
    "                          checkpoint (default: the checkpoint's under --resume, else\n"
    "                          dataset)\n"
    "  --limit N               use only the first N training examples\n"
    "\n";
static const char train_usage_more[] =
    "threads per rank (results do not depend on them: bitwise):\n"
    "  --threads T             compute threads of the model: one process, every worker\n"
    "                          rank (default 1; 0 = the CPUs of the rank's affinity mask)\n"
    "  --ps-threads T          optimizer threads of each parameter server (default 1; 0 as\n"
    "                          above)\n"
    "\n"
    "distributed (under mpirun: rank 0 root, 1..P parameter servers, rest workers):\n"
    "  --ps P                  parameter-server ranks (default 1)\n"
    "  --ps-per-node N         N parameter servers on every node instead, the node's other\n"
    "                          ranks workers (P = N x nodes; a --ps beside it must match)\n"
    "  --feeders F             ranks serving batches: the root and F-1 ranks, one per node\n"
    "                          from the root's next node, round-robin (default 1);\n"
    "                          workers draw from the feeder on their node\n"
    "  --placement S           round-robin | greedy | partition (default round-robin)\n"
    "  --partition-bytes N     split variables larger than N bytes (default 262144)\n"
    "  --mode M                sync | async (default sync)\n"
    "  --replicas-to-aggregate R  gradients per sync step (default: all workers)\n"
    "  --max-staleness S       async: a worker starts a step only while at most S steps\n"
    "                          ahead of the slowest worker, and the summary reports the\n"
    "                          updates' staleness (0: lock-step; -1 or none: unbounded,\n"
    "                          measured; default: unbounded, not measured)\n"
    "  --comm-dtype D          fp32 | bf16: the type of pulls and pushes; the parameter\n"
    "                          servers keep float32 variables (default fp32)\n"
    "\n"
    "checkpoints (HDF5; temp file + fsync + rename, DIR/latest names the newest):\n"
    "  --checkpoint-dir D      write checkpoints to D (a final one at the end, and on "
    "SIGTERM/USR1)\n"
    "  --checkpoint-every S    also every S steps\n"
    "  --checkpoint-secs X     also every X seconds\n"
    "  --keep-checkpoints K    keep the newest K (default 3; 0 = all)\n"
    "  --resume [FILE|DIR]     continue from a checkpoint (default: D's newest good one;\n"
    "                          starts from scratch when D has none)\n"
    "\n"
    "reporting:\n"
    "  --eval-split S          train | val | test: the split evaluated (default: val when the\n"
    "                          data set has one, else test)\n"
    "  --eval-every E          also evaluate it every E epochs (default: at the end only)\n"
    "  --log-every SECONDS     progress/metrics interval (default 1)\n"
    "  --metrics FILE.jsonl    metrics log\n"
    "  --tensorboard DIR       the metrics as TensorBoard event files in DIR (made if missing)\n"
    "  --summary-json FILE     summary of the run\n"
    "  --trace-examples FILE   which worker saw which example ids in which step\n"
    "  --timeline FILE.json    Chrome trace-event timeline of every rank's steps (Perfetto)\n"
    "  --dump-params FILE      write the final parameter slab as raw float32 (for comparing\n"
    "                          runs bitwise: cmp a.bin b.bin)\n"
    "  --dry-run               print the model (and placement) and exit\n"
    "  --verbose               print the placement table at the start (default: one line)\n"
    "  --quiet                 no progress line\n"
    "  -h, --help              this help\n";

/* `pstrain train --help`: the model names come from the table of models. */
static void train_help(FILE *out)
{
    char names[NN_MODEL_NAMES_LEN];
    fputs(train_usage_head, out);
    fprintf(out, "  --model NAME            %s (default %s)\n",
            nn_model_names_join(names, sizeof names, " | ", " | "), train_cfg_defaults().model);
    fputs(train_usage, out);
    fputs(train_usage_more, out);
}

/* What a flag does with its value (train_opt.kind). */
typedef enum arg_kind {
    ARG_STR,    /* const char *: the value itself */
    ARG_TRUE,   /* bool: true (no value) */
    ARG_INT,    /* int in [ilo, ihi] */
    ARG_I64,    /* int64_t in [ilo, ihi] */
    ARG_U64,    /* uint64_t in [ilo, ihi] */
    ARG_FLOAT,  /* float in [flo, fhi] */
    ARG_DOUBLE, /* double holding a float in [flo, fhi] */
    ARG_PARSE,  /* parse(value, target) < 0: refused */
    ARG_RESUME, /* --resume [FILE|DIR] */
    ARG_HELP,
} arg_kind;

/* The flags as parsed, before the optimizer's hyper-parameters are applied:
 * they go on top of the defaults of --optimizer, whatever the order of the
 * flags (-1 = not given). */
typedef struct train_args {
    train_cfg cfg;
    const char *optimizer;
    float momentum, rms_decay, rms_eps, b1, b2, adam_eps;
    bool nesterov;
} train_args;

/* One flag: its name and getopt_long argument, where its value goes (an
 * offset into `train_args`), how it is checked, and what an error message says
 * was expected ("pstrain train: --flag: expected WHAT, got 'x'"). */
typedef struct train_opt {
    const char *name;
    int has_arg;
    arg_kind kind;
    size_t at;
    const char *what;
    int64_t ilo, ihi; /* ARG_INT, ARG_I64, ARG_U64 */
    double flo, fhi;  /* ARG_FLOAT, ARG_DOUBLE */
    int (*parse)(const char *s, void *target);
} train_opt;

static int parse_lr_scale(const char *s, void *t)
{
    if (strcmp(s, "linear") && strcmp(s, "none")) return -1;
    *(bool *)t = !strcmp(s, "linear");
    return 0;
}

/* checked as a float: 0.99999999 would round to 1 */
static int parse_ema(const char *s, void *t)
{
    double v;
    if (pst_parse_double(s, &v) < 0 || !((float)v > 0 && (float)v < 1)) return -1;
    *(float *)t = (float)v;
    return 0;
}

static int parse_augment(const char *s, void *t)
{
    return train_parse_augment(s, t);
}

static int parse_normalize(const char *s, void *t)
{
    return pipe_norm_parse(s, t);
}

static int parse_image_size(const char *s, void *t)
{
    pipe_cfg *p = t;
    return train_parse_image_size(s, &p->out_h, &p->out_w);
}

static int parse_size(const char *s, void *t)
{
    return pipe_parse_size(s, t);
}

static int parse_placement(const char *s, void *t)
{
    return place_parse(s, t);
}

static int parse_mode(const char *s, void *t)
{
    if (strcmp(s, "sync") && strcmp(s, "async")) return -1;
    *(train_mode *)t = strcmp(s, "sync") ? TRAIN_ASYNC : TRAIN_SYNC;
    return 0;
}

static int parse_staleness(const char *s, void *t)
{
    int64_t v = -1;
    if (strcmp(s, "none") && (pst_parse_i64(s, &v) < 0 || v < -1 || v > (1 << 30))) return -1;
    *(int64_t *)t = v < 0 ? TRAIN_STALE_NONE : v;
    return 0;
}

static int parse_comm_dtype(const char *s, void *t)
{
    if (strcmp(s, "fp32") && strcmp(s, "bf16")) return -1;
    *(bool *)t = !strcmp(s, "bf16");
    return 0;
}

static int parse_eval_split(const char *s, void *t)
{
    if (strcmp(s, "train") && strcmp(s, "val") && strcmp(s, "test")) return -1;
    *(const char **)t = s;
    return 0;
}

static const char threads_what[] = "0..1024 threads (0: the CPUs of the affinity mask)";

/* The table's entries: where a flag's value goes and how it is checked. */
#define AT(field) offsetof(train_args, field)
#define STR(f) .kind = ARG_STR, .at = AT(f)
#define SET(f) .kind = ARG_TRUE, .at = AT(f)
#define INT(f, lo, hi, w) .kind = ARG_INT, .at = AT(f), .ilo = (lo), .ihi = (hi), .what = (w)
#define I64(f, lo, hi, w) .kind = ARG_I64, .at = AT(f), .ilo = (lo), .ihi = (hi), .what = (w)
#define U64(f, lo, hi, w) .kind = ARG_U64, .at = AT(f), .ilo = (lo), .ihi = (hi), .what = (w)
#define FLOAT(f, lo, hi, w) .kind = ARG_FLOAT, .at = AT(f), .flo = (lo), .fhi = (hi), .what = (w)
#define DOUBLE(f, lo, hi, w) .kind = ARG_DOUBLE, .at = AT(f), .flo = (lo), .fhi = (hi), .what = (w)
#define PARSE(f, fn, w) .kind = ARG_PARSE, .at = AT(f), .parse = (fn), .what = (w)
#define RESUME() .kind = ARG_RESUME
#define HELP() .kind = ARG_HELP

/* Every flag of `pstrain train`. The help-flags test reads the names from
 * here: each must be in --help and in the README. */
static const train_opt train_opts[] = {
    {"data", required_argument, STR(cfg.data_path)},
    {"model", required_argument, STR(cfg.model)},
    {"epochs", required_argument, INT(cfg.epochs, 0, 1000000, "a number of epochs >= 0")},
    {"steps", required_argument, I64(cfg.steps, 1, INT64_MAX / 2, "a positive number of steps")},
    {"batch", required_argument, INT(cfg.batch, 1, 1 << 20, "a positive batch size")},
    {"optimizer", required_argument, STR(optimizer)},
    {"lr", required_argument, FLOAT(cfg.lr, 0, 1e6, "a non-negative learning rate")},
    {"momentum", required_argument, FLOAT(momentum, 0, 1, "a momentum in [0, 1]")},
    {"nesterov", no_argument, SET(nesterov)},
    {"rms-decay", required_argument, FLOAT(rms_decay, 0, 1, "a decay in [0, 1]")},
    {"rms-epsilon", required_argument, FLOAT(rms_eps, 1e-30, 1e6, "a positive epsilon")},
    {"adam-beta1", required_argument, FLOAT(b1, 0, 0.999999, "a beta1 in [0, 1)")},
    {"adam-beta2", required_argument, FLOAT(b2, 0, 0.999999999, "a beta2 in [0, 1)")},
    {"adam-epsilon", required_argument, FLOAT(adam_eps, 1e-30, 1e6, "a positive epsilon")},
    {"lr-decay", required_argument, FLOAT(cfg.lr_decay, 1e-9, 1, "a decay factor in (0, 1]")},
    {"lr-decay-epochs", required_argument,
     FLOAT(cfg.lr_decay_epochs, 1e-6, 1e9, "a positive number of epochs")},
    {"warmup-epochs", required_argument,
     FLOAT(cfg.warmup_epochs, 0, 1e9, "a number of epochs >= 0")},
    {"lr-scale", required_argument, PARSE(cfg.lr_scale_linear, parse_lr_scale, "none or linear")},
    {"moving-average-decay", required_argument,
     PARSE(cfg.ema_decay, parse_ema, "a decay in (0, 1), e.g. 0.9999")},
    {"weight-decay", required_argument,
     FLOAT(cfg.weight_decay, 0, 1e3, "a non-negative weight decay")},
    {"label-smoothing", required_argument,
     FLOAT(cfg.label_smoothing, 0, 0.999, "label smoothing in [0, 1)")},
    {"seed", required_argument, U64(cfg.seed, 0, INT64_MAX, "a non-negative seed")},
    {"prep-threads", required_argument, INT(cfg.pipe.prep_threads, 1, 256, "1..256 threads")},
    {"threads", required_argument, INT(cfg.threads, 0, NN_MAX_THREADS, threads_what)},
    {"ps-threads", required_argument, INT(cfg.ps_threads, 0, NN_MAX_THREADS, threads_what)},
    {"queue-capacity", required_argument,
     INT(cfg.pipe.queue_capacity, 1, 1 << 28, "a positive capacity")},
    {"min-after-dequeue", required_argument,
     INT(cfg.pipe.min_after_dequeue, 0, 1 << 28, "a non-negative count")},
    {"augment", required_argument,
     PARSE(cfg.pipe, parse_augment, "inception, resnet, a list of crop, flip, or none")},
    {"normalize", required_argument,
     PARSE(cfg.pipe.norm, parse_normalize,
           "dataset, imagenet or M1,M2,M3/S1,S2,S3 (a mean in [0, 1] and a std > 0 per channel)")},
    {"image-size", required_argument,
     PARSE(cfg.pipe, parse_image_size, "HxW with sides 1..4096, e.g. 299x299")},
    {"memory-budget", required_argument,
     PARSE(cfg.pipe.memory_budget, parse_size,
           "a size in bytes with an optional K/M/G suffix, e.g. 2G")},
    {"limit", required_argument,
     I64(cfg.pipe.limit, 1, INT64_MAX / 2, "a positive number of examples")},
    {"ps", required_argument, INT(cfg.ps, 1, 1 << 20, "a positive number of parameter servers")},
    {"ps-per-node", required_argument,
     INT(cfg.ps_per_node, 1, 1 << 20, "a positive number of parameter servers per node")},
    {"feeders", required_argument, INT(cfg.feeders, 1, 1 << 20, "a positive number of feeders")},
    {"placement", required_argument,
     PARSE(cfg.placement, parse_placement, "round-robin, greedy or partition")},
    {"partition-bytes", required_argument,
     I64(cfg.partition_bytes, 4, INT64_MAX / 2, "a positive number of bytes")},
    {"mode", required_argument, PARSE(cfg.mode, parse_mode, "sync or async")},
    {"replicas-to-aggregate", required_argument,
     INT(cfg.replicas_to_aggregate, 1, 1 << 20, "a positive number of replicas")},
    {"max-staleness", required_argument,
     PARSE(cfg.max_staleness, parse_staleness, "a number of steps >= 0, -1 or none")},
    {"comm-dtype", required_argument, PARSE(cfg.comm_bf16, parse_comm_dtype, "fp32 or bf16")},
    {"eval-every", required_argument, INT(cfg.eval_every, 0, 1000000, "a number of epochs >= 0")},
    {"eval-split", required_argument,
     PARSE(cfg.eval_split, parse_eval_split, "train, val or test")},
    {"verbose", no_argument, SET(cfg.verbose)},
    {"log-every", required_argument, DOUBLE(cfg.log_every, 0, 1e6, "seconds >= 0")},
    {"metrics", required_argument, STR(cfg.metrics_path)},
    {"tensorboard", required_argument, STR(cfg.tensorboard_dir)},
    {"timeline", required_argument, STR(cfg.timeline_path)},
    {"summary-json", required_argument, STR(cfg.summary_path)},
    {"trace-examples", required_argument, STR(cfg.trace_path)},
    {"checkpoint-dir", required_argument, STR(cfg.checkpoint_dir)},
    {"checkpoint-every", required_argument,
     I64(cfg.checkpoint_every, 1, INT64_MAX / 2, "a positive number of steps")},
    {"checkpoint-secs", required_argument,
     DOUBLE(cfg.checkpoint_secs, 0.001, 1e9, "a positive number of seconds")},
    {"keep-checkpoints", required_argument, INT(cfg.keep_checkpoints, 0, 1 << 20, "a number >= 0")},
    {"resume", optional_argument, RESUME()},
    {"dump-params", required_argument, STR(cfg.dump_params_path)},
    {"dry-run", no_argument, SET(cfg.dry_run)},
    {"quiet", no_argument, SET(cfg.quiet)},
    {"help", no_argument, HELP()},
};
#define NOPTS PST_ARRAY_LEN(train_opts)
/* getopt_long's val of train_opts[i]: past every character */
#define OPT_VAL0 256

/* Value parsers: on junk, print "pstrain train: --flag: expected ..., got 'x'"
 * (with the bound that was exceeded: "(at most 1e+06)"). */
typedef struct argctx {
    const char *flag;
    bool print;
    int bad;
} argctx;

static void bad(argctx *c, const char *what, const char *got)
{
    if (c->print)
        fprintf(stderr, "%s: --%s: expected %s, got '%s'\n", pst_progname(), c->flag, what, got);
    c->bad = 1;
}

static int64_t arg_i64(argctx *c, const char *s, int64_t lo, int64_t hi, const char *what)
{
    int64_t v;
    bool parsed = pst_parse_i64(s, &v) == 0;
    if (!parsed || v < lo || v > hi) {
        char why[160]; /* over the limit, "a positive ..." alone would mislead */
        if (parsed && v > hi && !strstr(what, "..")) {
            snprintf(why, sizeof why, "%s (at most %" PRId64 ")", what, hi);
            what = why;
        }
        bad(c, what, s);
        return lo;
    }
    return v;
}

static float arg_f(argctx *c, const char *s, double lo, double hi, const char *what)
{
    double v;
    bool parsed = pst_parse_double(s, &v) == 0;
    if (!parsed || v < lo || v > hi) {
        char why[160]; /* "a non-negative learning rate" alone misleads for 2000000 */
        if (parsed && v > hi && !strstr(what, "[") && !strstr(what, "(")) {
            snprintf(why, sizeof why, "%s (at most %g)", what, hi);
            what = why;
        }
        bad(c, what, s);
        return (float)lo;
    }
    return (float)v;
}

/* Stores the value `s` of flag `o` into p (c->bad set when it is refused). */
static void flag_apply(const train_opt *o, const char *s, train_args *p, argctx *c)
{
    void *t = (char *)p + o->at;
    switch (o->kind) {
    case ARG_STR:
        *(const char **)t = s;
        break;
    case ARG_TRUE:
        *(bool *)t = true;
        break;
    case ARG_INT:
        *(int *)t = (int)arg_i64(c, s, o->ilo, o->ihi, o->what);
        break;
    case ARG_I64:
        *(int64_t *)t = arg_i64(c, s, o->ilo, o->ihi, o->what);
        break;
    case ARG_U64:
        *(uint64_t *)t = (uint64_t)arg_i64(c, s, o->ilo, o->ihi, o->what);
        break;
    case ARG_FLOAT:
        *(float *)t = arg_f(c, s, o->flo, o->fhi, o->what);
        break;
    case ARG_DOUBLE:
        *(double *)t = arg_f(c, s, o->flo, o->fhi, o->what);
        break;
    case ARG_PARSE:
        if (o->parse(s, t) < 0) bad(c, o->what, s);
        break;
    case ARG_RESUME:
    case ARG_HELP:
        assert(!"handled by parse_flags");
    }
}

/* --optimizer picks the defaults; the hyper-parameters given go on top.
 * 0, or 2 for an unknown optimizer. */
static int apply_optimizer(train_args *p, argctx *c)
{
    opt_cfg *opt = &p->cfg.opt;
    if (p->optimizer) {
        opt_kind k;
        if (opt_parse(p->optimizer, &k) < 0) {
            c->flag = "optimizer";
            bad(c, "sgd, momentum, rmsprop or adam", p->optimizer);
            return 2;
        }
        *opt = opt_defaults(k);
    }
    opt->nesterov = p->nesterov;
    if (p->momentum >= 0) opt->momentum = p->momentum;
    if (p->rms_decay >= 0) opt->rms_decay = p->rms_decay;
    if (p->rms_eps >= 0) opt->rms_eps = p->rms_eps;
    if (p->b1 >= 0) opt->beta1 = p->b1;
    if (p->b2 >= 0) opt->beta2 = p->b2;
    if (p->adam_eps >= 0) opt->adam_eps = p->adam_eps;
    return 0;
}

/* The checks between flags, once all are read: 0, or 2 (printed when
 * `print`). Sets epochs to 0 when --steps replaces the default epoch. */
static int check_combination(train_cfg *cfg, bool print)
{
    if (!cfg->data_path) return print ? pst_usage_error("--data FILE.h5 is required") : 2;
    if (!nn_model_known(cfg->model)) {
        char names[NN_MODEL_NAMES_LEN];
        if (print)
            fprintf(stderr, "pstrain train: --model: expected %s, got '%s'\n",
                    nn_model_names_join(names, sizeof names, ", ", " or "), cfg->model);
        return 2;
    }
    if (cfg->steps && cfg->epochs == 1) cfg->epochs = 0; /* --steps replaces the default epoch */
    if (!cfg->epochs && !cfg->steps)
        return print ? pst_usage_error("--epochs 0: nothing to train; give --epochs E >= 1 or "
                                       "--steps S")
                     : 2;
    if (cfg->lr_decay < 1 && cfg->lr_decay_epochs <= 0)
        return print ? pst_usage_error("--lr-decay needs --lr-decay-epochs E") : 2;
    if (cfg->max_staleness >= 0 && cfg->mode != TRAIN_ASYNC)
        return print ? pst_usage_error("--max-staleness bounds async training: give --mode async")
                     : 2;
    if (cfg->resume && !cfg->resume_path && !cfg->checkpoint_dir)
        return print ? pst_usage_error("--resume needs a FILE or --checkpoint-dir D") : 2;
    if ((cfg->checkpoint_every || cfg->checkpoint_secs > 0) && !cfg->checkpoint_dir)
        return print
                   ? pst_usage_error("--checkpoint-every/--checkpoint-secs need --checkpoint-dir D")
                   : 2;
    if (cfg->pipe.queue_capacity > 0 && cfg->pipe.min_after_dequeue >= cfg->pipe.queue_capacity)
        return print ? pst_usage_error(
                           "--min-after-dequeue %d: expected less than --queue-capacity %d",
                           cfg->pipe.min_after_dequeue, cfg->pipe.queue_capacity)
                     : 2;
    return 0;
}

/* The flags one by one: 0, 1 after --help, 2 on a usage error. */
static int parse_flags(int argc, char **argv, train_args *p, argctx *c)
{
    struct option getopt_opts[NOPTS + 1];
    for (size_t i = 0; i < NOPTS; i++)
        getopt_opts[i] =
            (struct option){train_opts[i].name, train_opts[i].has_arg, NULL, OPT_VAL0 + (int)i};
    getopt_opts[NOPTS] = (struct option){0};
    optind = 1;
    opterr = 0; /* pst_getopt_error reports, with the nearest flag */
    int v;
    /* the flag by getopt's value: it leaves the index argument unset for a
     * short option (-h) */
    while ((v = getopt_long(argc, argv, "+:h", getopt_opts, NULL)) != -1) {
        if (v == '?' || v == ':') return c->print ? pst_getopt_error(v, argv, getopt_opts) : 2;
        const train_opt *o = v == 'h' ? NULL : &train_opts[v - OPT_VAL0];
        if (!o || o->kind == ARG_HELP) {
            if (c->print) train_help(stdout);
            return 1;
        }
        c->flag = o->name;
        if (o->kind == ARG_RESUME) {
            p->cfg.resume = true;
            /* `--resume FILE` as well as `--resume=FILE`: take the next word
             * when it is not a flag. */
            if (optarg)
                p->cfg.resume_path = optarg;
            else if (optind < argc && strncmp(argv[optind], "--", 2) != 0)
                p->cfg.resume_path = argv[optind++];
        } else {
            flag_apply(o, optarg, p, c);
        }
        if (c->bad) return 2;
    }
    if (optind < argc)
        return c->print ? pst_usage_error("unexpected argument '%s'", argv[optind]) : 2;
    return 0;
}

int train_parse_args(int argc, char **argv, train_cfg *cfg, bool print)
{
    train_args p = {.cfg = train_cfg_defaults(),
                    .momentum = -1,
                    .rms_decay = -1,
                    .rms_eps = -1,
                    .b1 = -1,
                    .b2 = -1,
                    .adam_eps = -1};
    argctx c = {.print = print};
    int rc = parse_flags(argc, argv, &p, &c);
    if (!rc) rc = apply_optimizer(&p, &c);
    if (!rc) rc = check_combination(&p.cfg, print);
    *cfg = p.cfg;
    return rc;
}
