/* test_conv_threads.c - convolutions on the model's pool give the same
 * bits for every thread count: forward, input, weight and bias gradients
 * on pools of 1, 2 and 3 threads against no pool, on every path (the
 * AVX-512 implicit-GEMM kernels, narrow, one-channel, GEMM, pointwise,
 * strided, Winograd), AVX-512 and portable, and against the strided input
 * gradient in a loop of its own. Also run under ThreadSanitizer
 * (jobs/test.sh): the tasks share the packed kernel and the partials. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "layers.h"
#include "pstrain/pool.h"
#include "pstrain/blas.h"
#include "pstrain/common.h"
#include "pstrain/model.h"

/* The Winograd choice of every layer here (nn_conv_dims.wino). */
static int wino = NN_WINO_AUTO;

static nn_rng rng;

static float *rand_vec(size_t n, float scale)
{
    float *v = pst_malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) v[i] = (2.0f * nn_rng_uniform(&rng) - 1.0f) * scale;
    return v;
}

/* Forward, input, weight and bias gradients on pools of 1, 2 and 3 threads
 * (and no pool) are bitwise equal: the work is cut by the shapes only. So
 * are they without the shared padded batch of the weight gradient (t = 4,
 * no pool; t = 5, 6: 2 and 3 threads), which cuts the weight gradient into
 * channel-range tasks that pad into the thread's own scratch, in one loop
 * with the input gradient's tasks, which pad groups of dy there too (a
 * stale record of which group the area holds, seeded, failed on 3
 * threads). */
static void test_conv_threads(int N, int H, int W, int C, int K, int KH, int KW, int SH, int SW,
                              int PH, int PW, bool relu)
{
    nn_conv_dims d = {N, H, W, C, KH, KW, SH, SW, PH, PW, 0, 0, K, wino, false, false};
    nn_conv_dims_finish(&d);
    size_t nx = (size_t)N * H * W * C, nw = (size_t)KH * KW * C * K,
           ny = (size_t)N * d.OH * d.OW * K, stride = (nn_conv_scratch(&d) + 15) / 16 * 16;
    float *x = rand_vec(nx, 1), *w = rand_vec(nw, 0.5f), *b = rand_vec(K, 0.5f),
          *R = rand_vec(ny, 1), *dy = rand_vec(ny, 0);
    float *y[8], *dx[8], *dw[8], *db[8];
    for (int t = 0; t < 8; t++) { /* t = 0: no pool; 4: no pool, no shared padding; 5, 6: 2, 3
                                     threads, no shared padding; 7: no pool, a strided input
                                     gradient in a loop of its own */
        nn_pool *pool = NULL;
        pst_err e;
        const int T = t == 4 || t == 7 ? 0 : t < 4 ? t : t - 3;
        if (T > 0 && nn_pool_new(&pool, T, &e) < 0) pst_die("%s", e.msg);
        d.no_shared_pad = t >= 4 && t < 7, d.no_fuse_strided = t == 7;
        float *scratch = pst_aligned_alloc(sizeof(float) * stride * (T > 0 ? T : 1));
        y[t] = rand_vec(ny, 1), dx[t] = rand_vec(nx, 1), dw[t] = rand_vec(nw, 1);
        db[t] = rand_vec(K, 1);
        nn_conv2d_forward(y[t], x, w, b, &d, relu, pool, scratch, stride);
        memcpy(dy, R, sizeof(float) * ny);
        nn_conv2d_backward(dx[t], false, dw[t], db[t], dy, y[t], x, w, &d, relu, pool, scratch,
                           stride);
        free(scratch);
        nn_pool_free(pool);
    }
    for (int t = 1; t < 8; t++) {
        bool same =
            !memcmp(y[0], y[t], sizeof(float) * ny) && !memcmp(dx[0], dx[t], sizeof(float) * nx) &&
            !memcmp(dw[0], dw[t], sizeof(float) * nw) && !memcmp(db[0], db[t], sizeof(float) * K);
        CHECK(same, "conv N%d %dx%dx%d->%d k%dx%d s%d p%d,%d: %s differ from no pool", N, H, W, C,
              K, KH, KW, SH, PH, PW,
              t == 7   ? "the strided input gradient apart"
              : t == 4 ? "no shared padding"
              : t == 5 ? "2 threads, no shared padding"
              : t == 6 ? "3 threads, no shared padding"
              : t == 1 ? "1 thread"
              : t == 2 ? "2 threads"
                       : "3 threads");
    }
    for (int t = 0; t < 8; t++) free(y[t]), free(dx[t]), free(dw[t]), free(db[t]);
    free(x), free(w), free(b), free(R), free(dy);
}

