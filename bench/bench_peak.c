/* bench_peak.c - what the hardware gives one thread and T threads running
 * at the same time: the ceiling for `--threads T` against `--threads 1`.
 * A benchmark (bench/), not a check.
 *
 *   bench_peak [--threads T] [--seconds S] [--rounds R] [--l1 KB] [--l2 KB]
 *              [--mb MB] [--portable] [test ...]
 *
 * Tests (all by default; name some to run only those):
 *   fma    register-only fused multiply-adds: 16 independent accumulator
 *          chains of 16 floats (AVX-512, if the CPU has it; else, or with
 *          --portable, the same loop in the compiler's generic vectors),
 *          2 flops per multiply-add: GFLOP/s.
 *   l1     a load and a multiply-add per float over a buffer of --l1 KB
 *          per thread (default 16), read again and again: GB/s loaded
 *          (GFLOP/s = GB/s / 2).
 *   l2     the same over --l2 KB per thread (default half of this CPU's
 *          L2, from sysconf; 512 if unknown).
 *   triad  a[i] = b[i] + s * c[i] over three arrays of --mb MB in all per
 *          thread (default 1024, much larger than any L3 a VM shows): GB/s
 *          as STREAM counts it (12 bytes per element; the write-allocate
 *          read of a is not counted).
 *
 * Each test runs first on one thread, then on T threads at once (default T:
 * the CPUs of the affinity mask, at least 2). Threads are pinned to
 * distinct CPUs of the mask (the first T of it; one thread: the first),
 * allocate and touch their own buffers, meet at a barrier and then run the
 * loop in chunks of about a millisecond until S seconds (default 1) have
 * passed on their own clock. A thread's rate is its work over its wall
 * time; the T-thread figure is the sum of the threads' rates, over the same
 * seconds. The tests alternate 1 thread / T threads for R rounds (default
 * 3) and the best round of each is reported, with the ratio aggregate / one
 * thread: T means the threads do not share that resource, 1 means they
 * share it whole (e.g. two vCPUs on one physical core's FMA units).
 * "cpu %" is the threads' CPU time over their wall time: under 100 means
 * other processes had the CPU meanwhile, and the figure is too low (the
 * rate by CPU time is printed too, but a hypervisor's steal is not always
 * taken out of it). Run it on an idle machine. */
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pstrain/common.h"

enum { T_FMA, T_L1, T_L2, T_TRIAD, NTEST };
static const char *test_name[NTEST] = {"fma", "l1", "l2", "triad"};
static const char *test_unit[NTEST] = {"GFLOP/s", "GB/s", "GB/s", "GB/s"};

static bool portable; /* --portable */
static bool avx512;   /* the AVX-512 loops run */

/* ---- kernels: each runs one chunk and returns its work (flops or bytes) ---- */

typedef float v16 __attribute__((vector_size(64)));

/* 16 chains of c = c * a + b: enough to keep two FMA pipes of latency 4-5
 * busy. a and b keep the values bounded; the sum goes into an asm so that
 * nothing is optimised away. */
#define FMA_BODY(ITERS)                                                                            \
    v16 a, b, c[16];                                                                               \
    for (int i = 0; i < 16; i++) a[i] = 1.0f - 1e-7f, b[i] = 1e-7f;                                \
    for (int j = 0; j < 16; j++) c[j] = b * (float)(j + 1);                                        \
    for (long k = 0; k < (ITERS); k++) {                                                           \
        c[0] = c[0] * a + b, c[1] = c[1] * a + b, c[2] = c[2] * a + b, c[3] = c[3] * a + b;        \
        c[4] = c[4] * a + b, c[5] = c[5] * a + b, c[6] = c[6] * a + b, c[7] = c[7] * a + b;        \
        c[8] = c[8] * a + b, c[9] = c[9] * a + b, c[10] = c[10] * a + b, c[11] = c[11] * a + b;    \
        c[12] = c[12] * a + b, c[13] = c[13] * a + b, c[14] = c[14] * a + b;                       \
        c[15] = c[15] * a + b;                                                                     \
    }                                                                                              \
    v16 s = c[0];                                                                                  \
    for (int j = 1; j < 16; j++) s += c[j];                                                        \
    __asm__ volatile("" : : "g"(s[0]));                                                            \
    return 2.0 * 16 * 16 * (double)(ITERS)

