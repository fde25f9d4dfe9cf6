/*
 * layers.h - the numeric kernels of src/nn (internal): one forward/backward
 * pair per layer kind over plain float arrays with named dimensions, plus a
 * small deterministic random-number generator.
 *
 * Dimension legend (used in every comment and parameter name here):
 *   N  batch size             H, W   input height, width       C  input channels
 *   OH, OW output height, width      K  output channels (conv) or units (dense)
 *   KH, KW kernel height, width      SH, SW strides            PH, PW zero padding (top, left)
 *   I, O  dense input / output features     M rows of a [M][C] matrix (M = N*H*W)
 * Tensors are batch-major NHWC: x[n][h][w][c]. A convolution kernel is
 * [KH][KW][C][K], a dense kernel [I][O], so both are row-major matrices
 * that multiply an activation matrix from the right.
 *
 * Conventions: "d" prefixes a gradient (dout = dLoss/dout). Backward
 * functions take `acc`: false = overwrite dinp, true = add into it (a tensor
 * feeding several layers, as an Inception module's input, sums the gradients
 * of its consumers). Parameter gradients are always overwritten. A NULL dinp
 * means "not needed" (the model's input). When `relu` is set, the layer
 * applies max(0, .) to its output, and its backward first masks dout in place
 * with out > 0 - dout is then scratch owned by the caller.
 */
#ifndef PSTRAIN_NN_LAYERS_H
#define PSTRAIN_NN_LAYERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Hot elementwise loops are compiled twice, for AVX-512 and the baseline
 * ISA, and chosen at load time (the build does not assume -march=native).
 * Not under ThreadSanitizer: the load-time resolvers are instrumented and run
 * before its runtime is initialised (SIGSEGV at start). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define NN_CLONES __attribute__((target_clones("avx512f", "default")))
#else
#define NN_CLONES
#endif

/* ---- random numbers: splitmix64 to seed, xoshiro256** to draw ---------- */

typedef struct nn_rng {
    uint64_t s[4];
} nn_rng;

/* A stream that depends on nothing but `seed`. */
void nn_rng_seed(nn_rng *r, uint64_t seed);
uint64_t nn_rng_next(nn_rng *r);
/* Uniform in [0, 1) with 24 random bits. */
float nn_rng_uniform(nn_rng *r);
/* Standard normal (Box-Muller, in double). */
double nn_rng_normal(nn_rng *r);
/* Mixes several words into one seed (for per-(seed, step, layer) streams). */
uint64_t nn_seed_mix(uint64_t a, uint64_t b, uint64_t c);

/* ---- elementwise ---------------------------------------------------------- */

/* out[M][K] += b[K] (bias may be NULL), then ReLU when relu. In place is fine. */
void nn_bias_relu(float *out, const float *b, int M, int K, bool relu);
/* db[K] = sum over rows of dout[M][K]. */
void nn_bias_backward(float *db, const float *dout, int M, int K);
/* dout[i] = out[i] > 0 ? dout[i] : 0, for n elements. */
void nn_relu_mask(float *dout, const float *out, size_t n);

/* ReLU as a layer: out = max(0, inp) (in place allowed); dinp = dout*(out>0). */
void nn_relu_forward(float *out, const float *inp, size_t n);
void nn_relu_backward(float *dinp, bool acc, const float *dout, const float *out, size_t n);

/* ---- dense ------------------------------------------------------------------ */

/* out[N][O] = inp[N][I] * w[I][O] + b[O] (b may be NULL), then ReLU. */
void nn_dense_forward(float *out, const float *inp, const float *w, const float *b, int N, int I,
                      int O, bool relu);
/* dw[I][O] = inp^T dout, db[O] = column sums (db may be NULL), dinp[N][I] =
 * dout w^T (dinp may be NULL). dout is masked in place when relu. */
void nn_dense_backward(float *dinp, bool acc, float *dw, float *db, float *dout, const float *out,
                       const float *inp, const float *w, int N, int I, int O, bool relu);

/* The same on a thread pool (NULL: the caller), in fixed blocks of output
 * rows or columns (nothing is summed across blocks): the same bits for
 * every pool size, and as the entry points above. */
struct nn_pool;
void nn_dense_forward_par(struct nn_pool *pool, float *out, const float *inp, const float *w,
                          const float *b, int N, int I, int O, bool relu);
void nn_dense_backward_par(struct nn_pool *pool, float *dinp, bool acc, float *dw, float *db,
                           float *dout, const float *out, const float *inp, const float *w, int N,
                           int I, int O, bool relu);

