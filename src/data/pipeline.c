/*
 * pipeline.c - reader thread -> preprocessing threads -> shuffle buffer ->
 * batches (contract in pstrain/pipeline.h).
 *
 * Threads and what each one owns:
 *   reader     the h5ds (reads hold the HDF5 lock); per epoch it walks the
 *              split's chunks in an order shuffled by (seed, epoch) and cuts
 *              each chunk into blocks of at most blk_cap examples, numbered
 *              by a stream sequence `seq`, into a ring of nblocks blocks;
 *   workers    (only with augmentation) claim blocks in seq order and
 *              augment them in place; augmentation is a pure function of
 *              (seed, epoch, id, pixels), so which worker does it and when
 *              cannot matter;
 *   assembler  consumes blocks strictly in seq order, feeds the shuffle
 *              buffer, draws examples with an RNG seeded by (seed, epoch),
 *              fills batches into a ring of PIPE_NBAT batch slots;
 *   consumer   (the caller) takes batches in order in pipe_next.
 * So the batches are a function of (data, cfg) alone: thread count, timing,
 * and preload vs streaming never change them.
 *
 * Block life: FREE -(reader fills)-> READY -(worker)-> BUSY -> DONE
 * -(assembler copies out)-> FREE; without augmentation the reader marks
 * blocks DONE itself. Batch slot life: FREE -(assembler)-> FULL
 * -(pipe_next)-> OUT -(next pipe_next)-> FREE. One mutex guards all states
 * and counters; the data of a block or batch is touched without the lock
 * only by the thread whose state owns it.
 *
 * Shuffle buffer schedule (deterministic stand-in for TF's producer/consumer
 * race): the buffer is filled to capacity C, then examples are drawn while
 * it holds more than M (min_after_dequeue), then it is filled again; every
 * draw is thus uniform over between M+1 and C examples, the bounds TF's
 * RandomShuffleQueue guarantees. When an epoch's stream ends the buffer is
 * drained, and batches never straddle epochs.
 */
#include "pstrain/pipeline.h"
#include "pstrain/h5util.h"

#include <assert.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PIPE_NBAT 4            /* batch slots between assembler and consumer */
#define PIPE_BLOCK_BYTES 65536 /* target size of a block of examples */
#define PIPE_BLOCK_MAX 64      /* examples per block at most */
#define PIPE_MAX_THREADS 256
#define PIPE_AUTO_QUEUE_BYTES ((size_t)64 << 20) /* automatic shuffle buffer: 64 MiB ... */
#define PIPE_AUTO_QUEUE_MIN 1024                 /* ... but at least this many examples */

/* Tags that separate the random streams derived from one (seed, epoch). */
enum { TAG_CHUNKS = 1, TAG_DRAWS = 2, TAG_AUG = 3 };

enum { BLK_FREE, BLK_READY, BLK_BUSY, BLK_DONE };
enum { BAT_FREE, BAT_FULL, BAT_OUT };

typedef struct block {
    int state;
    int epoch;
    int count;
    bool epoch_end; /* the last block of its epoch's stream */
    int64_t seq;
    int64_t *ids;
    int32_t *labels;
    uint8_t *pixels;
} block;

typedef struct batch_slot {
    int state;
    pipe_batch b;
} batch_slot;

struct pipeline {
    h5ds *ds;
    pipe_cfg cfg;
    char split[8];
    int H, W, C;
    size_t img;      /* bytes per image */
    int64_t n;       /* examples per epoch */
    int64_t chunk;   /* examples per read unit (the file's chunk) */
    int64_t nchunks; /* ceil(n / chunk) */
    int end_epoch;   /* one past the last epoch (INT_MAX: unbounded) */
    bool aug;        /* crop or flip requested */

    uint8_t *pre_px; /* preloaded split, or NULL when streaming */
    int32_t *pre_lab;
    uint8_t *chunk_px; /* the reader's chunk buffer when streaming */
    int32_t *chunk_lab;
    int64_t *order; /* the reader's chunk order of the current epoch */

    int nblocks, blk_cap;
    block *blocks;
    int64_t produced;     /* blocks handed over by the reader */
    int64_t next_claim;   /* next block for a worker */
    int64_t next_consume; /* next block for the assembler */
    bool reader_done;

