/* test_layers.c - every layer kernel of src/nn against central finite
 * differences (input and parameter gradients, several shapes including
 * stride/padding edge cases), plus forward values against naive references.
 *
 * The scalar checked is L = sum(out * R) for a fixed random R, so the
 * analytic gradients come from backward with dout = R. Forward passes are in
 * float; L is summed in double; eps = 1e-2 keeps float rounding well below
 * the tolerance. Kinks (ReLU at 0, max-pool ties) are kept away from the
 * perturbation: max-pool inputs are distinct values 0.05 apart, and for
 * fused ReLUs a tiny fraction of mismatches is tolerated and reported. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "layers.h"
#include "pstrain/pool.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"
#include "pstrain/model.h"

static nn_rng rng;

static float *rand_vec(size_t n, float scale)
{
    float *v = pst_malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = (2.0f * nn_rng_uniform(&rng) - 1.0f) * scale;
    return v;
}

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* A forward pass that returns L for the current contents of its inputs. */
typedef double (*loss_fn)(void *ctx);

/* Compares analytic[i] with the central difference of f in x[i], on up to
 * max_checks indices. Returns the number of mismatches. */
static int grad_check(const char *what, float *x, size_t n, const float *analytic, loss_fn f,
                      void *ctx, double max_outlier_frac)
{
    const double eps = 1e-2, atol = 2e-3, rtol = 2e-2;
    size_t step = n > 300 ? n / 300 : 1, checked = 0;
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; i += step) {
        float save = x[i];
        x[i] = save + (float)eps;
        double lp = f(ctx);
        x[i] = save - (float)eps;
        double lm = f(ctx);
        x[i] = save;
        double num = (lp - lm) / (2 * eps);
        double err = fabs(num - analytic[i]);
        double lim = atol + rtol * fmax(fabs(num), fabs(analytic[i]));
        if (err > lim) {
            if (bad < 3)
                fprintf(stderr, "  %s[%zu]: analytic %.6g numeric %.6g\n", what, i, analytic[i],
                        num);
            bad++;
        }
        if (err / lim > worst) worst = err / lim;
        checked++;
    }
    CHECK(bad <= (int)(max_outlier_frac * checked), "%s: %d of %zu gradients differ", what, bad,
          checked);
    if (bad)
        fprintf(stderr, "  %s: %d of %zu outside tolerance (allowed %.1f%%)\n", what, bad, checked,
                100 * max_outlier_frac);
    return bad;
}

/* A fused ReLU must equal max(0, .) of the plain layer, and its backward
 * the plain backward with dout masked by out > 0 (kinks make finite
 * differences of the fused form unreliable, so it is checked this way). */
static void check_fused(const char *what, const float *plain, const float *fused, size_t n)
{
    double maxe = 0;
    for (size_t i = 0; i < n; i++) maxe = fmax(maxe, fabs((double)plain[i] - fused[i]));
    CHECK(maxe <= 1e-6, "%s: fused ReLU differs from the plain layer by %g", what, maxe);
}

static float *masked(const float *R, const float *y, size_t n)
{
    float *m = pst_malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) m[i] = y[i] > 0 ? R[i] : 0.0f;
    return m;
}

/* ---- dense ----------------------------------------------------------------- */

typedef struct dense_ctx {
    int N, I, O;
    bool relu;
    float *x, *w, *b, *y, *R;
} dense_ctx;

static double dense_loss(void *p)
{
    dense_ctx *c = p;
    nn_dense_forward(c->y, c->x, c->w, c->b, c->N, c->I, c->O, c->relu);
    return dot(c->y, c->R, (size_t)c->N * c->O);
}

static void test_dense(int N, int I, int O, bool relu)
{
    dense_ctx c = {N,
                   I,
                   O,
                   relu,
                   rand_vec((size_t)N * I, 1),
                   rand_vec((size_t)I * O, 0.5f),
                   rand_vec(O, 0.5f),
                   rand_vec((size_t)N * O, 0),
                   rand_vec((size_t)N * O, 1)};
    float *dx = rand_vec((size_t)N * I, 1), *dw = rand_vec((size_t)I * O, 1), *db = rand_vec(O, 1);
    float *dy = rand_vec((size_t)N * O, 0), *prior = rand_vec((size_t)N * I, 1);
    char what[64];
    c.relu = false; /* finite differences on the plain layer, the fused one below */
    dense_loss(&c);
    memcpy(dy, c.R, sizeof(float) * N * O);
    nn_dense_backward(dx, false, dw, db, dy, c.y, c.x, c.w, N, I, O, false);
    /* forward against a naive product */
    double maxe = 0;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = c.b[o];
            for (int i = 0; i < I; i++) s += (double)c.x[n * I + i] * c.w[i * O + o];
            maxe = fmax(maxe, fabs(s - c.y[n * O + o]));
        }
    CHECK(maxe < 1e-4, "dense %dx%dx%d forward error %g", N, I, O, maxe);
    double tol = 0;
    snprintf(what, sizeof what, "dense %dx%dx%d%s dx", N, I, O, relu ? " relu" : "");
    grad_check(what, c.x, (size_t)N * I, dx, dense_loss, &c, tol);
    snprintf(what, sizeof what, "dense %dx%dx%d%s dw", N, I, O, relu ? " relu" : "");
    grad_check(what, c.w, (size_t)I * O, dw, dense_loss, &c, tol);
    snprintf(what, sizeof what, "dense %dx%dx%d%s db", N, I, O, relu ? " relu" : "");
    grad_check(what, c.b, O, db, dense_loss, &c, tol);
    /* acc: dinp adds to what is there */
    float *dx2 = rand_vec((size_t)N * I, 0);
    memcpy(dx2, prior, sizeof(float) * N * I);
    memcpy(dy, c.R, sizeof(float) * N * O);
    nn_dense_backward(dx2, true, dw, db, dy, c.y, c.x, c.w, N, I, O, false);
    maxe = 0;
    for (int i = 0; i < N * I; i++) maxe = fmax(maxe, fabs(dx2[i] - prior[i] - dx[i]));
    CHECK(maxe < 1e-5, "dense acc error %g", maxe);
    if (relu) {
        size_t ny = (size_t)N * O;
        dense_loss(&c);
        float *y0 = pst_malloc(sizeof(float) * ny), *dm = masked(c.R, c.y, ny);
        float *dxf = rand_vec((size_t)N * I, 1), *dwf = rand_vec((size_t)I * O, 1);
        float *dbf = rand_vec(O, 1);
        for (size_t i = 0; i < ny; i++) y0[i] = c.y[i] > 0 ? c.y[i] : 0.0f;
        nn_dense_backward(dx, false, dw, db, dm, c.y, c.x, c.w, N, I, O, false);
        c.relu = true;
        dense_loss(&c);
        check_fused("dense forward", y0, c.y, ny);
        memcpy(dy, c.R, sizeof(float) * ny);
        nn_dense_backward(dxf, false, dwf, dbf, dy, c.y, c.x, c.w, N, I, O, true);
        check_fused("dense dx", dx, dxf, (size_t)N * I);
        check_fused("dense dw", dw, dwf, (size_t)I * O);
        check_fused("dense db", db, dbf, O);
        free(dxf), free(dwf), free(dbf);
        free(y0), free(dm);
    }
    free(c.x), free(c.w), free(c.b), free(c.y), free(c.R);
    free(dx), free(dw), free(db), free(dy), free(prior), free(dx2);
}

/* ---- conv ------------------------------------------------------------------ */

typedef struct conv_ctx {
    nn_conv_dims d;
    bool relu, bias;
    float *x, *w, *b, *y, *R, *scratch;
} conv_ctx;

static size_t conv_nout(const nn_conv_dims *d)
{
    return (size_t)d->N * d->OH * d->OW * d->K;
}

static double conv_loss(void *p)
{
    conv_ctx *c = p;
    nn_conv2d_forward(c->y, c->x, c->w, c->bias ? c->b : NULL, &c->d, c->relu, NULL, c->scratch, 0);
    return dot(c->y, c->R, conv_nout(&c->d));
}

/* Direct convolution in double. */
static double conv_ref_err(const conv_ctx *c)
{
    const nn_conv_dims *d = &c->d;
    double maxe = 0;
    for (int n = 0; n < d->N; n++)
        for (int oh = 0; oh < d->OH; oh++)
            for (int ow = 0; ow < d->OW; ow++)
                for (int k = 0; k < d->K; k++) {
                    double s = c->bias ? c->b[k] : 0;
                    for (int kh = 0; kh < d->KH; kh++)
                        for (int kw = 0; kw < d->KW; kw++) {
                            int ih = oh * d->SH - d->PH + kh, iw = ow * d->SW - d->PW + kw;
                            if (ih < 0 || ih >= d->H || iw < 0 || iw >= d->W) continue;
                            for (int ci = 0; ci < d->C; ci++)
                                s += (double)c->x[((n * d->H + ih) * d->W + iw) * d->C + ci] *
                                     c->w[((kh * d->KW + kw) * d->C + ci) * d->K + k];
                        }
                    if (c->relu && s < 0) s = 0;
                    double y = c->y[((n * d->OH + oh) * d->OW + ow) * d->K + k];
                    maxe = fmax(maxe, fabs(s - y));
                }
    return maxe;
}

