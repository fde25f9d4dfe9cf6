/*
 * bn.c - batch normalization over the channels of an [M][C] matrix
 * (M = N*H*W rows for a conv output, M = N for a dense one).
 *
 *   xhat = (x - mean) * invstd,  invstd = 1/sqrt(var + eps),  y = gamma*xhat + beta
 *   backward: dbeta = sum dy, dgamma = sum dy*xhat,
 *             dx = gamma*invstd/M * (M*dy - dbeta - xhat*dgamma)
 * Sums over rows are kept in double per channel: M reaches 10^5.
 */
#include <assert.h>
#include <math.h>
#include <string.h>

#include "layers.h"

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

/* sum[c] += x[i][c], sq[c] += (x[i][c] - mean[c])^2 (when mean). */
NN_CLONES static void bn_sums(double *sum, const float *inp, const float *mean, int M, int C)
{
    for (int i = 0; i < M; i++) {
        const float *restrict x = inp + (size_t)i * C;
        if (mean)
            for (int c = 0; c < C; c++) {
                double v = (double)x[c] - mean[c];
                sum[c] += v * v;
            }
        else
            for (int c = 0; c < C; c++) sum[c] += x[c];
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

void nn_bn_forward_train(float *out, float *mean, float *invstd, float *new_mean, float *new_var,
                         const float *inp, const float *gamma, const float *beta,
                         const float *moving_mean, const float *moving_var, int M, int C,
                         float momentum, float eps, bool relu)
{
    assert(C <= BN_MAX_C && M > 0);
    double sum[BN_MAX_C], sq[BN_MAX_C];
    float scale[BN_MAX_C], shift[BN_MAX_C];
    for (int c = 0; c < C; c++) sum[c] = 0.0, sq[c] = 0.0;
    bn_sums(sum, inp, NULL, M, C);
    for (int c = 0; c < C; c++) mean[c] = (float)(sum[c] / M);
    /* second pass around the mean: no cancellation */
    bn_sums(sq, inp, mean, M, C);
    for (int c = 0; c < C; c++) {
        double var = sq[c] / M;
        invstd[c] = (float)(1.0 / sqrt(var + eps));
        scale[c] = gamma[c] * invstd[c];
        shift[c] = beta[c] - mean[c] * scale[c];
        double unbiased = M > 1 ? sq[c] / (M - 1) : var;
        new_mean[c] = (float)(momentum * (double)moving_mean[c] + (1.0 - momentum) * mean[c]);
        new_var[c] = (float)(momentum * (double)moving_var[c] + (1.0 - momentum) * unbiased);
    }
    bn_affine(out, inp, scale, shift, M, C, relu);
}

void nn_bn_forward_infer(float *out, const float *inp, const float *gamma, const float *beta,
                         const float *moving_mean, const float *moving_var, int M, int C, float eps,
                         bool relu)
{
    assert(C <= BN_MAX_C);
    float scale[BN_MAX_C], shift[BN_MAX_C];
    for (int c = 0; c < C; c++) {
        scale[c] = gamma[c] / sqrtf(moving_var[c] + eps);
        shift[c] = beta[c] - moving_mean[c] * scale[c];
    }
    bn_affine(out, inp, scale, shift, M, C, relu);
}

void nn_bn_backward(float *dinp, bool acc, float *dgamma, float *dbeta, float *dout,
                    const float *out, const float *inp, const float *gamma, const float *mean,
                    const float *invstd, int M, int C, bool relu)
{
    assert(C <= BN_MAX_C && M > 0);
    if (relu) nn_relu_mask(dout, out, (size_t)M * C);
    double sdy[BN_MAX_C], sdyx[BN_MAX_C];
    for (int c = 0; c < C; c++) sdy[c] = 0.0, sdyx[c] = 0.0;
    bn_grad_sums(sdy, sdyx, inp, dout, mean, invstd, M, C);
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
    if (dinp) bn_dx(dinp, acc, inp, dout, mean, a, bterm, g, M, C);
}
