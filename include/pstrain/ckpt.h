/*
 * pstrain/ckpt.h - checkpoints (HDF5) and resume. (Stop on signal:
 * pstrain/signals.h.)
 *
 * A checkpoint is one HDF5 file (docs/design.md §5), readable by h5dump
 * and h5py:
 *
 *   /variables/<name>        float32, the variable's shape ("conv1/kernel"
 *                            is the dataset "kernel" in group conv1)
 *   /slots/<name>/<slot>     float32, same shape: optimizer state of a
 *                            trainable variable; slot names "momentum"
 *                            (momentum), "rms","mom" (rmsprop), "m","v" (adam)
 *   /averages/<name>         float32, same names and shapes as /variables:
 *                            the exponential moving averages of every
 *                            variable (--moving-average-decay; absent
 *                            without it)
 *   attributes of /          format="pstrain-checkpoint", format_version=2,
 *                            model (spec text), model_name, height, width,
 *                            channels, num_classes, global_step, epoch,
 *                            epoch_batch, next_batch, examples, seed,
 *                            rng_state[4], mode, workers, ps, batch,
 *                            optimizer and its hyper-parameters, lr_base,
 *                            lr_decay, lr_decay_epochs, steps_per_epoch,
 *                            weight_decay, label_smoothing, train_seconds,
 *                            pstrain_version, created; since the averages
 *                            and warm-up: moving_average_decay (0 = no
 *                            averages) and lr_warmup_epochs (0 = none),
 *                            both read as 0 when absent (older files)
 *
 * Every dataset carries a Fletcher-32 checksum, so bit rot is detected on
 * read. Version 2 files use the HDF5 1.10 file format (checksummed
 * superblock, object headers, B-trees and attribute heaps) and fixed-length
 * string attributes (no global heap, whose corruption crashed libhdf5);
 * version 1 files (HDF5 1.8 format, variable-length strings) are still read. The model's data
 * travel as the slabs of model.h / optim.h: params is the parameter slab (nn_var offsets), slots[s
 * * slot_stride + j] is slot s of slab element j. A distributed run gathers its PS shards into one
 * slab on the root (the checkpoint does not depend on the PS count or placement, so a run may
 * resume with different ones).
 *
 * Durability: ckpt_write() writes a temporary file in the target's
 * directory, closes it, fsyncs it, renames it over the target and fsyncs
 * the directory; ckpt_save() then records the file in DIR/latest (itself
 * replaced atomically). A kill -9 at any moment leaves either the old or
 * the new checkpoint, never a half-written one under a final name; stray
 * temporary files are ignored by ckpt_find_latest and removed by
 * ckpt_prune once their writer is gone. Temporaries are created
 * exclusively under names nobody can predict (a symlink planted in a shared
 * directory is never followed). One run writes to a directory at a time:
 * ckpt_prepare_dir takes DIR/lock and refuses a second writer.
 *
 * Files in a checkpoint directory: ckpt-<global_step>.h5, latest (one line:
 * the file name), lock (the writer's pid, host and start time),
 * .ckpt-*.tmp.PID.RANDOM (temporaries of an interrupted write).
 */
#ifndef PSTRAIN_CKPT_H
#define PSTRAIN_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pstrain/common.h"
#include "pstrain/model.h"
#include "pstrain/optim.h"

#define CKPT_FORMAT "pstrain-checkpoint"
#define CKPT_FORMAT_VERSION 2     /* what ckpt_write writes */
#define CKPT_FORMAT_VERSION_MIN 1 /* the oldest version read */
#define CKPT_NAME_LEN 64
#define CKPT_NORM_LEN 256 /* PIPE_NORM_NAME_LEN */

/* Limits of the attributes (checked on read and on write; the full list of
 * ranges is in src/train/ckpt_meta.c): steps, batches and the data cursor at
 * most 2^40 (a trillion steps: no count can overflow, even times the worker
 * count), examples at most 2^60, epoch below 2^31-1, image sides up to 65536
 * and channels up to 4 (as in data sets), workers and PS up to 2^20, batch up
 * to 2^20 (as --batch). */
