/*
 * conv_wino.c - Winograd convolutions for stride-1 3x3 layers (Lavin &
 * Gray 2016): which layers take them (nn_wino_ok, nn_wino_dgrad_ok,
 * nn_wino_wgrad_ok), their scratch, and the driver that runs a variant,
 * F(2x2, 3x3) (conv_wino2.c) or F(4x4, 3x3) (conv_wino4.c), for the
 * forward and the input gradient. The weight gradients have their own
 * drivers: F(2x2)'s (conv_wino2_wgrad.c) and F(4x4)'s (conv_wino4_wgrad.c:
 * one for 16 -> 16 layers, one for 32 to 64 channels); nn_wino_backward
 * runs F(2x2)'s weight gradient and input gradient in one loop where both
 * take it (conv_wino2_wgrad.c's nn_wi2_backward).
 *
 * A variant with m x m output tiles transforms each (m + 2) x (m + 2) input
 * patch (B^T d B) and each kernel (G g G^T, into U), multiplies them
 * position by position summed over the input channels (M = V U: (m + 2)^2
 * matrix products [tiles x C] x [C x K]) and transforms M back (A^T M A).
 *
 * The input gradient of a stride-1 layer is the forward of dy zero-padded
 * by 2 - PH (2 - PW) with the kernel flipped and transposed (as
 * conv_backward.c's fast path): the same code with U built from the flipped kernel.
 *
 * Work: blocks of TB tiles (fixed by the variant, C and K), numbered over
 * the batch; a task transforms its block's input into V, multiplies, and
 * transforms M into the output. Each output is computed by one task, in an
 * order that does not depend on the block it falls in (every register
 * tile sums c = 0..C-1 in order), so the result is the same bits for every
 * thread count. U is built per thread into its own scratch before its
 * first block, or (few tiles per thread) once by a task per row into
 * thread 0's scratch (wino_run says when and why).
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "conv_wino_impl.h"
#include "pstrain/model.h"

/* ---- dispatch ------------------------------------------------------------ */

/* d->wino as a mode: 0 off, 1 where faster (NN_WINO_AUTO), 2 F(2x2)
 * everywhere, 3 F(4x4) as well (layers.h) */
static int wino_mode(const nn_conv_dims *d)
{
    switch (d->wino) {
    case NN_WINO_OFF:
        return 0;
    case NN_WINO_F2:
        return 2;
    case NN_WINO_F4:
        return 3;
    default:
        return 1;
    }
}

bool nn_wino_shape(const nn_conv_dims *d)
{
    return d->KH == 3 && d->KW == 3 && d->SH == 1 && d->SW == 1 && d->PH >= 0 && d->PH <= 2 &&
           d->PW >= 0 && d->PW <= 2 && d->OH > 0 && d->OW > 0;
}

/* Where F(2x2, 3x3) is faster than the direct kernels (docs/design.md
 * §12 lists the layers, bench_conv compares them): AVX-512, 32 or
 * more channels on both sides (16 channels give too little product per
 * tile for the transforms), C*K <= 65536 (U, 16 C K floats, is read once
 * per block of tiles: a larger U, as 512x512 at 7x7, costs more than it
 * saves) and at least 256 tiles (the U transform and its traffic
 * amortised). Monotone in N: a smaller batch never switches it on. */
static bool wino_faster(const nn_conv_dims *d)
{
    size_t tiles = (size_t)d->N * ((d->OH + 1) / 2) * ((d->OW + 1) / 2);
    return WI_X86 && nn_narrow_use_simd(-1) && d->C >= 32 && d->K >= 32 &&
           (size_t)d->C * d->K <= 65536 && tiles >= 256;
}

/* F(4x4) for this 16 -> 16 shape: mode 1 with AVX-512 (where it is
 * faster than the direct kernels), or mode 3 (tests: also portable). */
static bool wino4_use(const nn_conv_dims *d)
{
    int mode = wino_mode(d);
    if (!nn_wino_shape(d) || d->C != 16 || d->K != 16) return false;
    return mode == 3 || (mode == 1 && WI_X86 && nn_narrow_use_simd(-1));
}

