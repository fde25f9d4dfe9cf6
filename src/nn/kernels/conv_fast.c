/*
 * conv_fast.c - AVX-512 implicit-GEMM kernels for wide convolutions
 * (K > NN_NARROW_MAX output channels), read straight from a zero-padded
 * image: no im2col matrix, no col2im, and the kernel packed once per call.
 *
 * With r = kh*seg + j (seg = KW*C, j = kw*C + c) and the window of output
 * pixel p starting at base(p) = oh*SH*WpC + ow*SW*C of the padded image,
 * A(p, r) = pad[base(p) + kh*WpC + j] is the im2col matrix, never stored:
 *   forward  out[p][k] = bias[k] + sum_r A(p, r) W[r][k]
 *   dW       dW[r][k] += sum_p A(p, r) dy[p][k]
 * and the input gradient of a stride-1 convolution is the forward of the
 * zero-padded dy with the kernel flipped and transposed (nn_cf_pack_flip).
 *
 * The kernel is packed in blocks of 64 output channels, [nkb][R][64] with
 * zeros past K, so a micro-tile's loads are aligned and unmasked. Forward:
 * a tile of MR pixels x 64 channels lives in registers (6 x 4 vectors; 8 x
 * 3, 12 x 2 or 12 x 1 for narrower last blocks) over a block of CF_RB
 * kernel rows (24 KB: stays in L1), each step one load of the kernel row
 * and MR broadcasts from the windows. dW: a tile of MR kernel rows x 64
 * channels over a block of CF_PB pixels (their dy rows, 128 KB, stay in
 * L2), each step one load of dy and MR broadcasts from the windows, so dW
 * goes through the caches once per block, not once per image.
 *
 * A call covers g->nimg images laid out g->img floats apart (their out
 * and dy rows consecutive): small images (7x7, 8x8) then fill whole tiles
 * and blocks.
 *
 * Summation order: out over r in increasing order (blocks of CF_RB, the
 * tile reloaded between blocks); dW over pixels in increasing order within
 * an image, images in the caller's order. Neither depends on how callers
 * split images, channel blocks or kernel rows into tasks.
 *
 * No window is read past its segment: an image without padding is read in
 * place.
 */
#include <stdint.h>
#include <string.h>

#include "layers.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CF_X86 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,fma,prfchw")))
#define INLINE __attribute__((always_inline)) inline
#else
#define CF_X86 0
#endif

#define CF_NB 64  /* output channels per packed block */
#define CF_RB 96  /* kernel rows per forward block: 96 x 64 floats = 24 KB */
#define CF_PB 512 /* pixels per dW block: 512 dy rows of 64 floats = 128 KB, in L2 */
/* A 1x1 stride-1 layer's dW block: its x and dy rows within 320 KB, so
 * that it and the next block, prefetched meanwhile, stay in L2 */
#define CF_DENSE_BYTES (320 * 1024)
/* ... and at most this many pixels: the block's dy stripe of one channel
 * block (64 floats a pixel, 32 KB) then stays in L1 while every row tile
 * of the block reads it (256 pixels, 64 KB, would go to L2 once per tile:
 * res2's 1x1 256->64 weight gradient is the case) */
#define CF_DENSE_PIXELS 128
#define CF_PF_ROWS 16 /* dy rows ahead that the packing of dy prefetches */
#define CF_PF_TILES 2 /* forward tiles ahead whose out rows an accumulating call prefetches */

bool nn_cf_ok(const nn_conv_dims *d)
{
    return CF_X86 && nn_narrow_use_simd(-1) && d->K > NN_NARROW_MAX;
}

size_t nn_cf_packed_floats(int R, int K)
{
    return (size_t)((K + CF_NB - 1) / CF_NB) * R * CF_NB;
}

