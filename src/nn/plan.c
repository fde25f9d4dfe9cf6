/*
 * plan.c - the activation memory plan: where each layer's output, gradient
 * and state live in the model's arena (graph.h, "activation memory plan").
 *
 * A buffer is live from the call that first writes it to the last call that
 * reads it, derived from the graph and from what each kind's backward reads
 * (nn_layer_ops.bwd_reads):
 *   y of layer i    written by its forward (t = i); read by every consumer's
 *                   forward, by the backward of consumers that read their
 *                   inputs (t = 2L - j), by its own backward when it reads
 *                   its output; the logits until after the step.
 *   dy of layer i   first written by the backward of its last consumer (the
 *                   first one backward; the loss for the last layer), read
 *                   (and masked in place) by its own backward.
 *   state           written by the training forward, read by backward; in
 *                   inference it lives during the forward only.
 *   dy2 of layer i  a split gradient's second part (graph.h): written by the
 *                   backward of its second-to-last consumer (in forward
 *                   order; the second one backward), read with dy.
 *   fused layers    a batch norm fused with the add after it (model.c): the
 *                   add's output is born at the batch norm's forward, its
 *                   gradient and output (the ReLU's mask) live until the
 *                   batch norm's backward; the batch norm's own output and
 *                   gradient are never touched (16-float placeholders).
 *   aliased layers  a producer aliased into a concat (graph.h, concat without
 *                   copies): placeholders, bound to its slice of the
 *                   concat's output and gradient; the concat's output is
 *                   born at the first aliased producer's forward and its
 *                   gradient read until that producer's backward.
 * Buffers are then packed greedily (largest first, each at the lowest
 * aligned offset free of every placed buffer whose lifetime intersects its
 * own), so that at any time point the live buffers never share a byte. In
 * training the gradients are the main saving (a few are live at any time);
 * in inference, the outputs.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

/* ---- lifetimes --------------------------------------------------------------------- */

static bool reads_out(const nn_layer *l)
{
    unsigned r = l->ops->bwd_reads;
    return (r & NN_READS_OUT) || ((r & NN_READS_OUT_RELU) && l->relu);
}

static void add_buf(nn_plan *p, int layer, nn_buf_kind kind, int start, int end, size_t floats,
                    size_t img)
{
    nn_buf *b = &p->bufs[p->nbufs++];
    *b = (nn_buf){
        .layer = layer, .kind = kind, .start = start, .end = end, .floats = floats, .img = img};
}

/* The buffers of a training (train) or inference step with their lifetimes;
 * -1 with m->err when a layer's output has no consumer. */
