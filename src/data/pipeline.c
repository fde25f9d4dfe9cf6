/*
 * pipeline.c - reader threads -> preprocessing threads -> shuffle buffer ->
 * batches (contract in pstrain/pipeline.h, memory model in docs/design.md
 * §3.2).
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
 * Block life: FREE -(reader fills)-> READY -(worker)-> BUSY -> DONE
 * -(assembler copies out)-> FREE; without per-example work the reader marks
 * blocks DONE itself. Block seq q lives in slot q % nblocks and a reader
 * takes that slot only once seq q - nblocks has been consumed. Batch slot
 * life: FREE -(assembler)-> FULL -(pipe_next)-> OUT -(next pipe_next)->
 * FREE. One mutex guards all states and counters; the data of a block or
 * batch is touched without the lock only by the thread whose state owns it.
 *
 * Shuffle buffer schedule (deterministic stand-in for TF's producer/consumer
 * race): the buffer is filled to capacity C, then examples are drawn while
 * it holds more than M (min_after_dequeue), then it is filled again; every
 * draw is thus uniform over between M+1 and C examples, the bounds TF's
 * RandomShuffleQueue guarantees. When an epoch's stream ends the buffer is
 * drained, and batches never straddle epochs.
 */
#include "pstrain/pipeline.h"
#include "pstrain/augment.h"
#include "pstrain/h5util.h"

#include <assert.h>
#include <hdf5.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

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
    int64_t *off; /* a unit's offsets (encoded), unit_max + 1 */
    int32_t *lab; /* a unit's labels (streaming), unit_max */
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

/* ---- sizes ------------------------------------------------------------------- */

int64_t pipe_default_memory_budget(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    int64_t ram = pages > 0 && page > 0 ? (int64_t)pages * (int64_t)page : 0;
    return PST_MAX(PIPE_BUDGET_MIN, ram / PIPE_BUDGET_FRACTION);
}

int pipe_parse_size(const char *s, int64_t *out)
{
    if (!s || !*s) return -1;
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0)) return -1;
    double mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1024.0;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1024.0 * 1024;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1024.0 * 1024 * 1024;
        end++;
        break;
    case 't':
    case 'T':
        mul = 1024.0 * 1024 * 1024 * 1024;
        end++;
        break;
    default:
        break;
    }
    if (mul > 1 && *end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    double b = v * mul;
    if (b < 1 || b > 9.0e18) return -1;
    *out = (int64_t)b;
    return 0;
}

const char *pipe_fmt_size(int64_t bytes, char buf[32])
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (u == 0)
        snprintf(buf, 32, "%lld bytes", (long long)bytes);
    else
        snprintf(buf, 32, "%.1f %s", v, units[u]);
    return buf;
}

/* ---- crop and flip ----------------------------------------------------------- */

/* Random crop after zero padding by P (offset (oy, ox) in [-P, P]^2:
 * out(y, x) = in(y+oy, x+ox), 0 outside) then a horizontal flip with
 * probability 1/2, all drawn from h = hash4(seed, epoch, TAG_AUG, id). In
 * place on an output image; `scratch` holds one. */
