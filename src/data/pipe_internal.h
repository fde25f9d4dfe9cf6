/*
 * pipe_internal.h - the input pipeline's shared state, for the pipeline's
 * own files (the contract is include/pstrain/pipeline.h, the memory model
 * docs/design.md §3.2).
 *
 * reader threads -> preprocessing threads -> shuffle buffer -> batches, in
 * one file per role:
 *   pipeline.c       the public API and lifetime: pipe_new (checks, plan,
 *                    preload, buffers, threads), pipe_next, pipe_free, a
 *                    failure on any thread; pipe_normalize
 *   pipe_plan.c      sizes and the memory plan (read units of an encoded
 *                    split, blocks, shuffle buffer, preload or stream)
 *   pipe_reader.c    reader threads: unit order, reads (direct chunk reads,
 *                    Fletcher-32, inflate), blocks
 *   pipe_prep.c      preprocessing workers: decode or recipe, crop and flip
 *   pipe_assemble.c  the assembler: shuffle buffer and batches
 *
 * Threads and what each one owns:
 *   readers    (1 when preloaded, else up to PIPE_MAX_READERS) claim the
 *              read units of the stream in order - per epoch the split's
 *              units (pixels: HDF5 chunks; encoded: runs of examples of
 *              about PIPE_UNIT_BYTES) in an order shuffled by (seed, epoch) -
 *              read one each (the HDF5 part under the HDF5 lock; the inflate,
 *              unshuffle and Fletcher-32 check of a deflated pixels chunk
 *              outside it, so several readers inflate in parallel) and cut it
 *              into blocks of at most blk_cap examples. A unit's blocks have
 *              sequence numbers fixed when it is claimed, so readers finish
 *              out of order without changing the stream;
 *   workers    (when there is per-example work: decoding, a recipe, crop or
 *              flip) take ready blocks and write their output images; the
 *              output is a pure function of (seed, epoch, id, stored example),
 *              so which worker does it and when cannot matter;
 *   assembler  consumes blocks strictly in seq order, feeds the shuffle
 *              buffer, draws examples with an RNG seeded by (seed, epoch),
 *              fills batches into a ring of PIPE_NBAT batch slots;
 *   consumer   (the caller) takes batches in order in pipe_next.
 * So the batches are a function of (data, cfg) alone: thread counts, timing,
 * and preload vs streaming never change them.
 *
 * Locking. Block life: FREE -(reader fills)-> READY -(worker)-> BUSY -> DONE
 * -(assembler copies out)-> FREE; without per-example work the reader marks
 * blocks DONE itself. Block seq q lives in slot q % nblocks and a reader
 * takes that slot only once seq q - nblocks has been consumed. Batch slot
 * life: FREE -(assembler)-> FULL -(pipe_next)-> OUT -(next pipe_next)->
 * FREE. One mutex (mu) guards all states and counters; the data of a block
 * or batch is touched without the lock only by the thread whose state owns
 * it. A thread never takes the HDF5 lock (h5util.h) while it holds mu.
 */
#ifndef PSTRAIN_PIPE_INTERNAL_H
#define PSTRAIN_PIPE_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pstrain/common.h"
#include "pstrain/h5ds.h"
#include "pstrain/pipeline.h"

#define PIPE_NBAT 4            /* batch slots between assembler and consumer */
#define PIPE_BLOCK_BYTES 65536 /* target size of a block of stored pixels */
#define PIPE_BLOCK_MAX 64      /* examples per block at most */
#define PIPE_WORK_BLOCK_MAX 8  /* ... when each example is decoded or resized */
#define PIPE_MAX_THREADS 256
#define PIPE_MAX_READERS 4                           /* reader threads when streaming */
#define PIPE_MAX_SIDE 16384                          /* output height and width at most */
#define PIPE_UNIT_BYTES ((int64_t)1 << 20)           /* encoded read unit without a chunk size */
#define PIPE_UNIT_MAX 4096                           /* ... and at most this many examples */
#define PIPE_AUTO_QUEUE_BYTES ((size_t)64 << 20)     /* automatic shuffle buffer: 64 MiB ... */
#define PIPE_AUTO_QUEUE_MIN 1024                     /* ... but at least this many examples */
#define PIPE_H5_CACHE_BYTES ((int64_t)32 << 20)      /* h5ds's chunk cache of the split read */
#define PIPE_H5_SMALL_CACHE_BYTES ((int64_t)4 << 20) /* ... of its labels and offsets */
#define PIPE_BUDGET_FRACTION 4                       /* default budget: RAM / 4 */
#define PIPE_BUDGET_MIN ((int64_t)256 << 20)

