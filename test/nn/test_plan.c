/* test_plan.c - the activation memory plan (src/nn/plan.c): for every
 * built-in model, no two buffers live at the same time share a byte (in
 * both plans), and training steps, parameter updates and evaluations give
 * bitwise the results of the unplanned layout (every buffer its own bytes)
 * and of the poison layout (every buffer NaN outside its declared
 * lifetime, so a kernel reading a buffer the plan considers dead changes
 * the result or crashes). Also the memory report's numbers, and that the
 * plan of a model on 2 or 3 threads gives every float of the arena to
 * one thread (buffers on the same bytes split between the threads at the
 * same places, plan.c). */
#include <string.h>

#include "check.h"
#include "graph.h"
#include "layers.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"
#include "pstrain/model.h"

typedef struct size3 {
    int h, w, c;
} size3;

/* The first of a few image sizes the model fits (the new large models
 * need more than 28x28). */
static nn_model *make_t(const char *name, int k, int max_batch, nn_layout layout, size3 *sz,
                        int threads)
{
    static const size3 sizes[] = {{28, 28, 1}, {32, 32, 3}, {75, 75, 3}, {224, 224, 3}};
    for (size_t i = 0; i < PST_ARRAY_LEN(sizes); i++) {
        nn_model_cfg cfg = {name, sizes[i].h, sizes[i].w, sizes[i].c, k,  max_batch,
                            5,    0.01f,      0.1f,       threads,    {0}};
        nn_model *m = NULL;
        pst_err e = {{0}};
        if (nn_model_new(&m, &cfg, &e) == 0) {
            if (layout != NN_LAYOUT_PLANNED) nn_model_set_layout(m, layout);
            *sz = sizes[i];
            return m;
        }
    }
    CHECK(0, "model %s fits none of the test sizes", name);
    return NULL;
}

static nn_model *make(const char *name, int k, int max_batch, nn_layout layout, size3 *sz)
{
    return make_t(name, k, max_batch, layout, sz, 1);
}

/* Which thread of T writes float a of buffer b (images [B t / T, B (t+1)
 * / T) go to thread t, pool.h), written out independently of plan.c. */
static int owner(const nn_buf *b, size_t a, int T, int B)
{
    int t = 0;
    while (t + 1 < T && a >= b->offset + b->img * (size_t)((long long)B * (t + 1) / T)) t++;
    return t;
}

/* With T threads the plan gives each float of the arena to one thread:
 * two per-image buffers of at most T NN_PLAN_THREAD_FLOATS floats on the
 * same bytes (never live together) agree on every float's thread except
 * within a cache line of a boundary; and the plan stays valid and no
 * larger than a buffer each. */
static void check_thread_plan(const char *name, int T)
{
    enum { B = 16 };
    size3 sz;
    nn_model *m = make_t(name, 10, B, NN_LAYOUT_PLANNED, &sz, T);
    if (!m) return;
    char why[512] = "";
    const nn_plan *plans[2] = {&m->plan_train, &m->plan_infer};
    nn_memory mm;
    nn_model_memory(m, &mm);
    CHECK(mm.train_bytes <= mm.unplanned_bytes, "%s on %d threads: plan %zu > unplanned %zu", name,
          T, mm.train_bytes, mm.unplanned_bytes);
    for (int k = 0; k < 2; k++) {
        const nn_plan *p = plans[k];
        CHECK(nn_plan_check(p, m, why, sizeof why), "%s on %d threads: %s", name, T, why);
        for (int i = 0; i < p->nbufs; i++)
            for (int j = i + 1; j < p->nbufs; j++) {
                const nn_buf *a = &p->bufs[i], *b = &p->bufs[j];
                size_t lo = PST_MAX(a->offset, b->offset);
                size_t hi = PST_MIN(a->offset + a->floats, b->offset + b->floats);
                const size_t lim = (size_t)T * NN_PLAN_THREAD_FLOATS;
                if (!a->img || !b->img || a->floats > lim || b->floats > lim || lo >= hi) continue;
                int bad = 0;
                for (size_t x = lo; x < hi; x += 8) bad += owner(a, x, T, B) != owner(b, x, T, B);
                CHECK(bad <= 2 * (T - 1),
                      "%s on %d threads: %s and %s share %zu floats, %d "
                      "of them (every 8th) written by different threads",
                      name, T, m->layers[a->layer].name, m->layers[b->layer].name, hi - lo,
                      8 * bad);
            }
    }
    nn_model_free(m);
}