static void test_conv(int N, int H, int W, int C, int K, int KH, int KW, int SH, int SW, int PH,
                      int PW, bool bias, bool relu)
{
    conv_ctx c = {.d = {N, H, W, C, KH, KW, SH, SW, PH, PW, 0, 0, K, NN_WINO_AUTO, false, false},
                  .relu = relu,
                  .bias = bias};
    nn_conv_dims_finish(&c.d);
    const nn_conv_dims *d = &c.d;
    size_t nx = (size_t)N * H * W * C, nw = (size_t)KH * KW * C * K, ny = conv_nout(d);
    c.x = rand_vec(nx, 1), c.w = rand_vec(nw, 0.5f), c.b = rand_vec(K, 0.5f);
    c.y = rand_vec(ny, 0), c.R = rand_vec(ny, 1);
    c.scratch = rand_vec(nn_conv_scratch(d), 0); /* garbage in scratch must not matter */
    float *dx = rand_vec(nx, 1), *dw = rand_vec(nw, 1), *db = rand_vec(K, 1), *dy = rand_vec(ny, 0);
    char tag[96], what[128];
    snprintf(tag, sizeof tag, "conv N%d %dx%dx%d->%d k%dx%d s%d,%d p%d,%d%s%s", N, H, W, C, K, KH,
             KW, SH, SW, PH, PW, bias ? " bias" : "", relu ? " relu" : "");
    c.relu = false; /* finite differences on the plain layer, the fused one below */
    conv_loss(&c);
    double fe = conv_ref_err(&c);
    CHECK(fe < 1e-4, "%s: forward error %g", tag, fe);
    memcpy(dy, c.R, sizeof(float) * ny);
    nn_conv2d_backward(dx, false, dw, bias ? db : NULL, dy, c.y, c.x, c.w, d, false, NULL,
                       c.scratch, 0);
    double tol = 0;
    snprintf(what, sizeof what, "%s dx", tag);
    grad_check(what, c.x, nx, dx, conv_loss, &c, tol);
    snprintf(what, sizeof what, "%s dw", tag);
    grad_check(what, c.w, nw, dw, conv_loss, &c, tol);
    if (bias) {
        snprintf(what, sizeof what, "%s db", tag);
        grad_check(what, c.b, K, db, conv_loss, &c, tol);
    }
    /* acc adds; dinp NULL skips the input gradient but still gives dw */
    float *dx2 = rand_vec(nx, 1), *prior = pst_malloc(sizeof(float) * nx), *dw2 = rand_vec(nw, 1);
    memcpy(prior, dx2, sizeof(float) * nx);
    memcpy(dy, c.R, sizeof(float) * ny);
    nn_conv2d_backward(dx2, true, dw2, NULL, dy, c.y, c.x, c.w, d, false, NULL, c.scratch, 0);
    double maxe = 0, maxw = 0;
    for (size_t i = 0; i < nx; i++) maxe = fmax(maxe, fabs(dx2[i] - prior[i] - dx[i]));
    for (size_t i = 0; i < nw; i++) maxw = fmax(maxw, fabs(dw2[i] - dw[i]));
    CHECK(maxe < 1e-4 && maxw < 1e-4, "%s: acc error %g, dw repeat error %g", tag, maxe, maxw);
    memcpy(dy, c.R, sizeof(float) * ny);
    nn_conv2d_backward(NULL, false, dw2, NULL, dy, c.y, c.x, c.w, d, false, NULL, c.scratch, 0);
    /* without dinp a one-channel layer takes another path: another summation order */
    maxw = 0;
    double dwmax = 0;
    for (size_t i = 0; i < nw; i++) maxw = fmax(maxw, fabs(dw2[i] - dw[i]));
    for (size_t i = 0; i < nw; i++) dwmax = fmax(dwmax, fabs(dw[i]));
    CHECK(maxw < 1e-5 * (1 + dwmax), "%s: dw without dinp differs by %g", tag, maxw);
    if (relu) {
        conv_loss(&c);
        float *y0 = pst_malloc(sizeof(float) * ny), *dm = masked(c.R, c.y, ny);
        float *dxf = rand_vec(nx, 1), *dbf = rand_vec(K, 1);
        for (size_t i = 0; i < ny; i++) y0[i] = c.y[i] > 0 ? c.y[i] : 0.0f;
        nn_conv2d_backward(dx, false, dw, bias ? db : NULL, dm, c.y, c.x, c.w, d, false, NULL,
                           c.scratch, 0);
        c.relu = true;
        conv_loss(&c);
        fe = conv_ref_err(&c);
        CHECK(fe < 1e-4, "%s: fused forward error %g", tag, fe);
        check_fused(tag, y0, c.y, ny);
        memcpy(dy, c.R, sizeof(float) * ny);
        nn_conv2d_backward(dxf, false, dw2, bias ? dbf : NULL, dy, c.y, c.x, c.w, d, true, NULL,
                           c.scratch, 0);
        check_fused(tag, dx, dxf, nx);
        check_fused(tag, dw, dw2, nw);
        if (bias) check_fused(tag, db, dbf, K);
        free(y0), free(dm), free(dxf), free(dbf);
    }
    free(c.x), free(c.w), free(c.b), free(c.y), free(c.R), free(c.scratch);
    free(dx), free(dw), free(db), free(dy), free(dx2), free(prior), free(dw2);
}

/* ---- pooling --------------------------------------------------------------- */

typedef struct pool_ctx {
    nn_pool_dims d;
    bool max;
    float *x, *y, *R;
    int32_t *arg;
} pool_ctx;

static double pool_loss(void *p)
{
    pool_ctx *c = p;
    if (c->max)
        nn_maxpool_forward(c->y, c->arg, c->x, &c->d);
    else
        nn_avgpool_forward(c->y, c->x, &c->d);
    return dot(c->y, c->R, (size_t)c->d.N * c->d.OH * c->d.OW * c->d.C);
}

static void test_pool(bool max, int N, int H, int W, int C, int KH, int KW, int S, int P,
                      bool count_pad)
{
    pool_ctx c = {{N, H, W, C, KH, KW, S, S, P, P, 0, 0, count_pad}, max, 0, 0, 0, 0};
    nn_pool_dims_finish(&c.d);
    size_t nx = (size_t)N * H * W * C, ny = (size_t)N * c.d.OH * c.d.OW * C;
    /* distinct values 0.05 apart, shuffled: no ties within the perturbation */
    c.x = rand_vec(nx, 0);
    for (size_t i = 0; i < nx; i++) c.x[i] = 0.05f * (float)i - 0.025f * (float)nx;
    for (size_t i = nx - 1; i > 0; i--) {
        size_t j = nn_rng_next(&rng) % (i + 1);
        float t = c.x[i];
        c.x[i] = c.x[j], c.x[j] = t;
    }
    c.y = rand_vec(ny, 0), c.R = rand_vec(ny, 1);
    c.arg = pst_malloc(sizeof(int32_t) * ny);
    float *dx = rand_vec(nx, 1);
    char what[96];
    snprintf(what, sizeof what, "%spool N%d %dx%dx%d k%dx%d s%d p%d%s dx", max ? "max" : "avg", N,
             H, W, C, KH, KW, S, P, count_pad ? " count_pad" : "");
    pool_loss(&c);
    /* forward against a naive window scan */
    double maxe = 0;
    const nn_pool_dims *d = &c.d;
    for (int n = 0; n < N; n++)
        for (int oh = 0; oh < d->OH; oh++)
            for (int ow = 0; ow < d->OW; ow++)
                for (int ch = 0; ch < C; ch++) {
                    double best = -1e30, sum = 0;
                    int cnt = 0;
                    for (int kh = 0; kh < KH; kh++)
                        for (int kw = 0; kw < KW; kw++) {
                            int ih = oh * S - P + kh, iw = ow * S - P + kw;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            double v = c.x[((n * H + ih) * W + iw) * C + ch];
                            best = fmax(best, v), sum += v, cnt++;
                        }
                    double ref = max ? best : sum / (count_pad ? KH * KW : cnt);
                    maxe = fmax(maxe, fabs(ref - c.y[((n * d->OH + oh) * d->OW + ow) * C + ch]));
                }
    CHECK(maxe < 1e-4, "%s: forward error %g", what, maxe);
    if (max)
        nn_maxpool_backward(dx, false, c.R, c.arg, &c.d);
    else
        nn_avgpool_backward(dx, false, c.R, &c.d);
    grad_check(what, c.x, nx, dx, pool_loss, &c, 0);
    float *dx2 = rand_vec(nx, 1), *prior = pst_malloc(sizeof(float) * nx);
    memcpy(prior, dx2, sizeof(float) * nx);
    if (max)
        nn_maxpool_backward(dx2, true, c.R, c.arg, &c.d);
    else
        nn_avgpool_backward(dx2, true, c.R, &c.d);
    maxe = 0;
    for (size_t i = 0; i < nx; i++) maxe = fmax(maxe, fabs(dx2[i] - prior[i] - dx[i]));
    CHECK(maxe < 1e-5, "%s: acc error %g", what, maxe);
    free(c.x), free(c.y), free(c.R), free(c.arg), free(dx), free(dx2), free(prior);
}

/* Max pool against a reference scan, bitwise, on an image full of ties
 * (integers through a ReLU: mostly zeros, as after resnet-50's bn1): the
 * argmax is the first maximum in row-major window order, and the backward
 * without acc overwrites every input gradient, also rows and columns no
 * window reaches (dx starts as NaN), with acc adds in output order. */
static void test_maxpool_bits(int N, int H, int W, int C, int K, int S, int P)
{
    nn_pool_dims d = {N, H, W, C, K, K, S, S, P, P, 0, 0, false};
    nn_pool_dims_finish(&d);
    size_t nx = (size_t)N * H * W * C, ny = (size_t)N * d.OH * d.OW * C;
    float *x = pst_malloc(sizeof(float) * nx), *y = pst_malloc(sizeof(float) * ny);
    float *dy = rand_vec(ny, 1), *dx = pst_malloc(sizeof(float) * nx);
    float *ref = pst_malloc(sizeof(float) * nx), *prior = rand_vec(nx, 1);
    int32_t *arg = pst_malloc(sizeof(int32_t) * ny), *rarg = pst_malloc(sizeof(int32_t) * ny);
    for (size_t i = 0; i < nx; i++) {
        int v = (int)(nn_rng_next(&rng) % 6) - 3;
        x[i] = v > 0 ? (float)v : 0.0f;
    }
    for (int n = 0; n < N; n++)
        for (int oh = 0; oh < d.OH; oh++)
            for (int ow = 0; ow < d.OW; ow++)
                for (int c = 0; c < C; c++) {
                    int best = -1;
                    for (int h = oh * S - P; h < oh * S - P + K; h++)
                        for (int w = ow * S - P; w < ow * S - P + K; w++) {
                            if (h < 0 || h >= H || w < 0 || w >= W) continue;
                            int off = (h * W + w) * C + c;
                            if (best < 0 ||
                                x[(size_t)n * H * W * C + off] > x[(size_t)n * H * W * C + best])
                                best = off;
                        }
                    rarg[((n * d.OH + oh) * d.OW + ow) * C + c] = best;
                }
    char what[64];
    snprintf(what, sizeof what, "maxpool bits N%d %dx%dx%d k%d s%d p%d", N, H, W, C, K, S, P);
    nn_maxpool_forward(y, arg, x, &d);
    CHECK(memcmp(arg, rarg, sizeof(int32_t) * ny) == 0, "%s: argmax", what);
    for (int acc = 0; acc <= 1; acc++) {
        for (size_t i = 0; i < nx; i++)
            ref[i] = acc ? prior[i] : 0.0f, dx[i] = acc ? prior[i] : NAN;
        for (int n = 0; n < N; n++)
            for (size_t i = 0; i < ny / N; i++)
                ref[(size_t)n * H * W * C + rarg[n * ny / N + i]] += dy[n * ny / N + i];
        nn_maxpool_backward(dx, acc, dy, arg, &d);
        CHECK(memcmp(dx, ref, sizeof(float) * nx) == 0, "%s: backward%s", what, acc ? " acc" : "");
    }
    free(x), free(y), free(dy), free(dx), free(ref), free(prior), free(arg), free(rarg);
}

/* Average pool backward, AVX-512 against portable, bitwise: a pool whose
 * windows tile the image (global) writes its input gradient without a
 * clearing pass (dx starts as NaN), the others clear it first. */
static void test_avgpool_bits(int N, int H, int W, int C, int K, int S, int P)
{
    nn_pool_dims d = {N, H, W, C, K, K, S, S, P, P, 0, 0, false};
    if (K == 0) d.KH = H, d.KW = W; /* global */
    nn_pool_dims_finish(&d);
    size_t nx = (size_t)N * H * W * C, ny = (size_t)N * d.OH * d.OW * C;
    float *dy = rand_vec(ny, 1), *prior = rand_vec(nx, 1), *dx[2];
    bool simd = nn_narrow_use_simd(-1);
    for (int acc = 0; acc <= 1; acc++) {
        for (int v = 0; v < 2; v++) {
            dx[v] = pst_malloc(sizeof(float) * nx);
            for (size_t i = 0; i < nx; i++) dx[v][i] = acc ? prior[i] : NAN;
            nn_narrow_use_simd(v == 0 ? simd : 0);
            nn_avgpool_backward(dx[v], acc, dy, &d);
        }
        nn_narrow_use_simd(simd);
        CHECK(memcmp(dx[0], dx[1], sizeof(float) * nx) == 0 && dx[1][nx - 1] == dx[1][nx - 1],
              "avgpool bits N%d %dx%dx%d k%d s%d p%d%s", N, H, W, C, d.KH, S, P, acc ? " acc" : "");
        free(dx[0]), free(dx[1]);
    }
    free(dy), free(prior);
}

