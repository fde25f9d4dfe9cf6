/* bench_conv.c - GFLOP/s of single convolution layers at the shapes of the
 * large layers of ResNet-50 (224x224) and Inception-v3 (299x299): forward,
 * input gradient (dgrad) and weight gradient (wgrad), one thread, timed in
 * thread CPU time (CLOCK_THREAD_CPUTIME_ID: on a shared machine wall time
 * also counts other processes). A benchmark (bench/), not a check.
 *
 *   bench_conv [--batch B]... [--min-time S] [--peak GFLOPS] [--threads T] [--acc]
 *              [--mean] [--cold MB] [--hash] [filter ...]
 * Default: batch 8 and 32, every layer; a filter keeps the layers whose name
 * contains it. Each pass counts 2*N*OH*OW*K*KH*KW*C flops; the best of the
 * repetitions (at least 2, until --min-time CPU seconds) is reported, with %
 * of this core's fp32 peak, measured first with a loop of independent
 * fused multiply-adds at the widest vector width the CPU has (--peak G
 * gives a figure instead, e.g. a data-sheet number). wgrad is
 * nn_conv2d_backward without an input gradient; dgrad is the whole backward
 * minus that (the two run as separate passes over the data).
 * --threads T runs each pass on a pool of T threads and reports its work:
 * the CPU time of all threads in the pool's tasks (pool.h's statistics)
 * plus the caller's outside them, less its wait at the loops' ends. Against
 * --threads 1 (the same code on the caller alone) this is the cost of
 * splitting a layer (duplicated packing or padding, caches shared by the
 * threads), measurable on a loaded machine where wall time is not; then
 * each pass's tasks and loops and the threads' idle time at the loops'
 * ends, in % of T x the loops' wall time (the imbalance of the last tasks),
 * and the best repetition's wall time (run it under chrt -f 1 on a shared
 * machine).
 * --acc: the input gradient adds into dx, as for a tensor with two
 * consumers in a model (ResNet's block outputs, Inception's branches).
 * --mean: also the mean of the repetitions (a model's profile is a mean;
 * on a loaded machine the best repetition is well below it).
 * --cold MB: before each repetition, write and read back MB megabytes
 * (untimed), so that the pass finds none of its data in the caches: the
 * opposite bound to the best repetition, which finds all of it there (see
 * docs/platform.md, "A layer inside a model").
 * --hash: also a hash (FNV-1a of the bytes) of each pass's output after its
 * last repetition: y, dw, dx and the whole backward's dw (the inputs are fixed by a seed, so equal
 * hashes from two binaries or thread counts mean the same bits; without --acc). */
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "pstrain/pool.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"
#include "pstrain/model.h"

typedef struct layer {
    const char *name;
    int H, W, C, K, KH, KW, SH, SW, PH, PW;
} layer;

