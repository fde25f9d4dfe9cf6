/*
 * conv_backward.c - 2-D convolution, the backward's dispatch
 * (nn_conv2d_backward): the weight gradient's path (Winograd, the fast
 * kernel read in place, padded once or by channel ranges, 1x1 GEMM, the
 * GEMM / narrow path) and the input gradient's, the loops that run a fast
 * weight gradient's tasks with the input gradient's (backward_fused,
 * backward_fused_strided), and the slices' reduction.
 *
 * conv.c holds the scratch layout, how a call is cut into tasks and which
 * kernel family runs each pass (its top comment), and the forward;
 * conv_tasks.c the tasks; conv_impl.h what they share. Every cut depends
 * on the shapes only, never on the thread count.
 */
#include "conv_impl.h"

/* The fast input gradient: packs the flipped kernel on the pool, sets up
 * the job and returns the task function, *ntasks its tasks. */
static void (*dgrad_fast_setup(conv_job *j, nn_pool *pool, int *ntasks))(void *, int, int)
{
    const nn_conv_dims *d = j->d;
    float *wp = job_front(j, 0) + nn_cv_fast_pad_floats(d);
    nn_cv_pack_par(pool, wp, j->w, d, true);
    j->wp = wp;
    int nkb = (d->C + 63) / 64;
    nn_cv_job_reset_tags(j, pool);
    if (conv_is_pointwise(d)) {
        j->nrc = nn_cv_point_row_blocks(d->N * d->H * d->W, nkb);
        *ntasks = j->nrc * nkb;
        return nn_cv_dgrad_point_task;
    }
    if (strided_pointwise(d)) {
        *ntasks = j->ngroups;
        return nn_cv_dgrad_strided_point_task;
    }
    *ntasks = j->ngroups * nkb;
    return nn_cv_dgrad_fast_task;
}

/* One loop of the weight gradient's nw fast tasks (wfn: in place or
 * shared padding, or channel ranges) and the fast input gradient's tasks,
 * cut into P parts (the pool's threads), part p = the weight gradient's
 * block p then the input gradient's block p: the weight gradient of the
 * small 14x14 and 28x28 layers is 8 long tasks, and alone in its loop the
 * thread that finished first would wait at its end (resnet-50 at batch 8
 * on 2 threads); here it takes the input gradient's small tasks
 * meanwhile. The two write different buffers and
 * read only dy, x and w. Per-thread scratch: the in-place and shared-pad
 * weight-gradient tasks use none; the channel-range tasks and the input
 * gradient's use their thread's front area below nn_cv_fast_pad_floats (the
 * flipped kernel lies after it, the partials and the shared padding after
 * the front area), one task at a time, and a channel-range task marks the
 * area as holding no padded group (the input gradient's tag). So the order
 * of the tasks changes no result. */
typedef struct fused_job {
    conv_job *j;
    void (*wfn)(void *, int, int), (*dfn)(void *, int, int);
    int nw, nd, P;
} fused_job;

static void fused_task(void *arg, int task, int tid)
{
    const fused_job *f = arg;
    int k;
    if (nn_pool_two_lists(task, f->nw, f->nd, f->P, &k) == 0)
        f->wfn(f->j, k, tid);
    else
        f->dfn(f->j, k, tid);
}

static void backward_fused(conv_job *j, void (*wfn)(void *, int, int), int nw, nn_pool *pool)
{
    fused_job f = {.j = j, .wfn = wfn, .nw = nw, .P = nn_pool_threads(pool)};
    f.dfn = dgrad_fast_setup(j, pool, &f.nd);
    conv_for(pool, nw + f.nd, fused_task, &f);
    if (j->S > 1) {
        const size_t RK = (size_t)j->d->KH * j->d->KW * j->d->C * j->d->K;
        conv_for(pool, (int)((RK + CONV_RED - 1) / CONV_RED), nn_cv_wgrad_reduce_task, j);
    }
}

