/*
 * bn.c - batch normalization over the channels of an [M][C] matrix
 * (M = N*H*W rows for a conv output, M = N for a dense one).
 *
 *   xhat = (x - mean) * invstd,  invstd = 1/sqrt(var + eps),  y = gamma*xhat + beta
 *   backward: dbeta = sum dy, dgamma = sum dy*xhat,
 *             dx = gamma*invstd/M * (M*dy - dbeta - xhat*dgamma)
 * Sums over rows are kept in double per channel: M reaches 10^5. The
 * forward takes both moments in one pass, around the batch's first row
 * (var = E[(x-s)^2] - E[x-s]^2, s near the mean: in double no digit that
 * matters is lost), so it reads x twice, not three times. Sums are
 * taken per fixed block of rows (nn_bn_blocks) and the blocks' partials
 * added in block order, so that the *_par kernels give the same bits on any
 * number of threads.
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "pool.h"
#include "pstrain/common.h"

#define BN_MAX_C NN_BN_MAX_C

/* y = x*scale[c] + shift[c], then ReLU. */
NN_CLONES static void bn_affine(float *out, const float *inp, const float *scale,
                                const float *shift, int M, int C, bool relu)
{
    for (int i = 0; i < M; i++) {
        const float *restrict x = inp + (size_t)i * C;
        float *restrict y = out + (size_t)i * C;
        if (relu)
            for (int c = 0; c < C; c++) {
                float v = x[c] * scale[c] + shift[c];
                y[c] = v > 0.0f ? v : 0.0f;
            }
        else
            for (int c = 0; c < C; c++) y[c] = x[c] * scale[c] + shift[c];
    }
}

/* sum[c] += x[i][c] - shift[c], sq[c] += (x[i][c] - shift[c])^2: one pass
 * for both moments. shift is the batch's first row, near the mean, so the
 * variance sq/M - (sum/M)^2 loses no digits that matter in double. */
NN_CLONES static void bn_sums(double *restrict sum, double *restrict sq, const float *inp,
                              const float *restrict shift, int M, int C)
{
    for (int i = 0; i < M; i++) {
        const float *restrict x = inp + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            double v = (double)x[c] - (double)shift[c];
            sum[c] += v;
            sq[c] += v * v;
        }
    }
}

/* sdy[c] += dy, sdyx[c] += dy * xhat */
NN_CLONES static void bn_grad_sums(double *sdy, double *sdyx, const float *inp, const float *dout,
                                   const float *mean, const float *invstd, int M, int C)
{
    for (int i = 0; i < M; i++) {
        const float *restrict x = inp + (size_t)i * C, *restrict dy = dout + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            sdy[c] += dy[c];
            sdyx[c] += (double)dy[c] * ((x[c] - mean[c]) * invstd[c]);
        }
    }
}

NN_CLONES static void bn_dx(float *dinp, bool acc, const float *inp, const float *dout,
                            const float *mean, const float *a, const float *bterm, const float *g,
                            int M, int C)
{
    for (int i = 0; i < M; i++) {
        const float *restrict x = inp + (size_t)i * C, *restrict dy = dout + (size_t)i * C;
        float *restrict dx = dinp + (size_t)i * C;
        if (acc)
            for (int c = 0; c < C; c++) dx[c] += a[c] * dy[c] - bterm[c] - (x[c] - mean[c]) * g[c];
        else
            for (int c = 0; c < C; c++) dx[c] = a[c] * dy[c] - bterm[c] - (x[c] - mean[c]) * g[c];
    }
}

/* ---- blocks of rows: the per-channel sums are taken per block, then the
 * blocks' partials are added in block order (the determinism rule of
 * pool.h: the blocks depend on M and C only). */

int nn_bn_blocks(int M, int C)
{
    return nn_pool_nblocks(M, (size_t)C, 32768, 64);
}

size_t nn_bn_red_doubles(int M, int C)
{
    return (size_t)nn_bn_blocks(M, C) * 2 * (size_t)C;
}

