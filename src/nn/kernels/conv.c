/*
 * conv.c - 2-D convolution: each thread's scratch (its layout and sizes),
 * how a call is cut into tasks on the pool, which kernel family runs each
 * pass of a layer, and the forward's dispatch.
 *
 * Which code multiplies depends on the shape (K output channels):
 *   K > 32     the AVX-512 implicit GEMM (conv_fast.c): windows read from a
 *              zero-padded group of images, the kernel packed once per call;
 *              without AVX-512, nn_gemm (BLIS) on im2col matrices of chunks
 *              of images sized to stay in L2 (conv_gemm.c).
 *   K <= 32    the narrow kernels (narrow.c): the forward reads windows
 *              straight from a zero-padded copy of each image ("implicit
 *              im2col": no col matrix), so does dw for K <= 16 (else it
 *              multiplies the chunk's col), and the input gradient is added
 *              straight into the padded image gradient (no dcol matrix, no
 *              col2im). BLIS wastes most of its micro-tile on these
 *              shapes (narrow.c says why).
 *   C = 1, stride 1, K <= 16 (a grayscale input layer): conv1ch.c,
 *              vectorised along the output row.
 *   1x1, stride 1, no padding: a dense layer over the N*H*W rows.
 *   3x3, stride 1, 32-256 channels (nn_wino_ok): Winograd F(2x2, 3x3)
 *              (conv_wino.c, conv_wino2.c) for the forward and the input
 *              gradient, and the weight gradient of the smaller ones
 *              (nn_wino_wgrad_ok); 16 -> 16 channels: F(4x4, 3x3)
 *              (conv_wino4.c) for all three passes.
 * The narrow and one-channel kernels are AVX-512 with portable versions.
 *
 * The backward's dispatch (the weight gradient's path, the input
 * gradient's, the loops that run both) is in conv_backward.c, the tasks
 * themselves in conv_tasks.c, the im2col + BLIS path (one thread's share
 * of a call) in conv_gemm.c, what they share in conv_impl.h. Every cut
 * here depends on the shapes only, never on the thread count.
 */
#include "conv_impl.h"

#define CONV_CHUNK_BYTES (512 * 1024) /* a chunk's col matrix, to stay in L2 */

void nn_conv_dims_finish(nn_conv_dims *d)
{
    d->OH = nn_window_out(d->H, d->KH, d->SH, d->PH);
    d->OW = nn_window_out(d->W, d->KW, d->SW, d->PW);
}

int nn_conv_chunk(const nn_conv_dims *d)
{
    size_t per_img = (size_t)d->OH * d->OW * d->KH * d->KW * d->C * sizeof(float);
    size_t chunk = per_img ? CONV_CHUNK_BYTES / per_img : 1;
    if (chunk < 1) chunk = 1;
    if (chunk > (size_t)d->N) chunk = (size_t)d->N;
    return (int)chunk;
}

/* W^T [K][R] for the narrow dcol product (backward), an aligned copy of W
 * (forward). */
static size_t wt_floats(const nn_conv_dims *d)
{
    return d->K <= NN_NARROW_MAX ? align16((size_t)d->K * d->KH * d->KW * d->C + CONV_SLACK) : 0;
}

/* The col area. */
size_t nn_cv_col_floats(const nn_conv_dims *d)
{
    size_t col = (size_t)nn_conv_chunk(d) * d->OH * d->OW * d->KH * d->KW * d->C;
    return align16(col + CONV_SLACK);
}

size_t nn_cv_pad_floats(const nn_conv_dims *d)
{
    return align16((size_t)pad_h(d) * pad_w(d) * d->C + pad_slack(d));
}

/* ---- how a call is cut into tasks (depends on the shapes only) ---------- */

#define CONV_GROUP_PIXELS 256        /* output pixels per fast call, at least */
#define CONV_GROUP_FLOATS (1u << 20) /* padded images per fast call: at most 4 MB */
#define CONV_PART_FLOATS (1u << 19)  /* weight-gradient partials: at most 2 MB */
#define CONV_SLICE_PIXELS 2048       /* output pixels per weight-gradient slice, at least */
#define CONV_WG_ROWS 384             /* kernel rows per weight-gradient task */

/* dw through the fast kernel: K > 16 output channels (narrower ones have
 * the narrow kernels) and window rows of 16 floats or more (a 3x3 kernel
 * over one channel would leave its register tiles nearly empty), AVX-512.
 * A padded layer with K = 24 or 32 and window rows of whole vectors takes
 * the narrow kernel instead: the fast kernel's channel-range tasks left
 * its 64-channel tiles half empty (resnet-20's 16->32 3x3/2: 46% -> 80-85%
 * of peak); unpadded ones (Inception's 2a, 32->32 at 149^2, 76%) stay. */
