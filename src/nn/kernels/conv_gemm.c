/*
 * conv_gemm.c - the im2col + BLIS path of the convolutions (the portable
 * path, and every layer the AVX-512 kernels do not take), with the loops
 * over images of the narrow (narrow.c) and one-channel (conv1ch.c)
 * kernels: one thread's share of a call, on its own scratch (conv.c cuts
 * the call into chunks of images and lays the scratch out).
 *
 * For images [n0, n0+nn) the NHWC im2col matrix is
 *   col[nn*OH*OW][R],  R = KH*KW*C,  row (n, oh, ow), column (kh, kw, c),
 * and the kernel w[KH][KW][C][K] is the matrix [R][K], so
 *   forward   out[rows][K] = col w
 *   backward  dw[R][K]     = col^T dout              (summed over chunks)
 *             dcol[rows][R] = dout w^T, col2im(dcol) (scatter-add)
 * A chunk's col matrix is sized to stay in L2 (nn_conv_chunk); backward
 * rebuilds it (cheaper than keeping N*OH*OW*R floats per layer).
 *
 * im2col copies from the padded image, so every window row (KW*C floats,
 * contiguous in NHWC) is one straight copy with no bounds checks. The
 * portable copy moves whole blocks of 8 floats and may write up to 7 floats
 * past a segment: segments are written in increasing address order, so the
 * overhang is overwritten by the next segment, and the scratch carries
 * slack for the last one. The vector kernels read past the padded image
 * (pad_slack), whose slack is kept zero.
 */
#include "conv_impl.h"

/* dst[0, n) = src[0, n) in blocks of 8 floats (may touch up to 7 more). */
static inline void copy_blocks(float *restrict dst, const float *restrict src, int n)
{
    for (int j = 0; j < n; j += 8) memcpy(dst + j, src + j, 8 * sizeof(float));
}

void nn_cv_pad_image(float *restrict pad, const float *inp, const nn_conv_dims *d, int n)
{
    const int Hp = pad_h(d), Wp = pad_w(d), C = d->C;
    int rows = d->H < Hp - d->PH ? d->H : Hp - d->PH;
    int cols = d->W < Wp - d->PW ? d->W : Wp - d->PW;
    const float *img = inp + (size_t)n * d->H * d->W * C;
    for (int h = 0; h < rows; h++)
        memcpy(pad + ((size_t)(h + d->PH) * Wp + d->PW) * C, img + (size_t)h * d->W * C,
               sizeof(float) * cols * C);
}

/* Zeroes what nn_cv_pad_image does not write (border rows and columns, slack):
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
AVX512 void nn_cv_col2im_simd(float *dpad, const float *dcol, const nn_conv_dims *d, int p0, int np)
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
            conv_add_run(o, i, full, tail);
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
        nn_cv_col2im_simd(dpad, dcol, d, 0, d->OH * d->OW);
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
void nn_cv_unpad_image(float *dinp, bool acc, const float *dpad, const nn_conv_dims *d, int n)
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
void nn_cv_forward_gemm(float *out, const float *inp, const float *w, const float *b,
                        const nn_conv_dims *d, bool relu, float *scratch)
{
    const int K = d->K, R = d->KH * d->KW * d->C;
    if (conv_is_pointwise(d)) {
        mul_fwd(out, inp, w, b, d->N * d->H * d->W, d->C, K, relu);
        return;
    }
    const size_t img_rows = (size_t)d->OH * d->OW;
    float *col = scratch, *pad = nn_cv_scratch_pad(scratch, d);
    /* borders and slack zero (the vector kernels read into the slack) */
    pad_clear(pad, d);
    if (nn_conv1ch_ok(d)) {
        for (int n = 0; n < d->N; n++) {
            nn_cv_pad_image(pad, inp, d, n);
            nn_conv1ch_forward(out + (size_t)n * img_rows * K, pad, pad_w(d), d, w, b, relu);
        }
        return;
    }
    if (use_narrow(K)) {
        /* implicit im2col: each output row straight from the padded image;
         * the kernel's rows aligned (a variable's slab offset need not be) */
        if ((uintptr_t)w % 64) w = memcpy(nn_cv_scratch_wt(scratch, d), w, sizeof(float) * R * K);
        const int Wp = pad_w(d), C = d->C;
        if (unpadded(d)) {
            /* windows inside the image (a 1x1/2 projection): read in place */
            for (int n = 0; n < d->N; n++)
                nn_narrow_conv_rows(out + (size_t)n * img_rows * K, (size_t)d->OW * K, d->OH,
                                    inp + (size_t)n * d->H * d->W * C, (size_t)d->SH * d->W * C,
                                    d->OW, d->SW * C, d->KH, d->W * C, d->KW * C, w, K, b, relu,
                                    false);
            return;
        }
        for (int n = 0; n < d->N; n++) {
            nn_cv_pad_image(pad, inp, d, n);
            nn_narrow_conv_rows(out + (size_t)n * img_rows * K, (size_t)d->OW * K, d->OH, pad,
                                (size_t)d->SH * Wp * C, d->OW, d->SW * C, d->KH, Wp * C, d->KW * C,
                                w, K, b, relu, false);
        }
        return;
    }
    const int chunk = nn_conv_chunk(d);
    for (int n0 = 0; n0 < d->N; n0 += chunk) {
        int nn = d->N - n0 < chunk ? d->N - n0 : chunk;
        for (int i = 0; i < nn; i++) {
            nn_cv_pad_image(pad, inp, d, n0 + i);
            im2col_padded(col + i * img_rows * R, pad, d);
        }
        mul_fwd(out + n0 * img_rows * K, col, w, b, nn * (int)img_rows, R, K, relu);
    }
}

