/* bench_bn.c - batch-norm kernels (bn*.c) alone: microseconds per call of
 * the training forward and the backward at the shapes of resnet-20 (batch
 * 64, 28x28) and resnet-50 (batch 8, 224x224), and with --hash a hash of
 * every output for a set of shapes and variants (to compare two builds
 * bitwise). A benchmark (bench/), not a check.
 *
 *   bench_bn [--threads T] [--reps R] [--hash] [NxHxWxC ...]
 *
 * Each call reads one of several rotating buffer sets (at least 48 MB in
 * all, so that a call finds its tensors out of the caches, as a layer
 * mostly does). One thread: thread CPU time per call (best and median of
 * R); T > 1: wall time per call with the pool's statistics off, beside the
 * wall time of the same call on the caller alone (interleaved, pair by
 * pair, on the next buffer set: the speedup without the drift of separate
 * runs), and in separate calls the threads' idle time in the loops (the
 * pool's statistics: T x wall - busy, summed over the call's loops).
 * Variants: f (forward + ReLU), fa (forward + fused add + ReLU), b
 * (backward + ReLU), ba (backward of the fused add + ReLU, the addend's
 * gradient written), b2 (backward + ReLU, the gradient in two parts). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "pstrain/pool.h"
#include "pstrain/common.h"

static uint64_t rng_state = 88172645463325252ull;
static float frand(void)
{
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *vec(size_t n, float scale, float add)
{
    float *p = pst_aligned_alloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = scale * frand() + add;
    return p;
}

/* one buffer set: every tensor a call reads or writes */
typedef struct set {
    float *x, *r, *y, *dy, *dy2, *dx, *dres, *st, *dgb;
} set;

static void set_new(set *s, size_t n, int C)
{
    s->x = vec(n, 2, 0.5f), s->r = vec(n, 1, 0), s->y = vec(n, 0, 0), s->dy = vec(n, 1, 0);
    s->dy2 = vec(n, 1, 0), s->dx = vec(n, 0, 0), s->dres = vec(n, 0, 0);
    s->st = vec(4 * (size_t)C, 0, 0), s->dgb = vec(2 * (size_t)C, 0, 0);
}

static void set_free(set *s)
{
    free(s->x), free(s->r), free(s->y), free(s->dy), free(s->dy2), free(s->dx), free(s->dres);
    free(s->st), free(s->dgb);
}

typedef struct params {
    float *g, *b, *mm, *mv;
} params;

enum { V_F, V_FA, V_B, V_BA, V_B2, V_NV };
static const char *vname[V_NV] = {"f", "fa", "b", "ba", "b2"};

/* variant v on set s (a backward needs its forward's statistics in s->st:
 * run V_F or V_FA on s first) */
