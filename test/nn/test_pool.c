/* test_pool.c - the model's thread pool (src/nn/pool.c) for T = 1..8: every
 * task runs exactly once with a tid in [0, T), for task counts around T and
 * many more; many small loops back to back (the dispatch of a training
 * step); a call from inside a task (nesting) runs its tasks inline on that
 * thread with its tid; a NULL pool runs in order on the caller; what the
 * tasks wrote is visible after the loop; bad thread counts are refused; the
 * statistics (nn_pool_stats) count every loop and task once, per thread;
 * nn_pool_range covers every item exactly once with non-empty ranges for
 * sizes around its thresholds (one call below some 16k floats, guided
 * chunks above), nested (one call) and in many small loops, and its
 * chunks count as the statistics' tasks; loops after pauses longer than
 * the pool's spin, with tasks that outlast it, end (no lost wake-up);
 * placement: pinned inside the caller's mask when it has exactly T CPUs,
 * the caller only between nn_pool_enter and nn_pool_leave, and a thread
 * the caller starts afterwards keeps the caller's mask.
 * Also built under ThreadSanitizer by jobs/test.sh. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "pstrain/pool.h"

typedef struct count_arg {
    int *hits;    /* [ntasks]: runs of each task */
    int *tid_of;  /* [ntasks]: the tid that ran it */
    int *order;   /* NULL pool: the order tasks ran in */
    atomic_int n; /* tasks run */
} count_arg;

static void count_task(void *varg, int task, int tid)
{
    count_arg *a = varg;
    a->hits[task]++; /* one task index per call: no two threads share an element */
    a->tid_of[task] = tid;
    int k = atomic_fetch_add(&a->n, 1);
    if (a->order) a->order[k] = task;
}

static void check_loop(nn_pool *p, int T, int ntasks)
{
    count_arg a = {pst_calloc((size_t)ntasks + 1, sizeof(int)),
                   pst_calloc((size_t)ntasks + 1, sizeof(int)), NULL, 0};
    nn_pool_for(p, ntasks, count_task, &a);
    int bad = 0, badtid = 0;
    for (int t = 0; t < ntasks; t++) {
        bad += a.hits[t] != 1;
        badtid += a.tid_of[t] < 0 || a.tid_of[t] >= T;
    }
    CHECK(bad == 0, "T=%d ntasks=%d: %d tasks did not run exactly once", T, ntasks, bad);
    CHECK(badtid == 0, "T=%d ntasks=%d: %d tasks ran with a tid outside [0, T)", T, ntasks, badtid);
    CHECK(atomic_load(&a.n) == (ntasks > 0 ? ntasks : 0), "T=%d ntasks=%d: %d runs", T, ntasks,
          atomic_load(&a.n));
    free(a.hits);
    free(a.tid_of);
}

/* Many tiny loops: each task adds its index into its own slot; the caller
 * checks the sums after every loop (a loop that returned early would show). */
typedef struct small_arg {
    long *slot;
    int round;
} small_arg;

static void small_task(void *varg, int task, int tid)
{
    small_arg *a = varg;
    a->slot[task] += a->round + task;
}

static void check_many_small(nn_pool *p, int T)
{
    enum { ROUNDS = 2000, MAXT = 17 };
    long slot[MAXT] = {0}, want[MAXT] = {0};
    int bad = 0;
    for (int r = 0; r < ROUNDS; r++) {
        int ntasks = 1 + r % MAXT;
        small_arg a = {slot, r};
        nn_pool_for(p, ntasks, small_task, &a);
        for (int t = 0; t < ntasks; t++) want[t] += r + t;
        for (int t = 0; t < MAXT; t++) bad += slot[t] != want[t];
    }
    CHECK(bad == 0, "T=%d: %d wrong sums over %d small loops", T, bad, ROUNDS);
}

/* Nesting: every outer task runs an inner loop on the same pool. */
typedef struct nest_arg {
    nn_pool *p;
    int inner;
    int (*hits)[8]; /* [outer][inner] */
    int *bad_tid;   /* [outer]: inner tasks that saw another tid */
} nest_arg;

typedef struct inner_arg {
    nest_arg *outer;
    int task, tid;
} inner_arg;

