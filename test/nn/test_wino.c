/* test_wino.c - the Winograd F(2x2, 3x3) and F(4x4, 3x3) convolutions (conv_wino.c)
 * against a double-precision direct convolution, forward, input and weight
 * gradients, AVX-512 and portable, on odd sizes, paddings 0, 1 and 2,
 * tile counts that are not multiples of the block, C and K not multiples
 * of 16, batch 1.
 *
 * Tolerance: the error bound of conv_wino.c's header, per output,
 *   2 (C + 8) u ( |b| + sum_c A^T[(|G||g||G^T|) . (|B^T||d||B|)]A ),
 * computed here in double from the data: C + 8 roundings deep (the sum
 * over c, two additions in each transform, U rounded once, the bias),
 * doubled for the second-order terms of gamma_n. A wrong transform, tile
 * origin or border gives errors of the order of the outputs, far above it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "conv_wino_impl.h"
#include "layers.h"
#include "pstrain/pool.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"
#include "pstrain/model.h"

static nn_rng rng;
/* The Winograd choice of the layers under test (nn_conv_dims.wino). */
static int wino = NN_WINO_AUTO;

static float *rand_vec(size_t n, float scale)
{
    float *v = pst_malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = (2.0f * nn_rng_uniform(&rng) - 1.0f) * scale;
    return v;
}