    /* shuffle buffer (assembler only) */
    int cap, size, nfree;
    uint8_t *buf_px;
    int64_t *buf_ids;
    int32_t *buf_lab;
    int *live;  /* slots holding examples, in insertion/draw order */
    int *spare; /* free slots (a stack) */

    batch_slot bat[PIPE_NBAT];
    int64_t made, handed; /* batches published by the assembler / given out */
    int out;              /* slot given out by the last pipe_next, or -1 */
    bool finished;

    pthread_mutex_t mu;
    pthread_cond_t cv_reader, cv_work, cv_asm, cv_consumer;
    pthread_t reader, assembler, *workers;
    int nworkers;
    bool reader_started, asm_started;
    bool stop, failed;
    pst_err err;
};

/* A well-mixed 64-bit value of (seed, epoch, tag, id). */
static uint64_t hash4(uint64_t seed, int64_t epoch, uint64_t tag, int64_t id)
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
static uint64_t rng_below(uint64_t *s, uint64_t n)
{
    return pst_splitmix64(s) % n;
}

/* ---- augmentation ----------------------------------------------------------- */

/* Random crop after zero padding by P (offset (oy, ox) in [-P, P]^2:
 * out(y, x) = in(y+oy, x+ox), 0 outside) then a horizontal flip with
 * probability 1/2, all drawn from (seed, epoch, id). In place; `scratch`
 * holds one image. */
static void augment_image(const pipeline *p, int epoch, int64_t id, uint8_t *img, uint8_t *scratch)
{
    const int H = p->H, W = p->W, C = p->C, P = p->cfg.crop_pad;
    uint64_t h = hash4(p->cfg.seed, epoch, TAG_AUG, id);
    int ox = 0, oy = 0;
    if (p->cfg.aug_crop && P > 0) {
        ox = (int)(h % (uint64_t)(2 * P + 1)) - P;
        oy = (int)((h >> 24) % (uint64_t)(2 * P + 1)) - P;
    }
    bool flip = p->cfg.aug_flip && (h >> 63);
    if (!ox && !oy && !flip) return;
    const size_t row = (size_t)W * (size_t)C;
    memcpy(scratch, img, p->img);
    /* valid output columns of the crop: 0 <= x+ox < W */
    const int x0 = PST_MAX(0, -ox), x1 = PST_MIN(W, W - ox);
    for (int y = 0; y < H; y++) {
        uint8_t *out = img + (size_t)y * row;
        const int sy = y + oy;
        if (sy < 0 || sy >= H || x0 >= x1) {
            memset(out, 0, row);
            continue;
        }
        const uint8_t *src = scratch + (size_t)sy * row;
        if (!flip) {
            memset(out, 0, (size_t)x0 * C);
            memcpy(out + (size_t)x0 * C, src + (size_t)(x0 + ox) * C, (size_t)(x1 - x0) * C);
            memset(out + (size_t)x1 * C, 0, (size_t)(W - x1) * C);
        } else {
            /* out(x) = crop(W-1-x) = src(W-1-x+ox), 0 outside the source */
            for (int x = 0; x < W; x++) {
                const int xs = W - 1 - x + ox;
                uint8_t *o = out + (size_t)x * C;
                if (xs < 0 || xs >= W) {
                    for (int c = 0; c < C; c++) o[c] = 0;
                } else {
                    const uint8_t *si = src + (size_t)xs * C;
                    for (int c = 0; c < C; c++) o[c] = si[c];
                }
            }
        }
    }
}

/* ---- failure and shutdown ----------------------------------------------------- */

/* Records the first error (message in `e`) and wakes everybody. Locks. */
static void pipe_set_failed(pipeline *p, const pst_err *e)
{
    pthread_mutex_lock(&p->mu);
    if (!p->failed) {
        p->failed = true;
        p->err = *e;
    }
    pthread_cond_broadcast(&p->cv_reader);
    pthread_cond_broadcast(&p->cv_work);
    pthread_cond_broadcast(&p->cv_asm);
    pthread_cond_broadcast(&p->cv_consumer);
    pthread_mutex_unlock(&p->mu);
}

/* pst_die on a pipeline thread (out of memory, say): the message goes to the
 * consumer's pipe_next, and the main thread reports it and exits or aborts
 * the job (MPI_Abort from this thread would break MPI_THREAD_FUNNELED).
 * Called on the dying thread, which holds neither p->mu (pst_die is never
 * called under it) nor, after this, the HDF5 lock. */
