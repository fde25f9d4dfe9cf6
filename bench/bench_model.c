/* bench_model.c - images/s of one training step (forward, loss, backward,
 * momentum-SGD update) per built-in model on random data, one thread, after
 * warm-up; then a per-layer forward/backward breakdown. A benchmark
 * (bench/), not a check; the test bench-model-compare runs its
 * --compare-threads.
 *
 *   bench_model [--steps N] [--warmup N] [--batch B] [--size HxWxC] [--classes K]
 *               [--threads T] [--predict P] [--rerun] [--loops K] [--unplanned]
 *               [--compare-threads T1,T2,... [--layers] [--asleep]] [model ...]
 * Default: mlp lenet5 inception-mini, batch 64, 28x28x1, 10 classes, one
 * thread. With --threads T > 1 the img/s by CPU time counts the calling
 * thread only: the wall-time figures need an otherwise idle machine. The
 * per-layer profile of T > 1 threads comes from the pool's statistics
 * (pool.h's nn_pool_stats): per layer the wall time, the work (CPU time of
 * all threads in tasks: compare with one thread's CPU time for the cost of
 * splitting, caches included), the serial part and the idle thread time in
 * the loops; then the step's loops, tasks, idle, wait and wake-up figures.
 * With one thread the profile also
 * predicts the speedup on P threads (default 2; 0: off) from the thread
 * CPU time of every task of the parallel loops, list-scheduled as the pool
 * hands them out, plus what runs outside the loops (serial): a measure of
 * how well each layer is split that a loaded machine does not disturb.
 * --rerun (no prediction): the profile also calls every
 * convolution's forward and backward a second time right after the first
 * and prints that call's CPU time ("rerun"; with --threads T > 1 its wall
 * time, under the layer's row): the layer with the caches as
 * it left them itself, against what the layers before it left; the
 * difference is what a layer pays for running inside the model (see
 * docs/platform.md, "A layer inside a model").
 * --loops K (threads > 1; default 12, 0: off): after the report, the K kinds
 * of pool loops (task function and task count, pool.h's nn_pool_kinds_read)
 * that left threads idle longest: loops, wall and idle thread time per
 * step; the functions are named from this program's symbol table (`nm`).
 * --unplanned: every activation buffer gets its own bytes (the layout of
 * bench_memory --unplanned) instead of the plan's shared arena: whether
 * reusing memory across layers costs (caches, or lines another thread
 * wrote last).
 * --compare-threads T1,T2,... (2-8 thread counts; replaces the report
 * above; a count followed by u, as 2u: that model with --unplanned's
 * layout, to measure what the shared arena costs or saves on T threads):
 * one model per thread count in this process (each its own pool;
 * same seed, same batches), and their steps interleaved: round s runs step s
 * of every model, in the list's order in even rounds and reversed in odd
 * ones (A B B A ... for two), each step (train step and optimizer) timed in
 * wall time. The machine's speed drifts by 10-20% over minutes here, so the
 * ratio of two separate runs is mostly noise; within a round the models see
 * the same machine. Prints per thread count the step time's best, quartiles
 * and max and the img/s of the median and best step; per thread count after
 * the first, the ratios of medians and of bests against the first and the
 * distribution of the per-round ratios. --warmup W untimed rounds first,
 * then --steps S timed ones. The models compute the same bits whatever T
 * (docs/design.md §11): every step's loss, and at the end the parameters and
 * the optimizer slots, are compared bitwise; a difference is fatal (exit 1).
 * Each step starts with the caches as the other model's step left them. A
 * pool's workers sleep 0.5 ms after a loop, so they slept through the other
 * models' steps: an empty loop on the pool wakes them before the step's
 * clock starts, as back-to-back steps of one model find them (else their
 * wake-up would count in the first layer of every step); --asleep: not
 * (what a step after a wait of more than 0.5 ms, an MPI exchange, pays).
 * --layers (with --compare-threads): also per layer and direction the
 * median wall time of each thread count over the timed steps, the first's
 * over each other's, and the sums of those medians by kind of layer: what
 * the per-layer profile above gives, without its clock reads (a thread CPU
 * time read is a system call on a virtual machine, pool statistics read
 * two per loop and thread) and interleaved (nn_model_set_profile_wall:
 * two wall-clock reads per pass). Results are the same bits (compared as above). Then
 * the time outside the layers per thread count, each figure the median over
 * the steps of a per-step quantity: the step, the train step, the sum of
 * its layers' passes, the difference (loss, enter/leave) and the optimizer;
 * beside it the step's median minus the sum of the per-layer medians,
 * which is not that time (a sum of medians is not the median of a sum,
 * and on a small model the two can differ by an order of magnitude).
 * --perturb (a test's seeded defect): flips the lowest bit of the last
 * model's last parameter before the comparison, which must then fail. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "graph.h"
#include "pstrain/pool.h"
#include "layers.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"
#include "pstrain/model.h"
#include "pstrain/optim.h"

int main(int argc, char **argv);
static int (*const main_fn)(int, char **) = main;
static int warmup = 20, classes = 10, predict = 2; /* --warmup, --classes, --predict */
static bool rerun;                                 /* --rerun */
static bool unplanned;                             /* --unplanned */
static bool perturb;                               /* --perturb */
static bool layers;                                /* --layers */
static bool asleep;                                /* --asleep */
static int show_loops = 12;                        /* --loops */
#define WINDOW 20

