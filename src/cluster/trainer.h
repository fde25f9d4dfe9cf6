/*
 * trainer.h - the distributed trainer's internal interface: the state of one
 * run (dist_run) and the roles' parts of it, split by role:
 *   dist.c    the run: roles from communicators, start-up, model, plan and
 *             windows, then each rank's role, then the end;
 *   root.c    the root: data, pipeline and resume at the start; during the
 *             run the batch ring's hooks (metrics, checkpoints, evaluations,
 *             stop signals);
 *   worker.c  the worker loop;
 *   end.c     the end of the run: final variables, example logs, accounting,
 *             final checkpoint and evaluation;
 *   layout.c  the nodes and the roles: the classic and colocated layouts,
 *             the feeders placed by node (layout.h).
 */
#ifndef PSTRAIN_CLUSTER_TRAINER_H
#define PSTRAIN_CLUSTER_TRAINER_H

#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>

#include "pstrain/ckpt.h"
#include "pstrain/feed.h"
#include "pstrain/h5ds.h"
#include "pstrain/metrics.h"
#include "pstrain/model.h"
#include "pstrain/pipeline.h"
#include "pstrain/placement.h"
#include "pstrain/ps.h"
#include "pstrain/timeline.h"
#include "pstrain/train.h"
#include "layout.h"
#include "ssp.h"

/* Worker report record in the root's window (doubles). */
enum {
    WR_STEPS,
    WR_EXAMPLES,
    WR_LOSS,
    WR_CORRECT,
    WR_WAIT_DATA,
    WR_PULL,
    WR_COMPUTE,
    WR_PUSH,
    WR_WAIT_VERSION,
    WR_LAST_STEP,
    WR_EPOCH,
    WR_N
};
/* PS report record: PR_* (ps.h) */
/* Feeder report record (the root's and feeder ranks'; gathered at the end). */
enum { FR_BATCHES, FR_PREPARED, FR_SOURCE_WAIT, FR_N };

/* What the root tells everybody before any window exists. */
typedef struct start_info {
    int ok;
    int height, width, channels, classes;
    /* the run's normalisation (--normalize), and its name for checkpoints */
    float mean[H5DS_MAX_CHANNELS], std[H5DS_MAX_CHANNELS];
    char normalize[PIPE_NORM_NAME_LEN];
    int64_t per_epoch; /* examples per epoch */
    int64_t bpe;       /* batches per epoch */
    int64_t total;     /* absolute ticket limit: batches to publish, -1 = until stopped */
    int64_t max_versions;
    /* resume (all 0 for a fresh run) */
    int resumed;
    int64_t first_version; /* sync: updates already applied (global step) */
    int64_t first_ticket;  /* batches already consumed (the data cursor) */
    int64_t prior_examples;
    double prior_seconds;
    int done_already; /* resumed at or past --steps: nothing to train, every rank ends */
    char msg[PST_ERR_LEN];
} start_info;

/* A growing array of int64 (example logs). */
typedef struct i64vec {
    int64_t *a;
    size_t n, cap;
} i64vec;

static inline void vec_push(i64vec *v, int64_t x)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 4096;
        v->a = pst_realloc(v->a, sizeof *v->a * v->cap);
    }
    v->a[v->n++] = x;
}

/* A worker's log: per batch LOG_HDR words {ticket, step, epoch, count, loss
 * (float bits)} then its `count` example ids. */
enum { LOG_TICKET, LOG_STEP, LOG_EPOCH, LOG_COUNT, LOG_LOSS, LOG_HDR };

/* The root's state during the run (its feed hooks' context). */
typedef struct root_ctx {
    const train_cfg *cfg;
    const start_info *info;
    feed *f;
    ps_shard *sh;
    metrics *mx;
    pipeline *pl;
    int P, W, R;
    const int *ps_ranks, *worker_ranks; /* world ranks (dist_run) */
    bool lockstep;
    lr_schedule sched;
    int64_t total_steps;
    int total_epochs; /* 0: unknown */
    double t0;
    double *prev;          /* W previous worker records of WR_N doubles */
    int64_t last_reported; /* the step of the last progress line (steps only increase) */
    ps_timing last_pt;     /* the PS timing of the last tick (the final line reuses it) */
    double last_loss;
    bool have_loss;
    /* checkpoints and stop (root's poll hook) */
    const nn_var *vars;
    int nvars;
    const char *model_text;
    const h5ds *ds;
    size_t nparam;
    int nslots;
    float *ck_params, *ck_slots; /* a snapshot being assembled */
    float *ck_avg;               /* its moving averages (--moving-average-decay), else NULL */
    int *ck_got;
    int *final_got; /* PS whose final state arrived (in ck_params/ck_slots) */
    int64_t ck_version;
    bool ck_requested;
    double t_ckpt;
    bool stopping;
    int stop_signal;
    int64_t told_total;     /* the ticket limit the PS know */
    int64_t ck_req_version; /* the time-based checkpoint asked for */
    /* --eval-every: the next epoch count to evaluate after, and (lockstep)
     * the version whose snapshot serves it (-1: not asked yet) */
    nn_model *m;
    h5ds *ds_rw;
    int nring;
    int next_eval_epoch;
    int64_t eval_version;
    const char *eval_split; /* --eval-split or its default; NULL: none */
    const pipe_cfg *input;  /* dist_run.input */
    train_result *res;
} root_ctx;

