/*
 * conv_tasks.c - the pool tasks of the convolutions: what one task of
 * nn_pool_for computes, for every pass and path. conv.c (forward) and
 * conv_backward.c decide the path and fill the conv_job, conv.c's cut
 * says how many tasks (all from the shapes only); a task's result depends
 * on its index only, never on which thread runs it (tid picks the
 * scratch), so results do not depend on the thread count (pool.h's rule).
 *   forward          fast: (group of images, 64 output channels); pointwise:
 *                    (block of rows, 64 channels); GEMM: block of images
 *   weight gradient  fast: (slice of the batch, block of kernel rows, group
 *                    of 64-channel blocks), each slice into its own partial,
 *                    then the reduction adds the partials in slice order;
 *                    GEMM: slice; GEMM, 1x1: (slice, block of kernel rows)
 *   input gradient   fast: (group of images of dy, 64 input channels);
 *                    pointwise: (rows, channels); projection: group; dcol:
 *                    image; GEMM: block of images
 */
#include "conv_impl.h"

/* The kernel packed for the fast kernels on the pool, a block of 64
 * output columns per task (resnet-50's 3x3 512 -> 512: 9 MB, too long for
 * one thread): flip = the input gradient's flipped, transposed kernel. */
typedef struct pack_job {
    float *wp;
    const float *w;
    const nn_conv_dims *d;
    bool flip;
} pack_job;

static void pack_task(void *arg, int kb, int tid)
{
    const pack_job *p = arg;
    const nn_conv_dims *d = p->d;
    if (p->flip)
        nn_cf_pack_flip_block(p->wp, p->w, d->KH, d->KW, d->C, d->K, kb);
    else
        nn_cf_pack_block(p->wp, p->w, d->KH * d->KW * d->C, d->K, kb);
    (void)tid;
}

void nn_cv_pack_par(nn_pool *pool, float *wp, const float *w, const nn_conv_dims *d, bool flip)
{
    pack_job p = {wp, w, d, flip};
    nn_pool_for(pool, ((flip ? d->C : d->K) + 63) / 64, pack_task, &p);
}

/* Block b of [0, n) cut into nb near-equal blocks. */
static void block_of(int n, int nb, int b, int *lo, int *hi)
{
    nn_pool_block(n, nb, b, lo, hi);
}

void nn_cv_job_reset_tags(const conv_job *j, nn_pool *pool)
{
    for (int t = 0; t < nn_pool_threads(pool); t++) *job_tag(j, t) = -1;
}

static nn_conv_dims sub_batch(const nn_conv_dims *d, int n)
{
    nn_conv_dims s = *d;
    s.N = n;
    return s;
}

static nn_cf_geom direct_geom(const nn_conv_dims *d, int ng)
{
    const int C = d->C;
    nn_cf_geom g = {d->OH,     d->OW, d->SH * d->W * C,        d->SW * C, d->KH, d->W * C,
                    d->KW * C, ng,    (size_t)d->H * d->W * C, false};
    return g;
}

static nn_cf_geom fast_geom(const nn_conv_dims *d, int ng, size_t img)
{
    const int Wp = pad_w(d), C = d->C;
    nn_cf_geom g = {d->OH, d->OW, d->SH * Wp * C, d->SW * C, d->KH, Wp * C, d->KW * C,
                    ng,    img,   false};
    return g;
}

/* Images [n0, n0 + ng) of src (shape d) padded into consecutive slots of
 * img floats of pad; gi names the group (a thread keeps its last one). */
static void pad_group(const conv_job *j, int tid, int gi, float *pad, const float *src,
                      const nn_conv_dims *d, int n0, int ng)
{
    int *tag = job_tag(j, tid);
    if (gi >= 0 && *tag == gi) return;
    size_t img = img_floats(d);
    if (*tag == -1) memset(pad, 0, sizeof(float) * ((size_t)j->G * img + CONV_SLACK));
    for (int i = 0; i < ng; i++) nn_cv_pad_image(pad + i * img, src, d, n0 + i);
    *tag = gi >= 0 ? gi : -2;
}