void nn_cf_pack_block(float *wp, const float *w, int R, int K, int kb)
{
    int k0 = kb * CF_NB, nk = K - k0 < CF_NB ? K - k0 : CF_NB;
    float *dst = wp + (size_t)kb * R * CF_NB;
    for (int r = 0; r < R; r++) {
        memcpy(dst + (size_t)r * CF_NB, w + (size_t)r * K + k0, sizeof(float) * nk);
        memset(dst + (size_t)r * CF_NB + nk, 0, sizeof(float) * (CF_NB - nk));
    }
}

void nn_cf_pack(float *wp, const float *w, int R, int K)
{
    for (int kb = 0; kb < (K + CF_NB - 1) / CF_NB; kb++) nn_cf_pack_block(wp, w, R, K, kb);
}

#if CF_X86
/* nn_cf_transpose16: unpack pairs of rows, then 4 x 4 blocks of 32-bit and
 * of 128-bit lanes */
AVX512 void nn_cf_transpose16(float *dst, size_t ldd, int nout, const float *src, size_t lds,
                              int nrow, int ncol)
{
    const __mmask16 cm = (__mmask16)((1u << ncol) - 1);
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = i < nrow ? _mm512_maskz_loadu_ps(cm, src + (size_t)i * lds) : _mm512_setzero_ps();
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* r[4i + m], lane l: column 4l + m of rows 4i .. 4i + 3 */
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int m = 0; m < 4; m++) {
        __m512 v0 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88);
        __m512 v1 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xDD);
        __m512 v2 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
        __m512 v3 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xDD);
        __m512 o[4] = {_mm512_shuffle_f32x4(v0, v2, 0x88), _mm512_shuffle_f32x4(v1, v3, 0x88),
                       _mm512_shuffle_f32x4(v0, v2, 0xDD), _mm512_shuffle_f32x4(v1, v3, 0xDD)};
        for (int l = 0; l < 4; l++)
            if (4 * l + m < nout) _mm512_storeu_ps(dst + (size_t)(4 * l + m) * ldd, o[l]);
    }
}

/* nn_cf_pack_flip_block's transposes in 16 x 16 register blocks: a scalar
 * loop costs several times the plain pack's memcpy (res5's 3x3 512 -> 512:
 * 9.4 MB) */
AVX512 static void cf_pack_flip_simd(float *dst, const float *w, int KH, int KW, int C, int K,
                                     int c0, int nc)
{
    for (int t = 0; t < KH * KW; t++) {
        const float *src = w + (size_t)(KH * KW - 1 - t) * C * K + (size_t)c0 * K;
        float *o = dst + (size_t)t * K * CF_NB;
        for (int k0 = 0; k0 < K; k0 += 16) {
            int nk = K - k0 < 16 ? K - k0 : 16;
            for (int cb = 0; cb < CF_NB; cb += 16) {
                int nrow = nc - cb < 0 ? 0 : nc - cb > 16 ? 16 : nc - cb;
                nn_cf_transpose16(o + (size_t)k0 * CF_NB + cb, CF_NB, nk, src + (size_t)cb * K + k0,
                                  (size_t)K, nrow, nk);
            }
        }
    }
}
#endif

void nn_cf_pack_flip_block(float *wp, const float *w, int KH, int KW, int C, int K, int kb)
{
    /* W'[(kh*KW + kw)*K + k][c] = w[(KH-1-kh)*KW + KW-1-kw][c][k]: rows R' =
     * KH*KW*K, C output channels. A transpose of each tap's [C][K] matrix,
     * 16 k at a time: a cache line of each source row goes into a 16 x 64
     * destination block that stays in L1. */
    const int Rp = KH * KW * K;
    int c0 = kb * CF_NB, nc = C - c0 < CF_NB ? C - c0 : CF_NB;
    float *dst = wp + (size_t)kb * Rp * CF_NB;
#if CF_X86
    if (nn_narrow_use_simd(-1)) {
        cf_pack_flip_simd(dst, w, KH, KW, C, K, c0, nc);
        return;
    }
#endif
    for (int t = 0; t < KH * KW; t++) {
        const float *src = w + (size_t)(KH * KW - 1 - t) * C * K + (size_t)c0 * K;
        float *o = dst + (size_t)t * K * CF_NB;
        for (int k0 = 0; k0 < K; k0 += 16) {
            int nk = K - k0 < 16 ? K - k0 : 16;
            for (int c = 0; c < nc; c++)
                for (int i = 0; i < nk; i++)
                    o[(size_t)(k0 + i) * CF_NB + c] = src[(size_t)c * K + k0 + i];
            for (int i = 0; i < nk; i++)
                for (int c = nc; c < CF_NB; c++) o[(size_t)(k0 + i) * CF_NB + c] = 0.0f;
        }
    }
}