static int lifetimes(nn_model *m, nn_plan *p, bool train)
{
    const int L = m->nlayers;
    const size_t B = (size_t)m->cfg.max_batch;
    /* per layer: the last consumer (forward order), the one before it (an
     * input slot each: a consumer taking a tensor twice counts twice) and
     * the first consumer that reads its inputs in backward (the last
     * backward to read y) */
    int *last_use = pst_malloc(sizeof(int) * (size_t)L * 4), *first_reader = last_use + L;
    int *next_use = last_use + 2 * L, *first_alias = last_use + 3 * L;
    for (int i = 0; i < L; i++)
        last_use[i] = next_use[i] = -1, first_reader[i] = first_alias[i] = L;
    /* concat without copies: the first producer aliased into each concat */
    for (int i = L - 1; i >= 0; i--)
        if (m->layers[i].alias) first_alias[m->layers[i].alias - 1] = i;
    for (int j = 0; j < L; j++) {
        const nn_layer *c = &m->layers[j];
        for (int k = 0; k < c->nin; k++) {
            int i = c->in[k];
            if (i == NN_INPUT) continue;
            if (j >= last_use[i])
                next_use[i] = last_use[i], last_use[i] = j;
            else if (j > next_use[i])
                next_use[i] = j;
            if ((c->ops->bwd_reads & NN_READS_IN) && j < first_reader[i]) first_reader[i] = j;
        }
    }
    p->bufs = pst_malloc(sizeof(nn_buf) * (size_t)L * 4);
    p->nbufs = 0;
    p->train = train;
    int rc = 0;
    for (int i = 0; i < L; i++) {
        const nn_layer *l = &m->layers[i];
        const bool last = i == L - 1;
        if (!last && last_use[i] < 0) {
            rc = pst_fail(m->err, "model %s: the output of layer %s is not used by any layer",
                          m->name, l->name);
            break;
        }
        const size_t img = (size_t)l->h * l->w * l->c;
        size_t act = nn_arena_round(B * img);
        int y_end = last ? L + 1 : last_use[i];
        if (train) {
            if (last) y_end = 2 * L + 1;
            if (first_reader[i] < L && 2 * L - first_reader[i] > y_end)
                y_end = 2 * L - first_reader[i];
            if (reads_out(l) && 2 * L - i > y_end) y_end = 2 * L - i;
        }
        int dy_start = last ? L : 2 * L - last_use[i], dy_end = 2 * L - i;
        if (l->alias) {
            /* its output and gradient are a slice of the concat's (graph.h):
             * placeholders keep the pointers valid until the bind */
            add_buf(p, i, NN_BUF_Y, i, i, nn_arena_round(0), 0);
            if (train) add_buf(p, i, NN_BUF_DY, 2 * L - i, 2 * L - i, nn_arena_round(0), 0);
        } else if (l->fuse && l->fuse - 1 > i) {
            /* a batch norm that computes the add after it (graph.h): it
             * writes neither its output nor reads its gradient; placeholders
             * keep the pointers valid */
            add_buf(p, i, NN_BUF_Y, i, i, nn_arena_round(0), 0);
            if (train) add_buf(p, i, NN_BUF_DY, 2 * L - i, 2 * L - i, nn_arena_round(0), 0);
        } else {
            int y_start = i;
            if (first_alias[i] < i) {
                /* a concat holding its producers' outputs and gradients:
                 * born at the first one's forward, its gradient read until
                 * that one's backward */
                y_start = first_alias[i];
                dy_end = 2 * L - first_alias[i];
            }
            if (l->fuse) {
                /* the add computed by the batch norm before it: written at
                 * t = i - 1; its gradient (and output, for the ReLU's mask)
                 * read by that batch norm's backward at 2L - i + 1 */
                y_start = i - 1;
                if (train && l->relu && y_end < 2 * L - i + 1) y_end = 2 * L - i + 1;
                dy_end = 2 * L - i + 1;
            }
            add_buf(p, i, NN_BUF_Y, y_start, y_end, act, img);
            if (train) add_buf(p, i, NN_BUF_DY, dy_start, dy_end, act, img);
            if (train && l->split && next_use[i] >= 0)
                add_buf(p, i, NN_BUF_DY2, 2 * L - next_use[i], dy_end, act, img);
        }
        if (l->ops->arena_floats) {
            /* per image when it is the size of the output (max pool's
             * argmax, dropout's mask) */
            size_t st = l->ops->arena_floats(l, B);
            add_buf(p, i, NN_BUF_STATE, i, train ? 2 * L - i : i, st, st == act ? img : 0);
        }
    }
    free(last_use);
    return rc;
}

/* ---- packing ----------------------------------------------------------------------- */

static const nn_buf *sort_bufs;