/* One run of dist_train on this rank. */
typedef struct dist_run {
    const train_cfg *cfg;
    train_result *res;
    /* the roles: this rank's role communicator and index in it, and the
     * world ranks of the root, of PS p and of worker w */
    int rank, size, P, W, R;
    bool is_root, is_ps, is_feeder, lockstep;
    int worker_id;
    int F;             /* feeders (--feeders): the root and F - 1 feeder ranks */
    int *feeder_ranks; /* F world ranks, [0] = the root */
    int *attach;       /* lockstep with F > 1: each world rank's feeder (workers; others -1),
                        * layout_attach; NULL: the global ticket counter (feed.h) */
    MPI_Comm role_comm;
    int index;
    int root_rank;
    int *ps_ranks, *worker_ranks;
    /* the role of each world rank (layout.c: classic or --ps-per-node,
     * then the feeders) */
    int *roles;
    /* the root: the rank -> host -> role map, one line per host (host_map) */
    char *host_map;
    /* what the root tells everybody */
    start_info info;
    /* the root's data set, pipeline and checkpoint to resume from */
    h5ds ds;
    bool ds_open;
    pipeline *pl;
    char ckpt_file[4096];
    const char *esplit; /* the root's evaluation split (NULL: none) */
    pipe_cfg input;     /* the run's pipeline settings with the output size resolved
                         * (train_resolve_input): training and evaluation read through it */
    i64vec prior;       /* resumed: the ids the interrupted epoch had consumed */
    int prior_epoch;
    /* everybody: the model, the plan, the windows */
    nn_model *m;
    place_plan *plan;
    const nn_var *vars;
    int nv;
    size_t nparam;
    int nslots;
    float *slots;
    float *averages;         /* --moving-average-decay: the full slab (root: final), else NULL */
    bool averages_from_vars; /* resumed from a checkpoint without averages */
    feed *f;
    ps_shard *sh;
    ssp *ssp; /* --max-staleness (async), else NULL */
    int nring;
    lr_schedule sched;
    /* async: the staleness of this worker's updates (summed on the root) */
    int64_t stale_hist[TRAIN_STALE_BINS];
    int64_t stale_max;
    /* this rank's part: example log (workers) and report record */
    i64vec log;
    double my_rec[FEED_REPORT_WORDS];
    /* the root during the run */
    metrics *mx;
    root_ctx *rctx;
    char *mtext;
    feed_serve_stats fst;
    double t_train;
    /* --timeline: this rank's clock offset from the root's, the root's start
     * time, and on the root the gathered processes (dist_timeline.c) */
    double tl_offset, tl_origin;
    tl_proc *tl_procs;
    tl_event *tl_all;
} dist_run;

/* root.c: opens the data (and the checkpoint's attributes when resuming)
 * and starts the pipeline; fills r->info (info.ok = 0 with e on failure). */
void root_prepare(dist_run *r, pst_err *e);
/* root.c: serves the batch ring until every worker is done. */
void root_run(dist_run *r, pst_err *e);
void root_tick(void *vctx);
/* The progress line and metrics record from the workers' records
 * (wrec[w]: WR_N doubles each), when they hold a step newer than the last
 * one reported; root_tick reads them from the feed, the end of the run from
 * the gathered final records, so that the last line is the final step. */
void root_report(root_ctx *c, const double *const *wrec, const ps_timing *pt);
int root_save_checkpoint(root_ctx *c, int64_t step, int64_t next_batch, const float *params,
                         const float *slots, const float *averages, pst_err *e);
/* The end of a lockstep run (root): takes the PS snapshots still in flight,
 * in the order each PS sent them, writing the checkpoints and running the
 * evaluations they were taken for, until every PS's final state is in
 * c->ck_params / ck_slots / ck_avg. A periodic snapshot that arrives after
 * the root's last poll is therefore written, whatever the timing. Returns 0
 * or -1 (e set). */
int root_drain_snapshots(root_ctx *c, pst_err *e);
void root_ctx_free(root_ctx *c);

/* feeder.c: the pipeline of feeder f (0: the root) from ticket t0 on, in
 * r->pl: it starts at t0's epoch, the batches before t0 are read past (their
 * ids appended to *ids unless NULL) and, like the other feeders' tickets,
 * get no pixels (pipe_cfg.skip_batches, share_*). Needs r->ds open and
 * r->info.bpe. Returns 0 or -1 with e. */
int feeder_pipe_new(dist_run *r, const pipe_cfg *base, int f, int64_t t0, i64vec *ids, pst_err *e);
/* feeder.c: feeder ranks 1..F-1: open the data, start the pipeline at the
 * run's data cursor (after the root's start_info) and serve this rank's
 * tickets until every worker is done. */
void feeder_run(dist_run *r, pst_err *e);

/* worker.c: the worker loop of worker r->worker_id. */
void worker_role(dist_run *r);

/* end.c: collective: the final variables on the root, the example logs and
 * report records gathered, the windows freed; on the root the result, the
 * final checkpoint and evaluation. Returns 0 or -1 with e. */
int run_end(dist_run *r, pst_err *e);

/* dist_timeline.c (--timeline; each does nothing without it): collective:
 * measures this rank's clock offset from the root's and starts recording. */
void dist_timeline_begin(dist_run *r);
/* Collective: every rank's events to the root (after the run's end
 * protocol); the other ranks stop recording. */
void dist_timeline_gather(dist_run *r);
/* Root: writes the trace, its own events up to now included. 0 or -1 with e. */
int dist_timeline_write(dist_run *r, pst_err *e);
void dist_timeline_free(dist_run *r);

#endif
