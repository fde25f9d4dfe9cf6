/* progress.c - terminal progress bar or periodic log lines. */
#include "pstrain/progress.h"

#include <string.h>
#include <unistd.h>

#include "pstrain/common.h"

void pst_format_duration(double s, char *buf, size_t n)
{
    if (s < 0 || s != s) s = 0;
    /* an ETA can be astronomic (--steps 4e18): converting it to int would be
     * undefined; 99999h59m says "forever" well enough */
    if (s > 99999.0 * 3600 + 59 * 60) s = 99999.0 * 3600 + 59 * 60;
    if (s < 60)
        snprintf(buf, n, "%.1fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)(s / 3600), ((int)s % 3600) / 60);
}

void pst_progress_start(pst_progress *p, const char *label, const char *unit, int64_t total)
{
    memset(p, 0, sizeof *p);
    p->out = stderr;
    p->tty = isatty(fileno(stderr));
    snprintf(p->label, sizeof p->label, "%s", label);
    p->unit = unit;
    p->total = total;
    p->t_start = p->t_last = pst_now();
    p->interval = p->tty ? 0.1 : 10.0;
}

static void draw(pst_progress *p, int64_t done, const char *extra, bool final)
{
    double now = pst_now(), el = now - p->t_start;
    double rate = el > 0 ? (double)done / el : 0;
    char eta[32] = "", elapsed[32];
    pst_format_duration(el, elapsed, sizeof elapsed);
    if (p->total > 0 && rate > 0 && !final) {
        char d[24];
        pst_format_duration((double)(p->total - done) / rate, d, sizeof d);
        snprintf(eta, sizeof eta, " ETA %s", d);
    }
    if (p->tty) {
        char bar[31] = "";
        if (p->total > 0) {
            int fill = (int)(30.0 * (double)done / (double)p->total);
            fill = PST_MIN(PST_MAX(fill, 0), 30);
            memset(bar, '#', (size_t)fill);
            memset(bar + fill, '.', (size_t)(30 - fill));
            bar[30] = 0;
        }
        fprintf(p->out, "\r\033[K%s [%s] %lld", p->label, bar, (long long)done);
        if (p->total > 0) fprintf(p->out, "/%lld", (long long)p->total);
        fprintf(p->out, " %s  %.0f %s/s  %s%s%s%s", p->unit, rate, p->unit, elapsed, eta,
                extra ? "  " : "", extra ? extra : "");
        if (final) fputc('\n', p->out);
    } else {
        fprintf(p->out, "%s: %lld", p->label, (long long)done);
        if (p->total > 0) fprintf(p->out, "/%lld", (long long)p->total);
        fprintf(p->out, " %s, %.0f %s/s, %s%s%s%s\n", p->unit, rate, p->unit, elapsed, eta,
                extra ? ", " : "", extra ? extra : "");
    }
    fflush(p->out);
    p->t_last = now;
}

void pst_progress_update(pst_progress *p, int64_t done, const char *extra)
{
    if (pst_now() - p->t_last < p->interval) return;
    draw(p, done, extra, false);
}

void pst_progress_finish(pst_progress *p, int64_t done, const char *extra)
{
    draw(p, done, extra, true);
}
