/* test_threads.c - the determinism rule of the model's thread pool: a model
 * built with threads T = 2, 3, 4 computes bitwise the same training steps
 * as T = 1 (loss, correct count, logits, the whole gradient slab including
 * the batch-norm statistics), with weight decay, label smoothing and a
 * batch that is no multiple of T, and the same inference logits. Batches
 * are big enough that the reductions (batch norm, dense, loss, decay) run
 * in several blocks. Models not built yet are skipped by name. Also:
 * nn_model_opt_apply on T = 1..4 threads gives the bits of one opt_apply
 * over the whole range, for every optimizer, from an unaligned start; and
 * the model's placement: pinned inside a mask of exactly T CPUs, the
 * caller's own mask back after each step, evaluation and optimizer call. */
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "graph.h"
#include "layers.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"
#include "pstrain/model.h"
#include "pstrain/optim.h"

typedef struct spec {
    const char *name;
    int h, w, c, k, n;
} spec;

static nn_model *make(const spec *s, int threads)
{
    nn_model_cfg cfg = {s->name, s->h, s->w, s->c, s->k, s->n, 99, 0.01f, 0.1f, threads, {0}};
    nn_model *m = NULL;
    pst_err e = {{0}};
    CHECK(nn_model_new(&m, &cfg, &e) == 0 && m, "%s threads %d: %s", s->name, threads, e.msg);
    return m;
}

static bool same_bits(const void *a, const void *b, size_t bytes)
{
    return memcmp(a, b, bytes) == 0;
}

static void check_model(const spec *s)
{
    size_t per = (size_t)s->h * s->w * s->c;
    float *x = pst_malloc(sizeof(float) * per * s->n);
    int32_t *y = pst_malloc(sizeof(int32_t) * s->n);
    nn_rng r;
    nn_rng_seed(&r, 5);
    for (size_t i = 0; i < per * s->n; i++) x[i] = (float)nn_rng_normal(&r);
    for (int i = 0; i < s->n; i++) y[i] = (int32_t)(nn_rng_next(&r) % (uint64_t)s->k);

    nn_model *ref = make(s, 1);
    if (!ref) goto out;
    size_t size = nn_model_size(ref), nlog = (size_t)s->n * s->k;
    float *g1 = pst_malloc(sizeof(float) * size), *l1 = pst_malloc(sizeof(float) * nlog);
    float *e1 = pst_malloc(sizeof(float) * nlog);
    /* two steps: the second one's parameters moved (plain SGD here) */
    float loss1[2];
    int corr1[2];
    for (int st = 0; st < 2; st++) {
        loss1[st] = nn_model_train_step(ref, x, y, s->n, st, &corr1[st]);
        if (st == 0)
            for (size_t i = 0; i < size; i++)
                nn_model_params(ref)[i] -= 0.01f * nn_model_grads(ref)[i];
    }
    memcpy(g1, nn_model_grads(ref), sizeof(float) * size);
    memcpy(l1, nn_model_logits(ref), sizeof(float) * nlog);
    float eloss1 = nn_model_eval(ref, x, y, s->n, NULL, NULL);
    memcpy(e1, nn_model_logits(ref), sizeof(float) * nlog);

    for (int T = 2; T <= 4; T++) {
        nn_model *m = make(s, T);
        if (!m) continue;
        float loss[2];
        int corr[2];
        for (int st = 0; st < 2; st++) {
            loss[st] = nn_model_train_step(m, x, y, s->n, st, &corr[st]);
            if (st == 0)
                for (size_t i = 0; i < size; i++)
                    nn_model_params(m)[i] -= 0.01f * nn_model_grads(m)[i];
        }
        size_t diff = 0;
        for (size_t i = 0; i < size; i++) diff += !same_bits(&g1[i], &nn_model_grads(m)[i], 4);
        CHECK(diff == 0, "%s threads %d: %zu of %zu gradient slab floats differ from threads 1",
              s->name, T, diff, size);
        CHECK(same_bits(l1, nn_model_logits(m), sizeof(float) * nlog),
              "%s threads %d: training logits differ", s->name, T);
        CHECK(same_bits(loss, loss1, sizeof loss) && corr[0] == corr1[0] && corr[1] == corr1[1],
              "%s threads %d: loss %.9g %.9g, correct %d %d; threads 1: %.9g %.9g, %d %d", s->name,
              T, loss[0], loss[1], corr[0], corr[1], loss1[0], loss1[1], corr1[0], corr1[1]);
        float eloss = nn_model_eval(m, x, y, s->n, NULL, NULL);
        CHECK(same_bits(&eloss, &eloss1, 4) &&
                  same_bits(e1, nn_model_logits(m), sizeof(float) * nlog),
              "%s threads %d: inference differs", s->name, T);
        nn_model_free(m);
    }
    free(g1), free(l1), free(e1);
out:
    nn_model_free(ref);
    free(x), free(y);
}