/* The checker itself: two live buffers placed on the same bytes are caught. */
static void check_checker(void)
{
    size3 sz;
    nn_model *m = make("lenet5", 10, 4, NN_LAYOUT_PLANNED, &sz);
    if (!m) return;
    nn_plan p = m->plan_train;
    nn_buf *saved = pst_malloc(sizeof(nn_buf) * (size_t)p.nbufs);
    memcpy(saved, p.bufs, sizeof(nn_buf) * (size_t)p.nbufs);
    char why[512] = "";
    /* conv1's output and gradient are live together during its backward */
    for (int i = 0; i < p.nbufs; i++)
        if (p.bufs[i].layer == 0 && p.bufs[i].kind == NN_BUF_DY) p.bufs[i].offset = 0;
    for (int i = 0; i < p.nbufs; i++)
        if (p.bufs[i].layer == 0 && p.bufs[i].kind == NN_BUF_Y) p.bufs[i].offset = 0;
    CHECK(!nn_plan_check(&p, m, why, sizeof why), "overlapping live buffers not caught");
    CHECK(strstr(why, "live together"), "message: %s", why);
    memcpy(p.bufs, saved, sizeof(nn_buf) * (size_t)p.nbufs);
    p.bufs[0].offset += 1;
    CHECK(!nn_plan_check(&p, m, why, sizeof why), "unaligned buffer not caught");
    memcpy(p.bufs, saved, sizeof(nn_buf) * (size_t)p.nbufs);
    free(saved);
    nn_model_free(m);
}

static void fill(float *x, int32_t *y, size_t nx, int n, int k, uint64_t seed)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    for (size_t i = 0; i < nx; i++) x[i] = (float)nn_rng_normal(&r);
    for (int i = 0; i < n; i++) y[i] = (int32_t)(nn_rng_next(&r) % (uint64_t)k);
}

/* SGD on the trainable variables, new values for the rest. */
static void update(nn_model *m)
{
    float *p = nn_model_params(m);
    const float *g = nn_model_grads(m);
    for (int i = 0; i < nn_model_nvars(m); i++) {
        const nn_var *v = nn_model_var(m, i);
        if (v->trainable)
            for (size_t j = 0; j < v->size; j++) p[v->offset + j] -= 0.05f * g[v->offset + j];
    }
    nn_model_apply_state(m, p, g, 0, nn_model_size(m));
}

/* A 64-bit hash of whole 32-bit words (every argument is floats or ints):
 * the runs are compared bitwise through it, since keeping every gradient
 * slab of a 25M-parameter model would not fit a test. */
static uint64_t hash(uint64_t h, const void *p, size_t n)
{
    const uint32_t *w = p;
    for (size_t i = 0; i < n / 4; i++) h = (h ^ w[i]) * 0x100000001b3ull + (h >> 29);
    return h;
}

/* Steps of n = B and B - 1 with an evaluation after each (the plans
 * take turns over the same arena), from the same initial parameters in
 * planned, private and poison layouts (one model switched between them):
 * losses, gradients, logits, predictions and parameters bitwise equal. */