static const double BT[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
static const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double AT[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};

/* F(4x4, 3x3) (16 -> 16 channels, mode 3 or 1): points 0, -1, 1, 1/2, -2 */
static const double BT4[6][6] = {{1, -1.5, -2, 1.5, 1, 0}, {0, 1, -2.5, 0.5, 1, 0},
                                 {0, -1, 0.5, 2.5, 1, 0},  {0, -2, -1, 2, 1, 0},
                                 {0, 0.5, -1, -0.5, 1, 0}, {0, 1, -1.5, -2, 1.5, 1}};
static const double G4[6][3] = {{1, 0, 0},
                                {-1.0 / 3, 1.0 / 3, -1.0 / 3},
                                {1.0 / 3, 1.0 / 3, 1.0 / 3},
                                {-16.0 / 15, -8.0 / 15, -4.0 / 15},
                                {1.0 / 15, -2.0 / 15, 4.0 / 15},
                                {0, 0, 1}};
static const double AT4[4][6] = {
    {1, 1, 1, 1, 1, 0}, {0, -1, 1, 0.5, -2, 0}, {0, 1, 1, 0.25, 4, 0}, {0, -1, 1, 0.125, -8, 1}};

/* The transform of the reference: m = 2 (F(2x2)) or 4 (F(4x4)); an input
 * tile has n = m + 2 rows, a transformed tile n*n positions. */
static int tile_m = 2;
static double bt(int i, int j)
{
    return tile_m == 2 ? BT[i][j] : BT4[i][j];
}
static double gm(int i, int j)
{
    return tile_m == 2 ? G[i][j] : G4[i][j];
}
static double at(int i, int j)
{
    return tile_m == 2 ? AT[i][j] : AT4[i][j];
}

/* |B^T||d||B| of the input tile of image n whose corner is (h0, w0), per
 * position p and channel c: vd[p * C + c] (zero padding outside the image). */
static void abs_input_tile(double *vd, const float *x, const nn_conv_dims *d, int n, int h0, int w0)
{
    const int C = d->C, T = tile_m + 2;
    for (int c = 0; c < C; c++)
        for (int p = 0; p < T * T; p++) {
            double s = 0;
            for (int a = 0; a < T; a++)
                for (int e = 0; e < T; e++) {
                    int h = h0 + a, w = w0 + e;
                    if (h < 0 || h >= d->H || w < 0 || w >= d->W) continue;
                    s += fabs(bt(p / T, a)) * fabs(x[(((size_t)n * d->H + h) * d->W + w) * C + c]) *
                         fabs(bt(p % T, e));
                }
            vd[p * C + c] = s;
        }
}

/* ref[N][OH][OW][K] = direct convolution of x (dims d, 3x3, stride 1) with
 * k[3][3][C][K] + b, in double; bnd = the bound above (F(4x4): its
 * transforms are deeper, 2 (C + 16) u). */
static void reference(double *ref, double *bnd, const float *x, const float *k, const float *b,
                      const nn_conv_dims *d)
{
    const int C = d->C, K = d->K, m = tile_m, T = m + 2, P = T * T;
    const double depth = m == 2 ? C + 8 : C + 16;
    double *ug = pst_malloc(sizeof(double) * P * C * K); /* |G||g||G^T| */
    for (int c = 0; c < C; c++)
        for (int o = 0; o < K; o++)
            for (int p = 0; p < P; p++) {
                double s = 0;
                for (int a = 0; a < 3; a++)
                    for (int e = 0; e < 3; e++)
                        s += fabs(gm(p / T, a)) * fabs(k[((a * 3 + e) * C + c) * K + o]) *
                             fabs(gm(p % T, e));
                ug[((size_t)p * C + c) * K + o] = s;
            }
    double *vd = pst_malloc(sizeof(double) * P * C);
    for (int n = 0; n < d->N; n++)
        for (int ty = 0; ty < (d->OH + m - 1) / m; ty++)
            for (int tx = 0; tx < (d->OW + m - 1) / m; tx++) {
                int h0 = m * ty - d->PH, w0 = m * tx - d->PW;
                abs_input_tile(vd, x, d, n, h0, w0);
                for (int a = 0; a < m; a++)
                    for (int e = 0; e < m; e++) {
                        int oh = m * ty + a, ow = m * tx + e;
                        if (oh >= d->OH || ow >= d->OW) continue;
                        for (int o = 0; o < K; o++) {
                            double s = b ? b[o] : 0, mb = b ? fabs(b[o]) : 0;
                            for (int kh = 0; kh < 3; kh++)
                                for (int kw = 0; kw < 3; kw++) {
                                    int h = oh - d->PH + kh, w = ow - d->PW + kw;
                                    if (h < 0 || h >= d->H || w < 0 || w >= d->W) continue;
                                    const float *xi = x + (((size_t)n * d->H + h) * d->W + w) * C;
                                    for (int c = 0; c < C; c++)
                                        s += (double)xi[c] * k[((kh * 3 + kw) * C + c) * K + o];
                                }
                            for (int p = 0; p < P; p++) {
                                double t = fabs(at(a, p / T)) * fabs(at(e, p % T));
                                if (t == 0) continue;
                                for (int c = 0; c < C; c++)
                                    mb += t * ug[((size_t)p * C + c) * K + o] * vd[p * C + c];
                            }
                            size_t i = (((size_t)n * d->OH + oh) * d->OW + ow) * K + o;
                            ref[i] = s;
                            bnd[i] = 2.0 * depth * ldexp(1.0, -24) * mb;
                        }
                    }
            }
    free(ug), free(vd);
}

/* The weight gradient dw[3][3][C][K] = sum over pixels of x windows times dy,
 * in double, and its bound: 2 (NT + depth) u G^T[sum over tiles |V| |Z|]G
 * per (c, k) (|.| elementwise, Z = A dY A^T, A = (A^T)^T), the tiles summed
 * one by one (NT deep at most), the slices, the transforms (depth 16, or
 * 32 for F(4x4)'s deeper transforms). tile_m says which variant. */
static void reference_dw(double *ref, double *bnd, const float *x, const float *dy,
                         const nn_conv_dims *d)
{
    const int C = d->C, K = d->K, m = tile_m, T = m + 2, P = T * T;
    const int TH = (d->OH + m - 1) / m, TW = (d->OW + m - 1) / m;
    const size_t nt = (size_t)d->N * TH * TW;
    const double depth = m == 2 ? 16 : 32;
    double *ms = pst_malloc(sizeof(double) * P * C * K), *vd = pst_malloc(sizeof(double) * P * C),
           *zd = pst_malloc(sizeof(double) * P * K);
    memset(ms, 0, sizeof(double) * P * C * K);
    memset(ref, 0, sizeof(double) * 9 * C * K);
    for (int n = 0; n < d->N; n++)
        for (int ty = 0; ty < TH; ty++)
            for (int tx = 0; tx < TW; tx++) {
                int h0 = m * ty - d->PH, w0 = m * tx - d->PW;
                abs_input_tile(vd, x, d, n, h0, w0);
                for (int k = 0; k < K; k++)
                    for (int p = 0; p < P; p++) {
                        double s = 0;
                        for (int a = 0; a < m; a++)
                            for (int e = 0; e < m; e++) {
                                int oh = m * ty + a, ow = m * tx + e;
                                if (oh >= d->OH || ow >= d->OW) continue;
                                s += fabs(at(a, p / T)) *
                                     fabs(dy[(((size_t)n * d->OH + oh) * d->OW + ow) * K + k]) *
                                     fabs(at(e, p % T));
                            }
                        zd[p * K + k] = s;
                    }
                for (int p = 0; p < P; p++)
                    for (int c = 0; c < C; c++)
                        for (int k = 0; k < K; k++)
                            ms[((size_t)p * C + c) * K + k] += vd[p * C + c] * zd[p * K + k];
            }
    for (int n = 0; n < d->N; n++)
        for (int oh = 0; oh < d->OH; oh++)
            for (int ow = 0; ow < d->OW; ow++)
                for (int t = 0; t < 9; t++) {
                    int h = oh - d->PH + t / 3, w = ow - d->PW + t % 3;
                    if (h < 0 || h >= d->H || w < 0 || w >= d->W) continue;
                    const float *xi = x + (((size_t)n * d->H + h) * d->W + w) * C;
                    const float *g = dy + (((size_t)n * d->OH + oh) * d->OW + ow) * K;
                    for (int c = 0; c < C; c++)
                        for (int k = 0; k < K; k++)
                            ref[((size_t)t * C + c) * K + k] += (double)xi[c] * g[k];
                }
    for (int t = 0; t < 9; t++)
        for (int c = 0; c < C; c++)
            for (int k = 0; k < K; k++) {
                double s = 0;
                for (int p = 0; p < P; p++)
                    s += fabs(gm(p / T, t / 3)) * fabs(gm(p % T, t % 3)) *
                         ms[((size_t)p * C + c) * K + k];
                bnd[((size_t)t * C + c) * K + k] = 2.0 * ((double)nt + depth) * ldexp(1.0, -24) * s;
            }
    free(ms), free(vd), free(zd);
}

/* Worst |got - ref| / bound over n values (and whether all are finite). */
static double worst(const float *got, const double *ref, const double *bnd, size_t n)
{
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(got[i] - ref[i]) / (bnd[i] > 1e-30 ? bnd[i] : 1e-30);
        if (!(e <= w)) w = e; /* NaN wins */
    }
    return w;
}