/* count_include_pad by value: on a constant image the corner of a 3x3/1
 * pad 1 window sees 4 of 9 positions: 4/9 counted, 1 not. */
static void test_pool_count_pad_values(void)
{
    nn_pool_dims d = {1, 3, 3, 1, 3, 3, 1, 1, 1, 1, 0, 0, true};
    nn_pool_dims_finish(&d);
    float x[9], y[9], dx[9], dy[9];
    for (int i = 0; i < 9; i++) x[i] = 1.0f, dy[i] = 1.0f;
    nn_avgpool_forward(y, x, &d);
    CHECK_CLOSE(y[0], 4.0 / 9, 1e-7, 1e-6, "counted corner");
    CHECK_CLOSE(y[1], 6.0 / 9, 1e-7, 1e-6, "counted edge");
    CHECK_CLOSE(y[4], 1.0, 1e-7, 1e-6, "counted centre");
    nn_avgpool_backward(dx, false, dy, &d);
    /* each input is in as many windows as it has neighbours (itself included), 1/9 each */
    CHECK_CLOSE(dx[0], 4.0 / 9, 1e-7, 1e-6, "counted corner gradient");
    CHECK_CLOSE(dx[4], 1.0, 1e-7, 1e-6, "counted centre gradient");
    d.count_pad = false;
    nn_avgpool_forward(y, x, &d);
    CHECK_CLOSE(y[0], 1.0, 1e-7, 1e-6, "uncounted corner");
}

/* ---- batch norm ------------------------------------------------------------ */

typedef struct bn_ctx {
    int M, C;
    bool relu;
    float eps;
    float *x, *gamma, *beta, *mm, *mv, *y, *R, *mean, *invstd, *nm, *nv;
} bn_ctx;

static double bn_loss(void *p)
{
    bn_ctx *c = p;
    nn_bn_forward_train(c->y, c->mean, c->invstd, c->nm, c->nv, c->x, c->gamma, c->beta, c->mm,
                        c->mv, c->M, c->C, 0.99f, c->eps, c->relu);
    return dot(c->y, c->R, (size_t)c->M * c->C);
}

static void test_bn(int M, int C, bool relu, float eps)
{
    bn_ctx c = {M, C, relu, eps, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t n = (size_t)M * C;
    c.x = rand_vec(n, 2);
    for (size_t i = 0; i < n; i++) c.x[i] += 0.5f; /* a non-zero mean */
    c.gamma = rand_vec(C, 1), c.beta = rand_vec(C, 1), c.mm = rand_vec(C, 1);
    c.mv = rand_vec(C, 0.5f);
    for (int i = 0; i < C; i++) c.mv[i] += 1.0f, c.gamma[i] += 1.5f;
    c.y = rand_vec(n, 0), c.R = rand_vec(n, 1), c.mean = rand_vec(C, 0), c.invstd = rand_vec(C, 0);
    c.nm = rand_vec(C, 0), c.nv = rand_vec(C, 0);
    float *dx = rand_vec(n, 1), *dg = rand_vec(C, 1), *dbeta = rand_vec(C, 1), *dy = rand_vec(n, 0);
    char tag[64], what[96];
    snprintf(tag, sizeof tag, "bn M%d C%d eps %g%s", M, C, (double)eps, relu ? " relu" : "");
    bn_loss(&c); /* fused: the statistics and output checks below */
    /* statistics and the moving averages against a direct computation */
    for (int ch = 0; ch < C; ch++) {
        double s = 0, q = 0;
        for (int i = 0; i < M; i++) s += c.x[i * C + ch];
        double mean = s / M;
        for (int i = 0; i < M; i++) q += (c.x[i * C + ch] - mean) * (c.x[i * C + ch] - mean);
        double var = q / M;
        CHECK_CLOSE(c.mean[ch], mean, 1e-5, 1e-5, "%s mean", tag);
        CHECK_CLOSE(c.invstd[ch], 1 / sqrt(var + eps), 1e-5, 1e-5, "%s invstd", tag);
        CHECK_CLOSE(c.nm[ch], 0.99 * c.mm[ch] + 0.01 * mean, 1e-6, 1e-5, "%s new mean", tag);
        CHECK_CLOSE(c.nv[ch], 0.99 * c.mv[ch] + 0.01 * q / (M - 1), 1e-6, 1e-5, "%s new var", tag);
        double y0 = (c.x[ch] - mean) / sqrt(var + eps) * c.gamma[ch] + c.beta[ch];
        if (relu && y0 < 0) y0 = 0;
        CHECK_CLOSE(c.y[ch], y0, 1e-5, 1e-4, "%s output", tag);
    }
    if (relu) {
        /* fused backward = plain backward with dout masked by out > 0 */
        float *dm = masked(c.R, c.y, n), *dxf = rand_vec(n, 1), *dgf = rand_vec(C, 1);
        float *dbf = rand_vec(C, 1);
        memcpy(dy, c.R, sizeof(float) * n);
        nn_bn_backward(dxf, false, dgf, dbf, dy, c.x, c.gamma, c.beta, c.mean, c.invstd, M, C,
                       true);
        c.relu = false;
        bn_loss(&c);
        nn_bn_backward(dx, false, dg, dbeta, dm, c.x, c.gamma, c.beta, c.mean, c.invstd, M, C,
                       false);
        check_fused(tag, dx, dxf, n);
        check_fused(tag, dg, dgf, C);
        check_fused(tag, dbeta, dbf, C);
        /* the mask is recomputed from x with the forward's expression: the
         * same bits as masking with the stored output */
        CHECK(memcmp(dx, dxf, sizeof(float) * n) == 0 && memcmp(dg, dgf, sizeof(float) * C) == 0 &&
                  memcmp(dbeta, dbf, sizeof(float) * C) == 0,
              "%s: the backward with the recomputed ReLU mask differs from the masked dout", tag);
        free(dm), free(dxf), free(dgf), free(dbf);
    }
    c.relu = false; /* finite differences on the plain layer */
    bn_loss(&c);
    memcpy(dy, c.R, sizeof(float) * n);
    nn_bn_backward(dx, false, dg, dbeta, dy, c.x, c.gamma, c.beta, c.mean, c.invstd, M, C, false);
    double tol = 0;
    snprintf(what, sizeof what, "%s dx", tag);
    grad_check(what, c.x, n, dx, bn_loss, &c, tol);
    snprintf(what, sizeof what, "%s dgamma", tag);
    grad_check(what, c.gamma, C, dg, bn_loss, &c, tol);
    snprintf(what, sizeof what, "%s dbeta", tag);
    grad_check(what, c.beta, C, dbeta, bn_loss, &c, tol);
    /* inference uses the moving statistics */
    nn_bn_forward_infer(c.y, c.x, c.gamma, c.beta, c.mm, c.mv, M, C, eps, relu);
    double maxe = 0;
    for (size_t i = 0; i < n; i++) {
        int ch = (int)(i % C);
        double v = (c.x[i] - c.mm[ch]) / sqrt(c.mv[ch] + eps) * c.gamma[ch] + c.beta[ch];
        if (relu && v < 0) v = 0;
        maxe = fmax(maxe, fabs(v - c.y[i]));
    }
    CHECK(maxe < 1e-4, "%s: inference error %g", tag, maxe);
    free(c.x), free(c.gamma), free(c.beta), free(c.mm), free(c.mv), free(c.y), free(c.R);
    free(c.mean), free(c.invstd), free(c.nm), free(c.nv), free(dx), free(dg), free(dbeta), free(dy);
}

/* The residual add fused into a batch norm (nn_bn_res) against the batch
 * norm followed by nn_sum_forward / nn_sum_backward: the same bits, for
 * the vector channels (chunks of 32 and 16), the rest (C % 16), with and
 * without the add's ReLU, the other addend's gradient written, added or
 * absent, dx written or added; and on a pool of 3 threads. */
static void test_bn_res(int M, int C, bool relu, int dres_mode, bool acc)
{
    size_t n = (size_t)M * C;
    float *x = rand_vec(n, 2), *r = rand_vec(n, 1), *dy = rand_vec(n, 1);
    float *g = rand_vec(C, 1), *b = rand_vec(C, 1), *mm = rand_vec(C, 1), *mv = rand_vec(C, 0.5f);
    for (int c = 0; c < C; c++) g[c] += 1.5f, mv[c] += 1.0f;
    float *ybn = rand_vec(n, 0), *yref = rand_vec(n, 0), *y = rand_vec(n, 0);
    float *st = rand_vec(8 * (size_t)C, 0); /* mean, invstd, nm, nv: reference, then fused */
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    char tag[96];
    snprintf(tag, sizeof tag, "bn+add M%d C%d%s dres %d%s", M, C, relu ? " relu" : "", dres_mode,
             acc ? " acc" : "");
    nn_bn_forward_train(ybn, st, st + C, st + 2 * C, st + 3 * C, x, g, b, mm, mv, M, C, 0.99f,
                        1e-3f, false);
    nn_sum_forward(yref, (const float *[]){ybn, r}, 2, n, relu);
    nn_pool *pool = NULL;
    pst_err e;
    CHECK(nn_pool_new(&pool, 3, &e) == 0, "pool: %s", e.msg);
    nn_bn_res res = {.res = r, .relu = relu};
    for (int t = 0; t < 2; t++) {
        nn_bn_forward_train_par(t ? pool : NULL, red, y, st + 4 * C, st + 5 * C, st + 6 * C,
                                st + 7 * C, x, g, b, mm, mv, M, C, 0.99f, 1e-3f, false, &res);
        CHECK(memcmp(y, yref, sizeof(float) * n) == 0, "%s: forward differs (%d threads)", tag,
              t ? 3 : 1);
        CHECK(memcmp(st, st + 4 * C, sizeof(float) * 4 * C) == 0,
              "%s: statistics differ (%d threads)", tag, t ? 3 : 1);
    }
    /* backward: the add's, then the batch norm's */
    float *dyc = pst_malloc(sizeof(float) * n), *dbn = rand_vec(n, 0);
    float *dres0 = rand_vec(n, 1), *dref = pst_malloc(sizeof(float) * n);
    float *dxref = rand_vec(n, 1), *dx0 = pst_malloc(sizeof(float) * n);
    float *dg = rand_vec(C, 0), *db = rand_vec(C, 0);
    memcpy(dyc, dy, sizeof(float) * n);
    memcpy(dref, dres0, sizeof(float) * n);
    memcpy(dx0, dxref, sizeof(float) * n);
    nn_sum_backward((float *[]){dbn, dres_mode ? dref : NULL}, (bool[]){false, dres_mode == 2}, 2,
                    dyc, yref, n, relu);
    nn_bn_backward(dxref, acc, dg, db, dbn, x, g, b, st, st + C, M, C, false);
    float *dx = pst_malloc(sizeof(float) * n), *dres = pst_malloc(sizeof(float) * n);
    float *dg2 = rand_vec(C, 0), *db2 = rand_vec(C, 0);
    for (int t = 0; t < 2; t++) {
        memcpy(dx, dx0, sizeof(float) * n);
        memcpy(dres, dres0, sizeof(float) * n);
        nn_bn_res rb = {.dres = dres_mode ? dres : NULL, .dres_acc = dres_mode == 2, .relu = relu};
        nn_bn_backward_par(t ? pool : NULL, red, dx, acc, dg2, db2, dy, NULL, y, x, g, b, st,
                           st + C, M, C, false, &rb);
        CHECK(memcmp(dx, dxref, sizeof(float) * n) == 0 &&
                  memcmp(dg, dg2, sizeof(float) * C) == 0 &&
                  memcmp(db, db2, sizeof(float) * C) == 0,
              "%s: backward differs (%d threads)", tag, t ? 3 : 1);
        CHECK(memcmp(dres, dref, sizeof(float) * n) == 0, "%s: the addend's gradient differs", tag);
    }
    nn_pool_free(pool);
    free(x), free(r), free(dy), free(g), free(b), free(mm), free(mv), free(ybn), free(yref);
    free(y), free(st), free(red), free(dyc), free(dbn), free(dres0), free(dref), free(dxref);
    free(dx0), free(dg), free(db), free(dx), free(dres), free(dg2), free(db2);
}

/* A gradient in two parts (dout2, split gradients in graph.h) against the
 * same backward on their sum, bitwise: the batch norm with or without its
 * ReLU and fused with the add (its ReLU, the addend's gradient written or
 * added), dx written or added, on 1 and 3 threads; 16 and 32 channels (in
 * registers), 48 (in registers), 56 and 200 (a row at a time, 8 channels
 * one by one), 5 (scalar). */
static void test_bn_two(int M, int C, int mode, bool acc)
{
    /* mode 0: batch norm; 1: + ReLU; 2: + add; 3: + add, ReLU, addend's
     * gradient written; 4: + add, addend's gradient added */
    size_t n = (size_t)M * C;
    float *x = rand_vec(n, 2), *r = rand_vec(n, 1), *d1 = rand_vec(n, 1), *d2 = rand_vec(n, 1);
    float *g = rand_vec(C, 1), *b = rand_vec(C, 1), *mm = rand_vec(C, 1), *mv = rand_vec(C, 0.5f);
    for (int c = 0; c < C; c++) g[c] += 1.5f, mv[c] += 1.0f;
    float *y = rand_vec(n, 0), *st = rand_vec(4 * (size_t)C, 0);
    float *sum = pst_malloc(sizeof(float) * n), *dy = pst_malloc(sizeof(float) * n);
    float *dx0 = rand_vec(n, 1), *dr0 = rand_vec(n, 1);
    float *dx[2], *dr[2], *dg[2], *db[2];
    for (int k = 0; k < 2; k++) {
        dx[k] = pst_malloc(sizeof(float) * n), dr[k] = pst_malloc(sizeof(float) * n);
        dg[k] = rand_vec(C, 0), db[k] = rand_vec(C, 0);
    }
    for (size_t i = 0; i < n; i++) sum[i] = d1[i] + d2[i];
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    const bool relu = mode == 1, fused = mode >= 2;
    nn_bn_res res = {.res = r, .relu = mode == 3};
    nn_bn_forward_train_par(NULL, red, y, st, st + C, st + 2 * C, st + 3 * C, x, g, b, mm, mv, M, C,
                            0.99f, 1e-3f, relu, fused ? &res : NULL);
    nn_pool *pool = NULL;
    pst_err e;
    CHECK(nn_pool_new(&pool, 3, &e) == 0, "pool: %s", e.msg);
    char tag[64];
    snprintf(tag, sizeof tag, "bn two parts M%d C%d mode %d%s", M, C, mode, acc ? " acc" : "");
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < 2; k++) { /* k = 0: on the sum; 1: on the two parts */
            memcpy(dx[k], dx0, sizeof(float) * n), memcpy(dr[k], dr0, sizeof(float) * n);
            memcpy(dy, k ? d1 : sum, sizeof(float) * n);
            nn_bn_res rb = {
                .dres = mode >= 3 ? dr[k] : NULL, .dres_acc = mode == 4, .relu = mode == 3};
            nn_bn_backward_par(t ? pool : NULL, red, dx[k], acc, dg[k], db[k], dy, k ? d2 : NULL, y,
                               x, g, b, st, st + C, M, C, relu, fused ? &rb : NULL);
            if (k == 0) continue;
            CHECK(memcmp(dx[0], dx[1], sizeof(float) * n) == 0 &&
                      memcmp(dg[0], dg[1], sizeof(float) * C) == 0 &&
                      memcmp(db[0], db[1], sizeof(float) * C) == 0,
                  "%s: backward differs (%d threads)", tag, t ? 3 : 1);
            CHECK(memcmp(dr[0], dr[1], sizeof(float) * n) == 0, "%s: the addend's gradient differs",
                  tag);
        }
    nn_pool_free(pool);
    free(x), free(r), free(d1), free(d2), free(g), free(b), free(mm), free(mv), free(y), free(st);
    free(sum), free(dy), free(dx0), free(dr0), free(red);
    for (int k = 0; k < 2; k++) free(dx[k]), free(dr[k]), free(dg[k]), free(db[k]);
}