/* ---- --loops: the pool's loops by kind, named through `nm` ---- */

typedef struct sym {
    uintptr_t addr;
    char name[80];
} sym;

static int sym_cmp(const void *a, const void *b)
{
    uintptr_t x = ((const sym *)a)->addr, y = ((const sym *)b)->addr;
    return x < y ? -1 : x > y;
}

/* This program's text symbols, at their run-time addresses (the load
 * offset from main's); NULL when nm is missing. */
static sym *read_syms(int *n)
{
    *n = 0;
    char cmd[64]; /* /proc/self would be nm's */
    snprintf(cmd, sizeof cmd, "nm /proc/%ld/exe 2>/dev/null", (long)getpid());
    FILE *f = popen(cmd, "r");
    if (!f) return NULL;
    int cap = 4096;
    sym *s = pst_malloc(sizeof(sym) * (size_t)cap);
    char line[512], type, name[256];
    unsigned long long a, main_nm = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%llx %c %255s", &a, &type, name) == 3 && (type == 't' || type == 'T')) {
            if (strcmp(name, "main") == 0) main_nm = a;
            if (*n == cap) s = pst_realloc(s, sizeof(sym) * (size_t)(cap *= 2));
            s[*n].addr = (uintptr_t)a;
            snprintf(s[*n].name, sizeof s[*n].name, "%.79s", name);
            (*n)++;
        }
    pclose(f);
    int (*self)(int, char **) = main_fn;
    uintptr_t main_rt;
    memcpy(&main_rt, &self, sizeof main_rt);
    for (int i = 0; i < *n; i++) s[i].addr += main_rt - (uintptr_t)main_nm;
    qsort(s, (size_t)*n, sizeof(sym), sym_cmp);
    return s;
}

static const char *sym_name(const sym *s, int n, uintptr_t a, char *buf, size_t len)
{
    for (int i = 0; i < n; i++)
        if (s[i].addr == a) return s[i].name;
    snprintf(buf, len, "0x%llx", (unsigned long long)a);
    return buf;
}

static int kind_cmp(const void *a, const void *b)
{
    double x = ((const nn_pool_kind *)a)->idle, y = ((const nn_pool_kind *)b)->idle;
    return x > y ? -1 : x < y;
}