/* The input gradient of a strided layer (dcol: per image; dcolg: per
 * group) in one loop with the channel-range weight gradient's nw tasks,
 * cut as backward_fused's parts: those tasks (8-18 long ones: resnet-50's
 * 3x3/2 layers, inception-mini's reduce/b3x3) alone in their loop would
 * leave the thread that finished first idle at its end. w^T is packed
 * first where no task writes in thread 0's area: dcol, at the end of the
 * col area (its dcol block lies at the start, its padded gradient after
 * the col area), the channel-range tasks' padded sub-images kept below it
 * (fewer images per call of the kernel: no sum changes, each dw element
 * still adds its pixels in order), or else past the padded gradient;
 * dcolg, past its padded gradients and dcol block and past the channel-
 * range tasks' area. False (nothing done) where the front area has no such
 * room. Each task writes its own outputs as in separate loops, and
 * initialises its area first, so no bit changes. Not where
 * d->no_fuse_strided (tests). */
static bool backward_fused_strided(conv_job *j, void (*wfn)(void *, int, int), int nw,
                                   nn_pool *pool)
{
    const nn_conv_dims *d = j->d;
    if (d->no_fuse_strided) return false;
    const int R = d->KH * d->KW * d->C;
    const size_t packed = nn_cf_packed_floats(d->K, R), fp = nn_cv_fast_pad_floats(d);
    size_t off, cap = fp; /* cap: the channel-range tasks' padded images */
    fused_job f = {.j = j, .wfn = wfn, .nw = nw, .P = nn_pool_threads(pool)};
    if (nn_cv_fast_dcol_ok(d)) {
        const size_t col = nn_cv_col_floats(d), past = col + nn_cv_pad_floats(d);
        if (col >= nn_cv_dcol_block_floats(d) + packed) {
            off = (col - packed) / 16 * 16;
            if (cap > off) cap = off;
        } else
            off = fp > past ? fp : past;
        f.dfn = nn_cv_dgrad_dcol_task, f.nd = d->N;
    } else if (nn_cv_dcolg_ok(d)) {
        const size_t past = nn_cv_dcolg_pad_floats(d) + nn_cv_dcolg_buf_floats(d);
        off = fp > past ? fp : past;
        j->G = nn_cv_dcolg_group(d), j->ngroups = (d->N + j->G - 1) / j->G;
        j->dpadf = nn_cv_dcolg_pad_floats(d);
        f.dfn = nn_cv_dgrad_dcolg_task, f.nd = j->ngroups;
    } else
        return false;
    nn_conv_dims sub = *d; /* the widest channel range's padded image */
    sub.C = (d->C + j->nch - 1) / j->nch;
    if (off + packed > nn_cv_front_floats(d) || cap < img_floats(&sub)) return false;
    j->padf = cap;
    float *wp = job_front(j, 0) + off;
    nn_cv_pack_transposed(pool, wp, j->w, R, d->K);
    j->wp = wp;
    conv_for(pool, nw + f.nd, fused_task, &f);
    if (j->S > 1) {
        const size_t RK = (size_t)R * d->K;
        conv_for(pool, (int)((RK + CONV_RED - 1) / CONV_RED), nn_cv_wgrad_reduce_task, j);
    }
    return true;
}

