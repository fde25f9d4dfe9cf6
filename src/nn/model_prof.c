/*
 * model_prof.c - the profiling of a model's steps: the marks model.c puts
 * around every layer's pass (model_prof.h), the convolutions' reruns
 * (nn_model_set_profile_rerun), the wall-time-only mode
 * (nn_model_set_profile_wall) and the report (nn_model_profile_report;
 * bench_model prints it). Moved out of model.c unchanged.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "model_prof.h"
#include "pstrain/pool.h"
#include "pstrain/common.h"

/* Profiling counts the CPU time of the calling thread: on a shared machine
 * wall time also counts whoever else runs on the core. */
/* Profiling on a pool: the stats at a layer's start (in k), added to par
 * at its end. */
static void par_begin(const nn_model *m, nn_prof_mark *k)
{
    if (m->pool) k->s = nn_pool_totals_read(m->pool), k->wall = pst_now();
}

static void par_end(const nn_model *m, const nn_prof_mark *k, nn_layer_par *par)
{
    if (!m->pool) return;
    par->wall += pst_now() - k->wall;
    nn_pool_totals s = nn_pool_totals_read(m->pool);
    par->loop_wall += s.wall - k->s.wall;
    par->wait += s.wait - k->s.wait;
    par->cpu += s.cpu - k->s.cpu;
    par->busy += s.busy - k->s.busy;
    par->loops += s.loops - k->s.loops;
    par->tasks += s.tasks - k->s.tasks;
}

/* ---- profiling with rerun (nn_model_set_profile_rerun) ---- */

/* A rerun is timed as its layer: the caller's CPU time on one thread, the
 * wall time on a pool (the report's "wall" columns). */
static double rerun_clock(const nn_model *m)
{
    return m->pool ? pst_now() : pst_thread_cpu();
}

static float *rerun_space(nn_model *m, size_t floats)
{
    free(m->rerun_buf);
    m->rerun_buf = pst_aligned_alloc(sizeof(float) * (floats ? floats : 1));
    return m->rerun_buf;
}

/* Before the first backward: which input gradient it writes (nn_in_dy's
 * choice), and that buffer's content when the backward adds to it. */
static void rerun_before(nn_model *m, nn_layer *l, int n, nn_prof_mark *r)
{
    memset(r, 0, sizeof *r);
    for (int k = 0; k < l->nvar; k++) r->ngrad += m->vars[l->var0 + k].size;
    if (l->in[0] != NN_INPUT) {
        nn_layer *p = &m->layers[l->in[0]];
        r->p = p, r->written = p->dy_written, r->written2 = p->dy2_written;
        r->din = p->dy_written && p->dy2 ? p->dy2 : p->dy;
        r->nin = (size_t)n * p->h * p->w * p->c;
    }
    float *b = rerun_space(m, r->ngrad + 3 * r->nin);
    if (r->din) memcpy(b, r->din, sizeof(float) * r->nin);
}

/* After the first backward: keep its results, restore what it changed,
 * run it again timed, and check that it wrote the same bits. */
static void rerun_bwd(nn_model *m, nn_layer *l, int n, nn_prof_mark *r)
{
    float *before = m->rerun_buf, *din1 = before + r->nin, *g1 = din1 + r->nin;
    if (r->din) memcpy(din1, r->din, sizeof(float) * r->nin);
    for (int k = 0, o = 0; k < l->nvar; o += (int)m->vars[l->var0 + k].size, k++)
        memcpy(g1 + o, nn_grad(m, l, k), sizeof(float) * m->vars[l->var0 + k].size);
    if (r->p) {
        r->p->dy_written = r->written, r->p->dy2_written = r->written2;
        memcpy(r->din, before, sizeof(float) * r->nin);
    }
    double r0 = rerun_clock(m);
    l->ops->backward(m, l, n);
    l->r_bwd += rerun_clock(m) - r0;
    bool same = !r->din || !memcmp(din1, r->din, sizeof(float) * r->nin);
    for (int k = 0, o = 0; k < l->nvar; o += (int)m->vars[l->var0 + k].size, k++)
        same = same && !memcmp(g1 + o, nn_grad(m, l, k), sizeof(float) * m->vars[l->var0 + k].size);
    if (!same) pst_die("profile rerun: the second backward of %s wrote other bits", l->name);
}

