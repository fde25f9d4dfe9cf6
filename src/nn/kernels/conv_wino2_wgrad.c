/*
 * conv_wino2_wgrad.c - the weight gradient of Winograd F(2x2, 3x3)
 * (conv_wino2.c has the forward and input gradient and the transforms
 * the two share: the input tiles' V = B^T d B, conv_wino2_impl.h).
 *
 * Work: the tiles are cut into slices fixed by the shapes (nn_wi2_slices),
 * a slice's input channels into groups while slices are fewer than threads
 * (wgrad_groups: the same sums); then one task per input channel adds the
 * slices' sums in slice order and transforms them into dw. The result is
 * the same bits for every thread count. nn_wi2_backward runs the slice
 * tasks in one loop with the input gradient's blocks (below).
 */
#include <string.h>

#include "conv_wino2_impl.h"

/* Slices of the tiles whose weight-gradient sums S[pos][c][k] are kept
 * apart (then added in slice order): one per 256 tiles, at most N and as
 * many as WI_PARTS floats of sums allow. */
#define WI_PARTS (1u << 19)
int nn_wi2_slices(const nn_conv_dims *d)
{
    size_t nt = (size_t)d->N * ((d->OH + 1) / 2) * ((d->OW + 1) / 2);
    size_t S = nt / 256, cap = WI_PARTS / u_floats(d->C, d->K);
    if (S > cap) S = cap;
    if (S > (size_t)d->N) S = (size_t)d->N;
    if (S > WI_MAX_SLICES) S = WI_MAX_SLICES; /* j->su's room */
    return S < 1 ? 1 : (int)S;
}

/* ---- the weight gradient ------------------------------------------------
 * With Z = A dY A^T (the 2x2 dy tile to 4x4; A = [1 0; 1 1; 1 -1; 0 -1]):
 *   dU[pos][c][k] = sum over tiles of V[pos][t][c] Z[pos][t][k]
 *   dW[tap][c][k] = G^T dU G   (4x4 -> 3x3 for each c, k)
 * (the gradient of y = A^T[U . V]A with U = G g G^T). The tiles are cut into
 * S slices fixed by the shapes (nn_wi2_slices); slice s sums its tiles in
 * order, block by block, into its own dU; then dU = dU_0 + dU_1 + ... in
 * slice order and the G^T (.) G transform, by input channel. */

/* Z[pos][i][Ks] for tiles t0 + i, i < nt (zero past OH, OW; the rows from
 * nt on are not written: the sums read the first nt). */
static void z_port(const wi_job *j, float *Z, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int K = d->K, Ks = j->Ks, per = j->TH * j->TW;
    const size_t ps = (size_t)j->TB * Ks;
    for (int i = 0; i < nt; i++) {
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        for (int k = 0; k < Ks; k++) {
            float y[2][2], q[2][4];
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++) {
                    int oh = 2 * ty + a, ow = 2 * tx + b;
                    bool in = k < K && oh < d->OH && ow < d->OW;
                    y[a][b] = in ? j->dy[(((size_t)n * d->OH + oh) * d->OW + ow) * K + k] : 0.0f;
                }
            for (int a = 0; a < 2; a++) {
                q[a][0] = y[a][0];
                q[a][1] = y[a][0] + y[a][1];
                q[a][2] = y[a][0] - y[a][1];
                q[a][3] = -y[a][1];
            }
            float *z = Z + (size_t)i * Ks + k;
            for (int b = 0; b < 4; b++) {
                z[b * ps] = q[0][b];
                z[(4 + b) * ps] = q[0][b] + q[1][b];
                z[(8 + b) * ps] = q[0][b] - q[1][b];
                z[(12 + b) * ps] = -q[1][b];
            }
        }
    }
}

/* dU[pos][c][Ks] (+)= sum over i < nt of V[pos][i][c] Z[pos][i][k], i in
 * order, for c in [c0, c1). */
static void wgemm_port(const wi_job *j, float *dU, const float *V, const float *Z, int nt, bool acc,
                       int c0, int c1)
{
    const int Cs = j->Cs, Ks = j->Ks, TB = j->TB;
    for (int p = 0; p < WI_POS; p++)
        for (int c = c0; c < c1; c++) {
            float *o = dU + ((size_t)p * Cs + c) * Ks;
            if (!acc) memset(o, 0, sizeof(float) * Ks);
            for (int i = 0; i < nt; i++) {
                float v = V[((size_t)p * TB + i) * Cs + c];
                const float *z = Z + ((size_t)p * TB + i) * Ks;
                for (int k = 0; k < Ks; k++) o[k] += v * z[k];
            }
        }
}