static const layer layers[] = {
    /*                                    H    W    C     K  KH KW SH SW PH PW */
    {"r50 conv1 7x7/2 3->64", 224, 224, 3, 64, 7, 7, 2, 2, 3, 3},
    {"r50 res2 3x3 64->64", 56, 56, 64, 64, 3, 3, 1, 1, 1, 1},
    {"r50 res2 1x1 64->256", 56, 56, 64, 256, 1, 1, 1, 1, 0, 0},
    {"r50 res2 1x1 256->64", 56, 56, 256, 64, 1, 1, 1, 1, 0, 0},
    {"r50 res3 3x3/2 128 @56", 56, 56, 128, 128, 3, 3, 2, 2, 1, 1},
    {"r50 res3 3x3 128", 28, 28, 128, 128, 3, 3, 1, 1, 1, 1},
    {"r50 res4 3x3/2 256 @28", 28, 28, 256, 256, 3, 3, 2, 2, 1, 1},
    {"r50 res5 3x3/2 512 @14", 14, 14, 512, 512, 3, 3, 2, 2, 1, 1},
    {"r50 res3 proj 1x1/2 256->512", 56, 56, 256, 512, 1, 1, 2, 2, 0, 0},
    {"r50 res4 3x3 256", 14, 14, 256, 256, 3, 3, 1, 1, 1, 1},
    {"r50 res4 proj 1x1/2 512->1024", 28, 28, 512, 1024, 1, 1, 2, 2, 0, 0},
    {"r50 res4 1x1 1024->256", 14, 14, 1024, 256, 1, 1, 1, 1, 0, 0},
    {"r50 res5 3x3 512", 7, 7, 512, 512, 3, 3, 1, 1, 1, 1},
    {"r50 res5 proj 1x1/2 1024->2048", 14, 14, 1024, 2048, 1, 1, 2, 2, 0, 0},
    {"r50 res5 1x1 512->2048", 7, 7, 512, 2048, 1, 1, 1, 1, 0, 0},
    /* the other 1x1 shapes of resnet-50 (first blocks, the bottlenecks' ends) */
    {"r50 res2 1x1 64->64", 56, 56, 64, 64, 1, 1, 1, 1, 0, 0},
    {"r50 res3 1x1 256->128 @56", 56, 56, 256, 128, 1, 1, 1, 1, 0, 0},
    {"r50 res3 1x1 128->512", 28, 28, 128, 512, 1, 1, 1, 1, 0, 0},
    {"r50 res3 1x1 512->128", 28, 28, 512, 128, 1, 1, 1, 1, 0, 0},
    {"r50 res4 1x1 512->256 @28", 28, 28, 512, 256, 1, 1, 1, 1, 0, 0},
    {"r50 res4 1x1 256->1024", 14, 14, 256, 1024, 1, 1, 1, 1, 0, 0},
    {"r50 res5 1x1 1024->512 @14", 14, 14, 1024, 512, 1, 1, 1, 1, 0, 0},
    {"r50 res5 1x1 2048->512", 7, 7, 2048, 512, 1, 1, 1, 1, 0, 0},
    {"i3 2a 3x3 32->32 @149", 149, 149, 32, 32, 3, 3, 1, 1, 0, 0},
    {"i3 2b 3x3 32->64 @147", 147, 147, 32, 64, 3, 3, 1, 1, 1, 1},
    {"i3 4a 3x3 80->192 @73", 73, 73, 80, 192, 3, 3, 1, 1, 0, 0},
    {"i3 5b 1x1 288->64 @35", 35, 35, 288, 64, 1, 1, 1, 1, 0, 0},
    {"i3 5b 5x5 48->64 @35", 35, 35, 48, 64, 5, 5, 1, 1, 2, 2},
    {"i3 6a 3x3/2 288->384 @35", 35, 35, 288, 384, 3, 3, 2, 2, 0, 0},
    {"i3 7a 3x3/2 192->320 @17", 17, 17, 192, 320, 3, 3, 2, 2, 0, 0},
    {"i3 6b 1x7 128->128 @17", 17, 17, 128, 128, 1, 7, 1, 1, 0, 3},
    {"i3 6b 7x1 128->192 @17", 17, 17, 128, 192, 7, 1, 1, 1, 3, 0},
    {"i3 6c 1x7 160->160 @17", 17, 17, 160, 160, 1, 7, 1, 1, 0, 3},
    {"i3 6c 7x1 160->192 @17", 17, 17, 160, 192, 7, 1, 1, 1, 3, 0},
    {"i3 6e 1x7 192->192 @17", 17, 17, 192, 192, 1, 7, 1, 1, 0, 3},
    {"i3 6e 7x1 192->192 @17", 17, 17, 192, 192, 7, 1, 1, 1, 3, 0},
    {"i3 7b 3x3 448->384 @8", 8, 8, 448, 384, 3, 3, 1, 1, 1, 1},
    {"i3 7b 1x3 384->384 @8", 8, 8, 384, 384, 1, 3, 1, 1, 0, 1},
    {"i3 7b 3x1 384->384 @8", 8, 8, 384, 384, 3, 1, 1, 1, 1, 0},
    {"r20 3x3 16->16 @28", 28, 28, 16, 16, 3, 3, 1, 1, 1, 1},
    {"r20 3x3/2 16->32 @28", 28, 28, 16, 32, 3, 3, 2, 2, 1, 1},
    {"r20 3x3 32->32 @14", 14, 14, 32, 32, 3, 3, 1, 1, 1, 1},
    {"r20 3x3 64->64 @7", 7, 7, 64, 64, 3, 3, 1, 1, 1, 1},
    {"r20 stem 3x3 1->16 @28", 28, 28, 1, 16, 3, 3, 1, 1, 1, 1},
    {"r20 3x3/2 32->64 @14", 14, 14, 32, 64, 3, 3, 2, 2, 1, 1},
    {"r20 proj 1x1/2 16->32 @28", 28, 28, 16, 32, 1, 1, 2, 2, 0, 0},
    {"r20 proj 1x1/2 32->64 @14", 14, 14, 32, 64, 1, 1, 2, 2, 0, 0},
    /* inception-mini's (28x28x1): the narrow kernels' 3x3 layers */
    {"im mixed_a b3x3_2 3x3 16->24 @14", 14, 14, 16, 24, 3, 3, 1, 1, 1, 1},
    {"im mixed_a bdbl_2 3x3 8->16 @14", 14, 14, 8, 16, 3, 3, 1, 1, 1, 1},
    {"im mixed_b bdbl_2 3x3 16->32 @7", 7, 7, 16, 32, 3, 3, 1, 1, 1, 1},
    {"im reduce/b3x3 3x3/2 64->64 @14", 14, 14, 64, 64, 3, 3, 2, 2, 1, 1},
};