/* 8 accumulators over 128 floats per step: one load and one multiply-add
 * per float. n: floats, a multiple of 128. */
#define LOAD_BODY(X, N, PASSES)                                                                    \
    v16 a, c[8];                                                                                   \
    for (int i = 0; i < 16; i++) a[i] = 1.0f - 1e-7f;                                              \
    for (int j = 0; j < 8; j++) c[j] = a - a;                                                      \
    for (int p = 0; p < (PASSES); p++)                                                             \
        for (size_t i = 0; i < (N); i += 128) {                                                    \
            const v16 *xv = (const v16 *)((X) + i);                                                \
            c[0] += xv[0] * a, c[1] += xv[1] * a, c[2] += xv[2] * a, c[3] += xv[3] * a;            \
            c[4] += xv[4] * a, c[5] += xv[5] * a, c[6] += xv[6] * a, c[7] += xv[7] * a;            \
        }                                                                                          \
    v16 s = c[0];                                                                                  \
    for (int j = 1; j < 8; j++) s += c[j];                                                         \
    __asm__ volatile("" : : "g"(s[0]));                                                            \
    return 4.0 * (double)(N) * (PASSES)

#define FMA_ITERS 50000L

static __attribute__((noinline)) double fma_portable(void)
{
    FMA_BODY(FMA_ITERS);
}

static __attribute__((noinline)) double load_portable(const float *x, size_t n, int passes)
{
    LOAD_BODY(x, n, passes);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define HAVE_AVX512_LOOPS 1
static __attribute__((noinline, target("avx512f,fma"))) double fma_avx512(void)
{
    FMA_BODY(FMA_ITERS);
}

static __attribute__((noinline, target("avx512f,fma"))) double load_avx512(const float *x, size_t n,
                                                                           int passes)
{
    LOAD_BODY(x, n, passes);
}
#endif

/* A slice of the triad; the compiler vectorises it for its target. */
static __attribute__((noinline)) double triad(float *restrict a, const float *restrict b,
                                              const float *restrict c, size_t n)
{
    const float s = 3.0f;
    for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
    return 12.0 * (double)n;
}

/* ---- threads ---- */

typedef struct job {
    int test, cpu; /* cpu < 0: not pinned */
    size_t floats; /* l1/l2: buffer; triad: each array */
    double seconds;
    pthread_barrier_t *bar;
    double work, wall, cpu_s; /* results */
    int pinned;
} job;

#define TRIAD_SLICE (256 * 1024)

static void *run_job(void *varg)
{
    job *j = varg;
    j->pinned = 0;
    if (j->cpu >= 0) {
        cpu_set_t s;
        CPU_ZERO(&s);
        CPU_SET(j->cpu, &s);
        j->pinned = pthread_setaffinity_np(pthread_self(), sizeof s, &s) == 0;
    }
    float *a = NULL, *b = NULL, *c = NULL;
    size_t n = j->floats;
    if (j->test != T_FMA) {
        a = pst_aligned_alloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) a[i] = (float)(i % 1000) * 1e-3f;
    }
    if (j->test == T_TRIAD) {
        b = pst_aligned_alloc(sizeof(float) * n), c = pst_aligned_alloc(sizeof(float) * n);
        for (size_t i = 0; i < n; i++) b[i] = 1.0f, c[i] = 2.0f;
    }
    /* passes per chunk: some 10^6 floats loaded */
    int passes = n ? (int)(1 + (1u << 20) / n) : 1;
    size_t off = 0;
    double work = 0;
    for (int warm = 1; warm >= 0; warm--) {
        pthread_barrier_wait(j->bar);
        double w0 = pst_now(), c0 = pst_thread_cpu(), w = w0;
        work = 0;
        do {
            switch (j->test) {
            case T_FMA:
#ifdef HAVE_AVX512_LOOPS
                if (avx512) {
                    work += fma_avx512();
                    break;
                }
#endif
                work += fma_portable();
                break;
            case T_L1:
            case T_L2:
#ifdef HAVE_AVX512_LOOPS
                if (avx512) {
                    work += load_avx512(a, n, passes);
                    break;
                }
#endif
                work += load_portable(a, n, passes);
                break;
            default: {
                size_t m = n - off < TRIAD_SLICE ? n - off : TRIAD_SLICE;
                work += triad(a + off, b + off, c + off, m);
                off = off + m == n ? 0 : off + m;
            }
            }
            w = pst_now();
        } while (w - w0 < (warm ? 0.05 : j->seconds));
        j->wall = w - w0, j->cpu_s = pst_thread_cpu() - c0;
    }
    j->work = work;
    free(a), free(b), free(c);
    return NULL;
}