/* ---- the marks around a layer's pass (model_prof.h) ---- */

void nn_prof_begin(nn_model *m, nn_layer *l, int n, bool bwd, nn_prof_mark *k)
{
    if (m->profile_wall) { /* wall time only (nn_model_set_profile_wall) */
        k->wall = pst_now();
        return;
    }
    bool rerun = bwd && m->profile_rerun && l->ops == &nn_conv_ops;
    memset(k, 0, sizeof *k);
    if (rerun) rerun_before(m, l, n, k); /* clears k too */
    k->rerun = rerun;
    k->t0 = pst_thread_cpu();
    k->p0 = nn_pool_prof_read();
    par_begin(m, k);
}

void nn_prof_end_fwd(nn_model *m, nn_layer *l, int n, bool train, const nn_prof_mark *k)
{
    if (m->profile_wall) {
        m->profile_wall[2 * (l - m->layers)] = pst_now() - k->wall;
        return;
    }
    par_end(m, k, &l->par[0]);
    nn_pool_prof p1 = nn_pool_prof_read();
    l->t_fwd += pst_thread_cpu() - k->t0 - (p1.clock - k->p0.clock);
    l->w_fwd += p1.work - k->p0.work, l->s_fwd += p1.span - k->p0.span;
    if (l->ops->flops) l->f_fwd += l->ops->flops(l, n, false);
    if (m->profile_rerun && l->ops == &nn_conv_ops) {
        /* the same call again: it writes the same output */
        double r0 = rerun_clock(m);
        l->ops->forward(m, l, n, train);
        l->r_fwd += rerun_clock(m) - r0;
    }
}

void nn_prof_end_bwd(nn_model *m, nn_layer *l, int n, nn_prof_mark *k)
{
    if (m->profile_wall) {
        m->profile_wall[2 * (l - m->layers) + 1] = pst_now() - k->wall;
        return;
    }
    par_end(m, k, &l->par[1]);
    nn_pool_prof p1 = nn_pool_prof_read();
    l->t_bwd += pst_thread_cpu() - k->t0 - (p1.clock - k->p0.clock);
    l->w_bwd += p1.work - k->p0.work, l->s_bwd += p1.span - k->p0.span;
    if (l->ops->flops) l->f_bwd += l->ops->flops(l, n, true);
    if (k->rerun) rerun_bwd(m, l, n, k);
}

/* ---- switches and the report ---- */

static void profile_pool(const nn_model *m)
{
    nn_pool_prof_set(m->profile && !m->pool ? m->profile_threads : 0);
    nn_pool_stats_set(m->pool, m->profile);
}

void nn_model_set_profiling(nn_model *m, bool on)
{
    m->profile = on;
    profile_pool(m);
}

void nn_model_set_profile_wall(nn_model *m, double *times)
{
    assert(!times || !m->profile || m->profile_wall); /* not with nn_model_set_profiling */
    m->profile_wall = times;
    m->profile = times != NULL; /* model.c's marks; the pool's statistics stay off */
}

void nn_model_set_profile_rerun(nn_model *m, bool on)
{
    m->profile_rerun = on;
}

void nn_model_set_profile_threads(nn_model *m, int threads)
{
    m->profile_threads = threads;
    profile_pool(m);
}

/* Predicted time on the profile's threads: the serial part (CPU time
 * outside the loops) plus the loops' list-scheduled span. */
static double predicted(double t, double work, double span)
{
    return t - work + span;
}

/* The report of a model on a pool: per layer and direction the wall time,
 * the work (CPU time of all threads in tasks), the serial part (wall time
 * outside the loops) and the idle thread time in the loops; then the
 * step's totals from the pool's statistics. */
