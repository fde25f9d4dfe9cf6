/* test_prof.c - the model's profiling (model_prof.c; bench_model's report)
 * changes no result: training steps with profiling on, with the
 * convolutions' reruns (--rerun, threads 1 and 2), with the prediction
 * (--predict 2, threads 1) and on a pool (threads 2, the pool's
 * statistics) give bitwise the loss, correct count, logits, gradient slab
 * and parameters (moving statistics included) of the same steps without
 * profiling; and the report names every
 * layer, with the columns of its mode. Not a timing test: no figure of
 * the report is checked. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "graph.h"
#include "layers.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"
#include "pstrain/model.h"

typedef struct spec {
    const char *name;
    int h, w, c, k, n;
} spec;

typedef struct mode {
    const char *what;
    int threads, predict;
    bool rerun;
    const char *expect; /* a phrase of the report in this mode */
} mode;

static nn_model *make(const spec *s, int threads)
{
    nn_model_cfg cfg = {s->name, s->h, s->w, s->c, s->k, s->n, 7, 0.01f, 0.1f, threads, {0}};
    nn_model *m = NULL;
    pst_err e = {{0}};
    CHECK(nn_model_new(&m, &cfg, &e) == 0 && m, "%s threads %d: %s", s->name, threads, e.msg);
    return m;
}

/* Two steps (SGD between them); loss and correct count of each, the
 * gradients and logits of the second into g and lg, then the parameters
 * (with the batch norms' moving statistics) after them into g + size. */
static void steps(nn_model *m, const spec *s, const float *x, const int32_t *y, float *loss,
                  int *corr, float *g, float *lg)
{
    size_t size = nn_model_size(m);
    for (int st = 0; st < 2; st++) {
        loss[st] = nn_model_train_step(m, x, y, s->n, st, &corr[st]);
        if (st == 0)
            for (size_t i = 0; i < size; i++) nn_model_params(m)[i] -= 0.01f * nn_model_grads(m)[i];
    }
    memcpy(g, nn_model_grads(m), sizeof(float) * size);
    memcpy(g + size, nn_model_params(m), sizeof(float) * size);
    memcpy(lg, nn_model_logits(m), sizeof(float) * (size_t)s->n * s->k);
}

static void check_model(const spec *s)
{
    static const mode modes[] = {
        {"rerun", 1, 0, true, "reruns (each convolution called again"},
        {"predict 2", 1, 2, false, "predicted on 2 threads"},
        {"threads 2", 2, 0, false, "pool per step"},
        {"rerun, threads 2", 2, 0, true, "the same calls again at once: rerun"},
    };
    size_t per = (size_t)s->h * s->w * s->c, nlog = (size_t)s->n * s->k;
    float *x = pst_malloc(sizeof(float) * per * s->n);
    int32_t *y = pst_malloc(sizeof(int32_t) * s->n);
    nn_rng r;
    nn_rng_seed(&r, 3);
    for (size_t i = 0; i < per * s->n; i++) x[i] = (float)nn_rng_normal(&r);
    for (int i = 0; i < s->n; i++) y[i] = (int32_t)(nn_rng_next(&r) % (uint64_t)s->k);
    nn_model *ref = make(s, 1);
    if (!ref) goto out;
    size_t size = nn_model_size(ref);
    float *g0 = pst_malloc(sizeof(float) * 2 * size), *l0 = pst_malloc(sizeof(float) * nlog);
    float *g1 = pst_malloc(sizeof(float) * 2 * size), *l1 = pst_malloc(sizeof(float) * nlog);
    float loss0[2], loss1[2];
    int corr0[2], corr1[2];
    steps(ref, s, x, y, loss0, corr0, g0, l0);
    for (size_t q = 0; q < sizeof modes / sizeof modes[0]; q++) {
        const mode *md = &modes[q];
        nn_model *m = make(s, md->threads);
        if (!m) continue;
        nn_model_set_profiling(m, true);
        nn_model_set_profile_threads(m, md->predict);
        nn_model_set_profile_rerun(m, md->rerun);
        steps(m, s, x, y, loss1, corr1, g1, l1);
        CHECK(!memcmp(g0, g1, sizeof(float) * size), "%s profiled (%s): gradients differ", s->name,
              md->what);
        CHECK(!memcmp(g0 + size, g1 + size, sizeof(float) * size),
              "%s profiled (%s): parameters or moving statistics differ", s->name, md->what);
        CHECK(!memcmp(l0, l1, sizeof(float) * nlog), "%s profiled (%s): logits differ", s->name,
              md->what);
        CHECK(!memcmp(loss0, loss1, sizeof loss0) && corr0[0] == corr1[0] && corr0[1] == corr1[1],
              "%s profiled (%s): loss %.9g %.9g, correct %d %d; unprofiled %.9g %.9g, %d %d",
              s->name, md->what, loss1[0], loss1[1], corr1[0], corr1[1], loss0[0], loss0[1],
              corr0[0], corr0[1]);
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        CHECK(f != NULL, "open_memstream");
        if (f) {
            nn_model_profile_report(m, f);
            fclose(f);
            for (int i = 0; i < m->nlayers; i++)
                CHECK(strstr(buf, m->layers[i].name) != NULL, "%s (%s): no row for layer %s",
                      s->name, md->what, m->layers[i].name);
            CHECK(strstr(buf, "total") && strstr(buf, md->expect),
                  "%s (%s): report lacks '%s':\n%s", s->name, md->what, md->expect, buf);
            free(buf);
        }
        nn_model_set_profiling(m, false);
        nn_model_free(m);
    }
    free(g0), free(l0), free(g1), free(l1);
out:
    nn_model_free(ref);
    free(x), free(y);
}

int main(void)
{
    pst_set_progname("test_nn_prof");
    nn_blis_init();
    /* resnet-20: Winograd, narrow and strided convolutions, fused batch
     * norm + add, split gradients; inception-mini: concat, a tensor with
     * several consumers */
    const spec specs[] = {
        {"resnet-20", 16, 16, 3, 5, 9},
        {"inception-mini", 16, 16, 1, 4, 7},
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) check_model(&specs[i]);
    return check_exit();
}