/* sqrt(sum (got - ref)^2 / sum ref^2): the typical error, relative */
static double rms_rel(const float *got, const double *ref, size_t n)
{
    double e = 0, r = 0;
    for (size_t i = 0; i < n; i++) e += (got[i] - ref[i]) * (got[i] - ref[i]), r += ref[i] * ref[i];
    return r > 0 ? sqrt(e / r) : sqrt(e);
}

/* The bound above is a worst case, loose by ~500x on random data (F(4x4)'s
 * |B^T|, |A^T| reach 5/2 and 8): a coefficient 1e-5 off stays under it.
 * The typical error is sharper: on these shapes F(2x2)'s is below 4e-7,
 * F(4x4)'s (forward in float: docs/design.md §12 says why float
 * was chosen; input and weight gradients) below 9e-7, the direct
 * kernels' up to 5e-7; a coefficient of B^T, G or A^T 1e-5 off gives
 * 1.2e-5 and more (forward: 1.6e-6 and more). fwd: the forward's limit, C its input channels (the
 * sum over 32 to 64 channels is deeper). WINO_RMS=1 prints each pass's error. */
static double rms_tol(bool fwd, int C)
{
    return tile_m == 2 ? 1e-6 : !fwd ? 1.5e-6 : C <= 16 ? 8e-7 : 1.1e-6;
}