/* Enough rows for several blocks (nn_bn_blocks), whose lengths are not
 * multiples of the float sums' 8-row groups: every output of the forward
 * and the backward (the ReLU, the fused add with its gradient added, two
 * parts) the same bits on the caller and on pools of 2 and 3 threads, for
 * the register chunks (16, 48, 64 channels), 64 + 16 and the plain loops
 * (40, 256: the mask prepass). */
static void test_bn_threads(int M, int C)
{
    size_t n = (size_t)M * C;
    float *x = rand_vec(n, 2), *r = rand_vec(n, 1), *d1 = rand_vec(n, 1), *d2 = rand_vec(n, 1);
    float *g = rand_vec(C, 1), *b = rand_vec(C, 1), *mm = rand_vec(C, 1), *mv = rand_vec(C, 0.5f);
    for (int c = 0; c < C; c++) g[c] += 1.5f, mv[c] += 1.0f;
    for (size_t i = 0; i < n; i++) x[i] += 0.5f;
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    float *y[3], *st[3], *dx[3], *dr[3], *dgb[3], *dy = pst_malloc(sizeof(float) * n);
    CHECK(nn_bn_blocks(M, C) > 2, "bn threads M%d C%d: %d blocks, expected several", M, C,
          nn_bn_blocks(M, C));
    for (int mode = 0; mode < 3; mode++) { /* batch norm + ReLU; + add + ReLU; + ReLU, two parts */
        for (int t = 0; t < 3; t++) {
            nn_pool *pool = NULL;
            pst_err e;
            if (t) CHECK(nn_pool_new(&pool, t + 1, &e) == 0, "pool: %s", e.msg);
            y[t] = rand_vec(n, 0), st[t] = rand_vec(4 * (size_t)C, 0), dx[t] = rand_vec(n, 0);
            dr[t] = rand_vec(n, 0), dgb[t] = rand_vec(2 * (size_t)C, 0);
            nn_bn_res res = {.res = r, .relu = true};
            nn_bn_forward_train_par(pool, red, y[t], st[t], st[t] + C, st[t] + 2 * C, st[t] + 3 * C,
                                    x, g, b, mm, mv, M, C, 0.99f, 1e-3f, mode != 1,
                                    mode == 1 ? &res : NULL);
            memcpy(dy, d1, sizeof(float) * n);
            nn_bn_res rb = {.dres = dr[t], .dres_acc = true, .relu = true};
            nn_bn_backward_par(pool, red, dx[t], false, dgb[t], dgb[t] + C, dy,
                               mode == 2 ? d2 : NULL, y[t], x, g, b, st[t], st[t] + C, M, C,
                               mode != 1, mode == 1 ? &rb : NULL);
            nn_pool_free(pool);
        }
        for (int t = 1; t < 3; t++)
            CHECK(memcmp(y[0], y[t], sizeof(float) * n) == 0 &&
                      memcmp(st[0], st[t], sizeof(float) * 4 * C) == 0 &&
                      memcmp(dx[0], dx[t], sizeof(float) * n) == 0 &&
                      (mode != 1 || memcmp(dr[0], dr[t], sizeof(float) * n) == 0) &&
                      memcmp(dgb[0], dgb[t], sizeof(float) * 2 * C) == 0,
                  "bn threads M%d C%d mode %d: %d threads give other bits than 1", M, C, mode,
                  t + 1);
        for (int t = 0; t < 3; t++) free(y[t]), free(st[t]), free(dx[t]), free(dr[t]), free(dgb[t]);
    }
    free(x), free(r), free(d1), free(d2), free(g), free(b), free(mm), free(mv), free(red), free(dy);
}

/* Batch norm with a row stride (nn_bn_*_ld: a concat's channel slice,
 * concat without copies) against the contiguous entry points: y written
 * only in its slice of each row (the other floats untouched), the same
 * bits as contiguous, and the backward from a strided dy the same dx,
 * dgamma and dbeta bits, with and without ReLU, on 1 and 2 threads; the
 * chunk kernels (8-64 channels) and the row-wise ones (others). */