/* A call with fewer images than the batch its scratch was sized for (a
 * model's last, partial batch) stays within that scratch, whose image
 * groups may then be larger than the batch's (7x7 outputs: groups of up to
 * 6 images, evened to 4 + 4 at N = 8, one group of 6 at N = 6), and gives
 * the bits of a scratch sized for the call, on 1 and 2 threads. */
static void test_conv_small_batch(int B, int N, int H, int W, int C, int K, int KH, int KW, int S,
                                  int P)
{
    nn_conv_dims db = {B, H, W, C, KH, KW, S, S, P, P, 0, 0, K, wino, false, false}, d = db;
    d.N = N;
    nn_conv_dims_finish(&db), nn_conv_dims_finish(&d);
    const size_t nx = (size_t)N * H * W * C, nw = (size_t)KH * KW * C * K,
                 ny = (size_t)N * d.OH * d.OW * K, guard = 1u << 18;
    float *x = rand_vec(nx, 1), *w = rand_vec(nw, 0.5f), *R = rand_vec(ny, 1),
          *dy = rand_vec(ny, 0);
    float *y[3], *dx[3], *dw[3];
    for (int t = 0; t < 3; t++) { /* 0: scratch for N, no pool; 1, 2 threads: for B */
        nn_pool *pool = NULL;
        pst_err e;
        if (t > 0 && nn_pool_new(&pool, t, &e) < 0) pst_die("%s", e.msg);
        const size_t stride = (nn_conv_scratch(t ? &db : &d) + 15) / 16 * 16;
        const size_t n = stride * (t ? t : 1);
        float *scratch = pst_aligned_alloc(sizeof(float) * (n + guard));
        for (size_t i = 0; i < guard; i++) scratch[n + i] = 1234.5f;
        y[t] = rand_vec(ny, 1), dx[t] = rand_vec(nx, 1), dw[t] = rand_vec(nw, 1);
        nn_conv2d_forward(y[t], x, w, NULL, &d, false, pool, scratch, stride);
        memcpy(dy, R, sizeof(float) * ny);
        nn_conv2d_backward(dx[t], false, dw[t], NULL, dy, y[t], x, w, &d, false, pool, scratch,
                           stride);
        size_t bad = 0;
        for (size_t i = 0; i < guard; i++) bad += scratch[n + i] != 1234.5f;
        CHECK(bad == 0,
              "conv N%d (scratch for %d) %dx%dx%d->%d: %zu floats written past the scratch", N, B,
              H, W, C, K, bad);
        free(scratch);
        nn_pool_free(pool);
    }
    for (int t = 1; t < 3; t++)
        CHECK(!memcmp(y[0], y[t], sizeof(float) * ny) &&
                  !memcmp(dx[0], dx[t], sizeof(float) * nx) &&
                  !memcmp(dw[0], dw[t], sizeof(float) * nw),
              "conv N%d (scratch for %d) %dx%dx%d->%d on %d threads differs", N, B, H, W, C, K, t);
    for (int t = 0; t < 3; t++) free(y[t]), free(dx[t]), free(dw[t]);
    free(x), free(w), free(R), free(dy);
}

/* dw of the narrow kernel's layers with few slices of 2,048 pixels: 8
 * slices (conv.c's nn_cv_wgrad_slices), each summing its images in order, the
 * slices then added in slice order, on no pool and 1, 2, 3 threads.
 * Inception-mini's mixed_b/bdbl_2 (16 -> 32, 3x3, 7x7) at N = 16: slices
 * of 2 images, t0 + t1, then (t0 + t1) + (t2 + t3) + ..., where one slice
 * summed ((t0 + t1) + t2) + ... (fails on that binary); each image's t from
 * a call with N = 1. Also within 1e-4 of a double-precision sum. */