static void pipe_thread_died(void *ctx, const char *msg)
{
    pipeline *p = ctx;
    while (h5u_held()) h5u_unlock();
    pst_err e;
    snprintf(e.msg, sizeof e.msg, "pipeline thread: %s", msg);
    pipe_set_failed(p, &e);
}

/* ---- reader ------------------------------------------------------------------- */

/* Fills the chunk order of `epoch`: file order, or a permutation drawn from
 * (seed, epoch). */
static void chunk_order(const pipeline *p, int epoch, int64_t *order)
{
    for (int64_t k = 0; k < p->nchunks; k++) order[k] = k;
    if (!p->cfg.shuffle) return;
    uint64_t s = hash4(p->cfg.seed, epoch, TAG_CHUNKS, 0);
    for (int64_t k = p->nchunks - 1; k > 0; k--) {
        int64_t j = (int64_t)rng_below(&s, (uint64_t)k + 1);
        int64_t t = order[k];
        order[k] = order[j];
        order[j] = t;
    }
}

static void *reader_main(void *arg)
{
    pipeline *p = arg;
    pst_set_thread_die_handler(pipe_thread_died, p);
    pst_err e;
    int64_t seq = 0;
    for (int epoch = p->cfg.first_epoch; epoch < p->end_epoch; epoch++) {
        chunk_order(p, epoch, p->order);
        for (int64_t k = 0; k < p->nchunks; k++) {
            const int64_t first = p->order[k] * p->chunk;
            const int64_t cnt = PST_MIN(p->chunk, p->n - first);
            const uint8_t *px;
            const int32_t *lab;
            if (p->pre_px) {
                px = p->pre_px + (size_t)first * p->img;
                lab = p->pre_lab + first;
            } else {
                /* h5ds_read holds the HDF5 lock: the main thread may be
                 * evaluating or writing a checkpoint meanwhile */
                if (h5ds_read(p->ds, p->split, first, cnt, p->chunk_px, p->chunk_lab, &e) < 0) {
                    pipe_set_failed(p, &e);
                    return NULL;
                }
                px = p->chunk_px;
                lab = p->chunk_lab;
            }
            for (int64_t off = 0; off < cnt; off += p->blk_cap) {
                block *b = &p->blocks[seq % p->nblocks];
                pthread_mutex_lock(&p->mu);
                while (!p->stop && !p->failed && b->state != BLK_FREE)
                    pthread_cond_wait(&p->cv_reader, &p->mu);
                bool quit = p->stop || p->failed;
                pthread_mutex_unlock(&p->mu);
                if (quit) return NULL;

                b->epoch = epoch;
                b->count = (int)PST_MIN((int64_t)p->blk_cap, cnt - off);
                b->epoch_end = k == p->nchunks - 1 && off + b->count == cnt;
                for (int i = 0; i < b->count; i++) b->ids[i] = first + off + i;
                memcpy(b->labels, lab + off, sizeof(int32_t) * (size_t)b->count);
                memcpy(b->pixels, px + (size_t)off * p->img, p->img * (size_t)b->count);

                pthread_mutex_lock(&p->mu);
                b->seq = seq++;
                b->state = p->aug ? BLK_READY : BLK_DONE;
                p->produced = seq;
                pthread_cond_broadcast(p->aug ? &p->cv_work : &p->cv_asm);
                pthread_mutex_unlock(&p->mu);
            }
        }
    }
    pthread_mutex_lock(&p->mu);
    p->reader_done = true;
    pthread_cond_broadcast(&p->cv_work);
    pthread_cond_broadcast(&p->cv_asm);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- preprocessing workers ------------------------------------------------------ */

static void *worker_main(void *arg)
{
    pipeline *p = arg;
    pst_set_thread_die_handler(pipe_thread_died, p);
    uint8_t *scratch = pst_malloc(p->img);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && !p->failed && p->next_claim >= p->produced && !p->reader_done)
            pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop || p->failed || p->next_claim >= p->produced) break;
        /* a produced block not yet claimed cannot have been recycled */
        block *b = &p->blocks[p->next_claim % p->nblocks];
        assert(b->state == BLK_READY && b->seq == p->next_claim);
        b->state = BLK_BUSY;
        p->next_claim++;
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < b->count; i++)
            augment_image(p, b->epoch, b->ids[i], b->pixels + (size_t)i * p->img, scratch);
        pthread_mutex_lock(&p->mu);
        b->state = BLK_DONE;
        pthread_cond_broadcast(&p->cv_asm);
    }
    pthread_mutex_unlock(&p->mu);
    free(scratch);
    return NULL;
}