static void test_wino(int N, int H, int W, int C, int K, int PH, int PW, bool relu, bool acc)
{
    nn_conv_dims d = {N, H, W, C, 3, 3, 1, 1, PH, PW, 0, 0, K, wino, false, false};
    nn_conv_dims_finish(&d);
    CHECK(nn_wino_ok(&d), "wino N%d %dx%dx%d->%d p%d,%d: not taken with NN_WINO %d", N, H, W, C, K,
          PH, PW, wino);
    /* mode 3 (and 1 with AVX-512) take F(4x4) for the forward and input
     * gradient of C and K multiples of 16 up to 64 (and the weight gradient
     * of 16 -> 16) */
    const bool mode3 = wino == NN_WINO_F4;
    const int fwd_m = mode3 && C % 16 == 0 && K % 16 == 0 && C <= 64 && K <= 64 ? 4 : 2;
    const int dgrad_m = fwd_m;
    tile_m = fwd_m;
    size_t nx = (size_t)N * H * W * C, nw = (size_t)9 * C * K, ny = (size_t)N * d.OH * d.OW * K;
    float *x = rand_vec(nx, 1), *w = rand_vec(nw, 0.5f), *b = rand_vec(K, 0.5f);
    float *dy = rand_vec(ny, 1), *dyc = pst_malloc(sizeof(float) * ny);
    float *y = rand_vec(ny, 1), *dx = rand_vec(nx, 1), *dw = pst_malloc(sizeof(float) * nw);
    float *dx0 = pst_malloc(sizeof(float) * nx);
    memcpy(dx0, dx, sizeof(float) * nx);
    size_t sc = nn_conv_scratch(&d);
    float *scratch = pst_aligned_alloc(sizeof(float) * sc);
    double *ref = pst_malloc(sizeof(double) * (nx > ny ? nx : ny));
    double *bnd = pst_malloc(sizeof(double) * (nx > ny ? nx : ny));

    /* forward (ReLU checked against the reference's own max) */
    nn_conv2d_forward(y, x, w, b, &d, relu, NULL, scratch, sc);
    reference(ref, bnd, x, w, b, &d);
    if (relu)
        for (size_t i = 0; i < ny; i++) ref[i] = ref[i] > 0 ? ref[i] : 0;
    double e = worst(y, ref, bnd, ny);
    CHECK(rms_rel(y, ref, ny) <= rms_tol(true, C), "wino forward N%d %dx%dx%d->%d: rms error %.3g",
          N, H, W, C, K, rms_rel(y, ref, ny));
    if (getenv("WINO_RMS"))
        fprintf(stderr, "F(%dx%d) simd %d forward N%d %dx%dx%d->%d: rms %.3g, %.3g of the bound\n",
                tile_m, tile_m, nn_narrow_use_simd(-1), N, H, W, C, K, rms_rel(y, ref, ny), e);
    CHECK(e <= 1.0, "wino forward N%d %dx%dx%d->%d p%d,%d relu%d: error %.3g of the bound", N, H, W,
          C, K, PH, PW, relu, e);

    /* weight gradient (dy as masked by ReLU: dyc after the call) */
    if (nn_wino_wgrad_ok(&d)) {
        memcpy(dyc, dy, sizeof(float) * ny);
        nn_conv2d_backward(NULL, false, dw, NULL, dyc, y, x, w, &d, relu, NULL, scratch, sc);
        double *rw = pst_malloc(sizeof(double) * nw), *bw = pst_malloc(sizeof(double) * nw);
        reference_dw(rw, bw, x, dyc, &d);
        e = worst(dw, rw, bw, nw);
        if (getenv("WINO_RMS"))
            fprintf(stderr, "F(%dx%d) simd %d weight gradient N%d %dx%dx%d->%d: rms %.3g\n", tile_m,
                    tile_m, nn_narrow_use_simd(-1), N, H, W, C, K, rms_rel(dw, rw, nw));
        CHECK(rms_rel(dw, rw, nw) <= rms_tol(false, 0),
              "wino weight gradient N%d %dx%dx%d->%d: rms error %.3g", N, H, W, C, K,
              rms_rel(dw, rw, nw));
        CHECK(e <= 1.0, "wino weight gradient N%d %dx%dx%d->%d p%d,%d: error %.3g of the bound", N,
              H, W, C, K, PH, PW, e);
        free(rw), free(bw);
    }

    /* input gradient: the convolution of dy padded by 2 - P with the
     * flipped, transposed kernel, in the reference's own terms */
    memcpy(dyc, dy, sizeof(float) * ny);
    nn_conv2d_backward(dx, acc, dw, NULL, dyc, y, x, w, &d, false, NULL, scratch, sc);
    nn_conv_dims g = {N, d.OH, d.OW, K, 3, 3, 1, 1, 2 - PH, 2 - PW, 0, 0, C, wino, false, false};
    nn_conv_dims_finish(&g);
    CHECK(g.OH == H && g.OW == W, "transposed dims");
    tile_m = dgrad_m;
    float *wf = pst_malloc(sizeof(float) * nw);
    for (int t = 0; t < 9; t++)
        for (int c = 0; c < C; c++)
            for (int k = 0; k < K; k++)
                wf[((size_t)t * K + k) * C + c] = w[((size_t)(8 - t) * C + c) * K + k];
    reference(ref, bnd, dy, wf, NULL, &g);
    if (acc)
        for (size_t i = 0; i < nx; i++)
            ref[i] += dx0[i], bnd[i] += 2 * ldexp(1.0, -24) * fabs(ref[i]);
    e = worst(dx, ref, bnd, nx);
    if (getenv("WINO_RMS"))
        fprintf(stderr, "F(%dx%d) simd %d input gradient N%d %dx%dx%d->%d: rms %.3g\n", tile_m,
                tile_m, nn_narrow_use_simd(-1), N, H, W, C, K, rms_rel(dx, ref, nx));
    CHECK(rms_rel(dx, ref, nx) <= rms_tol(false, 0),
          "wino input gradient N%d %dx%dx%d->%d: rms error %.3g", N, H, W, C, K,
          rms_rel(dx, ref, nx));
    CHECK(e <= 1.0, "wino input gradient N%d %dx%dx%d->%d p%d,%d acc%d: error %.3g of the bound", N,
          H, W, C, K, PH, PW, acc, e);

    /* the direct path (Winograd off) agrees within the same bounds */
    d.wino = NN_WINO_OFF;
    CHECK(!nn_wino_ok(&d), "NN_WINO_OFF still takes Winograd");
    float *dx2 = pst_malloc(sizeof(float) * nx), *y2 = pst_malloc(sizeof(float) * ny);
    size_t sc2 = nn_conv_scratch(&d);
    float *scratch2 = pst_aligned_alloc(sizeof(float) * sc2);
    memcpy(dx2, dx0, sizeof(float) * nx);
    memcpy(dyc, dy, sizeof(float) * ny);
    nn_conv2d_forward(y2, x, w, b, &d, false, NULL, scratch2, sc2);
    nn_conv2d_backward(dx2, acc, dw, NULL, dyc, y2, x, w, &d, false, NULL, scratch2, sc2);
    e = worst(dx2, ref, bnd, nx);
    CHECK(e <= 1.0, "direct input gradient N%d %dx%dx%d->%d: error %.3g of the bound", N, H, W, C,
          K, e);

    free(scratch), free(scratch2), free(ref), free(bnd), free(wf), free(dx2), free(y2);
    free(x), free(w), free(b), free(dy), free(dyc), free(y), free(dx), free(dw), free(dx0);
}

