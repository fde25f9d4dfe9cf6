/*
 * pipeline.c - the input pipeline's public API and lifetime (contract in
 * pstrain/pipeline.h, memory model in docs/design.md §3.2): the
 * configuration check, pipe_new (index, plan, preload, buffers, threads),
 * pipe_next, pipe_free, failure from any thread, and pipe_normalize. The
 * threads and their states are described in pipe_internal.h.
 *
 * Locking: pipe_next and pipe_free run on the consumer (the caller) and
 * take p->mu to hand batch slots over (FULL -> OUT -> FREE) and to stop the
 * threads; pipe_new starts the threads while holding p->mu, so that none
 * reads the shared state before it is complete. pipe_set_failed may be
 * called from any thread that does not hold p->mu.
 */
#include "pipe_internal.h"
#include "pstrain/augment.h"
#include "pstrain/h5util.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- failure and shutdown ---- */

/* Records the first error (message in `e`) and wakes everybody. Locks. */
void pipe_set_failed(pipeline *p, const pst_err *e)
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
void pipe_thread_died(void *ctx, const char *msg)
{
    pipeline *p = ctx;
    while (h5u_held()) h5u_unlock();
    pst_err e;
    snprintf(e.msg, sizeof e.msg, "pipeline thread: %s", msg);
    pipe_set_failed(p, &e);
}

/* ---- public API ---- */

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
        .skip_batches = 0,
        .share_count = 1,
        .share_index = 0,
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
    if (c->skip_batches < 0)
        return pst_fail(e, "pipeline: skip batches = %lld, expected >= 0",
                        (long long)c->skip_batches);
    if (c->share_count < 0 ||
        (c->share_count > 1 && (c->share_index < 0 || c->share_index >= c->share_count)))
        return pst_fail(e, "pipeline: share %d of %d, expected 0 .. %d", c->share_index,
                        c->share_count, c->share_count - 1);
    if (c->share_count > 1 && (c->share_span < 0 || c->share_span > c->share_count))
        return pst_fail(e, "pipeline: share span %d, expected 0 .. %d", c->share_span,
                        c->share_count);
    if (c->memory_budget < 0)
        return pst_fail(e, "pipeline: memory budget = %lld, expected >= 0 (0: default)",
                        (long long)c->memory_budget);
    return 0;
}

/* Reads the whole split (up to the limit) once: pipe_plan() found that it fits
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
            rc = pipe_read_encoded_direct(p, &raw, &raw_cap, 0, p->n, p->pre_bytes, p->pre_lab, e);
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
 * pipe_plan(); the readers' are allocated here, so that a thread never fails to
 * allocate its first unit. */