/* The narrow input gradient of a stride-1 layer with 8-16 input channels:
 * a convolution of the padded dy with the flipped, transposed kernel
 * (dgrad_dims) straight into dinp, with the forward's register blocking
 * (no scatter-add into a padded gradient). The padded dy lives in the col
 * area, which holds at least OH*OW*KH*KW*C floats. */
static bool narrow_dgrad_conv(const nn_conv_dims *d)
{
    if (!dgrad_as_conv(d) || d->C < 8 || d->C > 16 || !use_narrow(d->K)) return false;
    nn_conv_dims g = dgrad_dims(d);
    return img_floats(&g) + pad_slack(&g) <= (size_t)d->OH * d->OW * d->KH * d->KW * d->C;
}

/* wf[kh][kw][k][c] = w[KH-1-kh][KW-1-kw][c][k] */
static void flip_kernel(float *restrict wf, const float *restrict w, const nn_conv_dims *d)
{
    const int KH = d->KH, KW = d->KW, C = d->C, K = d->K;
    for (int kh = 0; kh < KH; kh++)
        for (int kw = 0; kw < KW; kw++)
            for (int k = 0; k < K; k++)
                for (int c = 0; c < C; c++)
                    wf[(((size_t)kh * KW + kw) * K + k) * C + c] =
                        w[(((size_t)(KH - 1 - kh) * KW + (KW - 1 - kw)) * C + c) * K + k];
}

/* dinp images [0, nn) (+)= the input gradient of dy images [0, nn) */
static void narrow_dgrad(float *dinp, bool acc, const float *dy, const float *wf, int nn,
                         const nn_conv_dims *d, float *gpad)
{
    const nn_conv_dims g = dgrad_dims(d);
    const int Wg = pad_w(&g), K = d->K;
    pad_clear(gpad, &g);
    for (int i = 0; i < nn; i++) {
        nn_cv_pad_image(gpad, dy, &g, i);
        nn_narrow_conv_rows(dinp + (size_t)i * d->H * d->W * d->C, (size_t)d->W * d->C, d->H, gpad,
                            (size_t)Wg * K, d->W, K, d->KH, Wg * K, d->KW * K, wf, d->C, NULL,
                            false, acc);
    }
}

void nn_cv_point_dw(float *dw, const float *x, int ldx, const float *dy, int rows, int R, int K)
{
    if (use_narrow(K))
        nn_narrow_tn(R, K, rows, x, ldx, dy, K, dw, K, false);
    else
        nn_gemm(true, false, R, K, rows, 1.0f, x, ldx, dy, K, 0.0f, dw, K);
}

/* The GEMM path of the backward (and the narrow and one-channel kernels)
 * over the images of d, on one thread's scratch; dw may be NULL (only the
 * input gradient), dinp too (only dw). */
