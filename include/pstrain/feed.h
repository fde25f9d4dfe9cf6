/*
 * pstrain/feed.h - the batch ring in the root's RMA window: how different
 * workers see different parts of the data (docs/design.md §3).
 *
 * The root (rank `root` of the communicator) owns one MPI_Win_allocate
 * window holding
 *   header:  head (next ticket), step (async global step), finished (workers
 *            that are done), and a report record per rank (progress numbers
 *            the root reads for metrics);
 *   K slots: {seq, release, epoch, count} + ids int64[B] + labels int32[B]
 *            + pixels uint8[B*H*W*C].
 * Every rank holds MPI_Win_lock_all(MPI_MODE_NOCHECK) for the window's life.
 *
 * Protocol (no compare-and-swap at all):
 *   worker: t = MPI_Fetch_and_op(1, MPI_SUM, head); slot k = t mod K;
 *           poll slot k's seq with MPI_Get + flush (with back-off) until
 *           seq == t+1; MPI_Get the slot; MPI_Accumulate(t+1, MPI_REPLACE)
 *           into its release word. A slot with count 0 is the end of data:
 *           the worker stops taking tickets.
 *   root:   slot k may carry ticket t+K once release == t+1 (or was never
 *           used); it writes the payload, epoch and count, MPI_Win_sync,
 *           then seq = t+1 (written after the data: a worker that sees the
 *           seq sees the data). Tickets >= total get end-of-data slots.
 *           Between polls it calls MPI_Iprobe (progress on every transport)
 *           and sleeps with exponential back-off (to ~1 ms) when idle.
 * Tickets are dense and each is taken once, so each batch goes to exactly
 * one worker: every example exactly once per epoch across all workers.
 *
 * Several feeders (F > 1, geometry nfeeders), the global counter: the
 * ticket counter stays in the root's header, and ticket t lives in feeder
 * t mod F's K slots (slot (t div F) mod K of the same window on that rank;
 * the root is feeder 0). Each feeder publishes only its own tickets, in
 * order, dropping the source's batches of the other feeders' tickets, so
 * ticket t carries the same batch whatever F is. The root grants
 * publication with two header words that feeders read atomically: limit
 * (feeders publish data only below it; the root keeps it at head + F*K,
 * under total) and total (-1 unknown; tickets >= total get end markers). A
 * stop lowers total to no less than the limit already granted, written
 * before the new limit, so no feeder has published data at or beyond a
 * total it is told.
 *
 * Local counters (F > 1 with geometry attach, which lockstep sync and async
 * give):
 * each worker is attached to one feeder (attach[rank]); W_f workers to
 * feeder f, c_f = W_0 + ... + W_{f-1}. Feeder f has its own counter
 * (header word LHEAD of its part of the window): a worker attached to f
 * takes local ticket j there, which is the global ticket
 *   t = first_ticket + (j div W_f)*W + c_f + (j mod W_f),
 * in slot j mod K of feeder f. So feeder f serves positions c_f .. c_f +
 * W_f - 1 of every W consecutive tickets (one version of lockstep sync),
 * the map is a bijection onto the tickets, monotone in j, and ticket t
 * still carries the same batch. The limit is granted in global tickets:
 * head + F*K with head the first ticket not yet taken (the least of
 * g_f(counter of f), which the root reads atomically), and a stop works as
 * above. Feeder f publishes W_f end markers, from local_at(total) on.
 *
 * Moving on (local counters with geometry move_on, which async gives):
 * groups take at their own pace. A worker that gets an end marker from a
 * feeder moves on to the next feeder with W_f > 0 (in index order,
 * cyclically) and takes from its counter until that one gives it an end
 * marker too; it is done (feed_take returns 0) when every feeder with
 * W_f > 0 has given it one. So no worker idles while data remains, every
 * data ticket below the total is taken, and each such feeder publishes W
 * end markers (one per worker). The grant does not couple the groups: the
 * limit is the greatest g_f(counter of f) over the feeders with W_f > 0,
 * plus K*W (K local tickets of one feeder reach at most K*W global tickets
 * ahead), under total; it only grows, so a stop works as above.
 *
 * Only the main thread calls MPI (MPI_THREAD_FUNNELED).
 */
#ifndef PSTRAIN_FEED_H
#define PSTRAIN_FEED_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "pstrain/common.h"
#include "pstrain/pipeline.h"

#define FEED_REPORT_WORDS 16 /* doubles per rank's report record */

typedef struct feed_geom {
    int batch;               /* B */
    int64_t example_bytes;   /* H*W*C */
    int nslots;              /* K >= 1 */
    int nworkers;            /* workers that will take tickets (for `finished`) */
    int64_t first_ticket;    /* resume: the first ticket handed out (0) */
    int64_t first_step;      /* resume: the async global step counter's start (0) */
    int nfeeders;            /* F: ranks holding ring slots (0 or 1: the root alone) */
    const int *feeder_ranks; /* F ranks of comm, [0] = root (unused when F <= 1) */
    /* F > 1: NULL (the global counter), or per rank of comm the feeder index
     * it takes tickets from (workers: 0 .. F-1, nworkers of them; others:
     * -1): local counters. */
    const int *attach;
    /* local counters: a worker whose feeder gave it an end marker moves on
     * to the other feeders' counters (async: groups drift apart) */
    bool move_on;
} feed_geom;