static void inner_task(void *varg, int task, int tid)
{
    inner_arg *a = varg;
    a->outer->hits[a->task][task]++;
    if (tid != a->tid) a->outer->bad_tid[a->task]++;
}

static void outer_task(void *varg, int task, int tid)
{
    nest_arg *a = varg;
    inner_arg in = {a, task, tid};
    nn_pool_for(a->p, a->inner, inner_task, &in);
}

static void check_nested(nn_pool *p, int T)
{
    enum { OUTER = 24, INNER = 8 };
    int hits[OUTER][8], bad_tid[OUTER];
    memset(hits, 0, sizeof hits);
    memset(bad_tid, 0, sizeof bad_tid);
    nest_arg a = {p, INNER, hits, bad_tid};
    nn_pool_for(p, OUTER, outer_task, &a);
    int bad = 0, badt = 0;
    for (int o = 0; o < OUTER; o++) {
        badt += bad_tid[o];
        for (int i = 0; i < INNER; i++) bad += hits[o][i] != 1;
    }
    CHECK(bad == 0, "T=%d nested: %d inner tasks did not run exactly once", T, bad);
    CHECK(badt == 0, "T=%d nested: %d inner tasks ran on another thread's tid", T, badt);
}

static void check_null_pool(void)
{
    enum { N = 50 };
    int order[N];
    count_arg a = {pst_calloc(N, sizeof(int)), pst_calloc(N, sizeof(int)), order, 0};
    nn_pool_for(NULL, N, count_task, &a);
    int bad = 0;
    for (int t = 0; t < N; t++) bad += order[t] != t || a.hits[t] != 1 || a.tid_of[t] != 0;
    CHECK(bad == 0, "NULL pool: %d tasks out of order, repeated or not on tid 0", bad);
    CHECK(nn_pool_threads(NULL) == 1, "NULL pool threads %d", nn_pool_threads(NULL));
    free(a.hits);
    free(a.tid_of);
}

/* With statistics on: loops on the threads, their tasks (per thread adding
 * up to the total) and the loops run on the caller alone are counted; off
 * resets them. */
static void check_stats(nn_pool *p, int T)
{
    nn_pool_stats_set(p, true);
    const int counts[] = {0, 1, T + 1, 1000, 1, 37};
    long loops = 0, tasks = 0, serial = 0;
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        check_loop(p, T, counts[i]);
        if (counts[i] <= 0) continue;
        if (T > 1 && counts[i] > 1)
            loops++, tasks += counts[i];
        else
            serial++;
    }
    /* 24 outer tasks of 8 inner ones: nested loops are not counted on
     * threads; one thread runs every loop on the caller */
    check_nested(p, T);
    if (T > 1)
        loops++, tasks += 24;
    else
        serial += 1 + 24;
    nn_pool_stats s = nn_pool_stats_read(p);
    CHECK(s.loops == loops && s.tasks == tasks && s.serial_loops == serial,
          "T=%d stats: %ld loops %ld tasks %ld serial, expected %ld %ld %ld", T, s.loops, s.tasks,
          s.serial_loops, loops, tasks, serial);
    long sum = 0;
    int bad = 0;
    for (int t = 0; t < NN_POOL_MAX_THREADS; t++) {
        sum += s.ntask[t];
        bad += s.cpu[t] < 0 || s.busy[t] < 0 || (t >= T && (s.ntask[t] || s.cpu[t] || s.busy[t]));
    }
    CHECK(sum == (T > 1 ? tasks : 0), "T=%d stats: threads ran %ld tasks, expected %ld", T, sum,
          T > 1 ? tasks : 0);
    CHECK(bad == 0 && s.wall >= s.wait && s.wait >= 0 && s.start >= 0,
          "T=%d stats: negative or misplaced times", T);
    /* the totals are the same counters summed */
    nn_pool_totals tt = nn_pool_totals_read(p);
    double cpu = 0, busy = 0;
    for (int t = 0; t < T; t++) cpu += s.cpu[t], busy += s.busy[t];
    CHECK(tt.loops == s.loops && tt.tasks == s.tasks && tt.wall == s.wall && tt.wait == s.wait &&
              tt.cpu == cpu && tt.busy == busy,
          "T=%d totals: %ld loops %ld tasks, cpu %g busy %g; stats %ld %ld, %g %g", T, tt.loops,
          tt.tasks, tt.cpu, tt.busy, s.loops, s.tasks, cpu, busy);
    /* by kind: every loop on the threads once, under its function and task
     * count (1000 tasks of count_task: one loop), idle time not negative */
    nn_pool_kind kinds[NN_POOL_KINDS + 1];
    int nk = nn_pool_kinds_read(p, kinds, NN_POOL_KINDS + 1);
    long kloops = 0, k1000 = 0;
    int kbad = 0;
    for (int i = 0; i < nk; i++) {
        kloops += kinds[i].loops;
        if (kinds[i].fn == count_task && kinds[i].ntasks == 1000) k1000 += kinds[i].loops;
        kbad += kinds[i].idle < -1e-6 || kinds[i].wall < 0 || kinds[i].rfn != NULL;
    }
    CHECK(kloops == s.loops && kbad == 0 && k1000 == (T > 1),
          "T=%d kinds: %d kinds of %ld loops (expected %ld), %ld of 1000 count tasks, %d bad", T,
          nk, kloops, s.loops, k1000, kbad);
    nn_pool_stats_set(p, false);
    check_loop(p, T, 100);
    s = nn_pool_stats_read(p);
    CHECK(s.loops == 0 && s.tasks == 0 && s.ntask[0] == 0 && s.wall == 0,
          "T=%d stats: counted while off", T);
}