static void group_range(const conv_job *j, int gi, int *n0, int *ng)
{
    *n0 = gi * j->G;
    *ng = j->d->N - *n0 < j->G ? j->d->N - *n0 : j->G;
}

/* forward, fast: task = (group of images, block of 64 output channels) */
void nn_cv_fwd_fast_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int gi, kb, n0, ng;
    conv_fwd_task(j, task, j->ngroups, &gi, &kb);
    group_range(j, gi, &n0, &ng);
    float *o = j->out + (size_t)n0 * d->OH * d->OW * d->K;
    if (unpadded(d)) {
        nn_cf_geom g = direct_geom(d, ng);
        nn_cf_forward(o, j->inp + (size_t)n0 * d->H * d->W * d->C, &g, j->wp, d->K, kb, j->b,
                      j->relu, false);
        return;
    }
    float *pad = job_front(j, tid);
    pad_group(j, tid, gi, pad, j->inp, d, n0, ng);
    nn_cf_geom g = fast_geom(d, ng, img_floats(d));
    nn_cf_forward(o, pad, &g, j->wp, d->K, kb, j->b, j->relu, false);
}

/* Rows [r0, r1) of block rc of a pointwise product cut into j->nrc blocks
 * of whole register tiles (the last block ends at the last row). */
static void point_rows(const conv_job *j, int rc, int *r0, int *r1)
{
    const int rows = j->d->N * j->d->H * j->d->W, tiles = (rows + CONV_TILE - 1) / CONV_TILE;
    int lo, hi;
    block_of(tiles, j->nrc, rc, &lo, &hi);
    *r0 = lo * CONV_TILE;
    *r1 = hi * CONV_TILE < rows ? hi * CONV_TILE : rows;
}

/* forward, fast, pointwise: task = (block of rows, channel block), read in place */
void nn_cv_fwd_point_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int rc, kb, r0, r1;
    conv_fwd_task(j, task, j->nrc, &rc, &kb);
    point_rows(j, rc, &r0, &r1);
    nn_cf_geom g = {1, r1 - r0, 0, d->C, 1, 0, d->C, 1, 0, conv_stream(d, d->K)};
    nn_cf_forward(j->out + (size_t)r0 * d->K, j->inp + (size_t)r0 * d->C, &g, j->wp, d->K, kb, j->b,
                  j->relu, false);
    (void)tid;
}

/* forward, GEMM / narrow / one-channel path: task = block of images (of
 * j->nib near-equal blocks; at most a chunk each) */
void nn_cv_fwd_gemm_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int n0, n1;
    block_of(d->N, j->nib, task, &n0, &n1);
    nn_conv_dims s = sub_batch(d, n1 - n0);
    nn_cv_forward_gemm(j->out + (size_t)n0 * d->OH * d->OW * d->K,
                       j->inp + (size_t)n0 * d->H * d->W * d->C, j->w, j->b, &s, j->relu,
                       job_front(j, tid));
}

/* weight gradient, fast: task = (slice of the batch, block of kernel rows,
 * group of blocks of 64 output channels) */
void nn_cv_wgrad_fast_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    const int R = d->KH * d->KW * d->C, nkb = (d->K + 63) / 64, nkg = (nkb + j->kbg - 1) / j->kbg;
    const int kb = task % nkg * j->kbg, kb1 = nkb < kb + j->kbg ? nkb : kb + j->kbg;
    const int s = task / nkg / j->nr;
    int a, e, r0, r1;
    block_of(d->N, j->S, s, &a, &e);
    block_of(R, j->nr, task / nkg % j->nr, &r0, &r1);
    float *target = s == 0 ? j->dw : j->part + (size_t)(s - 1) * R * d->K;
    const size_t img = img_floats(d), out_img = (size_t)d->OH * d->OW * d->K;
    if (j->shared) {
        /* the slice's images, padded once by nn_cv_wgrad_pad_task */
        nn_cf_geom g = fast_geom(d, e - a, img);
        nn_cf_dw(target, j->shared + (size_t)a * img, &g, j->dout + a * out_img, d->K, kb, kb1, r0,
                 r1, false);
        return;
    }
    /* unpadded: the images read in place (padded ones: nn_cv_wgrad_chan_task) */
    for (int n0 = a; n0 < e; n0 += j->G) {
        int ng = e - n0 < j->G ? e - n0 : j->G;
        nn_cf_geom g = direct_geom(d, ng);
        nn_cf_dw(target, j->inp + (size_t)n0 * d->H * d->W * d->C, &g, j->dout + n0 * out_img, d->K,
                 kb, kb1, r0, r1, n0 > a);
    }
}