bool nn_cv_fast_dw_ok(const nn_conv_dims *d)
{
    return CONV_X86 && d->K > 16 && d->KW * d->C >= 16 && nn_narrow_use_simd(-1) &&
           (unpadded(d) || !nn_narrow_conv_dw_ok(d->KW * d->C, d->K));
}

/* The input gradient through the fast kernel (a convolution of dy, or dy
 * w^T for 1x1): K > 32, or K > 16 with 32 or more input channels (the
 * narrow kernels' scatter-add is slower there), AVX-512. */
bool nn_cv_fast_dgrad_ok(const nn_conv_dims *d)
{
    bool shape = conv_is_pointwise(d) || dgrad_as_conv(d) || strided_pointwise(d);
    return shape && (nn_cf_ok(d) || (nn_cv_fast_dw_ok(d) && d->C >= 32));
}

/* A padded image of the fast path: the input, or dy for the input gradient. */
static size_t fast_img_floats(const nn_conv_dims *d)
{
    size_t n = img_floats(d);
    if (nn_cv_fast_dgrad_ok(d) && dgrad_as_conv(d)) {
        nn_conv_dims g = dgrad_dims(d);
        if (img_floats(&g) > n) n = img_floats(&g);
    }
    return n;
}
/* Images per fast call: enough for CONV_GROUP_PIXELS output pixels (7x7
 * images then fill whole tiles), within CONV_GROUP_FLOATS of `per` floats
 * each; d->N caps it. Scratch areas are sized by this cap: it never
 * decreases with N, so a scratch sized for the batch serves any call with
 * fewer images (the evened groups below can grow when N shrinks: 4 + 4 at
 * N = 8, one group of 6 at N = 6). */
static int group_cap(const nn_conv_dims *d, size_t per)
{
    size_t P = (size_t)d->OH * d->OW;
    size_t G = (CONV_GROUP_PIXELS + P - 1) / P, cap = CONV_GROUP_FLOATS / per;
    if (G > cap) G = cap;
    if (G > (size_t)d->N) G = (size_t)d->N;
    return G < 1 ? 1 : (int)G;
}
/* The groups of near-equal size, at most G images each (N = 8 at 7x7: two
 * groups of 4, not 6 + 2, whose second thread then took tasks of the
 * first group and padded its 6 images again). */
static int even_group(int N, int G)
{
    int ng = (N + G - 1) / G;
    return (N + ng - 1) / ng;
}
int nn_cv_fast_group(const nn_conv_dims *d)
{
    return even_group(d->N, group_cap(d, fast_img_floats(d)));
}
size_t nn_cv_fast_pad_floats(const nn_conv_dims *d)
{
    return align16((size_t)group_cap(d, fast_img_floats(d)) * fast_img_floats(d) + CONV_SLACK);
}
static size_t fast_floats(const nn_conv_dims *d)
{
    if (!nn_cf_ok(d) && !nn_cv_fast_dgrad_ok(d))
        return nn_cv_fast_dw_ok(d) ? nn_cv_fast_pad_floats(d) : 0;
    const int R = d->KH * d->KW * d->C;
    size_t wp = nn_cf_packed_floats(R, d->K), wpt = nn_cf_packed_floats(d->KH * d->KW * d->K, d->C);
    return nn_cv_fast_pad_floats(d) + align16(wp > wpt ? wp : wpt);
}
/* The input gradient of the other strided layers through the fast kernel
 * (nn_cv_dgrad_dcolg_task): groups of images of at least CONV_GROUP_PIXELS
 * output pixels, their padded gradients within CONV_GROUP_FLOATS, the
 * groups of near-equal size (N = 8 at 7x7: two groups of 4, not 6 + 2). */