/* ---- products with a narrow side (narrow.c) --------------------------------- */

#define NN_NARROW_MAX 32

/* C[M][K] (ldc) (+)= A[M][R] (lda) B[R][K] (ldb), + bias[K] (may be NULL),
 * then ReLU; acc adds to C first. K <= NN_NARROW_MAX (wider products go
 * by column blocks: B + j0, C + j0). */
void nn_narrow_nn(int M, int K, int R, const float *A, int lda, const float *B, int ldb,
                  const float *bias, bool relu, float *C, int ldc, bool acc);
/* C[R][K] (ldc) (+)= A^T D: A[M][R] (lda), D[M][K] (ldd). K <= NN_NARROW_MAX. */
void nn_narrow_tn(int R, int K, int M, const float *A, int lda, const float *D, int ldd, float *C,
                  int ldc, bool acc);
/* C[M][R] (ldc) (+)= D[M][K] BT[K][R]. K <= NN_NARROW_MAX. */
void nn_narrow_nt(int M, int R, int K, const float *D, const float *BT, float *C, int ldc,
                  bool acc);
/* NR output rows of a convolution with K <= NN_NARROW_MAX, read from a
 * zero-padded image (no im2col): out[r*ldo + ow*K + k] = (acc ? out : 0)
 * + bias + sum over kh < KH and j < seg of
 * prow[r*ldp + kh*WpC + ow*SWC + j] * W[kh*seg + j][K], then ReLU.
 * (SWC = stride*C, WpC = padded row length, seg = KW*C, ldp = stride*WpC.)
 * Reads no float outside the windows: an unpadded image may be read in
 * place. */
void nn_narrow_conv_rows(float *out, size_t ldo, int NR, const float *prow, size_t ldp, int OW,
                         int SWC, int KH, int WpC, int seg, const float *W, int K,
                         const float *bias, bool relu, bool acc);
/* The input gradient of one output row of such a convolution, added
 * straight into the zero-padded image gradient (no dcol matrix, no
 * col2im): dprow[kh*WpC + ow*SWC + j] += sum_k dy[ow][k] WT[k][kh*seg + j],
 * WT = W^T [K][KH*seg]. */
void nn_narrow_dcol_row(float *dprow, const float *dy, int OW, int SWC, int KH, int WpC, int seg,
                        const float *WT, int K);
/* dw[KH*seg][K] (+)= the windows of one padded image times its dy[OH*OW][K]
 * (implicit im2col; window (oh, ow) starts at pad + oh*SHWpC + ow*SWC).
 * Returns false, doing nothing, unless the AVX-512 kernel applies
 * (nn_narrow_conv_dw_ok: K <= 16, or K = 24 or 32 with window rows of
 * whole vectors, seg % 16 == 0): the caller then multiplies an explicit col
 * matrix. */
bool nn_narrow_conv_dw_ok(int seg, int K);
bool nn_narrow_conv_dw(float *dw, const float *pad, int OH, int OW, int SHWpC, int SWC, int KH,
                       int WpC, int seg, const float *dy, int K, bool acc);
/* Whether the AVX-512 kernels run; force = 0 or 1 switches (tests), -1 asks. */
bool nn_narrow_use_simd(int force);

/* ---- conv2d via im2col + nn_gemm ----------------------------------------- */

typedef struct nn_conv_dims {
    int N, H, W, C;     /* input */
    int KH, KW, SH, SW; /* kernel and strides */
    int PH, PW;         /* zero padding at the top and left; bottom/right follow from OH/OW */
    int OH, OW, K;      /* output */
    /* which kernels run (the model's nn_switches; zero: the defaults); the
     * results are the same bits either way but for wino (tests) */
    int wino;             /* NN_WINO_* (pstrain/model.h) */
    bool no_shared_pad;   /* nn_switches.no_shared_pad */
    bool no_fuse_strided; /* nn_switches.no_fuse_strided */
} nn_conv_dims;

/* Output size of a window of k with stride s and padding p on both sides
 * over n inputs: floor((n + 2p - k) / s) + 1; <= 0 when it does not fit. */
int nn_window_out(int n, int k, int s, int p);
/* Fills OH/OW from the rest. */
void nn_conv_dims_finish(nn_conv_dims *d);
/* Images per im2col chunk (so that a chunk's columns stay in L2) and the
 * scratch floats one thread of a conv needs for max batch N. */