static void check_opt_apply(void)
{
    const size_t n = 3 * 16384 + 1234, off = 3, stride = n + 100;
    float *p0 = pst_malloc(sizeof(float) * (n + off)), *g = pst_malloc(sizeof(float) * (n + off));
    float *s0 = pst_malloc(sizeof(float) * 2 * stride);
    nn_rng r;
    nn_rng_seed(&r, 11);
    for (size_t i = 0; i < n + off; i++)
        p0[i] = (float)nn_rng_normal(&r), g[i] = (float)nn_rng_normal(&r);
    for (size_t i = 0; i < 2 * stride; i++) s0[i] = (float)fabs(nn_rng_normal(&r));
    float *pr = pst_malloc(sizeof(float) * (n + off)), *sr = pst_malloc(sizeof(float) * 2 * stride);
    float *pt = pst_malloc(sizeof(float) * (n + off)), *st = pst_malloc(sizeof(float) * 2 * stride);
    const opt_kind kinds[] = {OPT_SGD, OPT_MOMENTUM, OPT_MOMENTUM, OPT_RMSPROP, OPT_ADAM};
    for (int k = 0; k < 5; k++) {
        opt_cfg c = opt_defaults(kinds[k]);
        c.nesterov = k == 2;
        memcpy(pr, p0, sizeof(float) * (n + off)), memcpy(sr, s0, sizeof(float) * 2 * stride);
        opt_apply(&c, 0.1f, 3, pr + off, g + off, sr + off, stride, n);
        for (int T = 1; T <= 4; T++) {
            spec sp = {"mlp", 4, 4, 1, 10, 1};
            nn_model *m = make(&sp, T);
            if (!m) continue;
            memcpy(pt, p0, sizeof(float) * (n + off)), memcpy(st, s0, sizeof(float) * 2 * stride);
            nn_model_opt_apply(m, &c, 0.1f, 3, pt + off, g + off, st + off, stride, n);
            CHECK(same_bits(pt, pr, sizeof(float) * (n + off)) &&
                      same_bits(st, sr, sizeof(float) * 2 * stride),
                  "nn_model_opt_apply %s%s on %d threads differs from opt_apply",
                  opt_name(kinds[k]), k == 2 ? " (nesterov)" : "", T);
            nn_model_free(m);
        }
    }
    free(p0), free(g), free(s0), free(pr), free(sr), free(pt), free(st);
}

/* The model's placement (include/pstrain/pool.h): with a caller's mask of exactly T
 * CPUs the threads are pinned inside it, and the caller has its own mask
 * back after every train step, evaluation and optimizer call (a thread it
 * starts later inherits that mask, not one CPU). */
static bool mask_is(const cpu_set_t *want)
{
    cpu_set_t got;
    return sched_getaffinity(0, sizeof got, &got) == 0 && CPU_EQUAL(&got, want);
}