#define CKPT_MAX_STEPS (INT64_C(1) << 40)
#define CKPT_MAX_EXAMPLES (INT64_C(1) << 60)
#define CKPT_MAX_SIDE 65536
#define CKPT_MAX_CHANNELS 4
#define CKPT_MAX_RANKS (1 << 20)
#define CKPT_MAX_BATCH (1 << 20)

/* Everything but the tensors. On write, strings are borrowed; on read they
 * are owned by the ckpt_meta (release with ckpt_meta_free). */
typedef struct ckpt_meta {
    /* the model */
    const char *model_name; /* "lenet5" */
    const char *model_text; /* nn_model_describe() output (may be NULL on write) */
    int height, width, channels, num_classes;

    /* where the run is: the state after global_step optimizer updates */
    int64_t global_step;
    int epoch;           /* epoch of the next batch to consume (0-based) */
    int64_t epoch_batch; /* batches of `epoch` already consumed */
    int64_t next_batch;  /* index (ticket) of the next batch since the start */
    int64_t examples;    /* training examples consumed so far */
    uint64_t seed;
    uint64_t rng_state[4]; /* any extra RNG state the trainer keeps (zeros if none) */
    double train_seconds;  /* training time so far (for throughput across resumes) */

    /* how it was trained */
    const char *mode; /* "sync", "async" (may be NULL: "") */
    int workers, ps, batch;
    opt_cfg opt; /* kind decides the slots */
    lr_schedule lr;
    float weight_decay, label_smoothing;
    /* --moving-average-decay (0: none). On write, `averages` is a slab like
     * params (required when ema_decay > 0) stored under /averages; on read,
     * has_averages says whether the file has them (always so when
     * ema_decay > 0: the reader checks). */
    float ema_decay;
    const float *averages;
    bool has_averages;
    /* the input pipeline's recipe (`--augment` as train_augment_name spells
     * it: "inception", "resnet", "crop,flip", "none", ...); height/width
     * above are the pipeline's output size, the model's input. Written when
     * not empty; "" on read of a checkpoint from before it was recorded. */
    char augment[CKPT_NAME_LEN];
    /* the input normalisation (`--normalize` as pipe_norm_name spells it:
     * "dataset", "imagenet" or "M1,M2,M3/S1,S2,S3"). Written when not
     * empty; "" on read of a checkpoint from before it was recorded, which
     * normalised with the data set's own (dataset). */
    char normalize[CKPT_NORM_LEN];

    /* filled by ckpt_read/ckpt_read_meta only */
    char pstrain_version[CKPT_NAME_LEN];
    char created[CKPT_NAME_LEN]; /* ISO 8601 UTC */
    int format_version;
    char *owned_[3]; /* storage of the strings read */
} ckpt_meta;

/* Releases the strings of a ckpt_meta filled by a read; NULL-safe, and a
 * no-op on a zeroed or caller-built meta. */
void ckpt_meta_free(ckpt_meta *m);

/* Slot name s of an optimizer ("momentum"; "rms","mom"; "m","v"), NULL when
 * s >= opt_nslots(kind). */
const char *ckpt_slot_name(opt_kind kind, int s);

/* Writes a checkpoint to `path` atomically (temporary file in the same
 * directory, fsync, rename, fsync of the directory). vars[nvars] describe
 * the slab layout; params has their values; slots (NULL when the optimizer
 * has none) holds opt_nslots(meta->opt.kind) slot arrays slot_stride apart.
 * Slots are stored for trainable variables only. Fails with a message
 * naming the path and the failing step; on failure `path` is untouched and
 * the temporary file removed. */
int ckpt_write(const char *path, const ckpt_meta *meta, const nn_var *vars, int nvars,
               const float *params, const float *slots, size_t slot_stride, pst_err *e);

/* What a reader expects. Zero/NULL fields are not checked. */
typedef struct ckpt_expect {
    const char *model_name;
    int height, width, channels, num_classes;
    const nn_var *vars; /* required: the variables to load, in slab layout */
    int nvars;
    bool check_opt; /* when loading slots: the optimizer must be opt_kind */
    opt_kind opt_kind;
    /* not NULL: receives the moving averages (a slab like params) when the
     * checkpoint has them (meta->has_averages), else left untouched */
    float *averages;
} ckpt_expect;

