/* test_model.c - the built-in models as a whole: finite-difference gradients
 * of every trainable variable on a tiny batch (with weight decay and label
 * smoothing), shape errors, the description's parameter count, seeded
 * determinism, the batch-norm moving-statistics contract, evaluation, that a
 * few SGD steps fit a fixed batch, and that every registered layer kind is
 * complete and used by a built-in model (so its gradients are checked). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* A model of spec s with its channel counts divided by div (1: published). */
/* Set: make_div builds this graph (nn_model_new_graph) instead of the
 * named model. */
static int (*graph_build)(nn_model *m);
/* The switches make_div builds with (set_fuse, test_alias). */
static nn_switches sw;

/* Graph fusion as PSTRAIN_FUSE's values: 0 off, 1 without split
 * gradients, 2 with them (the default). */
static void set_fuse(int mode)
{
    sw.no_fuse = mode == 0, sw.no_split = mode == 1;
}

static nn_model *make_div(const spec *s, uint64_t seed, float wd, float ls, int max_batch, int div)
{
    nn_model_cfg cfg = {s->name, s->h, s->w, s->c, s->k, max_batch, seed, wd, ls, 1, sw};
    nn_model *m = NULL;
    pst_err e = {{0}};
    int rc = graph_build ? nn_model_new_graph(&m, &cfg, graph_build, &e)
                         : nn_model_new_narrow(&m, &cfg, div, &e);
    CHECK(rc == 0 && m, "%s %dx%dx%d: %s", s->name, s->h, s->w, s->c, e.msg);
    return m;
}

static nn_model *make(const spec *s, uint64_t seed, float wd, float ls, int max_batch)
{
    return make_div(s, seed, wd, ls, max_batch, 1);
}

static void fill_batch(float *x, int32_t *y, int n, size_t per, int k, uint64_t seed)
{
    nn_rng r;
    nn_rng_seed(&r, seed);
    for (size_t i = 0; i < (size_t)n * per; i++) x[i] = (float)nn_rng_normal(&r);
    for (int i = 0; i < n; i++) y[i] = (int32_t)(nn_rng_next(&r) % (uint64_t)k);
}

/* The loss train_step differentiates, recomputed in double from the logits. */
static double step_loss(nn_model *m, const float *x, const int32_t *y, int n)
{
    const nn_model_cfg *cfg = nn_model_config(m);
    nn_model_train_step(m, x, y, n, 7, NULL);
    double loss = nn_softmax_xent(NULL, nn_model_logits(m), y, n, cfg->num_classes,
                                  cfg->label_smoothing, NULL, NULL);
    double sq = 0;
    for (int i = 0; i < nn_model_nvars(m); i++) {
        const nn_var *v = nn_model_var(m, i);
        const char *suffix = strrchr(v->name, '/');
        if (!suffix || strcmp(suffix, "/kernel") != 0) continue;
        for (size_t j = 0; j < v->size; j++) {
            double p = nn_model_params(m)[v->offset + j];
            sq += p * p;
        }
    }
    return loss + 0.5 * cfg->weight_decay * sq;
}

static void test_model_gradients(const spec *s)
{
    nn_model *m = make(s, 11, 0.01f, 0.1f, s->n);
    if (!m) return;
    size_t per = (size_t)s->h * s->w * s->c, size = nn_model_size(m);
    float *x = pst_malloc(sizeof(float) * s->n * per);
    int32_t *y = pst_malloc(sizeof(int32_t) * s->n);
    fill_batch(x, y, s->n, per, s->k, 3);
    float loss = nn_model_train_step(m, x, y, s->n, 7, NULL);
    float *g = pst_malloc(sizeof(float) * size);
    memcpy(g, nn_model_grads(m), sizeof(float) * size);
    double l2 = step_loss(m, x, y, s->n);
    CHECK_CLOSE(loss, l2, 1e-5, 1e-5, "%s: train_step loss %g, recomputed %g", s->name, loss, l2);
    /* central differences on up to 12 elements of every trainable variable */
    const double eps = 1e-3;
    int checked = 0, bad = 0;
    float *p = nn_model_params(m);
    for (int i = 0; i < nn_model_nvars(m); i++) {
        const nn_var *v = nn_model_var(m, i);
        if (!v->trainable) continue;
        size_t stride = v->size > 12 ? v->size / 12 : 1;
        for (size_t j = 0; j < v->size; j += stride) {
            size_t o = v->offset + j;
            float save = p[o];
            p[o] = save + (float)eps;
            double lp = step_loss(m, x, y, s->n);
            p[o] = save - (float)eps;
            double lm = step_loss(m, x, y, s->n);
            p[o] = save;
            double num = (lp - lm) / (2 * eps);
            double err = fabs(num - g[o]);
            if (err > 2e-3 + 5e-2 * fmax(fabs(num), fabs(g[o]))) {
                if (bad < 5)
                    fprintf(stderr, "  %s %s[%zu]: analytic %.6g numeric %.6g\n", s->name, v->name,
                            j, g[o], num);
                bad++;
            }
            checked++;
        }
    }
    /* ReLU kinks and max-pool ties inside a whole model can flip under a
     * perturbation: allow a few percent, report them */
    fprintf(stderr, "%s: %d of %d parameter gradients outside tolerance\n", s->name, bad, checked);
    CHECK(bad <= checked / 25, "%s: %d of %d parameter gradients differ", s->name, bad, checked);
    free(x), free(y), free(g);
    nn_model_free(m);
}

