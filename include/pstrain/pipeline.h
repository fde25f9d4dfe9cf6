/*
 * pstrain/pipeline.h - the input pipeline: HDF5 readers -> preprocessing
 * threads -> RandomShuffleQueue-style buffer -> batches.
 *
 * Runs in the training process (single-process training) or on the root
 * rank (distributed training, which publishes its batches in an RMA window).
 *
 *   readers: walk the split's read units (pixels: the HDF5 chunks; encoded:
 *           runs of examples of about 1 MiB) in a per-epoch shuffled order
 *           (scales past memory; whole chunks, so the chunk cache is never
 *           thrashed), several at once reading ahead, or copy from a split
 *           preloaded once when it fits the memory budget;
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
 * Output images are out_h x out_w x channels uint8 for every storage mode:
 *   pixels, no recipe change: the stored images, with --augment crop,flip
 *           (random crop after zero padding by `crop_pad` pixels, horizontal
 *           flip) when asked; a different out size resizes (AUG_RESIZE);
 *   pixels, recipe inception/resnet: aug_from_pixels on the stored pixels;
 *   encoded: aug_from_jpeg (AUG_RESIZE without --augment).
 * Random choices come from hash4(seed, epoch, TAG_AUG, example id); with
 * eval_transform the recipe's deterministic evaluation transform is used.
 * Pixels stay uint8 until the consumer calls pipe_normalize (4x less
 * memory and RMA traffic than float).
 *
 * Memory (docs/design.md §3.2): everything the pipeline allocates - index,
 * reader buffers, blocks, shuffle buffer, batches, per-thread scratch, the
 * HDF5 chunk cache it reads through, and a preloaded split - is planned in
 * pipe_new within cfg.memory_budget. A split is preloaded only when it fits
 * (and preload_bytes allows); the automatic shuffle buffer shrinks to fit;
 * an explicit one that does not fit, or a budget below the streaming
 * minimum, is an error naming the minimum.
 *
 * Epoch e's batches depend only on (data, seed, e, batch, capacity, min,
 * augmentation, output size, limit): not on the thread count, on timing, on
 * preload vs streaming, nor on first_epoch (a resumed run sees the same
 * epochs). The budget changes them only through an automatic shuffle buffer
 * it had to shrink.
 */
#ifndef PSTRAIN_PIPELINE_H
#define PSTRAIN_PIPELINE_H

#include <stdbool.h>
#include <stdint.h>

#include "pstrain/common.h"
#include "pstrain/h5ds.h"

/* Input normalisation (--normalize): out = (px/255 - mean[c]) / std[c] with
 *   PIPE_NORM_DATASET   the data set's own mean and std attributes,
 *   PIPE_NORM_IMAGENET  torchvision's ImageNet constants (mean 0.485, 0.456,
 *                       0.406; std 0.229, 0.224, 0.225), 3 channels,
 *   PIPE_NORM_CUSTOM    the given values, one mean and one std per channel.
 * PIPE_NORM_UNSET (the zero value) is "not given": a resumed run and
 * `pstrain eval` take the checkpoint's, anything else the data set's. */
typedef struct pipe_norm {
    int kind; /* PIPE_NORM_* */
    int n;    /* values given (PIPE_NORM_CUSTOM): the channels it fits */
    float mean[H5DS_MAX_CHANNELS], std[H5DS_MAX_CHANNELS];
} pipe_norm;
enum { PIPE_NORM_UNSET = 0, PIPE_NORM_DATASET, PIPE_NORM_IMAGENET, PIPE_NORM_CUSTOM };
/* The longest name pipe_norm_name writes, with its NUL. */
#define PIPE_NORM_NAME_LEN 256

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
    bool shuffle;            /* false: file order, no buffer shuffling (eval) */
    bool aug_crop, aug_flip; /* pixels and AUG_RESIZE only */
    int crop_pad;            /* default 4 */
    int recipe;              /* AUG_RESIZE (default), AUG_INCEPTION, AUG_RESNET (augment.h) */
    bool eval_transform;     /* the recipe's evaluation transform (no randomness, no crop/flip) */
    int out_h, out_w;        /* output size; 0 = the stored size (required for encoded) */
    int64_t limit;           /* use only the first `limit` examples (0 = all) */
    int64_t preload_bytes;   /* preload the split if it fits this and the budget (default
                              * 512 MiB; 0 = always stream) */
    int64_t memory_budget;   /* bytes the pipeline may hold; 0 = pipe_default_memory_budget() */
    pipe_norm norm;          /* --normalize (not used by the pipeline: by its consumers) */
    /* Batches without pixels (a consumer that needs only some batches'
     * images: a feeder rank, a resumed run): batch i (pipe_batch.index) gets
     * its images only if i >= skip_batches and, when share_count > 1,
     * (i - share_index) mod share_count < share_span (span 1: i mod
     * share_count == share_index; span 0: none); the others carry their ids and
     * labels but no pixels (pipe_batch.has_pixels false), and their examples
     * are neither decoded nor augmented. Which examples make up each batch
     * never changes. */
    int64_t skip_batches; /* 0: none */
    int share_count;      /* 0 or 1: every batch from skip_batches on */
    int share_index;      /* 0 .. share_count - 1 */
    int share_span;       /* share_count > 1: 0 .. share_count batches of every share_count */
} pipe_cfg;