/* The three passes on no pool and on pools of 1, 2 and 3 threads give the
 * same bits: F(4x4)'s weight gradient of 32 to 64 channels at shapes with
 * several slices (fixed by the shapes: conv_wino4_wgrad.c's w4k_slices);
 * F(2x2)'s blocks of tiles, whose count follows T, and its backward in one
 * loop (no pool: the two passes apart, the reference). */
static void test_wino_threads(int N, int H, int W, int C, int K)
{
    nn_conv_dims d = {N, H, W, C, 3, 3, 1, 1, 1, 1, 0, 0, K, wino, false, false};
    nn_conv_dims_finish(&d);
    size_t nx = (size_t)N * H * W * C, nw = (size_t)9 * C * K, ny = (size_t)N * d.OH * d.OW * K;
    size_t stride = (nn_conv_scratch(&d) + 15) / 16 * 16;
    float *x = rand_vec(nx, 1), *w = rand_vec(nw, 0.5f), *R = rand_vec(ny, 1);
    float *dy = pst_malloc(sizeof(float) * ny), *y[4], *dx[4], *dw[4];
    for (int t = 0; t < 4; t++) {
        nn_pool *pool = NULL;
        pst_err e;
        if (t > 0 && nn_pool_new(&pool, t, &e) < 0) pst_die("%s", e.msg);
        float *scratch = pst_aligned_alloc(sizeof(float) * stride * (t > 0 ? t : 1));
        y[t] = pst_malloc(sizeof(float) * ny), dx[t] = pst_malloc(sizeof(float) * nx);
        dw[t] = pst_malloc(sizeof(float) * nw);
        nn_conv2d_forward(y[t], x, w, NULL, &d, false, pool, scratch, stride);
        memcpy(dy, R, sizeof(float) * ny);
        if (t == 0 && nn_wino_wgrad_ok(&d) && nn_wino_dgrad_ok(&d)) {
            /* the reference: the two passes apart (nn_wino_backward may
             * run them in one loop) */
            nn_wino_wgrad(dw[t], dy, x, &d, NULL, scratch, stride);
            nn_wino_dgrad(dx[t], false, dy, w, &d, NULL, scratch, stride);
        } else
            nn_conv2d_backward(dx[t], false, dw[t], NULL, dy, y[t], x, w, &d, false, pool, scratch,
                               stride);
        free(scratch);
        nn_pool_free(pool);
    }
    for (int t = 1; t < 4; t++)
        CHECK(!memcmp(y[0], y[t], sizeof(float) * ny) &&
                  !memcmp(dx[0], dx[t], sizeof(float) * nx) &&
                  !memcmp(dw[0], dw[t], sizeof(float) * nw),
              "wino NN_WINO %d N%d %dx%dx%d->%d: %d threads differ from no pool", wino, N, H, W, C,
              K, t);
    for (int t = 0; t < 4; t++) free(y[t]), free(dx[t]), free(dw[t]);
    free(x), free(w), free(R), free(dy);
}

