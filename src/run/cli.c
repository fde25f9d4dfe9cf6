/* cli.c - `pstrain train` flags -> train_cfg. All checks of values live here,
 * so that a bad flag is a one-line error before any rank starts work. */
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/model.h"
#include "pstrain/run_common.h"
#include "pstrain/train.h"
#include "pstrain/usage.h"

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
    "  --placement S           round-robin | greedy | partition (default round-robin)\n"
    "  --partition-bytes N     split variables larger than N bytes (default 262144)\n"
    "  --mode M                sync | async (default sync)\n"
    "  --replicas-to-aggregate R  gradients per sync step (default: all workers)\n"
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
    "  --summary-json FILE     summary of the run\n"
    "  --trace-examples FILE   which worker saw which example ids in which step\n"
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

enum {
    O_DATA = 256,
    O_MODEL,
    O_EPOCHS,
    O_STEPS,
    O_BATCH,
    O_OPT,
    O_LR,
    O_MOMENTUM,
    O_NESTEROV,
    O_RMS_DECAY,
    O_RMS_EPS,
    O_B1,
    O_B2,
    O_ADAM_EPS,
    O_LR_DECAY,
    O_LR_DECAY_EPOCHS,
    O_WARMUP,
    O_LR_SCALE,
    O_EMA,
    O_WD,
    O_LS,
    O_SEED,
    O_PREP,
    O_THREADS,
    O_PS_THREADS,
    O_QCAP,
    O_MAD,
    O_AUG,
    O_NORMALIZE,
    O_IMAGE_SIZE,
    O_MEM_BUDGET,
    O_LIMIT,
    O_PS,
    O_PLACE,
    O_PBYTES,
    O_MODE,
    O_R,
    O_EVAL_EVERY,
    O_EVAL_SPLIT,
    O_VERBOSE,
    O_LOG_EVERY,
    O_METRICS,
    O_SUMMARY,
    O_TRACE,
    O_DRY,
    O_QUIET,
    O_HELP,
    O_CKPT_DIR,
    O_CKPT_EVERY,
    O_CKPT_SECS,
    O_KEEP,
    O_RESUME,
    O_DUMP,
    O_PS_PER_NODE
};