/* The large models, narrow: every trainable variable's gradient along a
 * random +-1 direction over all its elements (g.d) against the central
 * difference of the loss along d. Two steps per variable instead of two per
 * element keeps Inception-v3's ~290 variables quick. */
static void test_model_directional(const spec *s, int div)
{
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    nn_model *m = make_div(s, 11, 0.01f, 0.1f, s->n, div);
    if (!m) return;
    size_t per = (size_t)s->h * s->w * s->c, size = nn_model_size(m);
    float *x = pst_malloc(sizeof(float) * s->n * per);
    int32_t *y = pst_malloc(sizeof(int32_t) * s->n);
    fill_batch(x, y, s->n, per, s->k, 3);
    /* Deep batch-normalised ReLU networks in training mode are chaotic at
     * initialization (gradients grow geometrically with depth, Yang et al.
     * 2019): inception-v3's first kernels get derivatives of 40 at a loss of
     * 1.3, and float central differences only approach them in a narrow
     * window around eps = 1e-5. The gradients must be right everywhere, so
     * check them where the loss is smooth: batch norm gamma 0.4, beta 0.5
     * (most ReLUs active, some not). */
    float *p = nn_model_params(m);
    for (int i = 0; i < nn_model_nvars(m); i++) {
        const nn_var *v = nn_model_var(m, i);
        const char *leaf = strrchr(v->name, '/');
        float val = !strcmp(leaf, "/gamma") ? 0.3f : !strcmp(leaf, "/beta") ? 0.5f : -1.0f;
        for (size_t j = 0; val >= 0 && j < v->size; j++) p[v->offset + j] = val;
    }
    nn_model_train_step(m, x, y, s->n, 7, NULL);
    float *g = pst_malloc(sizeof(float) * size);
    float *save = pst_malloc(sizeof(float) * size), *d = pst_malloc(sizeof(float) * size);
    memcpy(g, nn_model_grads(m), sizeof(float) * size);
    memcpy(save, p, sizeof(float) * size);
    nn_rng r;
    nn_rng_seed(&r, 99);
    const double eps = 3e-4;
    int checked = 0, bad = 0;
    for (int i = 0; i < nn_model_nvars(m); i++) {
        const nn_var *v = nn_model_var(m, i);
        if (!v->trainable) continue;
        double analytic = 0;
        float unit = (float)(1.0 / sqrt((double)v->size)); /* |d| = 1 */
        for (size_t j = v->offset; j < v->offset + v->size; j++) {
            d[j] = (nn_rng_next(&r) >> 63) ? unit : -unit;
            analytic += (double)g[j] * d[j];
        }
        for (size_t j = v->offset; j < v->offset + v->size; j++) p[j] = save[j] + (float)eps * d[j];
        double lp = step_loss(m, x, y, s->n);
        for (size_t j = v->offset; j < v->offset + v->size; j++) p[j] = save[j] - (float)eps * d[j];
        double lm = step_loss(m, x, y, s->n);
        memcpy(p + v->offset, save + v->offset, sizeof(float) * v->size);
        double num = (lp - lm) / (2 * eps);
        if (fabs(num - analytic) > 2e-3 + 5e-2 * fmax(fabs(num), fabs(analytic))) {
            if (bad < 5)
                fprintf(stderr, "  %s/%d %s: analytic %.6g numeric %.6g\n", s->name, div, v->name,
                        analytic, num);
            bad++;
        }
        checked++;
    }
    fprintf(stderr,
            "%s (widths / %d, %dx%dx%d, batch %d): %d of %d directional derivatives outside "
            "tolerance (%.1f s cpu)\n",
            s->name, div, s->h, s->w, s->c, s->n, bad, checked,
            (double)clock() / CLOCKS_PER_SEC - t0);
    CHECK(bad <= checked / 25, "%s: %d of %d directional derivatives differ", s->name, bad,
          checked);
    free(x), free(y), free(g), free(save), free(d);
    nn_model_free(m);
}