/* Loops after pauses longer than the pool's spin (workers asleep on the
 * condition variable) whose tasks outlast it (the caller asleep at the
 * end): the wake-ups each side announces without the mutex held by the
 * other (pool.c) must not be lost: a lost one hangs here. */
static void nap_task(void *varg, int task, int tid)
{
    atomic_int *n = varg;
    if (task % 2) {
        struct timespec d = {0, 1500000};
        nanosleep(&d, NULL);
    }
    atomic_fetch_add(n, 1);
}

static void check_sleepers(nn_pool *p, int T)
{
    int bad = 0;
    for (int r = 0; r < 12; r++) {
        struct timespec d = {0, 1500000};
        nanosleep(&d, NULL);
        atomic_int n = 0;
        int ntasks = 2 + r % (2 * T);
        nn_pool_for(p, ntasks, nap_task, &n);
        bad += atomic_load(&n) != ntasks;
    }
    CHECK(bad == 0, "T=%d: %d loops after a pause ran the wrong number of tasks", T, bad);
}

/* ---- nn_pool_range: every item once, in ranges [lo, hi) with lo < hi ---- */

typedef struct range_cover {
    int *hits;      /* [n]: calls that covered each item */
    atomic_int bad; /* empty or out-of-bounds ranges */
    atomic_int calls;
    int n;
} range_cover;

static void cover_range(void *varg, int lo, int hi)
{
    range_cover *a = varg;
    atomic_fetch_add(&a->calls, 1);
    if (lo < 0 || hi > a->n || lo >= hi) {
        atomic_fetch_add(&a->bad, 1);
        return;
    }
    for (int i = lo; i < hi; i++) a->hits[i]++; /* ranges are disjoint */
}

/* Returns the calls made (for the statistics check). */
static int check_range(nn_pool *p, int T, int n, size_t work)
{
    range_cover a = {pst_calloc((size_t)n + 1, sizeof(int)), 0, 0, n};
    nn_pool_range(p, n, work, cover_range, &a);
    int miss = 0;
    for (int i = 0; i < n; i++) miss += a.hits[i] != 1;
    CHECK(miss == 0 && atomic_load(&a.bad) == 0,
          "T=%d range n=%d work %zu: %d items not covered exactly once, %d bad ranges", T, n, work,
          miss, atomic_load(&a.bad));
    /* small or single-threaded: one call over [0, n) */
    if (n > 0 && (T == 1 || (size_t)n * work < 16384))
        CHECK(atomic_load(&a.calls) == 1, "T=%d range n=%d work %zu: %d calls, expected 1", T, n,
              work, atomic_load(&a.calls));
    free(a.hits);
    return atomic_load(&a.calls);
}

typedef struct range_nest {
    nn_pool *p;
    int bad;
} range_nest;

