/* bench_pool.c - what the model's thread pool (src/nn/pool.c) costs per
 * loop, apart from any kernel: the round trip of an empty loop (publish,
 * the workers' start, the caller's join) for a few task counts, and range
 * loops (nn_pool_range) over the shapes of resnet-20's batch-norm output
 * passes (batch 64: 64x28x28x16, 64x14x14x32, 64x7x7x64, ReLU of x a + b).
 * Then the concat backward (layers.c) over inception-mini's reduce/concat
 * (3136 rows of 64 + 64) and mixed_a/concat (12544 rows of 16 + 24 + 16 +
 * 8), its dy written just before by a range loop, by the caller alone, or
 * by the previous concat loop (hot): the loop alone, to set against the
 * work those layers take on two threads inside the model (bench_model).
 * Best of R rounds of N loops each, wall time; run it under `chrt -f 50`
 * on a shared machine. A benchmark (bench/), not a check.
 *
 *   bench_pool [--threads T] [--loops N] [--rounds R] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "pstrain/pool.h"

static volatile float sink[NN_POOL_MAX_THREADS * 16];

static void empty_task(void *arg, int task, int tid)
{
    sink[tid * 16] += 1.0f; /* a line of its own per thread */
    (void)arg, (void)task;
}

typedef struct affine {
    const float *x;
    float *y;
    int C;
} affine;

static void affine_range(void *varg, int lo, int hi)
{
    const affine *a = varg;
    const size_t e = (size_t)hi * a->C;
    for (size_t i = (size_t)lo * a->C; i < e; i++) {
        float v = a->x[i] * 1.5f + 0.25f;
        a->y[i] = v > 0.0f ? v : 0.0f;
    }
}

typedef struct cjob {
    float *dins[4];
    const float *dy;
    int cs[4], nin, ctot;
} cjob;

static void concat_bwd(void *varg, int lo, int hi)
{
    const cjob *c = varg;
    float *d[4];
    const bool acc[4] = {false, false, false, false};
    for (int k = 0; k < c->nin; k++) d[k] = c->dins[k] + (size_t)lo * c->cs[k];
    nn_concat_backward(d, acc, c->dy + (size_t)lo * c->ctot, c->cs, c->nin, hi - lo);
}

int main(int argc, char **argv)
{
    int T = 2, loops = 20000, rounds = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc)
            T = atoi(argv[++i]);
        else if (strcmp(argv[i], "--loops") == 0 && i + 1 < argc)
            loops = atoi(argv[++i]);
        else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else
            pst_die("usage: bench_pool [--threads T] [--loops N] [--rounds R]");
    }
    if (loops < 1 || rounds < 1) pst_die("bad --loops or --rounds");
    nn_pool *p = NULL;
    pst_err e;
    if (nn_pool_new(&p, T, &e) < 0) pst_die("%s", e.msg);
    const int counts[] = {2, 4, 16, 64};
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
        double best = 1e30;
        for (int r = 0; r < rounds; r++) {
            double t0 = pst_now();
            for (int i = 0; i < loops; i++) nn_pool_for(p, counts[c], empty_task, NULL);
            double t = (pst_now() - t0) / loops;
            if (t < best) best = t;
        }
        printf("threads %d  empty loop of %2d tasks: %7.3f us\n", T, counts[c], 1e6 * best);
    }
    const int shapes[][2] = {{64 * 28 * 28, 16}, {64 * 14 * 14, 32}, {64 * 7 * 7, 64}};
    for (int s = 0; s < 3; s++) {
        const int M = shapes[s][0], C = shapes[s][1];
        const size_t n = (size_t)M * C;
        float *x = pst_aligned_alloc(sizeof(float) * n), *y = pst_aligned_alloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) x[i] = (float)(i % 7) - 3.0f, y[i] = 0.0f;
        affine a = {x, y, C};
        int nl = loops / 50 > 10 ? loops / 50 : 10;
        double best = 1e30;
        for (int r = 0; r < rounds; r++) {
            double t0 = pst_now();
            for (int i = 0; i < nl; i++) nn_pool_range(p, M, 2 * (size_t)C, affine_range, &a);
            double t = (pst_now() - t0) / nl;
            if (t < best) best = t;
        }
        printf("threads %d  range loop %dx%d: %8.2f us\n", T, M, C, 1e6 * best);
        free(x), free(y);
    }
    /* concat backward (layers.c) over inception-mini's two concats, which
     * take more work on two threads than on one: dy written just before
     * by a range loop (as the consumers' input gradients write it), or by
     * the caller alone, or by the concat loop before (hot) */
    const int cshapes[][5] = {{64 * 7 * 7, 2, 64, 64, 0}, {64 * 14 * 14, 4, 16, 24, 16}};
    for (int s = 0; s < 2; s++) {
        const int M = cshapes[s][0], nin = cshapes[s][1];
        int Cs[4] = {cshapes[s][2], cshapes[s][3], cshapes[s][4], 8}, Ct = 0;
        for (int k = 0; k < nin; k++) Ct += Cs[k];
        const size_t n = (size_t)M * Ct;
        float *x = pst_aligned_alloc(sizeof(float) * n), *dy = pst_aligned_alloc(sizeof(float) * n);
        float *din = pst_aligned_alloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) x[i] = (float)(i % 7) - 3.0f, dy[i] = din[i] = 0.0f;
        cjob c = {.dy = dy, .nin = nin, .ctot = Ct};
        for (int k = 0, o = 0; k < nin; k++) c.cs[k] = Cs[k], c.dins[k] = din + o, o += M * Cs[k];
        affine a = {x, dy, Ct};
        int nl = loops / 50 > 10 ? loops / 50 : 10;
        for (int mode = 0; mode < 3; mode++) {
            double best = 1e30;
            for (int r = 0; r < rounds; r++) {
                double sum = 0;
                for (int i = 0; i < nl; i++) {
                    if (mode == 0) nn_pool_range(p, M, 2 * (size_t)Ct, affine_range, &a);
                    if (mode == 1) affine_range(&a, 0, M);
                    double t0 = pst_now();
                    nn_pool_range(p, M, 2 * (size_t)Ct, concat_bwd, &c);
                    sum += pst_now() - t0;
                }
                if (sum / nl < best) best = sum / nl;
            }
            printf("threads %d  concat backward %dx%d (%d inputs), dy from %s: %8.2f us\n", T, M,
                   Ct, nin,
                   mode == 0   ? "a range loop"
                   : mode == 1 ? "the caller"
                               : "itself (hot)",
                   1e6 * best);
        }
        free(x), free(dy), free(din);
    }
    nn_pool_free(p);
    return 0;
}