static void test_shapes_and_describe(void)
{
    pst_err e = {{0}};
    nn_model *m = NULL;
    nn_model_cfg small = {"lenet5", 8, 8, 1, 10, 4, 1, 0, 0, 1, {0}};
    CHECK(nn_model_new(&m, &small, &e) < 0 && !m, "lenet5 accepted an 8x8 image");
    CHECK(strstr(e.msg, "lenet5") && strstr(e.msg, "8x8x1"), "message: %s", e.msg);
    fprintf(stderr, "expected error: %s\n", e.msg);
    nn_model_cfg tiny = {"inception-mini", 2, 2, 3, 10, 4, 1, 0, 0, 1, {0}};
    CHECK(nn_model_new(&m, &tiny, &e) < 0 && !m, "inception-mini accepted a 2x2 image");
    CHECK(strstr(e.msg, "inception-mini") && strstr(e.msg, "2x2x3"), "message: %s", e.msg);
    /* below torchvision's minimum: one line naming the model, the size and the minimum */
    nn_model_cfg small_v3 = {"inception-v3", 74, 80, 3, 10, 4, 1, 0, 0, 1, {0}};
    CHECK(nn_model_new(&m, &small_v3, &e) < 0 && !m, "inception-v3 accepted a 74x80 image");
    CHECK(strstr(e.msg, "inception-v3") && strstr(e.msg, "74x80x3") && strstr(e.msg, "75x75") &&
              !strchr(e.msg, '\n'),
          "message: %s", e.msg);
    nn_model_cfg unknown = {"resnet", 28, 28, 1, 10, 4, 1, 0, 0, 1, {0}};
    CHECK(nn_model_new(&m, &unknown, &e) < 0 && strstr(e.msg, "resnet"), "message: %s", e.msg);
    nn_model_cfg zero = {"mlp", 28, 28, 1, 10, 0, 1, 0, 0, 1, {0}};
    CHECK(nn_model_new(&m, &zero, &e) < 0 && strstr(e.msg, "batch"), "message: %s", e.msg);
    /* sizes the int-indexed kernels cannot hold are refused before allocating */
    nn_model_cfg huge_img = {"mlp", 65536, 65536, 4, 10, 1, 1, 0, 0, 1, {0}};
    CHECK(nn_model_new(&m, &huge_img, &e) < 0 && !m && strstr(e.msg, "fc1") &&
              strstr(e.msg, "17179869184 inputs"),
          "mlp on 65536x65536x4: %s", e.msg);
    nn_model_cfg huge_batch = {"lenet5", 28, 28, 1, 10, 1 << 20, 1, 0, 0, 1, {0}};
    CHECK(nn_model_new(&m, &huge_batch, &e) < 0 && !m && strstr(e.msg, "smaller batch") &&
              strstr(e.msg, "1048576"),
          "lenet5 with a batch of 2^20: %s", e.msg);
    nn_model_free(NULL);

    /* the peer's LeNet-5 and MLP parameter counts (PyTorch's numel sums) */
    const struct {
        spec s;
        size_t params;
    } known[] = {{{"lenet5", 28, 28, 1, 10, 1}, 61706},
                 {{"mlp", 28, 28, 1, 10, 1}, 269322},
                 /* the peer's counts (torch_models.py --count-only) */
                 {{"resnet-20", 32, 32, 3, 10, 1}, 272474},
                 {{"resnet-20", 28, 28, 1, 10, 1}, 272186},
                 {{"resnet-56", 32, 32, 3, 10, 1}, 855770},
                 {{"resnet-56", 28, 28, 1, 7, 1}, 855287},
                 {{"inception-mini", 28, 28, 1, 10, 1}, 0},
                 {{"inception-mini", 32, 32, 3, 10, 1}, 0},
                 {{"lenet5", 32, 32, 3, 10, 1}, 0}};
    for (size_t i = 0; i < PST_ARRAY_LEN(known); i++) {
        m = make(&known[i].s, 1, 0, 0, 2);
        if (!m) continue;
        size_t tr = nn_model_trainable_size(m), sum = 0;
        if (known[i].params) CHECK(tr == known[i].params, "%s: %zu params", known[i].s.name, tr);
        for (int v = 0; v < nn_model_nvars(m); v++) {
            const nn_var *var = nn_model_var(m, v);
            size_t prod = 1;
            for (int d = 0; d < var->ndim; d++) prod *= (size_t)var->shape[d];
            CHECK(prod == var->size, "%s: shape and size disagree", var->name);
            CHECK(var->offset == sum, "%s: offset %zu, expected %zu (contiguous)", var->name,
                  var->offset, sum);
            sum += var->size;
        }
        CHECK(sum == nn_model_size(m), "variables cover %zu of %zu slab floats", sum,
              nn_model_size(m));
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        nn_model_describe(m, f);
        fclose(f);
        char want[64];
        snprintf(want, sizeof want, "trainable parameters: %zu,", tr);
        CHECK(strstr(text, want), "describe lacks '%s':\n%s", want, text);
        if (!strcmp(known[i].s.name, "inception-mini") && known[i].s.c == 1) {
            fputs(text, stderr);
            CHECK(tr >= 50000 && tr <= 300000, "inception-mini has %zu parameters", tr);
        }
        free(text);
        nn_model_free(m);
    }
}

/* Variable names: unique, and for the ResNets torchvision's (resp. the
 * peer's) module paths with '/' for '.' (docs/design.md §10). */
