/*
 * conv_impl.h - what the convolution driver's files share (internal to
 * src/nn; the API is layers.h's nn_conv2d_forward / nn_conv2d_backward):
 *   conv.c        dims, scratch sizes and layout, how a call is cut into
 *                 tasks, and the forward's dispatch to a kernel family
 *   conv_backward.c  the backward's dispatch: the weight gradient's path,
 *                 the input gradient's, and the loops that run both
 *   conv_gemm.c   the im2col + BLIS path (also the narrow and one-channel
 *                 kernels' loops over images): one thread's share of a call
 *   conv_tasks.c  the pool tasks of every path (a conv_job describes the
 *                 call; a task's result depends on its index only)
 * The kernels themselves are conv_fast.c (nn_cf_*), conv_wino.c, narrow.c
 * and conv1ch.c.
 */
#ifndef PSTRAIN_NN_CONV_IMPL_H
#define PSTRAIN_NN_CONV_IMPL_H

#include <stdint.h>
#include <string.h>

#include "layers.h"
#include "pstrain/pool.h"
#include "pstrain/blas.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CONV_X86 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
/* o[0, 16 full + tail) += i[...]: a run of channels added into a padded
 * gradient (col2im and the grouped strided input gradient's scatter) */
AVX512 static inline void conv_add_run(float *o, const float *i, int full, __mmask16 tail)
{
    for (int v = 0; v < full; v++)
        _mm512_storeu_ps(o + 16 * v,
                         _mm512_add_ps(_mm512_loadu_ps(o + 16 * v), _mm512_loadu_ps(i + 16 * v)));
    if (tail)
        _mm512_mask_storeu_ps(o + 16 * full, tail,
                              _mm512_add_ps(_mm512_maskz_loadu_ps(tail, o + 16 * full),
                                            _mm512_maskz_loadu_ps(tail, i + 16 * full)));
}
#else
#define CONV_X86 0
#endif

#define CONV_SLACK 16  /* floats after each scratch area */
#define CONV_ROWS 1024 /* rows per task of a pointwise product, at most */
#define CONV_TILE 12   /* rows of a register tile of the fast kernels */
#define CONV_HDR 16    /* floats before each thread's scratch: a tag */
#define CONV_RED 16384 /* floats per task of the weight-gradient reduction */

static inline bool conv_is_pointwise(const nn_conv_dims *d)
{
    return d->KH == 1 && d->KW == 1 && d->SH == 1 && d->SW == 1 && d->PH == 0 && d->PW == 0;
}

/* A pointwise pass whose output (N*H*W rows of `cols` floats) exceeds
 * CONV_STREAM_FLOATS (32 MB, this machine's L3) is stored with
 * non-temporal stores: written through the caches, each line was first
 * read from memory (Inception 5b's 1x1 288 -> 64 input gradient at batch
 * 32: 45 MB). Smaller outputs stay in the caches for the next layer. */
#define CONV_STREAM_FLOATS (8u << 20)
static inline bool conv_stream(const nn_conv_dims *d, int cols)
{
    return (size_t)d->N * d->H * d->W * cols > CONV_STREAM_FLOATS;
}

/* Rows and columns of the padded image that windows touch. */
static inline int pad_h(const nn_conv_dims *d)
{
    return (d->OH - 1) * d->SH + d->KH;
}
static inline int pad_w(const nn_conv_dims *d)
{
    return (d->OW - 1) * d->SW + d->KW;
}

/* Every scratch area starts 64-byte aligned (the scratch itself is): a
 * 16-float row of a kernel matrix is then one cache line, not two. */
static inline size_t align16(size_t n)
{
    return (n + 15) / 16 * 16;
}

/* After the padded image: the implicit-im2col kernel's overrun (8 windows). */
static inline size_t pad_slack(const nn_conv_dims *d)
{
    return (size_t)8 * d->SW * d->C + CONV_SLACK;
}