static void alloc_buffers(pipeline *p, int64_t unit_max_bytes)
{
    const pipe_cfg *cfg = &p->cfg;
    const bool encoded = p->mode == MODE_ENCODED;
    p->order = pst_malloc(sizeof(int64_t) * (size_t)p->nunits);
    if (cfg->skip_batches > 0 || cfg->share_count > 1) {
        p->keep = pst_malloc((size_t)p->n);
        p->sim_live = pst_malloc(sizeof(int64_t) * (size_t)PST_MAX(p->cap, 1));
    }
    p->claim_epoch = cfg->first_epoch;
    if (p->claim_epoch < p->end_epoch) {
        pipe_chunk_order(p, p->claim_epoch, p->order);
        pipe_keep_map(p, p->claim_epoch);
    }

    p->blocks = pst_calloc((size_t)p->nblocks, sizeof *p->blocks);
    for (int i = 0; i < p->nblocks; i++) {
        block *b = &p->blocks[i];
        b->state = BLK_FREE;
        b->seq = -1;
        b->ids = pst_malloc(sizeof(int64_t) * (size_t)p->blk_cap);
        b->labels = pst_malloc(sizeof(int32_t) * (size_t)p->blk_cap);
        b->pixels = pst_aligned_alloc(p->out_img * (size_t)p->blk_cap);
        b->keep = pst_malloc((size_t)p->blk_cap);
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
        p->buf_keep = pst_malloc((size_t)p->cap);
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
        r->keep = pst_malloc((size_t)p->unit_max);
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
        if (pthread_create(&p->readers[i].th, NULL, pipe_reader_main, &p->readers[i]) != 0) {
            pst_fail(e, "pipeline: cannot start reader thread %d of %d", i + 1, p->nreaders);
            goto out;
        }
        p->readers_started++;
    }
    if (p->work) {
        p->workers = pst_calloc((size_t)cfg->prep_threads, sizeof *p->workers);
        for (int i = 0; i < cfg->prep_threads; i++) {
            if (pthread_create(&p->workers[i], NULL, pipe_worker_main, p) != 0) {
                pst_fail(e, "pipeline: cannot start preprocessing thread %d of %d", i + 1,
                         cfg->prep_threads);
                goto out;
            }
            p->nworkers++;
        }
    }
    if (pthread_create(&p->assembler, NULL, pipe_assembler_main, p) != 0) {
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
    p->n = pipe_split_examples(ds, cfg);
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
        if (pipe_encoded_index(p, sp, &max_px, &unit_max_bytes, e) < 0) goto fail;
        h5u_lock();
        p->enc_direct = pipe_enc_direct_setup(p, sp);
        h5u_unlock();
    } else {
        p->chunk = PST_MAX((int64_t)1, PST_MIN(sp->chunk_images, p->n));
        p->nunits = (p->n + p->chunk - 1) / p->chunk;
        p->unit_max = p->chunk;
        h5u_lock();
        p->direct = pipe_direct_setup(p, sp) && (p->chunk == p->fchunk || p->nunits == 1);
        h5u_unlock();
        /* a deflated chunk that does not shrink is stored as is */
        p->raw_cap_plan = p->fchunk * (int64_t)p->img + 4096;
    }
    if (pipe_plan(p, max_px, unit_max_bytes, e) < 0) goto fail;
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

int64_t pipe_split_examples(const h5ds *ds, const pipe_cfg *cfg)
{
    const h5ds_split *sp = h5ds_find_split(ds, cfg->split ? cfg->split : "train");
    if (!sp) return 0;
    return cfg->limit > 0 ? PST_MIN(cfg->limit, sp->count) : sp->count;
}

int64_t pipe_examples_prepared(pipeline *p)
{
    pthread_mutex_lock(&p->mu);
    const int64_t n = p->prepared;
    pthread_mutex_unlock(&p->mu);
    return n;
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
            free(r->keep);
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
    free(p->buf_keep);
    free(p->keep);
    free(p->sim_live);
    free(p->live);
    free(p->spare);
    if (p->blocks)
        for (int i = 0; i < p->nblocks; i++) {
            free(p->blocks[i].ids);
            free(p->blocks[i].labels);
            free(p->blocks[i].pixels);
            free(p->blocks[i].in);
            free(p->blocks[i].in_off);
            free(p->blocks[i].keep);
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

static const float g_imagenet_mean[3] = {0.485f, 0.456f, 0.406f};
static const float g_imagenet_std[3] = {0.229f, 0.224f, 0.225f};

/* Parses up to H5DS_MAX_CHANNELS comma-separated numbers in [lo, hi]
 * (lo excluded when lo_open) from s[0..len). The count, or -1. */
static int parse_floats(const char *s, size_t len, double lo, double hi, bool lo_open, float *out)
{
    char buf[PIPE_NORM_NAME_LEN];
    if (len == 0 || len >= sizeof buf) return -1;
    memcpy(buf, s, len);
    buf[len] = 0;
    int n = 0;
    char *p = buf;
    for (;;) {
        char *end;
        errno = 0;
        const double v = strtod(p, &end);
        if (end == p || errno || !isfinite(v) || (lo_open ? v <= lo : v < lo) || v > hi ||
            n == H5DS_MAX_CHANNELS)
            return -1;
        out[n++] = (float)v;
        if (*end == 0) return n;
        if (*end != ',') return -1;
        p = end + 1;
    }
}

int pipe_norm_parse(const char *s, pipe_norm *n)
{
    memset(n, 0, sizeof *n);
    if (!strcmp(s, "dataset")) {
        n->kind = PIPE_NORM_DATASET;
        return 0;
    }
    if (!strcmp(s, "imagenet")) {
        n->kind = PIPE_NORM_IMAGENET;
        n->n = 3;
        memcpy(n->mean, g_imagenet_mean, sizeof g_imagenet_mean);
        memcpy(n->std, g_imagenet_std, sizeof g_imagenet_std);
        return 0;
    }
    const char *slash = strchr(s, '/');
    if (!slash) return -1;
    const int nm = parse_floats(s, (size_t)(slash - s), 0, 1, false, n->mean);
    const int ns = parse_floats(slash + 1, strlen(slash + 1), 0, 1e3, true, n->std);
    if (nm < 1 || ns != nm) return -1;
    n->kind = PIPE_NORM_CUSTOM;
    n->n = nm;
    return 0;
}

const char *pipe_norm_name(const pipe_norm *n, char buf[PIPE_NORM_NAME_LEN])
{
    if (n->kind == PIPE_NORM_IMAGENET) return strcpy(buf, "imagenet");
    if (n->kind != PIPE_NORM_CUSTOM) return strcpy(buf, "dataset");
    size_t k = 0;
    for (int i = 0; i < 2 * n->n; i++) {
        const float v = i < n->n ? n->mean[i] : n->std[i - n->n];
        const char *sep = i == 0 ? "" : i == n->n ? "/" : ",";
        k += (size_t)snprintf(buf + k, PIPE_NORM_NAME_LEN - k, "%s%.9g", sep, (double)v);
    }
    return buf;
}

int pipe_norm_apply(const pipe_norm *n, h5ds *ds, const char *what, pst_err *e)
{
    if (n->kind == PIPE_NORM_UNSET || n->kind == PIPE_NORM_DATASET) return 0;
    if (n->n != ds->channels) {
        char name[PIPE_NORM_NAME_LEN];
        const char *pl = ds->channels == 1 ? "" : "s";
        return pst_fail(e,
                        "%s %s has values for %d channels, but %s has %d-channel images: "
                        "expected %d mean%s and %d std%s",
                        what, pipe_norm_name(n, name), n->n, ds->path, ds->channels, ds->channels,
                        pl, ds->channels, pl);
    }
    memcpy(ds->mean, n->mean, sizeof ds->mean);
    memcpy(ds->std, n->std, sizeof ds->std);
    return 0;
}

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