/* ---- assembler --------------------------------------------------------------------- */

typedef struct asm_state {
    batch_slot *cur; /* batch being filled, or NULL */
    uint64_t rng;
    int epoch;
} asm_state;

/* Publishes the batch being filled. 0, or -1 when stopping. */
static int publish(pipeline *p, asm_state *a)
{
    if (!a->cur) return 0;
    pthread_mutex_lock(&p->mu);
    a->cur->state = BAT_FULL;
    p->made++;
    pthread_cond_broadcast(&p->cv_consumer);
    pthread_mutex_unlock(&p->mu);
    a->cur = NULL;
    return 0;
}

/* Appends one example to the current batch (taking a free batch slot
 * first when needed) and publishes a full batch. 0, or -1 when stopping. */
static int emit(pipeline *p, asm_state *a, int64_t id, int32_t label, const uint8_t *px)
{
    if (!a->cur) {
        batch_slot *s = &p->bat[p->made % PIPE_NBAT];
        pthread_mutex_lock(&p->mu);
        while (!p->stop && !p->failed && s->state != BAT_FREE)
            pthread_cond_wait(&p->cv_asm, &p->mu);
        bool quit = p->stop || p->failed;
        pthread_mutex_unlock(&p->mu);
        if (quit) return -1;
        s->b.count = 0;
        s->b.epoch = a->epoch;
        s->b.index = p->made;
        a->cur = s;
    }
    pipe_batch *b = &a->cur->b;
    b->ids[b->count] = id;
    b->labels[b->count] = label;
    memcpy(b->pixels + (size_t)b->count * p->img, px, p->img);
    if (++b->count == p->cfg.batch) return publish(p, a);
    return 0;
}

/* Draws one example uniformly from the shuffle buffer into the batch. */
static int draw(pipeline *p, asm_state *a)
{
    assert(p->size > 0);
    int r = (int)rng_below(&a->rng, (uint64_t)p->size);
    int slot = p->live[r];
    p->live[r] = p->live[--p->size];
    p->spare[p->nfree++] = slot;
    return emit(p, a, p->buf_ids[slot], p->buf_lab[slot], p->buf_px + (size_t)slot * p->img);
}

/* Feeds the examples of one block into the shuffle buffer (or straight
 * into batches without shuffling). 0, or -1 when stopping. */
static int assemble_block(pipeline *p, asm_state *a, const block *b)
{
    if (b->epoch != a->epoch) {
        assert(p->size == 0 && !a->cur);
        a->epoch = b->epoch;
        a->rng = hash4(p->cfg.seed, b->epoch, TAG_DRAWS, 0);
    }
    const int M = p->cfg.min_after_dequeue;
    for (int i = 0; i < b->count; i++) {
        const uint8_t *px = b->pixels + (size_t)i * p->img;
        if (!p->cfg.shuffle) {
            if (emit(p, a, b->ids[i], b->labels[i], px) < 0) return -1;
            continue;
        }
        int slot = p->spare[--p->nfree];
        p->live[p->size++] = slot;
        p->buf_ids[slot] = b->ids[i];
        p->buf_lab[slot] = b->labels[i];
        memcpy(p->buf_px + (size_t)slot * p->img, px, p->img);
        if (p->size == p->cap)
            while (p->size > M)
                if (draw(p, a) < 0) return -1;
    }
    if (b->epoch_end) {
        while (p->size > 0)
            if (draw(p, a) < 0) return -1;
        if (publish(p, a) < 0) return -1;
    }
    return 0;
}