static void print_loops(const nn_pool_kind *kinds, int nk, int64_t steps, int T)
{
    nn_pool_kind *k = pst_malloc(sizeof(nn_pool_kind) * (size_t)(nk ? nk : 1));
    memcpy(k, kinds, sizeof(nn_pool_kind) * (size_t)nk);
    qsort(k, (size_t)nk, sizeof(nn_pool_kind), kind_cmp);
    int ns = 0;
    sym *s = read_syms(&ns);
    double idle = 0;
    for (int i = 0; i < nk; i++) idle += k[i].idle;
    printf("  loops by kernel, most idle first (per step, %d threads; idle: thread time in the "
           "loop not in tasks, start and clock reads included; %.1f us in all):\n",
           T, 1e6 * idle / (double)steps);
    printf("  %-40s %6s %7s %10s %10s\n", "task function", "tasks", "loops", "wall us", "idle us");
    for (int i = 0; i < nk && i < show_loops; i++) {
        uintptr_t a = 0;
        if (k[i].fn)
            memcpy(&a, &k[i].fn, sizeof a);
        else if (k[i].rfn)
            memcpy(&a, &k[i].rfn, sizeof a);
        char buf[32], tasks[16];
        const char *name = a ? sym_name(s, ns, a, buf, sizeof buf) : "(other kinds)";
        if (k[i].ntasks < 0)
            snprintf(tasks, sizeof tasks, "range");
        else
            snprintf(tasks, sizeof tasks, "%d", k[i].ntasks);
        printf("  %-40s %6s %7.1f %10.1f %10.1f\n", name, tasks, k[i].loops / (double)steps,
               1e6 * k[i].wall / (double)steps, 1e6 * k[i].idle / (double)steps);
    }
    free(s);
    free(k);
}

/* ---- --compare-threads: one model per thread count, steps interleaved ---- */

static int dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* q-quantile of sorted v[0..n) (linear between neighbours) */
static double quant(const double *v, int n, double q)
{
    double i = q * (n - 1);
    int lo = (int)i;
    return lo + 1 < n ? v[lo] + (i - lo) * (v[lo + 1] - v[lo]) : v[n - 1];
}

typedef struct cmp_run {
    nn_model *m;
    float *slots;
    char lab[8];  /* its thread count, "2u" for an unplanned one */
    double *t;    /* wall seconds of each timed step: train step and optimizer */
    double *ts;   /* of which nn_model_train_step */
    double *lsum; /* --layers: of which the layers' passes (the sum of cur) */
    double *cur;  /* --layers: this step's [2 * layers] (nn_model_set_profile_wall) */
    double *hist; /* --layers: [timed steps][2 * layers] */
} cmp_run;

/* median of v[0..n), v left unchanged */
static double median_of(const double *v, int n)
{
    double *s = pst_malloc(sizeof(double) * (size_t)n);
    memcpy(s, v, sizeof(double) * (size_t)n);
    qsort(s, (size_t)n, sizeof(double), dcmp);
    double q = quant(s, n, 0.5);
    free(s);
    return q;
}

/* --layers: per layer and direction the median wall time of each thread
 * count, the first's against each other's; then the sums of the medians by
 * kind of layer and over all layers. */
static void print_layers(const cmp_run *run, int nt, int steps, double *sum_med)
{
    const nn_model *m0 = run[0].m;
    int L = m0->nlayers;
    double *v = pst_malloc(sizeof(double) * (size_t)steps);
    double *med = pst_calloc((size_t)nt * 2 * L, sizeof(double));
    for (int k = 0; k < nt; k++)
        for (int i = 0; i < 2 * L; i++) {
            for (int s = 0; s < steps; s++) v[s] = run[k].hist[(size_t)s * 2 * L + i];
            qsort(v, (size_t)steps, sizeof(double), dcmp);
            med[(size_t)k * 2 * L + i] = quant(v, steps, 0.5);
        }
    printf("  per layer, median wall us of the %d timed steps (threads %s first, then each "
           "other thread count and the first's time over its):\n",
           steps, run[0].lab);
    printf("  %-28s %-10s %9s", "layer", "kind", "fwd");
    for (int k = 1; k < nt; k++) printf(" %9s %6s", "fwd", "x");
    printf(" %9s", "bwd");
    for (int k = 1; k < nt; k++) printf(" %9s %6s", "bwd", "x");
    printf("\n");
    const char *kinds[64];
    int nkinds = 0;
    double *bykind = pst_calloc((size_t)64 * nt * 2, sizeof(double));
    for (int i = 0; i < L; i++) {
        const nn_layer *l = &m0->layers[i];
        int q = 0;
        while (q < nkinds && strcmp(kinds[q], l->ops->kind) != 0) q++;
        if (q == nkinds && nkinds < 63) kinds[nkinds++] = l->ops->kind;
        double any = 0;
        for (int k = 0; k < nt; k++)
            for (int d = 0; d < 2; d++) {
                double x = med[(size_t)k * 2 * L + 2 * i + d];
                any += x;
                bykind[((size_t)q * nt + k) * 2 + d] += x;
            }
        if (any <= 0) continue; /* no pass of its own (fused) */
        printf("  %-28s %-10s", l->name, l->ops->kind);
        for (int d = 0; d < 2; d++) {
            double a = med[2 * i + d];
            printf(" %9.1f", 1e6 * a);
            for (int k = 1; k < nt; k++) {
                double b = med[(size_t)k * 2 * L + 2 * i + d];
                printf(" %9.1f %5.2fx", 1e6 * b, b > 0 ? a / b : 0.0);
            }
        }
        printf("\n");
    }
    double *all = pst_calloc((size_t)nt * 2, sizeof(double));
    for (int q = 0; q < nkinds + 1; q++) {
        const double *r = q < nkinds ? bykind + (size_t)q * nt * 2 : all;
        if (q < nkinds)
            for (int k = 0; k < 2 * nt; k++) all[k] += r[k];
        printf("  %-28s %-10s", q < nkinds ? "sum of medians" : "sum of medians, all",
               q < nkinds ? kinds[q] : "");
        for (int d = 0; d < 2; d++) {
            printf(" %9.1f", 1e6 * r[d]);
            for (int k = 1; k < nt; k++)
                printf(" %9.1f %5.2fx", 1e6 * r[k * 2 + d],
                       r[k * 2 + d] > 0 ? r[d] / r[k * 2 + d] : 0.0);
        }
        printf("\n");
    }
    for (int k = 0; k < nt; k++) sum_med[k] = all[2 * k] + all[2 * k + 1];
    free(all), free(bykind), free(med), free(v);
}

