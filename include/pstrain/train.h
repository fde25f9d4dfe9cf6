/*
 * pstrain/train.h - the train layer: a training run's configuration and
 * result, training in one process, and evaluation.
 *
 * `pstrain train` parses its flags into a train_cfg (src/cmd/cli.c) and
 * calls train_run() (dist.h, the cluster layer), which picks train_single()
 * when MPI_COMM_WORLD has one rank and dist_train() otherwise. Both fill a
 * train_result on the rank that reports (the only rank in one process, rank
 * 0 = root under MPI), which the command turns into the --summary-json file.
 * Nothing here needs MPI: this layer compiles without <mpi.h>.
 */
#ifndef PSTRAIN_TRAIN_H
#define PSTRAIN_TRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "pstrain/common.h"
#include "pstrain/h5ds.h"
#include "pstrain/metrics.h" /* worker_timing, ps_timing */
#include "pstrain/optim.h"
#include "pstrain/pipeline.h"

/* How the variables are spread over the parameter servers (placement.h
 * describes the strategies; train_cfg.placement, `--placement`). */
typedef enum place_kind { PLACE_ROUND_ROBIN, PLACE_GREEDY, PLACE_PARTITION } place_kind;

/* How the parameter servers apply updates (ps.h; train_cfg.mode, `--mode`):
 * sync aggregates R workers' gradients per version, async applies each
 * worker's update as it arrives. */
typedef enum train_mode { TRAIN_SYNC, TRAIN_ASYNC } train_mode;

/* train_cfg.max_staleness of --max-staleness none: no bound, staleness measured */
#define TRAIN_STALE_NONE INT64_MAX

typedef struct train_cfg {
    const char *data_path;
    const char *model; /* a name of nn_model_names() */
    int epochs;        /* stop after this many epochs (0: use steps) */
    int64_t steps;     /* stop after this many global steps (0: use epochs) */
    int batch;         /* per worker */
    opt_cfg opt;
    float lr, lr_decay, lr_decay_epochs;
    float weight_decay, label_smoothing;
    /* training recipes of the anchors: --moving-average-decay (0: off),
     * --warmup-epochs (0: off), --lr-scale linear (lr x workers x batch / 256) */
    float ema_decay, warmup_epochs;
    bool lr_scale_linear;
    uint64_t seed;
    pipe_cfg pipe; /* prep threads, queue, augmentation, limit */
    /* --threads: compute threads of the model (one process, every worker,
     * eval); --ps-threads: a parameter server's optimizer threads. 0: the
     * CPUs of the rank's affinity mask (pst_threads_resolve). */
    int threads, ps_threads;

    /* distributed */
    int ps; /* parameter-server ranks */
    /* --ps-per-node N: N parameter servers on every node, the node's other
     * ranks workers (0: ranks 1..ps are the PS); ps, when given, must be N
     * x the nodes (docs/design.md §1) */
    int ps_per_node;
    /* --feeders F: ranks that serve the batch ring, the root and F - 1 ranks
     * after the PS (docs/design.md §1); 0 or 1: the root alone */
    int feeders;
    place_kind placement;
    int64_t partition_bytes; /* default 256 KiB */
    train_mode mode;
    int replicas_to_aggregate; /* 0 = all workers */
    /* async: --max-staleness S, a worker starts a step only while it is at
     * most S steps ahead of the slowest unfinished worker, and the run
     * measures the staleness of its updates; TRAIN_STALE_NONE: unbounded
     * but measured (--max-staleness none); -1: not given (neither) */
    int64_t max_staleness;
    bool comm_bf16; /* --comm-dtype bf16: pulls and pushes in bfloat16 */

    /* checkpoints (ckpt.h): DIR/ckpt-<step>.h5 + DIR/latest */
    const char *checkpoint_dir;
    int64_t checkpoint_every; /* steps; 0 = only at the end (and on a signal) */
    double checkpoint_secs;   /* seconds; 0 = off */
    int keep_checkpoints;     /* newest K kept; 0 = all */
    bool resume;              /* continue from resume_path, or checkpoint_dir's latest */
    const char *resume_path;  /* a checkpoint file or directory; NULL = checkpoint_dir */

    /* reporting */
    int eval_every;         /* epochs; 0 = only at the end */
    const char *eval_split; /* NULL: "val" when the data set has one, else "test" */
    double log_every;       /* seconds between progress/metrics lines */
    const char *metrics_path, *summary_path, *trace_path;
    /* --tensorboard: TensorBoard event files (tboard.h); NULL = none */
    const char *tensorboard_dir;
    const char *timeline_path; /* --timeline: Chrome trace events (timeline.h); NULL = off */
    bool dry_run;              /* print the model (and plan) and exit */
    bool quiet;
    bool verbose; /* the placement table at the start (default: one summary line) */
    /* diagnostic: write the final parameter slab as raw native float32 to this
     * file (tests compare runs bitwise); NULL = off */
    const char *dump_params_path;
} train_cfg;