/* F(4x4) in float for the forward and the input gradient: C and K
 * multiples of 16 up to 64 (conv_wino4.c's register tiles); mode 1: 16 ->
 * 16 (wino4_use) and, where F(2x2) is used (wino_faster), 32 to 64
 * channels on both sides, where both passes are faster than F(2x2)
 * (ResNet-20's 14x14 and 7x7 stages, ResNet-50's res2, Inception-v3's 2a),
 * at a few times the direct kernels' typical error (docs/design.md §12 has the figures); mode 3
 * every such layer (tests, also portable). */
static bool wino4_dgrad_use(const nn_conv_dims *d)
{
    int mode = wino_mode(d);
    if (!nn_wino_shape(d) || d->C % 16 || d->K % 16 || d->C > 64 || d->K > 64) return false;
    if (wino4_use(d) || mode == 3) return true;
    return mode == 1 && d->C >= 32 && d->K >= 32 && wino_faster(d);
}

/* F(4x4) for the weight gradient of C and K multiples of 16 up to 64,
 * other than 16 -> 16 (nn_wi4k_wgrad): mode 3 every such layer (tests,
 * also portable); mode 1 where F(2x2)'s weight gradient is used
 * (nn_wino_wgrad_ok) with 32 or more channels on both sides, where it is
 * faster than F(2x2) on one thread and no slower in work on two
 * (bench_conv: ResNet-20's 14x14x32 and 7x7x64, ResNet-50's res2;
 * docs/design.md §12). */
static bool wino4_wgrad_use(const nn_conv_dims *d)
{
    int mode = wino_mode(d);
    if (!nn_wino_shape(d) || d->C % 16 || d->K % 16 || d->C > 64 || d->K > 64 || wino4_use(d))
        return false;
    if (mode == 3) return true;
    return mode == 1 && d->C >= 32 && d->K >= 32 && nn_wino_wgrad_ok(d);
}

/* F(4x4) for 16 -> 16 layers (wino4_use) takes all three passes: the
 * forward and the input gradient in float (nn_wi_f4), the weight gradient
 * in float blocks summed in slices (nn_wi4_wgrad); conv_wino4.c says how
 * accurate they are and why that is accepted. The 32- to 64-channel
 * layers of wino_faster take F(4x4) for the forward and the input gradient
 * (wino4_dgrad_use) and, where it is faster, the weight gradient
 * (wino4_wgrad_use). */
bool nn_wino_ok(const nn_conv_dims *d)
{
    int mode = wino_mode(d);
    if (mode == 0 || !nn_wino_shape(d)) return false;
    return wino4_use(d) || mode >= 2 || wino_faster(d);
}

/* The weight gradient where it is faster than the direct kernels (section
 * 12): the forward's rule, C*K <= 4096 (the slices' sums, 16 C K floats
 * each, stay small) and images of at most 56x56 (ResNet-20's 32- and
 * 64-channel stages, ResNet-50's res2; larger images, as Inception-v3's
 * 147x147, gain nothing); or, up to the forward's C*K, images of at most
 * 28x28 (ResNet-50's res3 and res4 3x3, where the direct kernels do more
 * work). Which Winograd runs it is nn_wino_wgrad's choice: the 32- to
 * 64-channel layers among these take F(4x4) (wino4_wgrad_use), the rest
 * F(2x2). */
bool nn_wino_wgrad_ok(const nn_conv_dims *d)
{
    int mode = wino_mode(d);
    if (mode == 0 || !nn_wino_shape(d)) return false;
    size_t ck = (size_t)d->C * d->K, px = (size_t)d->OH * d->OW;
    return wino4_use(d) || mode >= 2 ||
           (wino_faster(d) && ((ck <= 4096 && px <= 3136) || px <= 784));
}

bool nn_wino_dgrad_ok(const nn_conv_dims *d)
{
    /* the input-gradient convolution: padding 2 - P must be >= 0 */
    return nn_wino_ok(d) || (wino_mode(d) != 0 && wino4_dgrad_use(d));
}
/* Whether the weight gradient and the input gradient are both F(2x2):
 * then nn_wino_backward runs them in one loop (nn_wi2_backward), and the
 * scratch has room for both (nn_wi2_bwd_scratch). */