static void profile_report_par(nn_model *m, FILE *out)
{
    const int T = nn_pool_threads(m->pool);
    int64_t steps = m->profiled_steps > 0 ? m->profiled_steps : 1;
    double us = 1e6 / (double)steps;
    nn_layer_par tot[2];
    memset(tot, 0, sizeof tot);
    for (int i = 0; i < m->nlayers; i++)
        for (int d = 0; d < 2; d++) {
            const nn_layer_par *q = &m->layers[i].par[d];
            tot[d].wall += q->wall, tot[d].loop_wall += q->loop_wall, tot[d].cpu += q->cpu;
            tot[d].busy += q->busy, tot[d].wait += q->wait;
            tot[d].loops += q->loops, tot[d].tasks += q->tasks;
        }
    double all = tot[0].wall + tot[1].wall > 0 ? tot[0].wall + tot[1].wall : 1;
    fprintf(out,
            "  %-28s %-10s %10s %10s %7s %9s %9s %9s %9s %9s %9s %9s %9s  (on %d threads, us per "
            "step: wall, work = CPU time in tasks of all threads, serial = wall outside loops, "
            "idle = thread time in loops not in tasks)\n",
            "layer", "kind", "fwd wall", "bwd wall", "share", "fwd work", "bwd work", "fwd ser",
            "bwd ser", "fwd idle", "bwd idle", "fwd GF/s", "bwd GF/s", T);
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *l = &m->layers[i];
        const nn_layer_par *f = &l->par[0], *b = &l->par[1];
        char gf[2][16] = {"", ""};
        if (l->f_fwd > 0 && f->wall > 0) snprintf(gf[0], 16, "%.1f", 1e-9 * l->f_fwd / f->wall);
        if (l->f_bwd > 0 && b->wall > 0) snprintf(gf[1], 16, "%.1f", 1e-9 * l->f_bwd / b->wall);
        fprintf(out,
                "  %-28s %-10s %10.1f %10.1f %6.1f%% %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9s %9s\n",
                l->name, l->ops->kind, us * f->wall, us * b->wall,
                100.0 * (f->wall + b->wall) / all, us * f->cpu, us * b->cpu,
                us * (f->wall - f->loop_wall), us * (b->wall - b->loop_wall),
                us * (T * f->loop_wall - f->busy), us * (T * b->loop_wall - b->busy), gf[0], gf[1]);
        if (m->profile_rerun && (l->r_fwd > 0 || l->r_bwd > 0))
            fprintf(out, "  %-28s %-10s %10.1f %10.1f  (the same calls again at once: rerun)\n", "",
                    "", us * l->r_fwd, us * l->r_bwd);
        memset(l->par, 0, sizeof l->par);
        l->f_fwd = l->f_bwd = l->r_fwd = l->r_bwd = 0;
    }
    fprintf(out, "  %-28s %-10s %10.1f %10.1f %7s %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n", "total",
            "", us * tot[0].wall, us * tot[1].wall, "", us * tot[0].cpu, us * tot[1].cpu,
            us * (tot[0].wall - tot[0].loop_wall), us * (tot[1].wall - tot[1].loop_wall),
            us * (T * tot[0].loop_wall - tot[0].busy), us * (T * tot[1].loop_wall - tot[1].busy));
    nn_pool_stats s = nn_pool_stats_read(m->pool);
    double cpu = 0, busy = 0;
    for (int t = 0; t < T; t++) cpu += s.cpu[t], busy += s.busy[t];
    fprintf(out,
            "  pool per step (%lld steps): %.0f loops, %.0f tasks, %.0f serial loops; layers' wall "
            "%.1f us = serial %.1f + loops %.1f; in the loops: work %.1f us (",
            (long long)steps, s.loops / (double)steps, s.tasks / (double)steps,
            s.serial_loops / (double)steps, us * all,
            us * (all - tot[0].loop_wall - tot[1].loop_wall), us * s.wall, us * cpu);
    for (int t = 0; t < T; t++)
        fprintf(out, "%sthread %d %.1f us in %.0f tasks", t ? ", " : "", t, us * s.cpu[t],
                s.ntask[t] / (double)steps);
    fprintf(out,
            "), idle %.1f us, preempted (task wall - CPU) %.1f us, caller's wait at loop ends "
            "%.1f us, workers' start latency %.1f us per loop; workers slept before %.1f%% of the "
            "loops, "
            "the caller at the end of %.1f%%\n",
            us * (T * s.wall - busy), us * (busy - cpu), us * s.wait,
            s.loops ? 1e6 * s.start / (double)s.loops / (T - 1) : 0.0,
            s.loops ? 100.0 * s.slept / (double)s.loops / (T - 1) : 0.0,
            s.loops ? 100.0 * s.caller_slept / (double)s.loops : 0.0);
    if (m->profile_rerun)
        fprintf(out, "  (the pool's figures of this line include the reruns' loops; the layers' "
                     "rows do not)\n");
    nn_pool_stats_set(m->pool, m->profile);
    m->profiled_steps = 0;
}

