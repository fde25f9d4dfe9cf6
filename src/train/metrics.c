/* metrics.c - JSONL metrics log and the progress line of the reporting rank. */
#include "pstrain/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pstrain/progress.h"
#include "pstrain/tboard.h"

struct metrics {
    FILE *f;
    char *path;
    int err; /* errno of the first failed write (0: none): reported by metrics_finish */
    bool progress, tty, line_open;
    double t0;
    int64_t last_step; /* of the last progress line */
    tb_writer *tb;     /* --tensorboard DIR, or NULL */
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
        m->path = pst_strdup(path);
    }
    m->progress = progress;
    m->tty = isatty(fileno(stderr));
    m->t0 = pst_now();
    *out = m;
    return 0;
}

/* After a record: flushed, and a failure (a full disk) remembered. */
static void flush_record(metrics *m)
{
    errno = 0;
    if ((fflush(m->f) != 0 || ferror(m->f)) && !m->err) m->err = errno ? errno : EIO;
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

/* ---- --tensorboard: the scalars of the records, tagged by group ---- */

int metrics_tensorboard(metrics *m, const char *dir, int64_t start_step, pst_err *e)
{
    if (!dir) return 0;
    return tb_open(&m->tb, dir, start_step, e);
}

static void tensorboard_step(tb_writer *tb, const metrics_step_rec *r)
{
    tb_scalar v[16] = {{"train/loss", r->loss},
                       {"train/accuracy", r->accuracy},
                       {"train/lr", r->lr},
                       {"train/images_per_sec", r->images_per_sec}};
    int n = 4;
    if (r->worker) {
        const worker_timing *w = r->worker;
        v[n++] = (tb_scalar){"timing/wait_data", w->wait_data};
        v[n++] = (tb_scalar){"timing/pull", w->pull};
        v[n++] = (tb_scalar){"timing/compute", w->compute};
        v[n++] = (tb_scalar){"timing/push", w->push};
        v[n++] = (tb_scalar){"timing/wait_version", w->wait_version};
    }
    if (r->ps) {
        v[n++] = (tb_scalar){"timing/ps_apply", r->ps->apply};
        v[n++] = (tb_scalar){"timing/ps_idle", r->ps->idle};
    }
    tb_scalars(tb, r->step, v, n);
}

static void tensorboard_eval(tb_writer *tb, int64_t step, const char *split, const eval_stats *ev)
{
    char tag[3][48];
    snprintf(tag[0], sizeof tag[0], "eval/%s/accuracy", split);
    snprintf(tag[1], sizeof tag[1], "eval/%s/top5_accuracy", split);
    snprintf(tag[2], sizeof tag[2], "eval/%s/loss", split);
    const tb_scalar v[] = {{tag[0], ev->accuracy}, {tag[1], ev->top5_accuracy}, {tag[2], ev->loss}};
    tb_scalars(tb, step, v, 3);
}

void metrics_step(metrics *m, const metrics_step_rec *r)
{
    double el = pst_now() - m->t0;
    if (m->tb) tensorboard_step(m->tb, r);
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
        flush_record(m);
    }
    if (m->progress) {
        char line[512];
        metrics_format_progress(r, el, m->tty, m->tty ? pst_term_width(STDERR_FILENO) : 0, line,
                                sizeof line);
        if (m->tty) {
            fprintf(stderr, "\r\033[K%s", line);
        } else {
            char t[32];
            pst_format_duration(el, t, sizeof t);
            fprintf(stderr, "[%8s] %s\n", t, line);
        }
        fflush(stderr);
        m->line_open = m->tty;
        m->last_step = r->step;
    }
}