/* NBATCHES batches of random images and labels (seed 99), a few different
 * batches as a data stream would give; every model of a run sees the same. */
enum { NBATCHES = 8 };
static void random_batches(int batch, size_t per, float **x, int32_t **y)
{
    *x = pst_aligned_alloc(sizeof(float) * NBATCHES * batch * per);
    *y = pst_malloc(sizeof(int32_t) * NBATCHES * batch);
    nn_rng r;
    nn_rng_seed(&r, 99);
    for (size_t i = 0; i < (size_t)NBATCHES * batch * per; i++) (*x)[i] = (float)nn_rng_normal(&r);
    for (int i = 0; i < NBATCHES * batch; i++)
        (*y)[i] = (int32_t)(nn_rng_next(&r) % (uint64_t)classes);
}

/* One --compare-threads run of a model: what compare()'s parts share. */
typedef struct cmp_state {
    const char *name;
    int batch, steps, h, w, c, nt;
    size_t per, size; /* floats of an image, of the model's slab */
    float *x;         /* random_batches */
    int32_t *y;
    opt_cfg oc;
    cmp_run *run; /* [nt] */
    char list[128];
} cmp_state;

/* The models (one per thread count, tl[k], unplanned where tu[k]), their
 * optimizer slots, the step times' arrays and the batches. */
static void cmp_setup(cmp_state *r, const char *name, int batch, int steps, int h, int w, int c,
                      const int *tl, const bool *tu, int nt)
{
    *r =
        (cmp_state){.name = name, .batch = batch, .steps = steps, .h = h, .w = w, .c = c, .nt = nt};
    r->per = (size_t)h * w * c;
    random_batches(batch, r->per, &r->x, &r->y);
    r->oc = opt_defaults(OPT_MOMENTUM);
    r->run = pst_calloc((size_t)nt, sizeof(cmp_run));
    for (int k = 0; k < nt; k++) {
        cmp_run *q = &r->run[k];
        nn_model_cfg cfg = {name, h, w, c, classes, batch, 1234, 0.0f, 0.0f, tl[k], {0}};
        nn_switches_from_env(&cfg.sw);
        pst_err e;
        if (nn_model_new(&q->m, &cfg, &e) < 0) pst_die("%s", e.msg);
        if (unplanned || tu[k]) nn_model_set_layout(q->m, NN_LAYOUT_PRIVATE);
        r->size = nn_model_size(q->m);
        q->slots = pst_aligned_alloc(sizeof(float) * r->size);
        opt_init_slots(&r->oc, q->slots, r->size, r->size);
        q->t = pst_malloc(sizeof(double) * (size_t)steps);
        q->ts = pst_malloc(sizeof(double) * (size_t)steps);
        q->lsum = pst_calloc((size_t)steps, sizeof(double));
        if (layers) {
            size_t L2 = 2 * (size_t)q->m->nlayers;
            q->cur = pst_calloc(L2, sizeof(double));
            q->hist = pst_calloc(L2 * (size_t)steps, sizeof(double));
            nn_model_set_profile_wall(q->m, q->cur);
        }
        size_t l = strlen(r->list);
        snprintf(q->lab, sizeof q->lab, "%d%s", tl[k], tu[k] ? "u" : "");
        snprintf(r->list + l, sizeof r->list - l, "%s%s", k ? "," : "", q->lab);
    }
}