typedef struct result {
    double agg, agg_cpu, cpu_pct;
    double per[64], per_cpu[64];
    int pinned;
} result;

/* One measurement: test on nt threads at once, on cpus[0..nt) (cycled). */
static result measure(int test, int nt, const int *cpus, int ncpus, size_t floats, double seconds)
{
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)nt);
    job jobs[64];
    pthread_t th[64];
    for (int i = 0; i < nt; i++) {
        jobs[i] = (job){test, ncpus ? cpus[i % ncpus] : -1, floats, seconds, &bar, 0, 0, 0, 0};
        if (pthread_create(&th[i], NULL, run_job, &jobs[i]) != 0)
            pst_die("cannot start thread %d of %d", i + 1, nt);
    }
    result r = {0};
    r.pinned = 1;
    double cpu = 0, wall = 0;
    for (int i = 0; i < nt; i++) {
        pthread_join(th[i], NULL);
        r.per[i] = 1e-9 * jobs[i].work / jobs[i].wall;
        r.agg += r.per[i];
        r.per_cpu[i] = 1e-9 * jobs[i].work / (jobs[i].cpu_s > 0 ? jobs[i].cpu_s : jobs[i].wall);
        r.agg_cpu += r.per_cpu[i];
        cpu += jobs[i].cpu_s, wall += jobs[i].wall;
        r.pinned = r.pinned && jobs[i].pinned;
    }
    r.cpu_pct = 100.0 * cpu / wall;
    pthread_barrier_destroy(&bar);
    return r;
}

/* ---- data written by one CPU and read by another ---- */

typedef struct share_job {
    int cpu, me;
    float *buf;
    size_t n;
    int rounds;
    _Atomic int *turn;
    double read_s; /* seconds reading what the other thread wrote */
    double ping_s; /* seconds of the ping-pong */
} share_job;

#define PING_ROUNDS 200000

static double read_pass(const float *x, size_t n)
{
    double w0 = pst_now();
#ifdef HAVE_AVX512_LOOPS
    if (avx512)
        load_avx512(x, n, 1);
    else
#endif
        load_portable(x, n, 1);
    return pst_now() - w0;
}

static void write_pass(float *x, size_t n, int r)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)r;
}