static void crop_flip_image(const pipeline *p, uint64_t h, uint8_t *img, uint8_t *scratch)
{
    const int H = p->oh, W = p->ow, C = p->C, P = p->cfg.crop_pad;
    int ox = 0, oy = 0;
    if (p->cfg.aug_crop && P > 0) {
        ox = (int)(h % (uint64_t)(2 * P + 1)) - P;
        oy = (int)((h >> 24) % (uint64_t)(2 * P + 1)) - P;
    }
    bool flip = p->cfg.aug_flip && (h >> 63);
    if (!ox && !oy && !flip) return;
    const size_t row = (size_t)W * (size_t)C;
    memcpy(scratch, img, p->out_img);
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

/* ---- read units ----------------------------------------------------------------- */

/* Examples [*first, *first + *cnt) of unit u. */
static void unit_range(const pipeline *p, int64_t u, int64_t *first, int64_t *cnt)
{
    if (p->unit_first) {
        *first = p->unit_first[u];
        *cnt = p->unit_first[u + 1] - *first;
    } else {
        *first = u * p->chunk;
        *cnt = PST_MIN(p->chunk, p->n - *first);
    }
}

/* Fills the unit order of `epoch`: file order, or a permutation drawn from
 * (seed, epoch). */
static void chunk_order(const pipeline *p, int epoch, int64_t *order)
{
    for (int64_t k = 0; k < p->nunits; k++) order[k] = k;
    if (!p->cfg.shuffle) return;
    uint64_t s = hash4(p->cfg.seed, epoch, TAG_CHUNKS, 0);
    for (int64_t k = p->nunits - 1; k > 0; k--) {
        int64_t j = (int64_t)rng_below(&s, (uint64_t)k + 1);
        int64_t t = order[k];
        order[k] = order[j];
        order[j] = t;
    }
}

/* HDF5's Fletcher-32 (H5checksum.c): 16-bit big-endian words, odd last byte
 * as the high byte of a word. */
static uint32_t fletcher32(const uint8_t *data, size_t n)
{
    size_t len = n / 2;
    uint32_t sum1 = 0, sum2 = 0;
    while (len) {
        size_t t = len > 360 ? 360 : len;
        len -= t;
        do {
            sum1 += (uint32_t)(((uint16_t)data[0]) << 8) | ((uint16_t)data[1]);
            data += 2;
            sum2 += sum1;
        } while (--t);
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    if (n % 2) {
        sum1 += (uint32_t)(((uint16_t)*data) << 8);
        sum2 += sum1;
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    return (sum2 << 16) | sum1;
}

/* Checks and strips the Fletcher-32 checksum HDF5 appends to a chunk (cur,
 * *n bytes): 0, or -1 with the reason in `why`. */
static int fletcher_strip(const uint8_t *cur, size_t *n, const char **why)
{
    if (*n < 4) {
        *why = "shorter than its Fletcher-32 checksum";
        return -1;
    }
    *n -= 4;
    const uint8_t *s = cur + *n;
    uint32_t stored =
        (uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24;
    uint32_t f = fletcher32(cur, *n);
    /* HDF5 before 1.6.3 stored the checksum's bytes swapped in pairs; the
     * library accepts both, and so do we */
    uint32_t rev = ((f & 0x00ff00ffu) << 8) | ((f >> 8) & 0x00ff00ffu);
    if (stored != f && stored != rev) {
        *why = "Fletcher-32 checksum mismatch (the file is corrupt)";
        return -1;
    }
    return 0;
}

/* Undoes the filter pipeline of a chunk read with H5Dread_chunk (raw, n
 * bytes, filter_mask `mask`) into out (exactly `want` bytes), as HDF5's own
 * read would: the filters in reverse order, those whose mask bit is set
 * skipped. Runs without the HDF5 lock. `where` names the chunk in messages
 * ("images: chunk at example 32"). */
static int unfilter_chunk(const pipeline *p, const char *where, uint8_t *raw, size_t n,
                          unsigned mask, uint8_t *out, size_t want, pst_err *e)
{
    const uint8_t *cur = raw;
    const char *why;
    bool inflated = false;
    for (int i = p->nfilt - 1; i >= 0; i--) {
        if (mask & (1u << i)) continue;
        switch (p->filt[i]) {
        case FILT_FLETCHER32:
            if (inflated)
                return pst_fail(e, "%s: /%s/%s: unexpected filter order", p->ds->path, p->split,
                                where);
            if (fletcher_strip(cur, &n, &why) < 0)
                return pst_fail(e, "%s: /%s/%s: %s", p->ds->path, p->split, where, why);
            break;
        case FILT_DEFLATE: {
            if (inflated)
                return pst_fail(e, "%s: /%s/%s: deflated twice", p->ds->path, p->split, where);
            uLongf got = (uLongf)want;
            int zr = uncompress(out, &got, cur, (uLong)n);
            if (zr != Z_OK || got != (uLongf)want)
                return pst_fail(e, "%s: /%s/%s: inflate failed (%s; %lu of %zu bytes)", p->ds->path,
                                p->split, where, zr == Z_OK ? "short" : zError(zr),
                                (unsigned long)got, want);
            inflated = true;
            cur = out;
            n = want;
            break;
        }
        case FILT_SHUFFLE:
            break; /* 1-byte elements (checked in direct_setup): the identity */
        default:
            return pst_fail(e, "%s: /%s/%s: unexpected filter %d", p->ds->path, p->split, where,
                            p->filt[i]);
        }
    }
    if (n != want)
        return pst_fail(e, "%s: /%s/%s holds %zu bytes, expected %zu", p->ds->path, p->split, where,
                        n, want);
    if (!inflated) memcpy(out, cur, want);
    return 0;
}

/* Whether /<split>/images can be read chunk by chunk with H5Dread_chunk and
 * unfiltered here: chunked by whole images, deflated, every filter one this
 * file knows (shuffle with 1-byte elements, deflate, Fletcher-32). Called
 * under the HDF5 lock. */
static bool direct_setup(pipeline *p, const h5ds_split *sp)
{
    hid_t d = (hid_t)sp->images_id;
    hid_t dcpl = H5Dget_create_plist(d);
    if (dcpl < 0) return false;
    bool ok = false, deflate = false;
    hsize_t cd[4];
    if (H5Pget_layout(dcpl) != H5D_CHUNKED || H5Pget_chunk(dcpl, 4, cd) != 4 ||
        cd[1] != (hsize_t)p->H || cd[2] != (hsize_t)p->W || cd[3] != (hsize_t)p->C)
        goto done;
    int nf = H5Pget_nfilters(dcpl);
    if (nf < 1 || nf > FILT_MAX) goto done;
    for (int i = 0; i < nf; i++) {
        unsigned flags, cdv[8];
        size_t ncd = 8;
        char name[64];
        H5Z_filter_t f =
            H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cdv, sizeof name, name, NULL);
        if (f == H5Z_FILTER_DEFLATE)
            deflate = true;
        else if (f == H5Z_FILTER_SHUFFLE) {
            if (ncd >= 1 && cdv[0] != 1) goto done; /* elements of more than one byte */
        } else if (f != H5Z_FILTER_FLETCHER32)
            goto done;
        p->filt[i] = (int)f;
    }
    p->nfilt = nf;
    p->fchunk = (int64_t)cd[0];
    ok = deflate; /* without deflate there is nothing to do in parallel */
done:
    H5Pclose(dcpl);
    return ok;
}

/* Reads the pixels chunk of unit [first, first+cnt) into r->px with a direct
 * chunk read: the storage size and the bytes under the HDF5 lock, the rest
 * outside it. */
static int read_direct(reader *r, int64_t first, int64_t cnt, pst_err *e)
{
    pipeline *p = r->p;
    const size_t want = (size_t)p->fchunk * p->img;
    hid_t d = (hid_t)h5ds_find_split(p->ds, p->split)->images_id;
    hsize_t off[4] = {(hsize_t)first, 0, 0, 0}, size = 0;
    uint32_t mask = 0;
    char why[256];
    h5u_lock();
    herr_t rc = H5Dget_chunk_storage_size(d, off, &size);
    if (rc >= 0 && size > 0) {
        if (size > r->raw_cap) {
            r->raw = pst_realloc(r->raw, (size_t)size);
            r->raw_cap = (size_t)size;
        }
        rc = H5Dread_chunk(d, H5P_DEFAULT, off, &mask, r->raw);
    }
    int lr = rc >= 0 && size > 0 ? h5ds_read(p->ds, p->split, first, cnt, NULL, r->lab, e) : 0;
    if (rc < 0) h5u_reason(why);
    h5u_unlock();
    if (rc < 0)
        return pst_fail(e, "%s: /%s/images: reading the chunk at example %lld failed (%s)",
                        p->ds->path, p->split, (long long)first, why);
    if (size == 0) /* never written (fill values): let HDF5 produce them */
        return h5ds_read(p->ds, p->split, first, cnt, r->px, r->lab, e);
    if (lr < 0) return -1;
    char where[64];
    snprintf(where, sizeof where, "images: chunk at example %lld", (long long)first);
    return unfilter_chunk(p, where, r->raw, (size_t)size, mask, r->px, want, e);
}

/* Whether /<split>/encoded can be read chunk by chunk with H5Dread_chunk:
 * chunked, 1-D, no filter but Fletcher-32. (HDF5 1.10's chunk cache keeps
 * far more than its byte limit when partly read Fletcher-32 chunks are
 * read at random - 150 MiB of 227 after 400 reads with a 1 MiB cache - so
 * streaming must not read through it.) Under the HDF5 lock. */
static bool enc_direct_setup(pipeline *p, const h5ds_split *sp)
{
    hid_t dcpl = H5Dget_create_plist((hid_t)sp->encoded_id);
    if (dcpl < 0) return false;
    bool ok = false;
    hsize_t cd[1];
    if (H5Pget_layout(dcpl) != H5D_CHUNKED || H5Pget_chunk(dcpl, 1, cd) != 1 || cd[0] < 1)
        goto done;
    int nf = H5Pget_nfilters(dcpl);
    if (nf < 0 || nf > 1) goto done;
    if (nf == 1) {
        unsigned flags, cdv[8];
        size_t ncd = 8;
        char name[64];
        H5Z_filter_t f = H5Pget_filter2(dcpl, 0, &flags, &ncd, cdv, sizeof name, name, NULL);
        if (f != H5Z_FILTER_FLETCHER32) goto done;
        p->filt[0] = FILT_FLETCHER32;
    }
    p->nfilt = nf;
    p->enc_cb = (int64_t)cd[0];
    ok = true;
done:
    H5Pclose(dcpl);
    return ok;
}

/* Examples [first, first+cnt) of an encoded split: their bytes into dst
 * (enc_off[first+cnt] - enc_off[first]), labels into lab. Each chunk of
 * /<split>/encoded they touch is read whole with H5Dread_chunk into `raw`
 * (*raw_cap bytes, grown as needed) under the HDF5 lock; its checksum is
 * checked and the bytes copied outside it. */
static int read_encoded_direct(pipeline *p, uint8_t **raw, size_t *raw_cap, int64_t first,
                               int64_t cnt, uint8_t *dst, int32_t *lab, pst_err *e)
{
    if (h5ds_read_encoded(p->ds, p->split, first, cnt, NULL, NULL, 0, lab, NULL, NULL, e) < 0)
        return -1;
    const int64_t a = p->enc_off[first], b = p->enc_off[first + cnt], cb = p->enc_cb;
    hid_t d = (hid_t)h5ds_find_split(p->ds, p->split)->encoded_id;
    for (int64_t c = a / cb; c * cb < b; c++) {
        hsize_t off = (hsize_t)(c * cb), size = 0;
        uint32_t mask = 0;
        char why[256] = "never written";
        h5u_lock();
        herr_t rc = H5Dget_chunk_storage_size(d, &off, &size);
        if (rc >= 0 && size > *raw_cap) {
            *raw = pst_realloc(*raw, (size_t)size);
            *raw_cap = (size_t)size;
        }
        if (rc >= 0 && size > 0) rc = H5Dread_chunk(d, H5P_DEFAULT, &off, &mask, *raw);
        if (rc < 0) h5u_reason(why);
        h5u_unlock();
        if (rc < 0 || size == 0)
            return pst_fail(e, "%s: /%s/encoded: reading the chunk at byte %lld failed (%s)",
                            p->ds->path, p->split, (long long)(c * cb), why);
        size_t n = (size_t)size;
        const char *bad;
        if (p->nfilt == 1 && !(mask & 1u) && fletcher_strip(*raw, &n, &bad) < 0)
            return pst_fail(e, "%s: /%s/encoded: chunk at byte %lld: %s", p->ds->path, p->split,
                            (long long)(c * cb), bad);
        const int64_t lo = PST_MAX(a, c * cb), hi = PST_MIN(b, (c + 1) * cb);
        if ((int64_t)n < hi - c * cb)
            return pst_fail(e, "%s: /%s/encoded: chunk at byte %lld holds %zu bytes, expected %lld",
                            p->ds->path, p->split, (long long)(c * cb), n, (long long)cb);
        memcpy(dst + (lo - a), *raw + (lo - c * cb), (size_t)(hi - lo));
    }
    return 0;
}

/* Waits until block seq q may be filled; NULL when stopping. */
static block *claim_block(pipeline *p, int64_t q)
{
    block *b = &p->blocks[q % p->nblocks];
    pthread_mutex_lock(&p->mu);
    while (!p->stop && !p->failed && !(b->state == BLK_FREE && q - p->next_consume < p->nblocks))
        pthread_cond_wait(&p->cv_reader, &p->mu);
    bool quit = p->stop || p->failed;
    pthread_mutex_unlock(&p->mu);
    return quit ? NULL : b;
}

static void *reader_main(void *arg)
{
    reader *r = arg;
    pipeline *p = r->p;
    pst_set_thread_die_handler(pipe_thread_died, p);
    pst_err e;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        if (p->stop || p->failed || p->claim_epoch >= p->end_epoch) {
            pthread_mutex_unlock(&p->mu);
            break;
        }
        const int epoch = p->claim_epoch;
        const bool last = p->claim_k == p->nunits - 1;
        int64_t first, cnt;
        unit_range(p, p->order[p->claim_k], &first, &cnt);
        const int64_t seq0 = p->claim_seq, nb = (cnt + p->blk_cap - 1) / p->blk_cap;
        p->claim_seq += nb;
        if (++p->claim_k == p->nunits) {
            p->claim_k = 0;
            if (++p->claim_epoch < p->end_epoch) chunk_order(p, p->claim_epoch, p->order);
        }
        pthread_mutex_unlock(&p->mu);

        /* the unit's examples: px (pixels) or bytes + off (encoded), lab */
        const uint8_t *px = NULL, *bytes = NULL;
        const int64_t *off = r->off;
        const int32_t *lab;
        int rc = 0;
        if (p->mode == MODE_ENCODED) {
            if (p->pre_bytes) {
                bytes = p->pre_bytes + p->enc_off[first];
                for (int64_t i = 0; i <= cnt; i++)
                    r->off[i] = p->enc_off[first + i] - p->enc_off[first];
                lab = p->pre_lab + first;
            } else {
                /* h5ds_read_encoded holds the HDF5 lock: the main thread may
                 * be evaluating or writing a checkpoint meanwhile */
                for (int64_t i = 0; i <= cnt; i++)
                    r->off[i] = p->enc_off[first + i] - p->enc_off[first];
                if (p->enc_direct)
                    rc = read_encoded_direct(p, &r->raw, &r->raw_cap, first, cnt, r->bytes, r->lab,
                                             &e);
                else
                    rc = h5ds_read_encoded(p->ds, p->split, first, cnt, r->off, r->bytes,
                                           r->bytes_cap, r->lab, NULL, NULL, &e);
                bytes = r->bytes;
                lab = r->lab;
            }
        } else if (p->pre_px) {
            px = p->pre_px + (size_t)first * p->img;
            lab = p->pre_lab + first;
        } else {
            rc = p->direct ? read_direct(r, first, cnt, &e)
                           : h5ds_read(p->ds, p->split, first, cnt, r->px, r->lab, &e);
            px = r->px;
            lab = r->lab;
        }
        if (rc < 0) {
            pipe_set_failed(p, &e);
            return NULL;
        }

        for (int64_t j = 0; j < nb; j++) {
            const int64_t q = seq0 + j, o = j * p->blk_cap;
            block *b = claim_block(p, q);
            if (!b) return NULL;
            b->epoch = epoch;
            b->count = (int)PST_MIN((int64_t)p->blk_cap, cnt - o);
            b->epoch_end = last && j == nb - 1;
            for (int i = 0; i < b->count; i++) b->ids[i] = first + o + i;
            memcpy(b->labels, lab + o, sizeof(int32_t) * (size_t)b->count);
            if (p->mode == MODE_PIXELS)
                memcpy(b->pixels, px + (size_t)o * p->img, p->img * (size_t)b->count);
            else if (p->mode == MODE_PIXELS_RECIPE)
                memcpy(b->in, px + (size_t)o * p->img, p->img * (size_t)b->count);
            else {
                const size_t nbytes = (size_t)(off[o + b->count] - off[o]);
                if (nbytes > b->in_cap) { /* within the plan's max_block_bytes */
                    free(b->in);
                    b->in = pst_malloc(nbytes);
                    b->in_cap = nbytes;
                }
                memcpy(b->in, bytes + off[o], nbytes);
                for (int i = 0; i <= b->count; i++) b->in_off[i] = off[o + i] - off[o];
            }
            pthread_mutex_lock(&p->mu);
            b->seq = q;
            b->state = p->work ? BLK_READY : BLK_DONE;
            pthread_cond_broadcast(p->work ? &p->cv_work : &p->cv_asm);
            pthread_mutex_unlock(&p->mu);
        }
    }
    pthread_mutex_lock(&p->mu);
    if (--p->readers_live == 0) {
        p->reader_done = true;
        pthread_cond_broadcast(&p->cv_work);
        pthread_cond_broadcast(&p->cv_asm);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- preprocessing workers ------------------------------------------------------ */

/* The ready block with the lowest seq, or NULL. Under p->mu. */
static block *ready_block(pipeline *p)
{
    block *best = NULL;
    for (int i = 0; i < p->nblocks; i++) {
        block *b = &p->blocks[i];
        if (b->state == BLK_READY && (!best || b->seq < best->seq)) best = b;
    }
    return best;
}

/* Output image i of block b. */
static int process_example(pipeline *p, block *b, int i, aug_scratch *s, uint8_t *scratch,
                           pst_err *e)
{
    const int64_t id = b->ids[i];
    const bool train = !p->cfg.eval_transform;
    const uint64_t h = hash4(p->cfg.seed, b->epoch, TAG_AUG, id);
    uint8_t *out = b->pixels + (size_t)i * p->out_img;
    if (p->mode == MODE_PIXELS_RECIPE) {
        aug_from_pixels(p->cfg.recipe, train, h, b->in + (size_t)i * p->img, p->H, p->W, p->C,
                        p->oh, p->ow, out, s);
    } else if (p->mode == MODE_ENCODED) {
        const uint8_t *buf = b->in + b->in_off[i];
        const size_t n = (size_t)(b->in_off[i + 1] - b->in_off[i]);
        if (aug_from_jpeg(p->cfg.recipe, train, h, buf, n, p->C, p->oh, p->ow, out, s, e) < 0)
            return pst_err_prefix(e, "%s: /%s/encoded: example %lld: ", p->ds->path, p->split,
                                  (long long)id);
    }
    if (p->crop_flip && train) crop_flip_image(p, h, out, scratch);
    return 0;
}

static void *worker_main(void *arg)
{
    pipeline *p = arg;
    pst_set_thread_die_handler(pipe_thread_died, p);
    uint8_t *scratch = pst_malloc(p->out_img);
    aug_scratch *as = p->mode == MODE_PIXELS ? NULL : aug_scratch_new();
    pst_err e;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        block *b;
        while (!p->stop && !p->failed && !(b = ready_block(p)) && !p->reader_done)
            pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop || p->failed || !(b = ready_block(p))) break;
        b->state = BLK_BUSY;
        pthread_mutex_unlock(&p->mu);
        int rc = 0;
        for (int i = 0; i < b->count && rc == 0; i++)
            rc = process_example(p, b, i, as, scratch, &e);
        if (rc < 0) {
            pipe_set_failed(p, &e);
            pthread_mutex_lock(&p->mu);
            break;
        }
        pthread_mutex_lock(&p->mu);
        b->state = BLK_DONE;
        pthread_cond_broadcast(&p->cv_asm);
    }
    pthread_mutex_unlock(&p->mu);
    aug_scratch_free(as);
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
    memcpy(b->pixels + (size_t)b->count * p->out_img, px, p->out_img);
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
    return emit(p, a, p->buf_ids[slot], p->buf_lab[slot], p->buf_px + (size_t)slot * p->out_img);
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
        const uint8_t *px = b->pixels + (size_t)i * p->out_img;
        if (!p->cfg.shuffle) {
            if (emit(p, a, b->ids[i], b->labels[i], px) < 0) return -1;
            continue;
        }
        int slot = p->spare[--p->nfree];
        p->live[p->size++] = slot;
        p->buf_ids[slot] = b->ids[i];
        p->buf_lab[slot] = b->labels[i];
        memcpy(p->buf_px + (size_t)slot * p->out_img, px, p->out_img);
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
               !(p->reader_done && p->next_consume == p->claim_seq))
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
        .recipe = AUG_RESIZE,
        .eval_transform = false,
        .out_h = 0,
        .out_w = 0,
        .limit = 0,
        .preload_bytes = (int64_t)512 << 20,
        .memory_budget = 0, /* pipe_default_memory_budget() */
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
    if (c->recipe != AUG_RESIZE && c->recipe != AUG_INCEPTION && c->recipe != AUG_RESNET)
        return pst_fail(e,
                        "pipeline: recipe = %d, expected AUG_RESIZE, AUG_INCEPTION or AUG_RESNET",
                        c->recipe);
    if ((c->aug_crop || c->aug_flip) && c->recipe != AUG_RESIZE)
        return pst_fail(e, "pipeline: crop,flip combine with no other recipe (%s has its own)",
                        c->recipe == AUG_INCEPTION ? "inception" : "resnet");
    if ((c->out_h == 0) != (c->out_w == 0) || c->out_h < 0 || c->out_w < 0 ||
        c->out_h > PIPE_MAX_SIDE || c->out_w > PIPE_MAX_SIDE)
        return pst_fail(e, "pipeline: output size %dx%d, expected both 1..%d (or both 0: stored)",
                        c->out_h, c->out_w, PIPE_MAX_SIDE);
    if (c->limit < 0)
        return pst_fail(e, "pipeline: limit = %lld, expected >= 0", (long long)c->limit);
    if (c->preload_bytes < 0)
        return pst_fail(e, "pipeline: preload bytes = %lld, expected >= 0",
                        (long long)c->preload_bytes);
    if (c->memory_budget < 0)
        return pst_fail(e, "pipeline: memory budget = %lld, expected >= 0 (0: default)",
                        (long long)c->memory_budget);
    return 0;
}

/* Encoded splits: reads the offsets (kept) and the image sizes (for the
 * scratch estimate), cuts the examples into read units of about
 * PIPE_UNIT_BYTES. Sets *max_px (largest image, pixels) and
 * *unit_max_bytes. */
static int encoded_index(pipeline *p, const h5ds_split *sp, int64_t *max_px,
                         int64_t *unit_max_bytes, pst_err *e)
{
    const int64_t target = sp->encoded_chunk_bytes > 0 ? sp->encoded_chunk_bytes : PIPE_UNIT_BYTES;
    const int64_t n = p->n;
    p->enc_off = pst_malloc(sizeof(int64_t) * (size_t)(n + 1));
    int32_t *hs = pst_malloc(sizeof(int32_t) * (size_t)n),
            *ws = pst_malloc(sizeof(int32_t) * (size_t)n);
    int rc = h5ds_read_encoded(p->ds, p->split, 0, n, p->enc_off, NULL, 0, NULL, hs, ws, e);
    *max_px = 1;
    for (int64_t i = 0; rc == 0 && i < n; i++)
        *max_px = PST_MAX(*max_px, (int64_t)hs[i] * (int64_t)ws[i]);
    free(hs);
    free(ws);
    if (rc < 0) return -1;
    /* units: greedy runs of at most one HDF5 chunk's bytes (about 1 MiB; at
     * least one example), a function of the data alone so that the stream
     * is the same for every budget */
    int64_t nu = 0, cap = 64;
    p->unit_first = pst_malloc(sizeof(int64_t) * (size_t)cap);
    p->unit_max = 1;
    *unit_max_bytes = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i + 1;
        while (j < n && j - i < PIPE_UNIT_MAX && p->enc_off[j + 1] - p->enc_off[i] <= target) j++;
        if (nu + 2 > cap) {
            cap *= 2;
            p->unit_first = pst_realloc(p->unit_first, sizeof(int64_t) * (size_t)cap);
        }
        p->unit_first[nu++] = i;
        p->unit_max = PST_MAX(p->unit_max, j - i);
        *unit_max_bytes = PST_MAX(*unit_max_bytes, p->enc_off[j] - p->enc_off[i]);
        i = j;
    }
    p->unit_first[nu] = n;
    p->nunits = nu;
    return 0;
}

