/*
 * pstrain/metrics.h - the --metrics FILE.jsonl log and the progress line.
 *
 * One JSON object per line: {"type":"step", step, epoch, loss, accuracy, lr,
 * images_per_sec, elapsed, timing:{...}} every logging interval, and
 * {"type":"eval", step, epoch, split, accuracy, loss, examples} for every
 * evaluation. Lines are flushed as written so a killed job keeps its log.
 * A NULL path gives a metrics handle that only prints the progress line.
 * Not thread-safe; called by the reporting rank only.
 */
#ifndef PSTRAIN_METRICS_H
#define PSTRAIN_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "pstrain/common.h"

/* Per-role time breakdown in seconds, summed over the run. */
typedef struct worker_timing {
    double wait_data, pull, compute, push, wait_version;
} worker_timing;
typedef struct ps_timing {
    double apply, idle;
    double cpu; /* CPU seconds of the PS process (distributed runs) */
} ps_timing;

typedef struct metrics metrics;

typedef struct metrics_step_rec {
    int64_t step, total_steps; /* total_steps 0 if unknown */
    int epoch;
    double loss, accuracy, lr, images_per_sec;
    /* optional timing breakdown (seconds per step, mean over workers) */
    const worker_timing *worker; /* may be NULL */
    const ps_timing *ps;         /* may be NULL */
} metrics_step_rec;

int metrics_open(metrics **out, const char *path, bool progress, pst_err *e);
/* The same, appending to an existing file (a resumed run continues its
 * log). `elapsed` in step lines counts from this call. */
int metrics_open_append(metrics **out, const char *path, bool progress, pst_err *e);
void metrics_step(metrics *m, const metrics_step_rec *r);
void metrics_eval(metrics *m, int64_t step, int epoch, const char *split, double accuracy,
                  double loss, int64_t examples);
/* Ends the progress line; closes the file. NULL-safe. */
void metrics_close(metrics *m);

#endif