static int by_size_desc(const void *a, const void *b)
{
    const nn_buf *x = &sort_bufs[*(const int *)a], *y = &sort_bufs[*(const int *)b];
    if (x->floats != y->floats) return x->floats > y->floats ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

typedef struct span {
    size_t lo, hi;
} span;

static int by_lo(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static bool live_together(const nn_buf *a, const nn_buf *b)
{
    return a->start <= b->end && b->start <= a->end;
}

/* ---- threads: each float of the arena to one thread ----
 *
 * The pool's loops give thread t of T images [B t / T, B (t+1) / T) of a
 * batch of B (pool.h: contiguous parts of tasks and ranges, which are
 * image-major), so of a per-image buffer thread t writes the floats from
 * cut(b, t) to cut(b, t + 1). Where the plan puts two buffers of different
 * lifetimes on the same bytes and their thread boundaries fall at
 * different places, the floats between the two boundaries are written by
 * one thread in one layer and by the other in a later one: a line the
 * other core wrote last costs a memory access (docs/platform.md, "Two cores of machine Z");
 * bench_model --unplanned shows the cost against every buffer on bytes of its own. So with T > 1 a
 * buffer may share bytes only with buffers whose boundaries on the shared bytes lie within a cache
 * line of its own: every float is then written by the same thread in every layer, and stays in that
 * thread's caches. */
static size_t cut(const nn_buf *b, int t, int T, int B)
{
    return b->img * (size_t)((long long)B * t / T);
}

static size_t clamp_z(size_t x, size_t lo, size_t hi)
{
    return x < lo ? lo : x > hi ? hi : x;
}

/* Buffers of at most NN_PLAN_THREAD_FLOATS per thread: what a thread writes
 * of a larger one has left its caches before a later layer writes those
 * bytes again, and constraining them grew resnet-50's arena (224x224,
 * batch 8, 2 threads) by 60 MB (633 -> 694), 8 MB with the limit. */
static bool constrained(const nn_buf *b, int T)
{
    return b->img && b->floats <= (size_t)T * NN_PLAN_THREAD_FLOATS;
}

/* Whether b at offset off and the placed o give each float they share to
 * the same thread (always when one of them is not constrained: not per
 * image, as the batch norms' statistics, or large). */
static bool same_threads(const nn_buf *b, size_t off, const nn_buf *o, int T, int B)
{
    if (!constrained(b, T) || !constrained(o, T)) return true;
    size_t lo = PST_MAX(off, o->offset), hi = PST_MIN(off + b->floats, o->offset + o->floats);
    if (lo >= hi) return true;
    for (int t = 1; t < T; t++) {
        size_t sb = clamp_z(off + cut(b, t, T, B), lo, hi);
        size_t so = clamp_z(o->offset + cut(o, t, T, B), lo, hi);
        if ((sb > so ? sb - so : so - sb) > NN_ARENA_ALIGN) return false;
    }
    return true;
}

static int by_size(const void *a, const void *b)
{
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}

/* The lowest offset for b clear of the placed buffers live with it (busy,
 * n of them) and giving its floats to the same threads as the placed
 * buffers that are not (other, no of them): tried at 0, at the ends of
 * placed buffers and where one of b's thread boundaries meets one of
 * theirs. */
static size_t place_threads(const nn_buf *b, const span *busy, int n, const nn_buf *const *other,
                            int no, int T, int B, size_t *cand)
{
    const size_t A = NN_ARENA_ALIGN;
    int nc = 0;
    cand[nc++] = 0;
    for (int q = 0; q < n; q++) cand[nc++] = busy[q].hi;
    for (int q = 0; q < no; q++) {
        const nn_buf *o = other[q];
        cand[nc++] = o->offset + o->floats;
        if (!b->img || !o->img) continue;
        for (int t = 1; t < T; t++) {
            size_t so = o->offset + cut(o, t, T, B), cb = cut(b, t, T, B);
            if (so < cb) continue;
            cand[nc++] = (so - cb) / A * A;
            cand[nc++] = (so - cb + A - 1) / A * A;
        }
    }
    qsort(cand, (size_t)nc, sizeof *cand, by_size);
    for (int c = 0; c < nc; c++) {
        size_t off = cand[c];
        if (c && off == cand[c - 1]) continue;
        bool ok = true;
        for (int q = 0; q < n && ok; q++) ok = busy[q].hi <= off || busy[q].lo >= off + b->floats;
        for (int q = 0; q < no && ok; q++) ok = same_threads(b, off, other[q], T, B);
        if (ok) return off;
    }
    return cand[nc - 1]; /* not reached: past every placed buffer is free */
}

/* Private: one buffer after another in layer order (the unplanned layout).
 * Planned: largest first, each at the lowest offset clear of the placed
 * buffers live at the same time; with T > 1 threads (batch B) also giving
 * each float to one thread (place_threads). */
static void pack(nn_plan *p, bool share, int T, int B)
{
    p->floats = 0;
    if (!share) {
        for (int i = 0; i < p->nbufs; i++) {
            p->bufs[i].offset = p->floats;
            p->floats += p->bufs[i].floats;
        }
        return;
    }
    int *order = pst_malloc(sizeof(int) * (size_t)p->nbufs);
    for (int i = 0; i < p->nbufs; i++) order[i] = i;
    sort_bufs = p->bufs;
    qsort(order, (size_t)p->nbufs, sizeof(int), by_size_desc);
    const size_t nb = (size_t)(p->nbufs ? p->nbufs : 1);
    span *busy = pst_malloc(sizeof(span) * nb);
    const nn_buf **other = T > 1 ? pst_malloc(sizeof(nn_buf *) * nb) : NULL;
    size_t *cand = T > 1 ? pst_malloc(sizeof(size_t) * nb * (size_t)(2 * T + 1)) : NULL;
    for (int k = 0; k < p->nbufs; k++) {
        nn_buf *b = &p->bufs[order[k]];
        int n = 0, no = 0;
        for (int q = 0; q < k; q++) {
            const nn_buf *o = &p->bufs[order[q]];
            if (live_together(b, o))
                busy[n++] = (span){o->offset, o->offset + o->floats};
            else if (other)
                other[no++] = o;
        }
        size_t off = 0;
        if (T > 1) {
            off = place_threads(b, busy, n, other, no, T, B, cand);
        } else {
            qsort(busy, (size_t)n, sizeof(span), by_lo);
            for (int q = 0; q < n && busy[q].lo < off + b->floats; q++)
                if (busy[q].hi > off) off = busy[q].hi;
        }
        b->offset = off;
        if (off + b->floats > p->floats) p->floats = off + b->floats;
    }
    free(cand);
    free(other);
    free(busy);
    free(order);
}

bool nn_plan_check(const nn_plan *p, const nn_model *m, char *why, size_t len)
{
    static const char *const kinds[] = {"output", "gradient", "state", "second gradient"};
    for (int i = 0; i < p->nbufs; i++) {
        const nn_buf *a = &p->bufs[i];
        if (a->offset % NN_ARENA_ALIGN || a->offset + a->floats > p->floats) {
            snprintf(why, len, "%s %s at float %zu (+%zu) is unaligned or past the plan's %zu",
                     m->layers[a->layer].name, kinds[a->kind], a->offset, a->floats, p->floats);
            return false;
        }
        for (int j = i + 1; j < p->nbufs; j++) {
            const nn_buf *b = &p->bufs[j];
            if (live_together(a, b) && a->offset < b->offset + b->floats &&
                b->offset < a->offset + a->floats) {
                snprintf(why, len,
                         "%s %s [t %d..%d, floats %zu..%zu) and %s %s [t %d..%d, floats "
                         "%zu..%zu) are live together and overlap",
                         m->layers[a->layer].name, kinds[a->kind], a->start, a->end, a->offset,
                         a->offset + a->floats, m->layers[b->layer].name, kinds[b->kind], b->start,
                         b->end, b->offset, b->offset + b->floats);
                return false;
            }
        }
    }
    return true;
}

void nn_plan_free(nn_plan *p)
{
    free(p->bufs);
    memset(p, 0, sizeof *p);
}

/* ---- the arena ----------------------------------------------------------------------- */

static void fill_nan(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++) p[i] = NAN;
}

void nn_plan_bind(nn_model *m, const nn_plan *p)
{
    if (!m->arena) {
        /* on the first step: a model built for --dry-run or `pstrain plan`
         * never allocates its activations */
        size_t all = m->arena_floats + m->scratch_floats;
        m->arena = pst_aligned_alloc(sizeof(float) * all);
        memset(m->arena, 0, sizeof(float) * all);
        m->scratch = m->arena + m->arena_floats;
    }
    if (m->layout == NN_LAYOUT_POISON) fill_nan(m->arena, m->arena_floats);
    if (m->bound == p) return;
    for (int i = 0; i < m->nlayers; i++) m->layers[i].y = m->layers[i].dy = m->layers[i].dy2 = NULL;
    for (int i = 0; i < p->nbufs; i++) {
        const nn_buf *b = &p->bufs[i];
        nn_layer *l = &m->layers[b->layer];
        float *at = m->arena + b->offset;
        if (b->kind == NN_BUF_Y)
            l->y = at;
        else if (b->kind == NN_BUF_DY)
            l->dy = at;
        else if (b->kind == NN_BUF_DY2)
            l->dy2 = at;
        else
            l->ops->arena_bind(l, at);
    }
    for (int i = 0; i < m->nlayers; i++) {
        nn_layer *l = &m->layers[i];
        if (!l->alias) continue;
        const nn_layer *c = &m->layers[l->alias - 1];
        l->y = c->y + l->alias_c0;
        l->dy = c->dy ? c->dy + l->alias_c0 : NULL;
    }
    m->bound = p;
}

void nn_plan_after(nn_model *m, int t)
{
    if (m->layout != NN_LAYOUT_POISON) return;
    const nn_plan *p = m->bound;
    for (int i = 0; i < p->nbufs; i++)
        if (p->bufs[i].end == t) fill_nan(m->arena + p->bufs[i].offset, p->bufs[i].floats);
}

/* Plans both steps and sizes the arena, m->scratch_floats of scratch after
 * it; the first nn_plan_bind allocates it. */
static int plan_all(nn_model *m)
{
    nn_plan_free(&m->plan_train);
    nn_plan_free(&m->plan_infer);
    if (lifetimes(m, &m->plan_train, true) < 0 || lifetimes(m, &m->plan_infer, false) < 0)
        return -1;
    bool share = m->layout == NN_LAYOUT_PLANNED;
    int T = nn_pool_threads(m->pool);
    pack(&m->plan_train, share, T, m->cfg.max_batch);
    pack(&m->plan_infer, share, T, m->cfg.max_batch);
    m->arena_floats = PST_MAX(m->plan_train.floats, m->plan_infer.floats);
    free(m->arena);
    m->arena = m->scratch = NULL;
    m->bound = NULL;
    return 0;
}

int nn_plan_model(nn_model *m)
{
    return plan_all(m);
}

void nn_model_set_layout(nn_model *m, nn_layout layout)
{
    m->layout = layout;
    int rc = plan_all(m);
    (void)rc; /* the same graph planned before */
}

/* ---- memory report (pstrain/model.h) --------------------------------------------- */

void nn_model_memory(const nn_model *m, nn_memory *out)
{
    memset(out, 0, sizeof *out);
    out->param_bytes = sizeof(float) * m->size;
    out->train_bytes = sizeof(float) * m->plan_train.floats;
    out->infer_bytes = sizeof(float) * m->plan_infer.floats;
    out->arena_bytes = sizeof(float) * m->arena_floats;
    size_t un = 0;
    for (int i = 0; i < m->plan_train.nbufs; i++) un += m->plan_train.bufs[i].floats;
    out->unplanned_bytes = sizeof(float) * un;
    out->scratch_bytes = sizeof(float) * m->scratch_floats;
}

/* "97.5 MiB" and "102,228,128" */
static void bytes_text(char *unit, char *exact, size_t len, size_t n)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    if (u == 0)
        snprintf(unit, len, "%zu bytes", n);
    else
        snprintf(unit, len, "%.1f %s", v, units[u]);
    char digits[32];
    snprintf(digits, sizeof digits, "%zu", n);
    size_t nd = strlen(digits), o = 0;
    for (size_t i = 0; i < nd && o + 2 < len; i++) {
        if (i && (nd - i) % 3 == 0) exact[o++] = ',';
        exact[o++] = digits[i];
    }
    exact[o] = 0;
}

