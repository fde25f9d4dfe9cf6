/*
 * pipe_prep.c - the pipeline's preprocessing workers (pipe_internal.h has
 * the overview): each takes the READY block with the lowest seq, marks it
 * BUSY, writes the output images of its examples with keep flags (JPEG decode or the recipe through
 * augment.h, then crop and flip) and marks it DONE. An output image is a
 * function of (seed, epoch, id, stored example) alone.
 *
 * Locking: block states change under p->mu; a BUSY block's images are
 * written without it by the one worker that took it.
 */
#include "pipe_internal.h"
#include "pstrain/augment.h"

#include <stdlib.h>
#include <string.h>

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

void *pipe_worker_main(void *arg)
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
        int rc = 0, made = 0;
        for (int i = 0; i < b->count && rc == 0; i++)
            if (b->keep[i]) rc = process_example(p, b, i, as, scratch, &e), made++;
        if (rc < 0) {
            pipe_set_failed(p, &e);
            pthread_mutex_lock(&p->mu);
            break;
        }
        pthread_mutex_lock(&p->mu);
        p->prepared += made;
        b->state = BLK_DONE;
        pthread_cond_broadcast(&p->cv_asm);
    }
    pthread_mutex_unlock(&p->mu);
    aug_scratch_free(as);
    free(scratch);
    return NULL;
}
