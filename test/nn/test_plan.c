/* test_plan.c - the activation memory plan (src/nn/plan.c): for every
 * built-in model, no two buffers live at the same time share a byte (in
 * both plans), and training steps, parameter updates and evaluations give
 * bitwise the results of the unplanned layout (every buffer its own bytes)
 * and of the poison layout (every buffer NaN outside its declared
 * lifetime, so a kernel reading a buffer the plan considers dead changes
 * the result or crashes). Also the memory report's numbers. */
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
static nn_model *make(const char *name, int k, int max_batch, nn_layout layout, size3 *sz)
{
    static const size3 sizes[] = {{28, 28, 1}, {32, 32, 3}, {75, 75, 3}, {224, 224, 3}};
    for (size_t i = 0; i < PST_ARRAY_LEN(sizes); i++) {
        nn_model_cfg cfg = {name,      sizes[i].h, sizes[i].w, sizes[i].c, k,
                            max_batch, 5,          0.01f,      0.1f,       1};
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

static void check_plans(const char *name, int max_batch)
{
    size3 sz;
    nn_model *m = make(name, 10, max_batch, NN_LAYOUT_PLANNED, &sz);
    if (!m) return;
    char why[512] = "";
    CHECK(nn_plan_check(&m->plan_train, m, why, sizeof why), "%s batch %d training plan: %s", name,
          max_batch, why);
    CHECK(nn_plan_check(&m->plan_infer, m, why, sizeof why), "%s batch %d inference plan: %s", name,
          max_batch, why);
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
              mm.param_bytes == sizeof(float) * nn_model_size(m),
          "%s: memory report arena %zu train %zu infer %zu params %zu", name, mm.arena_bytes,
          mm.train_bytes, mm.infer_bytes, mm.param_bytes);
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

/* Steps of n = B, B - 1 and B with an evaluation between them (the plans
 * take turns over the same arena), in planned, private and poison layouts:
 * loss, gradients, logits, predictions and final parameters bitwise equal. */
static void check_layouts_agree(const char *name)
{
    enum { B = 3, K = 10, STEPS = 3, NL = 3 };
    static const nn_layout layouts[NL] = {NN_LAYOUT_PLANNED, NN_LAYOUT_PRIVATE, NN_LAYOUT_POISON};
    static const char *const lname[NL] = {"planned", "private", "poison"};
    nn_model *m[NL];
    size3 sz;
    for (int i = 0; i < NL; i++) {
        m[i] = make(name, K, B, layouts[i], &sz);
        if (!m[i]) return;
    }
    const size_t per = (size_t)sz.h * sz.w * sz.c, size = nn_model_size(m[0]);
    float *x = pst_malloc(sizeof(float) * B * per);
    int32_t y[B], pred[NL][B];
    for (int s = 0; s < STEPS; s++) {
        int n = s == 1 ? B - 1 : B;
        fill(x, y, n * per, n, K, 100 + (uint64_t)s);
        float loss[NL], eloss[NL];
        int nc[NL];
        for (int i = 0; i < NL; i++) {
            loss[i] = nn_model_train_step(m[i], x, y, n, s, &nc[i]);
            if (i == 0) continue;
            CHECK(memcmp(&loss[i], &loss[0], sizeof(float)) == 0 && nc[i] == nc[0],
                  "%s step %d: %s loss %.9g, planned %.9g", name, s, lname[i], loss[i], loss[0]);
            CHECK(memcmp(nn_model_grads(m[i]), nn_model_grads(m[0]), sizeof(float) * size) == 0,
                  "%s step %d: %s gradients differ from planned", name, s, lname[i]);
            CHECK(memcmp(nn_model_logits(m[i]), nn_model_logits(m[0]), sizeof(float) * n * K) == 0,
                  "%s step %d: %s logits differ from planned", name, s, lname[i]);
        }
        for (int i = 0; i < NL; i++) update(m[i]);
        fill(x, y, B * per, B, K, 200 + (uint64_t)s);
        for (int i = 0; i < NL; i++) {
            eloss[i] = nn_model_eval(m[i], x, y, B, &nc[i], pred[i]);
            if (i == 0) continue;
            CHECK(memcmp(&eloss[i], &eloss[0], sizeof(float)) == 0 &&
                      memcmp(pred[i], pred[0], sizeof pred[0]) == 0 &&
                      memcmp(nn_model_logits(m[i]), nn_model_logits(m[0]), sizeof(float) * B * K) ==
                          0,
                  "%s eval after step %d: %s loss %.9g, planned %.9g", name, s, lname[i], eloss[i],
                  eloss[0]);
        }
    }
    for (int i = 1; i < NL; i++)
        CHECK(memcmp(nn_model_params(m[i]), nn_model_params(m[0]), sizeof(float) * size) == 0,
              "%s: %s parameters differ from planned after %d steps", name, lname[i], STEPS);
    free(x);
    for (int i = 0; i < NL; i++) nn_model_free(m[i]);
}

int main(void)
{
    pst_set_progname("test_plan");
    nn_blis_init();
    check_checker();
    for (const char *const *n = nn_model_names(); *n; n++) {
        check_plans(*n, 1);
        check_plans(*n, 7);
        check_layouts_agree(*n);
    }
    return check_exit();
}
