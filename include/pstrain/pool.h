/*
 * pool.h - the thread pool: T persistent threads that run the tasks of one
 * parallel loop at a time. A model owns one (src/nn); a parameter server
 * applies its optimizer on one (--ps-threads, src/cluster/ps.c).
 *
 *     nn_pool *p;
 *     if (nn_pool_new(&p, 4, e) < 0) ...          // 3 extra threads
 *     nn_pool_for(p, ntasks, fn, arg);             // fn(arg, task, tid), every task once
 *     nn_pool_free(p);
 *
 * The caller of nn_pool_for takes part as tid 0; the other threads are
 * tids 1..T-1. The tasks are cut into T contiguous parts, thread i runs
 * part i in order and then takes what is left of the others' parts (their
 * counters are atomic), so which thread runs which task is unspecified: a
 * task's result may depend on its index only, never on tid or on T (tid
 * exists to pick per-thread scratch). The contiguous parts keep a thread on
 * the same images from layer to layer (tasks are image- or row-major), so
 * what it reads was mostly written by itself: in its own core's caches.
 *
 * Determinism rule for every parallel kernel (docs/design.md §11):
 * split the work into tasks whose decomposition depends only on the shapes,
 * never on T, and reduce partial results in a fixed order over the tasks
 * after nn_pool_for returns. Then a run gives the same bits for every T.
 *
 * Dispatch is low-latency: idle threads spin on a generation counter for
 * up to half a millisecond (pool.c's POOL_SPIN_NS) before they sleep on a
 * condition variable, so back-to-back loops (a few per layer) do not pay a
 * wake-up each; bounded, so that a pool waiting between steps leaves its
 * cores to other processes (a parameter server on the same core). The worker threads block all
 * signals: the stop-on-signal flag is set on the caller's threads.
 *
 * One loop at a time: nn_pool_for must not be called from two threads at
 * once (an assert). A call from inside a task of the same pool (nesting)
 * runs all its tasks in order on the calling thread, with that thread's tid.
 */
#ifndef PSTRAIN_POOL_H
#define PSTRAIN_POOL_H

#include "pstrain/common.h"
#include "pstrain/model.h"

#define NN_POOL_MAX_THREADS NN_MAX_THREADS

typedef struct nn_pool nn_pool;

/* threads in [1, NN_POOL_MAX_THREADS]; 1 = no extra threads (everything
 * runs on the caller). Fails (message in e) when a thread cannot start. */
int nn_pool_new(nn_pool **out, int threads, pst_err *e);
/* Stops and joins the threads. NULL-safe. Not from inside a task. */
void nn_pool_free(nn_pool *p);
/* T; a NULL pool: 1. */
int nn_pool_threads(const nn_pool *p);

/* Placement. nn_pool_new pins the pool when the calling thread's CPU
 * affinity mask has exactly T CPUs (what Slurm's --cpus-per-task=T or
 * mpirun's --map-by ...:PE=T --bind-to core give a rank, or T = the
 * machine's CPUs): thread tid then belongs to the tid-th CPU of that mask
 * (in increasing order), never one outside it. A wider mask is shared with
 * whoever else the launcher put there (ranks that are not bound), so the
 * pool stays unpinned. PSTRAIN_PIN=0 never pins; PSTRAIN_PIN=1 pins
 * whenever the mask has at least T CPUs (its first T).
 *
 * Workers are pinned for their lifetime (they start on their CPU). The
 * caller is pinned to CPU 0 of the list only between nn_pool_enter and
 * nn_pool_leave (the model's train step and evaluation, and the optimizer
 * call over at least 1M floats: for a shorter loop the three calls would
 * cost a good part of it),
 * from the first loop that runs on the threads (three system calls per
 * such call, none for a call whose loops all run on the caller), and gets
 * its own mask back at the leave: a
 * thread it starts outside those calls (input pipeline threads, an MPI
 * library's progress thread) inherits the caller's mask, not one CPU.
 * Enter/leave nest (the outermost pair counts); from the thread that
 * calls nn_pool_for, not from inside a task. NULL or unpinned pool:
 * nothing. */