static void memory_line(FILE *out, const char *what, size_t n, const char *note)
{
    char unit[32], exact[48];
    bytes_text(unit, exact, sizeof unit, n);
    fprintf(out, "    %-24s %10s %18s bytes%s%s\n", what, unit, exact, note[0] ? "  " : "", note);
}

void nn_model_print_memory(const nn_model *m, int opt_slots, const char *opt, FILE *out)
{
    nn_memory mm;
    nn_model_memory(m, &mm);
    char note[128], a[32], b[32], x[48];
    size_t slots = mm.param_bytes * (size_t)opt_slots;
    int T = nn_pool_threads(m->pool);
    if (T > 1)
        fprintf(out, "  memory of one process for a batch of %d on %d threads:\n", m->cfg.max_batch,
                T);
    else
        fprintf(out, "  memory of one process for a batch of %d:\n", m->cfg.max_batch);
    memory_line(out, "parameters", mm.param_bytes, "");
    memory_line(out, "gradients", mm.param_bytes, "");
    snprintf(note, sizeof note, "%s: %d slot%s", opt, opt_slots, opt_slots == 1 ? "" : "s");
    memory_line(out, "optimizer slots", slots, note);
    bytes_text(a, x, sizeof a, mm.train_bytes);
    bytes_text(b, x, sizeof b, mm.infer_bytes);
    snprintf(note, sizeof note, "training step %s, inference %s", a, b);
    memory_line(out, "activations (planned)", mm.arena_bytes, note);
    memory_line(out, "activations (unplanned)", mm.unplanned_bytes,
                "a buffer per output, gradient and state");
    memory_line(out, "layer scratch", mm.scratch_bytes, "convolutions' im2col");
    memory_line(out, "total", 2 * mm.param_bytes + slots + mm.arena_bytes + mm.scratch_bytes,
                "parameters to scratch, activations planned");
}
