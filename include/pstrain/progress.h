/*
 * pstrain/progress.h - progress reporting for long-running work.
 *
 * On a terminal: one line redrawn in place (bar, count, rate, ETA). When
 * stderr is not a TTY (batch jobs, logs): a plain line every `interval`
 * seconds, so that job logs stay readable. Not thread-safe: call from one
 * thread.
 */
#ifndef PSTRAIN_PROGRESS_H
#define PSTRAIN_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct pst_progress {
    FILE *out;
    bool tty;
    char label[64];
    const char *unit; /* "images", "steps" */
    int64_t total;    /* 0 if unknown */
    double t_start, t_last, interval;
} pst_progress;

/* Starts reporting on stderr. `total` may be 0 (unknown). */
void pst_progress_start(pst_progress *p, const char *label, const char *unit, int64_t total);
/* Reports `done` units so far; cheap when nothing is due (rate-limited). `extra`
 * (may be NULL) is appended, e.g. "loss 0.412". */
void pst_progress_update(pst_progress *p, int64_t done, const char *extra);
/* Final line with the total time and mean rate. */
void pst_progress_finish(pst_progress *p, int64_t done, const char *extra);

/* The line of pst_progress_update/finish for a terminal of `width` columns
 * (tty) or a log (!tty: no bar, no width limit), `elapsed` seconds after
 * the start. On a terminal the line never reaches the last column (a line
 * as wide as the terminal wraps, and every redraw would stack a new one):
 * the bar shrinks from 30 to 10 characters and then goes, then the extra
 * text, the elapsed time, the rate and the ETA, in that order. */
void pst_progress_format(const pst_progress *p, int64_t done, const char *extra, double elapsed,
                         bool final, bool tty, int width, char *buf, size_t n);

/* The width of the terminal on `fd` (TIOCGWINSZ), else $COLUMNS, else 80. */
int pst_term_width(int fd);

/* Joins fields[0..n) with `sep` into buf, dropping fields until the line
 * is shorter than `width` columns (width <= 0: no limit): the one with the
 * highest prio first (prio 0 is never dropped; the line is cut if those
 * alone are too long). Fields that are NULL or "" are skipped. */
void pst_fit_fields(char *buf, size_t n, int width, const char *sep, const char *const *fields,
                    const int *prio, int nfields);

/* Formats seconds as "1h02m", "3m05s" or "12.3s" (at most "99999h59m"). */
void pst_format_duration(double seconds, char *buf, size_t n);

#endif
