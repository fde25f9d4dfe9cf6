/*
 * pstrain/ps.h - parameter-server shards in RMA windows, and the worker's
 * side of the sync and async protocols (docs/design.md §3).
 *
 * PS p (0-based) is rank ps_ranks[p] of the window's communicator (the
 * roles come from the caller's communicators: src/cluster/dist.c).
 * One MPI_Win_allocate window over the communicator; each PS exposes
 *   ctl:     int64 lockseq (2*version; odd while the PS writes parameters),
 *            done (1 once the step limit is reached), stop_t and ckpt_at
 *            (requests from the root)
 *   stamps:  per slot 64 bytes: int64 seq, version, ticket, count, step, ack
 *   params:  its shard: the plan's ranges back to back (place_range.ps_offset)
 *   copy:    with --comm-dtype bf16, the shard's params in the wire layout
 *            (trainable ranges rounded to bf16 by bf16.h, batch-norm
 *            statistics float32), refreshed by the PS block by block as it
 *            applies an update (sync: inside the seqlock of the version):
 *            what workers pull
 *   grads:   W shard-sized gradient slots (sync mode, and async mode with a
 *            stateful optimizer, moving averages or bf16); float32, or the
 *            wire layout under --comm-dtype bf16, which the PS widens exactly
 *            to float32 before it sums them (in ticket order) and applies them
 *   averages: with --moving-average-decay, the moving averages of the shard
 *            (its layout as params), updated by the PS after every update it
 *            applies (sync: inside the seqlock of the version, with
 *            num_updates = the new version; async: num_updates = the global
 *            step the worker drew + 1)
 * Every rank holds MPI_Win_lock_all(MPI_MODE_NOCHECK) for the run.
 *
 * Sync (SyncReplicasOptimizer): a worker pulls every PS's ranges with
 * MPI_Get under the seqlock (lockseq equal and even before and after), trains,
 * MPI_Puts its gradient (and the new batch-norm statistics) into a slot,
 * flushes, puts {version, ticket, count, step}, flushes, and finally puts
 * seq: the stamp is written after the data. The PS takes R fresh gradients
 * (stamp version == its version; first R by arrival), counts the others as
 * dropped_stale, sums the taken ones in ticket order, divides by their
 * number, applies the optimizer to its trainable ranges and copies the
 * averaged new statistics into the non-trainable ranges, then bumps its
 * version.
 *   R == W (the default, "lockstep"): a run starts at version V0 and data
 * cursor t0 (0 and 0; on resume the checkpoint's global_step and
 * next_batch, whatever worker count wrote it). Version V0+k is made of
 * exactly the tickets [t0+kW, t0+kW+W) (T total: the last version may have
 * fewer), whatever the timing: the gradient of ticket t goes to slot
 * (t-t0) mod W, stamped with version V0+(t-t0)/W; a worker holding ticket t
 * waits until every PS reached that version, then pulls (no update can
 * start before its own gradient arrives). The data cursor of version v is
 * t0 + (v-V0)W: a checkpoint records it in batches (tickets), never as a
 * multiple of the version, so a run resumed with another W continues with
 * the next unconsumed batch and groups W' batches a version from there. A fast worker may take
 * several tickets of one version (dynamic load balance). The sum order is the ticket order, so the
 * final variables are bitwise reproducible for any number of PS, placement, transport or timing.
 * The PS stops after ceil(T/W) versions. R < W (backup workers): slot = worker; a worker waits for
 * a newer version on every PS before it takes its next ticket and pulls under the seqlock. Every
 * version still applies R fresh gradients (fewer only when the data ends) in ticket order and no
 * gradient is applied twice, but which tickets are taken depends on arrival order, and each PS
 * chooses independently: runs are not reproducible. With --steps S the PS raise `done` after S
 * versions and the workers stop.
 *
 * Async: with plain SGD (and no moving averages, fp32 transfers) the worker MPI_Accumulates
 * -lr*g (MPI_SUM) straight into the parameters and MPI_REPLACEs the new
 * statistics; the PS only serves progress. With stateful optimizers the worker puts its gradient
 * into its slot (waiting first until the PS acknowledged the previous one)
 * and the PS applies each gradient as it arrives with lr from the global step
 * the worker drew. Gets may see a mix of old and new elements (Hogwild).
 *
 * End (except lockstep): a worker that is done puts an end stamp (count -1)
 * into its slot on every PS. A PS serves until every worker has ended.
 */
#ifndef PSTRAIN_PS_H
#define PSTRAIN_PS_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "pstrain/common.h"
#include "pstrain/optim.h"
#include "pstrain/placement.h"
#include "pstrain/train.h" /* train_mode */

typedef struct ps_shard ps_shard;

typedef struct ps_layout {
    const int *ps_ranks; /* rank of PS p, p < the plan's nps (copied) */
    int nworkers;
    bool grad_slots; /* sync, or async with a stateful optimizer */
    bool lockstep;   /* sync with R == W: slot = ticket mod W (see above) */
    bool bf16;       /* --comm-dtype bf16: workers pull the bf16 copy, push bf16 */
    int root_rank;   /* where snapshots go */
    /* optimizer slots of the shards: their kind, and the full-slab slot
     * arrays to start from (slot k of element j at k*init_slot_stride + j; NULL:
     * the optimizer's initial values) */
    opt_cfg opt;
    const float *init_slots;
    size_t init_slot_stride;
    /* --moving-average-decay (0: none) and the full-slab averages to start
     * from (NULL: the initial parameters) */
    float ema_decay;
    const float *init_averages;
    /* resume: the version the run starts at, and (lockstep) the ticket of
     * that version's first gradient */
    int64_t first_version, first_ticket;
} ps_layout;