static void wake_task(void *arg, int task, int tid)
{
    (void)arg, (void)task, (void)tid;
}

/* Step s of model k (train step and optimizer), timed from round `warmup`
 * on; returns the loss. */
static float cmp_step(cmp_state *r, int k, int s)
{
    cmp_run *q = &r->run[k];
    nn_model *m = q->m;
    int b = s % NBATCHES;
    float *p = nn_model_params(m), *g = nn_model_grads(m);
    /* the pool's workers slept through the other models' steps (they sleep
     * 0.5 ms after a loop): wake them before the clock starts, as back-to-
     * back steps of one model find them (--asleep: not) */
    if (!asleep) nn_pool_for(m->pool, nn_pool_threads(m->pool), wake_task, NULL);
    double a = pst_now();
    float loss = nn_model_train_step(m, r->x + (size_t)b * r->batch * r->per,
                                     r->y + (size_t)b * r->batch, r->batch, s, NULL);
    double mid = pst_now();
    nn_model_opt_apply(m, &r->oc, 0.01f, s + 1, p, g, q->slots, r->size, r->size);
    nn_model_apply_state(m, p, g, 0, r->size);
    double end = pst_now();
    if (s < warmup) return loss;
    int i = s - warmup;
    q->t[i] = end - a, q->ts[i] = mid - a;
    if (layers) {
        size_t L2 = 2 * (size_t)m->nlayers;
        for (size_t j = 0; j < L2; j++) q->lsum[i] += q->cur[j];
        memcpy(q->hist + L2 * (size_t)i, q->cur, sizeof(double) * L2);
        memset(q->cur, 0, sizeof(double) * L2);
    }
    return loss;
}

/* Round s runs step s of every model: in order 0..nt-1 in even rounds,
 * reversed in odd ones (ABBA for two), so that a drift of the machine's
 * speed and a position in the round weigh on every configuration alike.
 * Every step's loss must be the same bits on every thread count. */
static void cmp_loop(cmp_state *r)
{
    int nt = r->nt;
    for (int s = 0; s < warmup + r->steps; s++) {
        float loss0 = 0;
        for (int i = 0; i < nt; i++) {
            int k = s % 2 ? nt - 1 - i : i;
            float loss = cmp_step(r, k, s);
            if (i == 0)
                loss0 = loss;
            else if (memcmp(&loss, &loss0, sizeof loss) != 0)
                pst_die("compare %s: step %d's loss differs: threads %s %.9g, threads %s %.9g",
                        r->name, s, r->run[k].lab, (double)loss, r->run[s % 2 ? nt - 1 : 0].lab,
                        (double)loss0);
        }
    }
}

/* Per thread count the step time's quantiles; per later thread count the
 * ratios of medians, of bests and the quantiles of the per-round ratios. */