int nn_cv_dcolg_group(const nn_conv_dims *d)
{
    return even_group(d->N, group_cap(d, img_floats(d)));
}
size_t nn_cv_dcolg_pad_floats(const nn_conv_dims *d)
{
    return align16((size_t)group_cap(d, img_floats(d)) * img_floats(d) + CONV_SLACK);
}
size_t nn_cv_dcolg_buf_floats(const nn_conv_dims *d)
{
    return align16((size_t)group_cap(d, img_floats(d)) * d->OH * d->OW * 64 + CONV_SLACK);
}
static size_t dcolg_floats(const nn_conv_dims *d)
{
    if (!nn_cv_dcolg_ok(d)) return 0;
    return nn_cv_dcolg_pad_floats(d) + nn_cv_dcolg_buf_floats(d) +
           align16(nn_cf_packed_floats(d->K, d->KH * d->KW * d->C));
}
static size_t gemm_floats(const nn_conv_dims *d)
{
    return conv_is_pointwise(d) ? wt_floats(d)
                                : nn_cv_col_floats(d) + nn_cv_pad_floats(d) + wt_floats(d);
}
/* A thread's working area (after the header): either path's layout. */
size_t nn_cv_front_floats(const nn_conv_dims *d)
{
    size_t g = gemm_floats(d), f = fast_floats(d), wi = nn_wino_scratch(d), dg = dcolg_floats(d);
    if (wi > f) f = wi;
    if (dg > f) f = dg;
    return align16(g > f ? g : f);
}
/* The weight gradient of the narrow kernels (narrow.c's implicit im2col:
 * K <= 16, or K = 24 or 32 with window rows of whole vectors) on the GEMM
 * path: one task per slice (nn_cv_wgrad_gemm_task). */
static bool narrow_dw_path(const nn_conv_dims *d)
{
    return !nn_cv_fast_dw_ok(d) && !conv_is_pointwise(d) && !nn_conv1ch_ok(d) &&
           !nn_wino_wgrad_ok(d) && nn_narrow_conv_dw_ok(d->KW * d->C, d->K);
}

/* Slices of the batch whose weight gradients are summed separately (then
 * in slice order): as many as CONV_PART_FLOATS of partials allow, with at
 * least CONV_SLICE_PIXELS output pixels each, at most N; 2 where that
 * gives one (a batch of 2,048-4,095 output pixels: slices of at least
 * 1,024). Every task list is slice-major, so on 2 threads
 * the pool's part p (pool.h) is slice p: thread p reads only the images it
 * writes in the layers before and after. With one slice every task read
 * every image, half of them last written by the other core, which in the
 * slow state of a VM costs more than the arithmetic (inception-mini's 7x7
 * outputs, batch 64; docs/platform.md, "Two cores of machine Z"). A layer of the
 * narrow path with fewer than CONV_NARROW_SLICES of those gets
 * CONV_WG_TASKS slices (at most N, within the partials) instead: there a
 * slice is a task, and one slice would leave the other threads idle
 * (inception-mini's mixed_b/bdbl_2, 16->32 at 7x7, batch 64, would run
 * on the caller alone). Cut by the shapes, as every slice count;
 * docs/design.md §11. */
#define CONV_NARROW_SLICES 4
#define CONV_WG_TASKS 8
int nn_cv_wgrad_slices(const nn_conv_dims *d)
{
    size_t RK = (size_t)d->KH * d->KW * d->C * d->K, cap = CONV_PART_FLOATS / (RK ? RK : 1);
    size_t S = cap, by_work = (size_t)d->N * d->OH * d->OW / CONV_SLICE_PIXELS;
    if (S > by_work) S = by_work;
    if (S == 1 && by_work == 1 && cap >= 2) S = 2;
    if (S < CONV_NARROW_SLICES && narrow_dw_path(d)) S = cap < CONV_WG_TASKS ? cap : CONV_WG_TASKS;
    if (S > (size_t)d->N) S = (size_t)d->N;
    return S < 1 ? 1 : (int)S;
}

/* The whole batch padded once, shared by the weight-gradient tasks, when
 * the fast kernel pads and the batch is small (small images: few slices,
 * whose row blocks would each pad them again). The scratch reserves
 * min(batch, cap) so that it grows with N (a call may have fewer images
 * than the batch the scratch was sized for). d->no_shared_pad turns it off
 * (tests: both ways give the same bits). */
#define CONV_SHARED_PAD_FLOATS (1u << 19)

static size_t shared_pad_floats(const nn_conv_dims *d)
{
    if (!nn_cv_fast_dw_ok(d) || (d->PH == 0 && d->PW == 0)) return 0;
    size_t n = (size_t)d->N * img_floats(d);
    return align16((n < CONV_SHARED_PAD_FLOATS ? n : CONV_SHARED_PAD_FLOATS) + CONV_SLACK);
}
bool nn_cv_use_shared_pad(const nn_conv_dims *d)
{
    return !d->no_shared_pad && shared_pad_floats(d) &&
           (size_t)d->N * img_floats(d) <= CONV_SHARED_PAD_FLOATS;
}