static void test_bn_ld(int M, int C, int ld)
{
    size_t n = (size_t)M * C, nl = (size_t)M * ld;
    float *x = rand_vec(n, 2), *d1 = rand_vec(n, 1);
    float *g = rand_vec(C, 1), *b = rand_vec(C, 1), *mm = rand_vec(C, 1), *mv = rand_vec(C, 0.5f);
    for (int c = 0; c < C; c++) g[c] += 1.5f, mv[c] += 1.0f;
    for (size_t i = 0; i < n; i++) x[i] += 0.5f;
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    float *y = rand_vec(n, 0), *yl = pst_malloc(sizeof(float) * nl);
    float *dyl = pst_malloc(sizeof(float) * nl), *st = rand_vec(4 * (size_t)C, 0);
    float *st2 = rand_vec(4 * (size_t)C, 0), *dx = rand_vec(n, 0), *dx2 = rand_vec(n, 0);
    float *dgb = rand_vec(2 * (size_t)C, 0), *dgb2 = rand_vec(2 * (size_t)C, 0);
    for (size_t i = 0; i < nl; i++) dyl[i] = -7.0f; /* the other channels: not read */
    for (int i = 0; i < M; i++) memcpy(dyl + (size_t)i * ld, d1 + (size_t)i * C, sizeof(float) * C);
    for (int relu = 0; relu < 2; relu++)
        for (int t = 0; t < 2; t++) {
            nn_pool *pool = NULL;
            pst_err e;
            if (t) CHECK(nn_pool_new(&pool, 2, &e) == 0, "pool: %s", e.msg);
            for (size_t i = 0; i < nl; i++) yl[i] = 3.0f;
            nn_bn_forward_train_par(pool, red, y, st, st + C, st + 2 * C, st + 3 * C, x, g, b, mm,
                                    mv, M, C, 0.99f, 1e-3f, relu, NULL);
            nn_bn_forward_train_ld(pool, red, yl, ld, st2, st2 + C, st2 + 2 * C, st2 + 3 * C, x, g,
                                   b, mm, mv, M, C, 0.99f, 1e-3f, relu, NULL);
            bool same = memcmp(st, st2, sizeof(float) * 4 * C) == 0, kept = true;
            for (int i = 0; i < M; i++) {
                same = same && !memcmp(y + (size_t)i * C, yl + (size_t)i * ld, sizeof(float) * C);
                for (int c = C; c < ld; c++) kept = kept && yl[(size_t)i * ld + c] == 3.0f;
            }
            nn_bn_forward_infer_ld(pool, yl, ld, x, g, b, mm, mv, M, C, 1e-3f, relu, NULL);
            nn_bn_forward_infer_par(pool, y, x, g, b, mm, mv, M, C, 1e-3f, relu, NULL);
            for (int i = 0; i < M; i++)
                same = same && !memcmp(y + (size_t)i * C, yl + (size_t)i * ld, sizeof(float) * C);
            CHECK(same && kept, "bn ld M%d C%d ld %d relu %d threads %d: forward %s", M, C, ld,
                  relu, t + 1, same ? "wrote outside its slice" : "differs from contiguous");
            nn_bn_backward_par(pool, red, dx, false, dgb, dgb + C, d1, NULL, NULL, x, g, b, st,
                               st + C, M, C, relu, NULL);
            nn_bn_backward_ld(pool, red, dx2, false, dgb2, dgb2 + C, dyl, ld, NULL, NULL, x, g, b,
                              st, st + C, M, C, relu, NULL);
            CHECK(memcmp(dx, dx2, sizeof(float) * n) == 0 &&
                      memcmp(dgb, dgb2, sizeof(float) * 2 * C) == 0,
                  "bn ld M%d C%d ld %d relu %d threads %d: backward differs from contiguous", M, C,
                  ld, relu, t + 1);
            nn_pool_free(pool);
        }
    free(x), free(d1), free(g), free(b), free(mm), free(mv), free(red), free(y), free(yl);
    free(dyl), free(st), free(st2), free(dx), free(dx2), free(dgb), free(dgb2);
}

/* A channel whose variance is near eps normalises differently with 1e-3
 * and 1e-5: eps reaches the kernel. */
static void test_bn_eps_matters(void)
{
    float x[4] = {0.0f, 0.01f, 0.02f, 0.03f}, y3[4], y5[4], mean, inv, nm, nv;
    float g = 1, b = 0, mm = 0, mv = 1;
    nn_bn_forward_train(y3, &mean, &inv, &nm, &nv, x, &g, &b, &mm, &mv, 4, 1, 0.99f, 1e-3f, false);
    nn_bn_forward_train(y5, &mean, &inv, &nm, &nv, x, &g, &b, &mm, &mv, 4, 1, 0.99f, 1e-5f, false);
    double var = 0.000125; /* of 0, .01, .02, .03 */
    CHECK_CLOSE(y3[3], 0.015 / sqrt(var + 1e-3), 1e-5, 1e-4, "bn eps 1e-3");
    CHECK_CLOSE(y5[3], 0.015 / sqrt(var + 1e-5), 1e-5, 1e-4, "bn eps 1e-5");
}

/* The one-pass moments (around the batch's first row) keep the variance of
 * a channel whose mean is 10^6 times its spread, and of one whose first
 * row is far from the mean. */
static void test_bn_large_mean(void)
{
    enum { M = 1000, C = 2 };
    float x[M * C], y[M * C], mean[C], inv[C], nm[C], nv[C];
    float g[C] = {1, 1}, b[C] = {0, 0}, mm[C] = {0, 0}, mv[C] = {1, 1};
    double s[C] = {0, 0}, q[C] = {0, 0};
    for (int i = 0; i < M; i++) {
        x[i * C] = 1e4f + 0.01f * (float)(i % 7);       /* mean 1e4 + .03, spread .02 */
        x[i * C + 1] = i == 0 ? 50.0f : (float)(i % 5); /* first row 48 from the mean */
        for (int c = 0; c < C; c++) s[c] += x[i * C + c];
    }
    for (int c = 0; c < C; c++) {
        s[c] /= M;
        for (int i = 0; i < M; i++) q[c] += (x[i * C + c] - s[c]) * (x[i * C + c] - s[c]);
        q[c] /= M;
    }
    nn_bn_forward_train(y, mean, inv, nm, nv, x, g, b, mm, mv, M, C, 0.99f, 1e-5f, false);
    for (int c = 0; c < C; c++) {
        CHECK_CLOSE(mean[c], s[c], 1e-6, 1e-6, "bn large mean: mean of channel %d", c);
        CHECK_CLOSE(inv[c], 1.0 / sqrt(q[c] + 1e-5), 1e-5, 1e-5, "bn large mean: invstd %d", c);
    }
}

/* ResNet-50's widest batch norm: 2048 channels. */
static void test_bn_wide(void)
{
    int M = 3, C = NN_BN_MAX_C;
    size_t n = (size_t)M * C;
    float *x = rand_vec(n, 1), *y = rand_vec(n, 0), *g = rand_vec(C, 0), *b = rand_vec(C, 0);
    float *mm = rand_vec(C, 0), *mv = rand_vec(C, 0), *mean = rand_vec(C, 0);
    float *inv = rand_vec(C, 0), *nm = rand_vec(C, 0), *nv = rand_vec(C, 0);
    for (int c = 0; c < C; c++) g[c] = 1, mv[c] = 1;
    nn_bn_forward_train(y, mean, inv, nm, nv, x, g, b, mm, mv, M, C, 0.99f, 1e-5f, false);
    double maxe = 0;
    for (int c = 0; c < C; c++) {
        double s = 0;
        for (int i = 0; i < M; i++) s += y[(size_t)i * C + c];
        maxe = fmax(maxe, fabs(s));
    }
    CHECK(maxe < 1e-4, "bn over %d channels: output means up to %g, expected 0", C, maxe);
    free(x), free(y), free(g), free(b), free(mm), free(mv), free(mean), free(inv), free(nm),
        free(nv);
}

/* The backward's sums follow the documented order (docs/design.md §11,
 * "The determinism rule") for every channel
 * count, bitwise: groups of 8 rows counted from row 0, each summed in float
 * in two accumulators (even and odd rows), the pair added, converted and
 * added in double; blocks of whole groups, about 8192 floats each, at most
 * 64, their partials added in block order. The block count and bounds are
 * written out here, not taken from nn_bn_blocks (an order of 32k-float
 * blocks of any rows fails at every shape here). dbeta (the sum of dy, no
 * mask) against that order: 48 and 64 channels (sums in registers; 3136 x
 * 64 is resnet-20's 7x7x64 at batch 64), 72, 200 and 256 (a row at a
 * time, the group's sums in memory, 8 channels past the last multiple of
 * 16 at 72 and 200), 5 (scalar); 3 threads. */
static void test_bn_order(int M, int C)
{
    size_t n = (size_t)M * C;
    float *x = rand_vec(n, 2), *dy = rand_vec(n, 1), *y = rand_vec(n, 0);
    float *g = rand_vec(C, 1), *b = rand_vec(C, 1), *mm = rand_vec(C, 1), *mv = rand_vec(C, 0.5f);
    float *st = rand_vec(4 * (size_t)C, 0), *dg = rand_vec(C, 0), *db = rand_vec(C, 0);
    for (int c = 0; c < C; c++) g[c] += 1.5f, mv[c] += 1.0f;
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    nn_pool *pool = NULL;
    pst_err e;
    CHECK(nn_pool_new(&pool, 3, &e) == 0, "pool: %s", e.msg);
    nn_bn_forward_train_par(pool, red, y, st, st + C, st + 2 * C, st + 3 * C, x, g, b, mm, mv, M, C,
                            0.99f, 1e-3f, false, NULL);
    nn_bn_backward_par(pool, red, NULL, false, dg, db, dy, NULL, NULL, x, g, b, st, st + C, M, C,
                       false, NULL);
    int groups = (M + 7) / 8, bad = 0;
    long nb = (long)groups * 8 * C / 8192;
    nb = nb > 64 ? 64 : nb > groups ? groups : nb < 1 ? 1 : nb;
    CHECK(nn_bn_blocks(M, C) == nb, "bn order M%d C%d: %d blocks, the documented rule gives %ld", M,
          C, nn_bn_blocks(M, C), nb);
    CHECK(nb > 2, "bn order M%d C%d: %ld blocks, expected several", M, C, nb);
    for (int c = 0; c < C; c++) {
        double total = 0;
        for (long k = 0; k < nb; k++) {
            int lo = (int)(groups * k / nb) * 8, hi = (int)(groups * (k + 1) / nb) * 8;
            hi = hi < M ? hi : M;
            double part = 0;
            for (int i0 = lo; i0 < hi; i0 += 8) {
                float ev = 0, od = 0;
                for (int i = i0; i < i0 + 8 && i < hi; i++) {
                    if ((i - i0) % 2 == 0)
                        ev += dy[(size_t)i * C + c];
                    else
                        od += dy[(size_t)i * C + c];
                }
                part += (double)(ev + od);
            }
            total += part;
        }
        if ((float)total != db[c] && bad++ < 3)
            CHECK(0, "bn order M%d C%d: dbeta[%d] %a, the documented order gives %a", M, C, c,
                  (double)db[c], (double)(float)total);
    }
    nn_pool_free(pool);
    free(x), free(dy), free(y), free(g), free(b), free(mm), free(mv), free(st), free(dg), free(db);
    free(red);
}

/* ---- relu, dropout, concat -------------------------------------------------- */

typedef struct elem_ctx {
    size_t n;
    float *x, *y, *R, *mask;
} elem_ctx;

static double relu_loss(void *p)
{
    elem_ctx *c = p;
    nn_relu_forward(c->y, c->x, c->n);
    return dot(c->y, c->R, c->n);
}

static double dropout_loss(void *p)
{
    elem_ctx *c = p;
    nn_dropout_forward(c->y, c->x, c->mask, c->n);
    return dot(c->y, c->R, c->n);
}

