/*
 * bench_h5ds.c - read throughput of a data set through h5ds (prints numbers;
 * not a test): whole chunks in file order, whole chunks in a shuffled order
 * (what the input pipeline does each epoch), and single images at random
 * positions (served by h5ds's chunk cache). Encoded data sets are read
 * with h5ds_read_encoded (the JPEG bytes, not decoded) in runs of
 * chunk_images examples; MB/s then counts encoded bytes.
 *
 *   bench_h5ds FILE.h5 [--split train] [--random N]
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "pstrain/common.h"
#include "pstrain/h5ds.h"

typedef struct reader {
    h5ds *ds;
    const char *split;
    bool enc;
    size_t img;   /* pixels: bytes per image */
    int64_t *off; /* encoded: count+1 offsets */
    uint8_t *buf;
    size_t cap;
    int32_t *lab;
} reader;

/* Reads [first, first+cnt); returns the bytes read or -1. */
static int64_t read_some(reader *r, int64_t first, int64_t cnt, pst_err *e)
{
    if (!r->enc) {
        if (h5ds_read(r->ds, r->split, first, cnt, r->buf, r->lab, e) < 0) return -1;
        return cnt * (int64_t)r->img;
    }
    if (h5ds_read_encoded(r->ds, r->split, first, cnt, r->off, NULL, 0, NULL, NULL, NULL, e) < 0)
        return -1;
    if ((size_t)r->off[cnt] > r->cap) {
        free(r->buf);
        r->cap = (size_t)r->off[cnt];
        r->buf = pst_malloc(r->cap);
    }
    if (h5ds_read_encoded(r->ds, r->split, first, cnt, r->off, r->buf, r->cap, r->lab, NULL, NULL,
                          e) < 0)
        return -1;
    return r->off[cnt];
}

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *split = "train";
    int64_t nrandom = 20000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--split") && i + 1 < argc)
            split = argv[++i];
        else if (!strcmp(argv[i], "--random") && i + 1 < argc)
            nrandom = atoll(argv[++i]);
        else
            path = argv[i];
    }
    if (!path) {
        fprintf(stderr, "usage: bench_h5ds FILE.h5 [--split train] [--random N]\n");
        return 2;
    }
    h5ds ds;
    pst_err e;
    double t = pst_now();
    if (h5ds_open(&ds, path, &e) < 0) {
        fprintf(stderr, "bench_h5ds: %s\n", e.msg);
        return 1;
    }
    printf("h5ds_open (verify included): %.3f s\n", pst_now() - t);
    const h5ds_split *sp = h5ds_find_split(&ds, split);
    if (!sp) {
        fprintf(stderr, "bench_h5ds: no split %s\n", split);
        return 1;
    }
    size_t img = (size_t)ds.height * (size_t)ds.width * (size_t)ds.channels;
    int64_t n = sp->count, chunk = sp->chunk_images, nchunks = (n + chunk - 1) / chunk;
    reader rd = {.ds = &ds, .split = split, .enc = ds.storage == H5DS_STORE_ENCODED, .img = img};
    rd.cap = rd.enc ? 0 : (size_t)chunk * img;
    rd.buf = rd.enc ? NULL : pst_malloc(rd.cap);
    rd.lab = pst_malloc((size_t)chunk * sizeof *rd.lab);
    rd.off = pst_malloc((size_t)(chunk + 1) * sizeof *rd.off);
    if (rd.enc)
        printf("encoded storage: %lld bytes, chunks of %lld bytes, runs of %lld images\n",
               (long long)sp->encoded_bytes, (long long)sp->encoded_chunk_bytes, (long long)chunk);
    int64_t *order = pst_malloc((size_t)nchunks * sizeof *order);
    uint64_t seed = 42, checksum = 0;
    for (int64_t i = 0; i < nchunks; i++) order[i] = i;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1)
            for (int64_t i = nchunks - 1; i > 0; i--) {
                int64_t j = (int64_t)(rng_next(&seed) % (uint64_t)(i + 1)), tmp = order[i];
                order[i] = order[j];
                order[j] = tmp;
            }
        t = pst_now();
        double bytes = 0;
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t first = order[c] * chunk, cnt = PST_MIN(chunk, n - first);
            int64_t got = read_some(&rd, first, cnt, &e);
            if (got < 0) {
                fprintf(stderr, "bench_h5ds: %s\n", e.msg);
                return 1;
            }
            bytes += (double)got;
            checksum += rd.buf[0] + (uint64_t)rd.lab[0];
        }
        double s = pst_now() - t;
        printf("whole chunks, %-9s %lld images in %.3f s: %.0f images/s, %.0f MB/s\n",
               pass ? "shuffled:" : "in order:", (long long)n, s, (double)n / s, bytes / s / 1e6);
    }
    t = pst_now();
    for (int64_t i = 0; i < nrandom; i++) {
        int64_t at = (int64_t)(rng_next(&seed) % (uint64_t)n);
        if (read_some(&rd, at, 1, &e) < 0) {
            fprintf(stderr, "bench_h5ds: %s\n", e.msg);
            return 1;
        }
        checksum += rd.buf[0];
    }
    double s = pst_now() - t;
    printf("single images at random:  %lld reads in %.3f s: %.0f images/s (%.1f us each)\n",
           (long long)nrandom, s, (double)nrandom / s, 1e6 * s / (double)nrandom);
    printf("(checksum %llu)\n", (unsigned long long)checksum);
    free(rd.buf);
    free(rd.lab);
    free(rd.off);
    free(order);
    h5ds_close(&ds);
    return 0;
}