static void test_names(void)
{
    for (const char *const *name = nn_model_names(); *name; name++) {
        nn_model_cfg cfg = {*name, 75, 75, 3, 10, 1, 1, 0, 0, 1, {0}};
        nn_model *m = NULL;
        pst_err e = {{0}};
        /* narrow: the names do not depend on the widths */
        CHECK(nn_model_new_narrow(&m, &cfg, 8, &e) == 0, "%s at 75x75x3: %s", *name, e.msg);
        if (!m) continue;
        for (int i = 0; i < nn_model_nvars(m); i++)
            for (int j = 0; j < i; j++)
                CHECK(strcmp(nn_model_var(m, i)->name, nn_model_var(m, j)->name),
                      "%s: variable %s twice", *name, nn_model_var(m, i)->name);
        nn_model_free(m);
    }
    const struct {
        const char *model;
        const char *names[8];
    } want[] = {
        {"resnet-20",
         {"0/0/kernel", "0/1/gamma", "1/c1/kernel", "1/b2/moving_variance", "4/proj/0/kernel",
          "4/proj/1/beta", "12/kernel", "12/bias"}},
        {"resnet-56",
         {"0/0/kernel", "27/b1/moving_mean", "10/proj/0/kernel", "19/proj/1/gamma", "30/kernel",
          "30/bias", NULL}},
        /* torchvision's resnet50 and inception_v3 state_dict keys */
        {"resnet-50",
         {"conv1/kernel", "bn1/gamma", "layer1/0/conv1/kernel", "layer1/0/bn1/moving_mean",
          "layer1/0/downsample/0/kernel", "layer4/2/bn3/moving_variance", "fc/kernel", "fc/bias"}},
        {"inception-v3",
         {"Conv2d_1a_3x3/conv/kernel", "Conv2d_1a_3x3/bn/gamma", "Mixed_5b/branch1x1/conv/kernel",
          "Mixed_5d/branch_pool/bn/beta", "Mixed_6e/branch7x7dbl_5/bn/moving_variance",
          "Mixed_7a/branch7x7x3_4/conv/kernel", "Mixed_7c/branch3x3dbl_3b/conv/kernel",
          "fc/kernel"}},
    };
    for (size_t i = 0; i < PST_ARRAY_LEN(want); i++) {
        spec s = {want[i].model, 75, 75, 3, 10, 1};
        nn_model *m = make_div(&s, 1, 0, 0, 1, 8);
        if (!m) continue;
        for (int k = 0; k < 8 && want[i].names[k]; k++) {
            bool found = false;
            for (int v = 0; v < nn_model_nvars(m) && !found; v++)
                found = !strcmp(nn_model_var(m, v)->name, want[i].names[k]);
            CHECK(found, "%s has no variable %s", want[i].model, want[i].names[k]);
        }
        /* projection shortcuts: the first blocks of CIFAR stages 2 and 3, of
         * each of ResNet-50's four stages */
        int nproj = 0;
        for (int v = 0; v < nn_model_nvars(m); v++)
            nproj += strstr(nn_model_var(m, v)->name, "/proj/0/kernel") != NULL ||
                     strstr(nn_model_var(m, v)->name, "/downsample/0/kernel") != NULL;
        int want_proj = !strcmp(want[i].model, "resnet-50") ? 4
                        : strstr(want[i].model, "resnet")   ? 2
                                                            : 0;
        CHECK(nproj == want_proj, "%s: %d projection shortcuts, expected %d", want[i].model, nproj,
              want_proj);
        nn_model_free(m);
    }
}

/* A layer or variable name too long for its array fails the build with a
 * message instead of being cut short (two variables could then share a
 * name, and a checkpoint would not map to torchvision's keys). */
static void test_long_names(void)
{
    for (int var = 0; var < 2; var++) {
        nn_model *m = pst_calloc(1, sizeof *m);
        pst_err e = {{0}};
        m->cfg = (nn_model_cfg){"mlp", 4, 4, 2, 3, 1, 1, 0, 0, 1, {0}};
        snprintf(m->name, sizeof m->name, "mlp");
        m->width_div = 1;
        m->err = &e;
        /* a layer name one too long; a layer name that fits, whose batch
         * norm variable "<name>/moving_variance" does not */
        char name[NN_LAYER_NAME_LEN + 1];
        memset(name, 'a', sizeof name);
        name[var ? NN_LAYER_NAME_LEN - 1 : NN_LAYER_NAME_LEN] = 0;
        int x = nn_add_bn(m, name, NN_INPUT, false);
        CHECK(m->failed && strstr(e.msg, var ? "variable name" : "layer name") &&
                  strstr(e.msg, "longer than"),
              "a %zu-character layer name: %s (layer %d)", strlen(name), e.msg, x);
        nn_model_free(m);
    }
}