void nn_cf_pack_flip(float *wp, const float *w, int KH, int KW, int C, int K)
{
    for (int kb = 0; kb < (C + CF_NB - 1) / CF_NB; kb++)
        nn_cf_pack_flip_block(wp, w, KH, KW, C, K, kb);
}

#if CF_X86

/* base[i] = window start of output pixels p0 + i, i < np (counted, not
 * divided, past the first). */
static void cf_bases(size_t *base, int p0, int np, const nn_cf_geom *g)
{
    int P = g->OH * g->OW, n = p0 / P, r = p0 - n * P, oh = r / g->OW, ow = r - oh * g->OW;
    for (int i = 0; i < np; i++) {
        base[i] = (size_t)n * g->img + (size_t)oh * g->SHWpC + (size_t)ow * g->SWC;
        if (++ow == g->OW) {
            ow = 0;
            if (++oh == g->OH) oh = 0, n++;
        }
    }
}

/* The windows are consecutive rows of one matrix (a 1x1 stride-1 layer,
 * its images consecutive): what the pixel blocks read next is known and
 * prefetched. */
static bool dense_geom(const nn_cf_geom *g)
{
    return g->KH == 1 && g->seg == g->SWC && (g->OH == 1 || g->SHWpC == g->OW * g->SWC) &&
           (g->nimg == 1 || g->img == (size_t)g->OH * g->OW * g->seg);
}

/* Pixels [p, p + n) (n <= MR) x NV vectors: out rows (ldo apart) over
 * kernel rows [r0, r1). load: start from out, else from bias. relu on the
 * stored values. Inlined with constant MR and NV. */
AVX512 static INLINE void fwd_tile(int MR, int NV, float *out, int ldo, const float *pad, int p,
                                   int n, const size_t *base, int WpC, int seg, const float *wp,
                                   int r0, int r1, const __mmask16 *mk, const __m512 *bv, bool load,
                                   bool relu, const size_t *pfb, bool nt)
{
    const float *a[12];
    float *o[12];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        int q = i < n ? i : n - 1; /* dummies repeat the last pixel, not stored */
        a[i] = pad + base[q];
        o[i] = out + (size_t)(p + q) * ldo;
    }
    __m512 c[12][4];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            c[i][v] = load ? _mm512_maskz_loadu_ps(mk[v], o[i] + 16 * v) : bv[v];
    for (int r = r0; r < r1;) {
        int kh = r / seg, j = r - kh * seg;
        int jend = seg < j + (r1 - r) ? seg : j + (r1 - r);
        const float *wr = wp + (size_t)r * CF_NB;
        const size_t off = (size_t)kh * WpC;
        if (pfb)
            for (int i = 0; i < MR; i++)
                for (int q = j; q < jend; q += 16)
                    _mm_prefetch((const char *)(pad + pfb[i] + off + q), _MM_HINT_T0);
        for (int jj = j; jj < jend; jj++, wr += CF_NB) {
            __m512 w[4];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) w[v] = _mm512_loadu_ps(wr + 16 * v);
#pragma GCC unroll 12
            for (int i = 0; i < MR; i++) {
                __m512 x = _mm512_set1_ps(a[i][off + jj]);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) c[i][v] = _mm512_fmadd_ps(x, w[v], c[i][v]);
            }
        }
        r += jend - j;
    }
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        if (i >= n) break;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            __m512 y = relu ? _mm512_max_ps(c[i][v], zero) : c[i][v];
            if (nt && mk[v] == (__mmask16)0xffff)
                _mm512_stream_ps(o[i] + 16 * v, y);
            else
                _mm512_mask_storeu_ps(o[i] + 16 * v, mk[v], y);
        }
    }
}