/* Image n's channels [c0, c0 + sub->C) of inp (shape d) as a whole padded
 * image of sub->C channels (borders written as zeros: img_floats(sub)). */
static void pad_channels(float *restrict pad, const float *inp, const nn_conv_dims *d,
                         const nn_conv_dims *sub, int n, int c0)
{
    const int Hp = pad_h(d), Wp = pad_w(d), C = d->C, Cs = sub->C;
    const int rows = d->H < Hp - d->PH ? d->H : Hp - d->PH;
    const int cols = d->W < Wp - d->PW ? d->W : Wp - d->PW;
    const float *img = inp + (size_t)n * d->H * d->W * C + c0;
    for (int h = 0; h < Hp; h++) {
        float *o = pad + (size_t)h * Wp * Cs;
        int ih = h - d->PH;
        if (ih < 0 || ih >= rows) {
            memset(o, 0, sizeof(float) * Wp * Cs);
            continue;
        }
        memset(o, 0, sizeof(float) * d->PW * Cs);
        const float *src = img + (size_t)ih * d->W * C;
        float *dst = o + (size_t)d->PW * Cs;
        if (Cs == C)
            memcpy(dst, src, sizeof(float) * cols * C);
        else
            for (int w = 0; w < cols; w++)
                memcpy(dst + (size_t)w * Cs, src + (size_t)w * C, sizeof(float) * Cs);
        memset(dst + (size_t)cols * Cs, 0, sizeof(float) * (Wp - d->PW - cols) * Cs);
    }
}

/* Channels [c0, c0 + Cs) of the strided pixels (oh*SH, ow*SW) of image n
 * of inp (a 1x1 layer of shape d) as dense rows [OH*OW][Cs]. */
static void gather_channels(float *restrict o, const float *inp, const nn_conv_dims *d, int Cs,
                            int n, int c0)
{
    const int C = d->C;
    const float *img = inp + (size_t)n * d->H * d->W * C + c0;
    for (int oh = 0; oh < d->OH; oh++)
        for (int ow = 0; ow < d->OW; ow++, o += Cs)
            memcpy(o, img + ((size_t)oh * d->SH * d->W + (size_t)ow * d->SW) * C,
                   sizeof(float) * Cs);
}

/* weight gradient, fast, padded images (no shared padded batch) and
 * projections: task = (slice of the batch, range of input channels, group
 * of up to 4 blocks of 64 output channels). The task pads only its
 * channels of each image (a sub-image of C' channels), so a call copies
 * the batch once per group of output channels, not once per block of
 * kernel rows and of output channels. The sub-image's window rows come in
 * runs of C', one per tap, and land in rows tap*C + c0 of dw. A projection
 * (1x1, stride > 1) gathers its strided pixels' channels into dense rows
 * instead, which the kernel reads as one matrix. No sum changes: every dw
 * element still sums its slice's pixels in order. */