static void test_narrow_slices(void)
{
    enum { N = 16, H = 7, W = 7, C = 16, K = 32, SL = 8 };
    nn_conv_dims d = {N, H, W, C, 3, 3, 1, 1, 1, 1, 0, 0, K, wino, false, false}, d1 = d;
    d1.N = 1;
    nn_conv_dims_finish(&d), nn_conv_dims_finish(&d1);
    const size_t img = (size_t)H * W * C, oimg = (size_t)d.OH * d.OW * K, nw = (size_t)9 * C * K;
    float *x = rand_vec(N * img, 1), *w = rand_vec(nw, 0.5f), *dy = rand_vec(N * oimg, 1);
    float *ref = pst_calloc(nw, sizeof(float)), *sl = pst_calloc(nw, sizeof(float));
    float *t = pst_calloc(nw, sizeof(float));
    size_t stride = (nn_conv_scratch(&d1) + 15) / 16 * 16;
    float *scratch = pst_aligned_alloc(sizeof(float) * stride);
    for (int n = 0; n < N; n++) {
        nn_conv2d_backward(NULL, false, t, NULL, dy + n * oimg, NULL, x + n * img, w, &d1, false,
                           NULL, scratch, stride);
        for (size_t i = 0; i < nw; i++) sl[i] = n % (N / SL) ? sl[i] + t[i] : t[i];
        if (n % (N / SL) == N / SL - 1)
            for (size_t i = 0; i < nw; i++) ref[i] = n < N / SL ? sl[i] : ref[i] + sl[i];
    }
    free(scratch);
    /* the double-precision sum */
    double err = 0;
    for (int kh = 0; kh < 3; kh++)
        for (int kw = 0; kw < 3; kw++)
            for (int c = 0; c < C; c++)
                for (int k = 0; k < K; k++) {
                    double s = 0;
                    for (int n = 0; n < N; n++)
                        for (int oh = 0; oh < H; oh++)
                            for (int ow = 0; ow < W; ow++) {
                                int h = oh + kh - 1, wi = ow + kw - 1;
                                if (h < 0 || h >= H || wi < 0 || wi >= W) continue;
                                s += (double)x[n * img + ((size_t)h * W + wi) * C + c] *
                                     dy[n * oimg + ((size_t)oh * W + ow) * K + k];
                            }
                    double e = fabs(s - ref[((kh * 3 + kw) * C + c) * K + k]);
                    if (e > err) err = e;
                }
    CHECK(err < 1e-4, "narrow dw slices: %g from the double-precision sum", err);
    stride = (nn_conv_scratch(&d) + 15) / 16 * 16;
    for (int T = 0; T <= 3; T++) {
        nn_pool *pool = NULL;
        pst_err e;
        if (T > 0 && nn_pool_new(&pool, T, &e) < 0) pst_die("%s", e.msg);
        scratch = pst_aligned_alloc(sizeof(float) * stride * (T > 0 ? T : 1));
        float *dw = rand_vec(nw, 1), *dx = rand_vec(N * img, 1);
        nn_conv2d_backward(dx, false, dw, NULL, dy, NULL, x, w, &d, false, pool, scratch, stride);
        CHECK(!memcmp(dw, ref, sizeof(float) * nw),
              "narrow dw on %d threads: not 8 slices of 2 images summed in slice order", T);
        free(dw), free(dx), free(scratch);
        nn_pool_free(pool);
    }
    free(x), free(w), free(dy), free(ref), free(sl), free(t);
}

/* dw of a layer whose batch has 2,048-4,095 output pixels (one slice of
 * 2,048): 2 slices (conv.c's nn_cv_wgrad_slices), images
 * [0, N/2) and [N/2, N), each summed as a call of N/2 images (one slice of
 * its own) sums them, then added in slice order: dw(first half) +
 * dw(second half), where one slice summed all N images in one chain (fails
 * on that binary). On no pool and 1, 2, 3 threads, with the input gradient
 * (the fused loops) and without, the strided one apart too. */