static void *assembler_main(void *arg)
{
    pipeline *p = arg;
    pst_set_thread_die_handler(pipe_thread_died, p);
    asm_state a = {.cur = NULL, .rng = 0, .epoch = -1};
    pthread_mutex_lock(&p->mu);
    for (;;) {
        block *b = &p->blocks[p->next_consume % p->nblocks];
        while (!p->stop && !p->failed && !(b->state == BLK_DONE && b->seq == p->next_consume) &&
               !(p->reader_done && p->next_consume == p->produced))
            pthread_cond_wait(&p->cv_asm, &p->mu);
        if (p->stop || p->failed) break;
        if (!(b->state == BLK_DONE && b->seq == p->next_consume)) {
            /* the reader is done and every block consumed: the last epoch's
             * last batch has been published */
            p->finished = true;
            pthread_cond_broadcast(&p->cv_consumer);
            break;
        }
        pthread_mutex_unlock(&p->mu);
        int rc = assemble_block(p, &a, b);
        pthread_mutex_lock(&p->mu);
        if (rc < 0) break;
        b->state = BLK_FREE;
        p->next_consume++;
        pthread_cond_broadcast(&p->cv_reader);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- public API ---------------------------------------------------------------------- */

pipe_cfg pipe_cfg_defaults(void)
{
    pipe_cfg c = {
        .split = "train",
        .batch = 64,
        .epochs = 1,
        .first_epoch = 0,
        .prep_threads = 2,
        .queue_capacity = 0,     /* auto: see pipeline.h */
        .min_after_dequeue = -1, /* auto */
        .seed = 1234,
        .shuffle = true,
        .aug_crop = false,
        .aug_flip = false,
        .crop_pad = 4,
        .limit = 0,
        .preload_bytes = (int64_t)512 << 20,
    };
    return c;
}

static int check_cfg(const pipe_cfg *c, pst_err *e)
{
    if (!c->split || !*c->split) return pst_fail(e, "pipeline: split: expected a split name");
    if (c->batch < 1) return pst_fail(e, "pipeline: batch = %d, expected >= 1", c->batch);
    if (c->epochs < 0) return pst_fail(e, "pipeline: epochs = %d, expected >= 0", c->epochs);
    if (c->first_epoch < 0)
        return pst_fail(e, "pipeline: first epoch = %d, expected >= 0", c->first_epoch);
    if (c->prep_threads < 1 || c->prep_threads > PIPE_MAX_THREADS)
        return pst_fail(e, "pipeline: prep threads = %d, expected 1..%d", c->prep_threads,
                        PIPE_MAX_THREADS);
    if (c->shuffle && c->queue_capacity < 0)
        return pst_fail(e, "pipeline: queue capacity = %d, expected >= 1 (or 0: automatic)",
                        c->queue_capacity);
    if (c->shuffle && c->queue_capacity > 0 && c->min_after_dequeue >= 0 &&
        c->min_after_dequeue >= c->queue_capacity)
        return pst_fail(e,
                        "pipeline: min after dequeue = %d, expected 0..%d (below the queue "
                        "capacity)",
                        c->min_after_dequeue, c->queue_capacity - 1);
    if (c->aug_crop && (c->crop_pad < 0 || c->crop_pad > 4096))
        return pst_fail(e, "pipeline: crop padding = %d, expected 0..4096", c->crop_pad);
    if (c->limit < 0)
        return pst_fail(e, "pipeline: limit = %lld, expected >= 0", (long long)c->limit);
    if (c->preload_bytes < 0)
        return pst_fail(e, "pipeline: preload bytes = %lld, expected >= 0",
                        (long long)c->preload_bytes);
    return 0;
}

int pipe_new(pipeline **out, h5ds *ds, const pipe_cfg *cfg, pst_err *e)
{
    *out = NULL;
    if (check_cfg(cfg, e) < 0) return -1;
    const h5ds_split *sp = h5ds_find_split(ds, cfg->split);
    if (!sp) return h5ds_no_split(ds, cfg->split, e);
    if (sp->count < 1) return pst_fail(e, "%s: /%s: no examples", ds->path, cfg->split);

    pipeline *p = pst_calloc(1, sizeof *p);
    p->ds = ds;
    p->cfg = *cfg;
    snprintf(p->split, sizeof p->split, "%s", sp->name);
    p->cfg.split = p->split;
    p->H = ds->height;
    p->W = ds->width;
    p->C = ds->channels;
    p->img = (size_t)p->H * (size_t)p->W * (size_t)p->C;
    p->n = cfg->limit > 0 ? PST_MIN(cfg->limit, sp->count) : sp->count;
    p->chunk = PST_MAX((int64_t)1, PST_MIN(sp->chunk_images, p->n));
    p->nchunks = (p->n + p->chunk - 1) / p->chunk;
    p->end_epoch = cfg->epochs > 0 ? cfg->epochs : INT_MAX;
    p->aug = cfg->aug_crop || cfg->aug_flip;
    p->out = -1;
    if (p->cfg.queue_capacity == 0) {
        /* automatic: as many examples as PIPE_AUTO_QUEUE_BYTES hold, at least
         * PIPE_AUTO_QUEUE_MIN, at most the epoch (then a full uniform shuffle) */
        int64_t cap = PST_MAX((int64_t)PIPE_AUTO_QUEUE_MIN,
                              (int64_t)(PIPE_AUTO_QUEUE_BYTES / PST_MAX(p->img, (size_t)1)));
        p->cfg.queue_capacity = (int)PST_MIN(cap, PST_MIN(p->n, (int64_t)INT_MAX));
    }
    if (p->cfg.min_after_dequeue < 0) p->cfg.min_after_dequeue = p->cfg.queue_capacity - 1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_reader, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_asm, NULL);
    pthread_cond_init(&p->cv_consumer, NULL);

    /* preload when the split (up to the limit) fits; the stream is the same
     * either way, the copy only saves the decompression each epoch */
    const int64_t need = p->n * (int64_t)(p->img + sizeof(int32_t));
    if (need <= cfg->preload_bytes) {
        p->pre_px = pst_malloc((size_t)p->n * p->img);
        p->pre_lab = pst_malloc(sizeof(int32_t) * (size_t)p->n);
        if (h5ds_read(ds, p->split, 0, p->n, p->pre_px, p->pre_lab, e) < 0) goto fail;
    } else {
        p->chunk_px = pst_malloc((size_t)p->chunk * p->img);
        p->chunk_lab = pst_malloc(sizeof(int32_t) * (size_t)p->chunk);
    }
    p->order = pst_malloc(sizeof(int64_t) * (size_t)p->nchunks);

    p->blk_cap =
        (int)PST_MAX((size_t)1, PST_MIN((size_t)PIPE_BLOCK_MAX, PIPE_BLOCK_BYTES / p->img));
    p->nblocks = p->aug ? 4 * cfg->prep_threads + 4 : 8;
    p->blocks = pst_calloc((size_t)p->nblocks, sizeof *p->blocks);
    for (int i = 0; i < p->nblocks; i++) {
        block *b = &p->blocks[i];
        b->state = BLK_FREE;
        b->seq = -1;
        b->ids = pst_malloc(sizeof(int64_t) * (size_t)p->blk_cap);
        b->labels = pst_malloc(sizeof(int32_t) * (size_t)p->blk_cap);
        b->pixels = pst_aligned_alloc(p->img * (size_t)p->blk_cap);
    }

    if (cfg->shuffle) {
        /* a buffer larger than the epoch behaves like one the size of the
         * epoch (everything is inserted before the first draw) */
        p->cap = (int)PST_MIN((int64_t)p->cfg.queue_capacity, p->n);
        p->buf_px = pst_aligned_alloc((size_t)p->cap * p->img);
        p->buf_ids = pst_malloc(sizeof(int64_t) * (size_t)p->cap);
        p->buf_lab = pst_malloc(sizeof(int32_t) * (size_t)p->cap);
        p->live = pst_malloc(sizeof(int) * (size_t)p->cap);
        p->spare = pst_malloc(sizeof(int) * (size_t)p->cap);
        for (int i = 0; i < p->cap; i++) p->spare[i] = p->cap - 1 - i;
        p->nfree = p->cap;
    }
    /* batches never straddle epochs: none holds more than an epoch */
    const size_t bcap = (size_t)PST_MIN((int64_t)cfg->batch, p->n);
    for (int i = 0; i < PIPE_NBAT; i++) {
        pipe_batch *b = &p->bat[i].b;
        p->bat[i].state = BAT_FREE;
        b->ids = pst_malloc(sizeof(int64_t) * bcap);
        b->labels = pst_malloc(sizeof(int32_t) * bcap);
        b->pixels = pst_aligned_alloc(p->img * bcap);
    }

    if (pthread_create(&p->reader, NULL, reader_main, p) != 0) {
        pst_fail(e, "pipeline: cannot start the reader thread");
        goto fail;
    }
    p->reader_started = true;
    if (p->aug) {
        p->workers = pst_calloc((size_t)cfg->prep_threads, sizeof *p->workers);
        for (int i = 0; i < cfg->prep_threads; i++) {
            if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) {
                pst_fail(e, "pipeline: cannot start preprocessing thread %d of %d", i + 1,
                         cfg->prep_threads);
                goto fail;
            }
            p->nworkers++;
        }
    }
    if (pthread_create(&p->assembler, NULL, assembler_main, p) != 0) {
        pst_fail(e, "pipeline: cannot start the batching thread");
        goto fail;
    }
    p->asm_started = true;
    *out = p;
    return 0;
fail:
    pipe_free(p);
    return -1;
}