size_t nn_cv_parts_floats(const nn_conv_dims *d)
{
    size_t RK = (size_t)d->KH * d->KW * d->C * d->K;
    return align16((size_t)(nn_cv_wgrad_slices(d) - 1) * RK);
}

size_t nn_conv_scratch(const nn_conv_dims *d)
{
    return CONV_HDR + nn_cv_front_floats(d) + nn_cv_parts_floats(d) + shared_pad_floats(d);
}

/* Scratch layout: [col chunk + slack | padded image + slack | W^T + slack]
 * (a pointwise conv has only W^T). */
float *nn_cv_scratch_pad(float *scratch, const nn_conv_dims *d)
{
    return scratch + nn_cv_col_floats(d);
}
float *nn_cv_scratch_wt(float *scratch, const nn_conv_dims *d)
{
    if (conv_is_pointwise(d)) return scratch;
    return nn_cv_scratch_pad(scratch, d) + nn_cv_pad_floats(d);
}

/* The input gradient of a strided layer with a small kernel (ResNet's
 * 7x7/2 stem, R = 147; its 3x3/2 at 128 channels, R = 1152) through the
 * fast kernel: for a block of output pixels, dcol = dy rows x w^T
 * (nn_cf_forward over the dy rows, w^T packed as a [K][R] kernel), added
 * into the padded image gradient while the block is in L1/L2; no dcol
 * matrix of the whole image. Task = image; w^T's packing lives in thread
 * 0's col area after its dcol block. */
#define CONV_DCOL_FLOATS 9000         /* dcol block: 60 x 147 floats = 35 KB */
#define CONV_DCOL_PACKED (160 * 1024) /* packed w^T: at most 640 KB (in L2) */
int nn_cv_dcol_pixels(const nn_conv_dims *d)
{
    int px = CONV_DCOL_FLOATS / (d->KH * d->KW * d->C) / 12 * 12; /* whole 6- and 12-pixel tiles */
    return px < 12 ? 12 : px > 60 ? 60 : px;
}
size_t nn_cv_dcol_block_floats(const nn_conv_dims *d)
{
    return align16((size_t)nn_cv_dcol_pixels(d) * d->KH * d->KW * d->C + CONV_SLACK);
}
bool nn_cv_fast_dcol_ok(const nn_conv_dims *d)
{
    const int R = d->KH * d->KW * d->C;
    const size_t packed = nn_cf_packed_floats(d->K, R);
    return nn_cf_ok(d) && !nn_cv_fast_dgrad_ok(d) && !conv_is_pointwise(d) &&
           packed <= CONV_DCOL_PACKED && nn_cv_col_floats(d) >= nn_cv_dcol_block_floats(d) + packed;
}
/* The other strided (or over-padded) layers of the fast kernel. */
bool nn_cv_dcolg_ok(const nn_conv_dims *d)
{
    return nn_cf_ok(d) && !nn_cv_fast_dgrad_ok(d) && !conv_is_pointwise(d) &&
           !nn_cv_fast_dcol_ok(d);
}

/* ---- how many tasks a loop has (conv_tasks.c runs them) --------------- */

/* Every loop of a layer gets CONV_MIN_TASKS near-equal tasks where the
 * shape allows: with fewer (3 chunks of 27, 27 and 10 images, say), two
 * threads wait for each other at the loop's end, and the pool cannot
 * balance threads that run at different speeds. Where the images or rows
 * are independent (forward, input gradient), the cut changes no result;
 * the weight gradient's 1x1 GEMM path adds blocks of kernel rows, which
 * leave every sum as it was. */
#define CONV_MIN_TASKS 8
#define CONV_MIN_ROWS 256     /* rows of a pointwise block, at least */
#define CONV_WG_POINT_ROWS 16 /* kernel rows of a 1x1 GEMM weight-gradient block, at least */

/* Blocks of images of the GEMM / narrow / one-channel forward and input
 * gradient: a chunk (nn_conv_chunk) each at most, CONV_MIN_TASKS at least. */
int nn_cv_image_blocks(const nn_conv_dims *d)
{
    int chunk = nn_conv_chunk(d), nb = (d->N + chunk - 1) / chunk;
    int want = d->N < CONV_MIN_TASKS ? d->N : CONV_MIN_TASKS;
    return nb > want ? nb : want;
}