/* All pixels [0, OH*OW) of one image, channel block kb. */
AVX512 static INLINE void fwd_block(int MR, int NV, float *out, int ldo, const float *pad, int P,
                                    const nn_cf_geom *g, int WpC, int seg, int R, const float *wp,
                                    const __mmask16 *mk, const __m512 *bv, bool acc, bool relu,
                                    bool nt)
{
    const int PB = 8 * MR; /* pixels per block: their outputs stay in L1/L2 */
    size_t base[8 * 12 + 4 * 12];
    const int RB = CF_RB, D = dense_geom(g) ? 1 : 0;
    for (int p0 = 0; p0 < P; p0 += PB) {
        int pe = P < p0 + PB ? P : p0 + PB;
        int pl = P < pe + D * MR ? P : pe + D * MR;
        cf_bases(base, p0, pl - p0, g);
        for (int r0 = 0; r0 < R; r0 += RB) {
            int r1 = R < r0 + RB ? R : r0 + RB;
            for (int p = p0; p < pe; p += MR) {
                /* adding into out (an input gradient with two consumers):
                 * the out rows of the tile after next are read from memory
                 * ahead, not at the tile's start (1x1 layers' tiles are a
                 * few hundred cycles, a miss as long). Writing them (not
                 * streamed): fetched ahead for writing too, else each
                 * line's read-for-ownership waits at the tile's stores
                 * (res2's 1x1 256->64 input gradient shows it most) */
                if (acc && r0 == 0)
                    for (int q = p + CF_PF_TILES * MR; q < p + (CF_PF_TILES + 1) * MR && q < P; q++)
                        for (int v = 0; v < NV; v++)
                            _mm_prefetch((const char *)(out + (size_t)q * ldo + 16 * v),
                                         _MM_HINT_T0);
                else if (!nt && r0 == 0)
                    for (int q = p + CF_PF_TILES * MR; q < p + (CF_PF_TILES + 1) * MR && q < P; q++)
                        for (int v = 0; v < NV; v++)
                            __builtin_prefetch(out + (size_t)q * ldo + 16 * v, 1, 3);
                fwd_tile(MR, NV, out, ldo, pad, p, pe - p < MR ? pe - p : MR, base + (p - p0), WpC,
                         seg, wp, r0, r1, mk, bv, acc || r0 > 0, relu && r1 == R,
                         D && p + D * MR + MR <= pl ? base + (p - p0) + D * MR : NULL,
                         nt && r1 == R);
            }
        }
    }
}