/* The largest byte count of a block (blk_cap examples from a unit's start
 * on) of an encoded split. */
static int64_t max_block_bytes(const pipeline *p)
{
    int64_t m = 0;
    for (int64_t u = 0; u < p->nunits; u++)
        for (int64_t i = p->unit_first[u]; i < p->unit_first[u + 1]; i += p->blk_cap) {
            int64_t j = PST_MIN(i + p->blk_cap, p->unit_first[u + 1]);
            m = PST_MAX(m, p->enc_off[j] - p->enc_off[i]);
        }
    return m;
}

/* The memory plan (bytes), docs/design.md §3.2. */
typedef struct mem_plan {
    int64_t index, batches, blocks, scratch, cache, readers, queue, preload;
} mem_plan;

static int64_t plan_total(const mem_plan *m)
{
    return m->index + m->batches + m->blocks + m->scratch + m->cache + m->readers + m->queue +
           m->preload;
}

static int plan_error(const pipeline *p, const mem_plan *m, const char *what, pst_err *e)
{
    char b[9][32];
    return pst_fail(e,
                    "pipeline: memory budget %s is too small: %s needs %s (readers %s, blocks "
                    "%s, shuffle buffer %s, batches %s, scratch %s, index %s, HDF5 cache %s); "
                    "raise --memory-budget or lower --queue-capacity/--batch/--prep-threads",
                    pipe_fmt_size(p->info.budget, b[0]), what, pipe_fmt_size(plan_total(m), b[1]),
                    pipe_fmt_size(m->readers, b[2]), pipe_fmt_size(m->blocks, b[3]),
                    pipe_fmt_size(m->queue, b[4]), pipe_fmt_size(m->batches, b[5]),
                    pipe_fmt_size(m->scratch, b[6]), pipe_fmt_size(m->index, b[7]),
                    pipe_fmt_size(m->cache, b[8]));
}