static double peak_gflops;
static bool acc_dx;    /* --acc */
static bool show_mean; /* --mean */
static bool show_hash; /* --hash */

static unsigned long long fnv(const float *v, size_t n)
{
    unsigned long long h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)v;
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* 12 independent accumulator chains: enough to keep two FMA pipes with a
 * latency of 4-5 cycles busy. */
#define FMA_LOOP(NAME, TARGET, LANES)                                                              \
    __attribute__((target(TARGET), noinline)) static double NAME(long iters)                       \
    {                                                                                              \
        typedef float v __attribute__((vector_size(4 * LANES)));                                   \
        v a, b, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11;                                  \
        for (int i = 0; i < LANES; i++) a[i] = 1.0f - 1e-7f, b[i] = 1e-7f;                         \
        c0 = b, c1 = c0 + b, c2 = c1 + b, c3 = c2 + b, c4 = c3 + b, c5 = c4 + b;                   \
        c6 = c5 + b, c7 = c6 + b, c8 = c7 + b, c9 = c8 + b, c10 = c9 + b, c11 = c10 + b;           \
        double t0 = pst_thread_cpu();                                                              \
        for (long k = 0; k < iters; k++) {                                                         \
            c0 = c0 * a + b, c1 = c1 * a + b, c2 = c2 * a + b, c3 = c3 * a + b;                    \
            c4 = c4 * a + b, c5 = c5 * a + b, c6 = c6 * a + b, c7 = c7 * a + b;                    \
            c8 = c8 * a + b, c9 = c9 * a + b, c10 = c10 * a + b, c11 = c11 * a + b;                \
        }                                                                                          \
        double t = pst_thread_cpu() - t0;                                                          \
        v sum = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;                       \
        __asm__ volatile("" : : "x"(sum[0]));                                                      \
        return 2.0 * 12 * LANES * (double)iters / t * 1e-9;                                        \
    }
FMA_LOOP(fma_avx512, "avx512f,fma", 16)
FMA_LOOP(fma_avx2, "avx2,fma", 8)
#endif