void nn_cv_wgrad_chan_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    const int R = d->KH * d->KW * d->C, nkb = (d->K + 63) / 64;
    const int nkg = (nkb + j->kbg - 1) / j->kbg, kb0 = task % nkg * j->kbg;
    const int kb1 = nkb < kb0 + j->kbg ? nkb : kb0 + j->kbg, s = task / nkg / j->nch;
    int a, e, c0, c1;
    block_of(d->N, j->S, s, &a, &e);
    block_of(d->C, j->nch, task / nkg % j->nch, &c0, &c1);
    nn_conv_dims sub = *d;
    sub.C = c1 - c0;
    /* a projection: its strided pixels gathered into dense rows */
    const bool gather = strided_pointwise(d);
    const int P = d->OH * d->OW;
    const size_t img = gather ? (size_t)P * sub.C : img_floats(&sub);
    const size_t out_img = (size_t)d->OH * d->OW * d->K;
    const int G = j->padf / img > 1 ? (int)(j->padf / img) : 1;
    float *target = (s == 0 ? j->dw : j->part + (size_t)(s - 1) * R * d->K) + (size_t)c0 * d->K;
    float *pad = job_front(j, tid);
    /* the padded area no longer holds a group of images for the input
     * gradient's tasks (which run in the same loop: conv_backward.c's
     * backward_fused) */
    *job_tag(j, tid) = -1;
    for (int n0 = a; n0 < e; n0 += G) {
        int ng = e - n0 < G ? e - n0 : G;
        for (int i = 0; i < ng; i++)
            if (gather)
                gather_channels(pad + i * img, j->inp, d, sub.C, n0 + i, c0);
            else
                pad_channels(pad + i * img, j->inp, d, &sub, n0 + i, c0);
        nn_cf_geom g = fast_geom(&sub, ng, img);
        if (gather) g = (nn_cf_geom){1, ng * P, 0, sub.C, 1, 0, sub.C, 1, 0, false};
        /* one range holding every channel: the rows are contiguous, one
         * run (runs of C' = 3 floats left conv1's tiles mostly empty) */
        const int rows = d->KH * d->KW * sub.C, run = sub.C == d->C ? rows : sub.C;
        nn_cf_dw_runs(target, pad, &g, j->dout + n0 * out_img, d->K, kb0, kb1, 0, rows, n0 > a, run,
                      sub.C == d->C ? rows : d->C);
    }
}

/* the shared padded batch: task = image */
void nn_cv_wgrad_pad_task(void *arg, int task, int tid)
{
    const conv_job *j = arg;
    const size_t img = img_floats(j->d);
    float *pad = j->shared + (size_t)task * img;
    memset(pad, 0, sizeof(float) * img);
    nn_cv_pad_image(pad, j->inp, j->d, task);
    (void)tid;
}

/* weight gradient, other paths: task = slice of the batch */
void nn_cv_wgrad_gemm_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int a, e;
    block_of(d->N, j->S, task, &a, &e);
    float *target = task == 0 ? j->dw : j->part + (size_t)(task - 1) * d->KH * d->KW * d->C * d->K;
    nn_conv_dims s = sub_batch(d, e - a);
    nn_cv_backward_gemm(
        NULL, false, target, NULL, (float *)j->dout + (size_t)a * d->OH * d->OW * d->K, NULL,
        j->inp + (size_t)a * d->H * d->W * d->C, j->w, &s, false, job_front(j, tid));
}

/* weight gradient of a 1x1 layer on the GEMM path: task = (slice of the
 * batch, block of kernel rows, i.e. input channels): dw rows [r0, r1) =
 * x[:, r0:r1]^T dy over the slice's pixels (a small batch of small images
 * has one slice: the rows give the other threads work) */
void nn_cv_wgrad_point_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    const int C = d->C, K = d->K, P = d->H * d->W, s = task / j->nr;
    int a, e, r0, r1;
    block_of(d->N, j->S, s, &a, &e);
    block_of(C, j->nr, task % j->nr, &r0, &r1);
    float *target = s == 0 ? j->dw : j->part + (size_t)(s - 1) * C * K;
    nn_cv_point_dw(target + (size_t)r0 * K, j->inp + (size_t)a * P * C + r0, C,
                   j->dout + (size_t)a * P * K, (e - a) * P, r1 - r0, K);
    (void)tid;
}