void nn_cv_backward_gemm(float *dinp, bool acc, float *dw, float *db, float *dout, const float *out,
                         const float *inp, const float *w, const nn_conv_dims *d, bool relu,
                         float *scratch)
{
    const int K = d->K, R = d->KH * d->KW * d->C;
    if (conv_is_pointwise(d)) {
        /* the narrow kernels where K allows: BLIS ran these shapes (K <= 16
         * output channels, some thousand rows) at a seventh of their speed */
        int rows = d->N * d->H * d->W;
        if (relu) nn_relu_mask(dout, out, (size_t)rows * K);
        if (dw) nn_cv_point_dw(dw, inp, d->C, dout, rows, d->C, K);
        if (db) nn_bias_backward(db, dout, rows, K);
        if (dinp && use_narrow(K)) {
            float *wt = nn_cv_scratch_wt(scratch, d);
            transpose_kernel(wt, w, R, K);
            nn_narrow_nt(rows, d->C, K, dout, wt, dinp, d->C, acc);
        } else if (dinp) {
            nn_gemm(false, true, rows, d->C, K, 1.0f, dout, K, w, K, acc ? 1.0f : 0.0f, dinp, d->C);
        }
        return;
    }
    const size_t img_rows = (size_t)d->OH * d->OW;
    const int chunk = nn_conv_chunk(d);
    const size_t npad = (size_t)pad_h(d) * pad_w(d) * d->C;
    float *col = scratch, *pad = nn_cv_scratch_pad(scratch, d), *wt = nn_cv_scratch_wt(scratch, d);
    if (!dinp && dw && nn_conv1ch_ok(d)) {
        if (relu) nn_relu_mask(dout, out, (size_t)d->N * img_rows * K);
        memset(pad, 0, sizeof(float) * (npad + pad_slack(d)));
        memset(dw, 0, sizeof(float) * (size_t)R * K);
        if (db) memset(db, 0, sizeof(float) * K);
        for (int n = 0; n < d->N; n++) {
            nn_cv_pad_image(pad, inp, d, n);
            nn_conv1ch_dw(dw, db, pad, pad_w(d), d, dout + (size_t)n * img_rows * K);
        }
        return;
    }
    const bool dconv = dinp && narrow_dgrad_conv(d);
    if (dconv)
        flip_kernel(wt, w, d);
    else if (dinp && use_narrow(K))
        transpose_kernel(wt, w, R, K);
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
            /* dw straight from each padded image when the kernel applies
             * (the borders zeroed once per chunk: the input gradient below
             * may use pad) */
            if (i == 0) pad_clear(pad, d);
            nn_cv_pad_image(pad, inp, d, n0 + i);
            implicit =
                nn_narrow_conv_dw(dw, pad, d->OH, d->OW, d->SH * Wp * C, d->SW * C, d->KH, Wp * C,
                                  d->KW * C, dy + i * img_rows * K, K, n0 > 0 || i > 0);
        }
        if (!implicit && dw) {
            /* rebuild this chunk's columns (pad borders must be zero again) */
            memset(pad, 0, sizeof(float) * npad);
            for (int i = 0; i < nn; i++) {
                nn_cv_pad_image(pad, inp, d, n0 + i);
                im2col_padded(col + i * img_rows * R, pad, d);
            }
            mul_dw(dw, col, dy, rows, R, K, n0 > 0);
        }
        if (!dinp) continue;
        if (dconv) {
            narrow_dgrad(dinp + (size_t)n0 * d->H * d->W * C, acc, dy, wt, nn, d, col);
            continue;
        }
        if (use_narrow(K)) {
            /* each output row's input gradient straight into the padded image */
            for (int i = 0; i < nn; i++) {
                memset(pad, 0, sizeof(float) * npad);
                for (int oh = 0; oh < d->OH; oh++)
                    nn_narrow_dcol_row(pad + (size_t)oh * d->SH * Wp * C,
                                       dy + ((size_t)i * d->OH + oh) * d->OW * K, d->OW, d->SW * C,
                                       d->KH, Wp * C, d->KW * C, wt, K);
                nn_cv_unpad_image(dinp, acc, pad, d, n0 + i);
            }
            continue;
        }
        /* dcol overwrites col: dcol[rows][R] = dy[rows][K] w^T */
        mul_dcol(col, dy, w, wt, rows, R, K, false);
        for (int i = 0; i < nn; i++) {
            memset(pad, 0, sizeof(float) * npad);
            col2im_padded(pad, col + i * img_rows * R, d);
            nn_cv_unpad_image(dinp, acc, pad, d, n0 + i);
        }
    }
}
