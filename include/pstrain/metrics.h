/*
 * pstrain/metrics.h - the --metrics FILE.jsonl log and the progress line.
 *
 * One JSON object per line: {"type":"step", step, epoch, loss, accuracy, lr,
 * images_per_sec, elapsed, timing:{...}} every logging interval, and
 * {"type":"eval", step, epoch, split, accuracy, top5_accuracy, loss,
 * examples} for every evaluation. Lines are flushed as written so a killed job keeps its log.
 * The same records can go to TensorBoard event files (metrics_tensorboard).
 * A NULL path gives a metrics handle that only prints the progress line.
 * Not thread-safe; called by the reporting rank only.
 *
 * One epoch convention everywhere: `epoch` is the 1-based number of the
 * epoch the step belongs to (an evaluation: of the last step before it),
 * shown as "epoch 3/4". On a terminal the progress line is redrawn in place
 * and fits its width (metrics_format_progress); in a log (stderr not a
 * terminal) every line starts with the time since the start, "[  1m02s] ".
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

/* One evaluation of a split: top-1 and top-5 accuracy (train_topk_correct
 * says how ties and K < 5 count), mean loss, the examples evaluated. */
typedef struct eval_stats {
    double accuracy, top5_accuracy, loss;
    int64_t examples;
} eval_stats;

typedef struct metrics_step_rec {
    int64_t step, total_steps; /* total_steps 0 if unknown */
    int64_t start_step;        /* where this run began (a resumed run: > 0), for the ETA */
    int epoch, total_epochs;   /* 1-based; total_epochs 0 if unknown */
    double loss, accuracy, lr, images_per_sec;
    /* optional timing breakdown (seconds per step, mean over workers) */
    const worker_timing *worker; /* may be NULL */
    const ps_timing *ps;         /* may be NULL */
} metrics_step_rec;

int metrics_open(metrics **out, const char *path, bool progress, pst_err *e);
/* The same, appending to an existing file (a resumed run continues its
 * log). `elapsed` in step lines counts from this call. */
int metrics_open_append(metrics **out, const char *path, bool progress, pst_err *e);
/* Also writes every step and eval record to a new TensorBoard event file in
 * `dir` (tboard.h; NULL: none): the scalars train/{loss, accuracy, lr,
 * images_per_sec}, timing/{wait_data, pull, compute, push, wait_version,
 * ps_apply, ps_idle} (those the record has) and eval/SPLIT/{accuracy,
 * top5_accuracy, loss}. `start_step` > 0: a resumed run, from that step.
 * -1 with `e` naming the file when it cannot be created. */
int metrics_tensorboard(metrics *m, const char *dir, int64_t start_step, pst_err *e);
void metrics_step(metrics *m, const metrics_step_rec *r);
/* The progress line of `r`, `elapsed` seconds into the run, for a terminal
 * of `width` columns (tty: shorter than width, the least important fields
 * dropped first: elapsed time, lr, bar, accuracy, images/s, ETA, epoch) or
 * a log line (!tty: every field, no elapsed time, no bar). */
void metrics_format_progress(const metrics_step_rec *r, double elapsed, bool tty, int width,
                             char *buf, size_t n);
/* A line between progress lines ("checkpoint F (step S)"): ends the
 * terminal's progress line first; in a log it carries the time prefix. */
void metrics_note(metrics *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void metrics_eval(metrics *m, int64_t step, int epoch, const char *split, const eval_stats *ev);
/* Closes the file at the end of a successful run: -1 with `e` naming the
 * file and the error when any record could not be written (a full disk),
 * so that the run fails instead of leaving a truncated log. NULL-safe. */
int metrics_finish(metrics *m, pst_err *e);
/* Ends the progress line; closes the file (if metrics_finish did not).
 * NULL-safe. */
void metrics_close(metrics *m);

#endif
