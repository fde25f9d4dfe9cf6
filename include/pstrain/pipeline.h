/*
 * pstrain/pipeline.h - the input pipeline: HDF5 reader -> preprocessing
 * threads -> RandomShuffleQueue-style buffer -> batches.
 *
 * Runs in the training process (single-process training) or on the root
 * rank (distributed training, which publishes its batches in an RMA window).
 *
 *   reader: walks the split's HDF5 chunks in a per-epoch shuffled chunk
 *           order (scales past memory; whole chunks, so the chunk cache is
 *           never thrashed), or preloads a small split once;
 *   workers (--prep-threads T): decode/augment examples; results re-enter
 *           the stream in reader order, so thread timing never changes them;
 *   shuffle buffer (--queue-capacity C, --min-after-dequeue M): TF
 *           RandomShuffleQueue semantics - an example is drawn uniformly at
 *           random from the buffer once it holds more than M (or the epoch's
 *           stream is exhausted); draws use a seeded RNG and depend only on
 *           the stream, so the same seed gives the same batches. The fixed
 *           schedule standing in for TF's thread race: fill to C, draw while
 *           more than M are held, fill again; drain at the end of an epoch;
 *   batches: B examples of one epoch (the last batch of an epoch may be
 *           smaller); every example exactly once per epoch.
 *
 * Augmentation (--augment crop,flip): random crop after zero padding by
 * `crop_pad` pixels and horizontal flip, seeded per (seed, epoch, example
 * id). Pixels stay uint8 until the consumer calls pipe_normalize (4x less
 * memory and RMA traffic than float).
 *
 * Epoch e's batches depend only on (data, seed, e, batch, capacity, min,
 * augmentation, limit): not on the thread count, on timing, on preload vs
 * streaming, nor on first_epoch (a resumed run sees the same epochs).
 */
#ifndef PSTRAIN_PIPELINE_H
#define PSTRAIN_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "pstrain/common.h"
#include "pstrain/h5ds.h"

typedef struct pipe_cfg {
    const char *split;     /* "train" */
    int batch;             /* B >= 1 */
    int epochs;            /* stop after this many epochs; 0 = unbounded */
    int first_epoch;       /* resume: start at this epoch (0-based); the
                            * epochs produced are [first_epoch, epochs) */
    int prep_threads;      /* >= 1 */
    int queue_capacity;    /* examples held by the shuffle buffer; 0 = automatic:
                              as many as fit in 64 MiB (at least 1024), at most
                              the epoch - for Fashion-MNIST-sized data a full
                              uniform shuffle of every epoch */
    int min_after_dequeue; /* < queue_capacity; -1 = automatic: capacity - 1 */
    uint64_t seed;
    bool shuffle; /* false: file order, no buffer shuffling (eval) */
    bool aug_crop, aug_flip;
    int crop_pad;          /* default 4 */
    int64_t limit;         /* use only the first `limit` examples (0 = all) */
    int64_t preload_bytes; /* preload the split if it fits (default 512 MiB) */
} pipe_cfg;

/* Fills the defaults above (threads 2, automatic queue, pad 4...). */
pipe_cfg pipe_cfg_defaults(void);

typedef struct pipe_batch {
    int count;     /* examples in this batch, 1..B */
    int epoch;     /* 0-based */
    int64_t index; /* 0-based batch number since pipe_new (the ticket) */
    int64_t *ids;  /* example ids: index into the split */
    int32_t *labels;
    uint8_t *pixels; /* count*H*W*C */
} pipe_batch;

/* (Named `pipeline`, not `pipe`: unistd.h declares pipe().) */
typedef struct pipeline pipeline;

/* Starts the pipeline threads. The pipeline reads through `ds`, which must
 * stay open until pipe_free (when streaming; a preloaded split is read in
 * pipe_new). The caller may read through the same h5ds meanwhile (evaluating
 * on the test split) and write checkpoints: every h5ds and ckpt call holds
 * the one HDF5 lock (pstrain/h5util.h). */
int pipe_new(pipeline **out, h5ds *ds, const pipe_cfg *cfg, pst_err *e);
/* Next batch; blocks until one is ready. Returns 1 with *b filled (the
 * memory stays valid until the next pipe_next call), 0 after the last
 * epoch, -1 on a read error (message in e). */
int pipe_next(pipeline *p, pipe_batch *b, pst_err *e);
/* Number of batches per epoch (ceil(count / B)). */
int64_t pipe_batches_per_epoch(const pipeline *p);
int64_t pipe_examples_per_epoch(const pipeline *p);
/* Stops the threads and frees, at any point (mid-epoch included). NULL-safe. */
void pipe_free(pipeline *p);

/* out[i] = (px[i]/255 - mean[c]) / std[c] for n pixels of C channels. */
void pipe_normalize(const uint8_t *px, int64_t n_pixels, int C, const float *mean, const float *std,
                    float *out);

#endif