static void pin(int cpu)
{
    if (cpu < 0) return;
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

/* Rounds r = 0, 1, ...: thread r % 2 writes the buffer and passes the
 * turn; the other reads it, timed, and writes it in the next round. Then a
 * ping-pong of one cache line (an atomic counter, each thread waiting for
 * its parity). */
static void *share_main(void *varg)
{
    share_job *j = varg;
    pin(j->cpu);
    j->read_s = 0;
    for (int r = 0; r < j->rounds; r++) {
        if (r % 2 == j->me) {
            while (atomic_load_explicit(j->turn, memory_order_acquire) != r) {
            }
            if (r > 0) j->read_s += read_pass(j->buf, j->n);
            write_pass(j->buf, j->n, r);
            atomic_store_explicit(j->turn, r + 1, memory_order_release);
        }
    }
    while (atomic_load_explicit(j->turn, memory_order_acquire) != j->rounds) {
    }
    if (j->me == 1) atomic_store_explicit(j->turn, -1, memory_order_release);
    while (atomic_load_explicit(j->turn, memory_order_acquire) != -1) {
    }
    /* ping-pong: thread me moves the counter from 2k + me to 2k + me + 1 */
    if (j->me == 0) atomic_store_explicit(j->turn, 0, memory_order_release);
    while (atomic_load_explicit(j->turn, memory_order_acquire) < 0) {
    }
    double w0 = pst_now();
    for (int k = 0; k < PING_ROUNDS; k++) {
        int want = 2 * k + j->me;
        while (atomic_load_explicit(j->turn, memory_order_acquire) != want) {
        }
        atomic_store_explicit(j->turn, want + 1, memory_order_release);
    }
    j->ping_s = pst_now() - w0;
    return NULL;
}

/* The same buffer written and read back by one thread: the read's GB/s. */
static double local_read(int cpu, size_t n, int rounds)
{
    float *x = pst_aligned_alloc(sizeof(float) * n);
    double s = 0;
    for (int r = 0; r < rounds; r++) {
        write_pass(x, n, r);
        if (r > 0) s += read_pass(x, n);
    }
    free(x);
    (void)cpu;
    return 1e-9 * 4.0 * (double)n * (rounds - 1) / s;
}

static void *local_main(void *varg)
{
    share_job *j = varg;
    pin(j->cpu);
    j->read_s = local_read(j->cpu, j->n, j->rounds);
    return NULL;
}

static void share_test(const int *cpus, int ncpus, size_t n, int rounds)
{
    if (ncpus < 2) {
        printf("share: needs 2 CPUs in the affinity mask, has %d: skipped\n", ncpus);
        return;
    }
    double best_local = 0, best_remote = 0, best_ping = 1e30;
    for (int q = 0; q < rounds; q++) {
        share_job l = {cpus[0], 0, NULL, n, 2001, NULL, 0, 0};
        pthread_t th;
        if (pthread_create(&th, NULL, local_main, &l) != 0) pst_die("cannot start a thread");
        pthread_join(th, NULL);
        if (l.read_s > best_local) best_local = l.read_s;
        _Atomic int turn = 0;
        float *buf = pst_aligned_alloc(sizeof(float) * n);
        write_pass(buf, n, 0);
        share_job j[2];
        pthread_t t2[2];
        for (int i = 0; i < 2; i++) {
            j[i] = (share_job){cpus[i], i, buf, n, 2001, &turn, 0, 0};
            if (pthread_create(&t2[i], NULL, share_main, &j[i]) != 0)
                pst_die("cannot start a thread");
        }
        for (int i = 0; i < 2; i++) pthread_join(t2[i], NULL);
        free(buf);
        double remote = 1e-9 * 4.0 * (double)n * 2000 / (j[0].read_s + j[1].read_s);
        if (remote > best_remote) best_remote = remote;
        double ping = (j[0].ping_s > j[1].ping_s ? j[0].ping_s : j[1].ping_s) / (2.0 * PING_ROUNDS);
        if (ping < best_ping) best_ping = ping;
    }
    printf("share  GB/s     read of %.0f KiB just written by the same CPU %.1f, by CPU %d for CPU "
           "%d and back %.1f (ratio %.2f); a cache line handed between the two: %.0f ns one "
           "way\n",
           4.0 * (double)n / 1024, best_local, cpus[0], cpus[1], best_remote,
           best_remote / best_local, 1e9 * best_ping);
}

int main(int argc, char **argv)
{
    pst_set_progname("bench_peak");
    int threads = 0, rounds = 3;
    double seconds = 1.0, l1_kb = 16, l2_kb = 0, mb = 1024;
    bool want[NTEST] = {false}, any = false, share = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            if (pst_parse_int(argv[++i], &threads) < 0 || threads < 1 || threads > 64)
                pst_die("bad --threads '%s': expected 1 to 64", argv[i]);
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            if (pst_parse_int(argv[++i], &rounds) < 0 || rounds < 1)
                pst_die("bad --rounds '%s': expected a positive integer", argv[i]);
        } else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
            if (pst_parse_double(argv[++i], &seconds) < 0 || !(seconds > 0) || seconds > 600)
                pst_die("bad --seconds '%s': expected (0, 600]", argv[i]);
        } else if (strcmp(argv[i], "--l1") == 0 && i + 1 < argc) {
            if (pst_parse_double(argv[++i], &l1_kb) < 0 || !(l1_kb >= 1) || l1_kb > 1e6)
                pst_die("bad --l1 '%s': expected KB in [1, 1e6]", argv[i]);
        } else if (strcmp(argv[i], "--l2") == 0 && i + 1 < argc) {
            if (pst_parse_double(argv[++i], &l2_kb) < 0 || !(l2_kb >= 1) || l2_kb > 1e6)
                pst_die("bad --l2 '%s': expected KB in [1, 1e6]", argv[i]);
        } else if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc) {
            if (pst_parse_double(argv[++i], &mb) < 0 || !(mb >= 1) || mb > 65536)
                pst_die("bad --mb '%s': expected MB in [1, 65536]", argv[i]);
        } else if (strcmp(argv[i], "--portable") == 0) {
            portable = true;
        } else if (strcmp(argv[i], "share") == 0) {
            share = any = true;
        } else {
            int t = 0;
            while (t < NTEST && strcmp(argv[i], test_name[t])) t++;
            if (t == NTEST)
                pst_die("unknown argument '%s': expected an option or a test (fma, l1, l2, "
                        "triad, share)",
                        argv[i]);
            want[t] = any = true;
        }
    }
    if (!any) {
        for (int t = 0; t < NTEST; t++) want[t] = true;
        share = true;
    }