/* The input-gradient convolution of a stride-1 layer: dy zero-padded by
 * KH-1-PH rows on top (KW-1-PW columns on the left) and convolved with the
 * flipped, transposed kernel gives the input, H x W. Needs PH <= KH-1 and
 * PW <= KW-1 (else some dy rows would fall outside the padded copy). */
static inline bool dgrad_as_conv(const nn_conv_dims *d)
{
    return d->SH == 1 && d->SW == 1 && d->PH <= d->KH - 1 && d->PW <= d->KW - 1;
}
static inline nn_conv_dims dgrad_dims(const nn_conv_dims *d)
{
    nn_conv_dims g = *d; /* the switches */
    g.H = d->OH, g.W = d->OW, g.C = d->K, g.SH = g.SW = 1;
    g.PH = d->KH - 1 - d->PH, g.PW = d->KW - 1 - d->PW;
    g.OH = d->H, g.OW = d->W, g.K = d->C;
    return g;
}

static inline size_t img_floats(const nn_conv_dims *d)
{
    return (size_t)pad_h(d) * pad_w(d) * d->C;
}
/* A 1x1 convolution with stride > 1 (a projection shortcut). */
static inline bool strided_pointwise(const nn_conv_dims *d)
{
    return d->KH == 1 && d->KW == 1 && d->PH == 0 && d->PW == 0 && !conv_is_pointwise(d);
}

/* Without padding the windows lie inside the image: the fast kernels read
 * the input in place (geometry of the unpadded image). */
static inline bool unpadded(const nn_conv_dims *d)
{
    return d->PH == 0 && d->PW == 0;
}

/* ---- conv.c: the scratch layout ---------------------------------------- */

/* The GEMM path's areas in a thread's scratch (conv_gemm.c):
 * [col chunk + slack | padded image + slack | W^T + slack]
 * (a pointwise conv has only W^T). */
float *nn_cv_scratch_pad(float *scratch, const nn_conv_dims *d);
float *nn_cv_scratch_wt(float *scratch, const nn_conv_dims *d);
/* Output pixels per dcol block of the strided input gradient. */
int nn_cv_dcol_pixels(const nn_conv_dims *d);

/* Floats of the areas of a thread's scratch (conv_backward.c places its
 * buffers by them): */
/* the GEMM path's col area (a chunk's im2col matrix) */
size_t nn_cv_col_floats(const nn_conv_dims *d);
/* the GEMM path's padded image, after the col area */
size_t nn_cv_pad_floats(const nn_conv_dims *d);
/* the fast path's padded group of images (the packed kernel follows) */
size_t nn_cv_fast_pad_floats(const nn_conv_dims *d);
/* a dcol block of the strided input gradient (nn_cv_dgrad_dcol_task) */
size_t nn_cv_dcol_block_floats(const nn_conv_dims *d);
/* the grouped strided input gradient's padded gradients (nn_cv_dgrad_dcolg_task) */
size_t nn_cv_dcolg_pad_floats(const nn_conv_dims *d);
/* its dcol buffer, after them */
size_t nn_cv_dcolg_buf_floats(const nn_conv_dims *d);
/* a thread's working area after its header: any path's layout */
size_t nn_cv_front_floats(const nn_conv_dims *d);
/* the weight-gradient partials of slices 1..S-1, after thread 0's front area */
size_t nn_cv_parts_floats(const nn_conv_dims *d);

/* ---- conv.c: the paths and the cut (shapes only, never the thread count) */