/* GFLOP/s of one core's fused multiply-adds: the best of 5 runs. */
static double measure_peak(void)
{
    double best = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    bool avx512 = __builtin_cpu_supports("avx512f"), fma = __builtin_cpu_supports("fma");
    for (int r = 0; r < 5 && (avx512 || fma); r++) {
        double g = avx512 ? fma_avx512(100000000) : fma_avx2(100000000);
        if (g > best) best = g;
    }
#endif
    return best;
}

static float *rand_buf(size_t n, nn_rng *r)
{
    float *v = pst_aligned_alloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = 2.0f * nn_rng_uniform(r) - 1.0f;
    return v;
}

typedef struct run {
    const nn_conv_dims *d;
    float *x, *w, *y, *dy, *dx, *dw, *scratch;
    size_t ny, stride; /* stride: floats of each thread's scratch */
    nn_pool *pool;     /* --threads T > 1, else NULL */
    bool acc;          /* --acc: the input gradient adds into dx */
} run;

enum { PASS_FWD, PASS_WGRAD, PASS_BWD };

static void pass(run *r, int which)
{
    switch (which) {
    case PASS_FWD:
        nn_conv2d_forward(r->y, r->x, r->w, NULL, r->d, false, r->pool, r->scratch, r->stride);
        break;
    case PASS_WGRAD:
        nn_conv2d_backward(NULL, false, r->dw, NULL, r->dy, r->y, r->x, r->w, r->d, false, r->pool,
                           r->scratch, r->stride);
        break;
    default:
        nn_conv2d_backward(r->dx, r->acc, r->dw, NULL, r->dy, r->y, r->x, r->w, r->d, false,
                           r->pool, r->scratch, r->stride);
    }
}

/* --cold MB: before each timed repetition, write a buffer of that many
 * MB and read it back, so the pass starts with none of its data in the
 * caches (nor in the TLB), as a layer may find them inside a model. */
static size_t cold_floats;
static float *cold_buf;
static void evict(void)
{
    float s = 0.0f;
    for (size_t i = 0; i < cold_floats; i += 16) cold_buf[i] = (float)i;
    for (size_t i = 0; i < cold_floats; i += 16) s += cold_buf[i];
    __asm__ volatile("" : : "x"(s));
}

/* --threads T: the last pass's loops and tasks, and per repetition the
 * thread time in the loops outside tasks (idle at the loops' ends: the
 * imbalance of the last tasks) against T x the loops' wall time; the
 * median of the repetitions is reported (a repetition in which one thread
 * was preempted idles the other for as long). Wall figures: meaningful with
 * the machine to oneself, or under chrt -f 1. */
#define SPLIT_REPS 64
static struct {
    long loops, tasks;
    int n;
    double frac[SPLIT_REPS];
    double wall; /* the best repetition's wall seconds */
} split;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double split_median(void)
{
    if (!split.n) return 0;
    qsort(split.frac, (size_t)split.n, sizeof(double), cmp_double);
    return split.frac[split.n / 2];
}

/* Best CPU seconds of one pass: one warm-up, then at least 2 repetitions
 * and until min_time seconds have been spent. */
static double time_pass(run *r, int which, double min_time, double *mean)
{
    pass(r, which);
    double best = 1e30, spent = 0;
    int rep = 0;
    split.wall = 1e30;
    for (; rep < 2 || spent < min_time; rep++) {
        if (cold_floats) evict();
        nn_pool_stats_set(r->pool, true);
        double t0 = pst_thread_cpu(), w0 = pst_now();
        pass(r, which);
        double t = pst_thread_cpu() - t0, wt = pst_now() - w0;
        if (wt < split.wall) split.wall = wt;
        if (r->pool) {
            /* the workers' task time; the caller's wait at the loops' ends out */
            nn_pool_stats st = nn_pool_stats_read(r->pool);
            const int T = nn_pool_threads(r->pool);
            t -= st.wait_cpu;
            for (int i = 1; i < T; i++) t += st.cpu[i];
            nn_pool_stats_set(r->pool, false);
            /* thread time in the loops outside tasks: the loops' ends */
            double busy = 0;
            for (int i = 0; i < T; i++) busy += st.busy[i];
            if (split.n < SPLIT_REPS && st.wall > 0)
                split.frac[split.n++] = (T * st.wall - busy) / (T * st.wall);
            split.loops = st.loops, split.tasks = st.tasks;
        }
        spent += t;
        if (t < best) best = t;
        if (rep > 50) {
            rep++;
            break;
        }
    }
    *mean = spent / rep;
    return best;
}

