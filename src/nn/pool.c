/*
 * pool.c - persistent threads for the model's parallel loops. Contract:
 * pool.h.
 *
 * One loop ("generation") at a time. The caller publishes fn, arg and
 * ntasks, cuts the tasks into T contiguous parts (one counter each: thread
 * i runs part i in order, then helps with the parts after it), resets the
 * count of workers still busy, then
 * bumps `gen` (release). A worker that sees a new gen (acquire) takes tasks
 * from the counters until none is left, then decrements `busy`; the last one
 * wakes the caller if it sleeps. Waiting on either side spins for a while
 * (loops follow each other within microseconds during a step) and then
 * sleeps on a condition variable under `mu`. No mutex is taken while
 * nobody sleeps: a sleeper announces itself (`sleepers`, `caller_waits`)
 * under `mu` and then checks the condition it waits for, the other side
 * changes that condition and then checks the announcement, both sequentially
 * consistent, so that at least one of the two sees the other (a Dekker
 * pair) and the waker takes `mu` only to wake a sleeper (see publish). A
 * generation whose fn and rfn are NULL tells the workers to exit.
 *
 * Range loops (nn_pool_range): the parts are of items, and a thread takes
 * a chunk of 1/T of what is left of a part (at least `grain` items) with a
 * compare-and-swap, guided self-scheduling: the chunks shrink towards a
 * part's end, so the thread that finishes first takes the other's last
 * items in small pieces and the loop ends within about a grain of work on
 * every thread, where fixed ranges left up to one range (1/16 of the loop)
 * to one thread.
 *
 * The statistics and the one-thread profiling (pool.h) are in
 * pool_stats.c; a loop calls its hooks (pool_impl.h) only while they are on.
 */
#include "pool_impl.h"

#include <assert.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long a waiting thread spins before it sleeps: 500 microseconds of wall
 * time, the clock read every POOL_SPIN_CHECK pauses (a pause is 10-140
 * cycles); after the first POOL_SPIN_YIELD_NS it yields the core at each
 * read (sched_yield), so that threads waiting for it (a pool with more
 * threads than cores, ranks that share a core) run. Long enough that the
 * loops of a step (serial gaps of a few to some tens of microseconds, a
 * worker done some hundreds of microseconds before the last task of a loop
 * ends) never sleep: a sleep costs a futex wake-up, some 20 microseconds per
 * loop on the (virtual) machine of docs/platform.md, "Two cores". Bounded, so
 * that a rank's pool sleeps between steps (optimizer, MPI). */
#define POOL_SPIN_NS 500000
#define POOL_SPIN_YIELD_NS 50000
#define POOL_SPIN_CHECK 64

typedef struct worker_arg {
    nn_pool *p;
    int tid;
} worker_arg;

/* A spin of POOL_SPIN_NS: call spin_more(&k, &t0) with k = 0 each time
 * round the loop; it pauses (or yields) and says whether to go on. */
static bool spin_more(int *k, double *t0)
{
    cpu_relax();
    if (++*k % POOL_SPIN_CHECK) return true;
    double now = pst_now();
    if (*k == POOL_SPIN_CHECK) *t0 = now;
    if (now - *t0 >= 1e-9 * POOL_SPIN_NS) return false;
    if (now - *t0 >= 1e-9 * POOL_SPIN_YIELD_NS) sched_yield();
    return true;
}

/* Which pool and tid the current thread runs tasks for (nesting). */
static _Thread_local const nn_pool *tls_pool;
static _Thread_local int tls_tid;

/* A range loop: chunks of what is left of part q, 1/T of it and at least
 * the grain, each claimed by a compare-and-swap (exactly, so that the
 * counter never passes hi); returns the chunks run. */
static long take_ranges(nn_pool *p, part *q)
{
    void (*rfn)(void *, int, int) = p->rfn;
    void *arg = p->arg;
    const int hi = q->hi, T = p->T, grain = p->grain;
    long ran = 0;
    int lo = atomic_load_explicit(&q->next, memory_order_relaxed);
    while (lo < hi) {
        int c = (hi - lo) / T;
        if (c < grain) c = grain;
        if (c > hi - lo) c = hi - lo;
        if (!atomic_compare_exchange_weak_explicit(&q->next, &lo, lo + c, memory_order_relaxed,
                                                   memory_order_relaxed))
            continue; /* lo now holds the counter's value */
        rfn(arg, lo, lo + c);
        ran++;
        lo = atomic_load_explicit(&q->next, memory_order_relaxed);
    }
    return ran;
}