void nn_conv2d_backward(float *dinp, bool acc, float *dw, float *db, float *dout, const float *out,
                        const float *inp, const float *w, const nn_conv_dims *d, bool relu,
                        nn_pool *pool, float *scratch, size_t stride)
{
    const int K = d->K, R = d->KH * d->KW * d->C;
    const size_t rows = (size_t)d->N * d->OH * d->OW, RK = (size_t)R * K;
    if (relu) nn_relu_mask(dout, out, rows * K);
    if (db) nn_bias_backward(db, dout, (int)rows, K);
    conv_job j = {.d = d,
                  .inp = inp,
                  .w = w,
                  .dout = dout,
                  .dinp = dinp,
                  .dw = dw,
                  .acc = acc,
                  .scratch = scratch,
                  .stride = stride};
    j.S = nn_cv_wgrad_slices(d);
    j.part = job_front(&j, 0) + nn_cv_front_floats(d);
    j.G = nn_cv_fast_group(d), j.ngroups = (d->N + j.G - 1) / j.G;
    if (nn_wino_wgrad_ok(d)) {
        if (dinp && nn_wino_dgrad_ok(d)) {
            nn_wino_backward(dw, dinp, acc, dout, inp, w, d, pool, job_front(&j, 0), stride);
            return;
        }
        nn_wino_wgrad(dw, dout, inp, d, pool, job_front(&j, 0), stride);
        j.S = 1; /* its slices are summed inside */
    } else if (nn_cv_fast_dw_ok(d)) {
        if (nn_cv_use_shared_pad(d)) {
            j.shared = job_front(&j, 0) + nn_cv_front_floats(d) + nn_cv_parts_floats(d);
            memset(j.shared + (size_t)d->N * img_floats(d), 0, sizeof(float) * CONV_SLACK);
            conv_for(pool, d->N, nn_cv_wgrad_pad_task, &j);
        }
        void (*wfn)(void *, int, int);
        int nw;
        if ((unpadded(d) && !strided_pointwise(d) && !nn_cv_wgrad_chan_unpadded(d)) || j.shared) {
            j.kbg = nn_cv_wgrad_kb_group(d, j.S);
            j.nr = nn_cv_wgrad_row_blocks(d, j.S, j.kbg);
            const int nkb = (K + 63) / 64;
            wfn = nn_cv_wgrad_fast_task, nw = j.S * j.nr * ((nkb + j.kbg - 1) / j.kbg);
        } else {
            j.nch = nn_cv_wgrad_chan_blocks(d, j.S), j.padf = nn_cv_fast_pad_floats(d);
            j.kbg = nn_cv_wgrad_chan_kb(d);
            const int nkg = ((K + 63) / 64 + j.kbg - 1) / j.kbg;
            wfn = nn_cv_wgrad_chan_task, nw = j.S * j.nch * nkg;
        }
        if (dinp && nn_cv_fast_dgrad_ok(d) && !nn_wino_dgrad_ok(d)) {
            backward_fused(&j, wfn, nw, pool); /* the reduction too */
            return;
        }
        if (dinp && wfn == nn_cv_wgrad_chan_task && !nn_wino_dgrad_ok(d) &&
            backward_fused_strided(&j, wfn, nw, pool))
            return;
        conv_for(pool, nw, wfn, &j);
    } else if (conv_is_pointwise(d)) {
        j.nr = nn_cv_point_wgrad_row_blocks(d, j.S);
        conv_for(pool, j.S * j.nr, nn_cv_wgrad_point_task, &j);
    } else {
        conv_for(pool, j.S, nn_cv_wgrad_gemm_task, &j);
    }
    if (j.S > 1) conv_for(pool, (int)((RK + CONV_RED - 1) / CONV_RED), nn_cv_wgrad_reduce_task, &j);
    if (!dinp) return;
    if (nn_wino_dgrad_ok(d)) {
        nn_wino_dgrad(dinp, acc, dout, w, d, pool, job_front(&j, 0), stride);
        return;
    }
    if (nn_cv_fast_dgrad_ok(d)) {
        int nd;
        void (*fn)(void *, int, int) = dgrad_fast_setup(&j, pool, &nd);
        conv_for(pool, nd, fn, &j);
        return;
    }
    if (nn_cv_fast_dcol_ok(d)) {
        float *wp = job_front(&j, 0) + nn_cv_dcol_block_floats(d);
        nn_cv_pack_transposed(pool, wp, w, R, K);
        j.wp = wp;
        conv_for(pool, d->N, nn_cv_dgrad_dcol_task, &j);
        return;
    }
    if (nn_cv_dcolg_ok(d)) {
        j.G = nn_cv_dcolg_group(d), j.ngroups = (d->N + j.G - 1) / j.G;
        j.dpadf = nn_cv_dcolg_pad_floats(d);
        float *wp = job_front(&j, 0) + j.dpadf + nn_cv_dcolg_buf_floats(d);
        nn_cv_pack_transposed(pool, wp, w, R, K);
        j.wp = wp;
        conv_for(pool, j.ngroups, nn_cv_dgrad_dcolg_task, &j);
        return;
    }
    j.nib = nn_cv_image_blocks(d);
    conv_for(pool, j.nib, nn_cv_dgrad_gemm_task, &j);
}