#if WI_X86
/* z_port with AVX-512 */
AVX512 static void z_simd(const wi_job *j, float *Z, int t0, int nt)
{
    const nn_conv_dims *d = j->d;
    const int K = d->K, Ks = j->Ks, per = j->TH * j->TW;
    const size_t ps = (size_t)j->TB * Ks;
    const __m512 z0 = _mm512_setzero_ps();
    for (int i = 0; i < nt; i++) {
        float *z = Z + (size_t)i * Ks;
        int t = t0 + i, n = t / per, r = t - n * per, ty = r / j->TW, tx = r - ty * j->TW;
        bool ok[2][2];
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) ok[a][b] = 2 * ty + a < d->OH && 2 * tx + b < d->OW;
        const float *src = j->dy + (((size_t)n * d->OH + 2 * ty) * d->OW + 2 * tx) * K;
        for (int k = 0; k < Ks; k += 16) {
            __mmask16 m = K - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k)) - 1);
            __m512 y[2][2], q[2][4];
#pragma GCC unroll 2
            for (int a = 0; a < 2; a++)
#pragma GCC unroll 2
                for (int b = 0; b < 2; b++)
                    y[a][b] = ok[a][b]
                                  ? _mm512_maskz_loadu_ps(m, src + ((size_t)a * d->OW + b) * K + k)
                                  : z0;
#pragma GCC unroll 2
            for (int a = 0; a < 2; a++) {
                q[a][0] = y[a][0];
                q[a][1] = _mm512_add_ps(y[a][0], y[a][1]);
                q[a][2] = _mm512_sub_ps(y[a][0], y[a][1]);
                q[a][3] = _mm512_sub_ps(z0, y[a][1]);
            }
#pragma GCC unroll 4
            for (int b = 0; b < 4; b++) {
                _mm512_storeu_ps(z + b * ps + k, q[0][b]);
                _mm512_storeu_ps(z + (4 + b) * ps + k, _mm512_add_ps(q[0][b], q[1][b]));
                _mm512_storeu_ps(z + (8 + b) * ps + k, _mm512_sub_ps(q[0][b], q[1][b]));
                _mm512_storeu_ps(z + (12 + b) * ps + k, _mm512_sub_ps(z0, q[1][b]));
            }
        }
    }
}