typedef struct bn_job {
    float *out, *dinp, *dout;
    const float *inp, *yout, *mean, *invstd;
    const float *scale, *shift; /* affine (forward) or a (backward) */
    const float *bterm, *g;     /* backward dx */
    double *red;                /* [nb][2C] partials */
    int M, C, nb;
    bool relu, acc;
} bn_job;

static void bn_sums_task(void *varg, int b, int tid)
{
    const bn_job *j = varg;
    int lo, hi;
    nn_pool_block(j->M, j->nb, b, &lo, &hi);
    double *part = j->red + (size_t)b * 2 * j->C;
    for (int c = 0; c < 2 * j->C; c++) part[c] = 0.0;
    bn_sums(part, part + j->C, j->inp + (size_t)lo * j->C, j->inp, hi - lo, j->C);
}

static void bn_affine_range(void *varg, int lo, int hi)
{
    const bn_job *j = varg;
    size_t o = (size_t)lo * j->C;
    bn_affine(j->out + o, j->inp + o, j->scale, j->shift, hi - lo, j->C, j->relu);
}

static void bn_grad_task(void *varg, int b, int tid)
{
    const bn_job *j = varg;
    int lo, hi;
    nn_pool_block(j->M, j->nb, b, &lo, &hi);
    size_t o = (size_t)lo * j->C;
    if (j->relu) nn_relu_mask(j->dout + o, j->yout + o, (size_t)(hi - lo) * j->C);
    double *part = j->red + (size_t)b * 2 * j->C;
    for (int c = 0; c < 2 * j->C; c++) part[c] = 0.0;
    bn_grad_sums(part, part + j->C, j->inp + o, j->dout + o, j->mean, j->invstd, hi - lo, j->C);
}

static void bn_dx_range(void *varg, int lo, int hi)
{
    const bn_job *j = varg;
    size_t o = (size_t)lo * j->C;
    bn_dx(j->dinp + o, j->acc, j->inp + o, j->dout + o, j->mean, j->scale, j->bterm, j->g, hi - lo,
          j->C);
}

/* sum[c] = the blocks' partials (stride 2C) added in block order. */
static void bn_reduce(double *sum, const double *red, int nb, int C, int off)
{
    for (int c = 0; c < C; c++) sum[c] = 0.0;
    for (int b = 0; b < nb; b++) {
        const double *part = red + (size_t)b * 2 * C + off;
        for (int c = 0; c < C; c++) sum[c] += part[c];
    }
}

void nn_bn_forward_train_par(nn_pool *pool, double *red, float *out, float *mean, float *invstd,
                             float *new_mean, float *new_var, const float *inp, const float *gamma,
                             const float *beta, const float *moving_mean, const float *moving_var,
                             int M, int C, float momentum, float eps, bool relu)
{
    assert(C <= BN_MAX_C && M > 0);
    double sum[BN_MAX_C], sq[BN_MAX_C];
    float scale[BN_MAX_C], shift[BN_MAX_C];
    bn_job j = {.out = out,
                .inp = inp,
                .mean = mean,
                .scale = scale,
                .shift = shift,
                .red = red,
                .M = M,
                .C = C,
                .nb = nn_bn_blocks(M, C),
                .relu = relu};
    nn_pool_for(pool, j.nb, bn_sums_task, &j);
    bn_reduce(sum, red, j.nb, C, 0);
    bn_reduce(sq, red, j.nb, C, C);
    for (int c = 0; c < C; c++) {
        double d = sum[c] / M; /* mean - shift */
        mean[c] = (float)((double)inp[c] + d);
        double var = sq[c] / M - d * d;
        if (var < 0.0) var = 0.0;
        sq[c] = var * M;
        invstd[c] = (float)(1.0 / sqrt(var + eps));
        scale[c] = gamma[c] * invstd[c];
        shift[c] = beta[c] - mean[c] * scale[c];
        double unbiased = M > 1 ? sq[c] / (M - 1) : var;
        new_mean[c] = (float)(momentum * (double)moving_mean[c] + (1.0 - momentum) * mean[c]);
        new_var[c] = (float)(momentum * (double)moving_var[c] + (1.0 - momentum) * unbiased);
    }
    nn_pool_range(pool, M, (size_t)2 * C, bn_affine_range, &j);
}