int nn_conv_chunk(const nn_conv_dims *d);
size_t nn_conv_scratch(const nn_conv_dims *d);
/* The weight gradient of small padded batches pads them once for all its
 * tasks unless d->no_shared_pad; a strided layer's input gradient shares
 * its loop with the channel-range weight gradient unless
 * d->no_fuse_strided. The same bits either way. */

/* The pool of a model (pool.h); NULL runs everything on the caller. */
typedef struct nn_pool nn_pool;

/* out[N][OH][OW][K] = conv(inp[N][H][W][C], w[KH][KW][C][K]) + b[K] (b may
 * be NULL), then ReLU. The work runs as tasks on pool (NULL: the caller):
 * how it is cut depends on d only, so the result is bitwise the same for
 * every thread count. scratch: nn_pool_threads(pool) areas of
 * nn_conv_scratch(d) floats, `stride` floats apart (thread t uses
 * scratch + t*stride; stride is unused with one thread), 64-byte aligned. */
void nn_conv2d_forward(float *out, const float *inp, const float *w, const float *b,
                       const nn_conv_dims *d, bool relu, nn_pool *pool, float *scratch,
                       size_t stride);
/* dw (overwritten), db (may be NULL), dinp (may be NULL; acc as above).
 * The weight gradient sums the images in slices fixed by d (then the
 * slices in order): bitwise the same for every thread count. */
void nn_conv2d_backward(float *dinp, bool acc, float *dw, float *db, float *dout, const float *out,
                        const float *inp, const float *w, const nn_conv_dims *d, bool relu,
                        nn_pool *pool, float *scratch, size_t stride);

/* Wide convolutions (K > NN_NARROW_MAX) as implicit GEMMs straight from a
 * zero-padded image (conv_fast.c, AVX-512 only; nn_cf_ok says when). The
 * kernel w[R][K] (R = KH*KW*C) is packed once per call into
 * nn_cf_packed_floats(R, K) floats (64-byte aligned) by nn_cf_pack, or, for
 * the input gradient of a stride-1 convolution, flipped and transposed
 * (rows KH*KW*K, C columns) by nn_cf_pack_flip. Geometry of one padded
 * image: window of output pixel (oh, ow) at oh*SHWpC + ow*SWC, KH segments
 * of seg = KW*C floats, WpC apart; nothing outside the windows is read. */
typedef struct nn_cf_geom {
    int OH, OW, SHWpC, SWC, KH, WpC, seg;
    int nimg;    /* images in the call, consecutive in out / dy */
    size_t img;  /* floats from one padded image to the next */
    bool stream; /* nn_cf_forward: store out with non-temporal stores where its
                  * rows are 64-byte aligned (outputs larger than the caches) */
} nn_cf_geom;
bool nn_cf_ok(const nn_conv_dims *d);
size_t nn_cf_packed_floats(int R, int K);
void nn_cf_pack(float *wp, const float *w, int R, int K);
void nn_cf_pack_flip(float *wp, const float *w, int KH, int KW, int C, int K);
/* The same, one block of 64 output columns (kb < ceil(K/64), resp.
 * ceil(C/64)): the blocks are disjoint, for a parallel loop. */
void nn_cf_pack_block(float *wp, const float *w, int R, int K, int kb);
void nn_cf_pack_flip_block(float *wp, const float *w, int KH, int KW, int C, int K, int kb);
/* AVX-512 only (nn_narrow_use_simd): the 16 x 16 block at src (rows lds
 * floats apart; rows from nrow on and the columns past the first ncol read
 * as 0) transposed into the first nout rows of dst (ldd floats apart, 16
 * floats each). Rows past nrow are not read. */
void nn_cf_transpose16(float *dst, size_t ldd, int nout, const float *src, size_t lds, int nrow,
                       int ncol);
/* Channels [64 kb, 64 kb + 64) of out[nimg*OH*OW][K] for g->nimg images: bias (may
 * be NULL) + windows x packed kernel, then ReLU; acc adds to out instead
 * of the bias. */
void nn_cf_forward(float *out, const float *pad, const nn_cf_geom *g, const float *wp, int K,
                   int kb, const float *bias, bool relu, bool acc);
/* dw[r][64 kb0, 64 kb1) (channel blocks kb0..kb1-1) for r in [r0, r1) (+)=
 * windows^T dy[OH*OW][K] of g->nimg images (acc: add to dw). The sum runs
 * over images, then pixels, in increasing order, whatever nimg and the
 * blocks are. */