int pipe_next(pipeline *p, pipe_batch *b, pst_err *e)
{
    pthread_mutex_lock(&p->mu);
    if (p->out >= 0) {
        p->bat[p->out].state = BAT_FREE;
        p->out = -1;
        pthread_cond_broadcast(&p->cv_asm);
    }
    const int i = (int)(p->handed % PIPE_NBAT);
    batch_slot *s = &p->bat[i];
    while (!p->failed && s->state != BAT_FULL && !p->finished)
        pthread_cond_wait(&p->cv_consumer, &p->mu);
    int rc = 0;
    if (p->failed) {
        if (e) *e = p->err;
        rc = -1;
    } else if (s->state == BAT_FULL) {
        s->state = BAT_OUT;
        p->out = i;
        p->handed++;
        *b = s->b;
        rc = 1;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int64_t pipe_batches_per_epoch(const pipeline *p)
{
    return (p->n + p->cfg.batch - 1) / p->cfg.batch;
}

int64_t pipe_examples_per_epoch(const pipeline *p)
{
    return p->n;
}

void pipe_free(pipeline *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv_reader);
    pthread_cond_broadcast(&p->cv_work);
    pthread_cond_broadcast(&p->cv_asm);
    pthread_cond_broadcast(&p->cv_consumer);
    pthread_mutex_unlock(&p->mu);
    if (p->reader_started) pthread_join(p->reader, NULL);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->workers[i], NULL);
    if (p->asm_started) pthread_join(p->assembler, NULL);
    free(p->workers);
    for (int i = 0; i < PIPE_NBAT; i++) {
        free(p->bat[i].b.ids);
        free(p->bat[i].b.labels);
        free(p->bat[i].b.pixels);
    }
    free(p->buf_px);
    free(p->buf_ids);
    free(p->buf_lab);
    free(p->live);
    free(p->spare);
    if (p->blocks)
        for (int i = 0; i < p->nblocks; i++) {
            free(p->blocks[i].ids);
            free(p->blocks[i].labels);
            free(p->blocks[i].pixels);
        }
    free(p->blocks);
    free(p->order);
    free(p->chunk_px);
    free(p->chunk_lab);
    free(p->pre_px);
    free(p->pre_lab);
    pthread_cond_destroy(&p->cv_reader);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_asm);
    pthread_cond_destroy(&p->cv_consumer);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* ---- normalisation ------------------------------------------------------------------ */

