/*
 * pool_stats.c - the statistics of a pool's loops and the one-thread
 * profiling (contract: pool.h, "Profiling" and "Statistics"): what
 * bench_model reports as work, idle and serial time. Split out of pool.c,
 * which calls the hooks of pool_impl.h from its loops while the statistics
 * are on; the profiling replaces a loop on a one-thread caller.
 */
#include "pool_impl.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/common.h"

stats_clock stats_tasks_begin(void)
{
    stats_clock c;
    c.wall = pst_now();
    c.cpu = pst_thread_cpu();
    return c;
}

void stats_tasks_end(nn_pool *p, int tid, stats_clock c0, long ran)
{
    stat_slot *s = &p->slot[tid];
    double c1 = pst_thread_cpu(), w1 = pst_now();
    s->cpu += c1 - c0.cpu;
    s->busy += w1 - c0.wall;
    if (tid) s->start += c0.wall - p->t_pub;
    s->ntask += ran;
}

void stats_loop_begin(nn_pool *p, stats_mark *m)
{
    m->tasks = 0;
    m->busy = 0;
    p->t_pub = pst_now();
    for (int i = 0; i < p->T; i++) m->tasks += p->slot[i].ntask, m->busy += p->slot[i].busy;
}

void stats_loop_own(stats_mark *m)
{
    m->own.wall = pst_now();
    m->own.cpu = pst_thread_cpu();
}

/* The kind of a loop (nn_pool_kinds_read), found or added. */
static nn_pool_kind *loop_kind(nn_pool *p, void (*fn)(void *, int, int),
                               void (*rfn)(void *, int, int), int ntasks)
{
    for (int i = 0; i < p->nkinds; i++)
        if (p->kinds[i].fn == fn && p->kinds[i].rfn == rfn && p->kinds[i].ntasks == ntasks)
            return &p->kinds[i];
    if (p->nkinds == NN_POOL_KINDS) return &p->kinds[NN_POOL_KINDS];
    nn_pool_kind *k = &p->kinds[p->nkinds++];
    k->fn = fn, k->rfn = rfn, k->ntasks = ntasks;
    return k;
}

void stats_loop_end(nn_pool *p, const stats_mark *m, void (*fn)(void *, int, int),
                    void (*rfn)(void *, int, int), int ntasks)
{
    /* the CPU clock (a system call) before the loop's end: its cost
     * counts in the loop, not in the serial time between loops */
    double end_cpu = pst_thread_cpu(), end = pst_now();
    p->tot.wait += end - m->own.wall;
    p->tot.wait_cpu += end_cpu - m->own.cpu;
    p->tot.wall += end - p->t_pub;
    p->tot.loops++;
    /* a range loop's tasks are the chunks run (the workers' slots are
     * final: busy was read with acquire) */
    long after = 0;
    double busy1 = 0;
    for (int i = 0; i < p->T; i++) after += p->slot[i].ntask, busy1 += p->slot[i].busy;
    p->tot.tasks += after - m->tasks;
    nn_pool_kind *k = loop_kind(p, fn, rfn, fn ? ntasks : -1);
    k->loops++;
    k->wall += end - p->t_pub;
    k->idle += p->T * (end - p->t_pub) - (busy1 - m->busy);
}

void nn_pool_stats_set(nn_pool *p, bool on)
{
    if (!p) return;
    assert(!atomic_load_explicit(&p->running, memory_order_relaxed));
    p->stats = on;
    memset(&p->tot, 0, sizeof p->tot);
    memset(p->slot, 0, sizeof(stat_slot) * (size_t)p->T);
    memset(p->kinds, 0, sizeof(nn_pool_kind) * (NN_POOL_KINDS + 1));
    p->nkinds = 0;
}

int nn_pool_kinds_read(const nn_pool *p, nn_pool_kind *out, int max)
{
    if (!p || !p->stats) return 0;
    int n = p->nkinds + (p->kinds[NN_POOL_KINDS].loops > 0);
    if (n > max) n = max;
    for (int i = 0; i < n; i++) out[i] = p->kinds[i < p->nkinds ? i : NN_POOL_KINDS];
    return n;
}

nn_pool_stats nn_pool_stats_read(const nn_pool *p)
{
    nn_pool_stats s;
    memset(&s, 0, sizeof s);
    if (!p) return s;
    s = p->tot;
    for (int i = 0; i < p->T; i++) {
        s.cpu[i] = p->slot[i].cpu, s.busy[i] = p->slot[i].busy;
        s.ntask[i] = p->slot[i].ntask;
        s.slept += p->slot[i].slept;
        if (i) s.start += p->slot[i].start;
    }
    return s;
}

nn_pool_totals nn_pool_totals_read(const nn_pool *p)
{
    nn_pool_totals t = {0, 0, 0, 0, 0, 0};
    if (!p) return t;
    t.loops = p->tot.loops, t.tasks = p->tot.tasks;
    t.wall = p->tot.wall, t.wait = p->tot.wait;
    for (int i = 0; i < p->T; i++) t.cpu += p->slot[i].cpu, t.busy += p->slot[i].busy;
    return t;
}