AVX512 static void cf_forward_simd(float *out, const float *pad, const nn_cf_geom *g,
                                   const float *wp, int K, int kb, const float *bias, bool relu,
                                   bool acc)
{
    const int k0 = kb * CF_NB, nk = K - k0 < CF_NB ? K - k0 : CF_NB, NV = (nk + 15) / 16;
    __mmask16 mk[4];
    __m512 bv[4];
    for (int v = 0; v < 4; v++) {
        int left = nk - 16 * v;
        mk[v] = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        bv[v] =
            bias && !acc ? _mm512_maskz_loadu_ps(mk[v], bias + k0 + 16 * v) : _mm512_setzero_ps();
    }
    const int P = g->nimg * g->OH * g->OW, R = g->KH * g->seg;
    const float *wpk = wp + (size_t)kb * R * CF_NB;
    float *o = out + k0;
    /* non-temporal stores: whole aligned vectors only; fenced before the
     * call returns (the pool's hand-over then publishes them) */
    const bool nt = g->stream && (uintptr_t)o % 64 == 0 && K % 16 == 0;
    switch (NV) {
    case 4:
        fwd_block(6, 4, o, K, pad, P, g, g->WpC, g->seg, R, wpk, mk, bv, acc, relu, nt);
        break;
    case 3:
        fwd_block(8, 3, o, K, pad, P, g, g->WpC, g->seg, R, wpk, mk, bv, acc, relu, nt);
        break;
    case 2:
        fwd_block(12, 2, o, K, pad, P, g, g->WpC, g->seg, R, wpk, mk, bv, acc, relu, nt);
        break;
    default:
        fwd_block(12, 1, o, K, pad, P, g, g->WpC, g->seg, R, wpk, mk, bv, acc, relu, nt);
    }
    if (nt) _mm_sfence();
}

/* Lines of the next pixel block to prefetch into L2 while this one is
 * computed: two contiguous regions (x rows, dy rows), a line per pixel
 * step of each tile. */
typedef struct cf_pf {
    const char *a, *b;
    int na, nb;
} cf_pf;

/* The next n (<= want) lines of the stream; *pf advanced past them. */
static INLINE const char *pf_take(cf_pf *s, int want, int *n)
{
    if (s->na == 0 && s->nb) s->a = s->b, s->na = s->nb, s->nb = 0;
    *n = s->na < want ? s->na : want;
    const char *p = s->a;
    s->a += (size_t)64 * *n, s->na -= *n;
    return p;
}

/* dW rows [r, r + n) (n <= MR, within one segment; dw points at row r's
 * first channel) x NV vectors (+)= the pixels [p0, p0 + np) of one image;
 * base[] holds their window starts.
 * Prefetches the npf lines at pf, one per pixel. */
AVX512 static INLINE void dw_tile(int MR, int NV, float *dw, int K, int r, int n, int seg, int WpC,
                                  const float *pad, const size_t *base, const float *dy, int ldd,
                                  int np, const __mmask16 *mk, bool load, const char *pf, int npf)
{
    __m512 c[12][4];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            c[i][v] = load && i < n ? _mm512_maskz_loadu_ps(mk[v], dw + (size_t)i * K + 16 * v)
                                    : _mm512_setzero_ps();
    const int kh = r / seg, j = r - kh * seg;
    const float *a0 = pad + (size_t)kh * WpC + j;
    /* A full block of channels loads dy unmasked: the masked loads kept
     * their four masks on the stack, reloaded at every pixel (perf: the
     * stem's dw loop). The same values either way. */
    if (mk[NV - 1] == (__mmask16)0xffff)
        for (int q = 0; q < np; q++) {
            if (q < npf) _mm_prefetch(pf + (size_t)64 * q, _MM_HINT_T1);
            __m512 d[4];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) d[v] = _mm512_loadu_ps(dy + (size_t)q * ldd + 16 * v);
            const float *a = a0 + base[q];
#pragma GCC unroll 12
            for (int i = 0; i < MR; i++) {
                __m512 x = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) c[i][v] = _mm512_fmadd_ps(x, d[v], c[i][v]);
            }
        }
    else
        for (int q = 0; q < np; q++) {
            if (q < npf) _mm_prefetch(pf + (size_t)64 * q, _MM_HINT_T1);
            __m512 d[4];
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++)
                d[v] = _mm512_maskz_loadu_ps(mk[v], dy + (size_t)q * ldd + 16 * v);
            const float *a = a0 + base[q];