/* Tags that separate the random streams derived from one (seed, epoch). */
enum { TAG_CHUNKS = 1, TAG_DRAWS = 2, TAG_AUG = 3 };

enum { BLK_FREE, BLK_READY, BLK_BUSY, BLK_DONE };
enum { BAT_FREE, BAT_FULL, BAT_OUT };

/* How stored examples become output images. */
enum {
    MODE_PIXELS,        /* stored pixels are the output (crop/flip in place) */
    MODE_PIXELS_RECIPE, /* aug_from_pixels: stored pixels -> output */
    MODE_ENCODED        /* aug_from_jpeg: stored JPEG bytes -> output */
};

/* HDF5 filter ids (H5Zpublic.h) of the pipelines the direct chunk path undoes. */
enum { FILT_DEFLATE = 1, FILT_SHUFFLE = 2, FILT_FLETCHER32 = 3, FILT_MAX = 8 };

typedef struct block {
    int state;
    int epoch;
    int count;
    bool epoch_end; /* the last block of its epoch's stream */
    int64_t seq;
    int64_t *ids;
    int32_t *labels;
    uint8_t *in; /* MODE_PIXELS_RECIPE: count stored images; MODE_ENCODED: their bytes */
    size_t in_cap;
    int64_t *in_off; /* MODE_ENCODED: count+1 offsets into `in` */
    uint8_t *pixels; /* count output images */
    uint8_t *keep;   /* count flags: the example goes to a batch with pixels */
} block;

typedef struct batch_slot {
    int state;
    pipe_batch b;
} batch_slot;

typedef struct pipeline pipeline;

/* What one reader thread owns. */
typedef struct reader {
    pipeline *p;
    pthread_t th;
    uint8_t *raw; /* a chunk as stored (direct chunk reads) */
    size_t raw_cap;
    uint8_t *px;    /* a chunk's images (pixels streaming) */
    uint8_t *bytes; /* a unit's encoded bytes (encoded streaming) */
    size_t bytes_cap;
    int64_t *off;  /* a unit's offsets (encoded), unit_max + 1 */
    int32_t *lab;  /* a unit's labels (streaming), unit_max */
    uint8_t *keep; /* a unit's keep flags, unit_max */
} reader;

struct pipeline {
    h5ds *ds;
    pipe_cfg cfg;
    char split[8];
    int mode;
    int H, W, C;               /* stored size (encoded: 0 x 0 x C) */
    int oh, ow;                /* output size */
    size_t img;                /* bytes per stored image (pixels) */
    size_t out_img;            /* bytes per output image */
    int64_t n;                 /* examples per epoch */
    int64_t chunk;             /* pixels: examples per read unit (the file's chunk) */
    int64_t nunits;            /* read units per epoch */
    int64_t unit_max;          /* examples in a unit at most */
    int64_t *unit_first;       /* encoded: nunits+1 first examples of the units */
    int64_t *enc_off;          /* encoded: n+1 offsets of the examples in /<split>/encoded */
    int end_epoch;             /* one past the last epoch (INT_MAX: unbounded) */
    bool crop_flip;            /* crop or flip requested */
    bool work;                 /* blocks need a worker */
    bool auto_queue, auto_min; /* capacity / min after dequeue chosen here */

    /* direct chunk reads of a deflated pixels split */
    bool direct;
    bool enc_direct; /* encoded: chunks read with H5Dread_chunk */
    int64_t enc_cb;  /* encoded: bytes per chunk of /<split>/encoded */
    int64_t fchunk;  /* the file's images per chunk */
    int nfilt;
    int filt[FILT_MAX];
    int64_t raw_cap_plan; /* raw buffer a reader plans for */

    uint8_t *pre_px;    /* preloaded split (pixels), or NULL when streaming */
    uint8_t *pre_bytes; /* preloaded split (encoded) */
    int32_t *pre_lab;
    int64_t *order; /* the chunk order of epoch claim_epoch */
    /* batches without pixels (cfg.skip_batches, cfg.share_*): keep[id] says
     * whether example id of epoch claim_epoch goes to a batch with pixels
     * (NULL: every example does); sim_live is pipe_keep_map's buffer */
    uint8_t *keep;
    int64_t *sim_live;
    int64_t prepared; /* examples the workers made output images of */