/* The default memory budget: PIPE_BUDGET_FRACTION (1/4) of the node's
 * physical memory (sysconf), at least 256 MiB. */
int64_t pipe_default_memory_budget(void);

/* Parses "512M", "2G", "65536", "1.5G" (K/M/G/T: powers of 1024, an optional
 * trailing B or iB) into bytes. 0 on success, -1 when malformed or <= 0. */
int pipe_parse_size(const char *s, int64_t *out);
/* "1.5 GiB" into buf (32 bytes); returns buf. */
const char *pipe_fmt_size(int64_t bytes, char buf[32]);

/* Fills the defaults above (threads 2, automatic queue, pad 4...). */
pipe_cfg pipe_cfg_defaults(void);

typedef struct pipe_batch {
    int count;     /* examples in this batch, 1..B */
    int epoch;     /* 0-based */
    int64_t index; /* 0-based batch number since pipe_new (the ticket) */
    int64_t *ids;  /* example ids: index into the split */
    int32_t *labels;
    uint8_t *pixels; /* count*H*W*C; not written when !has_pixels */
    bool has_pixels; /* false: a batch skipped by skip_batches or share_* */
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
/* What pipe_new decided, for the run's log. */
typedef struct pipe_info {
    int out_h, out_w, channels; /* the output images */
    int64_t budget, planned;    /* bytes: the budget, the plan's total within it */
    bool preloaded;             /* the split was read into memory once */
    bool direct_chunks;         /* deflated pixels: HDF5 part under the lock, inflate outside */
    int readers;                /* reader threads */
    int queue_capacity;         /* shuffle buffer in examples (after the budget) */
} pipe_info;
void pipe_get_info(const pipeline *p, pipe_info *out);

/* Examples made into output images so far by the preprocessing threads
 * (decoded, augmented, cropped or flipped; 0 when the stored pixels are the
 * output): with share_count F about 1/F of what the full sequence needs. */
int64_t pipe_examples_prepared(pipeline *p);

/* Examples per epoch of cfg's split in ds (its count, or cfg->limit when
 * smaller; split NULL: "train"), without starting a pipeline: what
 * pipe_examples_per_epoch says of a pipeline of cfg. 0 when ds lacks the
 * split. */
int64_t pipe_split_examples(const h5ds *ds, const pipe_cfg *cfg);

/* Number of batches per epoch (ceil(count / B)). */
int64_t pipe_batches_per_epoch(const pipeline *p);
int64_t pipe_examples_per_epoch(const pipeline *p);
/* Stops the threads and frees, at any point (mid-epoch included). NULL-safe. */
void pipe_free(pipeline *p);

/* Parses "dataset", "imagenet" or "M1,..,MC/S1,..,SC" (C in 1..4 means in
 * [0, 1] and as many stds in (0, 1e3], decimal numbers) into *n. 0, or -1
 * when malformed (the caller names the flag and what it expects). */
int pipe_norm_parse(const char *s, pipe_norm *n);
/* The canonical spelling of a set normalisation (what pipe_norm_parse reads
 * back to the same floats: "dataset", "imagenet", or the values with %.9g)
 * into buf of PIPE_NORM_NAME_LEN bytes; returns buf. UNSET reads "dataset". */
const char *pipe_norm_name(const pipe_norm *n, char buf[PIPE_NORM_NAME_LEN]);
/* Makes ds->mean and ds->std the constants of normalisation *n for its
 * ds->channels (DATASET and UNSET leave the data set's). 0, or -1 with a
 * message naming `what` (the flag or the attribute) when the number of
 * values does not fit the channels. */
int pipe_norm_apply(const pipe_norm *n, h5ds *ds, const char *what, pst_err *e);

/* out[i] = (px[i]/255 - mean[c]) / std[c] for n pixels of C channels. */
void pipe_normalize(const uint8_t *px, int64_t n_pixels, int C, const float *mean, const float *std,
                    float *out);

#endif
