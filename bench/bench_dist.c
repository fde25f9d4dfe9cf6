/*
 * bench_dist.c - micro-benchmarks of the distributed protocol (run under
 * mpirun by jobs/bench-dist.sh):
 *
 *   bench_dist pull [--height H --width W --channels C] [--iters N] [--ps P]
 *       rank 0 idle, ranks 1..P hold the shards of the `mlp` model for an
 *       H x W x C input (default 114x114x3: about 10M parameters, partitioned
 *       over the PS), the remaining ranks pull the whole slab N times with
 *       MPI_Get (ps_pull) and push it N times (ps_push into their slot);
 *       reports GB/s next to an in-process memcpy of the same size.
 *   bench_dist ring [--data FILE.h5] [--batch B] [--seconds S]
 *       the root's batch ring with workers that only consume: batches/s and
 *       images/s; from a synthetic in-memory source (Fashion-MNIST-sized
 *       images), or through the real input pipeline with --data.
 *   bench_dist target [--max-us U] [--busy-ms B] [--iters N]
 *       what a passive target costs its origins: rank 0 owns a window and
 *       serves like pstrain's service loops (dist_progress, then
 *       dist_backoff_wait from 10 us up to U us, default 1000: the root's
 *       loop), or with --busy-ms computes for B ms at a time without
 *       calling MPI (a PS applying a large update); rank 1 makes N
 *       MPI_Fetch_and_op + flush on it at random intervals of 0-2 ms and
 *       reports the latency's median, 90th percentile and maximum, and
 *       rank 0's CPU time over the wall time (the progress thread's cost).
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/blas.h"
#include "pstrain/feed.h"
#include "pstrain/model.h"
#include "pstrain/placement.h"
#include "pstrain/ps.h"
#include "../src/cluster/dist_internal.h"

static int arg_int(int argc, char **argv, const char *name, int def)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return atoi(argv[i + 1]);
    return def;
}

static const char *arg_str(int argc, char **argv, const char *name)
{
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return NULL;
}

static void die(const char *msg)
{
    fprintf(stderr, "bench_dist: %s\n", msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int bench_pull(int argc, char **argv, int rank, int size)
{
    const int P = arg_int(argc, argv, "--ps", 1), iters = arg_int(argc, argv, "--iters", 20);
    const int W = size - 1 - P;
    if (W < 1) die("pull: needs at least ps+2 ranks");
    nn_model_cfg mc = {.name = "mlp",
                       .height = arg_int(argc, argv, "--height", 114),
                       .width = arg_int(argc, argv, "--width", 114),
                       .channels = arg_int(argc, argv, "--channels", 3),
                       .num_classes = 10,
                       .max_batch = 1,
                       .seed = 1};
    nn_model *m = NULL;
    pst_err e;
    if (nn_model_new(&m, &mc, &e) < 0) die(e.msg);
    int nv = nn_model_nvars(m);
    nn_var *vars = malloc(sizeof *vars * (size_t)nv);
    for (int i = 0; i < nv; i++) vars[i] = *nn_model_var(m, i);
    place_plan *plan = NULL;
    if (place_plan_new(&plan, vars, nv, P, PLACE_PARTITION, 256 * 1024, &e) < 0) die(e.msg);
    int *ps_ranks = malloc(sizeof *ps_ranks * (size_t)P); /* ranks 1..P */
    for (int p = 0; p < P; p++) ps_ranks[p] = 1 + p;
    ps_layout lay = {.ps_ranks = ps_ranks, .nworkers = W, .grad_slots = true};
    ps_shard *s = NULL;
    if (ps_new(&s, MPI_COMM_WORLD, plan, &lay, nn_model_params(m), &e) < 0) die(e.msg);
    const size_t n = nn_model_size(m);
    const double bytes = (double)n * sizeof(float);
    float *buf = pst_aligned_alloc(sizeof(float) * n), *src = nn_model_params(m);
    memset(buf, 0, sizeof(float) * n);
    double t_pull = 0, t_push = 0, t_copy = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank > P) {
        int64_t *ver = calloc((size_t)P, sizeof *ver);
        ps_pull(s, buf, false, NULL); /* warm-up */
        double t0 = pst_now();
        for (int i = 0; i < iters; i++) ps_pull(s, buf, false, NULL);
        t_pull = pst_now() - t0;
        if (memcmp(buf, src, sizeof(float) * n)) die("pull: pulled slab differs from the initial");
        t0 = pst_now();
        for (int i = 0; i < iters; i++) ps_push(s, rank - 1 - P, buf, i, ver, 0, 1);
        t_push = pst_now() - t0;
        t0 = pst_now();
        for (int i = 0; i < iters; i++) {
            memcpy(buf, src, sizeof(float) * n);
            __asm__ volatile("" ::"r"(buf) : "memory");
        }
        t_copy = pst_now() - t0;
        free(ver);
    }
    double mine[3] = {t_pull, t_push, t_copy}, all[3] = {0, 0, 0};
    MPI_Reduce(mine, all, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("pull: mlp %dx%dx%d, %zu parameters (%.1f MB), %d PS (partition), %d worker(s), "
               "%d iterations\n",
               mc.height, mc.width, mc.channels, n, bytes / 1e6, P, W, iters);
        printf("  MPI_Get pull  %.2f ms  %.2f GB/s per worker\n", 1e3 * all[0] / iters,
               bytes * iters / all[0] / 1e9);
        printf("  MPI_Put push  %.2f ms  %.2f GB/s per worker\n", 1e3 * all[1] / iters,
               bytes * iters / all[1] / 1e9);
        printf("  memcpy        %.2f ms  %.2f GB/s\n", 1e3 * all[2] / iters,
               bytes * iters / all[2] / 1e9);
    }
    /* the PS ranks never served: the stamps pushed above stay unread */
    ps_free(s);
    place_plan_free(plan);
    free(vars), free(buf), free(ps_ranks);
    nn_model_free(m);
    return 0;
}