/* dw += the partials of slices 1..S-1, in slice order: task = 16K floats */
void nn_cv_wgrad_reduce_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    size_t RK = (size_t)d->KH * d->KW * d->C * d->K, i0 = (size_t)task * CONV_RED;
    size_t i1 = RK - i0 < CONV_RED ? RK : i0 + CONV_RED;
    for (int s = 1; s < j->S; s++) {
        const float *restrict p = j->part + (size_t)(s - 1) * RK;
        float *restrict o = j->dw;
        for (size_t i = i0; i < i1; i++) o[i] += p[i];
    }
    (void)tid;
}

/* input gradient, fast, stride 1: task = (group of images of dy, block of
 * 64 input channels) */
void nn_cv_dgrad_fast_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    nn_conv_dims gd = dgrad_dims(d);
    int nkb = (d->C + 63) / 64, gi = task / nkb, cb = task % nkb, n0, ng;
    group_range(j, gi, &n0, &ng);
    float *pad = job_front(j, tid);
    pad_group(j, tid, gi, pad, j->dout, &gd, n0, ng);
    nn_cf_geom g = fast_geom(&gd, ng, img_floats(&gd));
    nn_cf_forward(j->dinp + (size_t)n0 * d->H * d->W * d->C, pad, &g, j->wp, d->C, cb, NULL, false,
                  j->acc);
}

/* input gradient, fast, pointwise: dinp rows = dy rows w^T, read in place */
void nn_cv_dgrad_point_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int nkb = (d->C + 63) / 64, rc = task / nkb, cb = task % nkb, r0, r1;
    point_rows(j, rc, &r0, &r1);
    nn_cf_geom g = {1, r1 - r0, 0, d->K, 1, 0, d->K, 1, 0, conv_stream(d, d->C)};
    nn_cf_forward(j->dinp + (size_t)r0 * d->C, j->dout + (size_t)r0 * d->K, &g, j->wp, d->C, cb,
                  NULL, false, j->acc);
    (void)tid;
}

/* o[0, C) = 0 + t (a fresh gradient: the bits of clearing, then adding)
 * or += t */
#if CONV_X86
AVX512 static void strided_run(float *restrict o, const float *restrict t, int C, bool acc)
{
    const __m512 zero = _mm512_setzero_ps();
    const __mmask16 tail = (__mmask16)((1u << (C % 16)) - 1);
    int c = 0;
    for (; c + 16 <= C; c += 16)
        _mm512_storeu_ps(
            o + c, _mm512_add_ps(acc ? _mm512_loadu_ps(o + c) : zero, _mm512_loadu_ps(t + c)));
    if (tail)
        _mm512_mask_storeu_ps(o + c, tail,
                              _mm512_add_ps(acc ? _mm512_maskz_loadu_ps(tail, o + c) : zero,
                                            _mm512_maskz_loadu_ps(tail, t + c)));
}
#else
static void strided_run(float *restrict o, const float *restrict t, int C, bool acc)
{
    for (int c = 0; c < C; c++) o[c] = (acc ? o[c] : 0.0f) + t[c];
}
#endif

/* input gradient of a 1x1 convolution with stride > 1 (a projection
 * shortcut): dy w^T at the strided positions, zero elsewhere; task = group */
void nn_cv_dgrad_strided_point_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    const int C = d->C, nkb = (C + 63) / 64, P = d->OH * d->OW;
    int n0, ng;
    group_range(j, task, &n0, &ng);
    float *tmp = job_front(j, tid);
    nn_cf_geom g = {1, ng * P, 0, d->K, 1, 0, d->K, 1, 0, false};
    for (int cb = 0; cb < nkb; cb++)
        nn_cf_forward(tmp, j->dout + (size_t)n0 * P * d->K, &g, j->wp, C, cb, NULL, false, false);
    /* one pass over each image gradient: rows and pixels off the stride
     * cleared (when not adding), the strided ones 0 + t (the bits that
     * clearing the image first and adding gave) or += t; a cleared
     * image of res3's size (3.2 MB) left L2 before the adds came back */
    const size_t WC = (size_t)d->W * C;
    for (int i = 0; i < ng; i++) {
        float *img = j->dinp + (size_t)(n0 + i) * d->H * WC;
        for (int h = 0; h < d->H; h++) {
            float *row = img + (size_t)h * WC;
            const int oh = h / d->SH;
            if (h % d->SH || oh >= d->OH) {
                if (!j->acc) memset(row, 0, sizeof(float) * WC);
                continue;
            }
            for (int w = 0; w < d->W; w++) {
                float *restrict o = row + (size_t)w * C;
                const int ow = w / d->SW;
                if (w % d->SW || ow >= d->OW) {
                    if (!j->acc) memset(o, 0, sizeof(float) * C);
                    continue;
                }
                const float *restrict t = tmp + ((size_t)i * P + (size_t)oh * d->OW + ow) * C;
                strided_run(o, t, C, j->acc);
            }
        }
    }
}