static void test_relu_dropout(void)
{
    size_t n = 257;
    elem_ctx c = {n, rand_vec(n, 1), rand_vec(n, 0), rand_vec(n, 1), rand_vec(n, 0)};
    for (size_t i = 0; i < n; i++) c.x[i] += c.x[i] > 0 ? 0.05f : -0.05f; /* away from the kink */
    float *dx = rand_vec(n, 0);
    relu_loss(&c);
    nn_relu_backward(dx, false, c.R, c.y, n);
    grad_check("relu dx", c.x, n, dx, relu_loss, &c, 0);

    /* dropout: a fixed mask from a seed */
    size_t big = 100000;
    float *mask = rand_vec(big, 0), *mask2 = rand_vec(big, 0);
    nn_dropout_mask(mask, big, 0.3f, 77);
    nn_dropout_mask(mask2, big, 0.3f, 77);
    size_t zeros = 0, other = 0, same = 0;
    for (size_t i = 0; i < big; i++) {
        if (mask[i] == 0.0f)
            zeros++;
        else if (fabsf(mask[i] - 1.0f / 0.7f) > 1e-6f)
            other++;
        same += mask[i] == mask2[i];
    }
    CHECK(other == 0, "dropout mask has %zu values other than 0 and 1/keep", other);
    CHECK(fabs((double)zeros / big - 0.3) < 0.01, "dropout dropped %.4f, expected 0.3",
          (double)zeros / big);
    CHECK(same == big, "same seed gave a different mask");
    nn_dropout_mask(mask2, big, 0.3f, 78);
    same = 0;
    for (size_t i = 0; i < big; i++) same += mask[i] == mask2[i];
    CHECK(same < big * 0.8, "another seed gave (nearly) the same mask: %zu of %zu", same, big);
    memcpy(c.mask, mask, sizeof(float) * n);
    dropout_loss(&c);
    nn_dropout_backward(dx, false, c.R, c.mask, n);
    grad_check("dropout dx", c.x, n, dx, dropout_loss, &c, 0);
    free(c.x), free(c.y), free(c.R), free(c.mask), free(dx), free(mask), free(mask2);
}

typedef struct concat_ctx {
    int M, Cs[3];
    float *x[3], *y, *R;
} concat_ctx;

static double concat_loss(void *p)
{
    concat_ctx *c = p;
    const float *ins[3] = {c->x[0], c->x[1], c->x[2]};
    nn_concat_forward(c->y, ins, c->Cs, 3, c->M);
    return dot(c->y, c->R, (size_t)c->M * (c->Cs[0] + c->Cs[1] + c->Cs[2]));
}

static void test_concat(void)
{
    concat_ctx c = {5, {3, 1, 4}, {0, 0, 0}, 0, 0};
    int Ct = 8;
    for (int j = 0; j < 3; j++) c.x[j] = rand_vec((size_t)c.M * c.Cs[j], 1);
    c.y = rand_vec((size_t)c.M * Ct, 0), c.R = rand_vec((size_t)c.M * Ct, 1);
    concat_loss(&c);
    CHECK(c.y[Ct + 3] == c.x[1][1] && c.y[4] == c.x[2][0], "concat places channels wrongly");
    float *dx[3];
    bool acc[3] = {false, true, false};
    for (int j = 0; j < 3; j++) dx[j] = rand_vec((size_t)c.M * c.Cs[j], 0);
    for (int i = 0; i < c.M; i++) dx[1][i] = 1.0f; /* acc: adds to 1 */
    float *const dxs[3] = {dx[0], dx[1], dx[2]};
    nn_concat_backward(dxs, acc, c.R, c.Cs, 3, c.M);
    for (int i = 0; i < c.M; i++) dx[1][i] -= 1.0f;
    for (int j = 0; j < 3; j++) {
        char what[32];
        snprintf(what, sizeof what, "concat dx%d", j);
        grad_check(what, c.x[j], (size_t)c.M * c.Cs[j], dx[j], concat_loss, &c, 0);
    }
    for (int j = 0; j < 3; j++) free(c.x[j]), free(dx[j]);
    free(c.y), free(c.R);
}

/* ---- elementwise sum (residual add) ----------------------------------------- */

typedef struct sum_ctx {
    int nin;
    size_t n;
    bool relu;
    float *x[4], *y, *R;
} sum_ctx;

static double sum_loss(void *p)
{
    sum_ctx *c = p;
    const float *ins[4] = {c->x[0], c->x[1], c->x[2], c->x[3]};
    nn_sum_forward(c->y, ins, c->nin, c->n, c->relu);
    return dot(c->y, c->R, c->n);
}

static void test_sum(int nin, size_t n, bool relu)
{
    sum_ctx c = {nin, n, false, {0}, rand_vec(n, 0), rand_vec(n, 1)};
    for (int j = 0; j < nin; j++) c.x[j] = rand_vec(n, 1);
    sum_loss(&c);
    double maxe = 0;
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int j = 0; j < nin; j++) s += c.x[j][i];
        maxe = fmax(maxe, fabs(s - c.y[i]));
    }
    CHECK(maxe < 1e-6, "sum of %d: forward error %g", nin, maxe);
    float *dx[4] = {0}, *dy = rand_vec(n, 0);
    bool acc[4] = {false, true, false, false};
    for (int j = 0; j < nin; j++) dx[j] = rand_vec(n, 0);
    for (size_t i = 0; i < n; i++) dx[1][i] = 1.0f; /* acc: adds to 1 */
    memcpy(dy, c.R, sizeof(float) * n);
    float *const dxs[4] = {dx[0], dx[1], dx[2], dx[3]};
    nn_sum_backward(dxs, acc, nin, dy, c.y, n, false);
    for (size_t i = 0; i < n; i++) dx[1][i] -= 1.0f;
    for (int j = 0; j < nin; j++) {
        char what[32];
        snprintf(what, sizeof what, "sum of %d dx%d", nin, j);
        grad_check(what, c.x[j], n, dx[j], sum_loss, &c, 0);
    }
    if (relu) {
        /* fused ReLU: max(0, sum), and every input gets dout masked by out > 0 */
        float *plain = pst_malloc(sizeof(float) * n), *dm = NULL;
        sum_loss(&c);
        for (size_t i = 0; i < n; i++) plain[i] = c.y[i] > 0 ? c.y[i] : 0.0f;
        dm = masked(c.R, c.y, n);
        c.relu = true;
        sum_loss(&c);
        check_fused("sum forward", plain, c.y, n);
        memcpy(dy, c.R, sizeof(float) * n);
        bool none[4] = {false, false, false, false};
        nn_sum_backward(dxs, none, nin, dy, c.y, n, true);
        for (int j = 0; j < nin; j++) check_fused("sum backward", dm, dx[j], n);
        free(plain), free(dm);
    }
    for (int j = 0; j < nin; j++) free(c.x[j]), free(dx[j]);
    free(c.y), free(c.R), free(dy);
}

/* ---- softmax cross-entropy ------------------------------------------------------- */

typedef struct xent_ctx {
    int N, K;
    float smoothing;
    float *z;
    int32_t *labels;
} xent_ctx;

static double xent_loss(void *p)
{
    xent_ctx *c = p;
    return nn_softmax_xent(NULL, c->z, c->labels, c->N, c->K, c->smoothing, NULL, NULL);
}

static void test_xent(float smoothing)
{
    xent_ctx c = {6, 5, smoothing, rand_vec(30, 3), pst_malloc(sizeof(int32_t) * 6)};
    for (int i = 0; i < c.N; i++) c.labels[i] = (i * 3) % c.K;
    float *dz = rand_vec(30, 0);
    int32_t pred[6];
    int correct = -1;
    double loss = nn_softmax_xent(dz, c.z, c.labels, c.N, c.K, smoothing, &correct, pred);
    /* loss and accuracy by the textbook formula */
    double ref = 0;
    int rc = 0;
    for (int i = 0; i < c.N; i++) {
        double s = 0;
        int best = 0;
        for (int k = 0; k < c.K; k++) {
            s += exp(c.z[i * c.K + k]);
            if (c.z[i * c.K + k] > c.z[i * c.K + best]) best = k;
        }
        for (int k = 0; k < c.K; k++) {
            double q = (1 - smoothing) * (k == c.labels[i]) + smoothing / c.K;
            ref -= q * log(exp(c.z[i * c.K + k]) / s);
        }
        rc += best == c.labels[i];
        CHECK(pred[i] == best, "pred[%d] = %d, expected %d", i, pred[i], best);
    }
    CHECK_CLOSE(loss, ref / c.N, 1e-9, 1e-6, "xent loss (smoothing %g)", smoothing);
    CHECK(correct == rc, "ncorrect %d, expected %d", correct, rc);
    char what[48];
    snprintf(what, sizeof what, "xent smoothing %g dlogits", smoothing);
    grad_check(what, c.z, 30, dz, xent_loss, &c, 0);
    /* stable for huge logits; log K for equal ones */
    for (int i = 0; i < 30; i++) c.z[i] = (i % 5 == 0) ? 1000.0f : -1000.0f;
    loss = nn_softmax_xent(dz, c.z, c.labels, c.N, c.K, smoothing, NULL, NULL);
    CHECK(isfinite(loss), "loss not finite for logits of +-1000");
    for (int i = 0; i < 30; i++) CHECK(isfinite(dz[i]), "dlogits[%d] not finite", i);
    for (int i = 0; i < 30; i++) c.z[i] = 7.0f;
    loss = nn_softmax_xent(NULL, c.z, c.labels, c.N, c.K, smoothing, NULL, NULL);
    CHECK_CLOSE(loss, log(5.0), 1e-9, 1e-6, "equal logits give log K");
    free(c.z), free(c.labels), free(dz);
}

/* Set: test_conv_paths's layers pad their weight gradient's images per
 * task (nn_conv_dims.no_shared_pad). */
static bool no_shared_pad;

/* The AVX-512 kernels against the portable path on shapes of real layers:
 * forward, input and weight gradient agree to float rounding, and so does
 * the weight gradient of a call without an input gradient (a model's first
 * layer: the one-channel kernels take it). */
static void test_conv_paths(int N, int H, int W, int C, int K, int KH, int KW, int SH, int SW,
                            int PH, int PW)
{
    nn_conv_dims d = {N,    H, W, C, KH, KW, SH, SW, PH, PW, 0, 0, K, NN_WINO_AUTO, no_shared_pad,
                      false};
    nn_conv_dims_finish(&d);
    size_t nx = (size_t)N * H * W * C, nw = (size_t)KH * KW * C * K,
           ny = (size_t)N * d.OH * d.OW * K;
    float *x = rand_vec(nx, 1), *w = rand_vec(nw, 0.5f), *b = rand_vec(K, 0.5f),
          *R = rand_vec(ny, 1), *scratch = rand_vec(nn_conv_scratch(&d), 0);
    float *y[2], *dx[2], *dw[2], *dw1[2], *dy = rand_vec(ny, 0);
    for (int mode = 0; mode < 2; mode++) {
        nn_narrow_use_simd(mode);
        y[mode] = rand_vec(ny, 1), dx[mode] = rand_vec(nx, 1), dw[mode] = rand_vec(nw, 1);
        dw1[mode] = rand_vec(nw, 1);
        nn_conv2d_forward(y[mode], x, w, b, &d, true, NULL, scratch, 0);
        /* both backward passes take the ReLU mask of y[0]: a pre-ReLU value
         * within the two forwards' rounding of zero would flip otherwise */
        memcpy(dy, R, sizeof(float) * ny);
        nn_conv2d_backward(dx[mode], false, dw[mode], NULL, dy, y[0], x, w, &d, true, NULL, scratch,
                           0);
        memcpy(dy, R, sizeof(float) * ny);
        nn_conv2d_backward(NULL, false, dw1[mode], NULL, dy, y[0], x, w, &d, true, NULL, scratch,
                           0);
    }
    const float *a[4] = {y[0], dx[0], dw[0], dw1[0]}, *f[4] = {y[1], dx[1], dw[1], dw1[1]};
    size_t n[4] = {ny, nx, nw, nw};
    const char *what[4] = {"forward", "input gradient", "weight gradient",
                           "weight gradient without dinp"};
    for (int t = 0; t < 4; t++) {
        double maxe = 0, maxv = 0;
        for (size_t i = 0; i < n[t]; i++) {
            maxe = fmax(maxe, fabs((double)a[t][i] - f[t][i]));
            maxv = fmax(maxv, fabs((double)a[t][i]));
        }
        CHECK(maxe <= 1e-5 * (1 + maxv), "conv %dx%dx%d->%d k%dx%d s%d,%d p%d,%d: %s differs by %g",
              H, W, C, K, KH, KW, SH, SW, PH, PW, what[t], maxe);
    }
    for (int mode = 0; mode < 2; mode++)
        free(y[mode]), free(dx[mode]), free(dw[mode]), free(dw1[mode]);
    free(x), free(w), free(b), free(R), free(scratch), free(dy);
}

