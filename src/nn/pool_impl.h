/*
 * pool_impl.h - what pool.c (the threads, their loops, placement) and
 * pool_stats.c (the statistics and the one-thread profiling of pool.h)
 * share: the pool's state and the statistics' hooks into a loop. Internal
 * to those two files.
 */
#ifndef PSTRAIN_NN_POOL_IMPL_H
#define PSTRAIN_NN_POOL_IMPL_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "pstrain/pool.h"

/* The tasks (items of a range loop) of thread tid in the current loop:
 * [next, hi) left; other threads take from it too once their own part is
 * done. A cache line each. */
typedef struct part {
    _Alignas(64) atomic_int next;
    int hi;
} part;

/* A thread's statistics, on a cache line of its own. */
typedef struct stat_slot {
    _Alignas(64) double cpu, busy, start;
    long ntask, slept;
} stat_slot;

struct nn_pool {
    int T;
    pthread_t *threads; /* T - 1 workers */
    int started;        /* workers created */
    /* placement (pool.h): cpu[tid] is thread tid's CPU when pinned; the
     * caller's mask while it is pinned between nn_pool_enter and
     * nn_pool_leave (depth: nested enters) */
    bool pinned;
    int *cpu;
    int enter_depth;
    bool caller_tried, caller_pinned;
    cpu_set_t caller_mask;
    pthread_mutex_t mu;
    pthread_cond_t wake;      /* workers: a new generation or stop */
    pthread_cond_t done;      /* caller: busy reached 0 */
    atomic_int sleepers;      /* workers asleep or about to sleep on `wake` */
    atomic_bool caller_waits; /* the caller asleep or about to sleep on `done` */
    /* the current loop: written by the caller before gen moves */
    void (*fn)(void *arg, int task, int tid);
    void (*rfn)(void *arg, int lo, int hi); /* a range loop: fn is NULL */
    void *arg;
    int ntasks, grain;   /* tasks (items of a range loop); a range loop's least chunk */
    part *parts;         /* [T]: the loop's tasks cut into T contiguous parts */
    atomic_int busy;     /* workers that have not finished this generation */
    atomic_uint gen;     /* generation counter */
    atomic_bool running; /* a loop is in progress (misuse check) */
    /* statistics (nn_pool_stats_set): `stats` and `t_pub` are written by the
     * caller before gen moves; each thread adds to its own slot */
    bool stats;
    double t_pub;    /* wall clock when the loop was published */
    stat_slot *slot; /* [T] */
    nn_pool_stats tot;
    nn_pool_kind *kinds; /* [NN_POOL_KINDS + 1]: the last one for the rest */
    int nkinds;
};

/* Statistics (pool_stats.c), called only while p->stats is on. A thread's
 * share of a loop's tasks: stats_tasks_begin reads the clocks before it,
 * stats_tasks_end adds what it took to the thread's slot. A loop on the
 * threads: stats_loop_begin before it is published, stats_loop_own when the
 * caller's own tasks are done, stats_loop_end after the workers are. */
typedef struct stats_clock {
    double wall, cpu;
} stats_clock;
typedef struct stats_mark {
    long tasks;      /* tasks of all slots before the loop */
    double busy;     /* busy time of all slots before the loop */
    stats_clock own; /* when the caller's own tasks ended */
} stats_mark;
stats_clock stats_tasks_begin(void);
void stats_tasks_end(nn_pool *p, int tid, stats_clock c0, long ran);
void stats_loop_begin(nn_pool *p, stats_mark *m);
void stats_loop_own(stats_mark *m);
void stats_loop_end(nn_pool *p, const stats_mark *m, void (*fn)(void *, int, int),
                    void (*rfn)(void *, int, int), int ntasks);

/* One-thread profiling (pool.h's nn_pool_prof): whether a loop of p is
 * profiled (on, not nested in a profiled loop, no worker threads); the
 * loop's tasks run on the caller, timed, in order; a range loop cut as for
 * the profiled thread count. */
bool prof_on(const nn_pool *p);
void prof_loop(int ntasks, void (*fn)(void *arg, int task, int tid), void *arg);
void prof_range(int n, size_t work, void (*fn)(void *arg, int lo, int hi), void *arg);

#endif