static void test_two_slices(int N, int H, int W, int C, int K, int KH, int KW, int SH, int PH)
{
    nn_conv_dims d = {N, H, W, C, KH, KW, SH, SH, PH, PH, 0, 0, K, wino, false, false}, h = d;
    h.N = N / 2;
    nn_conv_dims_finish(&d), nn_conv_dims_finish(&h);
    CHECK(N % 2 == 0 && (size_t)N * d.OH * d.OW >= 2048 && (size_t)N * d.OH * d.OW < 4096,
          "two slices: N%d at %dx%d is not one slice of 2,048 pixels", N, d.OH, d.OW);
    const size_t img = (size_t)H * W * C, oimg = (size_t)d.OH * d.OW * K,
                 nw = (size_t)KH * KW * C * K;
    float *x = rand_vec(N * img, 1), *w = rand_vec(nw, 0.5f), *dy = rand_vec(N * oimg, 1);
    float *ref = pst_calloc(nw, sizeof(float)), *t = pst_calloc(nw, sizeof(float));
    size_t stride = (nn_conv_scratch(&h) + 15) / 16 * 16;
    float *scratch = pst_aligned_alloc(sizeof(float) * stride);
    for (int s = 0; s < 2; s++) {
        nn_conv2d_backward(NULL, false, s ? t : ref, NULL, dy + (size_t)s * h.N * oimg, NULL,
                           x + (size_t)s * h.N * img, w, &h, false, NULL, scratch, stride);
        if (s)
            for (size_t i = 0; i < nw; i++) ref[i] += t[i];
    }
    free(scratch);
    stride = (nn_conv_scratch(&d) + 15) / 16 * 16;
    for (int v = 0; v < 10; v++) { /* T = v % 4 (0: no pool); v >= 4: no input gradient; v >= 8:
                                      the strided input gradient in a loop of its own */
        const int T = v % 4;
        nn_pool *pool = NULL;
        pst_err e;
        if (T > 0 && nn_pool_new(&pool, T, &e) < 0) pst_die("%s", e.msg);
        d.no_fuse_strided = v >= 8;
        scratch = pst_aligned_alloc(sizeof(float) * stride * (T > 0 ? T : 1));
        float *dw = rand_vec(nw, 1), *dx = rand_vec(N * img, 1);
        nn_conv2d_backward(v >= 4 && v < 8 ? NULL : dx, false, dw, NULL, dy, NULL, x, w, &d, false,
                           pool, scratch, stride);
        CHECK(!memcmp(dw, ref, sizeof(float) * nw),
              "dw N%d %dx%dx%d->%d k%dx%d s%d on %d threads%s: not 2 slices of %d images summed "
              "in slice order",
              N, H, W, C, K, KH, KW, SH, T,
              v >= 8   ? ", strided dx apart"
              : v >= 4 ? ", no dx"
                       : "",
              N / 2);
        free(dw), free(dx), free(scratch);
        nn_pool_free(pool);
    }
    free(x), free(w), free(dy), free(ref), free(t);
}