/* MR channels c x NV vectors of k of dU at one position, over nt tiles. */
AVX512 static INLINE void wgemm_tile(int MR, int NV, float *dU, int Ks, const float *V, int Cs,
                                     const float *Z, int nt, bool acc)
{
    __m512 s[16][3];
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++)
            s[i][v] = acc ? _mm512_loadu_ps(dU + (size_t)i * Ks + 16 * v) : _mm512_setzero_ps();
    for (int t = 0; t < nt; t++) {
        __m512 z[3];
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) z[v] = _mm512_loadu_ps(Z + (size_t)t * Ks + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            __m512 x = _mm512_set1_ps(V[(size_t)t * Cs + i]);
#pragma GCC unroll 3
            for (int v = 0; v < NV; v++) s[i][v] = _mm512_fmadd_ps(x, z[v], s[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(dU + (size_t)i * Ks + 16 * v, s[i][v]);
}

AVX512 static void wgemm_16x1(float *dU, int Ks, const float *V, int Cs, const float *Z, int nt,
                              bool acc)
{
    wgemm_tile(16, 1, dU, Ks, V, Cs, Z, nt, acc);
}
AVX512 static void wgemm_8x2(float *dU, int Ks, const float *V, int Cs, const float *Z, int nt,
                             bool acc)
{
    wgemm_tile(8, 2, dU, Ks, V, Cs, Z, nt, acc);
}
AVX512 static void wgemm_8x3(float *dU, int Ks, const float *V, int Cs, const float *Z, int nt,
                             bool acc)
{
    wgemm_tile(8, 3, dU, Ks, V, Cs, Z, nt, acc);
}

static void wgemm_simd(const wi_job *j, float *dU, const float *V, const float *Z, int nt, bool acc,
                       int c0, int c1)
{
    const int Cs = j->Cs, Ks = j->Ks, TB = j->TB, nv = Ks / 16;
    for (int p = 0; p < WI_POS; p++) {
        const float *Vp = V + (size_t)p * TB * Cs, *Zp = Z + (size_t)p * TB * Ks;
        float *Sp = dU + (size_t)p * Cs * Ks;
        for (int v0 = 0; v0 < nv; v0 += 3) {
            int w = nv - v0 < 3 ? nv - v0 : 3, mr = w == 1 ? 16 : 8;
            for (int c = c0; c < c1; c += mr) {
                float *o = Sp + (size_t)c * Ks + 16 * v0;
                const float *v = Vp + c, *z = Zp + 16 * v0;
                if (w == 1)
                    wgemm_16x1(o, Ks, v, Cs, z, nt, acc);
                else if (w == 2)
                    wgemm_8x2(o, Ks, v, Cs, z, nt, acc);
                else
                    wgemm_8x3(o, Ks, v, Cs, z, nt, acc);
            }
        }
    }
}
#endif

/* The weight gradient's job: the common one and its channel groups. */
typedef struct {
    wi_job j;
    int G;     /* groups of input channels per slice (wgrad_groups) */
    size_t vz; /* floats from a thread's area to its V and Z (after the S dU) */
} wg_job;

/* Groups of input channels whose dU rows a slice computes in separate
 * tasks: fewer slices than threads (res4's 3x3 256 at batch 8 has one)
 * would leave threads without work. Each dU[pos][c][k] sums over the
 * slice's tiles only, in the same order in any group, so the groups change
 * which task computes a row, not its bits, and may follow the thread count
 * T. Doubled while the tasks are fewer than T and the groups keep at least
 * WG_MIN_C channels: each group transforms its tiles' whole dy into Z
 * again, so that 4 groups of res4's 256 channels cost clearly more work
 * than 1 and 2 groups somewhat more (bench_conv, 2 threads). */
#define WG_MIN_C 64
static int wgrad_groups(int S, int Cs, int T)
{
    int G = 1;
    while (S * G < T && S * 2 * G <= WI_MAX_SLICES /* j->su's room */ && (Cs / 16) % (2 * G) == 0 &&
           Cs / (2 * G) >= WG_MIN_C)
        G *= 2;
    return G;
}

/* Task q: channel group g = q % G of slice s = q / G, its tiles block by
 * block into rows [16 lo, 16 hi) of dU_s at s in the scratch of the thread
 * that runs it (every thread's has room for all S; in thread 0's, every
 * slice another thread ran would be written into lines of the other core),
 * where wout_task finds it (j->su[q]). */
static void wslice_task(void *arg, int q, int tid)
{
    const wg_job *w = arg;
    const wi_job *j = &w->j;
    const int s = q / w->G;
    int lo, hi, a, e;
    nn_pool_block(j->Cs / 16, w->G, q % w->G, &lo, &hi);
    const int c0 = 16 * lo, c1 = 16 * hi;
    float *A = j->scratch + (size_t)tid * j->stride;
    float *V = A + w->vz;
    float *Z = V + (size_t)WI_POS * j->TB * j->Cs;
    float *dU = A + (size_t)s * u_floats(j->d->C, j->d->K);
    j->su[q] = dU;
    nn_pool_block(j->NT, j->S, s, &a, &e);
    /* the slice's tiles in nb near-equal blocks of at most TB (WI_WG_TB) */
    const int nb = (e - a + j->TB - 1) / j->TB;
    for (int b = 0; b < nb; b++) {
        int t0, t1;
        nn_pool_block(e - a, nb, b, &t0, &t1);
        t0 += a, t1 += a;
        int nt = t1 - t0;
        wi_prefetch_next(j, t0, nt, nt);
#if WI_X86
        if (j->simd) {
            nn_wi2_in_simd(j, V, t0, nt, nt, c0, c1);
            z_simd(j, Z, t0, nt);
            wgemm_simd(j, dU, V, Z, nt, t0 > a, c0, c1);
            continue;
        }
#endif
        nn_wi2_in_port(j, V, t0, nt, nt, c0, c1);
        z_port(j, Z, t0, nt);
        wgemm_port(j, dU, V, Z, nt, t0 > a, c0, c1);
    }
    if (e == a)
        for (int p = 0; p < WI_POS; p++)
            memset(dU + ((size_t)p * j->Cs + c0) * j->Ks, 0, sizeof(float) * (c1 - c0) * j->Ks);
}

/* dw[tap][c][k] for input channel c: dU summed over the slices in order, then
 * G^T dU G. */
NN_CLONES static void wout_row(float *dw, const float *const *su, int S, int Cs, int C, int K,
                               int Ks, int c)
{
    float buf[WI_POS][16];
    for (int k0 = 0; k0 < K; k0 += 16) {
        int m = K - k0 < 16 ? K - k0 : 16;
        for (int p = 0; p < WI_POS; p++) {
            const size_t off = ((size_t)p * Cs + c) * Ks + k0;
            for (int i = 0; i < 16; i++) buf[p][i] = su[0][off + i];
            for (int s = 1; s < S; s++)
                for (int i = 0; i < 16; i++) buf[p][i] += su[s][off + i];
        }
        for (int i = 0; i < m; i++) {
            float t[4][3];
            for (int a = 0; a < 4; a++) {
                float x0 = buf[4 * a][i], x1 = buf[4 * a + 1][i], x2 = buf[4 * a + 2][i],
                      x3 = buf[4 * a + 3][i];
                t[a][0] = x0 + 0.5f * (x1 + x2);
                t[a][1] = 0.5f * (x1 - x2);
                t[a][2] = 0.5f * (x1 + x2) + x3;
            }
            for (int b = 0; b < 3; b++) {
                dw[((size_t)(0 * 3 + b) * C + c) * K + k0 + i] =
                    t[0][b] + 0.5f * (t[1][b] + t[2][b]);
                dw[((size_t)(1 * 3 + b) * C + c) * K + k0 + i] = 0.5f * (t[1][b] - t[2][b]);
                dw[((size_t)(2 * 3 + b) * C + c) * K + k0 + i] =
                    0.5f * (t[1][b] + t[2][b]) + t[3][b];
            }
        }
    }
}

#if WI_X86
/* wout_row with AVX-512: the 16 k of a block in one vector (the same
 * additions and halvings, each exact but for the rounding of its sum: the
 * same bits), dw's rows stored as vectors (masked past K). The slices'
 * lines of channel c + 1 (the task a thread runs next) are requested first:
 * on two threads half of them are in the other core's cache, a memory
 * latency each (a hint only). */
AVX512 static void wout_row_simd(float *dw, const float *const *su, int S, int Cs, int C, int K,
                                 int Ks, int c)
{
    const __m512 h = _mm512_set1_ps(0.5f);
    if (c + 1 < Cs)
        for (int s = 0; s < S; s++)
            for (int p = 0; p < WI_POS; p++)
                for (int k0 = 0; k0 < Ks; k0 += 16)
                    _mm_prefetch((const char *)(su[s] + ((size_t)p * Cs + c + 1) * Ks + k0),
                                 _MM_HINT_T0);
    for (int k0 = 0; k0 < K; k0 += 16) {
        const __mmask16 m = K - k0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (K - k0)) - 1);
        __m512 x[WI_POS];
#pragma GCC unroll 16
        for (int p = 0; p < WI_POS; p++) {
            const size_t off = ((size_t)p * Cs + c) * Ks + k0;
            x[p] = _mm512_loadu_ps(su[0] + off);
            for (int s = 1; s < S; s++) x[p] = _mm512_add_ps(x[p], _mm512_loadu_ps(su[s] + off));
        }
        __m512 t[4][3];
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            __m512 x0 = x[4 * a], x1 = x[4 * a + 1], x2 = x[4 * a + 2], x3 = x[4 * a + 3];
            __m512 hs = _mm512_mul_ps(h, _mm512_add_ps(x1, x2));
            t[a][0] = _mm512_add_ps(x0, hs);
            t[a][1] = _mm512_mul_ps(h, _mm512_sub_ps(x1, x2));
            t[a][2] = _mm512_add_ps(hs, x3);
        }
#pragma GCC unroll 3
        for (int b = 0; b < 3; b++) {
            __m512 hs = _mm512_mul_ps(h, _mm512_add_ps(t[1][b], t[2][b]));
            float *o = dw + (size_t)c * K + k0;
            _mm512_mask_storeu_ps(o + (size_t)b * C * K, m, _mm512_add_ps(t[0][b], hs));
            _mm512_mask_storeu_ps(o + (size_t)(3 + b) * C * K, m,
                                  _mm512_mul_ps(h, _mm512_sub_ps(t[1][b], t[2][b])));
            _mm512_mask_storeu_ps(o + (size_t)(6 + b) * C * K, m, _mm512_add_ps(hs, t[3][b]));
        }
    }
}
#endif