/* ---- profiling: see pool.h ---- */

static int prof_threads; /* 0: off */
static int prof_depth;   /* loops in progress on the profiled caller */
static nn_pool_prof prof;
static double prof_clock; /* seconds of CPU time one read of that clock costs */

void nn_pool_prof_set(int threads)
{
    prof_threads = threads < 0 ? 0 : threads > NN_POOL_MAX_THREADS ? NN_POOL_MAX_THREADS : threads;
    memset(&prof, 0, sizeof prof);
    prof_clock = 0.0;
    for (int i = 0; i < 64 && prof_threads; i++) {
        double a = pst_thread_cpu(), b = pst_thread_cpu();
        if (i == 0 || b - a < prof_clock) prof_clock = b - a;
    }
}

nn_pool_prof nn_pool_prof_read(void)
{
    return prof;
}

/* The tasks on the caller, each timed; the pool's schedule simulated: the
 * loop cut into prof_threads contiguous parts, each thread runs its own
 * part in order, then takes the next task of the parts after it; the
 * thread that frees first takes next. Tasks run in index order here, so a
 * task is timed when the simulation first needs it.
 *
 * A read of the thread CPU clock is a system call: 1.3 microseconds on the
 * virtual machine of docs/platform.md, "Two cores", as much as a small task.
 * About one read's cost falls inside a task's interval and one outside
 * (between tasks), so that hundreds of tasks per step would add visibly to
 * the tasks and to the serial time: each task's time is taken less one
 * read, the cost of a read being taken between the loop's tasks (only
 * reads lie there; a lone task: the least of some back-to-back pairs), and
 * everything in the loop but the tasks, plus one read for the halves
 * before the first and after the last, is added up apart (`clock`), for
 * the caller to take off its own measurements, so that the serial parts
 * agree with the time of whole loops. */
void prof_loop(int ntasks, void (*fn)(void *arg, int task, int tid), void *arg)
{
    const int T = prof_threads;
    double free_at[NN_POOL_MAX_THREADS] = {0};
    int next[NN_POOL_MAX_THREADS], hi[NN_POOL_MAX_THREADS];
    double *d = pst_malloc(sizeof(double) * (size_t)ntasks);
    prof_depth++;
    double begin = 0, last = 0, gaps = 0;
    for (int t = 0; t < ntasks; t++) {
        double t0 = pst_thread_cpu();
        if (t == 0)
            begin = t0;
        else
            gaps += t0 - last;
        fn(arg, t, 0);
        last = pst_thread_cpu();
        d[t] = last - t0;
    }
    prof_depth--;
    /* a read's cost here: what lies between two tasks (reads with warm
     * caches, as in nn_pool_prof_set, cost a fifth of a microsecond less) */
    double one = ntasks > 1 ? gaps / (ntasks - 1) : prof_clock, tasks = 0;
    for (int t = 0; t < ntasks; t++) {
        d[t] = d[t] > one ? d[t] - one : 0.0;
        tasks += d[t];
    }
    prof.work += tasks;
    prof.clock += last - begin - tasks + one;
    for (int i = 0; i < T; i++) nn_pool_block(ntasks, T, i, &next[i], &hi[i]);
    for (int left = ntasks; left > 0; left--) {
        int first = 0;
        for (int i = 1; i < T; i++)
            if (free_at[i] < free_at[first]) first = i;
        for (int k = 0; k < T; k++) {
            int q = (first + k) % T;
            if (next[q] < hi[q]) {
                free_at[first] += d[next[q]++];
                break;
            }
        }
    }
    free(d);
    double span = 0;
    for (int i = 0; i < T; i++)
        if (free_at[i] > span) span = free_at[i];
    prof.span += span;
    prof.loops++;
    prof.tasks += ntasks;
}

bool prof_on(const nn_pool *p)
{
    return prof_threads > 0 && prof_depth == 0 && (!p || p->started == 0);
}

typedef struct range_arg {
    void (*fn)(void *arg, int lo, int hi);
    void *arg;
    int n, nblocks;
} range_arg;

static void range_task(void *varg, int task, int tid)
{
    const range_arg *r = varg;
    int lo, hi;
    nn_pool_block(r->n, r->nblocks, task, &lo, &hi);
    if (lo < hi) r->fn(r->arg, lo, hi);
}

void prof_range(int n, size_t work, void (*fn)(void *arg, int lo, int hi), void *arg)
{
    /* the simulated pool: fixed ranges, up to 8 per thread, none under
     * some 8k floats (the guided chunks of nn_pool_range are not simulated) */
    int nb = prof_threads == 1 ? 1 : nn_pool_nblocks(n, work, 8192, 8 * prof_threads);
    if (nb == 1) {
        fn(arg, 0, n);
        return;
    }
    range_arg r = {fn, arg, n, nb};
    prof_loop(nb, range_task, &r);
}
