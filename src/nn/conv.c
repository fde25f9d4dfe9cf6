/*
 * conv.c - 2-D convolution lowered to matrix products.
 *
 * For images [n0, n0+nn) the NHWC im2col matrix is
 *   col[nn*OH*OW][R],  R = KH*KW*C,  row (n, oh, ow), column (kh, kw, c),
 * and the kernel w[KH][KW][C][K] is the matrix [R][K], so
 *   forward   out[rows][K] = col w
 *   backward  dw[R][K]     = col^T dout              (summed over chunks)
 *             dcol[rows][R] = dout w^T, col2im(dcol) (scatter-add)
 * Which code multiplies depends on K, the output channels:
 *   K > 32     nn_gemm (BLIS) on the col matrix of a chunk of images, sized
 *              to stay in L2; backward rebuilds the chunk's col (cheaper
 *              than keeping N*OH*OW*R floats per layer).
 *   K <= 32    the narrow kernels (narrow.c): the forward reads windows
 *              straight from a zero-padded copy of each image ("implicit
 *              im2col": no col matrix), so does dw for K <= 16 (else it
 *              multiplies the chunk's col), and the input gradient is added
 *              straight into the padded image gradient (no dcol matrix, no
 *              col2im). BLIS measured 7-40 GFLOP/s on these shapes.
 *   C = 1, stride 1, K <= 16 (a grayscale input layer): conv1ch.c,
 *              vectorised along the output row.
 *   1x1, stride 1, no padding: a dense layer over the N*H*W rows.
 *   3x3, stride 1, 32-256 channels (nn_wino_ok): Winograd F(2x2, 3x3) in
 *              conv_wino.c for the forward and the input gradient, and the
 *              weight gradient of the smaller ones (nn_wino_wgrad_ok).
 * The narrow and one-channel kernels are AVX-512 with portable versions.
 *
 * im2col copies from the padded image, so every window row (KW*C floats,
 * contiguous in NHWC) is one straight copy with no bounds checks. The
 * portable copy moves whole blocks of 8 floats and may write up to 7 floats
 * past a segment: segments are written in increasing address order, so the
 * overhang is overwritten by the next segment, and the scratch carries
 * slack for the last one. The vector kernels read past the padded image
 * (pad_slack), whose slack is kept zero.
 */
#include <stdint.h>
#include <string.h>

#include "layers.h"
#include "pool.h"
#include "pstrain/blas.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CONV_X86 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f")))
#else
#define CONV_X86 0
#endif

#define CONV_SLACK 16                 /* floats after each scratch area */
#define CONV_CHUNK_BYTES (512 * 1024) /* a chunk's col matrix, to stay in L2 */

static bool conv_is_pointwise(const nn_conv_dims *d)
{
    return d->KH == 1 && d->KW == 1 && d->SH == 1 && d->SW == 1 && d->PH == 0 && d->PW == 0;
}

void nn_conv_dims_finish(nn_conv_dims *d)
{
    d->OH = nn_window_out(d->H, d->KH, d->SH, d->PH);
    d->OW = nn_window_out(d->W, d->KW, d->SW, d->PW);
}

/* Rows and columns of the padded image that windows touch. */
static int pad_h(const nn_conv_dims *d)
{
    return (d->OH - 1) * d->SH + d->KH;
}
static int pad_w(const nn_conv_dims *d)
{
    return (d->OW - 1) * d->SW + d->KW;
}

int nn_conv_chunk(const nn_conv_dims *d)
{
    size_t per_img = (size_t)d->OH * d->OW * d->KH * d->KW * d->C * sizeof(float);
    size_t chunk = per_img ? CONV_CHUNK_BYTES / per_img : 1;
    if (chunk < 1) chunk = 1;
    if (chunk > (size_t)d->N) chunk = (size_t)d->N;
    return (int)chunk;
}

/* Every scratch area starts 64-byte aligned (the scratch itself is): a
 * 16-float row of a kernel matrix is then one cache line, not two. */
static size_t align16(size_t n)
{
    return (n + 15) / 16 * 16;
}

/* After the padded image: the implicit-im2col kernel's overrun (8 windows). */
static size_t pad_slack(const nn_conv_dims *d)
{
    return (size_t)8 * d->SW * d->C + CONV_SLACK;
}

/* W^T [K][R] for the narrow dcol product (backward), an aligned copy of W
 * (forward). */
static size_t wt_floats(const nn_conv_dims *d)
{
    return d->K <= NN_NARROW_MAX ? align16((size_t)d->K * d->KH * d->KW * d->C + CONV_SLACK) : 0;
}

/* The col area; the one-channel path keeps its transposed gradient there. */
static size_t col_floats(const nn_conv_dims *d)
{
    size_t col = (size_t)nn_conv_chunk(d) * d->OH * d->OW * d->KH * d->KW * d->C;
    size_t c1 = nn_conv1ch_scratch(d);
    return align16((col > c1 ? col : c1) + CONV_SLACK);
}

static size_t pad_floats(const nn_conv_dims *d)
{
    return align16((size_t)pad_h(d) * pad_w(d) * d->C + pad_slack(d));
}

/* The input-gradient convolution of a stride-1 layer: dy zero-padded by
 * KH-1-PH rows on top (KW-1-PW columns on the left) and convolved with the
 * flipped, transposed kernel gives the input, H x W. Needs PH <= KH-1 and
 * PW <= KW-1 (else some dy rows would fall outside the padded copy). */
static bool dgrad_as_conv(const nn_conv_dims *d)
{
    return d->SH == 1 && d->SW == 1 && d->PH <= d->KH - 1 && d->PW <= d->KW - 1;
}
static nn_conv_dims dgrad_dims(const nn_conv_dims *d)
{
    nn_conv_dims g = {
        d->N, d->OH, d->OW, d->K, d->KH, d->KW, 1, 1, d->KH - 1 - d->PH, d->KW - 1 - d->PW,
        d->H, d->W,  d->C};
    return g;
}

