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

/* Formats seconds as "1h02m", "3m05s" or "12.3s" (at most "99999h59m"). */
void pst_format_duration(double seconds, char *buf, size_t n);

#endif
