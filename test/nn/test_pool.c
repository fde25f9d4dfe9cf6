/* test_pool.c - the model's thread pool (src/nn/pool.c) for T = 1..8: every
 * task runs exactly once with a tid in [0, T), for task counts around T and
 * many more; many small loops back to back (the dispatch of a training
 * step); a call from inside a task (nesting) runs its tasks inline on that
 * thread with its tid; a NULL pool runs in order on the caller; what the
 * tasks wrote is visible after the loop; bad thread counts are refused; the
 * statistics (nn_pool_stats) count every loop and task once, per thread.
 * Also built under ThreadSanitizer by jobs/test.sh. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pool.h"

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
    nn_pool_stats_set(p, false);
    check_loop(p, T, 100);
    s = nn_pool_stats_read(p);
    CHECK(s.loops == 0 && s.tasks == 0 && s.ntask[0] == 0 && s.wall == 0,
          "T=%d stats: counted while off", T);
}

int main(void)
{
    check_null_pool();
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