void nn_bn_forward_infer_par(nn_pool *pool, float *out, const float *inp, const float *gamma,
                             const float *beta, const float *moving_mean, const float *moving_var,
                             int M, int C, float eps, bool relu)
{
    assert(C <= BN_MAX_C);
    float scale[BN_MAX_C], shift[BN_MAX_C];
    for (int c = 0; c < C; c++) {
        scale[c] = gamma[c] / sqrtf(moving_var[c] + eps);
        shift[c] = beta[c] - moving_mean[c] * scale[c];
    }
    bn_job j = {
        .out = out, .inp = inp, .scale = scale, .shift = shift, .M = M, .C = C, .relu = relu};
    nn_pool_range(pool, M, (size_t)2 * C, bn_affine_range, &j);
}

void nn_bn_backward_par(nn_pool *pool, double *red, float *dinp, bool acc, float *dgamma,
                        float *dbeta, float *dout, const float *out, const float *inp,
                        const float *gamma, const float *mean, const float *invstd, int M, int C,
                        bool relu)
{
    assert(C <= BN_MAX_C && M > 0);
    double sdy[BN_MAX_C], sdyx[BN_MAX_C];
    bn_job j = {.dinp = dinp,
                .dout = dout,
                .inp = inp,
                .yout = out,
                .mean = mean,
                .invstd = invstd,
                .red = red,
                .M = M,
                .C = C,
                .nb = nn_bn_blocks(M, C),
                .relu = relu,
                .acc = acc};
    nn_pool_for(pool, j.nb, bn_grad_task, &j); /* masks dout by blocks first when relu */
    bn_reduce(sdy, red, j.nb, C, 0);
    bn_reduce(sdyx, red, j.nb, C, C);
    float a[BN_MAX_C], bterm[BN_MAX_C], g[BN_MAX_C];
    for (int c = 0; c < C; c++) {
        dbeta[c] = (float)sdy[c];
        dgamma[c] = (float)sdyx[c];
        /* dx = k*dy - k*mean(dy) - k*xhat*mean(dy*xhat), k = gamma*invstd */
        float k = gamma[c] * invstd[c];
        a[c] = k;
        bterm[c] = (float)(k * sdy[c] / M);
        g[c] = (float)(k * sdyx[c] / M) * invstd[c];
    }
    j.scale = a, j.bterm = bterm, j.g = g;
    if (dinp) nn_pool_range(pool, M, (size_t)4 * C, bn_dx_range, &j);
}

/* ---- the single-threaded entry points: the same blocks, on the caller ---- */

void nn_bn_forward_train(float *out, float *mean, float *invstd, float *new_mean, float *new_var,
                         const float *inp, const float *gamma, const float *beta,
                         const float *moving_mean, const float *moving_var, int M, int C,
                         float momentum, float eps, bool relu)
{
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    nn_bn_forward_train_par(NULL, red, out, mean, invstd, new_mean, new_var, inp, gamma, beta,
                            moving_mean, moving_var, M, C, momentum, eps, relu);
    free(red);
}

void nn_bn_forward_infer(float *out, const float *inp, const float *gamma, const float *beta,
                         const float *moving_mean, const float *moving_var, int M, int C, float eps,
                         bool relu)
{
    nn_bn_forward_infer_par(NULL, out, inp, gamma, beta, moving_mean, moving_var, M, C, eps, relu);
}

void nn_bn_backward(float *dinp, bool acc, float *dgamma, float *dbeta, float *dout,
                    const float *out, const float *inp, const float *gamma, const float *mean,
                    const float *invstd, int M, int C, bool relu)
{
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    nn_bn_backward_par(NULL, red, dinp, acc, dgamma, dbeta, dout, out, inp, gamma, mean, invstd, M,
                       C, relu);
    free(red);
}