typedef struct synth {
    int batch;
    int64_t n, next, index;
    int64_t *ids;
    int32_t *labels;
    uint8_t *pixels;
    double until;
} synth;

static int synth_next(void *ctx, pipe_batch *b, pst_err *e)
{
    (void)e;
    synth *s = ctx;
    if (pst_now() >= s->until) return 0;
    for (int i = 0; i < s->batch; i++) s->ids[i] = (s->next + i) % s->n;
    s->next += s->batch;
    b->count = s->batch;
    b->epoch = (int)(s->next / s->n);
    b->index = s->index++;
    b->ids = s->ids;
    b->labels = s->labels;
    b->pixels = s->pixels;
    return 1;
}

typedef struct timed_pipe {
    pipeline *p;
    double until;
} timed_pipe;

static int pipe_src(void *ctx, pipe_batch *b, pst_err *e)
{
    timed_pipe *t = ctx;
    if (pst_now() >= t->until) return 0;
    return pipe_next(t->p, b, e);
}

static int bench_ring(int argc, char **argv, int rank, int size)
{
    const int B = arg_int(argc, argv, "--batch", 64), secs = arg_int(argc, argv, "--seconds", 3);
    const char *data = arg_str(argc, argv, "--data");
    const int W = size - 1;
    int geom[3] = {28, 28, 1};
    h5ds ds;
    pipeline *pl = NULL;
    pst_err e;
    if (rank == 0 && data) {
        if (h5ds_open(&ds, data, &e) < 0) die(e.msg);
        geom[0] = ds.height, geom[1] = ds.width, geom[2] = ds.channels;
        pipe_cfg pc = pipe_cfg_defaults();
        pc.batch = B;
        pc.epochs = 0;
        pc.prep_threads = arg_int(argc, argv, "--prep-threads", 1);
        if (pipe_new(&pl, &ds, &pc, &e) < 0) die(e.msg);
    }
    MPI_Bcast(geom, 3, MPI_INT, 0, MPI_COMM_WORLD);
    const int64_t px = (int64_t)geom[0] * geom[1] * geom[2];
    feed_geom g = {.batch = B, .example_bytes = px, .nslots = 2 * W + 2, .nworkers = W};
    feed *f = NULL;
    if (feed_new(&f, MPI_COMM_WORLD, 0, &g, &e) < 0) die(e.msg);
    int64_t got = 0;
    double wait = 0, t0 = pst_now();
    if (rank == 0) {
        synth s = {.batch = B, .n = 60000};
        s.ids = calloc((size_t)B, sizeof *s.ids);
        s.labels = calloc((size_t)B, sizeof *s.labels);
        s.pixels = calloc((size_t)(B * px), 1);
        s.until = pst_now() + secs;
        timed_pipe tp = {pl, s.until};
        feed_serve_stats st;
        feed_hooks h = {.source = data ? pipe_src : synth_next,
                        .ctx = data ? (void *)&tp : (void *)&s};
        if (feed_root_serve(f, -1, &h, &st, &e) < 0) die(e.msg);
        printf("ring: %s source, batch %d of %lld-byte images, %d consuming worker(s), %d slots "
               "of %lld bytes\n",
               data ? "pipeline" : "synthetic", B, (long long)px, W, 2 * W + 2,
               (long long)feed_slot_bytes(f));
        printf("  %lld batches in %.2f s: %.0f batches/s, %.0f images/s, %.1f MB/s; root loop CPU "
               "%.2f s (%.0f%%), %.2f s inside the source\n",
               (long long)st.batches, st.wall, st.batches / st.wall, st.batches * B / st.wall,
               st.batches * B * (double)px / st.wall / 1e6, st.cpu, 100 * st.cpu / st.wall,
               st.source_wait);
        free(s.ids), free(s.labels), free(s.pixels);
    } else {
        feed_batch b;
        while (feed_take(f, &b, &wait)) got++;
        feed_finish(f);
    }
    double el = pst_now() - t0;
    (void)el;
    feed_free(f);
    if (rank == 0 && data) {
        pipe_free(pl);
        h5ds_close(&ds);
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int bench_target(int argc, char **argv, int rank, int size)
{
    const int iters = arg_int(argc, argv, "--iters", 2000);
    const int max_us = arg_int(argc, argv, "--max-us", 1000);
    const int busy_ms = arg_int(argc, argv, "--busy-ms", 0);
    int64_t *base = NULL;
    MPI_Win win;
    MPI_Win_allocate(rank == 0 ? 64 : 0, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    if (rank == 0) memset(base, 0, 64);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = pst_now(), cpu0 = dist_cpu_seconds();
    if (rank == 0) {
        /* served until rank 1 has added its iters to word 1 */
        dist_backoff bo;
        dist_backoff_init(&bo, 10, max_us);
        for (;;) {
            MPI_Win_sync(win);
            if (__atomic_load_n(&base[1], __ATOMIC_ACQUIRE) >= iters) break;
            if (busy_ms > 0) {
                const double until = pst_now() + busy_ms * 1e-3;
                volatile double x = 0;
                while (pst_now() < until) x += 1;
            } else {
                dist_backoff_wait(&bo);
            }
            dist_progress();
        }
        const double wall = pst_now() - t0, cpu = dist_cpu_seconds() - cpu0;
        MPI_Send(&wall, 1, MPI_DOUBLE, 1, 0, MPI_COMM_WORLD);
        MPI_Send(&cpu, 1, MPI_DOUBLE, 1, 0, MPI_COMM_WORLD);
    } else if (rank == 1) {
        double *lat = malloc(sizeof *lat * (size_t)iters);
        const int64_t one = 1;
        int64_t old = 0;
        unsigned r = 12345;
        for (int i = 0; i < iters; i++) {
            r = r * 1103515245u + 12345u;
            const double until = pst_now() + (double)(r >> 16 & 2047) * 1e-6;
            while (pst_now() < until) {
            }
            const double ts = pst_now();
            MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, 8, MPI_SUM, win);
            MPI_Win_flush(0, win);
            lat[i] = pst_now() - ts;
        }
        double wall = 0, cpu = 0;
        MPI_Recv(&wall, 1, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(&cpu, 1, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        qsort(lat, (size_t)iters, sizeof *lat, cmp_double);
        int prov = 0;
        MPI_Query_thread(&prov);
        printf("target: %s, %d fetch-and-op+flush, thread level %d: latency median %.1f us, "
               "p90 %.1f us, max %.1f us; target CPU %.2f s of %.2f s wall (%.0f%%)\n",
               busy_ms > 0 ? "busy" : "back-off", iters, prov, 1e6 * lat[iters / 2],
               1e6 * lat[iters * 9 / 10], 1e6 * lat[iters - 1], cpu, wall, 100 * cpu / wall);
        if (busy_ms > 0)
            printf("  target computes %d ms at a time without MPI calls\n", busy_ms);
        else
            printf("  target back-off 10-%d us\n", max_us);
        free(lat);
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    (void)size;
    return 0;
}

int main(int argc, char **argv)
{
    int prov;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &prov);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    nn_blis_init();
    if (size < 2 || argc < 2) die("usage: mpirun -np N bench_dist pull|ring|target [options]");
    int rc = !strcmp(argv[1], "pull")     ? bench_pull(argc, argv, rank, size)
             : !strcmp(argv[1], "ring")   ? bench_ring(argc, argv, rank, size)
             : !strcmp(argv[1], "target") ? bench_target(argc, argv, rank, size)
                                          : (die("unknown benchmark"), 1);
    MPI_Finalize();
    return rc;
}