/* Row blocks of a pointwise product with nkb channel blocks: CONV_ROWS
 * rows each at most; more, down to CONV_MIN_ROWS, for CONV_MIN_TASKS
 * tasks. */
int nn_cv_point_row_blocks(int rows, int nkb)
{
    int nb = (rows + CONV_ROWS - 1) / CONV_ROWS, want = (CONV_MIN_TASKS + nkb - 1) / nkb;
    int most = rows / CONV_MIN_ROWS > 1 ? rows / CONV_MIN_ROWS : 1;
    if (want > most) want = most;
    return nb > want ? nb : want;
}

/* Kernel-row blocks of the 1x1 GEMM weight gradient with S slices. */
int nn_cv_point_wgrad_row_blocks(const nn_conv_dims *d, int S)
{
    int want = (CONV_MIN_TASKS + S - 1) / S, most = d->C / CONV_WG_POINT_ROWS;
    if (want > most) want = most;
    return want > 1 ? want : 1;
}

/* Blocks of kernel rows of the fast weight gradient when its images are
 * read in place or padded once for all tasks: at most CONV_WG_ROWS rows
 * each, more, down to CONV_WG_MIN_ROWS rows, until the slices, row blocks
 * and channel blocks make CONV_WG_TASKS tasks: a layer of small images has
 * one slice, and one task would leave the other threads idle. No sum
 * changes with the cut (every dw element still sums its slice's pixels in
 * order), so the cut may depend on how the images are read. */
#define CONV_WG_MIN_ROWS 16
int nn_cv_wgrad_row_blocks(const nn_conv_dims *d, int S, int kbg)
{
    const int R = d->KH * d->KW * d->C, nkb = (d->K + 63) / 64;
    int nr = (R + CONV_WG_ROWS - 1) / CONV_WG_ROWS, per = S * ((nkb + kbg - 1) / kbg);
    int want = (CONV_WG_TASKS + per - 1) / per, most = R / CONV_WG_MIN_ROWS;
    if (want > most) want = most;
    return nr > want ? nr : want;
}

/* Channel blocks per weight-gradient task: all of them for a 1x1 layer
 * whose slices and row blocks already make CONV_WG_TASKS tasks (each task
 * then reads its pixels' x and dy rows once, in order, instead of a 64-
 * channel stripe of dy per task); up to CONV_WG_CHAN_KB for the other 1x1
 * layers, whose row blocks are then cut finer for CONV_WG_TASKS tasks: a
 * task of one 64-channel block read its x rows (C floats apart, 4 KB at
 * res4's C = 1024) once per channel block, from memory when the batch
 * exceeds L3; else one. */
#define CONV_WG_CHAN_KB 4 /* output-channel blocks per task: dy blocks of >= 128 pixels */
int nn_cv_wgrad_kb_group(const nn_conv_dims *d, int S)
{
    const int nkb = (d->K + 63) / 64;
    if (d->KH != 1 || d->KW != 1) return 1;
    if (S * nn_cv_wgrad_row_blocks(d, S, 1) >= CONV_WG_TASKS) return nkb;
    int kbg = nkb < CONV_WG_CHAN_KB ? nkb : CONV_WG_CHAN_KB;
    /* C <= K: fewer channel blocks per task rather than row blocks cut
     * finer than CONV_WG_ROWS for the task count: a task then reads x (C
     * floats a pixel) once more, not dy (K floats) packed once more.
     * resnet-50's 128->512 at 28^2 (3 slices x 4 groups of 2 rather than
     * 3 slices x 2 row blocks x 2 groups of 4) and 256->1024 at 14^2 */
    const int rows = (d->C + CONV_WG_ROWS - 1) / CONV_WG_ROWS;
    if (d->C <= d->K)
        while (kbg > 1 && nn_cv_wgrad_row_blocks(d, S, kbg) > rows) kbg /= 2;
    return kbg;
}

/* Input-channel ranges per slice of the fast weight gradient of padded
 * images and projections (nn_cv_wgrad_chan_task): with the groups of
 * CONV_WG_CHAN_KB output-channel blocks, enough for CONV_WG_TASKS tasks,
 * each range KW*C' >= 16 floats wide (the register tiles' rows). */
int nn_cv_wgrad_chan_kb(const nn_conv_dims *d)
{
    const int nkb = (d->K + 63) / 64;
    return nkb < CONV_WG_CHAN_KB ? nkb : CONV_WG_CHAN_KB;
}
/* An unpadded strided layer whose image exceeds CONV_IMG_L2 floats (512
 * KB: Inception's 6a, 35x35x288) also takes the channel-range tasks: read
 * in place, each 6-row tile walked its strided windows through an image
 * that does not stay in L2; a sub-image of C' channels does. */