/* dw through the fast kernel */
bool nn_cv_fast_dw_ok(const nn_conv_dims *d);
/* the input gradient through the fast kernel (a convolution of dy, or dy w^T) */
bool nn_cv_fast_dgrad_ok(const nn_conv_dims *d);
/* a strided layer's input gradient through the fast kernel by dcol blocks, a task per image */
bool nn_cv_fast_dcol_ok(const nn_conv_dims *d);
/* the other strided layers' input gradient through the fast kernel, a task per group */
bool nn_cv_dcolg_ok(const nn_conv_dims *d);
/* the batch padded once for the weight-gradient tasks (after the partials) */
bool nn_cv_use_shared_pad(const nn_conv_dims *d);
/* an unpadded strided layer whose image exceeds L2: channel-range weight-gradient tasks */
bool nn_cv_wgrad_chan_unpadded(const nn_conv_dims *d);
/* images per group of the fast path */
int nn_cv_fast_group(const nn_conv_dims *d);
/* images per group of the grouped strided input gradient */
int nn_cv_dcolg_group(const nn_conv_dims *d);
/* image blocks of the GEMM / narrow / one-channel forward and input gradient */
int nn_cv_image_blocks(const nn_conv_dims *d);
/* row blocks of a pointwise product with nkb channel blocks */
int nn_cv_point_row_blocks(int rows, int nkb);
/* slices of the batch whose weight gradients are summed separately, then in slice order */
int nn_cv_wgrad_slices(const nn_conv_dims *d);
/* kernel-row blocks of the 1x1 GEMM weight gradient with S slices */
int nn_cv_point_wgrad_row_blocks(const nn_conv_dims *d, int S);
/* kernel-row blocks of the fast weight gradient read in place or padded once */
int nn_cv_wgrad_row_blocks(const nn_conv_dims *d, int S, int kbg);
/* output-channel blocks per task of the fast weight gradient */
int nn_cv_wgrad_kb_group(const nn_conv_dims *d, int S);
/* output-channel blocks per task of the channel-range weight gradient */
int nn_cv_wgrad_chan_kb(const nn_conv_dims *d);
/* input-channel ranges per slice of the channel-range weight gradient */
int nn_cv_wgrad_chan_blocks(const nn_conv_dims *d, int S);

/* ---- conv_gemm.c: the im2col + BLIS path -------------------------------- */

/* Copies image n of inp into the padded buffer's interior (borders stay 0). */
void nn_cv_pad_image(float *restrict pad, const float *inp, const nn_conv_dims *d, int n);
/* dinp image n (+)= interior of the padded gradient. */
void nn_cv_unpad_image(float *dinp, bool acc, const float *dpad, const nn_conv_dims *d, int n);
#if CONV_X86
/* dpad (+)= the dcol rows of output pixels [p0, p0 + np) of the image. */
AVX512 void nn_cv_col2im_simd(float *dpad, const float *dcol, const nn_conv_dims *d, int p0,
                              int np);
#endif
/* The forward and the backward of the images of d on one thread's scratch
 * (im2col + BLIS, narrow, one-channel); backward: dw may be NULL (only the
 * input gradient), dinp too (only dw). */
void nn_cv_forward_gemm(float *out, const float *inp, const float *w, const float *b,
                        const nn_conv_dims *d, bool relu, float *scratch);
/* dw[R][K] = x^T dy over `rows` pixels of a 1x1 layer, x's rows ldx apart
 * (R of its columns: a block of input channels): narrow or BLIS. */
void nn_cv_point_dw(float *dw, const float *x, int ldx, const float *dy, int rows, int R, int K);
void nn_cv_backward_gemm(float *dinp, bool acc, float *dw, float *db, float *dout, const float *out,
                         const float *inp, const float *w, const nn_conv_dims *d, bool relu,
                         float *scratch);

/* ---- conv_tasks.c: the pool tasks --------------------------------------- */