#pragma GCC unroll 12
            for (int i = 0; i < MR; i++) {
                __m512 x = _mm512_set1_ps(a[i]);
#pragma GCC unroll 4
                for (int v = 0; v < NV; v++) c[i][v] = _mm512_fmadd_ps(x, d[v], c[i][v]);
            }
        }
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        if (i >= n) break;
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(dw + (size_t)i * K + 16 * v, mk[v], c[i][v]);
    }
}

/* Rows [r0, r1) in tiles of MR rows that stay within a segment and a run;
 * a short tile at a segment's or run's end is split into tiles of 4, 2 and
 * 1 rows, so no window is read past its segment. Row r of the windows is
 * row (r / run) * run_ld + r % run of dw. */
AVX512 static INLINE void dw_rows(int MR, int NV, float *dw, int K, int r0, int r1, int seg,
                                  int WpC, const float *pad, const size_t *base, const float *dy,
                                  int ldd, int np, const __mmask16 *mk, bool load, cf_pf *pfs,
                                  int run, int run_ld)
{
    for (int r = r0; r < r1;) {
        int j = r % seg, n = seg - j, npf, u = r % run;
        if (n > r1 - r) n = r1 - r;
        if (n > run - u) n = run - u;
        float *dwr = dw + ((size_t)(r / run) * run_ld + u) * K;
        const char *pf = pf_take(pfs, np, &npf);
        if (n >= MR) {
            dw_tile(MR, NV, dwr, K, r, MR, seg, WpC, pad, base, dy, ldd, np, mk, load, pf, npf);
            r += MR;
        } else if (n >= 4) {
            dw_tile(4, NV, dwr, K, r, 4, seg, WpC, pad, base, dy, ldd, np, mk, load, pf, npf);
            r += 4;
        } else if (n >= 2) {
            dw_tile(2, NV, dwr, K, r, 2, seg, WpC, pad, base, dy, ldd, np, mk, load, pf, npf);
            r += 2;
        } else {
            dw_tile(1, NV, dwr, K, r, 1, seg, WpC, pad, base, dy, ldd, np, mk, load, pf, npf);
            r += 1;
        }
    }
}