static void cmp_report(const cmp_state *r)
{
    int steps = r->steps;
    double *ratio = pst_malloc(sizeof(double) * (size_t)steps);
    double *t = pst_malloc(sizeof(double) * (size_t)steps);
    double med0 = 0, best0 = 0;
    for (int k = 0; k < r->nt; k++) {
        const cmp_run *q = &r->run[k];
        memcpy(t, q->t, sizeof(double) * (size_t)steps);
        qsort(t, (size_t)steps, sizeof(double), dcmp);
        double med = quant(t, steps, 0.5), best = t[0];
        printf("  threads %s: step ms best %.3f q1 %.3f median %.3f q3 %.3f max %.3f; img/s median "
               "%.0f best %.0f\n",
               q->lab, 1e3 * best, 1e3 * quant(t, steps, 0.25), 1e3 * med,
               1e3 * quant(t, steps, 0.75), 1e3 * t[steps - 1], r->batch / med, r->batch / best);
        if (k == 0) {
            med0 = med, best0 = best;
            continue;
        }
        for (int s = 0; s < steps; s++) ratio[s] = r->run[0].t[s] / q->t[s];
        qsort(ratio, (size_t)steps, sizeof(double), dcmp);
        printf("  speedup threads %s / threads %s: median/median %.3fx  best/best %.3fx  per round "
               "min %.3f q1 %.3f median %.3f q3 %.3f max %.3f\n",
               q->lab, r->run[0].lab, med0 / med, best0 / best, ratio[0], quant(ratio, steps, 0.25),
               quant(ratio, steps, 0.5), quant(ratio, steps, 0.75), ratio[steps - 1]);
    }
    free(t), free(ratio);
}

/* --layers: the step apart from its layers, per thread count. The median of
 * the step minus the sum of the per-layer medians is not the time outside
 * the layers: a sum of medians is not the median of the sums. Here every
 * figure is a median over the steps of a per-step quantity. */
static void cmp_outside(const cmp_state *r, const double *sum_med)
{
    int steps = r->steps;
    double *v = pst_malloc(sizeof(double) * (size_t)steps);
    printf("  outside the layers, median us over the timed steps of each per-step figure: step, "
           "train step, layers (sum of the step's passes), train step - layers, optimizer "
           "(nn_model_opt_apply + apply_state); and the step's median minus the sum of per-layer "
           "medians:\n");
    for (int k = 0; k < r->nt; k++) {
        const cmp_run *q = &r->run[k];
        double med[5];
        for (int f = 0; f < 5; f++) {
            for (int s = 0; s < steps; s++) {
                double x[5] = {q->t[s], q->ts[s], q->lsum[s], q->ts[s] - q->lsum[s],
                               q->t[s] - q->ts[s]};
                v[s] = x[f];
            }
            med[f] = median_of(v, steps);
        }
        printf("  threads %-3s step %9.1f  train step %9.1f  layers %9.1f  train step - layers "
               "%7.1f  optimizer %7.1f  step - sum of layer medians %7.1f\n",
               q->lab, 1e6 * med[0], 1e6 * med[1], 1e6 * med[2], 1e6 * med[3], 1e6 * med[4],
               1e6 * (med[0] - sum_med[k]));
    }
    free(v);
}

/* The models saw the same batches in the same order: the same parameters
 * and optimizer slots, bitwise (--perturb first flips a bit of the last
 * model's last parameter: the check must then fail). */
static void cmp_check(const cmp_state *r)
{
    size_t size = r->size;
    int nt = r->nt, n = warmup + r->steps;
    if (perturb) {
        float *pl = nn_model_params(r->run[nt - 1].m);
        uint32_t u;
        memcpy(&u, &pl[size - 1], sizeof u);
        u ^= 1;
        memcpy(&pl[size - 1], &u, sizeof u);
    }
    const float *p0 = nn_model_params(r->run[0].m);
    for (int k = 1; k < nt; k++) {
        const float *pk = nn_model_params(r->run[k].m);
        for (size_t i = 0; i < size; i++)
            if (memcmp(&p0[i], &pk[i], sizeof(float)) != 0)
                pst_die("compare %s: parameters differ after %d steps: threads %s and %s at "
                        "float %zu (%.9g, %.9g)",
                        r->name, n, r->run[0].lab, r->run[k].lab, i, (double)p0[i], (double)pk[i]);
        if (memcmp(r->run[0].slots, r->run[k].slots, sizeof(float) * size) != 0)
            pst_die("compare %s: optimizer slots differ after %d steps: threads %s and %s", r->name,
                    n, r->run[0].lab, r->run[k].lab);
    }
    printf("  bitwise equal: threads %s, parameters and optimizer slots (%zu floats) and every "
           "step's loss after %d steps\n",
           r->list, size, n);
    fflush(stdout);
}