/* Runs the tasks of its own part in order, then takes what is left of the
 * others' parts (tid + 1, tid + 2, ... cyclically); returns how many tasks
 * (range loop: chunks) it ran. Each task index is handed out once by its
 * part's counter. An exhausted part is passed over after a plain load, not
 * taken exclusive by an increment (its owner writes that line next). */
static long take_tasks(nn_pool *p, int tid)
{
    void (*fn)(void *, int, int) = p->fn;
    void *arg = p->arg;
    long ran = 0;
    for (int k = 0; k < p->T; k++) {
        part *q = &p->parts[(tid + k) % p->T];
        if (atomic_load_explicit(&q->next, memory_order_relaxed) >= q->hi) continue;
        if (!fn) {
            ran += take_ranges(p, q);
            continue;
        }
        for (;;) {
            int t = atomic_fetch_add_explicit(&q->next, 1, memory_order_relaxed);
            if (t >= q->hi) break;
            fn(arg, t, tid);
            ran++;
        }
    }
    return ran;
}

static void run_tasks(nn_pool *p, int tid)
{
    if (!p->stats) {
        take_tasks(p, tid);
        return;
    }
    stats_clock c0 = stats_tasks_begin();
    long ran = take_tasks(p, tid);
    stats_tasks_end(p, tid, c0, ran);
}

static void *worker_main(void *varg)
{
    worker_arg wa = *(worker_arg *)varg;
    free(varg);
    nn_pool *p = wa.p;
    tls_pool = p;
    tls_tid = wa.tid;
    /* generation 0 is the pool's creation: a loop published before this
     * thread got here is still ahead of it */
    unsigned seen = 0;
    for (;;) {
        unsigned g = seen;
        int k = 0;
        double t0 = 0;
        do {
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
            if (g != seen) break;
        } while (spin_more(&k, &t0));
        bool slept = g == seen;
        if (slept) {
            /* announced before gen is checked again (seq_cst both, against
             * publish's gen then sleepers): publish sees the sleeper or
             * this thread sees the new gen */
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen) pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        seen = g;
        if (p->fn == NULL && p->rfn == NULL) break; /* the stop generation */
        if (p->stats && slept) p->slot[wa.tid].slept++;
        run_tasks(p, wa.tid);
        /* seq_cst, then caller_waits (wait_workers' pair) */
        if (atomic_fetch_sub(&p->busy, 1) == 1 && atomic_load(&p->caller_waits)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

/* Publishes a generation (fn and rfn NULL: stop) and wakes sleeping
 * workers. No mutex unless one sleeps: a mutex taken here and in the last
 * worker's signal would move its cache line between the cores twice per
 * loop, the largest cost of a short loop (bench/bench_pool.c). */
static void publish(nn_pool *p, int ntasks, void (*fn)(void *, int, int),
                    void (*rfn)(void *, int, int), int grain, void *arg)
{
    p->fn = fn;
    p->rfn = rfn;
    p->arg = arg;
    p->ntasks = ntasks;
    p->grain = grain;
    for (int i = 0; i < p->T; i++) {
        int lo, hi;
        nn_pool_block(ntasks, p->T, i, &lo, &hi);
        atomic_store_explicit(&p->parts[i].next, lo, memory_order_relaxed);
        p->parts[i].hi = hi;
    }
    atomic_store_explicit(&p->busy, p->started, memory_order_relaxed);
    /* seq_cst, then sleepers (worker_main's pair) */
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }
}

static void wait_workers(nn_pool *p)
{
    int k = 0;
    double t0 = 0;
    do
        if (atomic_load_explicit(&p->busy, memory_order_acquire) == 0) return;
    while (spin_more(&k, &t0));
    if (p->stats) p->tot.caller_slept++;
    /* announced before busy is checked again (seq_cst both, against the
     * last worker's busy then caller_waits) */
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_waits, true);
    while (atomic_load(&p->busy) != 0) pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->caller_waits, false);
    pthread_mutex_unlock(&p->mu);
}

/* Whether to pin a pool of T threads given the rank's mask m (pool.h):
 * PSTRAIN_PIN=0 never, =1 whenever m has at least T CPUs, unset (or
 * anything else) when m has exactly T. */