static void bench_layer(const layer *L, int N, double min_time, nn_pool *pool)
{
    nn_switches sw; /* PSTRAIN_WINO: old against new in one binary */
    nn_switches_from_env(&sw);
    nn_conv_dims d = {N,
                      L->H,
                      L->W,
                      L->C,
                      L->KH,
                      L->KW,
                      L->SH,
                      L->SW,
                      L->PH,
                      L->PW,
                      0,
                      0,
                      L->K,
                      sw.wino,
                      sw.no_shared_pad,
                      sw.no_fuse_strided};
    nn_conv_dims_finish(&d);
    nn_rng rng;
    nn_rng_seed(&rng, 7);
    size_t nx = (size_t)N * d.H * d.W * d.C, nw = (size_t)d.KH * d.KW * d.C * d.K;
    const int T = nn_pool_threads(pool);
    run r = {&d, NULL, NULL,  NULL, NULL, NULL, NULL, NULL, (size_t)N * d.OH * d.OW * d.K,
             0,  pool, acc_dx};
    r.stride = (nn_conv_scratch(&d) + 15) / 16 * 16;
    r.x = rand_buf(nx, &rng), r.w = rand_buf(nw, &rng), r.y = rand_buf(r.ny, &rng);
    r.dy = rand_buf(r.ny, &rng), r.dx = rand_buf(nx, &rng), r.dw = rand_buf(nw, &rng);
    r.scratch = rand_buf(r.stride * T, &rng);
    double flops = 2.0 * N * d.OH * d.OW * (double)d.K * d.KH * d.KW * d.C;
    double mf, mw, mb;
    char idle[3][96];
    const int which[3] = {PASS_FWD, PASS_WGRAD, PASS_BWD};
    double best[3], *mean[3] = {&mf, &mw, &mb};
    unsigned long long hash[4];
    for (int k = 0; k < 3; k++) {
        memset(&split, 0, sizeof split);
        best[k] = time_pass(&r, which[k], min_time, mean[k]);
        hash[k] = k == 0 ? fnv(r.y, r.ny) : k == 1 ? fnv(r.dw, nw) : fnv(r.dx, nx);
        if (k == 2) hash[3] = fnv(r.dw, nw); /* dw of the whole backward (its fused loops) */
        snprintf(idle[k], sizeof idle[k], "%ld tasks in %ld loops, idle %.1f%%, wall %.2f ms",
                 split.tasks, split.loops, 100 * split_median(), 1e3 * split.wall);
    }
    double tf = best[0], tw = best[1], tb = best[2];
    double td = tb - tw;
    if (td < 1e-9) td = 1e-9;
    double gf = flops / tf * 1e-9, gw = flops / tw * 1e-9, gd = flops / td * 1e-9;
    printf("%-32s N%-3d%s %6.2f GF | fwd %7.2f ms %6.1f GF/s %3.0f%% | dgrad %7.2f ms %6.1f GF/s "
           "%3.0f%% | wgrad %7.2f ms %6.1f GF/s %3.0f%%\n",
           L->name, N, T > 1 ? " work" : "", flops * 1e-9, 1e3 * tf, gf, 100 * gf / peak_gflops,
           1e3 * td, gd, 100 * gd / peak_gflops, 1e3 * tw, gw, 100 * gw / peak_gflops);
    if (show_mean)
        printf("%-32s      mean of the repetitions: fwd %7.2f ms, whole backward %7.2f ms (best "
               "%.2f), wgrad %7.2f ms\n",
               "", 1e3 * mf, 1e3 * mb, 1e3 * tb, 1e3 * mw);
    if (T > 1) printf("%-32s      fwd %s | bwd %s | wgrad %s\n", "", idle[0], idle[2], idle[1]);
    if (show_hash)
        printf("%-32s      hash: y %016llx dw %016llx dx %016llx bwd dw %016llx\n", "", hash[0],
               hash[1], hash[2], hash[3]);
    fflush(stdout);
    free(r.x), free(r.w), free(r.y), free(r.dy), free(r.dx), free(r.dw), free(r.scratch);
}