/* Creates the window: collective over comm. On PS ranks `init` is the
 * model's full initial parameter slab, copied into the shard. The plan must
 * outlive the handle. Returns 0 or -1 with a message. */
int ps_new(ps_shard **out, MPI_Comm comm, const place_plan *plan, const ps_layout *lay,
           const float *init, pst_err *e);
/* Collective. */
void ps_free(ps_shard *s);

/* ---- PS side ---- */

typedef struct ps_serve_cfg {
    train_mode mode;
    int replicas; /* R (sync), 1..nworkers */
    opt_cfg opt;
    lr_schedule sched;
    int64_t max_versions;  /* sync: stop after this many updates (0 = no limit) */
    int64_t total_tickets; /* lockstep: batches published (T); the PS stops
                              after ceil(T/W) versions */
    int64_t ckpt_every;    /* lockstep: snapshot to the root every N versions */
    int threads;           /* optimizer threads over the shard (<= 1: this one) */
    /* Called about every report_secs with the PR_N words of the PS report
     * record (below); may be NULL. */
    void (*report)(void *ctx, const double *vals, int n);
    void *report_ctx;
    double report_secs;
} ps_serve_cfg;

/* The PS report record: version, gradients applied, stale ones dropped,
 * seconds applying, seconds idle, CPU seconds. */
enum { PR_VERSION, PR_APPLIED, PR_DROPPED, PR_APPLY, PR_IDLE, PR_CPU, PR_N };

typedef struct ps_serve_stats {
    int64_t version;       /* sync: updates applied (= global steps) */
    int64_t applied;       /* gradients applied */
    int64_t dropped_stale; /* sync: gradients computed from an old version */
    double apply, idle, wall, cpu;
} ps_serve_stats;

/* The PS service loop: runs until every worker has ended. */
int ps_serve(ps_shard *s, const ps_serve_cfg *c, ps_serve_stats *st, pst_err *e);

/* ---- snapshots and requests (checkpoints, stop) ---- */

/* PS: sends its shard's parameters and slots at `version` to the root
 * (non-blocking; waits for the previous snapshot to leave first). In
 * lockstep ps_serve sends one every ckpt_every versions and at the version
 * the root asked for; the caller sends the final one after ps_serve. */
void ps_snapshot_send(ps_shard *s, int64_t version);
/* PS: waits until the last snapshot has left. */
void ps_snapshot_wait(ps_shard *s);
/* Root: receives PS p's next snapshot into the full slabs (params; slots
 * with slot_stride; averages, with moving averages only). Non-blocking
 * unless `block`: returns 1 if one was received, 0 if none is waiting.
 * Snapshots from one PS arrive in order. */
int ps_snapshot_recv(ps_shard *s, int p, bool block, int64_t *version, float *params, float *slots,
                     size_t slot_stride, float *averages);
/* Root: asks every PS for a snapshot when it reaches `version` (lockstep;
 * the root must choose a version no PS can have reached: one whose tickets
 * it has not published yet). */
void ps_request_snapshot(ps_shard *s, int64_t version);
/* Root: the same for an evaluation (a second request word, so that a
 * checkpoint request and an evaluation request can be pending together). */
void ps_request_eval(ps_shard *s, int64_t version);
/* Root: lowers the number of tickets (lockstep: the PS then stop after
 * version ceil(T/W)); the root publishes end-of-data from there. */
void ps_request_stop(ps_shard *s, int64_t total_tickets);

/* ---- worker side (and the root's final pull) ---- */

/* Gets every range of every PS into the full slab `params`. consistent:
 * retry until each PS's lockseq is even and unchanged around its Get;
 * versions (may be NULL) receives each PS's version. */
void ps_pull(ps_shard *s, float *params, bool consistent, int64_t *versions);
/* A worker's pull: ps_pull, or under --comm-dtype bf16 the PS's bf16 copy
 * widened to float32. */
void ps_pull_wire(ps_shard *s, float *params, bool consistent, int64_t *versions);
/* The data bytes of one worker step: one pull of every parameter and one
 * push of every gradient (4 bytes each; under bf16 2 for trainable ones);
 * torn seqlock reads that are retried and the stamps are not counted. */
void ps_comm_bytes(const ps_shard *s, int64_t *pull, int64_t *push);
/* The same for the moving averages (a run with --moving-average-decay). */
void ps_pull_averages(ps_shard *s, float *averages, bool consistent);
/* Waits until every PS's version is > after[p] or the PS is done; returns
 * true if any PS is done. now[p] (may be NULL) receives the versions seen
 * (an even lockseq: no write in progress). `wait` accumulates seconds. */
bool ps_wait_newer(ps_shard *s, const int64_t *after, int64_t *now, double *wait);
/* Sync / async-stateful push of the full gradient slab into worker w's slots
 * (stamp version = versions[p] for PS p). */
void ps_push(ps_shard *s, int w, const float *grads, int64_t ticket, const int64_t *versions,
             int64_t step, int count);
/* Async stateful: waits until every PS consumed worker w's last push. */
void ps_wait_acked(ps_shard *s, int w, double *wait);
/* Async SGD: params += -lr*grads (trainable ranges), params = grads
 * (non-trainable), by MPI_Accumulate. scratch: a slab-sized buffer. */
void ps_accumulate(ps_shard *s, const float *grads, float lr, float *scratch);
/* Worker w is done: end stamp on every PS. */
void ps_push_end(ps_shard *s, int w);

int ps_count(const ps_shard *s);

#endif