void metrics_format_progress(const metrics_step_rec *r, double el, bool tty, int width, char *buf,
                             size_t n)
{
    char step[48], epoch[32] = "", loss[32], acc[32], lr[32], rate[32], elapsed[32], eta[40] = "";
    char bar[32] = "";
    if (r->total_steps > 0)
        snprintf(step, sizeof step, "step %lld/%lld", (long long)r->step,
                 (long long)r->total_steps);
    else
        snprintf(step, sizeof step, "step %lld", (long long)r->step);
    if (r->epoch > 0 && r->total_epochs > 0)
        snprintf(epoch, sizeof epoch, "epoch %d/%d", r->epoch, r->total_epochs);
    else if (r->epoch > 0)
        snprintf(epoch, sizeof epoch, "epoch %d", r->epoch);
    snprintf(loss, sizeof loss, "loss %.4f", r->loss);
    snprintf(acc, sizeof acc, "acc %.3f", r->accuracy);
    snprintf(lr, sizeof lr, "lr %.3g", r->lr);
    snprintf(rate, sizeof rate, "%.0f img/s", r->images_per_sec);
    pst_format_duration(el, elapsed, sizeof elapsed);
    if (r->total_steps > r->step && r->step > r->start_step) {
        /* at this run's pace (a resumed run did its first steps earlier) */
        char d[24];
        pst_format_duration(el / (double)(r->step - r->start_step) *
                                (double)(r->total_steps - r->step),
                            d, sizeof d);
        snprintf(eta, sizeof eta, "ETA %s", d);
    }
    if (tty && r->total_steps > 0) {
        int fill = (int)(20.0 * (double)r->step / (double)r->total_steps);
        fill = PST_MIN(PST_MAX(fill, 0), 20);
        bar[0] = '[';
        memset(bar + 1, '#', (size_t)fill);
        memset(bar + 1 + fill, '.', (size_t)(20 - fill));
        bar[21] = ']';
        bar[22] = 0;
    }
    /* display order; prio: 0 kept, higher dropped first */
    const char *f[] = {step, bar, epoch, loss, acc, lr, rate, tty ? elapsed : NULL, eta};
    const int prio[] = {0, 6, 2, 0, 4, 7, 3, 8, 1};
    pst_fit_fields(buf, n, tty ? width : 0, "  ", f, prio, 9);
}

void metrics_note(metrics *m, const char *fmt, ...)
{
    if (!m || !m->progress) return;
    /* the whole line in one write: under mpirun the launcher forwards each
     * write as it comes, and a line written in pieces can have another
     * stream's line (the final line on stdout) land in its middle */
    char line[1024];
    size_t len = 0;
    if (m->tty) {
        if (m->line_open) /* the next redraw brings it back */
            len = (size_t)snprintf(line, sizeof line, "\r\033[K");
    } else {
        char t[32];
        pst_format_duration(pst_now() - m->t0, t, sizeof t);
        len = (size_t)snprintf(line, sizeof line, "[%8s] ", t);
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + len, sizeof line - len - 1, fmt, ap);
    va_end(ap);
    len = n < 0 ? len : PST_MIN(len + (size_t)n, sizeof line - 2);
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
    fflush(stderr);
    m->line_open = false;
}

void metrics_eval(metrics *m, int64_t step, int epoch, const char *split, const eval_stats *ev)
{
    if (m->tb) tensorboard_eval(m->tb, step, split, ev);
    if (m->f) {
        fprintf(m->f, "{\"type\":\"eval\",\"step\":%lld,\"epoch\":%d,\"split\":\"%s\",",
                (long long)step, epoch, split);
        jnum(m->f, "accuracy", ev->accuracy, true);
        jnum(m->f, "top5_accuracy", ev->top5_accuracy, true);
        jnum(m->f, "loss", ev->loss, true);
        fprintf(m->f, "\"examples\":%lld}\n", (long long)ev->examples);
        flush_record(m);
    }
    /* the progress line stays above it on a terminal */
    if (m->progress && m->line_open) fputc('\n', stderr);
    m->line_open = false;
    metrics_note(
        m, "eval %s: step %lld, epoch %d: accuracy %.4f, top-5 %.4f, loss %.4f, %lld examples",
        split, (long long)step, epoch, ev->accuracy, ev->top5_accuracy, ev->loss,
        (long long)ev->examples);
}

int metrics_finish(metrics *m, pst_err *e)
{
    if (!m) return 0;
    tb_close(m->tb); /* a write error there is a warning (tboard.h) */
    m->tb = NULL;
    if (!m->f) return 0;
    flush_record(m);
    errno = 0;
    if (fclose(m->f) != 0 && !m->err) m->err = errno ? errno : EIO;
    m->f = NULL;
    if (m->err)
        return pst_fail(e,
                        "%s: write error on the metrics file: %s (the records from then on are "
                        "missing)",
                        m->path, strerror(m->err));
    return 0;
}

void metrics_close(metrics *m)
{
    if (!m) return;
    if (m->line_open) fputc('\n', stderr);
    if (m->f) fclose(m->f);
    tb_close(m->tb);
    free(m->path);
    free(m);
}