static void check_model_placement(void)
{
    cpu_set_t orig, two;
    if (sched_getaffinity(0, sizeof orig, &orig) != 0 || CPU_COUNT(&orig) < 2) {
        fprintf(stderr, "placement: fewer than 2 CPUs in the mask: not checked\n");
        return;
    }
    CPU_ZERO(&two);
    for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
        if (CPU_ISSET(c, &orig)) CPU_SET(c, &two), k++;
    CHECK(sched_setaffinity(0, sizeof two, &two) == 0, "placement: setting a 2-CPU mask");
    unsetenv("PSTRAIN_PIN");
    spec sp = {"lenet5", 28, 28, 1, 10, 61};
    nn_model *m = make(&sp, 2);
    if (m) {
        int cpu[2] = {-1, -1};
        CHECK(nn_model_pinned_cpus(m, cpu, 2) == 2 && cpu[0] != cpu[1] && CPU_ISSET(cpu[0], &two) &&
                  CPU_ISSET(cpu[1], &two),
              "placement: 2 threads in a 2-CPU mask: pinned to %d, %d", cpu[0], cpu[1]);
        size_t per = 28 * 28, size = nn_model_size(m);
        float *x = pst_malloc(sizeof(float) * sp.n * per);
        int32_t *y = pst_malloc(sizeof(int32_t) * sp.n);
        nn_rng r;
        nn_rng_seed(&r, 5);
        for (size_t i = 0; i < sp.n * per; i++) x[i] = (float)nn_rng_normal(&r);
        for (int i = 0; i < sp.n; i++) y[i] = i % 10;
        nn_model_train_step(m, x, y, sp.n, 0, NULL);
        CHECK(mask_is(&two), "placement: the caller's mask changed by nn_model_train_step");
        nn_model_eval(m, x, y, sp.n, NULL, NULL);
        CHECK(mask_is(&two), "placement: the caller's mask changed by nn_model_eval");
        opt_cfg oc = opt_defaults(OPT_MOMENTUM);
        float *slots = pst_calloc(size, sizeof(float));
        nn_model_opt_apply(m, &oc, 0.01f, 1, nn_model_params(m), nn_model_grads(m), slots, size,
                           size); /* lenet5: several 16,384-float tasks */
        CHECK(mask_is(&two), "placement: the caller's mask changed by nn_model_opt_apply");
        free(slots), free(x), free(y);
        nn_model_free(m);
    }
    setenv("PSTRAIN_PIN", "0", 1);
    m = make(&sp, 2);
    int cpu[2];
    CHECK(!m || nn_model_pinned_cpus(m, cpu, 2) == 0, "placement: PSTRAIN_PIN=0 pinned");
    nn_model_free(m);
    unsetenv("PSTRAIN_PIN");
    m = make(&sp, 1);
    CHECK(!m || nn_model_pinned_cpus(m, cpu, 2) == 0, "placement: one thread pinned");
    nn_model_free(m);
    CHECK(sched_setaffinity(0, sizeof orig, &orig) == 0, "placement: restoring the mask");
}

int main(int argc, char **argv)
{
    /* batch sizes that no T divides evenly, images big enough for several
     * reduction blocks; one model by name: argv[1] */
    const spec specs[] = {
        {"mlp", 28, 28, 1, 10, 37},
        {"lenet5", 28, 28, 1, 10, 61},
        {"inception-mini", 28, 28, 1, 10, 19},
        {"resnet-20", 16, 16, 3, 10, 23},
    };
    nn_blis_init(); /* one BLIS thread per call, as pstrain runs it */
    if (argc == 1) check_opt_apply();
    if (argc == 1 && nn_model_known("lenet5")) check_model_placement();
    int ran = 0;
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        if (argc > 1 && strcmp(argv[1], specs[i].name) != 0) continue;
        if (!nn_model_known(specs[i].name)) {
            fprintf(stderr, "%s: not built yet, skipped\n", specs[i].name);
            continue;
        }
        check_model(&specs[i]);
        ran++;
    }
    CHECK(ran > 0, "no model ran");
    return check_exit();
}