/* ---- how a call is cut into tasks (depends on the shapes only) ---------- */

#define CONV_GROUP_PIXELS 256        /* output pixels per fast call, at least */
#define CONV_GROUP_FLOATS (1u << 20) /* padded images per fast call: at most 4 MB */
#define CONV_PART_FLOATS (1u << 19)  /* weight-gradient partials: at most 2 MB */
#define CONV_SLICE_PIXELS 2048       /* output pixels per weight-gradient slice, at least */
#define CONV_WG_ROWS 384             /* kernel rows per weight-gradient task */
#define CONV_ROWS 1024               /* rows per task of a pointwise product */
#define CONV_HDR 16                  /* floats before each thread's scratch: a tag */

/* dw through the fast kernel: K > 16 output channels (narrower ones have
 * the narrow kernels) and window rows of 16 floats or more (a 3x3 kernel
 * over one channel would leave its register tiles nearly empty), AVX-512. */
static bool fast_dw_ok(const nn_conv_dims *d)
{
    return CONV_X86 && d->K > 16 && d->KW * d->C >= 16 && nn_narrow_use_simd(-1);
}

/* The input gradient through the fast kernel (a convolution of dy, or dy
 * w^T for 1x1): K > 32, or K > 16 with 32 or more input channels (the
 * narrow kernels' scatter-add is slower there), AVX-512. */
static bool strided_pointwise(const nn_conv_dims *d);
static bool fast_dgrad_ok(const nn_conv_dims *d)
{
    bool shape = conv_is_pointwise(d) || dgrad_as_conv(d) || strided_pointwise(d);
    return shape && (nn_cf_ok(d) || (fast_dw_ok(d) && d->C >= 32));
}

static size_t img_floats(const nn_conv_dims *d)
{
    return (size_t)pad_h(d) * pad_w(d) * d->C;
}
/* A padded image of the fast path: the input, or dy for the input gradient. */
static size_t fast_img_floats(const nn_conv_dims *d)
{
    size_t n = img_floats(d);
    if (fast_dgrad_ok(d) && dgrad_as_conv(d)) {
        nn_conv_dims g = dgrad_dims(d);
        if (img_floats(&g) > n) n = img_floats(&g);
    }
    return n;
}
/* Images per fast call: enough for CONV_GROUP_PIXELS output pixels (7x7
 * images then fill whole tiles), within CONV_GROUP_FLOATS; d->N caps it. */
static int fast_group(const nn_conv_dims *d)
{
    size_t P = (size_t)d->OH * d->OW, per = fast_img_floats(d);
    size_t G = (CONV_GROUP_PIXELS + P - 1) / P, cap = CONV_GROUP_FLOATS / per;
    if (G > cap) G = cap;
    if (G > (size_t)d->N) G = (size_t)d->N;
    return G < 1 ? 1 : (int)G;
}
static size_t fast_pad_floats(const nn_conv_dims *d)
{
    return align16((size_t)fast_group(d) * fast_img_floats(d) + CONV_SLACK);
}
static size_t fast_floats(const nn_conv_dims *d)
{
    if (!nn_cf_ok(d) && !fast_dgrad_ok(d)) return fast_dw_ok(d) ? fast_pad_floats(d) : 0;
    const int R = d->KH * d->KW * d->C;
    size_t wp = nn_cf_packed_floats(R, d->K), wpt = nn_cf_packed_floats(d->KH * d->KW * d->K, d->C);
    return fast_pad_floats(d) + align16(wp > wpt ? wp : wpt);
}
static size_t gemm_floats(const nn_conv_dims *d)
{
    return conv_is_pointwise(d) ? wt_floats(d) : col_floats(d) + pad_floats(d) + wt_floats(d);
}
/* A thread's working area (after the header): either path's layout. */
static size_t front_floats(const nn_conv_dims *d)
{
    size_t g = gemm_floats(d), f = fast_floats(d), wi = nn_wino_scratch(d);
    if (wi > f) f = wi;
    return align16(g > f ? g : f);
}
/* Slices of the batch whose weight gradients are summed separately (then
 * in slice order): as many as CONV_PART_FLOATS of partials allow, with at
 * least CONV_SLICE_PIXELS output pixels each, at most N. */
static int wgrad_slices(const nn_conv_dims *d)
{
    size_t RK = (size_t)d->KH * d->KW * d->C * d->K, S = CONV_PART_FLOATS / (RK ? RK : 1);
    size_t by_work = (size_t)d->N * d->OH * d->OW / CONV_SLICE_PIXELS;
    if (S > by_work) S = by_work;
    if (S > (size_t)d->N) S = (size_t)d->N;
    return S < 1 ? 1 : (int)S;
}

/* The whole batch padded once, shared by the weight-gradient tasks, when
 * the fast kernel pads and the batch is small (small images: few slices,
 * whose row blocks would each pad them again). The scratch reserves
 * min(batch, cap) so that it grows with N (a call may have fewer images
 * than the batch the scratch was sized for). nn_conv_shared_pad(0) turns
 * it off (tests: both ways give the same bits). */
#define CONV_SHARED_PAD_FLOATS (1u << 19)
static int shared_pad_mode = 1;

bool nn_conv_shared_pad(int force)
{
    if (force == 0 || force == 1) shared_pad_mode = force;
    return shared_pad_mode == 1;
}

static size_t shared_pad_floats(const nn_conv_dims *d)
{
    if (!fast_dw_ok(d) || (d->PH == 0 && d->PW == 0)) return 0;
    size_t n = (size_t)d->N * img_floats(d);
    return align16((n < CONV_SHARED_PAD_FLOATS ? n : CONV_SHARED_PAD_FLOATS) + CONV_SLACK);
}
static bool use_shared_pad(const nn_conv_dims *d)
{
    return shared_pad_mode == 1 && shared_pad_floats(d) &&
           (size_t)d->N * img_floats(d) <= CONV_SHARED_PAD_FLOATS;
}