static void wout_task(void *arg, int c, int tid)
{
    const wg_job *w = arg;
    const wi_job *j = &w->j;
    const float *su[WI_MAX_SLICES]; /* the slices' sums of c's group */
    int g = 0, lo, hi;
    for (;; g++) {
        nn_pool_block(j->Cs / 16, w->G, g, &lo, &hi);
        if (c < 16 * hi) break;
    }
    for (int s = 0; s < j->S; s++) su[s] = j->su[s * w->G + g];
#if WI_X86
    if (j->simd) {
        wout_row_simd(j->out, su, j->S, j->Cs, j->d->C, j->d->K, j->Ks, c);
        return;
    }
#endif
    wout_row(j->out, su, j->S, j->Cs, j->d->C, j->d->K, j->Ks, c);
    (void)tid;
}

static wg_job wg_setup(float *dw, const float *dout, const float *inp, const nn_conv_dims *d, int T,
                       float *scratch, size_t stride, float **su)
{
    wg_job w = {.j = {.d = d,
                      .inp = inp,
                      .dy = dout,
                      .out = dw,
                      .scratch = scratch,
                      .stride = stride,
                      .v = &nn_wi_f2}};
    wi_tile(&w.j);
    nn_wi_f2.setup(&w.j);
    w.j.TB = WI_WG_TB; /* V's and Z's rows apart (nn_wi2_scratch's room) */
    w.j.S = nn_wi2_slices(d), w.j.su = su;
    w.G = wgrad_groups(w.j.S, w.j.Cs, T);
    w.vz = (size_t)w.j.S * u_floats(d->C, d->K);
    return w;
}