/* Sizes everything within the budget: readers, blocks, the shuffle buffer
 * (an automatic one shrinks to fit), and whether to preload. */
static int plan(pipeline *p, int64_t max_px, int64_t unit_max_bytes, pst_err *e)
{
    const pipe_cfg *c = &p->cfg;
    const int64_t budget = p->info.budget;
    const int T = c->prep_threads;
    const int nw = p->work ? T : 0;
    const int R = PST_MIN(PIPE_MAX_READERS, T);
    const int64_t per_in = p->mode == MODE_PIXELS_RECIPE ? (int64_t)p->img : 0;
    if (p->mode == MODE_PIXELS)
        p->blk_cap =
            (int)PST_MAX((size_t)1, PST_MIN((size_t)PIPE_BLOCK_MAX,
                                            PIPE_BLOCK_BYTES / PST_MAX(p->img, (size_t)1)));
    else
        p->blk_cap = (int)PST_MAX((int64_t)1, PST_MIN((int64_t)PIPE_WORK_BLOCK_MAX,
                                                      (int64_t)PIPE_BLOCK_BYTES * 4 /
                                                          (int64_t)(p->out_img + (size_t)per_in)));
    p->nblocks = p->work ? 4 * T + 2 * R + 4 : 2 * R + 6;
    const int64_t blk_bytes = p->mode == MODE_ENCODED ? max_block_bytes(p) : 0;

    mem_plan m = {0};
    m.index = (int64_t)sizeof(int64_t) * p->nunits; /* order */
    if (p->mode == MODE_ENCODED)
        m.index += (int64_t)sizeof(int64_t) * (p->n + 1 + p->nunits + 1) +
                   (int64_t)sizeof(int32_t) * 2 * p->n; /* offsets, units; the sizes read once */
    const int64_t bcap = PST_MIN((int64_t)c->batch, p->n);
    m.batches = PIPE_NBAT * bcap * ((int64_t)p->out_img + 12);
    m.blocks =
        (int64_t)p->nblocks * ((int64_t)p->blk_cap * ((int64_t)p->out_img + 12 + per_in) +
                               (p->mode == MODE_ENCODED ? blk_bytes + 8 * (p->blk_cap + 1) : 0));
    int64_t per_thread = (int64_t)p->out_img; /* the crop/flip scratch */
    if (p->mode == MODE_PIXELS_RECIPE) per_thread += 2 * (int64_t)p->img + 2 * (int64_t)p->out_img;
    if (p->mode == MODE_ENCODED) per_thread += 2 * max_px * p->C + 2 * (int64_t)p->out_img;
    m.scratch = nw * per_thread;
    /* streaming with direct chunk reads bypasses the big chunk cache; only
     * the labels' (and offsets') small caches remain */
    m.cache = (p->direct || p->enc_direct) ? PIPE_H5_SMALL_CACHE_BYTES : PIPE_H5_CACHE_BYTES;
    int64_t per_reader;
    if (p->mode == MODE_ENCODED)
        per_reader =
            unit_max_bytes + 12 * (p->unit_max + 1) + (p->enc_direct ? p->enc_cb + 4 + 4096 : 0);
    else if (p->direct)
        per_reader = p->raw_cap_plan + p->fchunk * (int64_t)p->img + 4 * p->unit_max;
    else
        per_reader = p->chunk * (int64_t)p->img + 4 * p->unit_max;
    m.readers = R * per_reader;

    /* the shuffle buffer, planned for streaming so that preloading cannot
     * change it (nor, then, the batches) */
    const int64_t per_q = (int64_t)p->out_img + 8 + 4 + 4 + 4;
    int cap = 0;
    if (c->shuffle) {
        cap = (int)PST_MIN((int64_t)p->cfg.queue_capacity, p->n);
        m.queue = cap * per_q;
        if (plan_total(&m) > budget) {
            if (!p->auto_queue)
                return plan_error(p, &m, "the shuffle buffer of --queue-capacity", e);
            const int64_t room = budget - (plan_total(&m) - m.queue);
            cap = (int)PST_MIN((int64_t)cap, room / per_q);
            if (cap < 1) {
                m.queue = per_q;
                return plan_error(p, &m, "streaming with a one-example shuffle buffer", e);
            }
            m.queue = cap * per_q;
        }
        p->cap = cap;
        p->cfg.queue_capacity = cap;
        if (p->auto_min || p->cfg.min_after_dequeue >= cap) p->cfg.min_after_dequeue = cap - 1;
    } else if (plan_total(&m) > budget) {
        return plan_error(p, &m, "streaming", e);
    }
    p->nreaders = R;

    /* preload when the split fits preload_bytes and the budget */
    int64_t need =
        p->mode == MODE_ENCODED ? p->enc_off[p->n] + 4 * p->n : p->n * ((int64_t)p->img + 4);
    mem_plan pm = m;
    pm.readers = p->mode == MODE_ENCODED ? 8 * (p->unit_max + 1) : 0;
    pm.preload = need;
    /* preloading reads through h5ds_read (the chunk cache); encoded splits
     * with direct chunk reads, one chunk buffer */
    pm.cache = p->enc_direct ? PIPE_H5_SMALL_CACHE_BYTES + p->enc_cb + 4096 : PIPE_H5_CACHE_BYTES;
    if (need <= c->preload_bytes && plan_total(&pm) <= budget) {
        m = pm;
        p->nreaders = 1;
        p->info.preloaded = true;
    }
    p->info.planned = plan_total(&m);
    return 0;
}