/* Block rb of w^T [K][R] packed as nn_cf_pack packs a [K][R] kernel:
 * [K][64] of kernel rows [64 rb, 64 rb + 64), zeros past R; 16 k at a time,
 * so a line of each source row goes into a 16 x 64 block that stays in L1
 * (AVX-512: nn_cf_transpose16, also for a partial last block). */
static void pack_transposed_block(float *wp, const float *w, int R, int K, int rb)
{
    float *dst = wp + (size_t)rb * K * 64;
    const int r0 = rb * 64, nr = R - r0 < 64 ? R - r0 : 64;
    for (int k0 = 0; k0 < K; k0 += 16) {
        const int nk = K - k0 < 16 ? K - k0 : 16;
#if CONV_X86
        if (nn_narrow_use_simd(-1)) {
            for (int i0 = 0; i0 < 64; i0 += 16) {
                int nrow = nr - i0 < 0 ? 0 : nr - i0 > 16 ? 16 : nr - i0;
                nn_cf_transpose16(dst + (size_t)k0 * 64 + i0, 64, nk,
                                  w + (size_t)(r0 + i0) * K + k0, (size_t)K, nrow, nk);
            }
            continue;
        }
#endif
        for (int i = 0; i < nr; i++)
            for (int kk = 0; kk < nk; kk++)
                dst[(size_t)(k0 + kk) * 64 + i] = w[(size_t)(r0 + i) * K + k0 + kk];
        for (int kk = 0; kk < nk; kk++)
            for (int i = nr; i < 64; i++) dst[(size_t)(k0 + kk) * 64 + i] = 0.0f;
    }
}

typedef struct packt_job {
    float *wp;
    const float *w;
    int R, K;
} packt_job;

static void packt_task(void *arg, int rb, int tid)
{
    const packt_job *p = arg;
    pack_transposed_block(p->wp, p->w, p->R, p->K, rb);
    (void)tid;
}

void nn_cv_pack_transposed(nn_pool *pool, float *wp, const float *w, int R, int K)
{
    packt_job p = {wp, w, R, K};
    nn_pool_for(pool, (R + 63) / 64, packt_task, &p);
}

/* input gradient of a strided layer with a small kernel (conv.c's
 * nn_cv_fast_dcol_ok): task = image, dcol = dy rows x w^T in blocks of output
 * pixels, each added into the padded image gradient while in cache */
void nn_cv_dgrad_dcol_task(void *arg, int task, int tid)
{
#if CONV_X86
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    const int K = d->K, R = d->KH * d->KW * d->C, P = d->OH * d->OW, nrb = (R + 63) / 64;
    float *front = job_front(j, tid), *dcol = front, *pad = nn_cv_scratch_pad(front, d);
    memset(pad, 0, sizeof(float) * img_floats(d));
    const float *dy = j->dout + (size_t)task * P * K;
    const int PXB = nn_cv_dcol_pixels(d);
    for (int p0 = 0; p0 < P; p0 += PXB) {
        int np = P - p0 < PXB ? P - p0 : PXB;
        nn_cf_geom g = {1, np, 0, K, 1, 0, K, 1, 0, false};
        for (int rb = 0; rb < nrb; rb++)
            nn_cf_forward(dcol, dy + (size_t)p0 * K, &g, j->wp, R, rb, NULL, false, false);
        nn_cv_col2im_simd(pad, dcol, d, p0, np);
    }
    nn_cv_unpad_image(j->dinp, j->acc, pad, d, task);
#else
    (void)arg, (void)task, (void)tid;
#endif
}