static size_t parts_floats(const nn_conv_dims *d)
{
    size_t RK = (size_t)d->KH * d->KW * d->C * d->K;
    return align16((size_t)(wgrad_slices(d) - 1) * RK);
}

size_t nn_conv_scratch(const nn_conv_dims *d)
{
    return CONV_HDR + front_floats(d) + parts_floats(d) + shared_pad_floats(d);
}

/* dst[0, n) = src[0, n) in blocks of 8 floats (may touch up to 7 more). */
static inline void copy_blocks(float *restrict dst, const float *restrict src, int n)
{
    for (int j = 0; j < n; j += 8) memcpy(dst + j, src + j, 8 * sizeof(float));
}

/* Copies image n of inp into the padded buffer's interior (borders stay 0). */
static void pad_image(float *restrict pad, const float *inp, const nn_conv_dims *d, int n)
{
    const int Hp = pad_h(d), Wp = pad_w(d), C = d->C;
    int rows = d->H < Hp - d->PH ? d->H : Hp - d->PH;
    int cols = d->W < Wp - d->PW ? d->W : Wp - d->PW;
    const float *img = inp + (size_t)n * d->H * d->W * C;
    for (int h = 0; h < rows; h++)
        memcpy(pad + ((size_t)(h + d->PH) * Wp + d->PW) * C, img + (size_t)h * d->W * C,
               sizeof(float) * cols * C);
}

/* Zeroes what pad_image does not write (border rows and columns, slack):
 * a chunk of images then costs no memset of whole padded images. */
static void pad_clear(float *pad, const nn_conv_dims *d)
{
    const int Hp = pad_h(d), Wp = pad_w(d), C = d->C;
    int rows = d->H < Hp - d->PH ? d->H : Hp - d->PH;
    int cols = d->W < Wp - d->PW ? d->W : Wp - d->PW;
    const size_t rowlen = (size_t)Wp * C;
    memset(pad, 0, sizeof(float) * d->PH * rowlen);
    for (int h = 0; h < rows; h++) {
        float *row = pad + (size_t)(h + d->PH) * rowlen;
        memset(row, 0, sizeof(float) * d->PW * C);
        memset(row + (size_t)(d->PW + cols) * C, 0, sizeof(float) * (Wp - d->PW - cols) * C);
    }
    memset(pad + (size_t)(d->PH + rows) * rowlen, 0,
           sizeof(float) * ((size_t)(Hp - d->PH - rows) * rowlen + pad_slack(d)));
}

/* im2col of one padded image into rows [0, OH*OW) of col. */
static void im2col_port(float *col, const float *pad, const nn_conv_dims *d)
{
    const int Wp = pad_w(d), C = d->C, KH = d->KH, seg = d->KW * C, R = KH * seg;
    for (int oh = 0; oh < d->OH; oh++)
        for (int ow = 0; ow < d->OW; ow++) {
            float *row = col + ((size_t)oh * d->OW + ow) * R;
            const float *src = pad + ((size_t)oh * d->SH * Wp + (size_t)ow * d->SW) * C;
            for (int kh = 0; kh < KH; kh++)
                copy_blocks(row + kh * seg, src + (size_t)kh * Wp * C, seg);
        }
}

#if CONV_X86
/* The same with exact masked copies of each segment. */
AVX512 static void im2col_simd(float *col, const float *pad, const nn_conv_dims *d)
{
    const int Wp = pad_w(d), C = d->C, KH = d->KH, seg = d->KW * C, R = KH * seg;
    const int full = seg / 16;
    const __mmask16 tail = (__mmask16)((1u << (seg % 16)) - 1);
    for (int oh = 0; oh < d->OH; oh++)
        for (int ow = 0; ow < d->OW; ow++) {
            float *row = col + ((size_t)oh * d->OW + ow) * R;
            const float *src = pad + ((size_t)oh * d->SH * Wp + (size_t)ow * d->SW) * C;
            for (int kh = 0; kh < KH; kh++) {
                float *o = row + kh * seg;
                const float *i = src + (size_t)kh * Wp * C;
                for (int v = 0; v < full; v++)
                    _mm512_storeu_ps(o + 16 * v, _mm512_loadu_ps(i + 16 * v));
                if (tail)
                    _mm512_mask_storeu_ps(o + 16 * full, tail,
                                          _mm512_maskz_loadu_ps(tail, i + 16 * full));
            }
        }
}

/* dpad (+)= the segments of dcol (see col2im_padded), output pixels
 * [p0, p0 + np) of the image, dcol's rows starting at p0. */
AVX512 static void col2im_simd(float *dpad, const float *dcol, const nn_conv_dims *d, int p0,
                               int np)
{
    const int Wp = pad_w(d), C = d->C, KH = d->KH, seg = d->KW * C, R = KH * seg;
    const int full = seg / 16;
    const __mmask16 tail = (__mmask16)((1u << (seg % 16)) - 1);
    for (int p = p0; p < p0 + np; p++) {
        const int oh = p / d->OW, ow = p - oh * d->OW;
        const float *row = dcol + (size_t)(p - p0) * R;
        float *dst = dpad + ((size_t)oh * d->SH * Wp + (size_t)ow * d->SW) * C;
        for (int kh = 0; kh < KH; kh++) {
            float *o = dst + (size_t)kh * Wp * C;
            const float *i = row + kh * seg;
            for (int v = 0; v < full; v++)
                _mm512_storeu_ps(o + 16 * v, _mm512_add_ps(_mm512_loadu_ps(o + 16 * v),
                                                           _mm512_loadu_ps(i + 16 * v)));
            if (tail)
                _mm512_mask_storeu_ps(o + 16 * full, tail,
                                      _mm512_add_ps(_mm512_maskz_loadu_ps(tail, o + 16 * full),
                                                    _mm512_maskz_loadu_ps(tail, i + 16 * full)));
        }
    }
}
#endif

