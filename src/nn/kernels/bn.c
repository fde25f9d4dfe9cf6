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
 *
 * Memory passes (these layers are memory-bound: docs/design.md §11, "Batch
 * norm, ReLU and the residual add"): the forward reads x for the sums, then
 * reads x and writes y; the backward reads dy and x for its two sums, then
 * dy and x again and writes dx. A fused ReLU's mask is recomputed from x
 * (x*scale + shift > 0, the forward's own expression on the same floats)
 * instead of read from y and written back into dy. The residual add that
 * follows a batch norm without ReLU can be fused in (nn_bn_res, model.c):
 * the forward adds the other addend while it writes, the backward masks the
 * add's gradient with the add's output, hands it to the other addend in the
 * sums' pass and reads it back from there in the dx pass.
 *
 * Every sum runs in one order (docs/design.md §11): per block of
 * rows, in float over groups of BN_GROUP rows and in double over the groups
 * (bn_sums.c: 8-64-channel chunks (8, 16, 24, 32, 48, 64) with the sums in registers, other
 * channel counts a row at a time with the group's float sums in memory).
 * More than 64 channels: one pass for the backward's sums with the mask
 * and the addend's gradient, and software prefetch in the row-major passes.
 *
 * This file is the driver (blocks, pool loops, reductions, the statistics
 * and per-channel constants between the passes, the entry points); the
 * passes' kernels are bn_sums.c, bn_affine.c and bn_dx.c (bn_impl.h). */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bn_impl.h"
#include "pstrain/pool.h"
#include "pstrain/common.h"

/* ---- blocks of rows: the per-channel sums are taken per block, then the
 * blocks' partials are added in block order (the determinism rule of
 * pool.h: the blocks depend on M and C only). A block is a run of whole
 * groups of BN_GROUP rows (the float sums' groups, so counted from row
 * 0; only the last group of the tensor may be shorter), about 8k floats
 * (32 KB) per block, at most 64 blocks: resnet-20's small batch norms
 * (64x7x7x64) give 2 threads 24-64 tasks to balance, where blocks of 32k
 * floats would give 6-24 (docs/design.md §11). */
int nn_bn_blocks(int M, int C)
{
    int groups = (M + BN_GROUP - 1) / BN_GROUP;
    return nn_pool_nblocks(groups, (size_t)BN_GROUP * C, 8192, 64);
}

/* Block b of nb: rows [*lo, *hi), whole groups. */
static void bn_block(int M, int nb, int b, int *lo, int *hi)
{
    nn_pool_block((M + BN_GROUP - 1) / BN_GROUP, nb, b, lo, hi);
    *lo *= BN_GROUP, *hi *= BN_GROUP;
    if (*hi > M) *hi = M;
}

size_t nn_bn_red_doubles(int M, int C)
{
    return (size_t)nn_bn_blocks(M, C) * 2 * (size_t)C;
}

typedef struct bn_job {
    float *out;
    const float *inp, *res;
    const float *scale, *shift; /* forward: the affine map */
    bn_bw bw;                   /* backward: pointers at row 0 */
    double *red;                /* [nb][2C] partials */
    size_t ldo;                 /* forward: floats between rows of out */
    int M, C, nb, mask, dres;
    bool relu, acc;
} bn_job;

static void bn_sums_task(void *varg, int b, int tid)
{
    const bn_job *j = varg;
    int lo, hi;
    bn_block(j->M, j->nb, b, &lo, &hi);
    double *part = j->red + (size_t)b * 2 * j->C;
    nn_bn_fwd_sums(part, part + j->C, j->inp + (size_t)lo * j->C, j->inp, hi - lo, j->C);
}

static void bn_affine_range(void *varg, int lo, int hi)
{
    const bn_job *j = varg;
    size_t o = (size_t)lo * j->C;
    nn_bn_affine(j->out + (size_t)lo * j->ldo, j->ldo, j->inp + o, j->res ? j->res + o : NULL,
                 j->scale, j->shift, hi - lo, j->C, j->relu);
}

static void bn_grad_task(void *varg, int b, int tid)
{
    const bn_job *j = varg;
    int lo, hi;
    bn_block(j->M, j->nb, b, &lo, &hi);
    bn_bw w = bw_at(&j->bw, (size_t)lo, (size_t)j->C);
    double *part = j->red + (size_t)b * 2 * j->C;
    nn_bn_grad_sums(part, part + j->C, &w, hi - lo, j->C, j->mask, j->dres);
}

static void bn_dx_range(void *varg, int lo, int hi)
{
    const bn_job *j = varg;
    bn_bw w = bw_at(&j->bw, (size_t)lo, (size_t)j->C);
    nn_bn_dx(&w, hi - lo, j->C, j->mask, j->acc);
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

/* The training forward's affine map from the saved statistics; the
 * backward recomputes it for the ReLU's mask, so both call this one
 * function (the same floats, the same rounding). */
__attribute__((noinline)) static void bn_scale_shift(float *scale, float *shift, const float *gamma,
                                                     const float *beta, const float *mean,
                                                     const float *invstd, int C)
{
    for (int c = 0; c < C; c++) {
        scale[c] = gamma[c] * invstd[c];
        shift[c] = beta[c] - mean[c] * scale[c];
    }
}

void nn_bn_forward_train_ld(nn_pool *pool, double *red, float *out, int ld, float *mean,
                            float *invstd, float *new_mean, float *new_var, const float *inp,
                            const float *gamma, const float *beta, const float *moving_mean,
                            const float *moving_var, int M, int C, float momentum, float eps,
                            bool relu, const nn_bn_res *res)
{
    assert(C <= BN_MAX_C && M > 0 && ld >= C && (ld == C || !res));
    double sum[BN_MAX_C], sq[BN_MAX_C];
    float scale[BN_MAX_C], shift[BN_MAX_C];
    bn_job j = {.out = out,
                .inp = inp,
                .res = res ? res->res : NULL,
                .scale = scale,
                .shift = shift,
                .red = red,
                .ldo = (size_t)ld,
                .M = M,
                .C = C,
                .nb = nn_bn_blocks(M, C),
                .relu = res ? res->relu : relu};
    assert(!(res && relu));
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
        double unbiased = M > 1 ? sq[c] / (M - 1) : var;
        new_mean[c] = (float)(momentum * (double)moving_mean[c] + (1.0 - momentum) * mean[c]);
        new_var[c] = (float)(momentum * (double)moving_var[c] + (1.0 - momentum) * unbiased);
    }
    bn_scale_shift(scale, shift, gamma, beta, mean, invstd, C);
    nn_pool_range(pool, M, (size_t)(j.res ? 3 : 2) * C, bn_affine_range, &j);
}

void nn_bn_forward_train_par(nn_pool *pool, double *red, float *out, float *mean, float *invstd,
                             float *new_mean, float *new_var, const float *inp, const float *gamma,
                             const float *beta, const float *moving_mean, const float *moving_var,
                             int M, int C, float momentum, float eps, bool relu,
                             const nn_bn_res *res)
{
    nn_bn_forward_train_ld(pool, red, out, C, mean, invstd, new_mean, new_var, inp, gamma, beta,
                           moving_mean, moving_var, M, C, momentum, eps, relu, res);
}

void nn_bn_forward_infer_ld(nn_pool *pool, float *out, int ld, const float *inp, const float *gamma,
                            const float *beta, const float *moving_mean, const float *moving_var,
                            int M, int C, float eps, bool relu, const nn_bn_res *res)
{
    assert(C <= BN_MAX_C && !(res && relu) && ld >= C && (ld == C || !res));
    float scale[BN_MAX_C], shift[BN_MAX_C];
    for (int c = 0; c < C; c++) {
        scale[c] = gamma[c] / sqrtf(moving_var[c] + eps);
        shift[c] = beta[c] - moving_mean[c] * scale[c];
    }
    bn_job j = {.out = out,
                .inp = inp,
                .res = res ? res->res : NULL,
                .scale = scale,
                .shift = shift,
                .ldo = (size_t)ld,
                .M = M,
                .C = C,
                .relu = res ? res->relu : relu};
    nn_pool_range(pool, M, (size_t)(j.res ? 3 : 2) * C, bn_affine_range, &j);
}

void nn_bn_forward_infer_par(nn_pool *pool, float *out, const float *inp, const float *gamma,
                             const float *beta, const float *moving_mean, const float *moving_var,
                             int M, int C, float eps, bool relu, const nn_bn_res *res)
{
    nn_bn_forward_infer_ld(pool, out, C, inp, gamma, beta, moving_mean, moving_var, M, C, eps, relu,
                           res);
}

void nn_bn_backward_ld(nn_pool *pool, double *red, float *dinp, bool acc, float *dgamma,
                       float *dbeta, const float *dout, int ld, const float *dout2,
                       const float *out, const float *inp, const float *gamma, const float *beta,
                       const float *mean, const float *invstd, int M, int C, bool relu,
                       const nn_bn_res *res)
{
    assert(C <= BN_MAX_C && M > 0 && !(res && relu));
    /* a strided gradient comes in one part, not fused with an add */
    assert(ld >= C && (ld == C || (!dout2 && !res)));
    double sdy[BN_MAX_C], sdyx[BN_MAX_C];
    float scale[BN_MAX_C], shift[BN_MAX_C];
    if (relu) bn_scale_shift(scale, shift, gamma, beta, mean, invstd, C);
    bn_job j = {.bw = {.x = inp,
                       .dy = dout,
                       .dy2 = dout2,
                       .ldy = (size_t)ld,
                       .pfc_dy = pf_dist(BN_PFC, (size_t)ld, (size_t)C),
                       .pfl_dy = pf_dist(BN_PF, (size_t)ld, (size_t)C),
                       .out = res && res->relu ? out : NULL,
                       .dres = res ? res->dres : NULL,
                       .dx = dinp,
                       .mean = mean,
                       .invstd = invstd,
                       .scale = scale,
                       .shift = shift},
                .red = red,
                .M = M,
                .C = C,
                .nb = nn_bn_blocks(M, C),
                .mask = relu               ? MASK_RELU
                        : res && res->relu ? MASK_OUT
                                           : MASK_NONE,
                .dres = !res || !res->dres ? DRES_NONE
                        : res->dres_acc    ? DRES_ADD
                                           : DRES_SET,
                .acc = acc};
    nn_pool_for(pool, j.nb, bn_grad_task, &j);
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
    if (!dinp) return;
    j.bw.a = a, j.bw.bterm = bterm, j.bw.g = g;
    if (j.dres == DRES_SET) {
        /* the residual's gradient is the masked dy (+ dy2): read it back
         * from there */
        j.bw.dy = j.bw.dres;
        j.bw.dy2 = NULL;
        j.bw.ldy = (size_t)C;
        j.bw.pfc_dy = BN_PFC, j.bw.pfl_dy = BN_PF;
        j.mask = MASK_NONE;
    }
    int streams = 3 + (j.mask == MASK_OUT) + (j.bw.dy2 != NULL);
    nn_pool_range(pool, M, (size_t)streams * C, bn_dx_range, &j);
}

void nn_bn_backward_par(nn_pool *pool, double *red, float *dinp, bool acc, float *dgamma,
                        float *dbeta, float *dout, const float *dout2, const float *out,
                        const float *inp, const float *gamma, const float *beta, const float *mean,
                        const float *invstd, int M, int C, bool relu, const nn_bn_res *res)
{
    nn_bn_backward_ld(pool, red, dinp, acc, dgamma, dbeta, dout, C, dout2, out, inp, gamma, beta,
                      mean, invstd, M, C, relu, res);
}

/* ---- the single-threaded entry points: the same blocks, on the caller ---- */

void nn_bn_forward_train(float *out, float *mean, float *invstd, float *new_mean, float *new_var,
                         const float *inp, const float *gamma, const float *beta,
                         const float *moving_mean, const float *moving_var, int M, int C,
                         float momentum, float eps, bool relu)
{
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    nn_bn_forward_train_par(NULL, red, out, mean, invstd, new_mean, new_var, inp, gamma, beta,
                            moving_mean, moving_var, M, C, momentum, eps, relu, NULL);
    free(red);
}

void nn_bn_forward_infer(float *out, const float *inp, const float *gamma, const float *beta,
                         const float *moving_mean, const float *moving_var, int M, int C, float eps,
                         bool relu)
{
    nn_bn_forward_infer_par(NULL, out, inp, gamma, beta, moving_mean, moving_var, M, C, eps, relu,
                            NULL);
}

void nn_bn_backward(float *dinp, bool acc, float *dgamma, float *dbeta, float *dout,
                    const float *inp, const float *gamma, const float *beta, const float *mean,
                    const float *invstd, int M, int C, bool relu)
{
    double *red = pst_malloc(sizeof(double) * nn_bn_red_doubles(M, C));
    nn_bn_backward_par(NULL, red, dinp, acc, dgamma, dbeta, dout, NULL, NULL, inp, gamma, beta,
                       mean, invstd, M, C, relu, NULL);
    free(red);
}