static bool want_pin(const cpu_set_t *m, int T)
{
    int n = CPU_COUNT(m);
    const char *e = getenv("PSTRAIN_PIN");
    if (e && strcmp(e, "0") == 0) return false;
    if (e && strcmp(e, "1") == 0) return n >= T;
    return n == T;
}

/* The CPUs of m in increasing order, the first n of them into cpu. */
static void mask_cpus(const cpu_set_t *m, int *cpu, int n)
{
    for (int c = 0, k = 0; c < CPU_SETSIZE && k < n; c++)
        if (CPU_ISSET(c, m)) cpu[k++] = c;
}

static void one_cpu(cpu_set_t *s, int c)
{
    CPU_ZERO(s);
    CPU_SET(c, s);
}

/* Starts worker tid, on its CPU when pinned. Returns pthread_create's code;
 * a pinned start refused (the mask changed meanwhile) starts it unpinned. */
static int start_worker(nn_pool *p, int tid)
{
    worker_arg *wa = pst_calloc(1, sizeof *wa);
    wa->p = p, wa->tid = tid;
    int rc = EINVAL;
    if (p->pinned) {
        pthread_attr_t attr;
        cpu_set_t one;
        one_cpu(&one, p->cpu[tid]);
        if (pthread_attr_init(&attr) == 0) {
            if (pthread_attr_setaffinity_np(&attr, sizeof one, &one) == 0)
                rc = pthread_create(&p->threads[tid - 1], &attr, worker_main, wa);
            pthread_attr_destroy(&attr);
        }
    }
    if (rc != 0) rc = pthread_create(&p->threads[tid - 1], NULL, worker_main, wa);
    if (rc != 0) free(wa);
    return rc;
}

int nn_pool_new(nn_pool **out, int threads, pst_err *e)
{
    *out = NULL;
    if (threads < 1 || threads > NN_POOL_MAX_THREADS)
        return pst_fail(e, "thread pool: %d threads: expected 1 to %d", threads,
                        NN_POOL_MAX_THREADS);
    nn_pool *p = pst_calloc(1, sizeof *p);
    p->T = threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->parts = pst_aligned_alloc(sizeof(part) * (size_t)threads);
    for (int i = 0; i < threads; i++) atomic_init(&p->parts[i].next, 0), p->parts[i].hi = 0;
    atomic_init(&p->busy, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waits, false);
    atomic_init(&p->running, false);
    p->slot = pst_aligned_alloc(sizeof(stat_slot) * (size_t)threads);
    memset(p->slot, 0, sizeof(stat_slot) * (size_t)threads);
    p->kinds = pst_calloc(NN_POOL_KINDS + 1, sizeof(nn_pool_kind));
    if (threads > 1) {
        p->threads = pst_calloc((size_t)threads - 1, sizeof(pthread_t));
        cpu_set_t mask;
        if (sched_getaffinity(0, sizeof mask, &mask) == 0 && want_pin(&mask, threads)) {
            p->cpu = pst_calloc((size_t)threads, sizeof(int));
            mask_cpus(&mask, p->cpu, threads);
            p->pinned = true;
        }
        /* workers inherit a mask that blocks every signal */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        int rc = 0;
        for (int i = 1; i < threads && rc == 0; i++) {
            rc = start_worker(p, i);
            if (rc == 0) p->started++;
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (rc != 0) {
            pst_fail(e, "thread pool: starting thread %d of %d: %s", p->started + 1, threads,
                     strerror(rc));
            nn_pool_free(p);
            return -1;
        }
    }
    *out = p;
    return 0;
}

void nn_pool_free(nn_pool *p)
{
    if (!p) return;
    assert(tls_pool != p); /* not from inside a task */
    if (p->started) {
        publish(p, 0, NULL, NULL, 0, NULL);
        for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    }
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->cpu);
    free(p->slot);
    free(p->kinds);
    free(p->parts);
    free(p);
}

int nn_pool_threads(const nn_pool *p)
{
    return p ? p->T : 1;
}

int nn_pool_cpu(const nn_pool *p, int tid)
{
    return p && p->pinned && tid >= 0 && tid < p->T ? p->cpu[tid] : -1;
}

void nn_pool_enter(nn_pool *p)
{
    if (!p || !p->pinned) return;
    assert(tls_pool != p); /* not from inside a task */
    p->enter_depth++;
}