static void im2col_padded(float *col, const float *pad, const nn_conv_dims *d)
{
#if CONV_X86
    if (nn_narrow_use_simd(-1)) {
        im2col_simd(col, pad, d);
        return;
    }
#endif
    im2col_port(col, pad, d);
}

/* Scratch layout: [col chunk + slack | padded image + slack | W^T + slack]
 * (a pointwise conv has only W^T). */
static float *scratch_pad(float *scratch, const nn_conv_dims *d)
{
    return scratch + col_floats(d);
}
static float *scratch_wt(float *scratch, const nn_conv_dims *d)
{
    if (conv_is_pointwise(d)) return scratch;
    return scratch_pad(scratch, d) + pad_floats(d);
}

/* wt[K][R] = w[R][K]^T */
static void transpose_kernel(float *restrict wt, const float *restrict w, int R, int K)
{
    for (int r = 0; r < R; r++)
        for (int k = 0; k < K; k++) wt[(size_t)k * R + r] = w[(size_t)r * K + k];
}

/* The narrow kernels when the output channels allow and they run
 * vectorised; without AVX-512 BLIS on the col matrix is the faster path
 * (the portable narrow kernels are the reference the tests compare with). */
static bool use_narrow(int K)
{
    return K <= NN_NARROW_MAX && nn_narrow_use_simd(-1);
}

/* The three products. */
static void mul_fwd(float *out, const float *col, const float *w, const float *b, int rows, int R,
                    int K, bool relu)
{
    if (use_narrow(K)) {
        nn_narrow_nn(rows, K, R, col, R, w, K, b, relu, out, K, false);
    } else {
        nn_gemm(false, false, rows, K, R, 1.0f, col, R, w, K, 0.0f, out, K);
        nn_bias_relu(out, b, rows, K, relu);
    }
}
static void mul_dw(float *dw, const float *col, const float *dy, int rows, int R, int K, bool acc)
{
    if (use_narrow(K))
        nn_narrow_tn(R, K, rows, col, R, dy, K, dw, K, acc);
    else
        nn_gemm(true, false, R, K, rows, 1.0f, col, R, dy, K, acc ? 1.0f : 0.0f, dw, K);
}
/* dcol[rows][R] (+)= dy[rows][K] w^T; wt = w^T when K is narrow. */
static void mul_dcol(float *dcol, const float *dy, const float *w, const float *wt, int rows, int R,
                     int K, bool acc)
{
    if (use_narrow(K))
        nn_narrow_nt(rows, R, K, dy, wt, dcol, R, acc);
    else
        nn_gemm(false, true, rows, R, K, 1.0f, dy, K, w, K, acc ? 1.0f : 0.0f, dcol, R);
}

/* Scatter-adds rows [0, OH*OW) of dcol into the padded image gradient. */
static void col2im_padded(float *dpad, const float *dcol, const nn_conv_dims *d)
{
#if CONV_X86
    if (nn_narrow_use_simd(-1)) {
        col2im_simd(dpad, dcol, d, 0, d->OH * d->OW);
        return;
    }
#endif
    const int Wp = pad_w(d), C = d->C, KH = d->KH, seg = d->KW * C, R = KH * seg;
    for (int oh = 0; oh < d->OH; oh++)
        for (int ow = 0; ow < d->OW; ow++) {
            const float *row = dcol + ((size_t)oh * d->OW + ow) * R;
            float *dst = dpad + ((size_t)oh * d->SH * Wp + (size_t)ow * d->SW) * C;
            for (int kh = 0; kh < KH; kh++) {
                float *restrict o = dst + (size_t)kh * Wp * C;
                const float *restrict s = row + kh * seg;
                for (int j = 0; j < seg; j++) o[j] += s[j];
            }
        }
}

/* dinp image n (+)= interior of the padded gradient. */
static void unpad_image(float *dinp, bool acc, const float *dpad, const nn_conv_dims *d, int n)
{
    const int Hp = pad_h(d), Wp = pad_w(d), C = d->C;
    int rows = d->H < Hp - d->PH ? d->H : Hp - d->PH;
    int cols = d->W < Wp - d->PW ? d->W : Wp - d->PW;
    float *img = dinp + (size_t)n * d->H * d->W * C;
    size_t rowlen = (size_t)d->W * C;
    for (int h = 0; h < d->H; h++) {
        float *restrict o = img + h * rowlen;
        if (h >= rows) {
            /* input rows that no window reaches (floor of the output size) */
            if (!acc) memset(o, 0, sizeof(float) * rowlen);
            continue;
        }
        const float *restrict s = dpad + ((size_t)(h + d->PH) * Wp + d->PW) * C;
        size_t nv = (size_t)cols * C;
        if (acc)
            for (size_t j = 0; j < nv; j++) o[j] += s[j];
        else
            memcpy(o, s, sizeof(float) * nv);
        if (!acc && nv < rowlen) memset(o + nv, 0, sizeof(float) * (rowlen - nv));
    }
}

/* The GEMM path of the forward (and the narrow and one-channel kernels)
 * over the images of d, on one thread's scratch. */