#ifdef HAVE_AVX512_LOOPS
    __builtin_cpu_init();
    avx512 = !portable && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
#endif
    long l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE), l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l2_kb == 0) l2_kb = l2 > 0 ? (double)l2 / 2048.0 : 512;

    cpu_set_t mask;
    int cpus[64], ncpus = 0;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0)
        for (int c = 0; c < CPU_SETSIZE && ncpus < 64; c++)
            if (CPU_ISSET(c, &mask)) cpus[ncpus++] = c;
    if (threads == 0) threads = ncpus > 1 ? ncpus : 2;
    if (threads > 64) threads = 64;

    printf("bench_peak: %d CPUs in the affinity mask (", ncpus);
    for (int i = 0; i < ncpus; i++) printf("%s%d", i ? "," : "", cpus[i]);
    printf("); 1 thread vs %d at once%s; loops: %s; caches (sysconf) L1d %ld KiB, L2 %ld KiB, "
           "L3 %ld KiB\n",
           threads, threads > ncpus ? " (more threads than CPUs: some share one)" : "",
           avx512 ? "AVX-512" : "portable (compiler's generic vectors)", l1d / 1024, l2 / 1024,
           l3 / 1024);
    printf("  l1: %.0f KiB per thread, l2: %.0f KiB per thread, triad: %.0f MiB per thread "
           "(3 arrays); %.2f s per run, best of %d rounds\n",
           l1_kb, l2_kb, mb, seconds, rounds);

    size_t floats[NTEST];
    floats[T_FMA] = 0;
    floats[T_L1] = ((size_t)(l1_kb * 256) + 127) / 128 * 128;
    floats[T_L2] = ((size_t)(l2_kb * 256) + 127) / 128 * 128;
    floats[T_TRIAD] = (size_t)(mb * 1024 * 1024 / 12);

    printf("%-6s %-8s %-5s %10s %6s %10s %6s  %-22s %6s\n", "test", "unit", "by", "1 thread",
           "cpu %", "T threads", "cpu %", "per thread", "ratio");
    for (int t = 0; t < NTEST; t++) {
        if (!want[t]) continue;
        result b1 = {0}, bt = {0}, c1 = {0}, ct = {0};
        for (int r = 0; r < rounds; r++) {
            result one = measure(t, 1, cpus, ncpus, floats[t], seconds);
            result all = measure(t, threads, cpus, ncpus, floats[t], seconds);
            if (one.agg > b1.agg) b1 = one;
            if (all.agg > bt.agg) bt = all;
            if (one.agg_cpu > c1.agg_cpu) c1 = one;
            if (all.agg_cpu > ct.agg_cpu) ct = all;
        }
        for (int by = 0; by < 2; by++) {
            const result *a = by ? &c1 : &b1, *z = by ? &ct : &bt;
            char per[256];
            int len = 0;
            for (int i = 0; i < threads && len < (int)sizeof per - 16; i++)
                len += snprintf(per + len, sizeof per - (size_t)len, "%s%.1f", i ? " " : "",
                                by ? z->per_cpu[i] : z->per[i]);
            double x = by ? a->agg_cpu : a->agg, y = by ? z->agg_cpu : z->agg;
            printf("%-6s %-8s %-5s %10.1f %6.0f %10.1f %6.0f  %-22s %6.2f%s\n", test_name[t],
                   test_unit[t], by ? "cpu" : "wall", x, a->cpu_pct, y, z->cpu_pct, per, y / x,
                   a->pinned && z->pinned ? "" : "  (not pinned)");
        }
    }
    if (share) share_test(cpus, ncpus, floats[T_L2], rounds);
    return 0;
}