/* F(4x4)'s kernel transform with AVX-512 (conv_wino4.c, docs/design.md §12)
 * computes each U[p][c][k] = (G g G^T)[a][b] in double in a fixed order
 * and rounds it once: t[a][j] = fma(G[a][2], g[2][j], fma(G[a][1],
 * g[1][j], G[a][0] g[0][j])) (g[i][j] the tap of row i, column j), then
 * u = fma(t[a][2], G[b][2], fma(t[a][1], G[b][1], t[a][0] G[b][0])). Every
 * float of U, forward and flipped (the input gradient's), against that
 * order written out with fma() (an order left to the compiler differs in
 * 1 ulp for ~0.06% of U on such data). Data
 * with full 24-bit mantissas over 8 decades. */
static void test_u4_order(int C, int K, bool flip)
{
    nn_conv_dims d = {1, 8, 8, C, 3, 3, 1, 1, 1, 1, 0, 0, K, wino, false, false};
    nn_conv_dims_finish(&d);
    float *w = pst_malloc(sizeof(float) * 9 * C * K);
    for (int i = 0; i < 9 * C * K; i++)
        w[i] = (2.0f * nn_rng_uniform(&rng) - 1.0f) * (1.0f + nn_rng_uniform(&rng)) *
               powf(10.0f, (float)(i % 9) - 4.0f);
    wi_job j = {.d = &d, .w = w, .flip = flip, .v = &nn_wi_f4};
    wi_tile(&j);
    int nu = j.v->setup(&j);
    const size_t ps = j.uf / 36;
    float *U = pst_malloc(sizeof(float) * j.uf);
    for (int r = 0; r < nu; r++) j.v->u_row(&j, U, r);
    long bad = 0;
    for (int c = 0; c < C; c++)
        for (int k = 0; k < K; k++) {
            double g[3][3], t[6][3];
            for (int tap = 0; tap < 9; tap++)
                g[tap / 3][tap % 3] = flip ? w[((size_t)(8 - tap) * K + k) * C + c]
                                           : w[((size_t)tap * C + c) * K + k];
            for (int a = 0; a < 6; a++)
                for (int jj = 0; jj < 3; jj++)
                    t[a][jj] =
                        fma(G4[a][2], g[2][jj], fma(G4[a][1], g[1][jj], G4[a][0] * g[0][jj]));
            for (int a = 0; a < 6; a++)
                for (int b = 0; b < 6; b++) {
                    float u =
                        (float)fma(t[a][2], G4[b][2], fma(t[a][1], G4[b][1], t[a][0] * G4[b][0]));
                    float got = U[(size_t)(6 * a + b) * ps + (size_t)c * K + k];
                    if (memcmp(&u, &got, sizeof u) != 0 && bad++ < 3)
                        fprintf(stderr, "  U[%d][%d][%d] = %.9g, the documented order %.9g\n",
                                6 * a + b, c, k, (double)got, (double)u);
                }
        }
    CHECK(bad == 0, "F(4x4) U %d -> %d flip %d: %ld floats not in the documented order", C, K, flip,
          bad);
    free(U), free(w);
}

/* `test_nn_wino --accuracy`: the forward's error at real layer shapes
 * (docs/design.md §12),
 * relative to the outputs' standard deviation, against a double-precision
 * direct convolution: ReLU outputs (max(0, N(0, 1))) times He-initialised
 * kernels (N(0, 2 / 9C)), no bias; and the weight gradient's, with dy ~
 * N(0, 1), relative to the gradient's standard deviation: typical (rms)
 * and largest, the direct kernels (mode 0), F(2x2) (mode 2) and F(4x4)
 * (mode 3), AVX-512 and portable. Prints, checks nothing. */