/* Reads the whole split (up to the limit) once: plan() found that it fits
 * the memory budget. */
static int preload(pipeline *p, pst_err *e)
{
    const bool encoded = p->mode == MODE_ENCODED;
    p->pre_lab = pst_malloc(sizeof(int32_t) * (size_t)p->n);
    if (encoded) {
        p->pre_bytes = pst_malloc((size_t)PST_MAX(p->enc_off[p->n], (int64_t)1));
        int rc;
        if (p->enc_direct) {
            uint8_t *raw = NULL;
            size_t raw_cap = 0;
            rc = read_encoded_direct(p, &raw, &raw_cap, 0, p->n, p->pre_bytes, p->pre_lab, e);
            free(raw);
        } else {
            int64_t *tmp = pst_malloc(sizeof(int64_t) * (size_t)(p->n + 1));
            rc = h5ds_read_encoded(p->ds, p->split, 0, p->n, tmp, p->pre_bytes,
                                   (size_t)p->enc_off[p->n], p->pre_lab, NULL, NULL, e);
            free(tmp);
        }
        if (rc < 0) return -1;
    } else {
        p->pre_px = pst_malloc((size_t)p->n * p->img);
        if (h5ds_read(p->ds, p->split, 0, p->n, p->pre_px, p->pre_lab, e) < 0) return -1;
    }
    return 0;
}

