/* progress.c - terminal progress bar or periodic log lines. */
#include "pstrain/progress.h"

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
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

int pst_term_width(int fd)
{
    struct winsize ws;
    if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    const char *c = getenv("COLUMNS");
    int w = 0;
    if (c && pst_parse_int(c, &w) == 0 && w > 0) return w;
    return 80;
}

void pst_fit_fields(char *buf, size_t n, int width, const char *sep, const char *const *fields,
                    const int *prio, int nfields)
{
    bool keep[32];
    nfields = PST_MIN(nfields, 32);
    size_t total = 0;
    int shown = 0;
    for (int i = 0; i < nfields; i++) {
        keep[i] = fields[i] && fields[i][0];
        if (keep[i]) total += strlen(fields[i]), shown++;
    }
    const size_t nsep = strlen(sep);
    /* drop the least important field until the line fits in width - 1 */
    while (width > 0 && total + (shown > 1 ? (size_t)(shown - 1) * nsep : 0) >= (size_t)width) {
        int worst = -1;
        for (int i = 0; i < nfields; i++)
            if (keep[i] && prio[i] > 0 && (worst < 0 || prio[i] >= prio[worst])) worst = i;
        if (worst < 0) break;
        keep[worst] = false;
        total -= strlen(fields[worst]);
        shown--;
    }
    size_t len = 0;
    buf[0] = 0;
    for (int i = 0; i < nfields && len + 1 < n; i++) {
        if (!keep[i]) continue;
        int w = snprintf(buf + len, n - len, "%s%s", len ? sep : "", fields[i]);
        if (w < 0) break;
        len = PST_MIN(len + (size_t)w, n - 1);
    }
    if (width > 0 && len >= (size_t)width && (size_t)width - 1 < n) buf[width - 1] = 0;
}

void pst_progress_format(const pst_progress *p, int64_t done, const char *extra, double el,
                         bool final, bool tty, int width, char *buf, size_t n)
{
    double rate = el > 0 ? (double)done / el : 0;
    char eta[40] = "", elapsed[32], count[64], speed[64];
    pst_format_duration(el, elapsed, sizeof elapsed);
    if (p->total > 0 && rate > 0 && !final) {
        char d[24];
        pst_format_duration((double)(p->total - done) / rate, d, sizeof d);
        snprintf(eta, sizeof eta, "ETA %s", d);
    }
    if (p->total > 0)
        snprintf(count, sizeof count, "%lld/%lld %s", (long long)done, (long long)p->total,
                 p->unit);
    else
        snprintf(count, sizeof count, "%lld %s", (long long)done, p->unit);
    snprintf(speed, sizeof speed, "%.0f %s/s", rate, p->unit);
    if (!tty) {
        /* a log line: everything, in the order of the terminal's line */
        const char *f[] = {count, speed, elapsed, eta, extra};
        const int prio[] = {0, 0, 0, 0, 0};
        char body[256];
        pst_fit_fields(body, sizeof body, 0, ", ", f, prio, 5);
        snprintf(buf, n, "%s: %s", p->label, body);
        return;
    }
    /* label, [bar], count, rate, elapsed, ETA, extra: the bar takes what the
     * rest leaves, 10 to 30 characters, or goes */
    const char *f[] = {p->label, count, speed, elapsed, eta, extra};
    const int prio[] = {0, 0, 3, 4, 1, 5};
    char body[256];
    pst_fit_fields(body, sizeof body, width, "  ", f, prio, 6);
    int room = width - 1 - (int)strlen(body) - 3; /* " [" + bar + "]" */
    int bw = p->total > 0 ? PST_MIN(room, 30) : 0;
    if (bw < 10) {
        snprintf(buf, n, "%s", body);
        return;
    }
    char bar[32];
    int fill = (int)((double)bw * (double)done / (double)p->total);
    fill = PST_MIN(PST_MAX(fill, 0), bw);
    memset(bar, '#', (size_t)fill);
    memset(bar + fill, '.', (size_t)(bw - fill));
    bar[bw] = 0;
    /* the bar after the label */
    size_t nl = strlen(p->label);
    snprintf(buf, n, "%s [%s]%s", p->label, bar, body + nl);
}

static void draw(pst_progress *p, int64_t done, const char *extra, bool final)
{
    double now = pst_now();
    char line[512];
    pst_progress_format(p, done, extra, now - p->t_start, final, p->tty,
                        p->tty ? pst_term_width(fileno(p->out)) : 0, line, sizeof line);
    if (p->tty)
        fprintf(p->out, "\r\033[K%s%s", line, final ? "\n" : "");
    else
        fprintf(p->out, "%s\n", line);
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