static void forward_gemm(float *out, const float *inp, const float *w, const float *b,
                         const nn_conv_dims *d, bool relu, float *scratch)
{
    const int K = d->K, R = d->KH * d->KW * d->C;
    if (conv_is_pointwise(d)) {
        mul_fwd(out, inp, w, b, d->N * d->H * d->W, d->C, K, relu);
        return;
    }
    const size_t img_rows = (size_t)d->OH * d->OW;
    float *col = scratch, *pad = scratch_pad(scratch, d);
    /* borders and slack zero (the vector kernels read into the slack) */
    pad_clear(pad, d);
    if (nn_conv1ch_ok(d)) {
        for (int n = 0; n < d->N; n++) {
            pad_image(pad, inp, d, n);
            nn_conv1ch_forward(out + (size_t)n * img_rows * K, pad, pad_w(d), d, w, b, relu);
        }
        return;
    }
    if (use_narrow(K)) {
        /* implicit im2col: each output row straight from the padded image;
         * the kernel's rows aligned (a variable's slab offset need not be) */
        if ((uintptr_t)w % 64) w = memcpy(scratch_wt(scratch, d), w, sizeof(float) * R * K);
        const int Wp = pad_w(d), C = d->C;
        for (int n = 0; n < d->N; n++) {
            pad_image(pad, inp, d, n);
            for (int oh = 0; oh < d->OH; oh++)
                nn_narrow_conv_row(out + ((size_t)n * d->OH + oh) * d->OW * K,
                                   pad + (size_t)oh * d->SH * Wp * C, d->OW, d->SW * C, d->KH,
                                   Wp * C, d->KW * C, w, K, b, relu);
        }
        return;
    }
    const int chunk = nn_conv_chunk(d);
    for (int n0 = 0; n0 < d->N; n0 += chunk) {
        int nn = d->N - n0 < chunk ? d->N - n0 : chunk;
        for (int i = 0; i < nn; i++) {
            pad_image(pad, inp, d, n0 + i);
            im2col_padded(col + i * img_rows * R, pad, d);
        }
        mul_fwd(out + n0 * img_rows * K, col, w, b, nn * (int)img_rows, R, K, relu);
    }
}

/* The GEMM path of the backward (and the narrow and one-channel kernels)
 * over the images of d, on one thread's scratch; dw may be NULL (only the
 * input gradient), dinp too (only dw). */
static void backward_gemm(float *dinp, bool acc, float *dw, float *db, float *dout,
                          const float *out, const float *inp, const float *w, const nn_conv_dims *d,
                          bool relu, float *scratch)
{
    const int K = d->K, R = d->KH * d->KW * d->C;
    if (conv_is_pointwise(d)) {
        int rows = d->N * d->H * d->W;
        if (relu) nn_relu_mask(dout, out, (size_t)rows * K);
        if (dw) nn_gemm(true, false, d->C, K, rows, 1.0f, inp, d->C, dout, K, 0.0f, dw, K);
        if (db) nn_bias_backward(db, dout, rows, K);
        if (dinp)
            nn_gemm(false, true, rows, d->C, K, 1.0f, dout, K, w, K, acc ? 1.0f : 0.0f, dinp, d->C);
        return;
    }
    const size_t img_rows = (size_t)d->OH * d->OW;
    const int chunk = nn_conv_chunk(d);
    const size_t npad = (size_t)pad_h(d) * pad_w(d) * d->C;
    float *col = scratch, *pad = scratch_pad(scratch, d), *wt = scratch_wt(scratch, d);
    if (!dinp && dw && nn_conv1ch_ok(d)) {
        memset(pad, 0, sizeof(float) * (npad + pad_slack(d)));
        memset(dw, 0, sizeof(float) * (size_t)R * K);
        if (db) memset(db, 0, sizeof(float) * K);
        for (int n = 0; n < d->N; n++) {
            pad_image(pad, inp, d, n);
            size_t o = (size_t)n * img_rows * K;
            nn_conv1ch_dw(dw, db, pad, pad_w(d), d, dout + o, out + o, relu, col);
        }
        return;
    }
    if (dinp && use_narrow(K)) transpose_kernel(wt, w, R, K);
    if (db) memset(db, 0, sizeof(float) * K);
    for (int n0 = 0; n0 < d->N; n0 += chunk) {
        int nn = d->N - n0 < chunk ? d->N - n0 : chunk;
        int rows = nn * (int)img_rows;
        float *dy = dout + n0 * img_rows * K;
        if (relu) nn_relu_mask(dy, out + n0 * img_rows * K, (size_t)rows * K);
        if (db)
            for (int r = 0; r < rows; r++) {
                const float *restrict s = dy + (size_t)r * K;
                for (int k = 0; k < K; k++) db[k] += s[k];
            }
        const int Wp = pad_w(d), C = d->C;
        bool implicit = true;
        for (int i = 0; i < nn && implicit && dw; i++) {
            /* dw straight from each padded image when the kernel applies */
            memset(pad, 0, sizeof(float) * npad);
            pad_image(pad, inp, d, n0 + i);
            implicit =
                nn_narrow_conv_dw(dw, pad, d->OH, d->OW, d->SH * Wp * C, d->SW * C, d->KH, Wp * C,
                                  d->KW * C, dy + i * img_rows * K, K, n0 > 0 || i > 0);
        }
        if (!implicit && dw) {
            /* rebuild this chunk's columns (pad borders must be zero again) */
            memset(pad, 0, sizeof(float) * npad);
            for (int i = 0; i < nn; i++) {
                pad_image(pad, inp, d, n0 + i);
                im2col_padded(col + i * img_rows * R, pad, d);
            }
            mul_dw(dw, col, dy, rows, R, K, n0 > 0);
        }
        if (!dinp) continue;
        if (use_narrow(K)) {
            /* each output row's input gradient straight into the padded image */
            for (int i = 0; i < nn; i++) {
                memset(pad, 0, sizeof(float) * npad);
                for (int oh = 0; oh < d->OH; oh++)
                    nn_narrow_dcol_row(pad + (size_t)oh * d->SH * Wp * C,
                                       dy + ((size_t)i * d->OH + oh) * d->OW * K, d->OW, d->SW * C,
                                       d->KH, Wp * C, d->KW * C, wt, K);
                unpad_image(dinp, acc, pad, d, n0 + i);
            }
            continue;
        }
        /* dcol overwrites col: dcol[rows][R] = dy[rows][K] w^T */
        mul_dcol(col, dy, w, wt, rows, R, K, false);
        for (int i = 0; i < nn; i++) {
            memset(pad, 0, sizeof(float) * npad);
            col2im_padded(pad, col + i * img_rows * R, d);
            unpad_image(dinp, acc, pad, d, n0 + i);
        }
    }
}