/* The buffers of blocks, shuffle buffer, batches and readers, sized by
 * plan(); the readers' are allocated here, so that a thread never fails to
 * allocate its first unit. */
static void alloc_buffers(pipeline *p, int64_t unit_max_bytes)
{
    const pipe_cfg *cfg = &p->cfg;
    const bool encoded = p->mode == MODE_ENCODED;
    p->order = pst_malloc(sizeof(int64_t) * (size_t)p->nunits);
    p->claim_epoch = cfg->first_epoch;
    if (p->claim_epoch < p->end_epoch) chunk_order(p, p->claim_epoch, p->order);

    p->blocks = pst_calloc((size_t)p->nblocks, sizeof *p->blocks);
    for (int i = 0; i < p->nblocks; i++) {
        block *b = &p->blocks[i];
        b->state = BLK_FREE;
        b->seq = -1;
        b->ids = pst_malloc(sizeof(int64_t) * (size_t)p->blk_cap);
        b->labels = pst_malloc(sizeof(int32_t) * (size_t)p->blk_cap);
        b->pixels = pst_aligned_alloc(p->out_img * (size_t)p->blk_cap);
        if (p->mode == MODE_PIXELS_RECIPE) b->in = pst_malloc(p->img * (size_t)p->blk_cap);
        if (p->mode == MODE_ENCODED)
            b->in_off = pst_malloc(sizeof(int64_t) * (size_t)(p->blk_cap + 1));
    }

    if (cfg->shuffle) {
        /* a buffer larger than the epoch behaves like one the size of the
         * epoch (everything is inserted before the first draw) */
        p->buf_px = pst_aligned_alloc((size_t)p->cap * p->out_img);
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
        b->pixels = pst_aligned_alloc(p->out_img * bcap);
    }

    p->readers = pst_calloc((size_t)p->nreaders, sizeof *p->readers);
    for (int i = 0; i < p->nreaders; i++) {
        reader *r = &p->readers[i];
        r->p = p;
        r->off = pst_malloc(sizeof(int64_t) * (size_t)(p->unit_max + 1));
        if (p->info.preloaded) continue;
        r->lab = pst_malloc(sizeof(int32_t) * (size_t)p->unit_max);
        if (encoded) {
            r->bytes_cap = (size_t)PST_MAX(unit_max_bytes, (int64_t)1);
            r->bytes = pst_malloc(r->bytes_cap);
            if (p->enc_direct) {
                r->raw_cap = (size_t)p->enc_cb + 4096;
                r->raw = pst_malloc(r->raw_cap);
            }
        } else if (p->direct) {
            r->px = pst_malloc((size_t)p->fchunk * p->img);
            r->raw_cap = (size_t)p->raw_cap_plan;
            r->raw = pst_malloc(r->raw_cap);
        } else {
            r->px = pst_malloc((size_t)p->chunk * p->img);
        }
    }
}