static void cmp_free(cmp_state *r)
{
    for (int k = 0; k < r->nt; k++) {
        cmp_run *q = &r->run[k];
        free(q->slots), free(q->t), free(q->ts), free(q->lsum), free(q->cur), free(q->hist);
        nn_model_free(q->m);
    }
    free(r->run), free(r->x), free(r->y);
}

static void compare(const char *name, int batch, int steps, int h, int w, int c, const int *tl,
                    const bool *tu, int nt)
{
    cmp_state r;
    cmp_setup(&r, name, batch, steps, h, w, c, tl, tu, nt);
    printf("compare %s batch %d %dx%dx%d classes %d: threads %s, %d warm-up + %d timed steps "
           "each, interleaved (forward and reverse order in alternate rounds)\n",
           name, batch, h, w, c, classes, r.list, warmup, steps);
    fflush(stdout);
    cmp_loop(&r);
    cmp_report(&r);
    if (layers) {
        double sum_med[8];
        print_layers(r.run, nt, steps, sum_med);
        cmp_outside(&r, sum_med);
    }
    cmp_check(&r);
    cmp_free(&r);
}

static void bench(const char *name, int batch, int steps, int h, int w, int c, int threads)
{
    nn_model_cfg cfg = {name, h, w, c, classes, batch, 1234, 0.0f, 0.0f, threads, {0}};
    nn_switches_from_env(&cfg.sw); /* PSTRAIN_WINO etc.: old against new in one binary */
    nn_model *m = NULL;
    pst_err e;
    if (nn_model_new(&m, &cfg, &e) < 0) pst_die("%s", e.msg);
    if (unplanned) nn_model_set_layout(m, NN_LAYOUT_PRIVATE);
    size_t per = (size_t)h * w * c, size = nn_model_size(m);
    float *x;
    int32_t *y;
    random_batches(batch, per, &x, &y);
    opt_cfg oc = opt_defaults(OPT_MOMENTUM);
    float *slots = pst_aligned_alloc(sizeof(float) * size);
    opt_init_slots(&oc, slots, size, size);
    float *p = nn_model_params(m), *g = nn_model_grads(m);

    double t0 = 0, c0 = 0, tstep = 0, topt = 0, wbest = 1e30, wstart = 0;
    float loss = 0;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) t0 = pst_now(), c0 = pst_thread_cpu(), tstep = topt = 0;
        /* windows of WINDOW steps: the fastest one is what the code does
         * when nothing else disturbs the core (caches, frequency) */
        if (s >= warmup && (s - warmup) % WINDOW == 0) {
            double now = pst_now();
            if (s > warmup && now - wstart < wbest) wbest = now - wstart;
            wstart = now;
        }
        int b = s % NBATCHES;
        double a = pst_now();
        loss = nn_model_train_step(m, x + (size_t)b * batch * per, y + (size_t)b * batch, batch, s,
                                   NULL);
        double mid = pst_now();
        /* the whole slab: non-trainable entries are overwritten right after */
        nn_model_opt_apply(m, &oc, 0.01f, s + 1, p, g, slots, size, size);
        nn_model_apply_state(m, p, g, 0, size);
        double end = pst_now();
        tstep += mid - a, topt += end - mid;
    }
    double total = pst_now() - t0, cpu = pst_thread_cpu() - c0;
    if (steps % WINDOW == 0 && pst_now() - wstart < wbest) wbest = pst_now() - wstart;
    double best = wbest < 1e30 ? wbest / WINDOW : total / steps;
    /* img/s by CPU time is what an idle core would give; wall time also
     * counts other processes on a shared machine */
    printf("%-15s batch %d  threads %d  %8.0f img/s (best %d-step window)  %8.0f img/s (cpu time)  "
           "%8.0f "
           "img/s (wall)  step %.3f ms best (train_step %.3f, optimizer %.3f wall mean)  loss %.3f"
           "  params %zu  blis %s\n",
           name, batch, threads, batch / best, WINDOW, (double)steps * batch / cpu,
           (double)steps * batch / total, 1e3 * best, 1e3 * tstep / steps, 1e3 * topt / steps, loss,
           nn_model_trainable_size(m), nn_blis_arch());
    /* per-layer breakdown over a second, profiled run */
    nn_model_set_profiling(m, true);
    nn_model_set_profile_threads(m, rerun ? 0 : predict);
    nn_model_set_profile_rerun(m, rerun);
    int psteps = steps < 50 ? steps : 50;
    for (int s = 0; s < psteps; s++)
        nn_model_train_step(m, x + (size_t)(s % NBATCHES) * batch * per,
                            y + (size_t)(s % NBATCHES) * batch, batch, s, NULL);
    /* read before the report, which resets the pool's statistics */
    nn_pool_kind kinds[NN_POOL_KINDS + 1];
    int nk =
        threads > 1 && show_loops > 0 ? nn_pool_kinds_read(m->pool, kinds, NN_POOL_KINDS + 1) : 0;
    nn_model_profile_report(m, stdout);
    if (nk) print_loops(kinds, nk, psteps, threads);
    nn_model_set_profiling(m, false);
    fflush(stdout);
    free(x), free(y), free(slots);
    nn_model_free(m);
}