int main(void)
{
    nn_blis_init();
    nn_rng_seed(&rng, 4321);
    bool simd = nn_narrow_use_simd(-1);
    /* the same cut for every thread count, on every path (fast, narrow,
     * one-channel, GEMM, pointwise), AVX-512 and portable */
    for (int mode = simd ? 1 : 0; mode >= 0; mode--) {
        nn_narrow_use_simd(mode);
        /*                N   H   W   C    K KH KW SH SW PH PW relu */
        test_conv_threads(7, 9, 9, 16, 72, 3, 3, 1, 1, 1, 1, true);
        test_conv_threads(5, 6, 7, 24, 40, 1, 1, 1, 1, 0, 0, false);
        test_conv_threads(5, 9, 9, 24, 80, 1, 1, 2, 2, 0, 0, false);
        test_conv_threads(6, 8, 8, 8, 48, 1, 7, 1, 1, 0, 3, false);
        test_conv_threads(5, 9, 8, 5, 33, 3, 3, 2, 2, 1, 1, true);
        test_conv_threads(4, 5, 5, 64, 1024, 3, 3, 1, 1, 1, 1, false);
        /* kernel outweighs input + output: the forward's channel blocks
         * outermost on 2 threads (conv.c's fwd_kb_chunks), pointwise */
        test_conv_threads(3, 3, 3, 256, 256, 1, 1, 1, 1, 0, 0, true);
        test_conv_threads(6, 10, 10, 3, 24, 3, 3, 1, 1, 1, 1, true);
        test_conv_threads(5, 10, 9, 32, 32, 3, 3, 1, 1, 0, 0, false);
        test_conv_threads(6, 10, 10, 4, 16, 5, 5, 1, 1, 2, 2, false);
        test_conv_threads(9, 12, 12, 1, 6, 5, 5, 1, 1, 2, 2, true);
        test_conv_threads(5, 28, 28, 1, 16, 3, 3, 1, 1, 1, 1, false); /* resnet-20's stem */
        test_conv_threads(6, 28, 28, 16, 32, 3, 3, 2, 2, 1, 1, true); /* resnet-20 4/c1 */
        /* 1x1 with 8 weight-gradient slices: every channel block in one
         * task; stride 1 (prefetched pixel blocks) and 2 */
        test_conv_threads(8, 45, 47, 24, 80, 1, 1, 1, 1, 0, 0, true);
        test_conv_threads(8, 92, 91, 20, 72, 1, 1, 2, 2, 0, 0, false);
        /* ResNet's 7x7/2 stem: the input gradient in dcol blocks */
        test_conv_threads(5, 19, 19, 3, 64, 7, 7, 2, 2, 3, 3, false);
        /* resnet-20's 16-channel stage (2 dw slices) and K = 8: the narrow
         * input gradient as a convolution of dy, dw in whole vectors */
        test_conv_threads(6, 28, 28, 16, 16, 3, 3, 1, 1, 1, 1, true);
        test_conv_threads(5, 10, 9, 16, 8, 3, 3, 1, 1, 1, 1, false);
        /* inception-mini's mixed_b/bdbl_2: the narrow weight gradient of
         * one slice of 2,048 pixels cut into 8 (test_narrow_slices) */
        test_conv_threads(9, 7, 7, 16, 32, 3, 3, 1, 1, 1, 1, true);
        /* narrow 1x1 layers (inception-mini's reductions): the weight
         * gradient in blocks of input channels within one slice and within
         * two; images in 8 blocks of 1-2 (odd rows per block); pointwise
         * rows of the fast kernels in 6 blocks of whole tiles */
        test_conv_threads(9, 7, 7, 128, 16, 1, 1, 1, 1, 0, 0, true);
        test_conv_threads(12, 20, 20, 40, 12, 1, 1, 1, 1, 0, 0, false);
        test_conv_threads(9, 5, 7, 20, 24, 1, 1, 1, 1, 0, 0, true);
        test_conv_threads(9, 15, 13, 24, 40, 1, 1, 1, 1, 0, 0, false);
        /* strided, many kernel rows: the input gradient in image groups
         * (3 + 2 images; 64-row blocks across taps); without the shared
         * padded batch (t = 4) the weight gradient per input-channel range */
        test_conv_threads(5, 15, 15, 128, 160, 3, 3, 2, 2, 1, 1, false);
        test_conv_threads(4, 11, 11, 72, 300, 3, 3, 2, 2, 0, 0, true);
        test_conv_threads(3, 14, 15, 40, 48, 3, 3, 2, 2, 1, 1, false);
        test_conv_threads(3, 33, 33, 130, 48, 3, 3, 2, 2, 0, 0, false); /* 6a-like */
        /* inception-mini's reduce/b3x3 (3x3/2, 64 -> 64): without the
         * shared padding, 4 input-channel ranges of 16 (48-float window
         * rows) */
        test_conv_threads(4, 14, 14, 64, 64, 3, 3, 2, 2, 1, 1, true);
        /* inception-mini's reduce/b3x3: the dcol input gradient in one loop
         * with the channel-range weight gradient, w^T packed at the end of
         * the col area and those tasks' padded images kept below it (t = 7
         * fails when they are not) */
        test_conv_threads(46, 14, 14, 64, 64, 3, 3, 2, 2, 1, 1, false);
    }
    /* inception-mini's 7x7 outputs at batch 48 (2,352 pixels): 2 slices of
     * 24 images on every path of its one-slice layers, AVX-512 and
     * portable: reduce/b3x3 (3x3/2, channel ranges), mixed_b/b1x1 and
     * bpool_1 (1x1, fast), bdbl_1 (1x1, narrow); and a one-channel layer */
    for (int mode = simd ? 1 : 0; mode >= 0; mode--) {
        nn_narrow_use_simd(mode);
        /*              N   H   W    C   K KH KW SH PH */
        test_two_slices(48, 14, 14, 64, 64, 3, 3, 2, 1);
        test_two_slices(48, 7, 7, 128, 48, 1, 1, 1, 0);
        test_two_slices(48, 7, 7, 128, 32, 1, 1, 1, 0);
        test_two_slices(48, 7, 7, 128, 16, 1, 1, 1, 0);
        test_two_slices(40, 8, 8, 1, 8, 3, 3, 1, 1);
    }
    if (simd) {
        nn_narrow_use_simd(1);
        test_narrow_slices();
        /* 7x7 outputs, batch 8 in groups of 4 + 4, a last batch of 6 in one
         * group: res5's 3x3 (the fast forward and input gradient) and its
         * 3x3/2 (the grouped strided input gradient) */
        test_conv_small_batch(8, 6, 7, 7, 128, 160, 3, 3, 1, 1);
        test_conv_small_batch(8, 6, 14, 14, 128, 160, 3, 3, 2, 1);
    }
    /* Winograd F(2x2, 3x3) (conv_wino.c) on every 3x3 stride-1 shape (mode
     * 2), AVX-512 and portable: several blocks of tiles, odd sizes,
     * paddings 0 and 1, channels not multiples of 16, several slices of the
     * weight gradient */
    for (int mode = simd ? 1 : 0; mode >= 0; mode--) {
        nn_narrow_use_simd(mode);
        wino = NN_WINO_F2;
        test_conv_threads(7, 9, 9, 16, 72, 3, 3, 1, 1, 1, 1, true);
        test_conv_threads(5, 10, 9, 32, 32, 3, 3, 1, 1, 0, 0, false);
        test_conv_threads(6, 13, 11, 19, 40, 3, 3, 1, 1, 1, 1, true);
        test_conv_threads(9, 7, 7, 64, 64, 3, 3, 1, 1, 1, 1, false);
        test_conv_threads(6, 24, 23, 16, 24, 3, 3, 1, 1, 1, 1, true); /* 3 dw slices */
        /* one dw slice of 256 channels: 1, 2 and 4 channel groups on 1, 2
         * and 3 threads */
        test_conv_threads(3, 9, 8, 256, 40, 3, 3, 1, 1, 1, 1, false);
        /* F(4x4, 3x3) on 16 -> 16 (mode 3): many blocks, partial tiles,
         * several weight-gradient slices (one per 256 tiles) */
        wino = NN_WINO_F4;
        test_conv_threads(6, 28, 28, 16, 16, 3, 3, 1, 1, 1, 1, true);
        test_conv_threads(11, 28, 28, 16, 16, 3, 3, 1, 1, 1, 1, false); /* 2 dw slices */
        test_conv_threads(5, 9, 7, 16, 16, 3, 3, 1, 1, 0, 2, false);
        /* F(4x4)'s input gradient of 32 to 64 channels */
        test_conv_threads(9, 7, 7, 64, 64, 3, 3, 1, 1, 1, 1, false);
        test_conv_threads(6, 14, 13, 32, 48, 3, 3, 1, 1, 1, 1, true);
        wino = NN_WINO_AUTO;
    }
    nn_narrow_use_simd(simd);

    return check_exit();
}