/* Starts readers, workers and the assembler. The lock is held throughout:
 * the threads wait for it before they touch the shared state, so the counts
 * of started threads (read by pipe_free) are never written while a running
 * thread reads the flags beside them (ThreadSanitizer saw loads of stop and
 * failed that covered asm_started). 0, or -1 (the threads started so far are
 * stopped by pipe_free). */
static int start_threads(pipeline *p, pst_err *e)
{
    const pipe_cfg *cfg = &p->cfg;
    int rc = -1;
    pthread_mutex_lock(&p->mu);
    p->readers_live = p->nreaders;
    for (int i = 0; i < p->nreaders; i++) {
        if (pthread_create(&p->readers[i].th, NULL, reader_main, &p->readers[i]) != 0) {
            pst_fail(e, "pipeline: cannot start reader thread %d of %d", i + 1, p->nreaders);
            goto out;
        }
        p->readers_started++;
    }
    if (p->work) {
        p->workers = pst_calloc((size_t)cfg->prep_threads, sizeof *p->workers);
        for (int i = 0; i < cfg->prep_threads; i++) {
            if (pthread_create(&p->workers[i], NULL, worker_main, p) != 0) {
                pst_fail(e, "pipeline: cannot start preprocessing thread %d of %d", i + 1,
                         cfg->prep_threads);
                goto out;
            }
            p->nworkers++;
        }
    }
    if (pthread_create(&p->assembler, NULL, assembler_main, p) != 0) {
        pst_fail(e, "pipeline: cannot start the batching thread");
        goto out;
    }
    p->asm_started = true;
    rc = 0;
out:
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int pipe_new(pipeline **out, h5ds *ds, const pipe_cfg *cfg, pst_err *e)
{
    *out = NULL;
    if (check_cfg(cfg, e) < 0) return -1;
    const h5ds_split *sp = h5ds_find_split(ds, cfg->split);
    if (!sp) return h5ds_no_split(ds, cfg->split, e);
    if (sp->count < 1) return pst_fail(e, "%s: /%s: no examples", ds->path, cfg->split);
    const bool encoded = ds->storage == H5DS_STORE_ENCODED;
    if (encoded && cfg->out_h == 0)
        return pst_fail(e,
                        "%s: encoded images vary in size: the pipeline needs an output size "
                        "(--image-size HxW)",
                        ds->path);

    pipeline *p = pst_calloc(1, sizeof *p);
    p->ds = ds;
    p->cfg = *cfg;
    snprintf(p->split, sizeof p->split, "%s", sp->name);
    p->cfg.split = p->split;
    p->H = ds->height;
    p->W = ds->width;
    p->C = ds->channels;
    p->oh = cfg->out_h ? cfg->out_h : p->H;
    p->ow = cfg->out_w ? cfg->out_w : p->W;
    p->img = (size_t)p->H * (size_t)p->W * (size_t)p->C;
    p->out_img = (size_t)p->oh * (size_t)p->ow * (size_t)p->C;
    p->n = cfg->limit > 0 ? PST_MIN(cfg->limit, sp->count) : sp->count;
    p->end_epoch = cfg->epochs > 0 ? cfg->epochs : INT_MAX;
    p->crop_flip = (cfg->aug_crop || cfg->aug_flip) && !cfg->eval_transform;
    if (encoded)
        p->mode = MODE_ENCODED;
    else if (cfg->recipe == AUG_RESIZE && p->oh == p->H && p->ow == p->W)
        p->mode = MODE_PIXELS;
    else
        p->mode = MODE_PIXELS_RECIPE;
    p->work = p->mode != MODE_PIXELS || p->crop_flip;
    p->out = -1;
    p->auto_queue = cfg->queue_capacity == 0;
    p->auto_min = cfg->min_after_dequeue < 0;
    p->info.budget = cfg->memory_budget > 0 ? cfg->memory_budget : pipe_default_memory_budget();
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_reader, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_asm, NULL);
    pthread_cond_init(&p->cv_consumer, NULL);
    if (p->auto_queue) {
        /* automatic: as many examples as PIPE_AUTO_QUEUE_BYTES hold, at least
         * PIPE_AUTO_QUEUE_MIN, at most the epoch (then a full uniform shuffle) */
        int64_t cap = PST_MAX((int64_t)PIPE_AUTO_QUEUE_MIN,
                              (int64_t)(PIPE_AUTO_QUEUE_BYTES / PST_MAX(p->out_img, (size_t)1)));
        p->cfg.queue_capacity = (int)PST_MIN(cap, PST_MIN(p->n, (int64_t)INT_MAX));
    }
    if (p->cfg.min_after_dequeue < 0) p->cfg.min_after_dequeue = p->cfg.queue_capacity - 1;

    int64_t max_px = 0, unit_max_bytes = 0;
    if (encoded) {
        if (encoded_index(p, sp, &max_px, &unit_max_bytes, e) < 0) goto fail;
        h5u_lock();
        p->enc_direct = enc_direct_setup(p, sp);
        h5u_unlock();
    } else {
        p->chunk = PST_MAX((int64_t)1, PST_MIN(sp->chunk_images, p->n));
        p->nunits = (p->n + p->chunk - 1) / p->chunk;
        p->unit_max = p->chunk;
        h5u_lock();
        p->direct = direct_setup(p, sp) && (p->chunk == p->fchunk || p->nunits == 1);
        h5u_unlock();
        /* a deflated chunk that does not shrink is stored as is */
        p->raw_cap_plan = p->fchunk * (int64_t)p->img + 4096;
    }
    if (plan(p, max_px, unit_max_bytes, e) < 0) goto fail;
    p->info.out_h = p->oh;
    p->info.out_w = p->ow;
    p->info.channels = p->C;
    p->info.direct_chunks = (p->direct && !p->info.preloaded) || p->enc_direct;
    p->info.readers = p->nreaders;
    p->info.queue_capacity = cfg->shuffle ? p->cap : 0;

    if (p->info.preloaded && preload(p, e) < 0) goto fail;
    alloc_buffers(p, unit_max_bytes);
    if (start_threads(p, e) < 0) goto fail;
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

void pipe_get_info(const pipeline *p, pipe_info *out)
{
    *out = p->info;
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
    for (int i = 0; i < p->readers_started; i++) pthread_join(p->readers[i].th, NULL);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->workers[i], NULL);
    if (p->asm_started) pthread_join(p->assembler, NULL);
    free(p->workers);
    if (p->readers)
        for (int i = 0; i < p->nreaders; i++) {
            reader *r = &p->readers[i];
            free(r->raw);
            free(r->px);
            free(r->bytes);
            free(r->off);
            free(r->lab);
        }
    free(p->readers);
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
            free(p->blocks[i].in);
            free(p->blocks[i].in_off);
        }
    free(p->blocks);
    free(p->order);
    free(p->unit_first);
    free(p->enc_off);
    free(p->pre_px);
    free(p->pre_bytes);
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