static void accuracy_row(int N, int H, int W, int C, int K)
{
    nn_conv_dims d = {N, H, W, C, 3, 3, 1, 1, 1, 1, 0, 0, K, wino, false, false};
    nn_conv_dims_finish(&d);
    size_t nx = (size_t)N * H * W * C, nw = (size_t)9 * C * K, ny = (size_t)N * d.OH * d.OW * K;
    float *x = pst_malloc(sizeof(float) * nx), *w = pst_malloc(sizeof(float) * nw);
    float *y = pst_malloc(sizeof(float) * ny);
    double *ref = pst_malloc(sizeof(double) * ny), *acc = pst_malloc(sizeof(double) * K);
    for (size_t i = 0; i < nx; i++) {
        double v = nn_rng_normal(&rng);
        x[i] = v > 0 ? (float)v : 0.0f;
    }
    for (size_t i = 0; i < nw; i++) w[i] = (float)(nn_rng_normal(&rng) * sqrt(2.0 / (9.0 * C)));
    double s1 = 0, s2 = 0;
    for (int n = 0; n < N; n++)
        for (int oh = 0; oh < d.OH; oh++)
            for (int ow = 0; ow < d.OW; ow++) {
                for (int k = 0; k < K; k++) acc[k] = 0;
                for (int t = 0; t < 9; t++) {
                    int h = oh - 1 + t / 3, ww = ow - 1 + t % 3;
                    if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                    const float *xi = x + (((size_t)n * H + h) * W + ww) * C;
                    for (int c = 0; c < C; c++) {
                        const float *wk = w + ((size_t)t * C + c) * K;
                        for (int k = 0; k < K; k++) acc[k] += (double)xi[c] * wk[k];
                    }
                }
                double *r = ref + (((size_t)n * d.OH + oh) * d.OW + ow) * K;
                for (int k = 0; k < K; k++) r[k] = acc[k], s1 += acc[k], s2 += acc[k] * acc[k];
            }
    double sd = sqrt(s2 / ny - (s1 / ny) * (s1 / ny));
    /* the weight gradient's reference, dy ~ N(0, 1) */
    float *dy = pst_malloc(sizeof(float) * ny), *dw = pst_malloc(sizeof(float) * nw);
    double *rw = pst_malloc(sizeof(double) * nw), w1 = 0, w2 = 0;
    for (size_t i = 0; i < ny; i++) dy[i] = (float)nn_rng_normal(&rng);
    for (size_t i = 0; i < nw; i++) rw[i] = 0;
    for (int n = 0; n < N; n++)
        for (int oh = 0; oh < d.OH; oh++)
            for (int ow = 0; ow < d.OW; ow++) {
                const float *g = dy + (((size_t)n * d.OH + oh) * d.OW + ow) * K;
                for (int t = 0; t < 9; t++) {
                    int h = oh - 1 + t / 3, ww = ow - 1 + t % 3;
                    if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                    const float *xi = x + (((size_t)n * H + h) * W + ww) * C;
                    for (int c = 0; c < C; c++) {
                        double *r = rw + ((size_t)t * C + c) * K;
                        for (int k = 0; k < K; k++) r[k] += (double)xi[c] * g[k];
                    }
                }
            }
    for (size_t i = 0; i < nw; i++) w1 += rw[i], w2 += rw[i] * rw[i];
    double sdw = sqrt(w2 / nw - (w1 / nw) * (w1 / nw));
    static const char *name[4] = {"direct", "", "F(2x2)", "F(4x4)"};
    bool simd = nn_narrow_use_simd(-1);
    for (int s = simd ? 1 : 0; s >= 0; s--) {
        nn_narrow_use_simd(s);
        for (int mode = 0; mode <= 3; mode++) {
            if (mode == 1) continue;
            d.wino = mode == 0 ? NN_WINO_OFF : mode == 2 ? NN_WINO_F2 : NN_WINO_F4;
            size_t sc = nn_conv_scratch(&d);
            float *scratch = pst_aligned_alloc(sizeof(float) * (sc ? sc : 1));
            nn_conv2d_forward(y, x, w, NULL, &d, false, NULL, scratch, sc);
            double e2 = 0, em = 0;
            for (size_t i = 0; i < ny; i++) {
                double e = fabs(y[i] - ref[i]);
                e2 += e * e, em = e > em ? e : em;
            }
            float *dyc = pst_malloc(sizeof(float) * ny);
            memcpy(dyc, dy, sizeof(float) * ny);
            nn_conv2d_backward(NULL, false, dw, NULL, dyc, y, x, w, &d, false, NULL, scratch, sc);
            double f2 = 0, fm = 0;
            for (size_t i = 0; i < nw; i++) {
                double e = fabs(dw[i] - rw[i]);
                f2 += e * e, fm = e > fm ? e : fm;
            }
            printf("N%-2d %3dx%-3d %2d->%-2d %-7s %-8s forward %.2e %.2e  weight gradient %.2e "
                   "%.2e\n",
                   N, H, W, C, K, name[mode], s ? "AVX-512" : "portable", sqrt(e2 / ny) / sd,
                   em / sd, sqrt(f2 / nw) / sdw, fm / sdw);
            free(dyc);
            fflush(stdout);
            free(scratch);
        }
    }
    nn_narrow_use_simd(simd);
    free(x), free(w), free(y), free(ref), free(acc), free(dy), free(dw), free(rw);
}