static bool wino_bwd_fused(const nn_conv_dims *d)
{
    return nn_wino_wgrad_ok(d) && !wino4_use(d) && !wino4_wgrad_use(d) && nn_wino_dgrad_ok(d) &&
           !wino4_dgrad_use(d);
}

size_t nn_wino_scratch(const nn_conv_dims *d)
{
    if (!nn_wino_dgrad_ok(d) && !nn_wino_wgrad_ok(d)) return 0;
    if (wino4_use(d)) return nn_wi4_scratch(d);
    size_t f2 = nn_wi2_scratch(d, nn_wino_wgrad_ok(d)),
           f4 = wino4_dgrad_use(d) ? nn_wi4_scratch(d) : 0,
           w4 = wino4_wgrad_use(d) ? nn_wi4k_wgrad_scratch(d) : 0;
    size_t m = f2 > f4 ? f2 : f4, b = wino_bwd_fused(d) ? nn_wi2_bwd_scratch(d) : 0;
    m = m > w4 ? m : w4;
    return m > b ? m : b;
}

void nn_wino_wgrad(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                   nn_pool *pool, float *scratch, size_t stride)
{
    if (wino4_use(d))
        nn_wi4_wgrad(dw, dout, inp, d, pool, scratch, stride);
    else if (wino4_wgrad_use(d))
        nn_wi4k_wgrad(dw, dout, inp, d, pool, scratch, stride);
    else
        nn_wi2_wgrad(dw, dout, inp, d, pool, scratch, stride);
}

/* ---- the driver ------------------------------------------------------------- */

/* Calls of wino_run so far: each job's serial number, by which a thread
 * knows whether the U in its own scratch is the current call's. */
static atomic_ulong wi_calls;
static _Thread_local unsigned long wi_u_serial; /* the call whose U this thread built */

static void u_task(void *arg, int r, int tid)
{
    const wi_job *j = arg;
    (void)tid;
    j->v->u_row(j, j->U, r);
}

void nn_wi_block_task(void *arg, int task, int tid)
{
    const wi_job *j = arg;
    float *A = j->scratch + (size_t)tid * j->stride, *V = A + j->uf, *M = V + j->vf;
    const float *U = j->U;
    if (!U) {
        if (wi_u_serial != j->serial) {
            for (int r = 0; r < j->nu; r++) j->v->u_row(j, A, r);
            wi_u_serial = j->serial;
        }
        U = A;
    }
    int lo, hi, s = j->simd;
    nn_pool_block((j->NT + j->g - 1) / j->g, j->nb, task, &lo, &hi);
    int t0 = lo * j->g, nt = (hi * j->g < j->NT ? hi * j->g : j->NT) - t0;
    wi_prefetch_next(j, t0, nt, j->TB);
    j->v->in[s](j, V, t0, nt);
    j->v->gemm[s](j, M, V, U, wi_rows(j, nt));
    j->v->out[s](j, M, t0, nt);
}

/* The blocks of a call: its NT tiles in steps of g (the rows a block's
 * products compute at once: F(2x2)'s register-tile heights, F(4x4)'s
 * whole TB), at most TB tiles per block, the steps spread evenly over the
 * blocks, and on T threads a multiple of T blocks where there are enough
 * steps. Before, blocks of exactly TB tiles left the last one short but
 * computing all TB rows (res4's 3x3 256 at batch 8: 392 tiles in 17 blocks
 * of 24, 16 rows of zeros in the last), and T contiguous parts of
 * unequal work (9 blocks against 8, the second thread then taking one of
 * the first's: a block's time idle at the loop's end). Which block a tile
 * falls in changes no output (every output sums its c in order in any
 * block), so the blocks may follow T. */
static int wi_blocks(const wi_job *j, int T)
{
    int steps = (j->NT + j->g - 1) / j->g, per = j->TB / j->g;
    int nb = (steps + per - 1) / per;
    if (T > 1 && nb % T && nb + T - nb % T <= steps) nb += T - nb % T;
    return nb;
}

