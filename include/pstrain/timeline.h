/*
 * timeline.h - the --timeline recorder: each process buffers what it spends
 * its time on (a worker's step phases, a PS's applies and idle stretches,
 * the root's batch publications, checkpoints and evaluations) as complete
 * events, and one process writes them all as a Chrome trace-event file
 * (JSON object format, opened by Perfetto and chrome://tracing;
 * docs/operations.md, "Timeline").
 *
 * Recording is process-wide and for one thread: tl_start turns it on, and
 * tl_add costs one branch while it is off, so call sites need no flag of
 * their own. Times are pst_now() seconds on this process's clock; the writer
 * shifts each process by the offset it is given (the distributed trainer
 * measures them against the root: src/cluster/dist_timeline.c). The buffer
 * is bounded: events past the cap are counted as dropped, not stored.
 */
#ifndef PSTRAIN_TIMELINE_H
#define PSTRAIN_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pstrain/common.h"

/* What an event is. Each kind has a name and a lane (the trace's thread)
 * within its process: tl_kind_name, tl_kind_lane. */
typedef enum tl_kind {
    TL_WAIT_DATA,    /* worker: waiting for a batch from the ring (arg: ticket) */
    TL_PULL,         /* worker: reading the variables from the PS (arg: ticket) */
    TL_COMPUTE,      /* worker: forward and backward (arg: ticket) */
    TL_PUSH,         /* worker: sending the gradient (arg: ticket) */
    TL_WAIT_VERSION, /* worker, sync: waiting for the version it needs (arg: ticket) */
    TL_APPLY,        /* PS: one update applied (arg: version or gradients applied);
                        single process: the optimizer step (arg: step) */
    TL_IDLE,         /* PS: between two applies, waiting for gradients */
    TL_WAIT_INPUT,   /* root: waiting for the input pipeline's next batch */
    TL_PUBLISH,      /* root: a batch written into the ring (arg: ticket) */
    TL_CHECKPOINT,   /* root / single process: a checkpoint written (arg: step) */
    TL_EVAL,         /* root / single process: an evaluation (arg: step) */
    TL_NKINDS
} tl_kind;

/* One buffered event: the record that ranks gather (same layout on every
 * rank of one build). */
typedef struct tl_event {
    double t0, t1; /* pst_now() seconds, local clock */
    int64_t arg;
    int32_t kind; /* tl_kind */
    int32_t pad;
} tl_event;

/* The recorder's switch: read by tl_add, set by tl_start/tl_stop only. */
extern bool tl_recording;

/* Turns recording on, with room for up to `cap` events (0: the default,
 * 1 << 20, or the environment variable PSTRAIN_TIMELINE_MAX_EVENTS).
 * Discards anything recorded before. */
void tl_start(size_t cap);
/* Turns recording off and frees the buffer. */
void tl_stop(void);

void tl_record(tl_kind kind, double t0, double t1, int64_t arg);
/* Records an event [t0, t1] while recording is on; a branch otherwise. */
static inline void tl_add(tl_kind kind, double t0, double t1, int64_t arg)
{
    if (__builtin_expect(tl_recording, 0)) tl_record(kind, t0, t1, arg);
}
/* pst_now() while recording, else 0 (a timestamp only the timeline needs). */
static inline double tl_now(void)
{
    return __builtin_expect(tl_recording, 0) ? pst_now() : 0;
}

/* The events recorded so far (in recording order), their number and how
 * many did not fit. */
const tl_event *tl_events(size_t *n, int64_t *dropped);

const char *tl_kind_name(tl_kind kind);

/* One process of the trace: its events and how to place them. */
typedef struct tl_proc {
    char name[160]; /* "rank 2 worker 0 @host" */
    int pid;        /* the trace's process id (the MPI rank) */
    int nlanes;     /* lanes named lane_names[0..nlanes) */
    const char *lane_names[4];
    const tl_event *ev;
    size_t n;
    int64_t dropped;
    double offset; /* added to every time: this clock -> the reference clock */
} tl_proc;

/* The lane of an event kind within its process. */
int tl_kind_lane(tl_kind kind);

/* Writes the trace of procs[0..nprocs) to `path` through a temporary and a
 * rename (pst_out_fopen): {"traceEvents": [...], "displayTimeUnit": "ms",
 * "otherData": {...}}, times in microseconds from `origin` (reference
 * clock seconds; events are sorted by start within each lane). 0, or -1
 * with e naming the path; a previous file is then unchanged. */
int tl_write(const char *path, const tl_proc *procs, int nprocs, double origin, pst_err *e);

#endif