void nn_cf_dw(float *dw, const float *pad, const nn_cf_geom *g, const float *dy, int K, int kb0,
              int kb1, int r0, int r1, bool acc);
/* The same with the window rows in runs of `run` rows (the taps of a
 * sub-image of run channels): row r lands in row (r / run) * run_ld +
 * r % run of dw (nn_cf_dw: one run of all R rows). */
void nn_cf_dw_runs(float *dw, const float *pad, const nn_cf_geom *g, const float *dy, int K,
                   int kb0, int kb1, int r0, int r1, bool acc, int run, int run_ld);

/* Winograd F(2x2, 3x3) for 3x3 stride-1 convolutions with padding <= 2
 * (conv_wino.c): forward and input gradient as 16 products [tiles x C] x
 * [C x K] between two transforms; F(4x4, 3x3) (36 products per 4x4 tile,
 * conv_wino4.c) for both passes of 16 -> 16-channel layers.
 * d->wino (NN_WINO_*, pstrain/model.h): where it is faster than the direct
 * kernels (the default; AVX-512 only), off, F(2x2) on every shape it
 * supports, also portable (tests), or as that but F(4x4) for every 16 ->
 * 16 layer and for the input gradient of every layer whose C and K are
 * multiples of 16 up to 64 (tests, also portable). nn_wino_ok /
 * nn_wino_dgrad_ok: whether
 * the forward (conv.c) / input gradient (conv_backward.c) go this way;
 * nn_wino_scratch: floats per thread (0 when neither does). Same contracts
 * as nn_conv2d_forward and the input gradient of nn_conv2d_backward
 * (scratch: thread 0's area, threads `stride` floats apart); bitwise the
 * same for every thread count. */
bool nn_wino_shape(const nn_conv_dims *d);
bool nn_wino_ok(const nn_conv_dims *d);
bool nn_wino_dgrad_ok(const nn_conv_dims *d);
bool nn_wino_wgrad_ok(const nn_conv_dims *d);
size_t nn_wino_scratch(const nn_conv_dims *d);
void nn_wino_forward(float *out, const float *inp, const float *w, const float *b,
                     const nn_conv_dims *d, bool relu, nn_pool *pool, float *scratch,
                     size_t stride);
void nn_wino_dgrad(float *dinp, bool acc, const float *dout, const float *w, const nn_conv_dims *d,
                   nn_pool *pool, float *scratch, size_t stride);
/* dw (overwritten) of the same layer (nn_wino_wgrad_ok), dout already
 * masked: the tiles in slices fixed by d, each summed in order, the slices
 * in order (F(4x4) for the 16 -> 16 layers that take it). */
void nn_wino_wgrad(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                   nn_pool *pool, float *scratch, size_t stride);
/* Both of them (nn_wino_wgrad_ok and nn_wino_dgrad_ok): the same results
 * as nn_wino_wgrad then nn_wino_dgrad; where both are F(2x2), the weight
 * gradient's slices and the input gradient's blocks in one pool loop. */
void nn_wino_backward(float *dw, float *dinp, bool acc, const float *dout, const float *inp,
                      const float *w, const nn_conv_dims *d, nn_pool *pool, float *scratch,
                      size_t stride);

/* One-channel, stride-1 convolutions with K <= 16, an output pixel's
 * channels per vector (conv1ch.c): whether they apply (AVX-512 only), the
 * forward of one image from its zero-padded copy (rows Wp floats apart),
 * and dw/db (added to) of one image from dout (already masked under a
 * fused ReLU), its pixels summed in order. */
bool nn_conv1ch_ok(const nn_conv_dims *d);
void nn_conv1ch_forward(float *out, const float *pad, int Wp, const nn_conv_dims *d, const float *w,
                        const float *bias, bool relu);
void nn_conv1ch_dw(float *dw, float *db, const float *pad, int Wp, const nn_conv_dims *d,
                   const float *dout);

/* ---- pooling ---------------------------------------------------------------- */

typedef struct nn_pool_dims {
    int N, H, W, C;
    int KH, KW, SH, SW, PH, PW;
    int OH, OW;
    bool count_pad; /* average pool: divide by KH*KW, padding counted (PyTorch's default) */
} nn_pool_dims;

void nn_pool_dims_finish(nn_pool_dims *d);

/* Max pool; padded positions never win. argmax[N][OH][OW][C] gets the
 * winning input offset within the image (h*W + w)*C + c. */
void nn_maxpool_forward(float *out, int32_t *argmax, const float *inp, const nn_pool_dims *d);
void nn_maxpool_backward(float *dinp, bool acc, const float *dout, const int32_t *argmax,
                         const nn_pool_dims *d);