/* ---- the drivers: tasks on the pool ------------------------------------ */

static int conv_threads(nn_pool *pool)
{
    return nn_pool_threads(pool);
}
static void conv_for(nn_pool *pool, int ntasks, void (*fn)(void *arg, int task, int tid), void *arg)
{
    nn_pool_for(pool, ntasks, fn, arg);
}

/* The kernel packed for the fast kernels on the pool, a block of 64
 * output columns per task (resnet-50's 3x3 512 -> 512: 9 MB, 1.3 ms on one
 * thread): flip = the input gradient's flipped, transposed kernel. */
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

static void pack_par(nn_pool *pool, float *wp, const float *w, const nn_conv_dims *d, bool flip)
{
    pack_job p = {wp, w, d, flip};
    nn_pool_for(pool, ((flip ? d->C : d->K) + 63) / 64, pack_task, &p);
}

/* Block b of [0, n) cut into nb near-equal blocks. */
static void block_of(int n, int nb, int b, int *lo, int *hi)
{
    nn_pool_block(n, nb, b, lo, hi);
}

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
    int kbg; /* weight gradient: channel blocks per task */
} conv_job;

static float *job_front(const conv_job *j, int tid)
{
    return j->scratch + (size_t)tid * j->stride + CONV_HDR;
}
/* Which group of images thread tid holds padded (-1: none yet). */
static int *job_tag(const conv_job *j, int tid)
{
    return (int *)(j->scratch + (size_t)tid * j->stride);
}
static void job_reset_tags(const conv_job *j, nn_pool *pool)
{
    for (int t = 0; t < conv_threads(pool); t++) *job_tag(j, t) = -1;
}

static nn_conv_dims sub_batch(const nn_conv_dims *d, int n)
{
    nn_conv_dims s = *d;
    s.N = n;
    return s;
}

/* Without padding the windows lie inside the image: the fast kernels read
 * the input in place (geometry of the unpadded image). */
static bool unpadded(const nn_conv_dims *d)
{
    return d->PH == 0 && d->PW == 0;
}
static nn_cf_geom direct_geom(const nn_conv_dims *d, int ng)
{
    const int C = d->C;
    nn_cf_geom g = {d->OH,     d->OW, d->SH * d->W * C,       d->SW * C, d->KH, d->W * C,
                    d->KW * C, ng,    (size_t)d->H * d->W * C};
    return g;
}

static nn_cf_geom fast_geom(const nn_conv_dims *d, int ng, size_t img)
{
    const int Wp = pad_w(d), C = d->C;
    nn_cf_geom g = {d->OH, d->OW, d->SH * Wp * C, d->SW * C, d->KH, Wp * C, d->KW * C, ng, img};
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
    for (int i = 0; i < ng; i++) pad_image(pad + i * img, src, d, n0 + i);
    *tag = gi >= 0 ? gi : -2;
}

static void group_range(const conv_job *j, int gi, int *n0, int *ng)
{
    *n0 = gi * j->G;
    *ng = j->d->N - *n0 < j->G ? j->d->N - *n0 : j->G;
}

/* forward, fast: task = (group of images, block of 64 output channels) */
static void fwd_fast_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int gi = task / j->nkb, kb = task % j->nkb, n0, ng;
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

/* forward, fast, pointwise: task = (CONV_ROWS rows, channel block), read in place */
static void fwd_point_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int rc = task / j->nkb, kb = task % j->nkb, rows = d->N * d->H * d->W;
    int r0 = rc * CONV_ROWS, r1 = rows - r0 < CONV_ROWS ? rows : r0 + CONV_ROWS;
    nn_cf_geom g = {1, r1 - r0, 0, d->C, 1, 0, d->C, 1, 0};
    nn_cf_forward(j->out + (size_t)r0 * d->K, j->inp + (size_t)r0 * d->C, &g, j->wp, d->K, kb, j->b,
                  j->relu, false);
    (void)tid;
}

/* forward, GEMM / narrow / one-channel path: task = chunk of images */
static void fwd_gemm_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int n0 = task * j->chunk, nn = d->N - n0 < j->chunk ? d->N - n0 : j->chunk;
    nn_conv_dims s = sub_batch(d, nn);
    forward_gemm(j->out + (size_t)n0 * d->OH * d->OW * d->K,
                 j->inp + (size_t)n0 * d->H * d->W * d->C, j->w, j->b, &s, j->relu,
                 job_front(j, tid));
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
        float *wp = job_front(&j, 0) + fast_pad_floats(d);
        pack_par(pool, wp, w, d, false);
        j.wp = wp, j.nkb = (d->K + 63) / 64;
        if (conv_is_pointwise(d)) {
            int rows = d->N * d->H * d->W;
            conv_for(pool, (rows + CONV_ROWS - 1) / CONV_ROWS * j.nkb, fwd_point_task, &j);
            return;
        }
        j.G = fast_group(d), j.ngroups = (d->N + j.G - 1) / j.G;
        job_reset_tags(&j, pool);
        conv_for(pool, j.ngroups * j.nkb, fwd_fast_task, &j);
        return;
    }
    j.chunk = nn_conv_chunk(d);
    conv_for(pool, (d->N + j.chunk - 1) / j.chunk, fwd_gemm_task, &j);
}

/* Blocks of kernel rows of the fast weight gradient: at most CONV_WG_ROWS
 * rows each; when `split` (the images are read in place or padded once for
 * all tasks), more, down to CONV_WG_MIN_ROWS rows, until the slices, row
 * blocks and channel blocks make CONV_WG_TASKS tasks: a layer of small
 * images has one slice, and one task would leave the other threads idle.
 * No sum changes with the cut (every dw element still sums its slice's
 * pixels in order), so the cut may depend on how the images are read. */
