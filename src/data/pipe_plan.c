/*
 * pipe_plan.c - sizes and the memory plan of the input pipeline
 * (docs/design.md §3.2): the default budget, size parsing and printing, the
 * read units of an encoded split, and pipe_plan, which sizes readers,
 * blocks and the shuffle buffer within the budget and decides whether to
 * preload. Runs in pipe_new before any thread starts: no locking.
 */
#include "pipe_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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

/* Encoded splits: reads the offsets (kept) and the image sizes (for the
 * scratch estimate), cuts the examples into read units of about
 * PIPE_UNIT_BYTES. Sets *max_px (largest image, pixels) and
 * *unit_max_bytes. */
int pipe_encoded_index(pipeline *p, const h5ds_split *sp, int64_t *max_px, int64_t *unit_max_bytes,
                       pst_err *e)
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
int pipe_plan(pipeline *p, int64_t max_px, int64_t unit_max_bytes, pst_err *e)
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
    /* the unit order; the keep flags of an epoch's examples (batches without
     * pixels), planned whether or not they are used so that the shuffle
     * buffer, and with it the batches, is the same for every consumer */
    m.index = (int64_t)sizeof(int64_t) * p->nunits + p->n;
    if (p->mode == MODE_ENCODED)
        m.index += (int64_t)sizeof(int64_t) * (p->n + 1 + p->nunits + 1) +
                   (int64_t)sizeof(int32_t) * 2 * p->n; /* offsets, units; the sizes read once */
    const int64_t bcap = PST_MIN((int64_t)c->batch, p->n);
    m.batches = PIPE_NBAT * bcap * ((int64_t)p->out_img + 12);
    m.blocks =
        (int64_t)p->nblocks * ((int64_t)p->blk_cap * ((int64_t)p->out_img + 13 + per_in) +
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
            unit_max_bytes + 13 * (p->unit_max + 1) + (p->enc_direct ? p->enc_cb + 4 + 4096 : 0);
    else if (p->direct)
        per_reader = p->raw_cap_plan + p->fchunk * (int64_t)p->img + 5 * p->unit_max;
    else
        per_reader = p->chunk * (int64_t)p->img + 5 * p->unit_max;
    m.readers = R * per_reader;

    /* the shuffle buffer, planned for streaming so that preloading cannot
     * change it (nor, then, the batches) */
    /* pixels, id, label, live, spare, keep flag, the keep map's replay */
    const int64_t per_q = (int64_t)p->out_img + 8 + 4 + 4 + 4 + 1 + 8;
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
    pm.readers = 9 * (p->unit_max + 1); /* offsets and keep flags */
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