void nn_pool_enter(nn_pool *p);
void nn_pool_leave(nn_pool *p);
/* Thread tid's CPU when the pool is pinned; -1 when not (or NULL). */
int nn_pool_cpu(const nn_pool *p, int tid);
/* Runs fn(arg, task, tid) for every task in [0, ntasks) on the pool's
 * threads (the caller is tid 0) and returns when all are done: what the
 * tasks wrote is then visible to the caller. A NULL pool runs all tasks on
 * the caller in order. ntasks <= 0: nothing. */
void nn_pool_for(nn_pool *p, int ntasks, void (*fn)(void *arg, int task, int tid), void *arg);

/* Runs fn(arg, lo, hi) over [0, n) cut into ranges, on the pool: for work
 * whose result does not depend on how [0, n) is cut (elementwise, or per
 * image with no sum across images). The cut depends on timing: [0, n) is
 * cut into T contiguous parts, each thread takes chunks of its own part
 * from the front, 1/T of what is left of it and at least some 4k floats
 * (item_work: floats touched per item), then chunks of the others' parts
 * (guided self-scheduling, pool.c). Under some 16k floats in all, with a
 * NULL or one-thread pool, or nested in a task of the pool: one call over
 * [0, n) on the calling thread. */
void nn_pool_range(nn_pool *p, int n, size_t item_work, void (*fn)(void *arg, int lo, int hi),
                   void *arg);

/* Profiling (bench_model): while on, the loops of a single-threaded
 * caller (no pool, or T = 1) time each task in thread CPU time (less the
 * cost of reading that clock, calibrated by nn_pool_prof_set) and add up
 * their work and the time the same tasks, handed out in order, would take
 * on `threads` threads (the pool's schedule: contiguous parts, then
 * helping, each task to the thread that frees first), with nn_pool_range
 * cut into fixed ranges as for that many threads (up to 8 per thread, at
 * least some 8k floats each: not the pool's guided chunks). The clock reads cost CPU time too (a
 * system call each): a caller timing a stretch with loops takes off what
 * `clock` grew by; what it then has outside the loops' work is serial.
 * For one profiled model on one thread at a time; nested loops count in
 * their outer task. */
typedef struct nn_pool_prof {
    double work;  /* seconds of task CPU time */
    double clock; /* seconds of CPU time the profiling's clock reads cost */
    double span;  /* seconds on `threads` threads, list-scheduled */
    long loops, tasks;
} nn_pool_prof;
void nn_pool_prof_set(int threads); /* 0: off */
nn_pool_prof nn_pool_prof_read(void);

/* Statistics of a pool's loops (bench_model --threads T > 1: where the
 * time of T threads goes). While on, every loop run on the pool's threads
 * reads the wall clock (CLOCK_MONOTONIC) at its start and end, and each
 * thread reads the wall clock and its own CPU time (CLOCK_THREAD_CPUTIME_ID,
 * a system call: a few microseconds here) around its share of the tasks:
 * per loop and thread, never per task. Loops that run on the caller alone
 * (one task, nested) count in `serial_loops` only. Per thread tid:
 * wall - busy[tid] is its idle time in the loops (for a worker, start
 * latency included), busy[tid] - cpu[tid] the time another process had its
 * core while it ran tasks. */