/* input gradient, other paths: task = block of images (as the forward's) */
void nn_cv_dgrad_gemm_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int n0, n1;
    block_of(d->N, j->nib, task, &n0, &n1);
    nn_conv_dims s = sub_batch(d, n1 - n0);
    nn_cv_backward_gemm(j->dinp + (size_t)n0 * d->H * d->W * d->C, j->acc, NULL, NULL,
                        (float *)j->dout + (size_t)n0 * d->OH * d->OW * d->K, NULL,
                        j->inp + (size_t)n0 * d->H * d->W * d->C, j->w, &s, false,
                        job_front(j, tid));
}

#if CONV_X86
/* dpad (+)= the dcol block [rows][64] of kernel rows [64 rb, 64 rb + 64)
 * for the rows' output pixels (the group's images, their padded gradients
 * img floats apart): each run of the block's rows within one tap is a
 * contiguous run of channels of the padded gradient. */
AVX512 static void dcolg_scatter(float *dpad, size_t img, const float *dcol, int rows,
                                 const nn_conv_dims *d, int rb)
{
    const int C = d->C, R = d->KH * d->KW * C, Wp = pad_w(d), P = d->OH * d->OW;
    const int r0 = rb * 64, r1 = R < r0 + 64 ? R : r0 + 64;
    for (int r = r0; r < r1;) {
        const int tap = r / C, c = r - tap * C, len = C - c < r1 - r ? C - c : r1 - r;
        const int kh = tap / d->KW, kw = tap - kh * d->KW;
        const size_t off = ((size_t)kh * Wp + kw) * C + c;
        const int full = len / 16;
        const __mmask16 tail = (__mmask16)((1u << (len % 16)) - 1);
        for (int q = 0; q < rows; q++) {
            const int n = q / P, p = q - n * P, oh = p / d->OW, ow = p - oh * d->OW;
            float *o = dpad + n * img + ((size_t)oh * d->SH * Wp + (size_t)ow * d->SW) * C + off;
            const float *i = dcol + (size_t)q * 64 + (r - r0);
            conv_add_run(o, i, full, tail);
        }
        r += len;
    }
}
#endif

/* input gradient of a strided layer with a large kernel (conv.c's
 * nn_cv_dcolg_ok: ResNet-50's res4/res5 3x3/2, Inception's 6a/7a): task = group
 * of images; w^T packed once per call (thread 0's scratch). For each
 * block of 64 kernel rows (its packed w^T, [K][64], stays in L2): dcol
 * [rows][64] = dy rows x that block for all the group's output pixels
 * (nn_cf_forward), added into the group's padded image gradients. Each
 * gradient element sums its terms in (block, pixel) order: fixed by the
 * shapes. */
void nn_cv_dgrad_dcolg_task(void *arg, int task, int tid)
{
#if CONV_X86
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    const int K = d->K, R = d->KH * d->KW * d->C, P = d->OH * d->OW, nrb = (R + 63) / 64;
    int n0, ng;
    group_range(j, task, &n0, &ng);
    const size_t img = img_floats(d);
    float *dpad = job_front(j, tid), *dcol = dpad + j->dpadf;
    memset(dpad, 0, sizeof(float) * ng * img);
    const int rows = ng * P;
    nn_cf_geom g = {1, rows, 0, K, 1, 0, K, 1, 0, false};
    for (int rb = 0; rb < nrb; rb++) {
        nn_cf_forward(dcol, j->dout + (size_t)n0 * P * K, &g, j->wp + (size_t)rb * K * 64, 64, 0,
                      NULL, false, false);
        dcolg_scatter(dpad, img, dcol, rows, d, rb);
    }
    for (int i = 0; i < ng; i++) nn_cv_unpad_image(j->dinp, j->acc, dpad + i * img, d, n0 + i);
#else
    (void)arg, (void)task, (void)tid;
#endif
}