int main(int argc, char **argv)
{
    nn_blis_init();
    nn_rng_seed(&rng, 777);
    if (argc > 1 && !strcmp(argv[1], "--accuracy")) {
        accuracy_row(64, 28, 28, 16, 16);
        accuracy_row(64, 14, 14, 32, 32);
        accuracy_row(64, 7, 7, 64, 64);
        accuracy_row(8, 56, 56, 64, 64);
        return 0;
    }
    bool simd = nn_narrow_use_simd(-1);
    if (simd)
        for (int n = 16; n <= 64; n += 16) {
            test_u4_order(n, n, false);
            test_u4_order(n, n, true);
            test_u4_order(n, 80 - n, true);
        }
    wino = NN_WINO_F2;
    for (int mode = simd ? 1 : 0; mode >= 0; mode--) {
        nn_narrow_use_simd(mode);
        /*      N   H   W   C   K  PH PW relu acc */
        test_wino(2, 9, 7, 5, 19, 1, 1, true, false);
        test_wino(1, 8, 8, 16, 16, 1, 1, false, true);
        test_wino(3, 7, 7, 64, 64, 1, 1, true, true);
        test_wino(2, 11, 10, 24, 40, 0, 0, false, false);
        test_wino(1, 6, 9, 3, 72, 2, 1, false, true);
        test_wino(2, 14, 13, 33, 17, 1, 0, true, false);
        test_wino(1, 3, 3, 1, 1, 0, 0, false, false);
        test_wino(5, 12, 12, 16, 48, 1, 1, false, false); /* several blocks of tiles */
        test_wino(4, 30, 29, 16, 20, 1, 1, true, false);  /* 3 weight-gradient slices */
        /* res4-like: one weight-gradient slice of 128 channels */
        test_wino(2, 14, 14, 128, 96, 1, 1, false, false);
        /* F(2x2) on 1-3 threads: blocks of whole steps of 12 (K = 96), 6
         * (256) and 24 (80) rows, their count rounded up to a multiple of
         * T (conv_wino.c's wi_blocks): other blocks, the same bits */
        test_wino_threads(3, 14, 14, 128, 96);
        test_wino_threads(2, 14, 14, 256, 256);
        test_wino_threads(2, 9, 9, 32, 80);
        /* the weight gradient's slice tasks and the input gradient's blocks in
         * one loop (nn_wi2_backward) on 1-3 threads: one slice in 1-2 channel
         * groups, 2 slices */
        test_wino_threads(6, 14, 14, 128, 64);
        test_wino_threads(4, 28, 28, 64, 96);
        /* F(4x4) for 16 -> 16: partial tiles, paddings 0-2, several blocks */
        wino = NN_WINO_F4;
        test_wino(2, 9, 7, 16, 16, 1, 1, true, true);
        test_wino(1, 8, 8, 16, 16, 0, 0, false, false);
        test_wino(1, 6, 10, 16, 16, 2, 1, false, true);
        test_wino(5, 28, 28, 16, 16, 1, 1, false, false);
        test_wino(1, 2, 3, 16, 16, 1, 1, true, false);
        test_wino(11, 28, 27, 16, 16, 1, 0, false, false); /* 2 weight-gradient slices */
        /* F(4x4)'s input gradient of 32 to 64 channels (F(2x2) forward and
         * weight gradient) */
        test_wino(3, 7, 7, 64, 64, 1, 1, true, true);
        test_wino(2, 14, 13, 32, 32, 1, 0, false, false);
        test_wino(1, 9, 10, 32, 64, 1, 1, true, false);
        test_wino(2, 6, 11, 48, 16, 0, 2, false, true);
        /* its weight gradient of 32 to 64 channels: 2 and 3 slices; on a
         * pool (and no pool) with the input gradient's F(4x4) blocks in one
         * loop (nn_wi4k_backward), the reference the two passes apart (fails
         * when the blocks' U is put over the slices' dU) */
        test_wino(17, 14, 14, 32, 32, 1, 1, true, false);
        test_wino_threads(48, 14, 14, 32, 32);
        test_wino_threads(80, 7, 7, 64, 64);
        test_wino_threads(9, 30, 29, 32, 64);
        wino = NN_WINO_AUTO;
        test_wino_threads(48, 14, 14, 32, 32);
        wino = NN_WINO_F2;
    }
    nn_narrow_use_simd(simd);
    return check_exit();
}
