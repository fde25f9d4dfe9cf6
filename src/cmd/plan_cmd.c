/* plan_cmd.c - `pstrain plan`: the placement of a model's variables on P
 * parameter servers, as `pstrain train --ps P` would log it. A command: it
 * sits beside main.c and eval_cmd.c, above the library modules it uses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "pstrain/h5ds.h"
#include "pstrain/model.h"
#include "pstrain/optim.h"
#include "pstrain/placement.h"
#include "pstrain/usage.h"

static void plan_usage(FILE *out)
{
    char names[NN_MODEL_NAMES_LEN];
    fprintf(out,
            "usage: pstrain plan --model M --ps P [--placement round-robin|greedy|partition]\n"
            "                    [--partition-bytes N] [--data FILE.h5 | --height H --width W\n"
            "                    --channels C --classes K] [--batch B] [--optimizer NAME]\n"
            "                    [--threads T]\n"
            "\n"
            "M: %s\n"
            "\n"
            "Prints every variable (batch-norm moving statistics included) with its shape,\n"
            "bytes, parameter server and offset within that server's shard, then the bytes\n"
            "per PS, the imbalance ratio (max/mean) and the model's trainable parameters,\n"
            "then its memory in one process: parameters, gradients and the optimizer's\n"
            "slots (--optimizer as for train, default momentum), and the activations of a\n"
            "batch of B (default 64, as train's --batch) as planned and unplanned, for\n"
            "--threads T (as train's: default 1, 0 = the CPUs of the affinity mask; on\n"
            "T > 1 threads the plan gives each float of the activations to one thread,\n"
            "which can take more bytes).\n"
            "The image size comes from --data or the flags (default 28x28x1, 10 classes:\n"
            "Fashion-MNIST).\n",
            nn_model_names_join(names, sizeof names, " | ", " | "));
}

/* The flags of `pstrain plan`, with their defaults. */
typedef struct plan_args {
    const char *model, *data;
    int ps, height, width, channels, classes, batch, threads;
    opt_kind opt;
    int64_t partition_bytes;
    place_kind kind;
} plan_args;

/* Parses the flags into *out: 0, or -1 with the exit status in *status (0
 * after --help, 2 after a usage error, both printed). */