static void range_outer(void *varg, int task, int tid)
{
    range_nest *a = varg;
    range_cover in = {pst_calloc(100000, sizeof(int)), 0, 0, 100000};
    nn_pool_range(a->p, 100000, 4, cover_range, &in);
    int miss = 0;
    for (int i = 0; i < 100000; i++) miss += in.hits[i] != 1;
    /* nested: one call on this thread; each outer task writes its own slot */
    if (miss || atomic_load(&in.calls) != 1) a[task + 1].bad = 1;
    free(in.hits);
}

static void check_ranges(nn_pool *p, int T)
{
    const int ns[] = {0, 1, 7, 4095, 4096, 4097, 16383, 16384, 100003, 1 << 20};
    const size_t works[] = {1, 3, 48, 5000};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t k = 0; k < sizeof works / sizeof works[0]; k++)
            if ((size_t)ns[i] * works[k] <= ((size_t)1 << 24)) check_range(p, T, ns[i], works[k]);
    /* many small loops back to back, sizes just above the threshold */
    for (int r = 0; r < 500; r++) check_range(p, T, 16384 + 97 * (r % 13), 1 + r % 3);
    enum { OUTER = 6 };
    range_nest nest[OUTER + 1];
    memset(nest, 0, sizeof nest);
    nest[0].p = p;
    nn_pool_for(p, OUTER, range_outer, nest);
    int bad = 0;
    for (int o = 1; o <= OUTER; o++) bad += nest[o].bad;
    CHECK(bad == 0, "T=%d: %d nested ranges not one call covering every item", T, bad);
    /* statistics: one loop per range on the threads, its chunks as tasks */
    nn_pool_stats_set(p, true);
    int calls = check_range(p, T, 1 << 20, 1);
    nn_pool_stats s = nn_pool_stats_read(p);
    long sum = 0;
    for (int t = 0; t < NN_POOL_MAX_THREADS; t++) sum += s.ntask[t];
    if (T > 1)
        CHECK(s.loops == 1 && s.tasks == calls && sum == calls,
              "T=%d range stats: %ld loops %ld tasks (threads %ld), expected 1 and %d", T, s.loops,
              s.tasks, sum, calls);
    else
        CHECK(s.loops == 0 && s.tasks == 0, "T=1 range stats: %ld loops", s.loops);
    nn_pool_kind k[2];
    int nk = nn_pool_kinds_read(p, k, 2);
    CHECK(T > 1 ? nk == 1 && k[0].rfn == cover_range && !k[0].fn && k[0].ntasks == -1 &&
                      k[0].loops == 1
                : nk == 0,
          "T=%d range stats: %d kinds, expected the range loop's", T, nk);
    nn_pool_stats_set(p, false);
}

/* ---- placement (pool.h): a pool of T threads pins when the caller's mask
 * has exactly T CPUs; workers on their CPU inside that mask, the caller
 * only between nn_pool_enter and nn_pool_leave; a thread the caller starts
 * afterwards keeps the caller's mask. ---- */

static bool same_mask(const cpu_set_t *a, const cpu_set_t *b)
{
    return CPU_EQUAL(a, b);
}

static int first_cpus(const cpu_set_t *from, int n, cpu_set_t *to)
{
    CPU_ZERO(to);
    int k = 0;
    for (int c = 0; c < CPU_SETSIZE && k < n; c++)
        if (CPU_ISSET(c, from)) CPU_SET(c, to), k++;
    return k;
}

/* Task t of a T-task loop records its thread's mask and tid, then waits for
 * all T tasks to have started: no thread can run two of them, so each of
 * the T threads runs one (thread t its own part, task t). */
typedef struct where_arg {
    int T;
    atomic_int arrived;
    cpu_set_t mask[NN_POOL_MAX_THREADS];
    int tid[NN_POOL_MAX_THREADS];
} where_arg;

static void where_task(void *varg, int task, int tid)
{
    where_arg *a = varg;
    if (sched_getaffinity(0, sizeof a->mask[task], &a->mask[task]) != 0) CPU_ZERO(&a->mask[task]);
    a->tid[task] = tid;
    atomic_fetch_add(&a->arrived, 1);
    while (atomic_load(&a->arrived) < a->T) sched_yield();
}