/* Average pool over the window's positions inside the image (padding is
 * not counted, as TF's SAME padding), or over all KH*KW positions with
 * padded ones counted as zeros when d->count_pad (PyTorch's avg_pool2d with
 * count_include_pad=True; floor mode keeps every window inside the padded
 * image). Global average pool: KH=H, KW=W. */
void nn_avgpool_forward(float *out, const float *inp, const nn_pool_dims *d);
void nn_avgpool_backward(float *dinp, bool acc, const float *dout, const nn_pool_dims *d);

/* ---- batch normalization (per channel over M = N*H*W rows) --------------- */

/* Channels (ResNet-50's last stage); the kernels keep sums on the stack. */
#define NN_BN_MAX_C 2048

/* Training: normalises with the batch statistics, saves mean[C] and
 * invstd[C] = 1/sqrt(var + eps) for backward (var biased, over M), writes
 * the updated moving averages new = momentum*old + (1-momentum)*batch into
 * new_mean/new_var (batch variance with Bessel's correction M/(M-1), as TF's
 * fused batch norm and PyTorch), then ReLU. */
void nn_bn_forward_train(float *out, float *mean, float *invstd, float *new_mean, float *new_var,
                         const float *inp, const float *gamma, const float *beta,
                         const float *moving_mean, const float *moving_var, int M, int C,
                         float momentum, float eps, bool relu);
/* Inference: normalises with the moving statistics. */
void nn_bn_forward_infer(float *out, const float *inp, const float *gamma, const float *beta,
                         const float *moving_mean, const float *moving_var, int M, int C, float eps,
                         bool relu);
/* dgamma, dbeta overwritten; dinp (may be NULL; acc). relu: the forward's
 * fused ReLU, whose mask is recomputed from inp, gamma, beta and the saved
 * statistics (with more than 32 channels dout is masked in place). */
void nn_bn_backward(float *dinp, bool acc, float *dgamma, float *dbeta, float *dout,
                    const float *inp, const float *gamma, const float *beta, const float *mean,
                    const float *invstd, int M, int C, bool relu);

/* A residual add fused into a batch norm without ReLU (model.c fuses a
 * batch norm whose output only feeds a two-input add): the forward writes
 * out = bn(inp) + res, then the add's ReLU when relu, in the same pass; the
 * backward takes the add's gradient dout, masks it with out > 0 when relu
 * (out: the add's output), writes or adds it (dres_acc) into dres (the
 * other addend's gradient; NULL: none) and propagates it through the batch
 * norm (dout masked in place with more than 32 channels). The same bits as the batch norm followed
 * by nn_sum_forward / nn_sum_backward. */
typedef struct nn_bn_res {
    const float *res; /* forward: the other addend */
    float *dres;      /* backward: its gradient, or NULL */
    bool dres_acc;    /* add into dres (a later consumer) rather than write it */
    bool relu;        /* the add's ReLU */
} nn_bn_res;

/* The same on a thread pool (NULL: the caller): the per-channel sums go by
 * nn_bn_blocks(M, C) fixed blocks of rows whose partials are added in block
 * order, so the results are the same bits for every pool size (and the
 * same as the entry points above). red: nn_bn_red_doubles(M, C) doubles.
 * res: the fused residual add, or NULL (then relu is the batch norm's own
 * ReLU; with res, relu must be false). */
int nn_bn_blocks(int M, int C);
size_t nn_bn_red_doubles(int M, int C);
void nn_bn_forward_train_par(struct nn_pool *pool, double *red, float *out, float *mean,
                             float *invstd, float *new_mean, float *new_var, const float *inp,
                             const float *gamma, const float *beta, const float *moving_mean,
                             const float *moving_var, int M, int C, float momentum, float eps,
                             bool relu, const nn_bn_res *res);
void nn_bn_forward_infer_par(struct nn_pool *pool, float *out, const float *inp, const float *gamma,
                             const float *beta, const float *moving_mean, const float *moving_var,
                             int M, int C, float eps, bool relu, const nn_bn_res *res);
/* out: the add's output when res->relu (else unused). dout2: the
 * gradient's second part, or NULL: the gradient is dout + dout2 (a tensor
 * with two consumers whose second one wrote its part apart, graph.h
 * "split gradients"; dout then holds the masked sum when dout is masked in
 * place). */