#define CONV_WG_TASKS 8
#define CONV_WG_MIN_ROWS 16
static int wgrad_row_blocks(const nn_conv_dims *d, int S, bool split)
{
    const int R = d->KH * d->KW * d->C, nkb = (d->K + 63) / 64;
    int nr = (R + CONV_WG_ROWS - 1) / CONV_WG_ROWS, per = S * nkb;
    if (!split) return nr;
    int want = (CONV_WG_TASKS + per - 1) / per, most = R / CONV_WG_MIN_ROWS;
    if (want > most) want = most;
    return nr > want ? nr : want;
}

/* Channel blocks per weight-gradient task: all of them for a 1x1 layer
 * whose slices and row blocks already make CONV_WG_TASKS tasks (each task
 * then reads its pixels' x and dy rows once, in order, instead of a 64-
 * channel stripe of dy per task), else one. */
static int wgrad_kb_group(const nn_conv_dims *d, int S, int nr)
{
    const int nkb = (d->K + 63) / 64;
    return d->KH == 1 && d->KW == 1 && S * nr >= CONV_WG_TASKS ? nkb : 1;
}

/* weight gradient, fast: task = (slice of the batch, block of kernel rows,
 * group of blocks of 64 output channels) */
static void wgrad_fast_task(void *arg, int task, int tid)
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
    float *pad = job_front(j, tid);
    const size_t img = img_floats(d), out_img = (size_t)d->OH * d->OW * d->K;
    if (j->shared) {
        /* the slice's images, padded once by wgrad_pad_task */
        nn_cf_geom g = fast_geom(d, e - a, img);
        nn_cf_dw(target, j->shared + (size_t)a * img, &g, j->dout + a * out_img, d->K, kb, kb1, r0,
                 r1, false);
        return;
    }
    for (int n0 = a; n0 < e; n0 += j->G) {
        int ng = e - n0 < j->G ? e - n0 : j->G;
        const float *src = j->inp + (size_t)n0 * d->H * d->W * d->C;
        nn_cf_geom g = direct_geom(d, ng);
        if (!unpadded(d)) {
            pad_group(j, tid, -1, pad, j->inp, d, n0, ng);
            g = fast_geom(d, ng, img), src = pad;
        }
        nn_cf_dw(target, src, &g, j->dout + n0 * out_img, d->K, kb, kb1, r0, r1, n0 > a);
    }
}

/* the shared padded batch: task = image */
static void wgrad_pad_task(void *arg, int task, int tid)
{
    const conv_job *j = arg;
    const size_t img = img_floats(j->d);
    float *pad = j->shared + (size_t)task * img;
    memset(pad, 0, sizeof(float) * img);
    pad_image(pad, j->inp, j->d, task);
    (void)tid;
}

/* weight gradient, other paths: task = slice of the batch */
static void wgrad_gemm_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int a, e;
    block_of(d->N, j->S, task, &a, &e);
    float *target = task == 0 ? j->dw : j->part + (size_t)(task - 1) * d->KH * d->KW * d->C * d->K;
    nn_conv_dims s = sub_batch(d, e - a);
    backward_gemm(NULL, false, target, NULL, (float *)j->dout + (size_t)a * d->OH * d->OW * d->K,
                  NULL, j->inp + (size_t)a * d->H * d->W * d->C, j->w, &s, false,
                  job_front(j, tid));
}

/* dw += the partials of slices 1..S-1, in slice order: task = 16K floats */
#define CONV_RED 16384
static void wgrad_reduce_task(void *arg, int task, int tid)
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
static void dgrad_fast_task(void *arg, int task, int tid)
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
static void dgrad_point_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int nkb = (d->C + 63) / 64, rc = task / nkb, cb = task % nkb, rows = d->N * d->H * d->W;
    int r0 = rc * CONV_ROWS, r1 = rows - r0 < CONV_ROWS ? rows : r0 + CONV_ROWS;
    nn_cf_geom g = {1, r1 - r0, 0, d->K, 1, 0, d->K, 1, 0};
    nn_cf_forward(j->dinp + (size_t)r0 * d->C, j->dout + (size_t)r0 * d->K, &g, j->wp, d->C, cb,
                  NULL, false, j->acc);
    (void)tid;
}

/* input gradient of a 1x1 convolution with stride > 1 (a projection
 * shortcut): dy w^T at the strided positions, zero elsewhere; task = group */
static bool strided_pointwise(const nn_conv_dims *d)
{
    return d->KH == 1 && d->KW == 1 && d->PH == 0 && d->PW == 0 && !conv_is_pointwise(d);
}
static void dgrad_strided_point_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    const int C = d->C, nkb = (C + 63) / 64, P = d->OH * d->OW;
    int n0, ng;
    group_range(j, task, &n0, &ng);
    float *tmp = job_front(j, tid);
    nn_cf_geom g = {1, ng * P, 0, d->K, 1, 0, d->K, 1, 0};
    for (int cb = 0; cb < nkb; cb++)
        nn_cf_forward(tmp, j->dout + (size_t)n0 * P * d->K, &g, j->wp, C, cb, NULL, false, false);
    for (int i = 0; i < ng; i++) {
        float *img = j->dinp + (size_t)(n0 + i) * d->H * d->W * C;
        if (!j->acc) memset(img, 0, sizeof(float) * d->H * d->W * C);
        for (int oh = 0; oh < d->OH; oh++)
            for (int ow = 0; ow < d->OW; ow++) {
                float *restrict o = img + ((size_t)oh * d->SH * d->W + (size_t)ow * d->SW) * C;
                const float *restrict t = tmp + ((size_t)i * P + (size_t)oh * d->OW + ow) * C;
                for (int c = 0; c < C; c++) o[c] += t[c];
            }
    }
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
static int dcol_pixels(const nn_conv_dims *d)
{
    int px = CONV_DCOL_FLOATS / (d->KH * d->KW * d->C) / 12 * 12; /* whole 6- and 12-pixel tiles */
    return px < 12 ? 12 : px > 60 ? 60 : px;
}
static size_t dcol_block_floats(const nn_conv_dims *d)
{
    return align16((size_t)dcol_pixels(d) * d->KH * d->KW * d->C + CONV_SLACK);
}
static bool fast_dcol_ok(const nn_conv_dims *d)
{
    const int R = d->KH * d->KW * d->C;
    const size_t packed = nn_cf_packed_floats(d->K, R);
    return nn_cf_ok(d) && !fast_dgrad_ok(d) && !conv_is_pointwise(d) &&
           packed <= CONV_DCOL_PACKED && col_floats(d) >= dcol_block_floats(d) + packed;
}