static const struct option train_opts[] = {
    {"data", required_argument, 0, O_DATA},
    {"model", required_argument, 0, O_MODEL},
    {"epochs", required_argument, 0, O_EPOCHS},
    {"steps", required_argument, 0, O_STEPS},
    {"batch", required_argument, 0, O_BATCH},
    {"optimizer", required_argument, 0, O_OPT},
    {"lr", required_argument, 0, O_LR},
    {"momentum", required_argument, 0, O_MOMENTUM},
    {"nesterov", no_argument, 0, O_NESTEROV},
    {"rms-decay", required_argument, 0, O_RMS_DECAY},
    {"rms-epsilon", required_argument, 0, O_RMS_EPS},
    {"adam-beta1", required_argument, 0, O_B1},
    {"adam-beta2", required_argument, 0, O_B2},
    {"adam-epsilon", required_argument, 0, O_ADAM_EPS},
    {"lr-decay", required_argument, 0, O_LR_DECAY},
    {"lr-decay-epochs", required_argument, 0, O_LR_DECAY_EPOCHS},
    {"warmup-epochs", required_argument, 0, O_WARMUP},
    {"lr-scale", required_argument, 0, O_LR_SCALE},
    {"moving-average-decay", required_argument, 0, O_EMA},
    {"weight-decay", required_argument, 0, O_WD},
    {"label-smoothing", required_argument, 0, O_LS},
    {"seed", required_argument, 0, O_SEED},
    {"prep-threads", required_argument, 0, O_PREP},
    {"threads", required_argument, 0, O_THREADS},
    {"ps-threads", required_argument, 0, O_PS_THREADS},
    {"queue-capacity", required_argument, 0, O_QCAP},
    {"min-after-dequeue", required_argument, 0, O_MAD},
    {"augment", required_argument, 0, O_AUG},
    {"normalize", required_argument, 0, O_NORMALIZE},
    {"image-size", required_argument, 0, O_IMAGE_SIZE},
    {"memory-budget", required_argument, 0, O_MEM_BUDGET},
    {"limit", required_argument, 0, O_LIMIT},
    {"ps", required_argument, 0, O_PS},
    {"ps-per-node", required_argument, 0, O_PS_PER_NODE},
    {"placement", required_argument, 0, O_PLACE},
    {"partition-bytes", required_argument, 0, O_PBYTES},
    {"mode", required_argument, 0, O_MODE},
    {"replicas-to-aggregate", required_argument, 0, O_R},
    {"eval-every", required_argument, 0, O_EVAL_EVERY},
    {"eval-split", required_argument, 0, O_EVAL_SPLIT},
    {"verbose", no_argument, 0, O_VERBOSE},
    {"log-every", required_argument, 0, O_LOG_EVERY},
    {"metrics", required_argument, 0, O_METRICS},
    {"summary-json", required_argument, 0, O_SUMMARY},
    {"trace-examples", required_argument, 0, O_TRACE},
    {"checkpoint-dir", required_argument, 0, O_CKPT_DIR},
    {"checkpoint-every", required_argument, 0, O_CKPT_EVERY},
    {"checkpoint-secs", required_argument, 0, O_CKPT_SECS},
    {"keep-checkpoints", required_argument, 0, O_KEEP},
    {"resume", optional_argument, 0, O_RESUME},
    {"dump-params", required_argument, 0, O_DUMP},
    {"dry-run", no_argument, 0, O_DRY},
    {"quiet", no_argument, 0, O_QUIET},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

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

int train_parse_args(int argc, char **argv, train_cfg *cfg, bool print)
{
    *cfg = train_cfg_defaults();
    const char *opt_name_arg = NULL;
    /* Optimizer hyper-parameters are applied after --optimizer picked the
     * defaults, whatever the order of the flags: -1 = not given. */
    float momentum = -1, rms_decay = -1, rms_eps = -1, b1 = -1, b2 = -1, adam_eps = -1;
    bool nesterov = false;
    argctx c = {.print = print};
    optind = 1;
    opterr = 0; /* pst_getopt_error reports, with the nearest flag */
    int o;
    /* the flag's name for messages, by value: getopt_long leaves its index
     * argument unset for a short option (-h) */
    while ((o = getopt_long(argc, argv, "+:h", train_opts, NULL)) != -1) {
        if (o == '?' || o == ':') return print ? pst_getopt_error(o, argv, train_opts) : 2;
        c.flag = "?";
        for (const struct option *p = train_opts; p->name; p++)
            if (p->val == o) c.flag = p->name;
        switch (o) {
        case O_DATA:
            cfg->data_path = optarg;
            break;
        case O_MODEL:
            cfg->model = optarg;
            break;
        case O_EPOCHS:
            cfg->epochs = (int)arg_i64(&c, optarg, 0, 1000000, "a number of epochs >= 0");
            break;
        case O_STEPS:
            cfg->steps = arg_i64(&c, optarg, 1, INT64_MAX / 2, "a positive number of steps");
            break;
        case O_BATCH:
            cfg->batch = (int)arg_i64(&c, optarg, 1, 1 << 20, "a positive batch size");
            break;
        case O_OPT:
            opt_name_arg = optarg;
            break;
        case O_LR:
            cfg->lr = arg_f(&c, optarg, 0, 1e6, "a non-negative learning rate");
            break;
        case O_MOMENTUM:
            momentum = arg_f(&c, optarg, 0, 1, "a momentum in [0, 1]");
            break;
        case O_NESTEROV:
            nesterov = true;
            break;
        case O_RMS_DECAY:
            rms_decay = arg_f(&c, optarg, 0, 1, "a decay in [0, 1]");
            break;
        case O_RMS_EPS:
            rms_eps = arg_f(&c, optarg, 1e-30, 1e6, "a positive epsilon");
            break;
        case O_B1:
            b1 = arg_f(&c, optarg, 0, 0.999999, "a beta1 in [0, 1)");
            break;
        case O_B2:
            b2 = arg_f(&c, optarg, 0, 0.999999999, "a beta2 in [0, 1)");
            break;
        case O_ADAM_EPS:
            adam_eps = arg_f(&c, optarg, 1e-30, 1e6, "a positive epsilon");
            break;
        case O_LR_DECAY:
            cfg->lr_decay = arg_f(&c, optarg, 1e-9, 1, "a decay factor in (0, 1]");
            break;
        case O_LR_DECAY_EPOCHS:
            cfg->lr_decay_epochs = arg_f(&c, optarg, 1e-6, 1e9, "a positive number of epochs");
            break;
        case O_WARMUP:
            cfg->warmup_epochs = arg_f(&c, optarg, 0, 1e9, "a number of epochs >= 0");
            break;
        case O_LR_SCALE:
            if (!strcmp(optarg, "linear"))
                cfg->lr_scale_linear = true;
            else if (!strcmp(optarg, "none"))
                cfg->lr_scale_linear = false;
            else
                bad(&c, "none or linear", optarg);
            break;
        case O_EMA: {
            double v;
            /* as a float: 0.99999999 would round to 1 */
            if (pst_parse_double(optarg, &v) < 0 || !((float)v > 0 && (float)v < 1))
                bad(&c, "a decay in (0, 1), e.g. 0.9999", optarg);
            else
                cfg->ema_decay = (float)v;
            break;
        }
        case O_WD:
            cfg->weight_decay = arg_f(&c, optarg, 0, 1e3, "a non-negative weight decay");
            break;
        case O_LS:
            cfg->label_smoothing = arg_f(&c, optarg, 0, 0.999, "label smoothing in [0, 1)");
            break;
        case O_SEED:
            cfg->seed = (uint64_t)arg_i64(&c, optarg, 0, INT64_MAX, "a non-negative seed");
            break;
        case O_PREP:
            cfg->pipe.prep_threads = (int)arg_i64(&c, optarg, 1, 256, "1..256 threads");
            break;
        case O_THREADS:
            cfg->threads = (int)arg_i64(&c, optarg, 0, NN_MAX_THREADS,
                                        "0..1024 threads (0: the CPUs of the affinity mask)");
            break;
        case O_PS_THREADS:
            cfg->ps_threads = (int)arg_i64(&c, optarg, 0, NN_MAX_THREADS,
                                           "0..1024 threads (0: the CPUs of the affinity mask)");
            break;
        case O_QCAP:
            cfg->pipe.queue_capacity = (int)arg_i64(&c, optarg, 1, 1 << 28, "a positive capacity");
            break;
        case O_MAD:
            cfg->pipe.min_after_dequeue =
                (int)arg_i64(&c, optarg, 0, 1 << 28, "a non-negative count");
            break;
        case O_AUG:
            if (train_parse_augment(optarg, &cfg->pipe) < 0)
                bad(&c, "inception, resnet, a list of crop, flip, or none", optarg);
            break;
        case O_NORMALIZE:
            if (pipe_norm_parse(optarg, &cfg->pipe.norm) < 0)
                bad(&c,
                    "dataset, imagenet or M1,M2,M3/S1,S2,S3 (a mean in [0, 1] and a std > 0 "
                    "per channel)",
                    optarg);
            break;
        case O_IMAGE_SIZE:
            if (train_parse_image_size(optarg, &cfg->pipe.out_h, &cfg->pipe.out_w) < 0)
                bad(&c, "HxW with sides 1..4096, e.g. 299x299", optarg);
            break;
        case O_MEM_BUDGET:
            if (pipe_parse_size(optarg, &cfg->pipe.memory_budget) < 0)
                bad(&c, "a size in bytes with an optional K/M/G suffix, e.g. 2G", optarg);
            break;
        case O_LIMIT:
            cfg->pipe.limit =
                arg_i64(&c, optarg, 1, INT64_MAX / 2, "a positive number of examples");
            break;
        case O_PS:
            cfg->ps =
                (int)arg_i64(&c, optarg, 1, 1 << 20, "a positive number of parameter servers");
            break;
        case O_PS_PER_NODE:
            cfg->ps_per_node = (int)arg_i64(&c, optarg, 1, 1 << 20,
                                            "a positive number of parameter servers per node");
            break;
        case O_PLACE:
            if (!strcmp(optarg, "round-robin"))
                cfg->placement = PLACE_ROUND_ROBIN;
            else if (!strcmp(optarg, "greedy"))
                cfg->placement = PLACE_GREEDY;
            else if (!strcmp(optarg, "partition"))
                cfg->placement = PLACE_PARTITION;
            else
                bad(&c, "round-robin, greedy or partition", optarg);
            break;
        case O_PBYTES:
            cfg->partition_bytes =
                arg_i64(&c, optarg, 4, INT64_MAX / 2, "a positive number of bytes");
            break;
        case O_MODE:
            if (!strcmp(optarg, "sync"))
                cfg->mode = TRAIN_SYNC;
            else if (!strcmp(optarg, "async"))
                cfg->mode = TRAIN_ASYNC;
            else
                bad(&c, "sync or async", optarg);
            break;
        case O_R:
            cfg->replicas_to_aggregate =
                (int)arg_i64(&c, optarg, 1, 1 << 20, "a positive number of replicas");
            break;
        case O_EVAL_EVERY:
            cfg->eval_every = (int)arg_i64(&c, optarg, 0, 1000000, "a number of epochs >= 0");
            break;
        case O_EVAL_SPLIT:
            if (strcmp(optarg, "train") && strcmp(optarg, "val") && strcmp(optarg, "test"))
                bad(&c, "train, val or test", optarg);
            cfg->eval_split = optarg;
            break;
        case O_VERBOSE:
            cfg->verbose = true;
            break;
        case O_LOG_EVERY:
            cfg->log_every = arg_f(&c, optarg, 0, 1e6, "seconds >= 0");
            break;
        case O_METRICS:
            cfg->metrics_path = optarg;
            break;
        case O_SUMMARY:
            cfg->summary_path = optarg;
            break;
        case O_TRACE:
            cfg->trace_path = optarg;
            break;
        case O_CKPT_DIR:
            cfg->checkpoint_dir = optarg;
            break;
        case O_CKPT_EVERY:
            cfg->checkpoint_every =
                arg_i64(&c, optarg, 1, INT64_MAX / 2, "a positive number of steps");
            break;
        case O_CKPT_SECS:
            cfg->checkpoint_secs = arg_f(&c, optarg, 0.001, 1e9, "a positive number of seconds");
            break;
        case O_KEEP:
            cfg->keep_checkpoints = (int)arg_i64(&c, optarg, 0, 1 << 20, "a number >= 0");
            break;
        case O_RESUME:
            cfg->resume = true;
            /* `--resume FILE` as well as `--resume=FILE`: take the next word
             * when it is not a flag. */
            if (optarg)
                cfg->resume_path = optarg;
            else if (optind < argc && strncmp(argv[optind], "--", 2) != 0)
                cfg->resume_path = argv[optind++];
            break;
        case O_DUMP:
            cfg->dump_params_path = optarg;
            break;
        case O_DRY:
            cfg->dry_run = true;
            break;
        case O_QUIET:
            cfg->quiet = true;
            break;
        case 'h':
        case O_HELP:
            if (print) train_help(stdout);
            return 1;
        }
        if (c.bad) return 2;
    }
    if (optind < argc) {
        return print ? pst_usage_error("unexpected argument '%s'", argv[optind]) : 2;
    }
    if (opt_name_arg) {
        opt_kind k;
        if (opt_parse(opt_name_arg, &k) < 0) {
            c.flag = "optimizer";
            bad(&c, "sgd, momentum, rmsprop or adam", opt_name_arg);
            return 2;
        }
        cfg->opt = opt_defaults(k);
    }
    cfg->opt.nesterov = nesterov;
    if (momentum >= 0) cfg->opt.momentum = momentum;
    if (rms_decay >= 0) cfg->opt.rms_decay = rms_decay;
    if (rms_eps >= 0) cfg->opt.rms_eps = rms_eps;
    if (b1 >= 0) cfg->opt.beta1 = b1;
    if (b2 >= 0) cfg->opt.beta2 = b2;
    if (adam_eps >= 0) cfg->opt.adam_eps = adam_eps;
    if (!cfg->data_path) {
        return print ? pst_usage_error("--data FILE.h5 is required") : 2;
    }
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
    if (cfg->lr_decay < 1 && cfg->lr_decay_epochs <= 0) {
        return print ? pst_usage_error("--lr-decay needs --lr-decay-epochs E") : 2;
    }
    if (cfg->resume && !cfg->resume_path && !cfg->checkpoint_dir) {
        return print ? pst_usage_error("--resume needs a FILE or --checkpoint-dir D") : 2;
    }
    if ((cfg->checkpoint_every || cfg->checkpoint_secs > 0) && !cfg->checkpoint_dir) {
        return print
                   ? pst_usage_error("--checkpoint-every/--checkpoint-secs need --checkpoint-dir D")
                   : 2;
    }
    if (cfg->pipe.queue_capacity > 0 && cfg->pipe.min_after_dequeue >= cfg->pipe.queue_capacity) {
        return print ? pst_usage_error(
                           "--min-after-dequeue %d: expected less than --queue-capacity %d",
                           cfg->pipe.min_after_dequeue, cfg->pipe.queue_capacity)
                     : 2;
    }
    return 0;
}