/* out = px*scale[c] + bias[c] with scale = 1/(255 std), bias = -mean/std.
 * The per-channel constants are laid out periodically over a span of
 * PIPE_NORM_SPAN pixels, so the inner loop is a plain vectorisable
 * multiply-add over C*PIPE_NORM_SPAN elements whatever C is. */
#define PIPE_NORM_SPAN 16
void pipe_normalize(const uint8_t *px, int64_t n_pixels, int C, const float *mean, const float *std,
                    float *out)
{
    assert(C >= 1 && C <= H5DS_MAX_CHANNELS);
    float sc[H5DS_MAX_CHANNELS * PIPE_NORM_SPAN], bi[H5DS_MAX_CHANNELS * PIPE_NORM_SPAN];
    const int span = C * PIPE_NORM_SPAN;
    for (int j = 0; j < span; j++) {
        const int c = j % C;
        /* A channel that is constant over the train split has std 0 (a sound
         * data set may have one): centre it without scaling. */
        const double sd = std[c] > 1e-12f ? (double)std[c] : 1.0;
        sc[j] = (float)(1.0 / (255.0 * sd));
        bi[j] = (float)(-(double)mean[c] / sd);
    }
    const int64_t n = n_pixels * C;
    int64_t i = 0;
    for (; i + span <= n; i += span) {
        const uint8_t *restrict src = px + i;
        float *restrict dst = out + i;
        for (int j = 0; j < span; j++) dst[j] = (float)src[j] * sc[j] + bi[j];
    }
    for (int j = 0; i < n; i++, j++) out[i] = (float)px[i] * sc[j] + bi[j];
}