int main(int argc, char **argv)
{
    pst_set_progname("bench_model");
    nn_blis_init();
    int batch = 64, steps = 300, h = 28, w = 28, c = 1, threads = 1, nmodels = 0, ncmp = 0;
    int cmp[8];
    bool cmpu[8];
    const char *models[8];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            if (pst_parse_int(argv[++i], &steps) < 0 || steps < 1) pst_die("bad --steps");
        } else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            if (pst_parse_int(argv[++i], &batch) < 0 || batch < 1) pst_die("bad --batch");
        } else if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            if (sscanf(argv[++i], "%dx%dx%d", &h, &w, &c) != 3) pst_die("bad --size, want HxWxC");
        } else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc) {
            if (pst_parse_int(argv[++i], &warmup) < 0 || warmup < 0) pst_die("bad --warmup");
        } else if (strcmp(argv[i], "--classes") == 0 && i + 1 < argc) {
            if (pst_parse_int(argv[++i], &classes) < 0 || classes < 2) pst_die("bad --classes");
        } else if (strcmp(argv[i], "--predict") == 0 && i + 1 < argc) {
            if (pst_parse_int(argv[++i], &predict) < 0 || predict < 0) pst_die("bad --predict");
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            if (pst_parse_int(argv[++i], &threads) < 0 || threads < 1) pst_die("bad --threads");
        } else if (strcmp(argv[i], "--rerun") == 0) {
            rerun = true;
        } else if (strcmp(argv[i], "--loops") == 0 && i + 1 < argc) {
            if (pst_parse_int(argv[++i], &show_loops) < 0 || show_loops < 0) pst_die("bad --loops");
        } else if (strcmp(argv[i], "--compare-threads") == 0 && i + 1 < argc) {
            char *list = argv[++i], *save = NULL;
            for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                size_t n = strlen(t);
                if (ncmp < 8) cmpu[ncmp] = n > 1 && t[n - 1] == 'u';
                if (ncmp < 8 && cmpu[ncmp]) t[n - 1] = 0; /* "2u": unplanned */
                if (ncmp == 8 || pst_parse_int(t, &cmp[ncmp++]) < 0 || cmp[ncmp - 1] < 1)
                    pst_die("bad --compare-threads, want a list of 2-8 thread counts: 1,2");
            }
            if (ncmp < 2) pst_die("bad --compare-threads, want a list of 2-8 thread counts: 1,2");
        } else if (strcmp(argv[i], "--layers") == 0) {
            layers = true;
        } else if (strcmp(argv[i], "--asleep") == 0) {
            asleep = true;
        } else if (strcmp(argv[i], "--perturb") == 0) {
            perturb = true;
        } else if (strcmp(argv[i], "--unplanned") == 0) {
            unplanned = true;
        } else if (nmodels < 8) {
            models[nmodels++] = argv[i];
        }
    }
    if (!nmodels)
        models[0] = "mlp", models[1] = "lenet5", models[2] = "inception-mini", nmodels = 3;
    for (int i = 0; i < nmodels; i++)
        if (ncmp)
            compare(models[i], batch, steps, h, w, c, cmp, cmpu, ncmp);
        else
            bench(models[i], batch, steps, h, w, c, threads);
    return 0;
}