static void run(nn_pool *pool, double *red, set *s, const params *p, int M, int C, int v)
{
    float *st = s->st;
    if (v == V_F || v == V_FA) {
        nn_bn_res res = {.res = s->r, .relu = true};
        nn_bn_forward_train_par(pool, red, s->y, st, st + C, st + 2 * C, st + 3 * C, s->x, p->g,
                                p->b, p->mm, p->mv, M, C, 0.99f, 1e-3f, v == V_F,
                                v == V_FA ? &res : NULL);
        return;
    }
    nn_bn_res rb = {.dres = s->dres, .dres_acc = false, .relu = true};
    nn_bn_backward_par(pool, red, s->dx, false, s->dgb, s->dgb + C, s->dy,
                       v == V_B2 ? s->dy2 : NULL, s->y, s->x, p->g, p->b, st, st + C, M, C,
                       v != V_BA, v == V_BA ? &rb : NULL);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One call of variant v on set q: thread CPU time (one thread) or wall
 * time (T > 1, the pool's statistics off: their clock reads, a system call
 * each on a virtual machine, can cost more than a small layer's loop) in
 * microseconds. */
static double timed(nn_pool *pool, double *red, set *q, const params *p, int M, int C, int v)
{
    int T = nn_pool_threads(pool);
    double w0 = pst_now(), c0 = pst_thread_cpu();
    run(pool, red, q, p, M, C, v);
    double w1 = pst_now(), c1 = pst_thread_cpu();
    return 1e6 * (T > 1 ? w1 - w0 : c1 - c0);
}

static void bench(nn_pool *pool, int N, int H, int W, int C, int reps)
{
    int M = N * H * W, T = nn_pool_threads(pool);
    size_t n = (size_t)M * C, bytes = sizeof(float) * 7 * n;
    int nsets = (int)((48u << 20) / bytes) + 1;
    if (nsets > 8) nsets = 8;
    set *s = pst_malloc(sizeof(set) * nsets);
    for (int k = 0; k < nsets; k++) set_new(&s[k], n, C);
    params p = {vec(C, 1, 1.5f), vec(C, 1, 0), vec(C, 1, 0), vec(C, 0.5f, 1.0f)};
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    double *t = pst_malloc(sizeof(double) * reps), *idle = pst_malloc(sizeof(double) * reps);
    double *t1 = pst_malloc(sizeof(double) * reps), *ratio = pst_malloc(sizeof(double) * reps);
    printf("%dx%dx%dx%d  M %d  blocks %d  threads %d  sets %d\n", N, H, W, C, M, nn_bn_blocks(M, C),
           T, nsets);
    for (int v = 0; v < V_NV; v++) {
        int fwd = v == V_BA ? V_FA : V_F;
        for (int k = 0; k < nsets; k++) run(pool, red, &s[k], &p, M, C, fwd);
        /* T > 1: each rep also runs the call on the caller alone (wall
         * time), alternately before and after the T-thread call, on the
         * next set: the same machine for both, so the ratio of the two is
         * not the drift of separate runs */
        for (int r = -2, k = 0; r < reps; r++) {
            double a = 0, b;
            if (T > 1 && r % 2) a = timed(NULL, red, &s[k++ % nsets], &p, M, C, v);
            b = timed(pool, red, &s[k++ % nsets], &p, M, C, v);
            if (T > 1 && !(r % 2)) a = timed(NULL, red, &s[k++ % nsets], &p, M, C, v);
            if (r < 0) continue;
            t[r] = b;
            if (T > 1) t1[r] = a, ratio[r] = a / b;
        }
        if (T > 1) /* the idle thread time in separate calls, the statistics on */
            for (int r = 0; r < reps; r++) {
                nn_pool_stats_set(pool, true);
                run(pool, red, &s[r % nsets], &p, M, C, v);
                nn_pool_stats ps = nn_pool_stats_read(pool);
                double busy = 0;
                for (int i = 0; i < T; i++) busy += ps.busy[i];
                idle[r] = 1e6 * (T * ps.wall - busy);
                nn_pool_stats_set(pool, false);
            }
        qsort(t, (size_t)reps, sizeof(double), cmp_d);
        printf("  %-3s %s best %8.1f us  median %8.1f us", vname[v], T > 1 ? "wall" : "cpu ", t[0],
               t[reps / 2]);
        if (T > 1) {
            qsort(idle, (size_t)reps, sizeof(double), cmp_d);
            qsort(t1, (size_t)reps, sizeof(double), cmp_d);
            qsort(ratio, (size_t)reps, sizeof(double), cmp_d);
            printf("  1 thread best %8.1f median %8.1f  speedup median/median %.2fx (per pair "
                   "q1 %.2f median %.2f q3 %.2f)  idle (median, statistics on) %7.1f us",
                   t1[0], t1[reps / 2], t1[reps / 2] / t[reps / 2], ratio[reps / 4],
                   ratio[reps / 2], ratio[3 * reps / 4], idle[reps / 2]);
        }
        printf("\n");
    }
    for (int k = 0; k < nsets; k++) set_free(&s[k]);
    free(s), free(p.g), free(p.b), free(p.mm), free(p.mv), free(red), free(t), free(idle);
    free(t1), free(ratio);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

/* every output of every variant (and dx added, the addend's gradient
 * added, no ReLU) hashed: the same numbers from two builds mean the same
 * bits */
static void hash(nn_pool *pool, int N, int H, int W, int C)
{
    int M = N * H * W;
    size_t n = (size_t)M * C;
    rng_state = 88172645463325252ull ^ (uint64_t)n;
    set s;
    set_new(&s, n, C);
    params p = {vec(C, 1, 1.5f), vec(C, 1, 0), vec(C, 1, 0), vec(C, 0.5f, 1.0f)};
    float *dy0 = vec(n, 1, 0);
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    uint64_t h = 14695981039346656037ull;
    for (int relu = 0; relu < 2; relu++)
        for (int mode = 0; mode < 6; mode++) { /* plain, add, add+dres set/add, two parts, acc */
            bool add = mode >= 1 && mode <= 3;
            nn_bn_res res = {.res = s.r, .relu = relu};
            float *st = s.st;
            nn_bn_forward_train_par(pool, red, s.y, st, st + C, st + 2 * C, st + 3 * C, s.x, p.g,
                                    p.b, p.mm, p.mv, M, C, 0.99f, 1e-3f, relu && !add,
                                    add ? &res : NULL);
            h = fnv(h, s.y, sizeof(float) * n), h = fnv(h, st, sizeof(float) * 4 * C);
            memcpy(s.dy, dy0, sizeof(float) * n);
            nn_bn_res rb = {.dres = mode >= 2 ? s.dres : NULL, .dres_acc = mode == 3, .relu = relu};
            nn_bn_backward_par(pool, red, s.dx, mode == 5, s.dgb, s.dgb + C, s.dy,
                               mode == 4 ? s.dy2 : NULL, s.y, s.x, p.g, p.b, st, st + C, M, C,
                               relu && !add, add ? &rb : NULL);
            h = fnv(h, s.dx, sizeof(float) * n), h = fnv(h, s.dgb, sizeof(float) * 2 * C);
            h = fnv(h, s.dres, sizeof(float) * n), h = fnv(h, s.dy, sizeof(float) * n);
            nn_bn_forward_infer_par(pool, s.y, s.x, p.g, p.b, p.mm, p.mv, M, C, 1e-3f, relu && !add,
                                    add ? &res : NULL);
            h = fnv(h, s.y, sizeof(float) * n);
        }
    printf("%dx%dx%dx%d %016llx\n", N, H, W, C, (unsigned long long)h);
    set_free(&s), free(p.g), free(p.b), free(p.mm), free(p.mv), free(dy0), free(red);
}

int main(int argc, char **argv)
{
    int threads = 1, reps = 30, nshapes = 0;
    bool do_hash = false;
    int shapes[64][4];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hash"))
            do_hash = true;
        else if (nshapes < 64 &&
                 sscanf(argv[i], "%dx%dx%dx%d", &shapes[nshapes][0], &shapes[nshapes][1],
                        &shapes[nshapes][2], &shapes[nshapes][3]) == 4)
            nshapes++;
        else {
            fprintf(stderr, "usage: bench_bn [--threads T] [--reps R] [--hash] [NxHxWxC ...]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    static const int r20[][4] = {{64, 28, 28, 16}, {64, 14, 14, 32}, {64, 7, 7, 64}};
    static const int r50[][4] = {{8, 112, 112, 64}, {8, 56, 56, 64},  {8, 56, 56, 256},
                                 {8, 28, 28, 128},  {8, 28, 28, 512}, {8, 14, 14, 1024},
                                 {8, 7, 7, 2048}};
    static const int hs[][4] = {
        {1, 1, 2051, 5},  {1, 1, 2051, 16}, {1, 1, 2051, 32}, {1, 1, 2051, 40}, {1, 1, 2051, 48},
        {1, 1, 2051, 56}, {1, 1, 2051, 64}, {1, 1, 2051, 72}, {1, 1, 600, 200}, {1, 1, 389, 256},
        {1, 1, 20001, 5}, {64, 7, 7, 64},   {64, 14, 14, 32}, {64, 28, 28, 16}, {8, 7, 7, 2048},
        {2, 56, 56, 256}, {2, 28, 28, 512}, {3, 5, 5, 2048}};
    if (!nshapes) {
        if (do_hash) {
            nshapes = (int)(sizeof hs / sizeof hs[0]);
            memcpy(shapes, hs, sizeof hs);
        } else {
            memcpy(shapes, r20, sizeof r20);
            memcpy(shapes + 3, r50, sizeof r50);
            nshapes = 10;
        }
    }
    nn_pool *pool = NULL;
    pst_err e;
    if (threads > 1 && nn_pool_new(&pool, threads, &e) < 0) pst_die("%s", e.msg);
    /* the caller pinned once for the whole run, as a model's step is (not
     * per call: pinning takes system calls that a layer does not pay) */
    nn_pool_enter(pool);
    for (int i = 0; i < nshapes; i++) {
        if (shapes[i][3] > NN_BN_MAX_C || shapes[i][0] * shapes[i][1] * shapes[i][2] < 2)
            pst_die("bench_bn: shape %d: at most %d channels, at least 2 rows", i, NN_BN_MAX_C);
        if (do_hash)
            hash(pool, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3]);
        else
            bench(pool, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], reps);
    }
    nn_pool_leave(pool);
    nn_pool_free(pool);
    return 0;
}