static int plan_parse(int argc, char **argv, plan_args *out, int *status)
{
    plan_args pa = {.height = 28,
                    .width = 28,
                    .channels = 1,
                    .classes = 10,
                    .batch = 64,
                    .threads = 1,
                    .opt = OPT_MOMENTUM,
                    .partition_bytes = 256 * 1024,
                    .kind = PLACE_ROUND_ROBIN};
    *status = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            plan_usage(stdout);
            *status = 0;
            return -1;
        }
        static const char *const flags[] = {
            "model",    "data",    "ps",    "placement", "partition-bytes", "height", "width",
            "channels", "classes", "batch", "optimizer", "threads",         "help",   NULL};
        bool known = false;
        for (const char *const *n = flags; *n && a[0] == '-' && a[1] == '-'; n++)
            known |= !strcmp(a + 2, *n);
        if (!known) {
            *status = pst_unknown_option(a, flags);
            return -1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "pstrain plan: %s: missing value (try pstrain plan --help)\n", a);
            return -1;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--model"))
            bad = !nn_model_known(pa.model = v);
        else if (!strcmp(a, "--data"))
            pa.data = v;
        else if (!strcmp(a, "--ps"))
            bad = pst_parse_int(v, &pa.ps) < 0 || pa.ps < 1;
        else if (!strcmp(a, "--placement"))
            bad = place_parse(v, &pa.kind) < 0;
        else if (!strcmp(a, "--partition-bytes"))
            bad = pst_parse_i64(v, &pa.partition_bytes) < 0 || pa.partition_bytes <= 0;
        else if (!strcmp(a, "--height"))
            bad = pst_parse_int(v, &pa.height) < 0 || pa.height < 1;
        else if (!strcmp(a, "--width"))
            bad = pst_parse_int(v, &pa.width) < 0 || pa.width < 1;
        else if (!strcmp(a, "--channels"))
            bad = pst_parse_int(v, &pa.channels) < 0 || pa.channels < 1;
        else if (!strcmp(a, "--classes"))
            bad = pst_parse_int(v, &pa.classes) < 0 || pa.classes < 2;
        else if (!strcmp(a, "--batch"))
            bad = pst_parse_int(v, &pa.batch) < 0 || pa.batch < 1;
        else if (!strcmp(a, "--optimizer"))
            bad = opt_parse(v, &pa.opt) < 0;
        else if (!strcmp(a, "--threads")) {
            if (pst_parse_int(v, &pa.threads) < 0 || pa.threads < 0 ||
                pa.threads > NN_MAX_THREADS) {
                fprintf(stderr,
                        "pstrain plan: --threads '%s': expected 0..%d threads (0: the CPUs of the "
                        "affinity mask)\n",
                        v, NN_MAX_THREADS);
                return -1;
            }
        } else {
            *status = pst_unknown_option(a, flags);
            return -1;
        }
        if (bad) {
            char names[NN_MODEL_NAMES_LEN];
            fprintf(stderr, "pstrain plan: %s '%s': expected %s\n", a, v,
                    !strcmp(a, "--model") ? nn_model_names_join(names, sizeof names, ", ", " or ")
                    : !strcmp(a, "--placement") ? "round-robin, greedy or partition"
                    : !strcmp(a, "--classes")   ? "an integer >= 2"
                    : !strcmp(a, "--optimizer") ? "sgd, momentum, rmsprop or adam"
                                                : "a positive integer");
            return -1;
        }
    }
    if (!pa.model || pa.ps < 1) {
        fprintf(stderr, "pstrain plan: --model and --ps are required (try pstrain plan --help)\n");
        return -1;
    }
    *out = pa;
    return 0;
}

int plan_main(int argc, char **argv)
{
    plan_args pa;
    int status;
    if (plan_parse(argc, argv, &pa, &status) < 0) return status;
    pst_err e;
    if (pa.data) {
        h5ds ds;
        if (h5ds_open(&ds, pa.data, &e) < 0) {
            fprintf(stderr, "pstrain plan: %s\n", e.msg);
            return 1;
        }
        pa.height = ds.height, pa.width = ds.width, pa.channels = ds.channels,
        pa.classes = ds.num_classes;
        h5ds_close(&ds);
    }
    nn_model_cfg mc = {.name = pa.model,
                       .height = pa.height,
                       .width = pa.width,
                       .channels = pa.channels,
                       .num_classes = pa.classes,
                       .max_batch = pa.batch,
                       .threads = pst_threads_resolve(pa.threads),
                       .seed = 1};
    nn_switches_from_env(&mc.sw);
    nn_model *m = NULL;
    if (nn_model_new(&m, &mc, &e) < 0) {
        fprintf(stderr, "pstrain plan: %s\n", e.msg);
        return 1;
    }
    int nv = nn_model_nvars(m);
    nn_var *vars = pst_malloc(sizeof *vars * (size_t)(nv ? nv : 1));
    for (int i = 0; i < nv; i++) vars[i] = *nn_model_var(m, i);
    place_plan *p = NULL;
    int rc = 0;
    if (place_plan_new(&p, vars, nv, pa.ps, pa.kind, pa.partition_bytes, &e) < 0) {
        fprintf(stderr, "pstrain plan: %s\n", e.msg);
        rc = 1;
    } else {
        printf("model %s, input %dx%dx%d, %d classes\n", pa.model, pa.height, pa.width, pa.channels,
               pa.classes);
        place_plan_print(p, stdout);
        printf("trainable parameters: %zu\n", nn_model_trainable_size(m));
        nn_model_print_memory(m, opt_nslots(pa.opt), opt_name(pa.opt), stdout);
    }
    place_plan_free(p);
    free(vars);
    nn_model_free(m);
    return rc;
}