static void test_determinism_and_state(void)
{
    spec s = {"inception-mini", 12, 12, 3, 5, 6};
    nn_model *a = make(&s, 42, 1e-4f, 0, 8), *b = make(&s, 42, 1e-4f, 0, 8);
    nn_model *c = make(&s, 43, 1e-4f, 0, 8);
    if (!a || !b || !c) return;
    size_t size = nn_model_size(a), per = (size_t)s.h * s.w * s.c;
    CHECK(memcmp(nn_model_params(a), nn_model_params(b), sizeof(float) * size) == 0,
          "same seed, different initial parameters");
    CHECK(memcmp(nn_model_params(a), nn_model_params(c), sizeof(float) * size) != 0,
          "different seeds, same initial parameters");
    float *x = pst_malloc(sizeof(float) * s.n * per);
    int32_t *y = pst_malloc(sizeof(int32_t) * s.n);
    fill_batch(x, y, s.n, per, s.k, 9);
    int ca = -1, cb = -2;
    float la = nn_model_train_step(a, x, y, s.n, 3, &ca);
    float lb = nn_model_train_step(b, x, y, s.n, 3, &cb);
    CHECK(la == lb && ca == cb, "same seed: loss %g vs %g, correct %d vs %d", la, lb, ca, cb);
    CHECK(memcmp(nn_model_grads(a), nn_model_grads(b), sizeof(float) * size) == 0,
          "same seed, different gradients");
    /* dropout draws from (seed, step): another step, other gradients */
    nn_model_train_step(b, x, y, s.n, 4, NULL);
    CHECK(memcmp(nn_model_grads(a), nn_model_grads(b), sizeof(float) * size) != 0,
          "dropout ignored the step");

    /* non-trainable slots of the gradient slab hold the new moving statistics */
    float *p = nn_model_params(a), *g = nn_model_grads(a);
    float *before = pst_malloc(sizeof(float) * size);
    memcpy(before, p, sizeof(float) * size);
    int nbn = 0;
    for (int i = 0; i < nn_model_nvars(a); i++) {
        const nn_var *v = nn_model_var(a, i);
        if (v->trainable) continue;
        bool is_var = strstr(v->name, "moving_variance") != NULL;
        CHECK(is_var || strstr(v->name, "moving_mean"), "non-trainable %s", v->name);
        for (size_t j = 0; j < v->size; j++) {
            float nv = g[v->offset + j];
            /* mean: 0.99*0 + 0.01*batch mean; variance: 0.99*1 + 0.01*batch var */
            if (is_var)
                CHECK(nv >= 0.99f && nv != 1.0f, "%s[%zu] = %g", v->name, j, nv);
            else
                CHECK(isfinite(nv) && fabsf(nv) < 1.0f, "%s[%zu] = %g", v->name, j, nv);
        }
        nbn++;
    }
    CHECK(nbn >= 2 * 10, "only %d moving statistics", nbn);
    /* apply_state over a range copies exactly the non-trainable part of it */
    size_t begin = size / 3, end = 2 * size / 3;
    nn_model_apply_state(a, p, g, begin, end);
    for (int i = 0; i < nn_model_nvars(a); i++) {
        const nn_var *v = nn_model_var(a, i);
        for (size_t j = 0; j < v->size; j++) {
            size_t o = v->offset + j;
            float want = (!v->trainable && o >= begin && o < end) ? g[o] : before[o];
            if (p[o] != want) {
                CHECK(p[o] == want, "%s[%zu] after apply_state: %g, expected %g", v->name, j, p[o],
                      want);
                break;
            }
        }
    }
    /* eval: predictions agree with the count */
    int32_t pred[6];
    int correct = -1;
    float el = nn_model_eval(a, x, y, s.n, &correct, pred);
    int count = 0;
    for (int i = 0; i < s.n; i++) count += pred[i] == y[i];
    CHECK(isfinite(el) && correct == count, "eval loss %g, correct %d vs %d", el, correct, count);
    free(x), free(y), free(before);
    nn_model_free(a), nn_model_free(b), nn_model_free(c);
}

/* Model b (`mine`) against model a (`theirs`, the reference graph) from
 * the same parameters: the same loss, logits and gradient slab, bitwise,
 * over two training steps (batches from seed, seed + 1; a step of SGD on
 * both in between, so that the second step starts elsewhere), and the same
 * evaluation. */
static void expect_same_training(nn_model *a, nn_model *b, const spec *s, uint64_t seed,
                                 const char *mine, const char *theirs)
{
    size_t size = nn_model_size(a), per = (size_t)s->h * s->w * s->c;
    float *x = pst_malloc(sizeof(float) * s->n * per);
    int32_t *y = pst_malloc(sizeof(int32_t) * s->n);
    for (int step = 0; step < 2; step++) {
        fill_batch(x, y, s->n, per, s->k, seed + (uint64_t)step);
        float la = nn_model_train_step(a, x, y, s->n, step, NULL);
        float lb = nn_model_train_step(b, x, y, s->n, step, NULL);
        CHECK(la == lb, "%s step %d: %s loss %.9g, %s %.9g", s->name, step, mine, lb, theirs, la);
        CHECK(memcmp(nn_model_logits(a), nn_model_logits(b), sizeof(float) * s->n * s->k) == 0,
              "%s step %d: %s logits differ", s->name, step, mine);
        CHECK(memcmp(nn_model_grads(a), nn_model_grads(b), sizeof(float) * size) == 0,
              "%s step %d: %s gradients differ", s->name, step, mine);
        float *pa = nn_model_params(a), *pb = nn_model_params(b);
        const float *ga = nn_model_grads(a);
        for (size_t i = 0; i < size; i++) pa[i] = pb[i] = pa[i] - 0.1f * ga[i];
    }
    int ca = -1, cb = -2;
    float ea = nn_model_eval(a, x, y, s->n, &ca, NULL),
          eb = nn_model_eval(b, x, y, s->n, &cb, NULL);
    CHECK(ea == eb && ca == cb, "%s eval: %s loss %.9g (%d correct), %s %.9g (%d)", s->name, mine,
          eb, cb, theirs, ea, ca);
    CHECK(memcmp(nn_model_logits(a), nn_model_logits(b), sizeof(float) * s->n * s->k) == 0,
          "%s eval: %s logits differ", s->name, mine);
    free(x), free(y);
}

