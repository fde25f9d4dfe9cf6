/*
 * pipe_reader.c - the pipeline's reader threads (pipe_internal.h has the
 * overview): they claim read units in the epoch's order, read each (from
 * the preloaded split, through h5ds, or as whole chunks with H5Dread_chunk,
 * the Fletcher-32 check and the inflate then done here) and cut it into
 * blocks.
 *
 * Locking: the claim of a unit (claim_epoch, claim_k, claim_seq, order) and
 * every block state change happen under p->mu; a block's data is written
 * without it once claim_block has handed the FREE slot over. HDF5 calls run
 * under the HDF5 lock (h5u_lock), never while p->mu is held; checksums and
 * inflation run outside both, so readers inflate in parallel.
 */
#include "pipe_internal.h"
#include "pstrain/h5util.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

void pipe_unit_range(const pipeline *p, int64_t u, int64_t *first, int64_t *cnt)
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
void pipe_chunk_order(const pipeline *p, int epoch, int64_t *order)
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
            break; /* 1-byte elements (checked in pipe_direct_setup): the identity */
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
bool pipe_direct_setup(pipeline *p, const h5ds_split *sp)
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
bool pipe_enc_direct_setup(pipeline *p, const h5ds_split *sp)
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
int pipe_read_encoded_direct(pipeline *p, uint8_t **raw, size_t *raw_cap, int64_t first,
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

/* A unit of the read order, claimed by one reader: its examples [first,
 * first + cnt) of `epoch` go into the blocks of seq seq0 .. seq0 + nb - 1;
 * last: the epoch's last unit. */
typedef struct unit_claim {
    int epoch;
    bool last;
    int64_t first, cnt, seq0, nb;
} unit_claim;

/* Claims the next unit (under the pipeline's lock) and copies its keep
 * flags into keep (unit_max bytes), advancing to the next epoch's order
 * and keep map after the last. Returns false when reading is over
 * (stopped, failed, or past the end epoch). */
static bool claim_unit(pipeline *p, unit_claim *u, uint8_t *keep)
{
    pthread_mutex_lock(&p->mu);
    if (p->stop || p->failed || p->claim_epoch >= p->end_epoch) {
        pthread_mutex_unlock(&p->mu);
        return false;
    }
    u->epoch = p->claim_epoch;
    u->last = p->claim_k == p->nunits - 1;
    pipe_unit_range(p, p->order[p->claim_k], &u->first, &u->cnt);
    u->seq0 = p->claim_seq, u->nb = (u->cnt + p->blk_cap - 1) / p->blk_cap;
    p->claim_seq += u->nb;
    if (p->keep)
        memcpy(keep, p->keep + u->first, (size_t)u->cnt);
    else
        memset(keep, 1, (size_t)u->cnt);
    if (++p->claim_k == p->nunits) {
        p->claim_k = 0;
        if (++p->claim_epoch < p->end_epoch) {
            pipe_chunk_order(p, p->claim_epoch, p->order);
            pipe_keep_map(p, p->claim_epoch);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return true;
}

/* A unit's examples: px (pixels) or bytes + off (encoded), and lab. */
typedef struct unit_data {
    const uint8_t *px, *bytes;
    const int64_t *off;
    const int32_t *lab;
} unit_data;

/* Reads examples [first, first + cnt) into r's buffers (or points into the
 * preloaded split). Returns 0 or -1 (e set). */
static int read_unit(reader *r, int64_t first, int64_t cnt, unit_data *d, pst_err *e)
{
    pipeline *p = r->p;
    int rc = 0;
    d->px = NULL, d->bytes = NULL;
    d->off = r->off;
    if (p->mode == MODE_ENCODED) {
        if (p->pre_bytes) {
            d->bytes = p->pre_bytes + p->enc_off[first];
            for (int64_t i = 0; i <= cnt; i++)
                r->off[i] = p->enc_off[first + i] - p->enc_off[first];
            d->lab = p->pre_lab + first;
        } else {
            /* h5ds_read_encoded holds the HDF5 lock: the main thread may
             * be evaluating or writing a checkpoint meanwhile */
            for (int64_t i = 0; i <= cnt; i++)
                r->off[i] = p->enc_off[first + i] - p->enc_off[first];
            if (p->enc_direct)
                rc = pipe_read_encoded_direct(p, &r->raw, &r->raw_cap, first, cnt, r->bytes, r->lab,
                                              e);
            else
                rc = h5ds_read_encoded(p->ds, p->split, first, cnt, r->off, r->bytes, r->bytes_cap,
                                       r->lab, NULL, NULL, e);
            d->bytes = r->bytes;
            d->lab = r->lab;
        }
    } else if (p->pre_px) {
        d->px = p->pre_px + (size_t)first * p->img;
        d->lab = p->pre_lab + first;
    } else {
        rc = p->direct ? read_direct(r, first, cnt, e)
                       : h5ds_read(p->ds, p->split, first, cnt, r->px, r->lab, e);
        d->px = r->px;
        d->lab = r->lab;
    }
    return rc < 0 ? -1 : 0;
}

/* Copies the unit's examples from o on (b->count of them) into block b:
 * labels, and pixels or encoded bytes with their offsets. */
static void fill_block(const pipeline *p, block *b, const unit_data *d, int64_t o)
{
    memcpy(b->labels, d->lab + o, sizeof(int32_t) * (size_t)b->count);
    if (p->mode == MODE_PIXELS)
        memcpy(b->pixels, d->px + (size_t)o * p->img, p->img * (size_t)b->count);
    else if (p->mode == MODE_PIXELS_RECIPE)
        memcpy(b->in, d->px + (size_t)o * p->img, p->img * (size_t)b->count);
    else {
        const int64_t *off = d->off;
        const size_t nbytes = (size_t)(off[o + b->count] - off[o]);
        if (nbytes > b->in_cap) { /* within the plan's max_block_bytes */
            free(b->in);
            b->in = pst_malloc(nbytes);
            b->in_cap = nbytes;
        }
        memcpy(b->in, d->bytes + off[o], nbytes);
        for (int i = 0; i <= b->count; i++) b->in_off[i] = off[o + i] - off[o];
    }
}

void *pipe_reader_main(void *arg)
{
    reader *r = arg;
    pipeline *p = r->p;
    pst_set_thread_die_handler(pipe_thread_died, p);
    pst_err e;
    unit_claim u;
    while (claim_unit(p, &u, r->keep)) {
        unit_data d;
        if (read_unit(r, u.first, u.cnt, &d, &e) < 0) {
            pipe_set_failed(p, &e);
            return NULL;
        }
        for (int64_t j = 0; j < u.nb; j++) {
            const int64_t q = u.seq0 + j, o = j * p->blk_cap;
            block *b = claim_block(p, q);
            if (!b) return NULL;
            b->epoch = u.epoch;
            b->count = (int)PST_MIN((int64_t)p->blk_cap, u.cnt - o);
            b->epoch_end = u.last && j == u.nb - 1;
            for (int i = 0; i < b->count; i++) b->ids[i] = u.first + o + i;
            memcpy(b->keep, r->keep + o, (size_t)b->count);
            fill_block(p, b, &d, o);
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