typedef struct nn_pool_stats {
    long loops, tasks, serial_loops;
    long slept;        /* workers that slept before they saw a loop (sum) */
    long caller_slept; /* loops whose end the caller slept for */
    double wall;       /* seconds from publishing a loop to its end, on the caller */
    double wait;       /* of which: after the caller's own last task, until the workers end */
    double wait_cpu;   /* the caller's CPU seconds in that wait (spinning) */
    double start;      /* sum over workers: publishing to their first task (wake-up) */
    double cpu[NN_POOL_MAX_THREADS];  /* CPU seconds of each thread in its tasks */
    double busy[NN_POOL_MAX_THREADS]; /* wall seconds of each thread in its tasks */
    long ntask[NN_POOL_MAX_THREADS];  /* tasks each thread ran (range loops: chunks) */
} nn_pool_stats;
/* On (counters reset) or off; not during a loop. NULL pool: nothing. */
void nn_pool_stats_set(nn_pool *p, bool on);
/* The counters so far (zero for a NULL pool); not during a loop. */
nn_pool_stats nn_pool_stats_read(const nn_pool *p);
/* The sums of those counters that a per-layer profile reads before and
 * after every layer: nn_pool_stats is some 24 KB (arrays for
 * NN_POOL_MAX_THREADS threads), and copying it twice per layer would show
 * as "serial" time in every layer's profile. */
typedef struct nn_pool_totals {
    long loops, tasks;
    double wall, wait; /* as nn_pool_stats */
    double cpu, busy;  /* summed over the threads */
} nn_pool_totals;
nn_pool_totals nn_pool_totals_read(const nn_pool *p);

/* The same statistics by kind of loop (bench_model's "loops by kernel"):
 * the loops on the threads grouped by task function and task count (range
 * loops by range function, ntasks -1), the first NN_POOL_KINDS kinds seen
 * since the statistics were set on; loops of later kinds add to a last
 * entry with both functions NULL. Which loops leave threads idle, and how
 * long, without a profiler. */
#define NN_POOL_KINDS 96
typedef struct nn_pool_kind {
    void (*fn)(void *arg, int task, int tid); /* the loop's task function, or NULL */
    void (*rfn)(void *arg, int lo, int hi);   /* a range loop's function, or NULL */
    int ntasks;                               /* -1: a range loop */
    long loops;
    double wall; /* seconds, as nn_pool_stats.wall */
    double idle; /* thread seconds in these loops not in tasks: T wall - busy */
} nn_pool_kind;
/* Copies up to max kinds into out (in the order first seen); returns how
 * many. Not during a loop; NULL pool or statistics off: 0. */
int nn_pool_kinds_read(const nn_pool *p, nn_pool_kind *out, int max);

/* Fixed blocks for a reduction over n items of `item_work` floats each:
 * about `grain` floats per block, at most max_blocks, at most n. Depends on
 * the shapes only, never on T (the determinism rule above). */
int nn_pool_nblocks(int n, size_t item_work, size_t grain, int max_blocks);

/* Splits [0, n) into nblocks near-equal blocks; block b is [*lo, *hi). For
 * kernels that cut a dimension into a fixed number of tasks. */
static inline void nn_pool_block(int n, int nblocks, int b, int *lo, int *hi)
{
    *lo = (int)((long long)n * b / nblocks);
    *hi = (int)((long long)n * (b + 1) / nblocks);
}

/* One loop over two lists of tasks (na of the first kind, nb of the
 * second), cut so that part p of T (the part thread p starts with, above)
 * holds block p of the first list and then block p of the second: each
 * thread does its share of both before it helps the others. Task i of that
 * loop is task *k of the first list when this returns 0, of the second when
 * it returns 1. For a layer's weight-gradient and input-gradient tasks in
 * one loop (conv_backward.c, conv_wino2_wgrad.c, conv_wino4_wgrad.c). */
static inline int nn_pool_two_lists(int i, int na, int nb, int T, int *k)
{
    int p = 0, a0, a1, b0, b1;
    for (;; p++) {
        nn_pool_block(na, T, p, &a0, &a1);
        nn_pool_block(nb, T, p, &b0, &b1);
        if (i < a1 + b1) break;
    }
    const int o = i - a0 - b0;
    if (o < a1 - a0) {
        *k = a0 + o;
        return 0;
    }
    *k = b0 + o - (a1 - a0);
    return 1;
}

#endif