void nn_model_profile_report(nn_model *m, FILE *out)
{
    if (m->pool) {
        profile_report_par(m, out);
        return;
    }
    double tf = 0, tb = 0, pf = 0, pb = 0, rf = 0, rb = 0;
    bool pred = m->profile_threads > 1 && !m->pool;
    for (int i = 0; i < m->nlayers; i++) {
        const nn_layer *l = &m->layers[i];
        tf += l->t_fwd, tb += l->t_bwd;
        pf += predicted(l->t_fwd, l->w_fwd, l->s_fwd);
        pb += predicted(l->t_bwd, l->w_bwd, l->s_bwd);
    }
    int64_t steps = m->profiled_steps > 0 ? m->profiled_steps : 1;
    double tot = tf + tb > 0 ? tf + tb : 1;
    fprintf(out, "  %-28s %-10s %10s %10s %7s %9s %9s", "layer", "kind", "fwd cpu us", "bwd cpu us",
            "share", "fwd GF/s", "bwd GF/s");
    if (pred)
        fprintf(out, " %6s %6s %7s %7s  (on %d threads: parallel share, predicted speedup)",
                "fwd %", "bwd %", "fwd x", "bwd x", m->profile_threads);
    fprintf(out, "\n");
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *l = &m->layers[i];
        char gf[2][16] = {"", ""};
        /* GFLOP/s of the layers that count their flops (convolutions) */
        if (l->f_fwd > 0 && l->t_fwd > 0) snprintf(gf[0], 16, "%.1f", 1e-9 * l->f_fwd / l->t_fwd);
        if (l->f_bwd > 0 && l->t_bwd > 0) snprintf(gf[1], 16, "%.1f", 1e-9 * l->f_bwd / l->t_bwd);
        fprintf(out, "  %-28s %-10s %10.1f %10.1f %6.1f%% %9s %9s", l->name, l->ops->kind,
                1e6 * l->t_fwd / steps, 1e6 * l->t_bwd / steps, 100.0 * (l->t_fwd + l->t_bwd) / tot,
                gf[0], gf[1]);
        if (pred) {
            double qf = predicted(l->t_fwd, l->w_fwd, l->s_fwd);
            double qb = predicted(l->t_bwd, l->w_bwd, l->s_bwd);
            fprintf(out, " %5.1f%% %5.1f%% %7.2f %7.2f", 100.0 * l->w_fwd / (l->t_fwd + 1e-12),
                    100.0 * l->w_bwd / (l->t_bwd + 1e-12), l->t_fwd / (qf + 1e-12),
                    l->t_bwd / (qb + 1e-12));
        }
        if (m->profile_rerun && (l->r_fwd > 0 || l->r_bwd > 0))
            fprintf(out, "  rerun %8.1f %8.1f", 1e6 * l->r_fwd / steps, 1e6 * l->r_bwd / steps);
        fprintf(out, "\n");
        rf += l->r_fwd, rb += l->r_bwd;
        l->t_fwd = l->t_bwd = l->f_fwd = l->f_bwd = l->r_fwd = l->r_bwd = 0;
        l->w_fwd = l->w_bwd = l->s_fwd = l->s_bwd = 0;
    }
    fprintf(out, "  %-28s %-10s %10.1f %10.1f (per step, %lld steps)\n", "total", "",
            1e6 * tf / steps, 1e6 * tb / steps, (long long)steps);
    if (m->profile_rerun)
        fprintf(out,
                "  reruns (each convolution called again at once, same inputs; not in the "
                "totals): fwd %.1f us, bwd %.1f us per step\n",
                1e6 * rf / steps, 1e6 * rb / steps);
    if (pred) {
        nn_pool_prof p = nn_pool_prof_read();
        fprintf(out,
                "  predicted on %d threads (serial parts + list-scheduled tasks, thread CPU "
                "time): fwd %.1f us, bwd %.1f us per step, speedup %.2fx (layers only); "
                "%.0f parallel loops, %.0f tasks per step\n",
                m->profile_threads, 1e6 * pf / steps, 1e6 * pb / steps, (tf + tb) / (pf + pb),
                (double)p.loops / steps, (double)p.tasks / steps);
    }
    m->profiled_steps = 0;
}