/* Graph fusion (model.c: a batch norm computes the residual add after it)
 * against the unfused graph: the same loss, logits, gradient slab (with the
 * new moving statistics) over two training steps, and the same evaluation;
 * the fused model on the poison layout, so that an add buffer used outside
 * its planned lifetime turns into NaN. */
static void test_fusion(const spec *s, int div, int expect_fused)
{
    set_fuse(0);
    nn_model *a = make_div(s, 5, 1e-3f, 0.1f, s->n, div);
    set_fuse(1);
    nn_model *b = make_div(s, 5, 1e-3f, 0.1f, s->n, div);
    if (!a || !b) return;
    nn_model_set_layout(b, NN_LAYOUT_POISON);
    int fa = 0, fb = 0;
    for (int i = 0; i < a->nlayers; i++) fa += a->layers[i].fuse != 0;
    for (int i = 0; i < b->nlayers; i++) fb += b->layers[i].fuse != 0;
    CHECK(fa == 0 && fb == 2 * expect_fused, "%s: %d / %d layers fused, expected 0 / %d", s->name,
          fa, fb, 2 * expect_fused);
    expect_same_training(a, b, s, 20, "fused", "unfused");
    nn_model_free(a), nn_model_free(b);
}

/* Split gradients (graph.h: a tensor with two consumers whose gradient a
 * batch norm reads takes the second consumer's part in a buffer of its
 * own) against fusion alone: the expected layers split, the same loss and
 * logits, gradients equal up to rounding (the sum dy + dy2 is taken in the
 * batch norm, where a kernel that accumulated into dy added in another
 * order), over two steps from the same parameters, the split model on the
 * poison layout (a second part read outside its planned lifetime or left
 * unwritten turns into NaN), and the same evaluation. */
static void test_split(const spec *s, int div, int expect_split)
{
    set_fuse(1);
    nn_model *a = make_div(s, 5, 1e-3f, 0.1f, s->n, div);
    set_fuse(2);
    nn_model *b = make_div(s, 5, 1e-3f, 0.1f, s->n, div);
    if (!a || !b) return;
    nn_model_set_layout(b, NN_LAYOUT_POISON);
    int sa = 0, sb = 0;
    for (int i = 0; i < a->nlayers; i++) sa += a->layers[i].split;
    for (int i = 0; i < b->nlayers; i++) sb += b->layers[i].split;
    CHECK(sa == 0 && sb == expect_split, "%s: %d / %d layers split, expected 0 / %d", s->name, sa,
          sb, expect_split);
    size_t size = nn_model_size(a), per = (size_t)s->h * s->w * s->c;
    float *x = pst_malloc(sizeof(float) * s->n * per);
    int32_t *y = pst_malloc(sizeof(int32_t) * s->n);
    for (int step = 0; step < 2; step++) {
        fill_batch(x, y, s->n, per, s->k, 40 + (uint64_t)step);
        float la = nn_model_train_step(a, x, y, s->n, step, NULL);
        float lb = nn_model_train_step(b, x, y, s->n, step, NULL);
        CHECK(la == lb, "%s step %d: split loss %.9g, fused %.9g", s->name, step, lb, la);
        CHECK(memcmp(nn_model_logits(a), nn_model_logits(b), sizeof(float) * s->n * s->k) == 0,
              "%s step %d: split logits differ", s->name, step);
        const float *ga = nn_model_grads(a), *gb = nn_model_grads(b);
        for (int v = 0; v < nn_model_nvars(a); v++) {
            const nn_var *var = nn_model_var(a, v);
            double big = 0, diff = 0;
            for (size_t q = var->offset; q < var->offset + var->size; q++) {
                big = fmax(big, fabs(ga[q]));
                diff = isnan(gb[q]) ? INFINITY : fmax(diff, fabs((double)ga[q] - gb[q]));
            }
            /* Rounding, relative to the largest entry: a beta gradient
             * sums dy over N*H*W rows whose per-row rounding differences
             * do not cancel as the sum itself does (resnet-50's bn1/beta,
             * 1,600 rows in float blocks: 1.1e-5 in the ASan build, 3.5e-6
             * in the release build). A lost or doubled part is off by the
             * size of the gradient itself, a stale one turns NaN. */
            CHECK(diff <= 1e-4 * big + 1e-12, "%s step %d: %s gradient differs by %g (largest %g)",
                  s->name, step, var->name, diff, big);
        }
        /* a step of SGD from a's gradient on both: the same parameters */
        float *pa = nn_model_params(a), *pb = nn_model_params(b);
        for (size_t i = 0; i < size; i++) pa[i] = pb[i] = pa[i] - 0.1f * ga[i];
        nn_model_apply_state(a, pb, ga, 0, size); /* the same moving statistics */
        nn_model_apply_state(a, pa, ga, 0, size);
    }
    int ca = -1, cb = -2;
    float ea = nn_model_eval(a, x, y, s->n, &ca, NULL),
          eb = nn_model_eval(b, x, y, s->n, &cb, NULL);
    CHECK(ea == eb && ca == cb, "%s eval: split loss %.9g (%d correct), fused %.9g (%d)", s->name,
          eb, cb, ea, ca);
    free(x), free(y);
    nn_model_free(a), nn_model_free(b);
    set_fuse(2);
}