/* The caller onto cpu[0], at the first loop on the threads after
 * nn_pool_enter: calls without one (an optimizer call on a small range)
 * cost no system call. Once per enter, even when refused. */
static void pin_caller(nn_pool *p)
{
    cpu_set_t one;
    one_cpu(&one, p->cpu[0]);
    p->caller_tried = true;
    p->caller_pinned = sched_getaffinity(0, sizeof p->caller_mask, &p->caller_mask) == 0 &&
                       CPU_ISSET(p->cpu[0], &p->caller_mask) &&
                       sched_setaffinity(0, sizeof one, &one) == 0;
}

void nn_pool_leave(nn_pool *p)
{
    if (!p || !p->pinned) return;
    assert(p->enter_depth > 0);
    if (--p->enter_depth > 0) return;
    if (p->caller_pinned) sched_setaffinity(0, sizeof p->caller_mask, &p->caller_mask);
    p->caller_pinned = p->caller_tried = false;
}

/* A loop on the pool's threads (fn: tasks; rfn: a range loop of ntasks
 * items) from the caller, as tid 0; returns when every worker is done. */
static void run_loop(nn_pool *p, int ntasks, void (*fn)(void *, int, int),
                     void (*rfn)(void *, int, int), int grain, void *arg)
{
    bool was = atomic_exchange_explicit(&p->running, true, memory_order_acquire);
    assert(!was); /* two threads in nn_pool_for of one pool */
    (void)was;
    if (p->enter_depth && !p->caller_tried) pin_caller(p);
    stats_mark mark;
    if (p->stats) stats_loop_begin(p, &mark);
    publish(p, ntasks, fn, rfn, grain, arg);
    tls_pool = p;
    tls_tid = 0;
    run_tasks(p, 0);
    if (p->stats) {
        stats_loop_own(&mark);
        wait_workers(p);
        stats_loop_end(p, &mark, fn, rfn, ntasks);
    } else {
        wait_workers(p);
    }
    tls_pool = NULL;
    atomic_store_explicit(&p->running, false, memory_order_release);
}

void nn_pool_for(nn_pool *p, int ntasks, void (*fn)(void *arg, int task, int tid), void *arg)
{
    if (ntasks <= 0) return;
    if (prof_on(p)) {
        prof_loop(ntasks, fn, arg);
        return;
    }
    /* On the caller alone: no pool, one thread, one task, or a nested call
     * from inside a task of this pool (with that thread's tid). */
    if (!p || p->started == 0 || ntasks == 1 || tls_pool == p) {
        int tid = p && tls_pool == p ? tls_tid : 0;
        if (p && p->stats && tls_pool != p) p->tot.serial_loops++;
        for (int t = 0; t < ntasks; t++) fn(arg, t, tid);
        return;
    }
    run_loop(p, ntasks, fn, NULL, 0, arg);
}

/* The least chunk of a range loop, in floats touched: the last chunks of a
 * loop are this small (a microsecond or two of streaming), so the threads
 * end within about that of each other. */
#define RANGE_GRAIN 4096

void nn_pool_range(nn_pool *p, int n, size_t item_work, void (*fn)(void *arg, int lo, int hi),
                   void *arg)
{
    if (n <= 0) return;
    const size_t work = item_work ? item_work : 1;
    if (prof_on(p)) {
        prof_range(n, work, fn, arg);
        return;
    }
    /* one call on the caller: no pool, one thread, nested, or under some
     * 16k floats in all (as when the ranges were fixed) */
    if (!p || p->started == 0 || tls_pool == p || (size_t)n * work < 2 * 8192) {
        fn(arg, 0, n);
        return;
    }
    size_t g = (RANGE_GRAIN + work - 1) / work;
    run_loop(p, n, NULL, fn, g > (size_t)n ? n : (int)g, arg);
}

int nn_pool_nblocks(int n, size_t item_work, size_t grain, int max_blocks)
{
    if (n <= 1) return 1;
    size_t work = (size_t)n * (item_work ? item_work : 1);
    size_t nb = work / (grain ? grain : 1);
    if (nb > (size_t)max_blocks) nb = (size_t)max_blocks;
    if (nb > (size_t)n) nb = (size_t)n;
    return nb < 1 ? 1 : (int)nb;
}