/* Defaults documented in `pstrain train --help`. */
train_cfg train_cfg_defaults(void);

/* Data accounting of one epoch (distributed: across all workers). */
typedef struct epoch_stats {
    int epoch;
    int64_t examples, unique, duplicates, missing;
    int nworkers;
    int64_t *per_worker; /* examples seen by each worker, owned */
} epoch_stats;

enum { TRAIN_STALE_BINS = 64 };

/* One feeder's share of the input work (distributed runs). */
typedef struct feeder_stats {
    int rank;
    int64_t batches, prepared;
    double source_wait;
} feeder_stats;

typedef struct train_result {
    int ranks, ps, workers;
    int64_t steps;           /* global steps (optimizer updates in sync mode) */
    int epochs;              /* epochs completed */
    int64_t examples;        /* training examples processed, by the whole run (resumes included) */
    double train_seconds;    /* the whole run's training time */
    double images_per_sec;   /* this run's: run_examples / run_seconds */
    int64_t total_steps;     /* the steps the run was asked for (--epochs or --steps) */
    int epoch, total_epochs; /* the 1-based epoch of the last step, of how many (0: unknown) */
    int64_t run_steps, run_examples; /* this process's share when resumed (else the whole) */
    double run_seconds;
    float final_loss; /* mean training loss of the last 100 steps (fewer if fewer ran) */
    /* the evaluation at the end, on eval_split (--eval-split); test_* repeat
     * it when that split is "test" */
    bool has_eval;
    char eval_split[8];
    double eval_accuracy, eval_top5_accuracy, eval_loss;
    int64_t eval_examples;
    bool has_test;
    double test_accuracy, test_top5_accuracy, test_loss;
    int64_t test_examples;
    int nepochs_stats;
    epoch_stats *epoch_stats; /* owned */
    int nps;
    int64_t *per_ps_bytes; /* owned */
    double imbalance;
    int64_t dropped_stale; /* sync mode with backup workers */
    /* async: the staleness of the applied updates (global steps drawn by
     * others between a worker's pull and its own update): counts of 0 ..
     * TRAIN_STALE_BINS-1 (the last bin: that many or more), the largest, and
     * the bound the run had (-1: none) */
    bool has_staleness;
    int64_t staleness_hist[TRAIN_STALE_BINS];
    int64_t staleness_max, staleness_bound;
    /* distributed: --comm-dtype, and one worker step's data bytes (ps_comm_bytes) */
    bool comm_bf16;
    int64_t pull_bytes_per_step, push_bytes_per_step;
    int64_t start_step; /* > 0 when resumed from a checkpoint */
    int stop_signal;    /* the signal that stopped the run early, or 0 */
    bool nothing_to_do; /* resumed at or past --steps: no training (last_checkpoint, steps) */
    char last_checkpoint[4096];
    int nworker_timing;
    worker_timing *wtiming; /* per worker, owned */
    ps_timing *pstiming;    /* per PS, owned */
    double root_cpu;        /* CPU seconds of the root's service loop (distributed) */
    /* distributed: what each feeder (the root first) did: batches published,
     * examples its pipeline prepared (decoded or augmented), seconds waiting
     * for its pipeline */
    int nfeeder_stats;
    feeder_stats *fstats; /* owned */
} train_result;