typedef struct feed feed;

/* Creates the ring: collective over comm; the window memory lives on
 * `root`. Returns 0, or -1 with a message (nothing to free). */
int feed_new(feed **out, MPI_Comm comm, int root, const feed_geom *g, pst_err *e);
/* Ends the access epoch and frees the window: collective. NULL-safe only
 * when every rank passes NULL. */
void feed_free(feed *f);

/* ---- root side ---- */

/* What the root's service loop calls, all on the root's main thread:
 *   source: the next batch: 1 with *b filled, 0 at the end, -1 on error;
 *   poll:   (may be NULL) every iteration, for other duties (checkpoint
 *           messages, stop requests): 1 if it did work, 0 if not, -1 on error;
 *   tick:   (may be NULL) every tick_secs (metrics). */
typedef struct feed_hooks {
    int (*source)(void *ctx, pipe_batch *b, pst_err *e);
    int (*poll)(void *ctx, pst_err *e);
    void (*tick)(void *ctx);
    void *ctx;
    double tick_secs;
} feed_hooks;

typedef struct feed_serve_stats {
    int64_t batches;     /* data batches published */
    int64_t end_markers; /* end-of-data slots published */
    double wall, cpu;    /* seconds in the loop; CPU seconds of this thread */
    double source_wait;  /* seconds inside the source (pipe_next) */
} feed_serve_stats;

/* Serves tickets until all nworkers have called feed_finish: tickets below
 * `total` (absolute; -1: until the source ends) carry the source's batches,
 * later ones end-of-data markers. Returns 0, or -1 when the source or the
 * poll hook fails (the caller must abort the job: workers are waiting). */
int feed_root_serve(feed *f, int64_t total, const feed_hooks *h, feed_serve_stats *st, pst_err *e);
/* Root, from a hook: a ticket no rank has published yet, and none will
 * before the root publishes or grants again: the next one the root
 * publishes (global counter: all below it are published), or with local
 * counters and no worker attached to the root, the limit. */
int64_t feed_root_next_ticket(const feed *f);
/* Root, from a hook: with local counters the first ticket not yet taken
 * (every ticket below it is in a worker's hands or done, whatever the
 * groups' pace); with the global counter feed_root_next_ticket (the ring's
 * K slots then hold the last tickets not yet read). */
int64_t feed_root_taken_end(feed *f);
/* Root, from a hook: publish data only below `total` (never below the next
 * ticket, never raising an earlier limit): how a stop is made. */
void feed_root_set_total(feed *f, int64_t total);
/* Root: the current limit (-1: none; lowered when the source ends early). */
int64_t feed_root_total(const feed *f);
/* Root: the first ticket that no feeder may have published data for yet
 * (F = 1: the next ticket; F > 1: also the limit granted): a stop's total
 * is never below it. */
int64_t feed_root_published_end(const feed *f);

/* The report record of `rank` in the root's window (root only; values are
 * whatever the rank last put there, 0 initially). */
const double *feed_report_of(const feed *f, int rank);

/* Feeders 1..F-1: serve this rank's tickets (source: the batches of every
 * ticket from the geometry's first_ticket on, in order) until all workers
 * have finished, under the root's limit and total. Returns 0 or -1 as
 * feed_root_serve. */
int feed_feeder_serve(feed *f, const feed_hooks *h, feed_serve_stats *st, pst_err *e);

/* ---- worker side ---- */

typedef struct feed_batch {
    int64_t ticket;
    int epoch;
    int count; /* 0 = end of data */
    const int64_t *ids;
    const int32_t *labels;
    const uint8_t *pixels; /* count * example_bytes */
} feed_batch;

/* Takes the next ticket and waits for its batch. Returns 1 with *b filled
 * (valid until the next call), or 0 at the end of data (move_on: the last
 * feeder's end marker; the ones before it are not returned). MPI failures are
 * fatal. `wait` (may be NULL) accumulates seconds spent waiting for data. */
int feed_take(feed *f, feed_batch *b, double *wait);
/* Tells the root this worker takes no more tickets. */
void feed_finish(feed *f);
/* Async mode's global step counter: returns the value before adding 1. */
int64_t feed_next_step(feed *f);
/* The same counter's value, unchanged (staleness: the steps drawn between a
 * worker's pull and its own update). */
int64_t feed_global_step(feed *f);
/* Puts this rank's report record (n <= FEED_REPORT_WORDS doubles) into the
 * root's window; completes with the next flush (feed_take) or feed_flush. */
void feed_report(feed *f, const double *vals, int n);
void feed_flush(feed *f);

/* Bytes of one slot (for bandwidth numbers). */
int64_t feed_slot_bytes(const feed *f);

#endif