/* Every block task multiplies by all of U, so a U built by tasks on every
 * thread is read by every thread: on the machine of docs/platform.md, "Two cores of machine Z"
 * a buffer the other core has just
 * written reads at a sixth of the speed of one's own cache, and the lines
 * of U, rewritten by the next layer, would change hands at every call.
 * Instead each thread builds the whole of U into its own scratch before
 * its first block (the same bits: each row of U is computed alone), with
 * no separate loop of U tasks; the transform is then done once per
 * thread, which pays while it is a small part of a thread's blocks: at
 * least WI_OWN_TILES tiles per extra thread. Fewer tiles (small batches,
 * many threads): U by tasks into thread 0's scratch. */
#define WI_OWN_TILES 128

bool nn_wi_prepare(wi_job *j, int T)
{
    wi_tile(j);
    j->nu = j->v->setup(j);
    j->nb = wi_blocks(j, T);
    if (j->NT < WI_OWN_TILES * (T - 1)) return false;
    j->U = NULL;
    j->serial = atomic_fetch_add_explicit(&wi_calls, 1, memory_order_relaxed) + 1;
    return true;
}

static void wino_run(wi_job *j, nn_pool *pool)
{
    if (!nn_wi_prepare(j, nn_pool_threads(pool))) {
        j->U = j->scratch;
        nn_pool_for(pool, j->nu, u_task, j);
    }
    nn_pool_for(pool, j->nb, nn_wi_block_task, j);
}

void nn_wino_forward(float *out, const float *inp, const float *w, const float *b,
                     const nn_conv_dims *d, bool relu, nn_pool *pool, float *scratch, size_t stride)
{
    /* F(4x4) where it takes the input gradient (wino4_dgrad_use), else F(2x2) */
    wi_job j = {.d = d,
                .inp = inp,
                .w = w,
                .b = b,
                .out = out,
                .scratch = scratch,
                .stride = stride,
                .relu = relu,
                .v = wino4_dgrad_use(d) ? &nn_wi_f4 : &nn_wi_f2};
    wino_run(&j, pool);
}

/* The input gradient's job: dinp = conv(dy padded by 2 - P, flipped and
 * transposed kernel), g the dimensions of that convolution. */
static wi_job dgrad_job(nn_conv_dims *g, float *dinp, bool acc, const float *dout, const float *w,
                        const nn_conv_dims *d, float *scratch, size_t stride)
{
    nn_conv_dims t = *d; /* the switches */
    t.H = d->OH, t.W = d->OW, t.C = d->K, t.KH = t.KW = 3, t.SH = t.SW = 1;
    t.PH = 2 - d->PH, t.PW = 2 - d->PW, t.OH = d->H, t.OW = d->W, t.K = d->C;
    *g = t;
    return (wi_job){.d = g,
                    .inp = dout,
                    .w = w,
                    .out = dinp,
                    .scratch = scratch,
                    .stride = stride,
                    .acc = acc,
                    .flip = true,
                    .v = wino4_dgrad_use(d) ? &nn_wi_f4 : &nn_wi_f2};
}

void nn_wino_dgrad(float *dinp, bool acc, const float *dout, const float *w, const nn_conv_dims *d,
                   nn_pool *pool, float *scratch, size_t stride)
{
    nn_conv_dims g;
    wi_job j = dgrad_job(&g, dinp, acc, dout, w, d, scratch, stride);
    wino_run(&j, pool);
}

void nn_wino_backward(float *dw, float *dinp, bool acc, const float *dout, const float *inp,
                      const float *w, const nn_conv_dims *d, nn_pool *pool, float *scratch,
                      size_t stride)
{
    if (wino_bwd_fused(d)) {
        nn_conv_dims g;
        wi_job j = dgrad_job(&g, dinp, acc, dout, w, d, scratch, stride);
        if (nn_wi2_backward(dw, &j, dout, inp, d, pool)) return;
    } else if (wino4_wgrad_use(d) && wino4_dgrad_use(d)) {
        /* both F(4x4) (res2's 3x3 64, ResNet-20's 32- and 64-channel
         * stages): one loop too, nn_wi4k_backward */
        nn_conv_dims g;
        wi_job j = dgrad_job(&g, dinp, acc, dout, w, d, scratch, stride);
        if (nn_wi4k_backward(dw, &j, dout, inp, d, pool)) return;
    }
    nn_wino_wgrad(dw, dout, inp, d, pool, scratch, stride);
    nn_wino_dgrad(dinp, acc, dout, w, d, pool, scratch, stride);
}
