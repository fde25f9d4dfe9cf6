/* test_init.c - every built-in model's initial variables follow the
 * distributions its reference draws (docs/torchvision.md, "Initial
 * weights"):
 *   resnet-20, resnet-56  PyTorch's defaults (the peer's resnet_cifar):
 *                         conv and dense weights and the dense bias
 *                         U(+-1/sqrt(fan_in))
 *   resnet-50             torchvision resnet50: conv N(0, 2/fan_out), fc
 *                         weight and bias U(+-1/sqrt(fan_in))
 *   inception-v3          torchvision inception_v3: conv and fc weights
 *                         N(0, 0.1^2) truncated to [-2, 2], fc bias
 *                         U(+-1/sqrt(fan_in))
 *   mlp, lenet5, inception-mini  pstrain's own: He truncated normal
 *                         (|z| <= 2, variance 2/fan_in) for convolutions
 *                         and ReLU dense layers, Glorot uniform for the
 *                         logits, biases 0
 * and batch norm gamma 1, beta 0, moving mean 0, moving variance 1 in all.
 * The expected distribution of a variable is derived here from the model's
 * name and the variable's name and shape alone (fan_in, fan_out from the
 * kernel's shape), not from the builders' bookkeeping.
 *
 * Each random variable of n elements is checked against its distribution
 * (variance s2, kurtosis at most kap): the sample mean within Z standard
 * errors sqrt(s2/n); the sample variance within Z standard errors
 * s2*sqrt((kap - 1)/n); for a normal of base standard deviation sd, the
 * fraction of elements beyond sd within Z binomial standard errors of its
 * probability; every element inside the support; for a uniform, the largest
 * |x| within 20/n of the bound when n >= 40 (probability (1 - 20/n)^n <
 * e^-20 to miss it). Z = 5: a two-sided normal tail of 5.7e-7 per check,
 * about 1e-3 for the few thousand checks of the whole test, so a correct
 * initialiser passes for essentially every seed, while pstrain's former He
 * and Glorot init (variance 6 times U(+-1/sqrt(fan_in))'s, fan_in for
 * fan_out) fails. The draw does not depend on the thread count: the same
 * bits with threads 1 and 3 (the draw is one code path for every model). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pstrain/common.h"
#include "pstrain/model.h"

#define Z 5.0

typedef enum { D_CONST, D_UNIFORM, D_NORMAL } dist_kind;

typedef struct dist {
    dist_kind kind;
    double value; /* D_CONST */
    double bound; /* D_UNIFORM: U(-bound, bound) */
    double sd, k; /* D_NORMAL: N(0, sd^2) truncated to |x| <= k*sd (k = INFINITY: none) */
} dist;

static double Phi(double x)
{
    return 0.5 * erfc(-x / sqrt(2.0));
}

static double phi(double x)
{
    return exp(-0.5 * x * x) / sqrt(2.0 * M_PI);
}

static dist uniform(double b)
{
    return (dist){D_UNIFORM, 0, b, 0, 0};
}

static dist normal(double sd, double k)
{
    return (dist){D_NORMAL, 0, 0, sd, k};
}

static dist constant(double v)
{
    return (dist){D_CONST, v, 0, 0, 0};
}

/* What a model's variable should be drawn from. fan_in, fan_out: of the
 * variable's own kernel (a bias: of the kernel before it). */
static dist expected(const char *model, const char *name, bool conv, int fan_in, int fan_out,
                     bool is_bias)
{
    const char *leaf = strrchr(name, '/') + 1;
    if (strcmp(leaf, "gamma") == 0 || strcmp(leaf, "moving_variance") == 0) return constant(1);
    if (strcmp(leaf, "beta") == 0 || strcmp(leaf, "moving_mean") == 0) return constant(0);
    double torch = 1.0 / sqrt(fan_in);
    if (strcmp(model, "resnet-20") == 0 || strcmp(model, "resnet-56") == 0) return uniform(torch);
    if (strcmp(model, "resnet-50") == 0)
        return conv ? normal(sqrt(2.0 / fan_out), INFINITY) : uniform(torch);
    if (strcmp(model, "inception-v3") == 0) return is_bias ? uniform(torch) : normal(0.1, 20.0);
    /* pstrain's own: mlp, lenet5, inception-mini */
    if (is_bias) return constant(0);
    bool logits = strcmp(name, "logits/kernel") == 0;
    if (!conv && logits) return uniform(sqrt(6.0 / (fan_in + fan_out)));
    return normal(sqrt(2.0 / fan_in) / 0.87962566103423978, 2.0);
}

static int nchecked, nfailed_vars;

