/*
 * pipe_assemble.c - the pipeline's assembler thread (pipe_internal.h has
 * the overview): it consumes DONE blocks strictly in seq order, feeds the
 * shuffle buffer and fills batches into the ring of PIPE_NBAT slots.
 *
 * Shuffle buffer schedule (deterministic stand-in for TF's producer/consumer
 * race): the buffer is filled to capacity C, then examples are drawn while
 * it holds more than M (min_after_dequeue), then it is filled again; every
 * draw is thus uniform over between M+1 and C examples, the bounds TF's
 * RandomShuffleQueue guarantees. When an epoch's stream ends the buffer is
 * drained, and batches never straddle epochs.
 *
 * Batches without pixels (pipe_cfg.skip_batches, share_*): the schedule
 * above depends on ids alone, so pipe_keep_map replays it for a whole
 * epoch before its first example is read and flags the examples whose
 * batch gets pixels; the workers prepare only those, and the assembler
 * copies only their images (and checks the flags against the batch it
 * fills).
 *
 * Locking: the shuffle buffer and the batch being filled belong to the
 * assembler alone (no lock); block and batch slot states, made and
 * next_consume change under p->mu.
 */
#include "pipe_internal.h"

#include <assert.h>
#include <string.h>

typedef struct asm_state {
    batch_slot *cur; /* batch being filled, or NULL */
    uint64_t rng;
    int epoch;
} asm_state;

bool pipe_batch_kept(const pipeline *p, int64_t index)
{
    const pipe_cfg *c = &p->cfg;
    if (index < c->skip_batches) return false;
    if (c->share_count <= 1) return true;
    const int64_t d = ((index - c->share_index) % c->share_count + c->share_count) % c->share_count;
    return d < c->share_span;
}

/* pipe_keep_map's draw: one example out of the simulated buffer. */
static int64_t sim_draw(pipeline *p, int *size, uint64_t *rng)
{
    int r = (int)rng_below(rng, (uint64_t)*size);
    int64_t id = p->sim_live[r];
    p->sim_live[r] = p->sim_live[--*size];
    return id;
}

/* The same inserts and draws as assemble_block (one epoch: the buffer is
 * empty at its start and drained at its end), on ids only. */
void pipe_keep_map(pipeline *p, int epoch)
{
    if (!p->keep) return;
    const int64_t B = p->cfg.batch, bpe = (p->n + B - 1) / B;
    const int64_t base = (int64_t)(epoch - p->cfg.first_epoch) * bpe;
    const int M = p->cfg.min_after_dequeue;
    uint64_t rng = hash4(p->cfg.seed, epoch, TAG_DRAWS, 0);
    int64_t drawn = 0;
    int size = 0;
    for (int64_t k = 0; k < p->nunits; k++) {
        int64_t first, cnt;
        pipe_unit_range(p, p->order[k], &first, &cnt);
        for (int64_t id = first; id < first + cnt; id++) {
            if (!p->cfg.shuffle) {
                p->keep[id] = pipe_batch_kept(p, base + drawn++ / B);
                continue;
            }
            p->sim_live[size++] = id;
            if (size < p->cap) continue;
            while (size > M) {
                const int64_t out = sim_draw(p, &size, &rng);
                p->keep[out] = pipe_batch_kept(p, base + drawn++ / B);
            }
        }
    }
    while (size > 0) {
        const int64_t out = sim_draw(p, &size, &rng);
        p->keep[out] = pipe_batch_kept(p, base + drawn++ / B);
    }
}

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
static int emit(pipeline *p, asm_state *a, int64_t id, int32_t label, const uint8_t *px, bool kept)
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
        s->b.has_pixels = pipe_batch_kept(p, p->made);
        a->cur = s;
    }
    pipe_batch *b = &a->cur->b;
    if (b->has_pixels && !kept) {
        pst_err e;
        pst_fail(&e, "pipeline: example %lld of batch %lld was not prepared (internal error)",
                 (long long)id, (long long)b->index);
        pipe_set_failed(p, &e);
        return -1;
    }
    b->ids[b->count] = id;
    b->labels[b->count] = label;
    if (b->has_pixels) memcpy(b->pixels + (size_t)b->count * p->out_img, px, p->out_img);
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
    return emit(p, a, p->buf_ids[slot], p->buf_lab[slot], p->buf_px + (size_t)slot * p->out_img,
                p->buf_keep[slot]);
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
            if (emit(p, a, b->ids[i], b->labels[i], px, b->keep[i]) < 0) return -1;
            continue;
        }
        int slot = p->spare[--p->nfree];
        p->live[p->size++] = slot;
        p->buf_ids[slot] = b->ids[i];
        p->buf_lab[slot] = b->labels[i];
        p->buf_keep[slot] = b->keep[i];
        if (b->keep[i]) memcpy(p->buf_px + (size_t)slot * p->out_img, px, p->out_img);
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

void *pipe_assembler_main(void *arg)
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