void nn_bn_backward_par(struct nn_pool *pool, double *red, float *dinp, bool acc, float *dgamma,
                        float *dbeta, float *dout, const float *dout2, const float *out,
                        const float *inp, const float *gamma, const float *beta, const float *mean,
                        const float *invstd, int M, int C, bool relu, const nn_bn_res *res);
/* The same with a row stride ld >= C for the output (forward) or for the
 * gradient dout (backward): out and dout are a channel slice of a wider
 * tensor (a concat's output and gradient, docs/design.md §11, "concat without
 * copies"); the other tensors have rows of C floats. ld > C only without
 * res and dout2. The same bits as with a contiguous output. */
void nn_bn_forward_train_ld(struct nn_pool *pool, double *red, float *out, int ld, float *mean,
                            float *invstd, float *new_mean, float *new_var, const float *inp,
                            const float *gamma, const float *beta, const float *moving_mean,
                            const float *moving_var, int M, int C, float momentum, float eps,
                            bool relu, const nn_bn_res *res);
void nn_bn_forward_infer_ld(struct nn_pool *pool, float *out, int ld, const float *inp,
                            const float *gamma, const float *beta, const float *moving_mean,
                            const float *moving_var, int M, int C, float eps, bool relu,
                            const nn_bn_res *res);
void nn_bn_backward_ld(struct nn_pool *pool, double *red, float *dinp, bool acc, float *dgamma,
                       float *dbeta, const float *dout, int ld, const float *dout2,
                       const float *out, const float *inp, const float *gamma, const float *beta,
                       const float *mean, const float *invstd, int M, int C, bool relu,
                       const nn_bn_res *res);

/* ---- dropout (inverted) ----------------------------------------------------- */

/* mask[i] = 0 with probability rate, else 1/(1-rate), drawn from `seed`;
 * out = inp * mask. Each block of NN_DROPOUT_BLOCK elements draws from its
 * own stream (seed, block index), so that blocks can be drawn on any thread
 * in any order: nn_dropout_mask_range fills [i0, i1), i0 a multiple of
 * NN_DROPOUT_BLOCK, exactly as nn_dropout_mask fills those elements. */
#define NN_DROPOUT_BLOCK 4096
void nn_dropout_mask(float *mask, size_t n, float rate, uint64_t seed);
void nn_dropout_mask_range(float *mask, size_t i0, size_t i1, float rate, uint64_t seed);
void nn_dropout_forward(float *out, const float *inp, const float *mask, size_t n);
void nn_dropout_backward(float *dinp, bool acc, const float *dout, const float *mask, size_t n);

/* ---- concat along channels ------------------------------------------------- */

/* out[M][sum Ci] = [in0[M][C0] | in1[M][C1] | ...]; a NULL input: its
 * columns are left as they are (a producer that wrote them itself). */
void nn_concat_forward(float *out, const float *const *ins, const int *Cs, int nin, int M);
/* dins[i] (NULL = skip) get their slices of dout; acc[i] per input. */
void nn_concat_backward(float *const *dins, const bool *acc, const float *dout, const int *Cs,
                        int nin, int M);

/* ---- elementwise sum (residual connections) ------------------------------- */

/* out[n] = sum of ins[j][n] over j < nin (nin >= 2; out aliases none of
 * them), then ReLU when relu. */
void nn_sum_forward(float *out, const float *const *ins, int nin, size_t n, bool relu);
/* Every dins[j] (NULL = skip) gets dout (acc[j]: added). dout is masked in
 * place with out > 0 first when relu. */
void nn_sum_backward(float *const *dins, const bool *acc, int nin, float *dout, const float *out,
                     size_t n, bool relu);

/* ---- softmax cross-entropy --------------------------------------------- */

/* Mean over the batch of -sum_k q_k log softmax(logits)_k with
 * q = (1-smoothing)*onehot(label) + smoothing/K. dlogits[N][K] (may be NULL)
 * = (softmax - q)/N. *ncorrect and pred[N] (each may be NULL) from argmax. */
double nn_softmax_xent(float *dlogits, const float *logits, const int32_t *labels, int N, int K,
                       float smoothing, int *ncorrect, int32_t *pred);
/* The same over rows [0, N) of a batch of Ntot (dlogits divided by Ntot),
 * returning the SUM of the rows' losses: a batch cut into row blocks adds
 * the blocks' sums in block order (the model's step on its pool). */
double nn_softmax_xent_rows(float *dlogits, const float *logits, const int32_t *labels, int N,
                            int K, int Ntot, float smoothing, int *ncorrect, int32_t *pred);

#endif