/* Concat without copies (model.c, graph.h: a batch norm whose only
 * consumer is a concat writes its output into the concat's and reads its
 * gradient from the concat's) against the copying concat: the expected
 * producers aliased, the same loss, logits and gradient slab (pure data
 * movement: bitwise) over two training steps, and the same evaluation; the
 * aliased model on the poison layout, so that a concat buffer born too
 * late or dead too early (a producer writing it before the concat's
 * lifetime, or reading its gradient after) turns into NaN. */
static void test_alias(const spec *s, int div, int expect_aliased)
{
    sw.no_alias = true;
    nn_model *a = make_div(s, 5, 1e-3f, 0.1f, s->n, div);
    sw.no_alias = false;
    nn_model *b = make_div(s, 5, 1e-3f, 0.1f, s->n, div);
    if (!a || !b) return;
    nn_model_set_layout(b, NN_LAYOUT_POISON);
    int na = 0, nb = 0;
    for (int i = 0; i < a->nlayers; i++) na += a->layers[i].alias != 0;
    for (int i = 0; i < b->nlayers; i++) {
        const nn_layer *l = &b->layers[i];
        nb += l->alias != 0;
        CHECK(l->alias == 0 || (b->layers[l->alias - 1].ops == &nn_concat_ops &&
                                l->ld == b->layers[l->alias - 1].c && l->ld > l->c),
              "%s: layer %s aliased into %d with row %d", s->name, l->name, l->alias, l->ld);
    }
    CHECK(na == 0 && nb == expect_aliased, "%s: %d / %d layers aliased, expected 0 / %d", s->name,
          na, nb, expect_aliased);
    expect_same_training(a, b, s, 60, "aliased", "copied");
    nn_model_free(a), nn_model_free(b);
}

/* Concat graphs no built-in model has. Towers: a (conv, batch norm +
 * ReLU) whose output also feeds a second consumer (a global average pool:
 * copied, not aliased), b (conv, batch norm without ReLU: aliased), a max
 * pool (not a strided kind: copied), and c (aliased) taken once; a second
 * concat joins the first one's pooled output with the side pool's (both
 * copied). The same batch norm twice in one concat is copied too. */
static int concat_graph(nn_model *m)
{
    int a = nn_add_conv_bn(m, "a", NN_INPUT, 3, 3, 3, 1, 1);
    int b = nn_add_conv_bn_named(m, "b", "b/bn", NN_INPUT, 2, 1, 1, 1, 0, 0, 1e-3f, false);
    int p = nn_add_pool(m, "p", NN_INPUT, true, 3, 3, 1, 1);
    int c = nn_add_conv_bn(m, "c", a, 5, 1, 1, 1, 0);
    int d = nn_add_conv_bn(m, "d", NN_INPUT, 2, 1, 1, 1, 0);
    int cat = nn_add_concat(m, "cat", (int[]){a, b, p, c, d, d}, 6);
    int g1 = nn_add_pool(m, "g1", cat, false, 0, 0, 0, 0);
    int g2 = nn_add_pool(m, "g2", a, false, 0, 0, 0, 0);
    int cat2 = nn_add_concat(m, "cat2", (int[]){g1, g2}, 2);
    return nn_add_dense(m, "logits", cat2, m->cfg.num_classes, false);
}

static void test_concat_graph(void)
{
    graph_build = concat_graph;
    const spec s = {"concat-graph", 6, 5, 2, 3, 4};
    nn_model *m = make(&s, 5, 0, 0, s.n);
    if (m) {
        const char *want = "b/bn c/bn"; /* the aliased layers */
        char got[64] = "";
        for (int i = 0; i < m->nlayers; i++)
            if (m->layers[i].alias)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%s", got[0] ? " " : "",
                         m->layers[i].name);
        CHECK(strcmp(got, want) == 0, "concat graph: aliased '%s', expected '%s'", got, want);
        nn_model_free(m);
    }
    test_model_gradients(&s);
    test_alias(&s, 1, 2);
    graph_build = NULL;
}