void train_result_free(train_result *r); /* frees the owned arrays; NULL-safe */

/* Runs a training job in this process (a run of one rank: train_run()
 * calls it when MPI_COMM_WORLD has one rank; it makes no MPI call). Returns
 * 0 on success, -1 with the message in e. */
int train_single(const train_cfg *cfg, train_result *res, pst_err *e);

/* Evaluates `m` in inference mode on a whole split of `ds` (file order,
 * batches of `batch`). `input` (may be NULL: the stored pixels) is the
 * run's pipeline configuration: encoded data, a recipe or an output size
 * other than the stored one read through an unshuffled pipeline with the
 * recipe's evaluation transform (its prep threads and memory budget), the
 * stored pixels otherwise. Fills *ev (top-1 and top-5 accuracy, mean loss, the
 * example count); `confusion` (may be NULL) receives K*K counts
 * [true][predicted]. */
struct nn_model;
int train_evaluate(struct nn_model *m, h5ds *ds, const pipe_cfg *input, const char *split,
                   int batch, eval_stats *ev, int64_t *confusion, pst_err *e);
/* The same, handing the logits of every evaluated batch to `fn` (may be
 * NULL) in split order: logits[n][K] of the next n examples. A non-zero
 * return of fn (with e set) ends the evaluation with -1. */
typedef int (*train_logits_fn)(void *ctx, const float *logits, int n, int K, pst_err *e);
int train_evaluate_logits(struct nn_model *m, h5ds *ds, const pipe_cfg *input, const char *split,
                          int batch, eval_stats *ev, int64_t *confusion, train_logits_fn fn,
                          void *ctx, pst_err *e);
/* How many of the n examples have their label among the k best classes of
 * their logits[n][K]. The classes are ranked as a stable sort by descending
 * logit: class j ranks above the label y when logit[j] > logit[y], or when
 * they are equal and j < y (the lowest index wins a tie, as the top-1
 * prediction's argmax), so exactly k classes are in the top k, and k = 1
 * gives the top-1 count. With K <= k every example counts (top-5 accuracy
 * is 1 for 5 classes or fewer). A NaN logit of the label never counts (a
 * NaN logit of another class never ranks above it). */
int64_t train_topk_correct(const float *logits, const int32_t *labels, int n, int K, int k);

/* The split a run evaluates on: --eval-split, or "val" when the data set
 * has one, else "test"; NULL when there is none (with a warning when
 * --eval-every asked for evaluations and `warn`). An --eval-split the data
 * set lacks is an error naming the splits it has (-1). */
int train_eval_split(const train_cfg *cfg, const h5ds *ds, bool warn, const char **split,
                     pst_err *e);
/* Records the final evaluation in r (eval_*, and test_* for "test"). */
void train_set_eval(train_result *r, const char *split, const eval_stats *ev);

/* Checks at start-up that every output of cfg (--summary-json, --metrics,
 * --dump-params, --trace-examples, --timeline; --tensorboard's directory,
 * made if missing) can be written (pst_out_check, tb_check_dir): -1 with the
 * flag and the path named otherwise. */
int train_check_outputs(const train_cfg *cfg, pst_err *e);

/* Writes n floats (a parameter slab) as raw native float32 to path: the
 * --dump-params diagnostic that tests use to compare runs bitwise. Written
 * to a temporary and renamed: on failure the previous file is unchanged. */
int train_dump_params(const char *path, const float *p, size_t n, pst_err *e);

#endif