static void *mask_thread(void *varg)
{
    cpu_set_t *m = varg;
    if (sched_getaffinity(0, sizeof *m, m) != 0) CPU_ZERO(m);
    return NULL;
}

/* The mask of a thread the caller starts now. */
static void child_mask(cpu_set_t *m)
{
    pthread_t th;
    CPU_ZERO(m);
    if (pthread_create(&th, NULL, mask_thread, m) == 0) pthread_join(th, NULL);
}

/* Runs a where_task loop; checks every thread's mask: workers always one
 * CPU (their own), the caller one CPU (cpu[0]) when `entered`, else its
 * own mask `own`. */
static void check_where(nn_pool *p, int T, bool entered, const cpu_set_t *own, const char *what)
{
    where_arg *a = pst_calloc(1, sizeof *a);
    a->T = T;
    atomic_init(&a->arrived, 0);
    nn_pool_for(p, T, where_task, a);
    for (int t = 0; t < T; t++) {
        int tid = a->tid[t], c = nn_pool_cpu(p, tid);
        cpu_set_t want = *own;
        if (tid != 0 || entered) {
            CPU_ZERO(&want);
            CPU_SET(c, &want);
        }
        CHECK(c >= 0 && CPU_ISSET(c, own), "%s: tid %d on CPU %d, outside the caller's mask", what,
              tid, c);
        CHECK(same_mask(&a->mask[t], &want),
              "%s: tid %d runs with %d CPUs in its mask, expected %d", what, tid,
              CPU_COUNT(&a->mask[t]), CPU_COUNT(&want));
    }
    free(a);
}

static void check_placement(void)
{
    cpu_set_t orig, mine, got;
    if (sched_getaffinity(0, sizeof orig, &orig) != 0 || CPU_COUNT(&orig) < 2) {
        fprintf(stderr, "placement: fewer than 2 CPUs in the mask: pinning not checked\n");
        return;
    }
    const int T = 2;
    pst_err e = {0};
    nn_pool *p = NULL;
    /* exactly T CPUs: the first two of the test's own mask */
    first_cpus(&orig, T, &mine);
    CHECK(sched_setaffinity(0, sizeof mine, &mine) == 0, "placement: setting a 2-CPU mask");
    unsetenv("PSTRAIN_PIN");
    CHECK(nn_pool_new(&p, T, &e) == 0, "placement: %s", e.msg);
    CHECK(nn_pool_cpu(p, 0) >= 0 && nn_pool_cpu(p, 1) >= 0 &&
              nn_pool_cpu(p, 0) != nn_pool_cpu(p, 1),
          "placement: a 2-CPU mask and 2 threads: not pinned to two CPUs (%d, %d)",
          nn_pool_cpu(p, 0), nn_pool_cpu(p, 1));
    CHECK(sched_getaffinity(0, sizeof got, &got) == 0 && same_mask(&got, &mine),
          "placement: nn_pool_new changed the caller's mask");
    check_where(p, T, false, &mine, "loop outside enter");
    nn_pool_enter(p);
    nn_pool_enter(p); /* nested: the outer pair counts */
    check_where(p, T, true, &mine, "loop inside enter");
    nn_pool_leave(p);
    check_where(p, T, true, &mine, "loop inside the outer enter");
    nn_pool_leave(p);
    CHECK(sched_getaffinity(0, sizeof got, &got) == 0 && same_mask(&got, &mine),
          "placement: the caller's mask not restored by nn_pool_leave (%d CPUs, expected %d)",
          CPU_COUNT(&got), CPU_COUNT(&mine));
    child_mask(&got);
    CHECK(same_mask(&got, &mine),
          "placement: a thread started after a pinned loop has %d CPUs in its mask, expected the "
          "caller's %d",
          CPU_COUNT(&got), CPU_COUNT(&mine));
    check_loop(p, T, 1000); /* still a working pool */
    /* an enter whose loops all run on the caller pins nothing */
    nn_pool_enter(p);
    check_loop(p, T, 1);
    CHECK(sched_getaffinity(0, sizeof got, &got) == 0 && same_mask(&got, &mine),
          "placement: a one-task loop pinned the caller");
    nn_pool_leave(p);
    nn_pool_free(p);

    /* PSTRAIN_PIN=0: never */
    setenv("PSTRAIN_PIN", "0", 1);
    CHECK(nn_pool_new(&p, T, &e) == 0, "placement: %s", e.msg);
    CHECK(nn_pool_cpu(p, 0) < 0, "placement: PSTRAIN_PIN=0 pinned");
    nn_pool_enter(p);
    check_loop(p, T, 100);
    CHECK(sched_getaffinity(0, sizeof got, &got) == 0 && same_mask(&got, &mine),
          "placement: PSTRAIN_PIN=0 pinned the caller");
    nn_pool_leave(p);
    nn_pool_free(p);

    /* a mask of more CPUs than threads (shared with others): unpinned, but
     * PSTRAIN_PIN=1 pins inside it; one of fewer: never */
    unsetenv("PSTRAIN_PIN");
    CHECK(sched_setaffinity(0, sizeof orig, &orig) == 0, "placement: restoring the mask");
    if (CPU_COUNT(&orig) > T) {
        CHECK(nn_pool_new(&p, T, &e) == 0, "placement: %s", e.msg);
        CHECK(nn_pool_cpu(p, 0) < 0, "placement: %d CPUs for %d threads: pinned", CPU_COUNT(&orig),
              T);
        nn_pool_free(p);
        setenv("PSTRAIN_PIN", "1", 1);
        CHECK(nn_pool_new(&p, T, &e) == 0, "placement: %s", e.msg);
        CHECK(nn_pool_cpu(p, 0) >= 0, "placement: PSTRAIN_PIN=1 did not pin");
        nn_pool_enter(p);
        check_where(p, T, true, &orig, "PSTRAIN_PIN=1");
        nn_pool_leave(p);
        nn_pool_free(p);
        unsetenv("PSTRAIN_PIN");
    }
    setenv("PSTRAIN_PIN", "1", 1);
    first_cpus(&orig, 1, &mine);
    CHECK(sched_setaffinity(0, sizeof mine, &mine) == 0, "placement: setting a 1-CPU mask");
    CHECK(nn_pool_new(&p, T, &e) == 0, "placement: %s", e.msg);
    CHECK(nn_pool_cpu(p, 0) < 0, "placement: 2 threads pinned into a 1-CPU mask");
    check_loop(p, T, 100);
    nn_pool_free(p);
    unsetenv("PSTRAIN_PIN");
    CHECK(sched_setaffinity(0, sizeof orig, &orig) == 0, "placement: restoring the mask");
}