typedef struct conv_job {
    const nn_conv_dims *d;
    const float *inp, *w, *b, *dout;
    float *out, *dinp, *dw;
    bool relu, acc;
    const float *wp; /* packed kernel, in thread 0's scratch */
    float *part;     /* weight-gradient partials of slices 1..S-1 */
    float *shared;   /* the padded batch for the weight gradient, or NULL */
    float *scratch;  /* thread t's: scratch + t*stride */
    size_t stride;
    int G, ngroups, nkb, S, nr, chunk, nrc;
    int nib;      /* GEMM path: blocks of images (forward, input gradient) */
    int kbg;      /* weight gradient: channel blocks per task */
    int kbc;      /* forward, fast: chunks of channel blocks, outermost (conv.c's fwd_kb_chunks) */
    int nch;      /* weight gradient, padded: input-channel ranges per slice */
    size_t padf;  /* floats of a thread's padded-image area */
    size_t dpadf; /* strided input gradient (dcolg): its padded gradients' floats */
} conv_job;

static inline float *job_front(const conv_job *j, int tid)
{
    return j->scratch + (size_t)tid * j->stride + CONV_HDR;
}
/* Which group of images thread tid holds padded (-1: none yet). */
static inline int *job_tag(const conv_job *j, int tid)
{
    return (int *)(j->scratch + (size_t)tid * j->stride);
}
/* Every group of images unpadded in every thread's scratch (before a loop
 * of tasks that pad groups). */
void nn_cv_job_reset_tags(const conv_job *j, nn_pool *pool);
/* The kernel packed for the fast kernels on the pool, a block of 64 output
 * columns per task; flip = the input gradient's flipped, transposed kernel. */
void nn_cv_pack_par(nn_pool *pool, float *wp, const float *w, const nn_conv_dims *d, bool flip);
/* wp = w^T [K][R] packed as nn_cf_pack packs a [K][R] kernel, on the pool
 * (a block of 64 kernel rows per task). */
void nn_cv_pack_transposed(nn_pool *pool, float *wp, const float *w, int R, int K);

/* Task `task` of the fast forward: (outer, kb), outer = a group of images
 * or a block of rows of nouter; kb outermost in j->kbc chunks where
 * j->kbc > 1, then outer, then kb within the chunk. */
static inline void conv_fwd_task(const conv_job *j, int task, int nouter, int *outer, int *kb)
{
    if (j->kbc <= 1) {
        *outer = task / j->nkb, *kb = task % j->nkb;
        return;
    }
    const int per = j->nkb / j->kbc, chunk = task / (nouter * per), r = task % (nouter * per);
    *outer = r / per, *kb = chunk * per + r % per;
}

/* A loop of ntasks tasks on the pool: every loop of conv.c and conv_backward.c. */
static inline void conv_for(nn_pool *pool, int ntasks, void (*fn)(void *arg, int task, int tid),
                            void *arg)
{
    nn_pool_for(pool, ntasks, fn, arg);
}

/* The tasks (nn_pool_for's fn) of each pass and path; conv.c's cut says how
 * many, conv.c (forward) and conv_backward.c which. */
void nn_cv_fwd_fast_task(void *arg, int task, int tid);
void nn_cv_fwd_point_task(void *arg, int task, int tid);
void nn_cv_fwd_gemm_task(void *arg, int task, int tid);
void nn_cv_wgrad_fast_task(void *arg, int task, int tid);
void nn_cv_wgrad_chan_task(void *arg, int task, int tid);
void nn_cv_wgrad_pad_task(void *arg, int task, int tid);
void nn_cv_wgrad_gemm_task(void *arg, int task, int tid);
void nn_cv_wgrad_point_task(void *arg, int task, int tid);
void nn_cv_wgrad_reduce_task(void *arg, int task, int tid);
void nn_cv_dgrad_fast_task(void *arg, int task, int tid);
void nn_cv_dgrad_point_task(void *arg, int task, int tid);
void nn_cv_dgrad_strided_point_task(void *arg, int task, int tid);
void nn_cv_dgrad_dcol_task(void *arg, int task, int tid);
void nn_cv_dgrad_dcolg_task(void *arg, int task, int tid);
void nn_cv_dgrad_gemm_task(void *arg, int task, int tid);

#endif