#define CONV_IMG_L2 (128 * 1024)
bool nn_cv_wgrad_chan_unpadded(const nn_conv_dims *d)
{
    return (d->SH > 1 || d->SW > 1) && (size_t)d->H * d->W * d->C > CONV_IMG_L2;
}
/* Window-row floats (KW*C') per channel range, at least: 48 for a window
 * wider than one pixel, else 16 (one vector: 1x1 projections and 7x1
 * layers, as before). Every range reads all of its slice's dy again:
 * inception-mini's reduce/b3x3 (3x3/2, 64->64 at 14x14, batch 64, one
 * slice) as 8 ranges of 8 channels (24 floats) spends more on its backward
 * than as 4 ranges of 16, on one thread and on two. No sum changes with
 * the ranges (each dw element sums its slice's pixels in order), so no bit
 * does; of the built-in models only that layer's cut changes. */
#define CONV_WG_CHAN_ROW 48
int nn_cv_wgrad_chan_blocks(const nn_conv_dims *d, int S)
{
    const int nkb = (d->K + 63) / 64, kbg = nn_cv_wgrad_chan_kb(d),
              per = S * ((nkb + kbg - 1) / kbg);
    const int row = d->KW > 1 ? CONV_WG_CHAN_ROW : 16;
    int nch = (CONV_WG_TASKS + per - 1) / per, most = d->KW * d->C / row;
    if (nch > most) nch = most;
    if (nch > d->C) nch = d->C;
    return nch < 1 ? 1 : nch;
}

/* ---- the forward's dispatch -------------------------------------------- */

/* The fast forward's tasks are (group of images or block of rows, block of
 * 64 output channels), cut by the pool into T contiguous parts, and the
 * packing loop before them gives thread p the channel blocks of part p.
 * Images outermost (1), each thread reads every packed block, half of
 * them written by the other core; channel blocks outermost (T), each
 * thread reads only the blocks it packed, but every image's input (and
 * writes every image's output). So the blocks go outermost where the
 * packed kernel outweighs the input pixels the windows reach plus the
 * output: resnet-50's res5 3x3 512, 3x3/2 512 and projection 1024 -> 2048
 * at batch 8 (`bench_conv --threads 2` compares the two orders). Each
 * output is still one task's, computed alike: no bit changes. */
static int fwd_kb_chunks(const nn_conv_dims *d, int T, int nkb)
{
    if (T < 2 || nkb % T) return 1;
    const size_t wf = (size_t)d->KH * d->KW * d->C * d->K,
                 in = (size_t)d->N * d->H * d->W * d->C / ((size_t)d->SH * d->SW),
                 out = (size_t)d->N * d->OH * d->OW * d->K;
    return wf > in + out ? T : 1;
}

void nn_conv2d_forward(float *out, const float *inp, const float *w, const float *b,
                       const nn_conv_dims *d, bool relu, nn_pool *pool, float *scratch,
                       size_t stride)
{
    conv_job j = {.d = d,
                  .inp = inp,
                  .w = w,
                  .b = b,
                  .out = out,
                  .relu = relu,
                  .scratch = scratch,
                  .stride = stride};
    if (nn_wino_ok(d)) {
        nn_wino_forward(out, inp, w, b, d, relu, pool, job_front(&j, 0), stride);
        return;
    }
    if (nn_cf_ok(d)) {
        float *wp = job_front(&j, 0) + nn_cv_fast_pad_floats(d);
        nn_cv_pack_par(pool, wp, w, d, false);
        j.wp = wp, j.nkb = (d->K + 63) / 64;
        j.kbc = fwd_kb_chunks(d, nn_pool_threads(pool), j.nkb);
        if (conv_is_pointwise(d)) {
            j.nrc = nn_cv_point_row_blocks(d->N * d->H * d->W, j.nkb);
            conv_for(pool, j.nrc * j.nkb, nn_cv_fwd_point_task, &j);
            return;
        }
        j.G = nn_cv_fast_group(d), j.ngroups = (d->N + j.G - 1) / j.G;
        nn_cv_job_reset_tags(&j, pool);
        conv_for(pool, j.ngroups * j.nkb, nn_cv_fwd_fast_task, &j);
        return;
    }
    j.nib = nn_cv_image_blocks(d);
    conv_for(pool, j.nib, nn_cv_fwd_gemm_task, &j);
}