/* What to expect of a checkpoint of model `m` (its name, image shape,
 * classes and variables); with `opt` (may be NULL) the optimizer's slots
 * are checked too. Borrows from m. */
ckpt_expect ckpt_expect_model(const nn_model *m, const opt_cfg *opt);

/* Reads a checkpoint into the slabs. Refuses (with a message naming the
 * file and the variable, shape, attribute or optimizer) a file that is not a
 * pstrain checkpoint of a known format_version, a different model or image
 * shape, a missing or extra variable, a shape mismatch, or (when slots is
 * not NULL) missing slots or a different optimizer, and (when x->averages
 * is not NULL and the file has averages) a missing, extra, mis-shaped or
 * corrupt average. Slots of non-trainable
 * variables are left untouched. meta (may be NULL) receives the attributes.
 * Nothing is guaranteed about params/slots after a failure. */
int ckpt_read(const char *path, const ckpt_expect *x, float *params, float *slots,
              size_t slot_stride, ckpt_meta *meta, pst_err *e);

/* Reads only the attributes (e.g. to build the model before ckpt_read). */
int ckpt_read_meta(const char *path, ckpt_meta *meta, pst_err *e);

/* Checks that `path` is a complete checkpoint: format attributes, and every
 * dataset under /variables, /slots and /averages reads back with a valid
 * checksum, slots and averages have their variable's shape, and the
 * averages are there exactly when moving_average_decay says so.
 * Returns 0 if so, -1 with the reason. */
int ckpt_verify(const char *path, pst_err *e);

/* The path DIR/ckpt-<step>.h5 into out[n]; -1 if it does not fit. */
int ckpt_path(char *out, size_t n, const char *dir, int64_t step);

/* Creates `dir` if needed (one level) and checks that it is a directory
 * this process can write, so that a run fails at its start rather than at
 * its first checkpoint; then takes the directory's lock (flock on
 * DIR/lock, which names the holder's pid, host and start time) and keeps
 * it until the process ends or ckpt_unlock_dir: a second writer is refused
 * with a message naming the holder. (On a file system without flock, a
 * warning.) Temporaries of writers that are gone are removed. Returns 0, or
 * -1 with `e` naming the directory. */
int ckpt_prepare_dir(const char *dir, pst_err *e);

/* Releases the lock of ckpt_prepare_dir (tests; the process's end does it). */
void ckpt_unlock_dir(void);

/* What a training loop calls: creates `dir` if needed (one level), writes
 * DIR/ckpt-<meta->global_step>.h5 with ckpt_write, records it in DIR/latest
 * (atomically), then keeps only the newest `keep` checkpoints (keep <= 0:
 * keep all). out_path (may be NULL) receives the file written. */
int ckpt_save(const char *dir, int keep, const ckpt_meta *meta, const nn_var *vars, int nvars,
              const float *params, const float *slots, size_t slot_stride, char *out_path,
              size_t out_len, pst_err *e);

/* The newest checkpoint in `dir` that verifies: candidates are the file in
 * DIR/latest and every ckpt-<step>.h5, by step, newest first; corrupt,
 * truncated or temporary files are skipped. Returns 1 with the path in
 * out[n], 0 when there is none (or dir does not exist), -1 on an error
 * reading the directory. */
int ckpt_find_latest(const char *dir, char *out, size_t n, pst_err *e);

/* For `--resume [ARG]`: ARG names a checkpoint file (used as is) or a
 * directory, or a directory's `latest` pointer file (the directory's newest
 * good checkpoint). Returns 1 with the file in out,
 * 0 when ARG is a directory without a good checkpoint or a path that does
 * not exist and does not end in .h5 (a first run: start from scratch), -1
 * on error (a *.h5 file that does not exist or does not verify). */
int ckpt_resolve(const char *arg, char *out, size_t n, pst_err *e);

/* Removes all but the newest `keep` ckpt-<step>.h5 in `dir` (never the one
 * DIR/latest names) and stale temporary files (of this process or of pids
 * that no longer exist: a live writer's are kept). keep <= 0: only the
 * temporaries. Returns the number of checkpoints removed, -1 on error. */
int ckpt_prune(const char *dir, int keep, pst_err *e);

#endif