/* Checks p[0..n) against d; returns whether it fits. */
static bool check_var(const char *model, const char *name, const float *p, size_t n, dist d)
{
    int before = check_failures_;
    if (d.kind == D_CONST) {
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += p[i] != (float)d.value;
        CHECK(bad == 0, "%s %s: %zu of %zu elements differ from %g", model, name, bad, n, d.value);
        return check_failures_ == before;
    }
    double s2, kap, sup;
    if (d.kind == D_UNIFORM) {
        s2 = d.bound * d.bound / 3.0, kap = 1.8, sup = d.bound;
    } else if (isinf(d.k)) {
        s2 = d.sd * d.sd, kap = 3.0, sup = INFINITY;
    } else {
        /* variance of a standard normal truncated to |z| <= k; its kurtosis
         * is below the normal's 3, which bounds it */
        double mass = 2.0 * Phi(d.k) - 1.0;
        s2 = d.sd * d.sd * (1.0 - 2.0 * d.k * phi(d.k) / mass), kap = 3.0, sup = d.k * d.sd;
    }
    double sum = 0, sq = 0, amax = 0;
    size_t beyond = 0;
    for (size_t i = 0; i < n; i++) {
        double x = p[i];
        sum += x, sq += x * x, amax = fmax(amax, fabs(x));
        if (d.kind == D_NORMAL) beyond += fabs(x) > d.sd;
    }
    double mean = sum / (double)n, var = sq / (double)n - mean * mean;
    double se_mean = sqrt(s2 / (double)n), se_var = s2 * sqrt((kap - 1.0) / (double)n);
    CHECK(fabs(mean) <= Z * se_mean, "%s %s (n %zu): mean %.4g, expected 0 +- %.3g", model, name, n,
          mean, Z * se_mean);
    CHECK(fabs(var - s2) <= Z * se_var, "%s %s (n %zu): variance %.4g, expected %.4g +- %.3g",
          model, name, n, var, s2, Z * se_var);
    /* float rounding of bound * u: within a few ulps of the bound */
    CHECK(amax <= sup * (1.0 + 1e-6), "%s %s: |x| up to %.6g, expected at most %.6g", model, name,
          amax, sup);
    if (d.kind == D_UNIFORM && n >= 40)
        CHECK(amax >= d.bound * (1.0 - 20.0 / (double)n),
              "%s %s (n %zu): |x| only up to %.6g, expected close to the bound %.6g", model, name,
              n, amax, d.bound);
    if (d.kind == D_NORMAL) {
        double mass = isinf(d.k) ? 1.0 : 2.0 * Phi(d.k) - 1.0;
        double pb = 2.0 * ((isinf(d.k) ? 1.0 : Phi(d.k)) - Phi(1.0)) / mass;
        double f = (double)beyond / (double)n, se = sqrt(pb * (1.0 - pb) / (double)n);
        CHECK(fabs(f - pb) <= Z * se,
              "%s %s (n %zu): %.4f of the elements beyond one standard deviation %.4g, expected "
              "%.4f +- %.3g",
              model, name, n, f, d.sd, pb, Z * se);
    }
    nchecked++;
    return check_failures_ == before;
}

typedef struct spec {
    const char *name;
    int h, w, c, k;
} spec;

static nn_model *make(const spec *s, uint64_t seed, int threads)
{
    nn_model_cfg cfg = {s->name, s->h, s->w, s->c, s->k, 1, seed, 0, 0, threads, {0}};
    nn_model *m = NULL;
    pst_err e = {{0}};
    int rc = nn_model_new(&m, &cfg, &e);
    CHECK(rc == 0 && m, "%s %dx%dx%d: %s", s->name, s->h, s->w, s->c, e.msg);
    return m;
}

static void test_model(const spec *s, uint64_t seed)
{
    nn_model *m = make(s, seed, 1);
    if (!m) return;
    const float *params = nn_model_params(m);
    int fan_in = 0, fan_out = 0, nrand = 0;
    bool conv = false;
    for (int i = 0; i < nn_model_nvars(m); i++) {
        const nn_var *v = nn_model_var(m, i);
        const char *leaf = strrchr(v->name, '/') + 1;
        bool is_bias = strcmp(leaf, "bias") == 0;
        if (strcmp(leaf, "kernel") == 0) {
            CHECK(v->ndim == 4 || v->ndim == 2, "%s %s: %d dimensions", s->name, v->name, v->ndim);
            conv = v->ndim == 4;
            /* conv [KH][KW][C][K], dense [I][O] */
            fan_in = conv ? v->shape[0] * v->shape[1] * v->shape[2] : v->shape[0];
            fan_out = conv ? v->shape[0] * v->shape[1] * v->shape[3] : v->shape[1];
        }
        dist d = expected(s->name, v->name, conv, fan_in, fan_out, is_bias);
        nrand += d.kind != D_CONST;
        if (!check_var(s->name, v->name, params + v->offset, v->size, d)) nfailed_vars++;
    }
    printf("%s: %d variables, %d of them random, seed %llu\n", s->name, nn_model_nvars(m), nrand,
           (unsigned long long)seed);
    nn_model_free(m);
}

/* The initial variables are drawn in one stream in variable order, by the
 * calling thread: the same bits whatever the thread count. */
static void test_threads(const spec *s)
{
    nn_model *a = make(s, 5, 1), *b = make(s, 5, 3);
    if (!a || !b) return;
    CHECK(nn_model_size(a) == nn_model_size(b) &&
              memcmp(nn_model_params(a), nn_model_params(b), sizeof(float) * nn_model_size(a)) == 0,
          "%s: initial variables differ between threads 1 and 3", s->name);
    nn_model_free(a);
    nn_model_free(b);
}

int main(void)
{
    static const spec specs[] = {
        {"mlp", 28, 28, 1, 10},
        {"lenet5", 28, 28, 1, 10},
        {"inception-mini", 28, 28, 1, 10},
        {"resnet-20", 32, 32, 3, 10},
        {"resnet-56", 32, 32, 3, 10},
        /* the published fc sizes: 2048 x 1000 */
        {"resnet-50", 32, 32, 3, 1000},
        {"inception-v3", 75, 75, 3, 1000},
    };
    for (size_t i = 0; i < PST_ARRAY_LEN(specs); i++) test_model(&specs[i], 1234);
    /* another seed: the tolerances hold for draws, not for one stream */
    test_model(&specs[3], 1);
    test_model(&specs[4], 1);
    test_threads(&specs[2]);
    test_threads(&specs[3]);
    printf("%d random variables checked, %d off their distribution\n", nchecked, nfailed_vars);
    return check_exit();
}