/* wp = w^T [K][R] packed as nn_cf_pack packs a [K][R] kernel */
static void pack_transposed(float *wp, const float *w, int R, int K)
{
    const int nrb = (R + 63) / 64;
    for (int rb = 0; rb < nrb; rb++)
        for (int k = 0; k < K; k++) {
            float *o = wp + ((size_t)rb * K + k) * 64;
            for (int i = 0; i < 64; i++) {
                int r = rb * 64 + i;
                o[i] = r < R ? w[(size_t)r * K + k] : 0.0f;
            }
        }
}

static void dgrad_dcol_task(void *arg, int task, int tid)
{
#if CONV_X86
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    const int K = d->K, R = d->KH * d->KW * d->C, P = d->OH * d->OW, nrb = (R + 63) / 64;
    float *front = job_front(j, tid), *dcol = front, *pad = scratch_pad(front, d);
    memset(pad, 0, sizeof(float) * img_floats(d));
    const float *dy = j->dout + (size_t)task * P * K;
    const int PXB = dcol_pixels(d);
    for (int p0 = 0; p0 < P; p0 += PXB) {
        int np = P - p0 < PXB ? P - p0 : PXB;
        nn_cf_geom g = {1, np, 0, K, 1, 0, K, 1, 0};
        for (int rb = 0; rb < nrb; rb++)
            nn_cf_forward(dcol, dy + (size_t)p0 * K, &g, j->wp, R, rb, NULL, false, false);
        col2im_simd(pad, dcol, d, p0, np);
    }
    unpad_image(j->dinp, j->acc, pad, d, task);
#else
    (void)arg, (void)task, (void)tid;
#endif
}

/* input gradient, other paths: task = chunk of images */
static void dgrad_gemm_task(void *arg, int task, int tid)
{
    conv_job *j = arg;
    const nn_conv_dims *d = j->d;
    int n0 = task * j->chunk, nn = d->N - n0 < j->chunk ? d->N - n0 : j->chunk;
    nn_conv_dims s = sub_batch(d, nn);
    backward_gemm(j->dinp + (size_t)n0 * d->H * d->W * d->C, j->acc, NULL, NULL,
                  (float *)j->dout + (size_t)n0 * d->OH * d->OW * d->K, NULL,
                  j->inp + (size_t)n0 * d->H * d->W * d->C, j->w, &s, false, job_front(j, tid));
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
    j.S = wgrad_slices(d);
    j.part = job_front(&j, 0) + front_floats(d);
    j.G = fast_group(d), j.ngroups = (d->N + j.G - 1) / j.G;
    if (nn_wino_wgrad_ok(d)) {
        nn_wino_wgrad(dw, dout, inp, d, pool, job_front(&j, 0), stride);
        j.S = 1; /* its slices are summed inside */
    } else if (fast_dw_ok(d)) {
        if (use_shared_pad(d)) {
            j.shared = job_front(&j, 0) + front_floats(d) + parts_floats(d);
            memset(j.shared + (size_t)d->N * img_floats(d), 0, sizeof(float) * CONV_SLACK);
            conv_for(pool, d->N, wgrad_pad_task, &j);
        }
        j.nr = wgrad_row_blocks(d, j.S, unpadded(d) || j.shared);
        j.kbg = wgrad_kb_group(d, j.S, j.nr);
        const int nkb = (K + 63) / 64;
        job_reset_tags(&j, pool);
        conv_for(pool, j.S * j.nr * ((nkb + j.kbg - 1) / j.kbg), wgrad_fast_task, &j);
    } else {
        conv_for(pool, j.S, wgrad_gemm_task, &j);
    }
    if (j.S > 1) conv_for(pool, (int)((RK + CONV_RED - 1) / CONV_RED), wgrad_reduce_task, &j);
    if (!dinp) return;
    if (nn_wino_dgrad_ok(d)) {
        nn_wino_dgrad(dinp, acc, dout, w, d, pool, job_front(&j, 0), stride);
        return;
    }
    if (fast_dgrad_ok(d)) {
        float *wp = job_front(&j, 0) + fast_pad_floats(d);
        pack_par(pool, wp, w, d, true);
        j.wp = wp;
        int nkb = (d->C + 63) / 64;
        job_reset_tags(&j, pool);
        if (conv_is_pointwise(d))
            conv_for(pool, (d->N * d->H * d->W + CONV_ROWS - 1) / CONV_ROWS * nkb, dgrad_point_task,
                     &j);
        else if (strided_pointwise(d))
            conv_for(pool, j.ngroups, dgrad_strided_point_task, &j);
        else
            conv_for(pool, j.ngroups * nkb, dgrad_fast_task, &j);
        return;
    }
    if (fast_dcol_ok(d)) {
        float *wp = job_front(&j, 0) + dcol_block_floats(d);
        pack_transposed(wp, w, R, K);
        j.wp = wp;
        conv_for(pool, d->N, dgrad_dcol_task, &j);
        return;
    }
    j.chunk = nn_conv_chunk(d);
    conv_for(pool, (d->N + j.chunk - 1) / j.chunk, dgrad_gemm_task, &j);
}
