/* resize.c - area-average shrinking and bilinear growing of uint8 images. */
#include "data-tools/resize.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>

#include "pstrain/common.h"

/* The source taps of each output coordinate along one axis: output i reads
 * source pixels first[i] .. first[i]+count[i]-1 with weights
 * w[i*maxtaps + k], which sum to 1. */
typedef struct axis_taps {
    int maxtaps;
    int *first, *count;
    double *w;
} axis_taps;

static void taps_free(axis_taps *t)
{
    free(t->first);
    free(t->count);
    free(t->w);
}

static void taps_init(axis_taps *t, int src, int dst)
{
    /* Area: an output interval is src/dst source pixels long, so it touches
     * at most ceil(src/dst) + 1 of them. Bilinear: 2. */
    t->maxtaps = dst <= src ? (src + dst - 1) / dst + 1 : 2;
    t->first = pst_malloc(sizeof(int) * (size_t)dst);
    t->count = pst_malloc(sizeof(int) * (size_t)dst);
    t->w = pst_calloc((size_t)dst * (size_t)t->maxtaps, sizeof(double));
    for (int i = 0; i < dst; i++) {
        double *w = t->w + (size_t)i * (size_t)t->maxtaps;
        if (dst <= src) {
            /* Exact coverage in units of 1/dst of a source pixel: output i
             * spans [i*src, (i+1)*src), source j spans [j*dst, (j+1)*dst). */
            int64_t lo = (int64_t)i * src, hi = lo + src;
            int j0 = (int)(lo / dst), j1 = (int)((hi + dst - 1) / dst); /* [j0, j1) */
            t->first[i] = j0;
            t->count[i] = j1 - j0;
            assert(j1 - j0 <= t->maxtaps);
            for (int j = j0; j < j1; j++) {
                int64_t a = PST_MAX(lo, (int64_t)j * dst), b = PST_MIN(hi, (int64_t)(j + 1) * dst);
                w[j - j0] = (double)(b - a) / (double)src;
            }
        } else {
            double x = ((double)i + 0.5) * (double)src / (double)dst - 0.5;
            x = PST_MIN(PST_MAX(x, 0.0), (double)(src - 1));
            int j0 = (int)floor(x);
            double f = x - (double)j0;
            t->first[i] = j0;
            if (j0 >= src - 1 || f == 0.0) {
                t->count[i] = 1;
                w[0] = 1.0;
            } else {
                t->count[i] = 2;
                w[0] = 1.0 - f;
                w[1] = f;
            }
        }
    }
}

static uint8_t round_u8(double v)
{
    /* Round half up; v >= 0 (non-negative weights), so truncation is floor.
     * The tolerance keeps an exact .5 that double weights represent as
     * .4999999... on the same side. */
    double r = v + 0.5 + 1e-9;
    return (uint8_t)(r >= 255.0 ? 255 : (int)r);
}

void resize_u8(const uint8_t *src, int sh, int sw, int c, uint8_t *dst, int dh, int dw)
{
    assert(src && dst && sh > 0 && sw > 0 && c > 0 && dh > 0 && dw > 0);
    axis_taps ty, tx;
    taps_init(&ty, sh, dh);
    taps_init(&tx, sw, dw);
    /* tmp: sh x dw x c, the rows resized horizontally; srow: one source row
     * as double; acc: one output row being accumulated. */
    size_t srow_n = (size_t)sw * (size_t)c, trow = (size_t)dw * (size_t)c;
    double *tmp = pst_malloc(sizeof(double) * ((size_t)sh * trow + srow_n + trow));
    double *srow = tmp + (size_t)sh * trow, *acc = srow + srow_n;
    for (int y = 0; y < sh; y++) {
        const uint8_t *in = src + (size_t)y * srow_n;
        for (size_t i = 0; i < srow_n; i++) srow[i] = in[i];
        double *out = tmp + (size_t)y * trow;
        for (int x = 0; x < dw; x++) {
            const double *w = tx.w + (size_t)x * (size_t)tx.maxtaps;
            const double *s0 = srow + (size_t)tx.first[x] * (size_t)c;
            double *o = out + (size_t)x * (size_t)c;
            for (int k = 0; k < c; k++) o[k] = 0;
            for (int t = 0; t < tx.count[x]; t++)
                for (int k = 0; k < c; k++) o[k] += w[t] * s0[(size_t)t * (size_t)c + (size_t)k];
        }
    }
    for (int y = 0; y < dh; y++) {
        const double *w = ty.w + (size_t)y * (size_t)ty.maxtaps;
        for (size_t i = 0; i < trow; i++) acc[i] = 0;
        for (int t = 0; t < ty.count[y]; t++) {
            const double *row = tmp + (size_t)(ty.first[y] + t) * trow, wt = w[t];
            for (size_t i = 0; i < trow; i++) acc[i] += wt * row[i];
        }
        uint8_t *out = dst + (size_t)y * trow;
        for (size_t i = 0; i < trow; i++) out[i] = round_u8(acc[i]);
    }
    free(tmp);
    taps_free(&ty);
    taps_free(&tx);
}