    int nreaders, readers_started;
    reader *readers;
    int readers_live;
    int claim_epoch; /* the next unit to claim: order[claim_k] of claim_epoch */
    int64_t claim_k;
    int64_t claim_seq; /* the first block seq of that unit */

    int nblocks, blk_cap;
    block *blocks;
    int64_t next_consume; /* next block for the assembler */
    bool reader_done;     /* every reader ended: claim_seq blocks in all */

    /* shuffle buffer (assembler only) */
    int cap, size, nfree;
    uint8_t *buf_px;
    int64_t *buf_ids;
    int32_t *buf_lab;
    uint8_t *buf_keep;
    int *live;  /* slots holding examples, in insertion/draw order */
    int *spare; /* free slots (a stack) */

    batch_slot bat[PIPE_NBAT];
    int64_t made, handed; /* batches published by the assembler / given out */
    int out;              /* slot given out by the last pipe_next, or -1 */
    bool finished;

    pipe_info info;

    pthread_mutex_t mu;
    pthread_cond_t cv_reader, cv_work, cv_asm, cv_consumer;
    pthread_t assembler, *workers;
    int nworkers;
    bool asm_started;
    bool stop, failed;
    pst_err err;
};

/* A well-mixed 64-bit value of (seed, epoch, tag, id). */
static inline uint64_t hash4(uint64_t seed, int64_t epoch, uint64_t tag, int64_t id)
{
    uint64_t s = seed;
    uint64_t h = pst_splitmix64(&s);
    s = h ^ ((uint64_t)epoch * 0xD1B54A32D192ED03ull);
    h = pst_splitmix64(&s);
    s = h ^ (tag * 0x8CB92BA72F3D8DD7ull);
    h = pst_splitmix64(&s);
    s = h ^ (uint64_t)id;
    return pst_splitmix64(&s);
}

/* Uniform in [0, n). The modulo bias is below n/2^64: irrelevant here. */
static inline uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return pst_splitmix64(s) % n;
}

/* pipeline.c: records the first error (message in `e`) and wakes every
 * thread. Locks p->mu. */
void pipe_set_failed(pipeline *p, const pst_err *e);
/* pipeline.c: the pst_die handler of every pipeline thread (ctx: the
 * pipeline). */
void pipe_thread_died(void *ctx, const char *msg);

/* pipe_plan.c: the read units of an encoded split; the memory plan. */
int pipe_encoded_index(pipeline *p, const h5ds_split *sp, int64_t *max_px, int64_t *unit_max_bytes,
                       pst_err *e);
int pipe_plan(pipeline *p, int64_t max_px, int64_t unit_max_bytes, pst_err *e);

/* pipe_reader.c: the unit order of an epoch; the examples [*first, *first +
 * *cnt) of unit u; whether a split's chunks can
 * be read directly (under the HDF5 lock); direct reads of encoded examples;
 * the reader thread (arg: its reader). */
void pipe_chunk_order(const pipeline *p, int epoch, int64_t *order);
void pipe_unit_range(const pipeline *p, int64_t u, int64_t *first, int64_t *cnt);
bool pipe_direct_setup(pipeline *p, const h5ds_split *sp);
bool pipe_enc_direct_setup(pipeline *p, const h5ds_split *sp);
int pipe_read_encoded_direct(pipeline *p, uint8_t **raw, size_t *raw_cap, int64_t first,
                             int64_t cnt, uint8_t *dst, int32_t *lab, pst_err *e);
void *pipe_reader_main(void *arg);

/* pipe_prep.c: a preprocessing worker thread (arg: the pipeline). */
void *pipe_worker_main(void *arg);

/* pipe_assemble.c: the assembler thread (arg: the pipeline); whether batch
 * `index` gets pixels; the keep flags of `epoch` (p->keep, p->order holding
 * that epoch's unit order), found by replaying the assembler's shuffle on
 * ids alone. */
void *pipe_assembler_main(void *arg);
bool pipe_batch_kept(const pipeline *p, int64_t index);
void pipe_keep_map(pipeline *p, int epoch);

#endif
