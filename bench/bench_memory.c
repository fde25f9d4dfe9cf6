/* bench_memory.c - peak RSS of training steps (a benchmark, not a test):
 * builds a model, its optimizer slots and a random batch, runs S training
 * steps with the optimizer's update, and prints one JSON line with the
 * memory the model reports (nn_model_memory) and the process's peak
 * resident set (getrusage ru_maxrss) before the first step and after the
 * last. --unplanned gives every activation buffer its own bytes (the
 * layout before planning) for comparison.
 *
 *   build/bench/bench_memory --model resnet-50 --size 224x224x3 --classes 1000 --batch 32
 *
 * The peer: /usr/bin/python3 torch_models.py --model resnet-50 --size 224x224x3 --classes 1000
 * --batch 32 --threads 1 --steps 1 (its max_rss_mb; it runs one warm-up step and S more). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "graph.h"
#include "layers.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"
#include "pstrain/model.h"
#include "pstrain/optim.h"

static double peak_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

static double mib(size_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

int main(int argc, char **argv)
{
    pst_set_progname("bench_memory");
    const char *model = "inception-mini", *optname = "momentum";
    int h = 28, w = 28, c = 1, classes = 10, batch = 32, steps = 1, threads = 1;
    bool unplanned = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--unplanned")) {
            unplanned = true;
            continue;
        }
        if (!v) pst_die("%s: missing value", a);
        i++;
        if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--size")) {
            if (sscanf(v, "%dx%dx%d", &h, &w, &c) != 3) pst_die("--size %s: expected HxWxC", v);
        } else if (!strcmp(a, "--classes")) {
            if (pst_parse_int(v, &classes) < 0 || classes < 2) pst_die("--classes %s", v);
        } else if (!strcmp(a, "--batch")) {
            if (pst_parse_int(v, &batch) < 0 || batch < 1) pst_die("--batch %s", v);
        } else if (!strcmp(a, "--steps")) {
            if (pst_parse_int(v, &steps) < 0 || steps < 1) pst_die("--steps %s", v);
        } else if (!strcmp(a, "--threads")) {
            if (pst_parse_int(v, &threads) < 0 || threads < 1) pst_die("--threads %s", v);
        } else if (!strcmp(a, "--optimizer"))
            optname = v;
        else
            pst_die(
                "unknown option %s (--model --size --classes --batch --steps --threads --optimizer "
                "--unplanned)",
                a);
    }
    opt_kind kind;
    if (opt_parse(optname, &kind) < 0)
        pst_die("--optimizer %s: expected sgd|momentum|rmsprop|adam", optname);
    nn_blis_init();
    nn_model_cfg cfg = {.name = model,
                        .height = h,
                        .width = w,
                        .channels = c,
                        .num_classes = classes,
                        .max_batch = batch,
                        .threads = threads,
                        .seed = 1};
    nn_switches_from_env(&cfg.sw);
    nn_model *m = NULL;
    pst_err e;
    if (nn_model_new(&m, &cfg, &e) < 0) pst_die("%s", e.msg);
    if (unplanned) nn_model_set_layout(m, NN_LAYOUT_PRIVATE);
    const size_t n = nn_model_size(m);
    const opt_cfg oc = opt_defaults(kind);
    const int nslots = opt_nslots(kind);
    float *slots = pst_aligned_alloc(sizeof(float) * (size_t)(nslots ? nslots : 1) * n);
    opt_init_slots(&oc, slots, n, n);
    size_t per = (size_t)h * w * c;
    float *x = pst_aligned_alloc(sizeof(float) * per * (size_t)batch);
    int32_t *y = pst_malloc(sizeof(int32_t) * (size_t)batch);
    nn_rng r;
    nn_rng_seed(&r, 7);
    for (size_t i = 0; i < per * (size_t)batch; i++) x[i] = (float)nn_rng_normal(&r);
    for (int i = 0; i < batch; i++) y[i] = (int32_t)(nn_rng_next(&r) % (uint64_t)classes);
    double before = peak_mib();
    float loss = 0;
    for (int s = 0; s < steps; s++) {
        loss = nn_model_train_step(m, x, y, batch, s, NULL);
        opt_apply(&oc, 0.01f, s + 1, nn_model_params(m), nn_model_grads(m), slots, n, n);
        nn_model_apply_state(m, nn_model_params(m), nn_model_grads(m), 0, n);
    }
    nn_memory mm;
    nn_model_memory(m, &mm);
    printf("{\"model\": \"%s\", \"size\": \"%dx%dx%d\", \"classes\": %d, \"batch\": %d, "
           "\"steps\": %d, \"threads\": %d, \"layout\": \"%s\", \"optimizer\": \"%s\", \"loss\": "
           "%.4f, "
           "\"params_mb\": %.1f, \"slots_mb\": %.1f, \"activations_mb\": %.1f, "
           "\"activations_unplanned_mb\": %.1f, \"scratch_mb\": %.1f, \"input_mb\": %.1f, "
           "\"rss_before_step_mb\": %.1f, \"max_rss_mb\": %.1f}\n",
           model, h, w, c, classes, batch, steps, threads, unplanned ? "unplanned" : "planned",
           optname, loss, mib(mm.param_bytes), mib(mm.param_bytes * (size_t)nslots),
           mib(mm.arena_bytes), mib(mm.unplanned_bytes), mib(mm.scratch_bytes),
           mib(sizeof(float) * per * (size_t)batch), before, peak_mib());
    free(x);
    free(y);
    free(slots);
    nn_model_free(m);
    return 0;
}