/* nn_cf_pack_flip's AVX-512 transposes (16 x 16 register blocks) store the
 * bits of the portable loop and every float of the packed kernel: odd C and
 * K (partial 16-blocks and a partial last 64-channel block), a 1x1 kernel,
 * a 3x3 one; the two packs start from different garbage, so a float that
 * one of them leaves unwritten differs. */
static void test_cf_pack_flip(int KH, int KW, int C, int K)
{
    const size_t nw = (size_t)KH * KW * C * K, np = nn_cf_packed_floats(KH * KW * K, C);
    float *w = rand_vec(nw, 1);
    float *wp[2] = {pst_aligned_alloc(sizeof(float) * np), pst_aligned_alloc(sizeof(float) * np)};
    const bool simd = nn_narrow_use_simd(-1);
    for (int mode = 0; mode < 2; mode++) {
        for (size_t i = 0; i < np; i++) wp[mode][i] = mode ? -3.0f : 5.0f;
        nn_narrow_use_simd(mode && simd);
        nn_cf_pack_flip(wp[mode], w, KH, KW, C, K);
    }
    nn_narrow_use_simd(simd);
    CHECK(memcmp(wp[0], wp[1], sizeof(float) * np) == 0,
          "nn_cf_pack_flip %dx%d C %d K %d: the AVX-512 transposes differ from the portable loop",
          KH, KW, C, K);
    free(w), free(wp[0]), free(wp[1]);
}

/* nn_cf_transpose16 (AVX-512): dst[k][i] = src[i][k] for i < nrow and
 * k < ncol, else 0, in the first nout rows of dst; rows from nout on and the
 * floats between rows untouched. */