/* Plain SGD on one fixed batch must drive the loss down. */
static void test_fits_batch(const spec *s, float lr, int steps)
{
    nn_model *m = make(s, 5, 0, 0, s->n);
    if (!m) return;
    size_t per = (size_t)s->h * s->w * s->c, size = nn_model_size(m);
    float *x = pst_malloc(sizeof(float) * s->n * per);
    int32_t *y = pst_malloc(sizeof(int32_t) * s->n);
    fill_batch(x, y, s->n, per, s->k, 21);
    float first = 0, last = 0;
    float *p = nn_model_params(m), *g = nn_model_grads(m);
    for (int t = 0; t < steps; t++) {
        last = nn_model_train_step(m, x, y, s->n, t, NULL);
        if (t == 0) first = last;
        for (int i = 0; i < nn_model_nvars(m); i++) {
            const nn_var *v = nn_model_var(m, i);
            if (!v->trainable) continue;
            for (size_t j = v->offset; j < v->offset + v->size; j++) p[j] -= lr * g[j];
        }
        nn_model_apply_state(m, p, g, 0, size);
    }
    fprintf(stderr, "%s: loss %.4f -> %.4f in %d SGD steps\n", s->name, first, last, steps);
    CHECK(last < 0.5f * first, "%s: loss %g -> %g", s->name, first, last);
    free(x), free(y);
    nn_model_free(m);
}

/* The table of layer kinds: each row complete, kinds distinct, and each kind
 * in some built-in model, whose gradients test_model_gradients checks. */
static void test_layer_kinds(void)
{
    int nk = 0;
    for (const nn_layer_ops *const *k = nn_layer_kinds; *k; k++, nk++) {
        const nn_layer_ops *o = *k;
        CHECK(o->kind && o->forward && o->backward && o->describe, "kind %d incomplete", nk);
        CHECK(!o->arena_floats == !o->arena_bind, "%s: arena_floats without arena_bind", o->kind);
        for (const nn_layer_ops *const *j = nn_layer_kinds; j < k; j++)
            CHECK(strcmp((*j)->kind, o->kind), "kind %s registered twice", o->kind);
        bool used = false;
        for (const char *const *name = nn_model_names(); *name && !used; name++) {
            /* the smallest image every model fits (Inception-v3: 75x75) */
            nn_model_cfg cfg = {*name, 75, 75, 3, 10, 1, 1, 0, 0, 1, {0}};
            nn_model *m = NULL;
            pst_err e = {{0}};
            /* narrow: the names do not depend on the widths */
            CHECK(nn_model_new_narrow(&m, &cfg, 8, &e) == 0, "%s at 75x75x3: %s", *name, e.msg);
            if (!m) continue;
            char *text = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&text, &len);
            nn_model_describe(m, f);
            fclose(f);
            char col[32];
            snprintf(col, sizeof col, " %-10s ", o->kind);
            used = strstr(text, col) != NULL;
            free(text);
            nn_model_free(m);
        }
        CHECK(used, "layer kind %s is in no built-in model: its gradients are not checked",
              o->kind);
    }
    CHECK(nk >= 7, "%d layer kinds registered", nk);
}

int main(void)
{
    nn_blis_init();
    const spec grads[] = {{"mlp", 5, 4, 2, 3, 4},
                          {"lenet5", 12, 14, 2, 4, 3},
                          {"inception-mini", 9, 9, 2, 3, 4},
                          {"resnet-20", 6, 7, 2, 3, 3}};
    for (size_t i = 0; i < PST_ARRAY_LEN(grads); i++) test_model_gradients(&grads[i]);
    test_model_directional(&(spec){"resnet-50", 64, 64, 2, 3, 4}, 16);
    test_model_directional(&(spec){"inception-v3", 107, 107, 2, 3, 4}, 16);
    test_names();
    test_long_names();
    test_shapes_and_describe();
    test_layer_kinds();
    test_determinism_and_state();
    test_fusion(&(spec){"resnet-20", 9, 10, 2, 4, 5}, 1, 9);
    test_fusion(&(spec){"resnet-50", 40, 40, 3, 4, 3}, 16, 16);
    test_fusion(&(spec){"inception-mini", 9, 9, 2, 3, 4}, 1, 0);
    test_split(&(spec){"resnet-20", 9, 10, 2, 4, 5}, 1, 9);
    /* narrow resnet-50: the block outputs of 16, 32 and 64 channels, not
     * layer4's 128 */
    test_split(&(spec){"resnet-50", 40, 40, 3, 4, 3}, 16, 13);
    test_split(&(spec){"inception-mini", 9, 9, 2, 3, 4}, 1, 0);
    /* inception-mini: every tower's last batch norm of mixed_a and mixed_b
     * and reduce/b3x3/bn (reduce/pool is a max pool: copied); narrow
     * inception-v3: the batch norms ending its towers */
    test_alias(&(spec){"inception-mini", 9, 9, 2, 3, 4}, 1, 9);
    test_concat_graph();
    test_alias(&(spec){"inception-v3", 107, 107, 2, 3, 4}, 16, 44);
    const spec fit[] = {{"mlp", 8, 8, 1, 4, 16},
                        {"lenet5", 16, 16, 1, 4, 16},
                        {"inception-mini", 12, 12, 1, 4, 16}};
    for (size_t i = 0; i < PST_ARRAY_LEN(fit); i++) test_fits_batch(&fit[i], 0.05f, 200);
    return check_exit();
}