AVX512 static void cf_dw_simd(float *dw, const float *pad, const nn_cf_geom *g, const float *dy,
                              int K, int kb0, int kb1, int r0, int r1, bool acc, int run,
                              int run_ld)
{
    const int P = g->nimg * g->OH * g->OW, nb = kb1 - kb0;
    /* dy's channel blocks of a pixel block, contiguous when K > 64 */
    static _Thread_local float dpk[CF_PB * CF_NB] __attribute__((aligned(64)));
    /* a dense layer's blocks prefetched when 128 or more pixels fit
     * CF_DENSE_BYTES (else dW would go through the caches too often) */
    const int by = CF_DENSE_BYTES / (4 * (g->seg + K));
    const bool dense = dense_geom(g) && by >= 128;
    int pb = dense && by < CF_PB ? by : CF_PB;
    if (dense && pb > CF_DENSE_PIXELS) pb = CF_DENSE_PIXELS;
    if (K > CF_NB && pb * nb > CF_PB) pb = CF_PB / nb;
    /* a 1x1 stride-1 layer: the next block's x and dy rows are two
     * contiguous regions, prefetched during this block */
    size_t base[CF_PB];
    for (int p0 = 0; p0 < P; p0 += pb) {
        int np = P - p0 < pb ? P - p0 : pb;
        cf_bases(base, p0, np, g);
        cf_pf pfs = {NULL, NULL, 0, 0};
        if (dense && p0 + np < P) {
            int nn = P - p0 - np < pb ? P - p0 - np : pb;
            pfs.a = (const char *)(pad + base[0] + (size_t)np * g->seg);
            pfs.na = (int)(((size_t)nn * g->seg * 4 + 63) / 64);
            pfs.b = (const char *)(dy + (size_t)(p0 + np) * K);
            pfs.nb = (int)(((size_t)nn * K * 4 + 63) / 64);
        }
        if (K > CF_NB) {
            /* rows K floats apart (8 KB for K = 2048) would share a few
             * cache sets; each dy row is read once, in order */
            const float *d = dy + (size_t)p0 * K + kb0 * CF_NB;
            for (int q = 0; q < np; q++) {
                if (q + CF_PF_ROWS < np)
                    for (int v = 0; v < 4 * nb; v++)
                        _mm_prefetch((const char *)(d + (size_t)(q + CF_PF_ROWS) * K + 16 * v),
                                     _MM_HINT_T0);
                for (int b = 0; b < nb; b++) {
                    int left = K - (kb0 + b) * CF_NB;
                    float *o = dpk + ((size_t)b * np + q) * CF_NB;
                    const float *i = d + (size_t)q * K + b * CF_NB;
                    for (int v = 0; v < 4; v++) {
                        int l = left - 16 * v;
                        __mmask16 m = l >= 16 ? (__mmask16)0xffff
                                      : l > 0 ? (__mmask16)((1u << l) - 1)
                                              : 0;
                        _mm512_store_ps(o + 16 * v, _mm512_maskz_loadu_ps(m, i + 16 * v));
                    }
                }
            }
        }
        for (int kb = kb0; kb < kb1; kb++) {
            const int k0 = kb * CF_NB, nk = K - k0 < CF_NB ? K - k0 : CF_NB, NV = (nk + 15) / 16;
            __mmask16 mk[4];
            for (int v = 0; v < 4; v++) {
                int left = nk - 16 * v;
                mk[v] = left >= 16 ? (__mmask16)0xffff
                        : left > 0 ? (__mmask16)((1u << left) - 1)
                                   : 0;
            }
            const float *d = dy + (size_t)p0 * K + k0;
            int ldd = K;
            if (K > CF_NB) d = dpk + (size_t)(kb - kb0) * np * CF_NB, ldd = CF_NB;
            bool load = acc || p0 > 0;
            float *w = dw + k0;
            switch (NV) {
            case 4:
                dw_rows(6, 4, w, K, r0, r1, g->seg, g->WpC, pad, base, d, ldd, np, mk, load, &pfs,
                        run, run_ld);
                break;
            case 3:
                dw_rows(8, 3, w, K, r0, r1, g->seg, g->WpC, pad, base, d, ldd, np, mk, load, &pfs,
                        run, run_ld);
                break;
            default:
                dw_rows(12, 2, w, K, r0, r1, g->seg, g->WpC, pad, base, d, ldd, np, mk, load, &pfs,
                        run, run_ld);
            }
        }
    }
}
#endif

void nn_cf_forward(float *out, const float *pad, const nn_cf_geom *g, const float *wp, int K,
                   int kb, const float *bias, bool relu, bool acc)
{
#if CF_X86
    cf_forward_simd(out, pad, g, wp, K, kb, bias, relu, acc);
#else
    (void)out, (void)pad, (void)g, (void)wp, (void)K, (void)kb, (void)bias, (void)relu, (void)acc;
#endif
}

void nn_cf_dw_runs(float *dw, const float *pad, const nn_cf_geom *g, const float *dy, int K,
                   int kb0, int kb1, int r0, int r1, bool acc, int run, int run_ld)
{
#if CF_X86
    cf_dw_simd(dw, pad, g, dy, K, kb0, kb1, r0, r1, acc, run, run_ld);
#else
    (void)dw, (void)pad, (void)g, (void)dy, (void)K, (void)kb0, (void)kb1, (void)r0, (void)r1,
        (void)acc, (void)run, (void)run_ld;
#endif
}

void nn_cf_dw(float *dw, const float *pad, const nn_cf_geom *g, const float *dy, int K, int kb0,
              int kb1, int r0, int r1, bool acc)
{
    const int R = g->KH * g->seg;
    nn_cf_dw_runs(dw, pad, g, dy, K, kb0, kb1, r0, r1, acc, R, R);
}