static void check_layouts_agree(const char *name)
{
    enum { B = 3, K = 10, STEPS = 2, NL = 3, NH = 4 * STEPS };
    static const nn_layout layouts[NL] = {NN_LAYOUT_PLANNED, NN_LAYOUT_PRIVATE, NN_LAYOUT_POISON};
    static const char *const lname[NL] = {"planned", "private", "poison"};
    static const char *const what[4] = {"training loss and logits", "gradients",
                                        "evaluation loss, logits and predictions", "parameters"};
    size3 sz;
    nn_model *m = make(name, K, B, NN_LAYOUT_PLANNED, &sz);
    if (!m) return;
    const size_t per = (size_t)sz.h * sz.w * sz.c, size = nn_model_size(m);
    float *x = pst_malloc(sizeof(float) * B * per);
    float *p0 = pst_malloc(sizeof(float) * size);
    memcpy(p0, nn_model_params(m), sizeof(float) * size);
    int32_t y[B], pred[B];
    uint64_t h[NL][NH];
    char why[512] = "";
    CHECK(nn_plan_check(&m->plan_train, m, why, sizeof why), "%s batch %d training plan: %s", name,
          B, why);
    CHECK(nn_plan_check(&m->plan_infer, m, why, sizeof why), "%s batch %d inference plan: %s", name,
          B, why);
    /* every layer has an output (and in training a gradient) */
    int ny = 0, ndy = 0;
    for (int i = 0; i < m->plan_train.nbufs; i++) {
        ny += m->plan_train.bufs[i].kind == NN_BUF_Y;
        ndy += m->plan_train.bufs[i].kind == NN_BUF_DY;
    }
    CHECK(ny == m->nlayers && ndy == m->nlayers, "%s: %d outputs, %d gradients for %d layers", name,
          ny, ndy, m->nlayers);
    nn_memory mm;
    nn_model_memory(m, &mm);
    CHECK(mm.arena_bytes == PST_MAX(mm.train_bytes, mm.infer_bytes) && mm.train_bytes > 0 &&
              mm.param_bytes == sizeof(float) * size,
          "%s: memory report arena %zu train %zu infer %zu params %zu", name, mm.arena_bytes,
          mm.train_bytes, mm.infer_bytes, mm.param_bytes);
    for (int li = 0; li < NL; li++) {
        nn_model_set_layout(m, layouts[li]);
        memcpy(nn_model_params(m), p0, sizeof(float) * size);
        for (int s = 0; s < STEPS; s++) {
            int n = s == 1 ? B - 1 : B, nc;
            uint64_t *hs = &h[li][4 * s];
            fill(x, y, n * per, n, K, 100 + (uint64_t)s);
            float loss = nn_model_train_step(m, x, y, n, s, &nc);
            hs[0] = hash(hash(hash(14695981039346656037ull, &loss, sizeof loss), &nc, sizeof nc),
                         nn_model_logits(m), sizeof(float) * n * K);
            hs[1] = hash(14695981039346656037ull, nn_model_grads(m), sizeof(float) * size);
            update(m);
            fill(x, y, B * per, B, K, 200 + (uint64_t)s);
            loss = nn_model_eval(m, x, y, B, &nc, pred);
            hs[2] = hash(hash(hash(14695981039346656037ull, &loss, sizeof loss), pred, sizeof pred),
                         nn_model_logits(m), sizeof(float) * B * K);
            hs[3] = hash(14695981039346656037ull, nn_model_params(m), sizeof(float) * size);
        }
    }
    for (int li = 1; li < NL; li++)
        for (int k = 0; k < NH; k++)
            CHECK(h[li][k] == h[0][k], "%s step %d: %s layout's %s differ from planned", name,
                  k / 4, lname[li], what[k % 4]);
    free(p0);
    free(x);
    nn_model_free(m);
}

int main(void)
{
    pst_set_progname("test_plan");
    nn_blis_init();
    check_checker();
    for (const char *const *n = nn_model_names(); *n; n++) {
        check_layouts_agree(*n);
        check_thread_plan(*n, 2);
        check_thread_plan(*n, 3);
    }
    return check_exit();
}
