/* metrics.c - JSONL metrics log and the progress line of the reporting rank. */
#include "pstrain/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pstrain/progress.h"

struct metrics {
    FILE *f;
    bool progress, tty, line_open;
    double t0;
};

static int open_mode(metrics **out, const char *path, bool progress, const char *mode, pst_err *e)
{
    metrics *m = pst_calloc(1, sizeof *m);
    if (path) {
        m->f = fopen(path, mode);
        if (!m->f) {
            free(m);
            return pst_fail(e, "%s: cannot create metrics file: %s", path, strerror(errno));
        }
    }
    m->progress = progress;
    m->tty = isatty(fileno(stderr));
    m->t0 = pst_now();
    *out = m;
    return 0;
}

/* JSON has no NaN/Inf: write null. */
static void jnum(FILE *f, const char *key, double v, bool comma)
{
    if (isfinite(v))
        fprintf(f, "\"%s\":%.6g%s", key, v, comma ? "," : "");
    else
        fprintf(f, "\"%s\":null%s", key, comma ? "," : "");
}

int metrics_open(metrics **out, const char *path, bool progress, pst_err *e)
{
    return open_mode(out, path, progress, "w", e);
}

int metrics_open_append(metrics **out, const char *path, bool progress, pst_err *e)
{
    return open_mode(out, path, progress, "a", e);
}

void metrics_step(metrics *m, const metrics_step_rec *r)
{
    double el = pst_now() - m->t0;
    if (m->f) {
        FILE *f = m->f;
        fprintf(f, "{\"type\":\"step\",\"step\":%lld,\"epoch\":%d,", (long long)r->step, r->epoch);
        jnum(f, "loss", r->loss, true);
        jnum(f, "accuracy", r->accuracy, true);
        jnum(f, "lr", r->lr, true);
        jnum(f, "images_per_sec", r->images_per_sec, true);
        jnum(f, "elapsed", el, r->worker || r->ps);
        if (r->worker || r->ps) {
            fprintf(f, "\"timing\":{");
            if (r->worker) {
                const worker_timing *w = r->worker;
                jnum(f, "wait_data", w->wait_data, true);
                jnum(f, "pull", w->pull, true);
                jnum(f, "compute", w->compute, true);
                jnum(f, "push", w->push, true);
                jnum(f, "wait_version", w->wait_version, r->ps != NULL);
            }
            if (r->ps) {
                jnum(f, "ps_apply", r->ps->apply, true);
                jnum(f, "ps_idle", r->ps->idle, false);
            }
            fputc('}', f);
        }
        fputs("}\n", f);
        fflush(f);
    }
    if (m->progress) {
        char eta[32] = "", elapsed[32];
        pst_format_duration(el, elapsed, sizeof elapsed);
        if (r->total_steps > 0 && r->step > 0) {
            char d[24];
            pst_format_duration(el / (double)r->step * (double)(r->total_steps - r->step), d,
                                sizeof d);
            snprintf(eta, sizeof eta, "  ETA %s", d);
        }
        char total[32] = "";
        if (r->total_steps > 0) snprintf(total, sizeof total, "/%lld", (long long)r->total_steps);
        fprintf(stderr, "%sstep %lld%s  epoch %d  loss %.4f  acc %.3f  lr %.4g  %.0f img/s  %s%s%s",
                m->tty ? "\r\033[K" : "", (long long)r->step, total, r->epoch + 1, r->loss,
                r->accuracy, r->lr, r->images_per_sec, elapsed, eta, m->tty ? "" : "\n");
        fflush(stderr);
        m->line_open = m->tty;
    }
}

void metrics_eval(metrics *m, int64_t step, int epoch, const char *split, double accuracy,
                  double loss, int64_t examples)
{
    if (m->f) {
        fprintf(m->f, "{\"type\":\"eval\",\"step\":%lld,\"epoch\":%d,\"split\":\"%s\",",
                (long long)step, epoch, split);
        jnum(m->f, "accuracy", accuracy, true);
        jnum(m->f, "loss", loss, true);
        fprintf(m->f, "\"examples\":%lld}\n", (long long)examples);
        fflush(m->f);
    }
    if (m->progress) {
        if (m->line_open) fputc('\n', stderr);
        m->line_open = false;
        fprintf(stderr,
                "eval %s after epoch %d (step %lld): accuracy %.4f, loss %.4f, %lld examples\n",
                split, epoch, (long long)step, accuracy, loss, (long long)examples);
    }
}

void metrics_close(metrics *m)
{
    if (!m) return;
    if (m->line_open) fputc('\n', stderr);
    if (m->f) fclose(m->f);
    free(m);
}