int main(int argc, char **argv)
{
    pst_set_progname("bench_conv");
    nn_blis_init();
    int batches[8], nb = 0, nfilter = 0;
    double min_time = 0.3;
    int threads = 1;
    const char *filters[16];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            if (nb == 8 || pst_parse_int(argv[++i], &batches[nb]) < 0 || batches[nb] < 1)
                pst_die("bad --batch");
            nb++;
        } else if (strcmp(argv[i], "--peak") == 0 && i + 1 < argc) {
            peak_gflops = atof(argv[++i]);
            if (!(peak_gflops > 0)) pst_die("bad --peak, want GFLOP/s > 0");
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            if (pst_parse_int(argv[++i], &threads) < 0 || threads < 1 ||
                threads > NN_POOL_MAX_THREADS)
                pst_die("bad --threads");
        } else if (strcmp(argv[i], "--cold") == 0 && i + 1 < argc) {
            int mb = 0;
            if (pst_parse_int(argv[++i], &mb) < 0 || mb < 1) pst_die("bad --cold, want MB >= 1");
            cold_floats = (size_t)mb << 18;
            cold_buf = pst_aligned_alloc(sizeof(float) * cold_floats);
            memset(cold_buf, 0, sizeof(float) * cold_floats);
        } else if (strcmp(argv[i], "--mean") == 0) {
            show_mean = true;
        } else if (strcmp(argv[i], "--hash") == 0) {
            show_hash = true;
        } else if (strcmp(argv[i], "--acc") == 0) {
            acc_dx = true;
        } else if (strcmp(argv[i], "--min-time") == 0 && i + 1 < argc) {
            min_time = atof(argv[++i]);
        } else if (nfilter < 16) {
            filters[nfilter++] = argv[i];
        }
    }
    if (!nb) batches[0] = 8, batches[1] = 32, nb = 2;
    const char *peak_from = "given";
    if (!peak_gflops) peak_gflops = measure_peak(), peak_from = "measured";
    if (!peak_gflops) peak_gflops = 1, peak_from = "unknown: % columns are GFLOP/s";
    nn_pool *pool = NULL;
    pst_err e;
    if (threads > 1 && nn_pool_new(&pool, threads, &e) < 0) pst_die("%s", e.msg);
    nn_pool_enter(pool); /* placed as the model's steps are (pool.h): pinned when the mask has T */
    printf("conv kernels: %s, blis %s; thread CPU time%s, best repetition; peak %.0f GFLOP/s "
           "(%s)\n",
           nn_narrow_use_simd(-1) ? "AVX-512" : "portable", nn_blis_arch(),
           threads > 1 ? " of all threads (work)" : "", peak_gflops, peak_from);
    for (int b = 0; b < nb; b++)
        for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
            bool keep = nfilter == 0;
            for (int f = 0; f < nfilter && !keep; f++) keep = strstr(layers[i].name, filters[f]);
            if (keep) bench_layer(&layers[i], batches[b], min_time, pool);
        }
    nn_pool_leave(pool);
    nn_pool_free(pool);
    return 0;
}