void nn_wi2_wgrad(float *dw, const float *dout, const float *inp, const nn_conv_dims *d,
                  nn_pool *pool, float *scratch, size_t stride)
{
    float *su[WI_MAX_SLICES];
    wg_job w = wg_setup(dw, dout, inp, d, nn_pool_threads(pool), scratch, stride, su);
    nn_pool_for(pool, w.j.S * w.G, wslice_task, &w);
    nn_pool_for(pool, d->C, wout_task, &w);
}

/* ---- with the input gradient ---------------------------------------------
 * The slice tasks are few and long (res4's 3x3 256 at batch 8: one slice in
 * 2 channel groups on 2 threads; res3's 3x3 128: 2 slices): alone in
 * their loop, whatever made one finish first would leave the other thread
 * idle until the loop's end. With the input gradient's blocks (the
 * same dy, their own outputs) in the same loop, that thread takes blocks
 * meanwhile. A thread's area holds the S slices' dU (kept until the
 * reduction), then the input gradient's U (kept over the thread's blocks),
 * then the transient V and Z of a slice task or V and M of a block. The
 * tasks are ordered so that part p of the pool's T contiguous parts holds
 * the slice tasks p of T first, then the blocks p of T (the pool's own
 * split where both counts are multiples of T): each thread starts with its
 * long task and ends with short ones. Which thread runs which task changes
 * no bits: the slice sums and the blocks' outputs are computed as in
 * separate loops. */
typedef struct {
    wg_job *w;
    wi_job *g;
    int T;
} bw_job;

static void bw_task(void *arg, int i, int tid)
{
    const bw_job *b = arg;
    int k;
    if (nn_pool_two_lists(i, b->w->j.S * b->w->G, b->g->nb, b->T, &k) == 0)
        wslice_task(b->w, k, tid);
    else
        nn_wi_block_task(b->g, k, tid);
}

bool nn_wi2_backward(float *dw, wi_job *g, const float *dout, const float *inp,
                     const nn_conv_dims *d, nn_pool *pool)
{
    const int T = nn_pool_threads(pool);
    if (!nn_wi_prepare(g, T)) return false;
    float *su[WI_MAX_SLICES], *scratch = g->scratch;
    wg_job w = wg_setup(dw, dout, inp, d, T, scratch, g->stride, su);
    g->scratch = scratch + w.vz; /* after the slices' dU */
    w.vz += g->uf;               /* and the input gradient's U */
    bw_job b = {.w = &w, .g = g, .T = T};
    nn_pool_for(pool, w.j.S * w.G + g->nb, bw_task, &b);
    nn_pool_for(pool, d->C, wout_task, &w);
    return true;
}