int main(void)
{
    unsetenv("PSTRAIN_PIN");
    check_null_pool();
    check_range(NULL, 1, 1 << 20, 1);
    check_placement();
    for (int T = 1; T <= 8; T++) {
        pst_err e = {0};
        nn_pool *p = NULL;
        CHECK(nn_pool_new(&p, T, &e) == 0, "T=%d: %s", T, e.msg);
        if (!p) continue;
        CHECK(nn_pool_threads(p) == T, "threads %d, expected %d", nn_pool_threads(p), T);
        const int counts[] = {0, 1, 2, T - 1, T, T + 1, 2 * T + 3, 1000};
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) check_loop(p, T, counts[i]);
        check_many_small(p, T);
        check_nested(p, T);
        check_loop(p, T, 777); /* still usable after nesting */
        check_stats(p, T);
        check_ranges(p, T);
        check_sleepers(p, T);
        nn_pool_free(p);
    }
    /* a pool that is never used shuts down too */
    nn_pool *idle = NULL;
    pst_err e = {0};
    CHECK(nn_pool_new(&idle, 4, &e) == 0, "idle pool: %s", e.msg);
    nn_pool_free(idle);
    nn_pool_free(NULL);

    const int bad_counts[] = {0, -1, NN_POOL_MAX_THREADS + 1};
    for (size_t i = 0; i < 3; i++) {
        pst_err be = {0};
        nn_pool *p = (nn_pool *)&be; /* must be reset to NULL */
        CHECK(nn_pool_new(&p, bad_counts[i], &be) < 0 && p == NULL, "%d threads accepted",
              bad_counts[i]);
        CHECK(strstr(be.msg, "expected 1 to") != NULL, "message: %s", be.msg);
    }
    return check_exit();
}