static void test_cf_transpose16(void)
{
    const int ld = 21;
    float src[16 * 21], dst[16 * 21];
    for (int i = 0; i < 16 * ld; i++) src[i] = (float)(i + 1);
    const int cases[][3] = {{16, 16, 16}, {5, 16, 16}, {0, 16, 16},
                            {16, 7, 7},   {9, 3, 3},   {16, 1, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int nrow = cases[c][0], ncol = cases[c][1], nout = cases[c][2];
        for (int i = 0; i < 16 * ld; i++) dst[i] = -1.0f;
        nn_cf_transpose16(dst, ld, nout, src, ld, nrow, ncol);
        int bad = 0;
        for (int k = 0; k < 16; k++)
            for (int i = 0; i < ld; i++) {
                float want = k >= nout || i >= 16   ? -1.0f
                             : i < nrow && k < ncol ? src[i * ld + k]
                                                    : 0.0f;
                bad += dst[k * ld + i] != want;
            }
        CHECK(bad == 0, "nn_cf_transpose16 nrow %d ncol %d nout %d: %d floats wrong", nrow, ncol,
              nout, bad);
    }
}

/* nn_cf_forward with non-temporal stores (g.stream, the pointwise passes
 * whose output exceeds L3) stores the same bits as with ordinary stores,
 * also with a partial last channel block and with rows that are not 64-byte
 * aligned (which take the ordinary stores), and writes nothing outside its
 * channel block. */
static void test_cf_stream(void)
{
    const int rows = 53, C = 40, K = 80, nkb = (K + 63) / 64;
    float *x = rand_vec((size_t)rows * C, 1), *w = rand_vec((size_t)C * K, 0.5f),
          *b = rand_vec(K, 0.5f);
    float *wp = pst_aligned_alloc(sizeof(float) * nn_cf_packed_floats(C, K));
    nn_cf_pack(wp, w, C, K);
    const size_t n = (size_t)rows * K + 16;
    float *o[2] = {pst_aligned_alloc(sizeof(float) * n), pst_aligned_alloc(sizeof(float) * n)};
    for (int shift = 0; shift < 2; shift++)
        for (int relu = 0; relu < 2; relu++) {
            for (int s = 0; s < 2; s++) {
                for (size_t i = 0; i < n; i++) o[s][i] = -7.0f;
                nn_cf_geom g = {1, rows, 0, C, 1, 0, C, 1, 0, s == 1};
                for (int kb = 0; kb < nkb; kb++)
                    nn_cf_forward(o[s] + shift, x, &g, wp, K, kb, b, relu, false);
            }
            CHECK(
                memcmp(o[0], o[1], sizeof(float) * n) == 0,
                "nn_cf_forward: non-temporal stores (shift %d, relu %d) differ from ordinary ones",
                shift, relu);
            CHECK(o[1][0] == -7.0f || shift == 0, "nn_cf_forward wrote before its output");
            CHECK(o[1][(size_t)rows * K + shift] == -7.0f, "nn_cf_forward wrote past its output");
        }
    free(x), free(w), free(b), free(wp), free(o[0]), free(o[1]);
}

int main(void)
{
    nn_blis_init();
    nn_rng_seed(&rng, 12345);

    test_dense(3, 7, 5, false);
    test_dense(4, 9, 6, true);
    test_dense(1, 1, 1, false);

    /* convolutions and pools run AVX-512 kernels where the CPU has them:
     * check those and the portable versions */
    bool simd = nn_narrow_use_simd(-1);
    for (int mode = simd ? 1 : 0; mode >= 0; mode--) {
        nn_narrow_use_simd(mode);
        fprintf(stderr, "conv and pool kernels: %s\n", mode ? "AVX-512" : "portable");
        /*          N  H  W  C  K KH KW SH SW PH PW bias relu */
        test_conv(2, 7, 7, 3, 4, 3, 3, 1, 1, 1, 1, true, false);  /* same padding */
        test_conv(2, 8, 6, 2, 3, 3, 3, 2, 2, 0, 0, true, false);  /* stride 2, floor drops a row */
        test_conv(1, 9, 7, 3, 2, 5, 5, 2, 2, 2, 2, false, false); /* 5x5, stride 2, pad 2 */
        test_conv(2, 5, 5, 3, 4, 1, 1, 1, 1, 0, 0, true, false);  /* pointwise: direct gemm */
        test_conv(2, 6, 5, 2, 3, 1, 1, 2, 2, 0, 0, true, false);  /* 1x1 stride 2 */
        test_conv(1, 7, 5, 2, 3, 2, 3, 1, 2, 1, 0, true, false);
        test_conv(2, 9, 11, 1, 6, 5, 5, 1, 1, 2, 2, true,
                  false); /* one channel, as a first layer */
        test_conv(2, 8, 7, 1, 16, 3, 3, 1, 1, 1, 1, false, true); /* one channel, 16 outputs */
        /* one channel: rows of 14 + 14 + 2 pixels (resnet-20's stem), 14 + 3 */
        test_conv(2, 5, 30, 1, 16, 3, 3, 1, 1, 1, 1, true, true);
        test_conv(2, 6, 17, 1, 12, 3, 3, 1, 1, 1, 1, false, false);
        test_conv(2, 6, 6, 3, 24, 3, 3, 1, 1, 1, 1, true, false); /* 17..32 outputs */
        test_conv(1, 5, 5, 2, 40, 3, 3, 2, 2, 1, 1, true, false);
        /* > 32 outputs: BLIS */                                    /* non-square everything */
        test_conv(2, 6, 6, 3, 5, 3, 3, 1, 1, 1, 1, true, true);     /* fused ReLU */
        test_conv(2, 5, 5, 1, 6, 5, 5, 1, 1, 2, 2, true, true);     /* lenet conv1 shape, C=1 */
        test_conv(13, 28, 28, 1, 6, 5, 5, 1, 1, 2, 2, true, false); /* several im2col chunks */
        test_conv(3, 4, 4, 2, 2, 3, 3, 3, 3, 1, 1, false, false);   /* stride 3 */
        /* Inception-v3's factorised kernels (separate padding) and ResNet's
         * strided 1x1 projections, narrow (K <= 32) and through BLIS */
        test_conv(2, 7, 9, 3, 5, 1, 7, 1, 1, 0, 3, false, false);
        test_conv(2, 9, 7, 3, 5, 7, 1, 1, 1, 3, 0, false, true);
        test_conv(1, 6, 8, 4, 40, 1, 7, 1, 1, 0, 3, false, false);
        test_conv(1, 8, 6, 4, 36, 7, 1, 1, 1, 3, 0, false, false);
        test_conv(2, 5, 6, 3, 20, 1, 3, 1, 1, 0, 1, false, false);
        test_conv(2, 6, 5, 3, 34, 3, 1, 1, 1, 1, 0, false, false);
        test_conv(2, 7, 6, 5, 40, 1, 1, 2, 2, 0, 0, false, false); /* strided projection */
        test_conv(1, 4, 4, 3, 8, 1, 1, 2, 2, 0, 0, false, false);
        /* K > 32: the implicit-GEMM kernels of conv_fast.c (AVX-512) */
        test_conv(2, 6, 5, 3, 40, 3, 3, 1, 1, 1, 1, true, true);      /* C = 3 */
        test_conv(3, 5, 6, 1, 37, 3, 2, 1, 1, 1, 0, false, false);    /* C = 1, K % 16 != 0 */
        test_conv(2, 5, 7, 8, 70, 1, 7, 1, 1, 0, 3, false, false);    /* 1x7, two k blocks */
        test_conv(2, 7, 5, 8, 48, 7, 1, 1, 1, 3, 0, true, false);     /* 7x1 */
        test_conv(2, 9, 8, 5, 33, 3, 3, 2, 2, 1, 1, true, false);     /* stride 2 */
        test_conv(2, 7, 7, 6, 130, 3, 3, 2, 1, 0, 1, false, false);   /* SH != SW, 3 blocks */
        test_conv(5, 3, 3, 20, 36, 3, 3, 1, 1, 0, 0, false, false);   /* unpadded, 5 per call */
        test_conv(3, 4, 4, 24, 80, 1, 1, 1, 1, 0, 0, true, true);     /* pointwise */
        test_conv(3, 5, 5, 20, 66, 1, 1, 2, 2, 0, 0, false, false);   /* 1x1 stride 2 */
        test_conv(1, 2, 2, 64, 1024, 3, 3, 1, 1, 1, 1, false, false); /* dw in one slice */
        test_conv(2, 5, 4, 7, 50, 2, 2, 1, 1, 1, 1, false, false);    /* PH = KH-1 */
        test_conv(2, 4, 5, 6, 34, 1, 3, 1, 1, 1, 1, false, false);    /* PH > KH-1: GEMM dgrad */
        test_conv(2, 6, 5, 32, 24, 3, 3, 1, 1, 0, 0, true, false);    /* K <= 32, C >= 32 */
        /* narrow, 8-16 input channels: the input gradient as a convolution
         * of dy (flipped kernel), dw with whole-vector window rows */
        test_conv(2, 7, 6, 16, 16, 3, 3, 1, 1, 1, 1, false, false); /* resnet-20 stage 1 */
        test_conv(2, 6, 7, 12, 8, 3, 3, 1, 1, 0, 0, true, true);    /* dy padded by 2 */
        test_conv(2, 7, 6, 16, 32, 3, 3, 2, 2, 1, 1, false, true);  /* resnet-20 4/c1 */
        test_conv(2, 6, 6, 8, 24, 3, 5, 1, 1, 1, 2, false, false);  /* 17..32 dy channels */

        test_pool(true, 2, 6, 6, 3, 2, 2, 2, 0, false);
        test_pool(true, 1, 7, 7, 2, 3, 3, 2, 1, false);
        test_pool(true, 2, 5, 4, 3, 3, 2, 1, 1, false);
        test_pool(false, 2, 6, 6, 3, 2, 2, 2, 0, false);
        test_pool(false, 1, 7, 7, 2, 3, 3, 1, 1, false); /* inception-mini tower: not counted */
        test_pool(false, 2, 5, 4, 3, 5, 4, 1, 0, false); /* global average */
        test_pool(true, 2, 5, 4, 3, 5, 4, 1, 0, false);  /* global max */
        /* torchvision's pools: ResNet-50's max 3x3/2 pad 1; Inception-v3's max
         * 3x3/2 valid and avg_pool2d(3, 1, 1) with the padding counted */
        test_pool(true, 2, 9, 8, 5, 3, 3, 2, 1, false);
        test_pool(true, 1, 9, 10, 3, 3, 3, 2, 0, false);
        test_pool(false, 2, 6, 5, 18, 3, 3, 1, 1, true);
        test_pool(false, 1, 7, 7, 2, 3, 3, 2, 1, true);
        test_pool_count_pad_values();
        test_maxpool_bits(2, 10, 9, 70, 3, 2, 1);  /* resnet-50's pool; 64 + 6 channels */
        test_maxpool_bits(1, 10, 11, 20, 3, 2, 0); /* the last row and column in no window */
        test_maxpool_bits(2, 7, 6, 3, 3, 1, 1);
        test_avgpool_bits(2, 7, 7, 40, 0, 1, 0); /* global, as resnet-50's */
        test_avgpool_bits(1, 6, 4, 18, 2, 2, 0); /* 2x2/2 windows tile the image */
        test_avgpool_bits(2, 5, 5, 20, 2, 2, 0); /* a row and a column in no window */
        test_avgpool_bits(1, 6, 5, 18, 3, 1, 1); /* overlapping windows */
    }
    nn_narrow_use_simd(simd);
    if (simd) {
        /*              N   H   W    C    K KH KW SH SW PH PW */
        test_conv_paths(3, 14, 14, 64, 64, 3, 3, 1, 1, 1, 1);
        test_conv_paths(3, 28, 28, 16, 16, 3, 3, 1, 1, 1, 1); /* resnet-20 stage 1 */
        test_conv_paths(3, 28, 28, 1, 16, 3, 3, 1, 1, 1, 1);  /* resnet-20's stem */
        /* resnet-20's 16->32 3x3/2 (4/c1) and K = 24: narrow dw in 8-channel
         * blocks of whole-vector window rows */
        test_conv_paths(3, 28, 28, 16, 32, 3, 3, 2, 2, 1, 1);
        test_conv_paths(2, 11, 12, 16, 24, 3, 3, 2, 2, 1, 1);
        test_conv_paths(2, 9, 19, 1, 6, 5, 5, 1, 1, 2, 2); /* LeNet's conv1: 2 dw passes */
        test_conv_paths(2, 10, 9, 16, 8, 3, 3, 1, 1, 1, 1);
        test_conv_paths(2, 9, 11, 8, 24, 3, 5, 1, 1, 1, 2);
        test_conv_paths(2, 14, 13, 48, 200, 1, 1, 1, 1, 0, 0);
        test_conv_paths(2, 14, 14, 64, 96, 1, 1, 2, 2, 0, 0);
        test_conv_paths(2, 9, 9, 40, 56, 1, 7, 1, 1, 0, 3);
        test_conv_paths(2, 9, 9, 40, 56, 7, 1, 1, 1, 3, 0);
        test_conv_paths(2, 19, 19, 3, 64, 7, 7, 2, 2, 3, 3);
        test_conv_paths(9, 7, 7, 96, 80, 3, 3, 1, 1, 1, 1);
        test_conv_paths(2, 11, 11, 16, 24, 3, 3, 1, 1, 0, 0);
        test_conv_paths(2, 11, 11, 32, 32, 3, 3, 1, 1, 0, 0);
        /* 1x1 layers with enough pixels for 8 weight-gradient slices (all
         * channel blocks in one task) and several prefetched pixel blocks:
         * odd pixel counts, channels not multiples of 16, batch 1 */
        test_conv_paths(8, 45, 47, 24, 80, 1, 1, 1, 1, 0, 0);
        /* narrow 1x1 layers: the narrow kernels against BLIS, the weight
         * gradient in blocks of input channels */
        test_conv_paths(9, 7, 7, 128, 16, 1, 1, 1, 1, 0, 0);
        test_conv_paths(12, 20, 20, 40, 12, 1, 1, 1, 1, 0, 0);
        test_conv_paths(8, 92, 91, 20, 72, 1, 1, 2, 2, 0, 0);
        test_conv_paths(1, 40, 41, 200, 40, 1, 1, 1, 1, 0, 0);
        test_conv_paths(1, 33, 35, 40, 200, 1, 1, 1, 1, 0, 0);
        /* strided, few kernel rows: the input gradient's dcol blocks */
        test_conv_paths(3, 23, 21, 5, 70, 5, 5, 2, 2, 2, 2);
        test_conv_paths(2, 30, 29, 3, 64, 7, 7, 2, 2, 3, 3);
        test_conv_paths(2, 14, 15, 40, 48, 3, 3, 2, 2, 1, 1);
        /* strided, many kernel rows: the input gradient in image groups
         * (two groups of 3 and 2; blocks of 64 kernel rows across taps
         * when C = 72, K not a multiple of 16) */
        test_conv_paths(5, 15, 15, 128, 160, 3, 3, 2, 2, 1, 1);
        test_conv_paths(4, 11, 11, 72, 300, 3, 3, 2, 2, 0, 0);
        /* the weight gradient of padded images per range of input channels
         * (no shared padded batch): 8 ranges of 16, 7 of 5-6 channels */
        no_shared_pad = true;
        test_conv_paths(5, 15, 15, 128, 160, 3, 3, 2, 2, 1, 1);
        test_conv_paths(3, 14, 15, 40, 48, 3, 3, 2, 2, 1, 1);
        test_conv_paths(2, 9, 10, 24, 40, 5, 5, 1, 1, 2, 2);
        no_shared_pad = false;
        /* unpadded, strided, an image over 512 KB (Inception's 6a): the
         * channel-range tasks too */
        test_conv_paths(2, 33, 33, 130, 48, 3, 3, 2, 2, 0, 0);
        /* a 1x1 weight gradient with one slice and 5 channel blocks: tasks
         * of 4 blocks and of 1 (groups of CONV_WG_CHAN_KB), 4 row blocks */
        test_conv_paths(1, 5, 5, 256, 300, 1, 1, 1, 1, 0, 0);
        test_cf_stream();
        test_cf_transpose16();
        test_cf_pack_flip(3, 3, 64, 64);
        test_cf_pack_flip(3, 3, 72, 40); /* a second, partial 64-channel block */
        test_cf_pack_flip(1, 1, 100, 37);
        test_cf_pack_flip(1, 7, 5, 130);
        test_cf_pack_flip(3, 1, 160, 3);
        nn_narrow_use_simd(simd);
    }

    test_bn(12, 3, false, 1e-3f);
    test_bn(50, 4, true, 1e-3f);
    test_bn(2, 1, false, 1e-3f);
    /* torchvision's eps, and a variance near eps so that eps matters */
    test_bn(20, 3, false, 1e-5f);
    test_bn_eps_matters();
    test_bn_large_mean();
    test_bn_wide();
    test_bn(40, 16, true, 1e-3f); /* one 16-channel vector chunk */
    test_bn(24, 40, true, 1e-3f); /* a row at a time: 32 channels as vectors, 8 one by one */
    test_bn(20, 72, true, 1e-3f); /* the same, 64 and 8 */
    test_bn(30, 24, false, 1e-3f);
    test_bn(30, 24, true, 1e-3f); /* 16 channels and a half chunk of 8 in registers */
    test_bn(30, 8, true, 1e-3f);  /* the half chunk alone */
    for (int relu = 0; relu < 2; relu++)
        for (int dres = 0; dres < 3; dres++) {
            test_bn_res(700, 16, relu, dres, dres == 1);
            test_bn_res(300, 56, relu, dres, false); /* chunks of 32 and 16, 8 left */
            test_bn_res(50, 5, relu, dres, true);
            test_bn_res(301, 24, relu, dres, dres == 2);
            test_bn_res(301, 8, relu, dres, dres == 1);
        }
    for (int mode = 0; mode < 5; mode++) {
        test_bn_two(700, 16, mode, mode == 1);
        test_bn_two(400, 32, mode, false);
        test_bn_two(300, 48, mode, mode == 2);
        test_bn_two(300, 56, mode, false);
        test_bn_two(50, 5, mode, mode == 0);
        test_bn_two(301, 24, mode, mode == 4);
        test_bn_two(301, 8, mode, mode == 3);
        test_bn_two(200, 200, mode, mode == 3); /* a row at a time: 192 as vectors, 8 left */
    }
    test_bn_order(2051, 48);
    test_bn_order(2051, 24);
    test_bn_order(50176, 24); /* inception-mini's stem at batch 64 */
    test_bn_order(12544, 8);  /* its 8-channel towers */
    test_bn_order(2051, 64);
    test_bn_order(3136, 64);
    test_bn_order(2051, 72);
    test_bn_order(600, 200);
    test_bn_order(389, 256);
    test_bn_order(20001, 5);
    test_bn_threads(7001, 16);
    test_bn_threads(2051, 48);
    test_bn_threads(2051, 64);
    test_bn_threads(1501, 80);
    test_bn_threads(3001, 40);
    test_bn_threads(2051, 24);
    test_bn_threads(12544, 8);
    test_bn_threads(389, 256);
    test_bn_threads(600, 200);
    test_bn_ld(1201, 8, 64);
    test_bn_ld(1201, 24, 40);
    test_bn_ld(1201, 64, 176);
    test_bn_ld(803, 40, 41);
    test_bn_ld(803, 80, 128);
    test_bn_ld(389, 200, 288);

    test_relu_dropout();
    test_concat();
    test_sum(2, 37, false);
    test_sum(3, 64, true);
    test_xent(0.0f);
    test_xent(0.1f);
    return check_exit();
}
